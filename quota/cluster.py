"""The cluster view: every object the decisions read, indexed by kind/namespace/name.

A plain in-memory index with no I/O. The embedded `--state DIR` mode fills it
from files; the webhook's informers keep it current from the API server. Each
kind has a revision counter so that derived indexes (pools, queue tables) can be
cached and rebuilt only when their inputs changed.
"""

from __future__ import annotations

import builtins
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

from quota.errors import InvalidObject

__all__ = ["CLUSTER_SCOPED", "JOURNAL_LENGTH", "ClusterState", "Obj", "meta_of"]

Obj = Mapping[str, Any]

CLUSTER_SCOPED = frozenset(
    {
        "DeviceClass",
        "ResourceSlice",
        "Node",
        "Namespace",
        "ClusterQueue",
        "ResourceFlavor",
        "DeviceTaintRule",
        "QuotaLedger",
    }
)


# How many recent upserts/removals per kind `changed_since` can report.
JOURNAL_LENGTH = 4096

# Kinds whose status no decision reads: a change of status (or of server-kept metadata) alone
# replaces the object without a new revision, so draquota's own ClusterQueue status writes
# never make every pod's charge be recomputed.
STATUS_BLIND = frozenset({"ClusterQueue", "LocalQueue", "ResourceFlavor"})
_SERVER_METADATA = ("resourceVersion", "managedFields", "generation")


def _decided_part(obj: Obj) -> tuple[Any, Any]:
    metadata = obj.get("metadata")
    kept = (
        {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        if isinstance(metadata, Mapping)
        else metadata
    )
    return kept, {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def meta_of(obj: Obj) -> tuple[str, str | None, str]:
    """(kind, namespace, name) of an object; namespace None for cluster-scoped kinds."""
    if not isinstance(obj, Mapping):
        raise InvalidObject("object", "", "not a Kubernetes object (expected a mapping)")
    kind = obj.get("kind")
    metadata = obj.get("metadata")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject("object", "kind", "missing kind: not a Kubernetes object")
    if not isinstance(metadata, Mapping):
        raise InvalidObject(kind, "metadata", "missing metadata: not a Kubernetes object")
    name = metadata.get("name") or metadata.get("generateName")
    if not isinstance(name, str) or not name:
        raise InvalidObject(kind, "metadata.name", "required")
    if kind in CLUSTER_SCOPED:
        return kind, None, name
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise InvalidObject(kind, "metadata.namespace", "must be a string")
    return kind, namespace, name


class ClusterState:
    """A mutable, thread-safe index of cluster objects (dicts as the API serves them)."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._lock = threading.Lock()
        self._by_kind: dict[str, dict[tuple[str | None, str], Obj]] = {}
        self._revisions: dict[str, int] = {}
        # kind -> (revision, key) of recent changes; the revision each journal is complete from
        self._journal: dict[str, deque[tuple[int, tuple[str | None, str]]]] = {}
        self._journal_floor: dict[str, int] = {}
        for obj in objects:
            self.upsert(obj)

    def upsert(self, obj: Obj) -> None:
        """Add or replace an object (see STATUS_BLIND)."""
        kind, namespace, name = meta_of(obj)
        with self._lock:
            objects = self._by_kind.setdefault(kind, {})
            old = objects.get((namespace, name))
            objects[(namespace, name)] = obj
            blind = kind in STATUS_BLIND and old is not None
            if blind and _decided_part(old) == _decided_part(obj):  # type: ignore[arg-type]
                return
            self._revisions[kind] = self._revisions.get(kind, 0) + 1
            self._note(kind, (namespace, name))

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        """Forget an object; removing a missing object is a no-op."""
        with self._lock:
            if self._by_kind.get(kind, {}).pop((namespace, name), None) is not None:
                self._revisions[kind] = self._revisions.get(kind, 0) + 1
                self._note(kind, (namespace, name))

    def replace_kind(self, kind: str, objects: Iterable[Obj]) -> None:
        """Replace every object of a kind at once (a fresh LIST)."""
        fresh: dict[tuple[str | None, str], Obj] = {}
        for obj in objects:
            _, namespace, name = meta_of(obj)
            fresh[(namespace, name)] = obj
        with self._lock:
            self._by_kind[kind] = fresh
            self._revisions[kind] = self._revisions.get(kind, 0) + 1
            self._journal.pop(kind, None)
            self._journal_floor[kind] = self._revisions[kind]

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One object, or None."""
        return self._by_kind.get(kind, {}).get((namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Objects of a kind (in one namespace if given), sorted by namespace and name."""
        items = sorted(
            self._by_kind.get(kind, {}).items(), key=lambda kv: (kv[0][0] or "", kv[0][1])
        )
        return [obj for (ns, _), obj in items if namespace is None or ns == namespace]

    def revision(self, *kinds: str) -> tuple[int, ...]:
        """A value that changes whenever an object of one of these kinds changes."""
        return tuple(map(self._revisions.get, kinds, repeat(0)))

    def changed_since(self, kind: str, revision: int) -> set[tuple[str | None, str]] | None:
        """(namespace, name) of objects of `kind` upserted or removed after `revision` (a value
        of `revision(kind)[0]`), or None when that is no longer known (a wholesale replace, or
        more than JOURNAL_LENGTH changes ago): the caller then rescans the kind."""
        with self._lock:
            journal = self._journal.get(kind)
            if revision < self._journal_floor.get(kind, 0):
                return None
            if not journal or journal[-1][0] <= revision:
                return set()
            if len(journal) == journal.maxlen and journal[0][0] > revision + 1:
                return None
            keys: set[tuple[str | None, str]] = set()
            for at, key in reversed(journal):
                if at <= revision:
                    break
                keys.add(key)
            return keys

    def _note(self, kind: str, key: tuple[str | None, str]) -> None:
        journal = self._journal.get(kind)
        if journal is None:
            journal = self._journal[kind] = deque(maxlen=JOURNAL_LENGTH)
        journal.append((self._revisions[kind], key))

    def kinds(self) -> builtins.list[str]:
        """Kinds present in the view."""
        return sorted(self._by_kind)
