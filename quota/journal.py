"""`JournalCursor`: how far one reader of a cluster store has followed its change journal.

Every index kept incrementally from the store (the pod usage, the ledger's records, the
gated pods, the waiting index, the placement index) reads, per kind, the keys changed since
the revision it last read, or everything again when more changed than the journal holds (a
relist). The cursor owns those revisions, so the reader only says what it keeps and reacts
to what changed; it is the one module that asks a journal what changed
(tests/test_journal_followers.py keeps it so).

A cursor reads one journal: the store itself, or one frozen view of it. A reader handed a
view per call (the waiting index, the placement index) keeps only its `JournalPosition`
between calls (never a view, which would keep every object of an older cluster alive) and
reads on from each view with `reading`: a view of the same store, later or earlier, answers
what differs (the journal answers either way in time: a decision may run on a view older
than the last one read).

Invariants: a kind's revision moves only with `take`, `follow` or `mark`, after which the
reader handles what they answered; `peek` reads the journal and moves nothing. A kind never
marked or taken, and every kind after a move to another store's view, is unread: it answers
None (a relist), since nothing says what the reader holds of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Protocol

from quota.cluster import Key, Obj
from quota.objectkeys import object_key, object_key_of

__all__ = ["Journal", "JournalCursor", "JournalPosition"]


class Journal(Protocol):
    """What a cursor reads: a store (or a view of one) that keeps a change journal per kind."""

    @property
    def source(self) -> object:
        """The store: a store's own, and every view it hands out, name the same."""
        ...

    def revision(self, *kinds: str) -> tuple[int, ...]: ...

    def changed_since(self, kind: str, revision: int) -> set[Key] | None: ...

    def list(self, kind: str) -> Iterable[Obj]: ...

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None: ...


def _by_namespace_and_name(key: Key) -> tuple[str, str]:
    return key[0] or "", key[1]


@dataclass(frozen=True)
class JournalPosition:
    """How far a reader has followed one store's journal, holding no view of it: what an
    index kept from view to view keeps, so that nothing kept between requests holds an
    older view of the cluster (and every object in it) alive."""

    source: object
    seen: Mapping[str, int]

    def reading(self, journal: Journal) -> JournalCursor:
        """A cursor at this position that reads `journal`: a view of the same store, later or
        earlier, answers what differs from what was read; another store's (its `source`
        differs) has every kind unread."""
        return JournalCursor(journal, self.seen if journal.source is self.source else None)


class JournalCursor:
    """The revision of each kind of one store that its reader has caught up with."""

    def __init__(self, journal: Journal, seen: Mapping[str, int] | None = None) -> None:
        self._state = journal
        self._seen: dict[str, int] = dict(seen or {})

    def position(self) -> JournalPosition:
        """Where this cursor stands, to be read on from another view (`reading`)."""
        return JournalPosition(self._state.source, dict(self._seen))

    def mark(self, *kinds: str) -> None:
        """The reader has read every object of these kinds now: later changes are news."""
        for kind in kinds:
            self._seen[kind] = self._state.revision(kind)[0]

    def peek(self, kind: str) -> set[Key] | None:
        """The keys of `kind` changed since the reader caught up (None: a relist, everything
        may have changed); moves nothing."""
        seen = self._seen.get(kind)
        if seen is None:
            return None
        if self._state.revision(kind)[0] == seen:
            return set()
        return self._state.changed_since(kind, seen)

    def take(self, kind: str) -> list[Key] | None:
        """As `peek`, sorted by namespace and name, and the reader is caught up with `kind`
        from now on."""
        seen = self._seen.get(kind)
        now = self._state.revision(kind)[0]
        if now == seen:
            return []
        self._seen[kind] = now
        keys = None if seen is None else self._state.changed_since(kind, seen)
        return None if keys is None else sorted(keys, key=_by_namespace_and_name)

    def follow(self, *kinds: str) -> list[tuple[str, list[Key] | None]]:
        """`take` of each of `kinds` (in that order) that changed: (kind, its keys, or None
        for a relist); kinds with no change are left out."""
        out: list[tuple[str, list[Key] | None]] = []
        for kind in kinds:
            keys = self.take(kind)
            if keys != []:
                out.append((kind, keys))
        return out

    def changed(self, kind: str, cached: Set[str]) -> list[tuple[str, Obj | None]]:
        """`take` as (`ns/name`, the object now or None when deleted); on a relist, every key
        of `cached` no longer listed (with None), then every object listed."""
        keys = self.take(kind)
        if keys is None:
            current = {object_key(obj): obj for obj in self._state.list(kind)}
            gone: list[tuple[str, Obj | None]] = [(key, None) for key in cached - current.keys()]
            return gone + list(current.items())
        return [(object_key_of(ns, name), self._state.get(kind, ns, name)) for ns, name in keys]
