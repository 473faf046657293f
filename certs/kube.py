"""The `kubernetes` side: an API client (kubeconfig or in-cluster) and the in-cluster rotator."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from certs.inject import MUTATING, VALIDATING, KubeAdmissionClient, WebhookInjector
from certs.rotation import Rotator
from certs.secret import SecretStore
from certs.serving import ServingSpec

__all__ = [
    "SERVICE_ACCOUNT_NAMESPACE",
    "ClusterAccessError",
    "api_client",
    "describe_api_error",
    "in_cluster_rotator",
    "pod_namespace",
]

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ClusterAccessError(Exception):
    """The cluster cannot be used: a bad kubeconfig, no in-cluster config, or an API error.

    The message is one line meant for a person, location first.
    """


def _one_line(text: str) -> str:
    return " ".join(text.split())


def api_client(kubeconfig: Path | None = None, in_cluster: bool = False) -> Any:
    """An ApiClient for `kubeconfig`, or for the pod's service account when `in_cluster`.

    ClusterAccessError when the configuration cannot be loaded.
    """
    from kubernetes import client, config

    if in_cluster:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise ClusterAccessError(
                f"--in-cluster: not running in a pod with a service account: {str(exc).rstrip('.')}"
            ) from None
        return client.ApiClient()
    where = f"kubeconfig {kubeconfig}" if kubeconfig else "default kubeconfig"
    if kubeconfig is not None and not kubeconfig.is_file():
        raise ClusterAccessError(f"{where}: no such file")
    try:
        file = str(kubeconfig) if kubeconfig else None
        return config.new_client_from_config(config_file=file)  # type: ignore[no-untyped-call]
    except Exception as exc:  # ConfigException, YAML errors, missing keys: no common base
        raise ClusterAccessError(f"{where}: {_one_line(str(exc)) or type(exc).__name__}") from None


def describe_api_error(exc: BaseException, server: str) -> str | None:
    """One line for an error raised while talking to the API server, None if it is not one."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        reason = exc.reason or ""
        return f"{server}: {exc.status} {reason}".rstrip()
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        text = _one_line(str(exc))
        match = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
        cause = match.group(1).strip().lower() if match else text
        return f"{server}: cannot reach the API server: {cause}"
    return None


def pod_namespace(default: str = "draquota-system") -> str:
    """POD_NAMESPACE (downward API), else the service account's namespace, else `default`."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or default
    except OSError:
        return default


def in_cluster_rotator(
    client: Any,
    namespace: str | None = None,
    service: str = "draquota",
    secret: str = "draquota-tls",
    webhook_configuration: str = "draquota",
    interval: float = 60.0,
) -> Rotator:
    """The rotator `draquota serve --in-cluster` runs: renews the Secret `secret` (mounted at
    --cert-dir, so the kubelet refreshes the files the server reloads) and keeps the caBundle
    of both webhook configurations named `webhook_configuration` current."""
    from kubernetes.client import CoreV1Api

    ns = namespace or pod_namespace()
    return Rotator(
        store=SecretStore(CoreV1Api(client), ns, secret),
        spec=ServingSpec(service=service, namespace=ns),
        publisher=WebhookInjector(
            KubeAdmissionClient(client),
            ((MUTATING, webhook_configuration), (VALIDATING, webhook_configuration)),
        ),
        interval=interval,
    )
