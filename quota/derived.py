"""Derived data kept with the views it was derived from: the core's functions hold no caches.

The core keeps no module-level state (tests/quota/test_module_state.py). What is worth
keeping between calls (the queue table, the extended-resource names, the device
catalog, parsed claim specs) lives in the `DerivedCache` of the view it was derived
from, `ClusterView.derived`, as Kueue's cache hands out its snapshot whole. A store
(`webhook.store.clusterstate.ClusterState`) makes one and hands it out with every view
it publishes, so every reader of an unchanged store (admission, the queueing controller,
the usage ledger, metrics) shares one value per revision; a view made from objects
alone (tests, the command line) has one of its own.

Two kinds of entry, both always checked before use, so a cache can never answer
with stale data:
- `latest(name, key, build)`: the values of the `LATEST_ENTRIES` keys last built under
  a name, each kept while its key (the revisions of the kinds read, and any other input
  such as settings) is asked for. Views sharing a cache are views of one store: equal
  revisions mean equal objects of those kinds (a store replaces an object without a new
  revision only where no decision reads the change, `STATUS_BLIND`). More than one, so
  that a reader still on the view before a change (a queueing pass) and one on the view
  after it (an admission) do not rebuild in turn;
- `of_object(name, obj, build)`: a value per cluster object, valid while that exact
  object is the one passed (a view holds objects, never edits them), so it holds in any
  view. An entry holds its object, so the object's id, its key, is not reused while the
  entry lives; at most `object_entries` per name, the oldest go first.

`variant()` is the cache of a view that differs from the store's at equal revisions (a
view with one object added, `ClusterView.with_object`): it shares the per-object values
and keeps `latest` values of its own.

Thread-safe: each read, and each write of `latest` (a new tuple), is one dict operation;
a write of `of_object` (with its eviction) holds a lock. Values are built outside it: two
threads may build the same value, and either is right.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar, cast

__all__ = ["LATEST_ENTRIES", "OBJECT_ENTRIES", "DerivedCache"]

_T = TypeVar("_T")
_Obj = Mapping[str, Any]

# How many values `latest` keeps per name: the newest keys asked for, newest first.
LATEST_ENTRIES = 2
# How many per-object values a cache keeps per name (e.g. templates or claims recently read).
OBJECT_ENTRIES = 4096


class _ObjectValues:
    """Values per (name, object), at most `entries` per name, oldest first out."""

    def __init__(self, entries: int) -> None:
        if entries < 1:
            raise ValueError(f"object_entries must be at least 1, got {entries}")
        self.lock = threading.Lock()
        self.by_name: dict[str, dict[int, tuple[_Obj, Any]]] = {}
        self.entries = entries

    def get(self, name: str, obj: _Obj) -> tuple[_Obj, Any] | None:
        return self.by_name.get(name, {}).get(id(obj))

    def put(self, name: str, obj: _Obj, value: Any) -> None:
        with self.lock:
            kept = self.by_name.setdefault(name, {})
            kept.pop(id(obj), None)  # (re-)inserted last: the oldest entries come first
            if len(kept) >= self.entries:
                del kept[next(iter(kept))]
            kept[id(obj)] = (obj, value)


class DerivedCache:
    """Values derived from the views of one store, rebuilt when what they were built from
    changes."""

    def __init__(
        self, object_entries: int = OBJECT_ENTRIES, *, objects: _ObjectValues | None = None
    ) -> None:
        self._latest: dict[str, tuple[tuple[Hashable, Any], ...]] = {}
        self._objects = objects if objects is not None else _ObjectValues(object_entries)

    def variant(self) -> DerivedCache:
        """A cache for a view with other objects at the same revisions: the per-object values
        are shared (they hold in any view), the `latest` ones are not."""
        return DerivedCache(objects=self._objects)

    def latest(self, name: str, key: Hashable, build: Callable[[], _T]) -> _T:
        """The value kept under `name` for `key` (compared with ==), else `build()`, kept under
        `name` in place of the oldest one kept there."""
        kept = self._latest.get(name, ())
        for built_for, value in kept:
            if built_for == key:
                return cast(_T, value)
        built = build()
        self._latest[name] = ((key, built), *kept[: LATEST_ENTRIES - 1])
        return built

    def of_object(self, name: str, obj: _Obj, build: Callable[[_Obj], _T]) -> _T:
        """`build(obj)`, kept while `obj` is the very object it was built from."""
        hit = self._objects.get(name, obj)
        if hit is not None and hit[0] is obj:
            return cast(_T, hit[1])
        value = build(obj)
        self._objects.put(name, obj, value)
        return value
