"""Derived data kept between calls, in an object its owner holds: the core has no caches.

The core keeps no module-level state (tests/quota/test_module_state.py). What is worth
keeping between calls — the queue table, the extended-resource names, parsed claim
specs — lives in a `DerivedCache` that the shell makes next to the cluster view it
reads and passes as `cache=` (`queue_table`, `pod_demand`, `prepare`, ...). Without
one, everything is derived afresh: same answers, more work.

Two kinds of entry, both always checked before use, so a cache can never answer
with stale data:
- `latest(name, key, build)`: one value per name, kept while the key it was built
  for (the cluster view itself plus the revisions of the kinds read, and any other
  input such as settings) is unchanged;
- `of_object(name, obj, build)`: a value per cluster object, valid while that exact
  object is the one passed (a ClusterView holds objects, never edits them). An
  entry holds its object, so the object's id, its key, is not reused while the entry
  lives; bounded, the oldest entries go first.

Thread-safe: each read, and each write of `latest`, is one dict operation; a write of
`of_object` (with its eviction) holds a lock. Values are built outside it: two threads
may build the same value, and either is right.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar, cast

from quota.cluster import Obj

__all__ = ["OBJECT_ENTRIES", "DerivedCache"]

_T = TypeVar("_T")

# How many per-object values a cache keeps (claims and templates read by recent admissions).
OBJECT_ENTRIES = 4096


class DerivedCache:
    """Values derived from a cluster view, rebuilt when what they were built from changes."""

    def __init__(self, object_entries: int = OBJECT_ENTRIES) -> None:
        if object_entries < 1:
            raise ValueError(f"object_entries must be at least 1, got {object_entries}")
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[Hashable, Any]] = {}
        self._objects: dict[tuple[str, int], tuple[Obj, Any]] = {}
        self._object_entries = object_entries

    def latest(self, name: str, key: Hashable, build: Callable[[], _T]) -> _T:
        """The value kept under `name` if it was built for `key` (compared with ==), else
        `build()`, kept under `name` in place of the previous one."""
        hit = self._latest.get(name)
        if hit is not None and hit[0] == key:
            return cast(_T, hit[1])
        value = build()
        self._latest[name] = (key, value)
        return value

    def of_object(self, name: str, obj: Obj, build: Callable[[Obj], _T]) -> _T:
        """`build(obj)`, kept while `obj` is the very object it was built from."""
        key = (name, id(obj))
        hit = self._objects.get(key)
        if hit is not None and hit[0] is obj:
            return cast(_T, hit[1])
        value = build(obj)
        with self._lock:
            self._objects.pop(key, None)  # (re-)inserted last: the oldest entries come first
            if len(self._objects) >= self._object_entries:
                del self._objects[next(iter(self._objects))]
            self._objects[key] = (obj, value)
        return value
