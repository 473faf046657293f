"""The store of cluster objects the shell keeps current, and hands out as frozen views.

The embedded `--state DIR` mode fills it from files; the webhook's informers keep it
current from the API server. Every write publishes a new `quota.cluster.ClusterView`
(each kind a persistent map, so a write copies one path of one kind and the view is
handed out in O(1)); decisions read the view they were handed, never the store. A
journal per kind tells the placement index which claims changed between two views.
The store owns the one `quota.derived.DerivedCache` its views carry (`ClusterView.derived`):
the queue table, extended-resource names, device catalog and parsed claims are derived
once per revision of what they read, whoever asks, and handed out with the view.
"""

from __future__ import annotations

import builtins
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from quota.cluster import ClusterView, Key, Obj, Objects, meta_of, objects_of
from quota.derived import DerivedCache

__all__ = ["JOURNAL_LENGTH", "STATUS_BLIND", "ClusterState"]

# How many recent upserts/removals per kind `changed_since` can report.
JOURNAL_LENGTH = 4096

# Kinds whose status no decision reads: a change of status (or of server-kept metadata) alone
# replaces the object without a new revision, so draquota's own ClusterQueue status writes
# never make every pod's charge be recomputed.
STATUS_BLIND = frozenset({"ClusterQueue", "LocalQueue", "ResourceFlavor"})
_SERVER_METADATA = ("resourceVersion", "managedFields", "generation")

_NONE: Objects = objects_of(())


def _decided_part(obj: Obj) -> tuple[Any, Any]:
    metadata = obj.get("metadata")
    kept = (
        {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        if isinstance(metadata, Mapping)
        else metadata
    )
    return kept, {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _keyed(objects: Iterable[Obj]) -> Iterator[tuple[Key, Obj]]:
    for obj in objects:
        _, namespace, name = meta_of(obj)
        yield (namespace, name), obj


class ClusterState:
    """A mutable, thread-safe index of cluster objects (dicts as the API serves them) whose
    `snapshot()` is a frozen `ClusterView`. Writes hold a lock; reads read the current view."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, Objects] = {}
        self._revisions: dict[str, int] = {}
        # kind -> (revision, key) of recent changes; the revision each journal is complete from
        self._journal: dict[str, deque[tuple[int, Key]]] = {}
        self._journal_floor: dict[str, int] = {}
        self._writes = 0
        self._derived = DerivedCache()  # shared by every view published: keyed by revisions
        self._view = self._published()
        for obj in objects:
            self.upsert(obj)

    def snapshot(self) -> ClusterView:
        """The cluster now, frozen."""
        return self._view

    @property
    def source(self) -> object:
        """The store itself: what its views name as their source."""
        return self

    @property
    def derived(self) -> DerivedCache:
        """What the core derives from the store's views, shared by all of them."""
        return self._derived

    def upsert(self, obj: Obj) -> None:
        """Add or replace an object (see STATUS_BLIND)."""
        kind, namespace, name = meta_of(obj)
        key = (namespace, name)
        with self._lock:
            objects = self._objects.get(kind, _NONE)
            old = objects.get(key)
            blind = kind in STATUS_BLIND and old is not None
            unchanged = blind and _decided_part(old) == _decided_part(obj)  # type: ignore[arg-type]
            self._objects[kind] = objects.set(key, obj)
            if not unchanged:
                self._note(kind, key)
            self._view = self._published()

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        """Forget an object; removing a missing object is a no-op."""
        key = (namespace, name)
        with self._lock:
            objects = self._objects.get(kind, _NONE)
            if key in objects:
                self._objects[kind] = objects.delete(key)
                self._note(kind, key)
                self._view = self._published()

    def replace_kind(self, kind: str, objects: Iterable[Obj]) -> None:
        """Replace every object of a kind at once (a fresh LIST)."""
        replaced = objects_of(_keyed(objects))
        with self._lock:
            self._objects[kind] = replaced
            self._revisions[kind] = self._revisions.get(kind, 0) + 1
            self._journal.pop(kind, None)
            self._journal_floor[kind] = self._revisions[kind]
            self._view = self._published()

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One object, or None."""
        return self._view.get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> builtins.list[Obj]:
        """Objects of a kind (in one namespace if given), sorted by namespace and name."""
        return self._view.list(kind, namespace)

    def revision(self, *kinds: str) -> tuple[int, ...]:
        """A value that changes whenever an object of one of these kinds changes."""
        return self._view.revision(*kinds)

    @property
    def generation(self) -> int:
        """The generation of the view now (`ClusterView.generation`): read it before the
        revisions it stands for, so that it never stands for more than was read."""
        return self._view.generation

    def changed_since(self, kind: str, revision: int) -> set[Key] | None:
        """What `ClusterView.changed_since` says, up to now."""
        return self._view.changed_since(kind, revision)

    def kinds(self) -> builtins.list[str]:
        """Kinds present in the store."""
        return self._view.kinds()

    def _published(self) -> ClusterView:
        # Copies of two small dicts (one entry per kind): the view never changes after this.
        self._writes += 1
        revisions = dict(self._revisions)
        return ClusterView(
            dict(self._objects), revisions, self, self._between, self._writes, self._derived
        )

    def _note(self, kind: str, key: Key) -> None:
        revision = self._revisions[kind] = self._revisions.get(kind, 0) + 1
        journal = self._journal.get(kind)
        if journal is None:
            journal = self._journal[kind] = deque(maxlen=JOURNAL_LENGTH)
        journal.append((revision, key))

    def _between(self, kind: str, after: int, upto: int) -> set[Key] | None:
        """Keys of `kind` changed after revision `after` up to `upto`; None when unknown."""
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
