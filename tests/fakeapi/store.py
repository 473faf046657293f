"""The object store behind the fake API server: etcd-like resourceVersions and a watch log.

One global, strictly increasing resourceVersion; every write appends an event to a
history that watches replay from. `compact()` forgets the history, so a watch or a
list continuation from an older resourceVersion gets 410 Gone, as from a real
API server after etcd compaction.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import threading
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["RESOURCES", "ApiError", "Event", "Resource", "Store"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    group: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}" if self.group else self.plural


RESOURCES = (
    Resource("", "pods", "Pod", True),
    Resource("batch", "jobs", "Job", True),
    Resource("scheduling.k8s.io", "priorityclasses", "PriorityClass", False),
    Resource("", "nodes", "Node", False),
    Resource("", "namespaces", "Namespace", False),
    Resource("resource.k8s.io", "resourceclaims", "ResourceClaim", True),
    Resource("resource.k8s.io", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Resource("resource.k8s.io", "deviceclasses", "DeviceClass", False),
    Resource("resource.k8s.io", "resourceslices", "ResourceSlice", False),
    Resource("draquota.io", "clusterqueues", "ClusterQueue", False),
    Resource("draquota.io", "localqueues", "LocalQueue", True),
    Resource("draquota.io", "resourceflavors", "ResourceFlavor", False),
    Resource("draquota.io", "quotaledgers", "QuotaLedger", False),
    Resource("coordination.k8s.io", "leases", "Lease", True),
    Resource("", "events", "Event", True),
)


class ApiError(Exception):
    """An error the API answers with a Status object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass(frozen=True)
class Event:
    rv: int
    resource: str
    type: str
    obj: Obj

    @property
    def namespace(self) -> str | None:
        return self.obj["metadata"].get("namespace")


class Store:
    """Objects by resource key and (namespace, name), with a replayable event log."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rv = 1
        self.compacted = 0
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {r.key: {} for r in RESOURCES}
        self._history: list[Event] = []
        self._suffix = itertools.count(1)

    def _bump(self, resource: str, kind: str, obj: Obj) -> Obj:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._history.append(Event(self.rv, resource, kind, copy.deepcopy(obj)))
        self.cond.notify_all()
        return obj

    def compact(self) -> None:
        """Forget the event log: older resourceVersions now answer 410 Gone."""
        with self.cond:
            self.compacted = self.rv
            self._history.clear()

    def list(self, res: Resource, namespace: str | None) -> tuple[list[Obj], int]:
        with self.cond:
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._objects[res.key].items())
                if namespace is None or ns == namespace
            ]
            return items, self.rv

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        namespace = namespace if res.namespaced else ""  # cluster-scoped: one key
        with self.cond:
            obj = self._objects[res.key].get((namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
            return copy.deepcopy(obj)

    def create(self, res: Resource, namespace: str, body: Obj) -> Obj:
        namespace = namespace if res.namespaced else ""  # cluster-scoped: one key
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._suffix):05d}"
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if res.namespaced:
            meta["namespace"] = namespace
        with self.cond:
            if (namespace, name) in self._objects[res.key]:
                raise ApiError(409, "AlreadyExists", f'{res.plural} "{name}" already exists')
            # The real API server makes the uid before it calls admission webhooks; a test that
            # plays that part passes the uid its webhook saw, and the store keeps it.
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            self._objects[res.key][(namespace, name)] = obj
            return copy.deepcopy(self._bump(res.key, "ADDED", obj))

    def update(
        self, res: Resource, namespace: str, name: str, body: Obj, status_only: bool = False
    ) -> Obj:
        """PUT; with `status_only` (the /status subresource) only `status` changes."""
        namespace = namespace if res.namespaced else ""  # cluster-scoped: one key
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        with self.cond:
            current = self._objects[res.key].get((namespace, name))
            if status_only and current is not None:
                obj = {**copy.deepcopy(current), "status": obj.get("status") or {}}
                obj["metadata"]["resourceVersion"] = meta.get("resourceVersion")
                meta = obj["metadata"]
            if current is None:
                raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
            wanted = meta.get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.plural} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try again",
                )
            meta["name"] = name
            meta["uid"] = current["metadata"]["uid"]
            meta["creationTimestamp"] = current["metadata"]["creationTimestamp"]
            if res.namespaced:
                meta["namespace"] = namespace
            self._objects[res.key][(namespace, name)] = obj
            return copy.deepcopy(self._bump(res.key, "MODIFIED", obj))

    def delete(
        self, res: Resource, namespace: str, name: str, resource_version: str | None = None
    ) -> Obj:
        """DELETE; with `resource_version` (a precondition) only that version, else 409."""
        namespace = namespace if res.namespaced else ""  # cluster-scoped: one key
        with self.cond:
            current = self._objects[res.key].get((namespace, name))
            if current is None:
                raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
            if resource_version and resource_version != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.plural} "{name}": Precondition '
                    f"failed: ResourceVersion in precondition: {resource_version}, "
                    f"ResourceVersion in object meta: {current['metadata']['resourceVersion']}",
                )
            obj = self._objects[res.key].pop((namespace, name))
            return copy.deepcopy(self._bump(res.key, "DELETED", obj))

    def events_after(self, rv: int, res: Resource, namespace: str | None) -> list[Event]:
        """Events of a resource newer than rv; ApiError 410 when rv was compacted away."""
        if rv < self.compacted:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.compacted})")
        start = bisect.bisect_right(self._history, rv, key=lambda e: e.rv)
        return [
            e
            for e in self._history[start:]
            if e.resource == res.key and (namespace is None or e.namespace == namespace)
        ]
