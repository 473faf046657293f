"""The cluster view: every object the decisions read, indexed by kind/namespace/name.

`ClusterView` is the cluster at one moment, frozen: what one decision reads, handed
to it whole, so that a decision never sees half of a change. `ClusterState` is the
store the shell keeps current (the embedded `--state DIR` mode from files, the
webhook's informers from the API server); `snapshot()` hands out its view in O(1),
because every kind is held in a persistent map (`immutables.Map`) that a write
copies only along one path. Each kind has a revision counter so that derived
indexes (pools, queue tables) can be cached and rebuilt only when their inputs
changed.
"""

from __future__ import annotations

import builtins
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any, Protocol

import immutables

from quota.errors import InvalidObject

__all__ = [
    "CLUSTER_SCOPED",
    "JOURNAL_LENGTH",
    "ClusterState",
    "ClusterView",
    "Obj",
    "ViewSource",
    "meta_of",
]

Obj = Mapping[str, Any]
Key = tuple[str | None, str]  # (namespace, name); namespace None for cluster-scoped kinds
Objects = immutables.Map[Key, Obj]
# (kind, after, upto) -> keys changed in that span of revisions, or None when unknown
Journal = Callable[[str, int, int], "set[Key] | None"]

_EMPTY: Objects = immutables.Map()

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


class ClusterView:
    """The cluster at one revision of every kind, frozen: reads only, safe from any thread.

    `source` names the store the view was taken from: derived caches key on it and on
    revisions, so that views of one store share what was derived from them.
    """

    __slots__ = ("_journal", "_objects", "_revisions", "source")

    def __init__(
        self,
        objects: Mapping[str, Objects],
        revisions: Mapping[str, int],
        source: object = None,
        journal: Journal | None = None,
    ) -> None:
        self._objects = objects
        self._revisions = revisions
        self.source = source if source is not None else object()
        self._journal = journal

    @classmethod
    def of(cls, objects: Iterable[Obj]) -> ClusterView:
        """A view of these objects alone (every kind at revision 1)."""
        by_kind: dict[str, dict[Key, Obj]] = {}
        for obj in objects:
            kind, namespace, name = meta_of(obj)
            by_kind.setdefault(kind, {})[(namespace, name)] = obj
        return cls(
            {kind: _objects(found) for kind, found in by_kind.items()},
            dict.fromkeys(by_kind, 1),
        )

    def snapshot(self) -> ClusterView:
        """This view: it is frozen already."""
        return self

    def with_object(self, obj: Obj) -> ClusterView:
        """This view with `obj` added or replaced, as it will be once stored. A view of its
        own (a new `source`): nothing derived from it is taken for the store's."""
        kind, namespace, name = meta_of(obj)
        objects = self._objects.get(kind, _EMPTY).set((namespace, name), obj)
        return ClusterView({**self._objects, kind: objects}, self._revisions)

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One object, or None."""
        return self._objects.get(kind, _EMPTY).get((namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> builtins.list[Obj]:
        """Objects of a kind (in one namespace if given), sorted by namespace and name."""
        items = sorted(self._objects.get(kind, _EMPTY).items(), key=_by_namespace_and_name)
        return [obj for (ns, _), obj in items if namespace is None or ns == namespace]

    def revision(self, *kinds: str) -> tuple[int, ...]:
        """A value that changes whenever an object of one of these kinds changes."""
        return tuple(map(self._revisions.get, kinds, repeat(0)))

    def changed_since(self, kind: str, revision: int) -> set[Key] | None:
        """(namespace, name) of objects of `kind` upserted or removed after `revision` (a value
        of `revision(kind)[0]`) up to this view, or None when that is no longer known (a
        wholesale replace, or more than JOURNAL_LENGTH changes ago): the caller then rescans
        the kind."""
        now = self._revisions.get(kind, 0)
        if revision == now:
            return set()
        if self._journal is None or revision > now:
            return None
        return self._journal(kind, revision, now)

    def kinds(self) -> builtins.list[str]:
        """Kinds present in the view."""
        return sorted(self._objects)


def _objects(found: dict[Key, Obj]) -> Objects:
    return immutables.Map(found.items())


class ViewSource(Protocol):
    """Whatever hands out views: the store (its view now), or a view (itself)."""

    def snapshot(self) -> ClusterView: ...


def _by_namespace_and_name(item: tuple[Key, Obj]) -> tuple[str, str]:
    return item[0][0] or "", item[0][1]


class ClusterState:
    """The store: a mutable, thread-safe index of cluster objects (dicts as the API serves
    them) whose `snapshot()` is a frozen `ClusterView`. Writes hold a lock; reads read the
    current view."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._lock = threading.Lock()
        self._view = ClusterView({}, {}, self, self._changed_between)
        # kind -> (revision, key) of recent changes; the revision each journal is complete from
        self._journal: dict[str, deque[tuple[int, Key]]] = {}
        self._journal_floor: dict[str, int] = {}
        for obj in objects:
            self.upsert(obj)

    def snapshot(self) -> ClusterView:
        """The cluster now, frozen."""
        return self._view

    def upsert(self, obj: Obj) -> None:
        """Add or replace an object (see STATUS_BLIND)."""
        kind, namespace, name = meta_of(obj)
        key = (namespace, name)
        with self._lock:
            objects = self._view._objects.get(kind, _EMPTY)
            old = objects.get(key)
            blind = kind in STATUS_BLIND and old is not None
            if blind and _decided_part(old) == _decided_part(obj):  # type: ignore[arg-type]
                self._publish(kind, objects.set(key, obj), changed=None)
                return
            self._publish(kind, objects.set(key, obj), changed=key)

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        """Forget an object; removing a missing object is a no-op."""
        key = (namespace, name)
        with self._lock:
            objects = self._view._objects.get(kind, _EMPTY)
            if key in objects:
                self._publish(kind, objects.delete(key), changed=key)

    def replace_kind(self, kind: str, objects: Iterable[Obj]) -> None:
        """Replace every object of a kind at once (a fresh LIST)."""
        fresh: dict[Key, Obj] = {}
        for obj in objects:
            _, namespace, name = meta_of(obj)
            fresh[(namespace, name)] = obj
        replaced = _objects(fresh)
        with self._lock:
            self._publish(kind, replaced, changed=None, wholesale=True)

    def _publish(
        self, kind: str, objects: Objects, changed: Key | None, wholesale: bool = False
    ) -> None:
        view = self._view
        revisions = view._revisions
        if changed is not None or wholesale:
            revision = revisions.get(kind, 0) + 1
            revisions = {**revisions, kind: revision}
            if wholesale:
                self._journal.pop(kind, None)
                self._journal_floor[kind] = revision
            else:
                self._note(kind, revision, changed)  # type: ignore[arg-type]
        self._view = ClusterView(
            {**view._objects, kind: objects}, revisions, self, self._changed_between
        )

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One object, or None."""
        return self._view.get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> builtins.list[Obj]:
        """Objects of a kind (in one namespace if given), sorted by namespace and name."""
        return self._view.list(kind, namespace)

    def revision(self, *kinds: str) -> tuple[int, ...]:
        """A value that changes whenever an object of one of these kinds changes."""
        return self._view.revision(*kinds)

    def changed_since(self, kind: str, revision: int) -> set[Key] | None:
        """What `ClusterView.changed_since` says, up to now."""
        return self._view.changed_since(kind, revision)

    def kinds(self) -> builtins.list[str]:
        """Kinds present in the store."""
        return self._view.kinds()

    @property
    def source(self) -> object:
        """The store itself: what its views name as their source."""
        return self

    def _changed_between(self, kind: str, after: int, upto: int) -> set[Key] | None:
        with self._lock:
            journal = self._journal.get(kind)
            if after < self._journal_floor.get(kind, 0):
                return None
            if not journal or journal[-1][0] <= after:
                return set()
            if len(journal) == journal.maxlen and journal[0][0] > after + 1:
                return None
            keys: set[Key] = set()
            for at, key in reversed(journal):
                if at <= after:
                    break
                if at <= upto:
                    keys.add(key)
            return keys

    def _note(self, kind: str, revision: int, key: Key) -> None:
        journal = self._journal.get(kind)
        if journal is None:
            journal = self._journal[kind] = deque(maxlen=JOURNAL_LENGTH)
        journal.append((revision, key))
