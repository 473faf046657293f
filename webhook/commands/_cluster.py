"""The cluster a read-only command looks at: `--state DIR`, or a one-shot LIST of a live
cluster through `--kubeconfig FILE` (nothing is written, no watch is kept open)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from quota.errors import DraquotaError
from quota.settings import Settings
from quota.usage import Usage
from webhook.clusterstate import ClusterState

__all__ = ["ClusterUnavailable", "live_snapshot", "memory_usage"]

PAGE = 500


class ClusterUnavailable(DraquotaError):
    """The live cluster cannot be read: bad kubeconfig, refused connection, no permission."""


class _Snapshot:
    """What ClusterLedger needs of a backend: a synced, read-only cluster view."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def ready(self) -> tuple[bool, str]:
        return True, ""


def memory_usage(state: ClusterState, settings: Settings) -> Usage:
    """Usage of the live pods of a `--state` view (what `serve --state` starts from)."""
    from webhook.backend import MemoryLedger

    return MemoryLedger(state, settings).usage()


def _client(kubeconfig: Path) -> Any:
    from certs.kube import api_client
    from webhook.kube.client import KubeClient

    if not kubeconfig.is_file():
        raise ClusterUnavailable(f"kubeconfig {kubeconfig}: no such file")
    try:
        return KubeClient(api_client(kubeconfig))
    except Exception as exc:  # the kubernetes client's config errors have no common base
        raise ClusterUnavailable(f"kubeconfig {kubeconfig}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def live_snapshot(kubeconfig: Path, settings: Settings) -> tuple[ClusterState, Callable[[], Usage]]:
    """Every object the decisions read, listed once, and the usage the webhook would see
    (live pods plus the reservations recorded in QuotaLedgers)."""
    from webhook.kube.client import ApiError, TransportError
    from webhook.kube.ledger import ClusterLedger
    from webhook.kube.resources import discover_dra_version, watched_resources

    client = _client(kubeconfig)
    server = client.api_client.configuration.host
    state = ClusterState()
    try:
        version = discover_dra_version(client)
        if version is None:
            raise ClusterUnavailable(f"{server}: resource.k8s.io is not served (DRA disabled)")
        for resource in watched_resources(version):
            query: list[tuple[str, Any]] = [("limit", PAGE)]
            while True:
                page = client.request("GET", resource.path(), query)
                for obj in page.get("items") or ():
                    obj.setdefault("kind", resource.kind)
                    obj.setdefault("apiVersion", resource.api_version)
                    state.upsert(obj)
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
                query = [("limit", PAGE), ("continue", token)]
    except ApiError as exc:
        raise ClusterUnavailable(f"{server}: {_one_line(exc)}") from None
    except TransportError as exc:
        raise ClusterUnavailable(
            f"{server}: cannot reach the API server: {_one_line(exc)}"
        ) from None
    ledger = ClusterLedger(client, _Snapshot(state), settings)
    return state, ledger.usage
