"""Which resources the webhook watches, where they live, and which DRA version is served."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.kube.client import ApiError, KubeClient

__all__ = [
    "DRA_GROUP",
    "DRA_VERSIONS",
    "EVENT",
    "JOB",
    "LOCAL_QUEUE",
    "POD",
    "QUOTA_GROUP",
    "QUOTA_LEDGER",
    "ResourceType",
    "discover_dra_version",
    "list_objects",
    "watched_resources",
]

DRA_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
QUOTA_GROUP = "draquota.io"
QUOTA_VERSION = "v1beta1"


@dataclass(frozen=True)
class ResourceType:
    """One API resource: `kind` as the cache indexes it, `plural` as the URL names it."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection path (all namespaces when namespace is None) or one object's path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base = f"{base}/namespaces/{namespace}"
        path = f"{base}/{self.plural}"
        return f"{path}/{name}" if name is not None else path


QUOTA_LEDGER = ResourceType("QuotaLedger", QUOTA_GROUP, QUOTA_VERSION, "quotaledgers", False)
LOCAL_QUEUE = ResourceType("LocalQueue", QUOTA_GROUP, QUOTA_VERSION, "localqueues", True)
POD = ResourceType("Pod", "", "v1", "pods", True)
JOB = ResourceType("Job", "batch", "v1", "jobs", True)
EVENT = ResourceType("Event", "", "v1", "events", True)
PAGE = 500  # objects per page of a one-shot LIST


def list_objects(
    client: KubeClient,
    resource: ResourceType,
    namespace: str | None = None,
    query: Sequence[tuple[str, Any]] = (),
) -> Iterator[dict[str, Any]]:
    """Every object of a one-shot LIST (all namespaces when `namespace` is None), page by
    page, each with its `kind` and `apiVersion` (built-in lists leave them out of items)."""
    params: list[tuple[str, Any]] = [("limit", PAGE), *query]
    while True:
        answer = client.request("GET", resource.path(namespace), params)
        for obj in answer.get("items") or ():
            obj.setdefault("kind", resource.kind)
            obj.setdefault("apiVersion", resource.api_version)
            yield obj
        token = (answer.get("metadata") or {}).get("continue")
        if not token:
            return
        params = [("limit", PAGE), *query, ("continue", token)]


def discover_dra_version(client: KubeClient) -> str | None:
    """The newest served resource.k8s.io version we support (v1, else v1beta2, else v1beta1).

    None when the group is not served at all (DRA disabled); transport errors propagate.
    """
    try:
        group = client.request("GET", f"/apis/{DRA_GROUP}")
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    served = {v.get("version") for v in group.get("versions") or () if isinstance(v, dict)}
    return next((v for v in DRA_VERSIONS if v in served), None)


def watched_resources(dra_version: str) -> tuple[ResourceType, ...]:
    """Every resource the decisions read, with DRA kinds at the discovered version."""
    dra = [
        ("ResourceClaim", "resourceclaims", True),
        ("ResourceClaimTemplate", "resourceclaimtemplates", True),
        ("DeviceClass", "deviceclasses", False),
        ("ResourceSlice", "resourceslices", False),
    ]
    quota = [
        ("ClusterQueue", "clusterqueues", False),
        ("LocalQueue", "localqueues", True),
        ("ResourceFlavor", "resourceflavors", False),
    ]
    return (
        POD,
        JOB,
        ResourceType("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False),
        ResourceType("Node", "", "v1", "nodes", False),
        ResourceType("Namespace", "", "v1", "namespaces", False),
        *(ResourceType(k, DRA_GROUP, dra_version, p, n) for k, p, n in dra),
        *(ResourceType(k, QUOTA_GROUP, QUOTA_VERSION, p, n) for k, p, n in quota),
        QUOTA_LEDGER,
    )
