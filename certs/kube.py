"""The `kubernetes` side: an API client (kubeconfig or in-cluster) and the in-cluster rotator."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from certs.inject import MUTATING, VALIDATING, KubeAdmissionClient, WebhookInjector
from certs.rotation import Rotator
from certs.secret import SecretStore
from certs.serving import ServingSpec

__all__ = ["SERVICE_ACCOUNT_NAMESPACE", "api_client", "in_cluster_rotator", "pod_namespace"]

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def api_client(kubeconfig: Path | None = None, in_cluster: bool = False) -> Any:
    """An ApiClient for `kubeconfig`, or for the pod's service account when `in_cluster`."""
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    return config.new_client_from_config(config_file=str(kubeconfig) if kubeconfig else None)


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
