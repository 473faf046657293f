"""`JournalCursor`: how far one reader of a cluster store has followed its change journal.

An index kept incrementally from the store (`PodUsage`) reads, per kind, the keys changed
since the revision it last read, or everything again when more changed than the journal
holds (a relist). The cursor owns those revisions, so the reader only says what it keeps
and reacts to what changed.

Invariant: a kind's revision moves only with `take` (or `mark`), after which the reader
handles what it answered; `peek` reads the journal and moves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from typing import Protocol

from quota.cluster import Key, Obj
from quota.livepods import pod_key

__all__ = ["Journal", "JournalCursor", "object_key"]


class Journal(Protocol):
    """What a cursor reads: a store (or a view of one) that keeps a change journal per kind."""

    def revision(self, *kinds: str) -> tuple[int, ...]: ...

    def changed_since(self, kind: str, revision: int) -> set[Key] | None: ...

    def list(self, kind: str) -> Iterable[Obj]: ...

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None: ...


def object_key(namespace: str | None, name: str) -> str:
    """`namespace/name` of an object, as `quota.livepods.pod_key` names it."""
    return f"{namespace or 'default'}/{name}"


class JournalCursor:
    """The revision of each kind of one store that its reader has caught up with."""

    def __init__(self, state: Journal) -> None:
        self._state = state
        self._seen: dict[str, int] = {}

    def mark(self, *kinds: str) -> None:
        """The reader has read every object of these kinds now: later changes are news."""
        for kind in kinds:
            self._seen[kind] = self._state.revision(kind)[0]

    def peek(self, kind: str) -> set[Key] | None:
        """The keys of `kind` changed since the reader caught up (None: a relist, everything
        may have changed); moves nothing."""
        seen = self._seen.get(kind, 0)
        if self._state.revision(kind)[0] == seen:
            return set()
        return self._state.changed_since(kind, seen)

    def take(self, kind: str) -> list[Key] | None:
        """As `peek`, sorted by namespace and name, and the reader is caught up with `kind`
        from now on."""
        seen = self._seen.get(kind, 0)
        now = self._state.revision(kind)[0]
        if now == seen:
            return []
        self._seen[kind] = now
        keys = self._state.changed_since(kind, seen)
        return None if keys is None else sorted(keys, key=lambda k: (k[0] or "", k[1]))

    def changed(self, kind: str, cached: Set[str]) -> list[tuple[str, Obj | None]]:
        """`take` as (`ns/name`, the object now or None when deleted); on a relist, every key
        of `cached` no longer listed (with None), then every object listed."""
        keys = self.take(kind)
        if keys is None:
            current = {pod_key(obj): obj for obj in self._state.list(kind)}
            gone: list[tuple[str, Obj | None]] = [(key, None) for key in cached - current.keys()]
            return gone + list(current.items())
        return [(object_key(ns, name), self._state.get(kind, ns, name)) for ns, name in keys]
