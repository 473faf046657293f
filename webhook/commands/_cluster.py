"""The cluster a read-only command looks at: `--state DIR`, or a one-shot LIST of a live
cluster through a kubeconfig (nothing is written, no watch is kept open).

Permission decides the scope. An admin lists every object the decisions read at cluster
scope, as the webhook does (`scope == CLUSTER`). A namespace user (the built-in `edit`
role: pods, Jobs, Events and LocalQueues of their namespace, nothing cluster-scoped) is
refused that LIST with 403; a command that can work with one namespace then lists that
namespace only (`scope == NAMESPACE`) instead of failing.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from quota.charge import Charge
from quota.cluster import Obj
from quota.errors import DraquotaError
from quota.settings import Settings
from quota.usage import Usage
from quota.waitreport import PENDING, PENDING_EVENTS
from webhook.commands._kubeconfig import KubeConfig, find_kubeconfig, load_kubeconfig
from webhook.store.clusterstate import ClusterState

__all__ = [
    "CLUSTER",
    "NAMESPACE",
    "ClusterUnavailable",
    "Forbidden",
    "Snapshot",
    "cluster_config",
    "memory_usage",
    "read_cluster",
]

CLUSTER = "cluster"
NAMESPACE = "namespace"
# What a namespace user reads: the namespaced objects the built-in `edit` role lets them list.
NAMESPACE_KINDS = ("Pod", "Job", "LocalQueue", "ResourceClaim", "ResourceClaimTemplate")


class ClusterUnavailable(DraquotaError):
    """The live cluster cannot be read: bad kubeconfig, refused connection, no permission."""


class Forbidden(ClusterUnavailable):
    """The API server refused a LIST (403): the kubeconfig's user lacks the permission."""


@dataclass
class Snapshot:
    """One read of a live cluster. `usage` and `records` (admission records by UID) are what
    the webhook would see; both are empty at namespace scope, where they cannot be read."""

    state: ClusterState
    scope: str
    server: str
    usage: Usage = field(default_factory=Usage)
    records: dict[str, Charge] = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)


class _Snapshot:
    """What ClusterLedger needs of a backend: a synced, read-only cluster view."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def ready(self) -> tuple[bool, str]:
        return True, ""


def memory_usage(state: ClusterState, settings: Settings) -> Usage:
    """Usage of the live pods of a `--state` view (what `serve --state` starts from)."""
    from webhook.ledger.memory import MemoryLedger

    return MemoryLedger(state, settings).usage()


def cluster_config(args: argparse.Namespace, required: bool) -> KubeConfig | None:
    """The kubeconfig of a command's live cluster: none with `--state`; else as kubectl finds
    it (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`). ClusterUnavailable when `required`
    and there is none."""
    if getattr(args, "state", None) is not None:
        if getattr(args, "kubeconfig", None) is not None:
            raise ClusterUnavailable("--kubeconfig: cannot be used with --state")
        return None
    found = find_kubeconfig(getattr(args, "kubeconfig", None))
    if found is None:
        if required:
            raise ClusterUnavailable(
                "no cluster: give --state DIR or --kubeconfig FILE "
                "(no $KUBECONFIG, no ~/.kube/config)"
            )
        return None
    return load_kubeconfig(*found)


def _client(config: KubeConfig) -> Any:
    from certs.kube import ClusterAccessError, api_client
    from webhook.kube.client import KubeClient

    try:
        return KubeClient(api_client(config.path))
    except ClusterAccessError as exc:
        raise ClusterUnavailable(str(exc)) from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def read_cluster(
    config: KubeConfig,
    settings: Settings,
    namespace: str | None = None,
    kinds: Collection[str] | None = None,
    job_events: bool = False,
) -> Snapshot:
    """Every object of `kinds` (default: all the decisions read) at cluster scope, and the
    usage the webhook would see; when that is forbidden and `namespace` is given, the
    namespaced ones of `namespace` only. `job_events`: the `Pending` Events of Jobs too (of
    `namespace`, or of every namespace when it is None), where a waiting Job's reason is."""
    from webhook.kube.client import ApiError, TransportError
    from webhook.kube.resources import discover_dra_version, watched_resources

    client = _client(config)
    server = client.api_client.configuration.host
    try:
        version = discover_dra_version(client)
        if version is None:
            raise ClusterUnavailable(f"{server}: resource.k8s.io is not served (DRA disabled)")
        wanted = [r for r in watched_resources(version) if kinds is None or r.kind in kinds]
        try:
            snapshot = _cluster_scope(client, server, wanted, settings)
        except ApiError as exc:
            if exc.code != 403 or namespace is None:
                raise
            namespaced = [r for r in wanted if r.kind in NAMESPACE_KINDS]
            snapshot = _namespace_scope(client, server, namespaced, namespace)
        if job_events:
            snapshot.events = _pending_job_events(client, namespace)
    except ApiError as exc:
        error = Forbidden if exc.code == 403 else ClusterUnavailable
        raise error(f"{server}: {_one_line(exc)}") from None
    except TransportError as exc:
        raise ClusterUnavailable(
            f"{server}: cannot reach the API server: {_one_line(exc)}"
        ) from None
    return snapshot


def _cluster_scope(client: Any, server: str, wanted: list[Any], settings: Settings) -> Snapshot:
    from webhook.kube.resources import list_objects
    from webhook.ledger.cluster import ClusterLedger

    state = ClusterState()
    for resource in wanted:
        for obj in list_objects(client, resource):
            state.upsert(obj)
    snapshot = Snapshot(state, CLUSTER, server)
    if any(r.kind == "QuotaLedger" for r in wanted):
        ledger = ClusterLedger(client, _Snapshot(state), settings)
        snapshot.usage, snapshot.records = ledger.usage(), ledger.records()
    return snapshot


def _namespace_scope(client: Any, server: str, wanted: list[Any], namespace: str) -> Snapshot:
    from webhook.kube.resources import list_objects

    state = ClusterState()
    for resource in wanted:
        for obj in list_objects(client, resource, namespace):
            state.upsert(obj)
    return Snapshot(state, NAMESPACE, server)


def _pending_job_events(client: Any, namespace: str | None) -> list[Obj]:
    from webhook.kube.resources import EVENT, list_objects

    selector = ("fieldSelector", f"involvedObject.kind=Job,{PENDING_EVENTS}")
    events = list_objects(client, EVENT, namespace, [selector])
    return [
        e
        for e in events
        if e.get("reason") == PENDING and (e.get("involvedObject") or {}).get("kind") == "Job"
    ]
