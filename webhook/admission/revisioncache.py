"""Values kept while no object of some kinds changes: the admission path's caches.

A placement (`webhook.admission.placementcache`) and a prepared decision
(`webhook.admission.preparedcache`) depend on cluster objects of known kinds and on nothing else
that changes. Each is kept in a `RevisionCache` of those kinds: dropped whole as soon as the
revision of one kind moves, and bounded, so that no sequence of requests can grow it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from quota.cluster import ClusterView
from webhook.store.clusterstate import ClusterState

__all__ = ["RevisionCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RevisionCache(Generic[K, V]):
    """Values by key for the current revision of `kinds`.

    Bounded in entries (`size`) and, when a `budget` is given, in the total weight of
    what is kept (the caller weighs each value, e.g. by its bytes). A full cache is
    emptied, not trimmed: what was kept is only ever a saving. Thread-safe as its
    callers use it: reads and writes are single dict operations, and the revision is
    read before a value is built, so a value built from an older view is never kept
    for a newer one.
    """

    def __init__(
        self, state: ClusterState, kinds: tuple[str, ...], size: int, budget: int | None = None
    ) -> None:
        self.state = state
        self.kinds = kinds
        self.size = size
        self.budget = budget
        self.hits = 0
        self.weight = 0
        self._revision: tuple[int, ...] = ()
        self._entries: dict[K, V] = {}
        # (source, generation) of the last view found current, and the entries then: a view
        # of the same generation has the same revisions (one tuple, read and set at once).
        self._seen: tuple[object, int, dict[K, V]] | None = None

    def lookup(self, key: K, view: ClusterView | None = None) -> tuple[V | None, dict[K, V]]:
        """The value kept for `key` at the revision of `view` (default: the store now),
        counted as a hit, or None; and the entries of that revision, where a value built
        from `view` after a miss goes (`keep`)."""
        entries = self._current(view)
        found = entries.get(key)
        if found is not None:
            self.hits += 1
        return found, entries

    def __contains__(self, key: K) -> bool:
        return key in self._current()

    def keep(self, entries: dict[K, V], key: K, value: V, weight: int = 0) -> None:
        """Keep `value`, built from the view `entries` were read at, emptying the cache
        first when it would go over a bound. A value built while the revision moved is
        not kept: it may have read the older objects."""
        if entries is not self._entries:
            return
        over_budget = self.budget is not None and self.weight + weight > self.budget
        if len(entries) >= self.size or over_budget:
            entries.clear()
            self.weight = 0
        entries[key] = value
        self.weight += weight

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> Iterator[V]:
        return iter(list(self._entries.values()))

    def _seen_entries(self, view: ClusterView | None) -> dict[K, V] | None:
        """The entries found current for a view of this source and generation, if any."""
        seen = self._seen
        if view is None or seen is None or seen[0] is not view.source:
            return None
        return seen[2] if seen[1] == view.generation else None

    def _current(self, view: ClusterView | None = None) -> dict[K, V]:
        seen = self._seen_entries(view)
        if seen is not None:
            return seen
        revision = (view if view is not None else self.state).revision(*self.kinds)
        if revision != self._revision and _older(revision, self._revision):
            # A decision that took its view just before a change: it misses, and keeps nothing
            # (`keep` keeps only into the current entries), but what is kept stays.
            return {}
        if revision != self._revision:
            self._entries = {}
            self.weight = 0
            self._revision = revision
        if view is not None:
            self._seen = (view.source, view.generation, self._entries)
        return self._entries


def _older(revision: tuple[int, ...], than: tuple[int, ...]) -> bool:
    return bool(than) and all(a <= b for a, b in zip(revision, than, strict=True))
