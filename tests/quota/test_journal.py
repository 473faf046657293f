"""`JournalCursor`, how far a reader has followed a `ClusterState`'s journal
(quota/journal.py), over a real `ClusterState` and its journal.

What a user notices through it: after a sync, the next one handles exactly the objects
written since (in a stable order), and after more writes than the journal holds (or a
relist) everything is compared again, deleted objects included. One cursor serves every
reader: the table below runs each kind through each thing that can happen between two
reads (nothing, writes, a relist, a journal overrun, a move to an older view, a move to
another store's view), read one kind at a time and several at once.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from quota.cluster import ClusterView, Key
from quota.journal import Journal, JournalCursor
from tests.webhook.builders import NAMESPACE, pod
from webhook.store.clusterstate import JOURNAL_LENGTH, ClusterState


def _names(changes: list[tuple[str, Any]]) -> list[tuple[str, bool]]:
    """(key, whether the object is still there) of each change."""
    return [(key, obj is not None) for key, obj in changes]


def test_take_answers_the_keys_written_since_and_peek_moves_nothing() -> None:
    state = ClusterState([pod("a")])
    cursor = JournalCursor(state)
    cursor.mark("Pod")
    assert cursor.take("Pod") == []
    state.upsert(pod("c"))
    state.upsert(pod("b", namespace="team-b"))
    state.remove("Pod", NAMESPACE, "a")
    assert cursor.peek("Pod") == {(NAMESPACE, "a"), (NAMESPACE, "c"), ("team-b", "b")}
    assert cursor.peek("Pod") == {(NAMESPACE, "a"), (NAMESPACE, "c"), ("team-b", "b")}
    assert cursor.take("Pod") == [(NAMESPACE, "a"), (NAMESPACE, "c"), ("team-b", "b")]
    assert cursor.take("Pod") == [] and cursor.peek("Pod") == set()


def test_changed_hands_in_each_object_as_it_is_now_or_none_when_deleted() -> None:
    state = ClusterState([pod("a"), pod("b")])
    cursor = JournalCursor(state)
    cursor.mark("Pod")
    state.remove("Pod", NAMESPACE, "a")
    state.upsert(pod("b", templates=()))
    changes = cursor.changed("Pod", {f"{NAMESPACE}/a", f"{NAMESPACE}/b"})
    assert _names(changes) == [(f"{NAMESPACE}/a", False), (f"{NAMESPACE}/b", True)]
    assert changes[1][1] == state.get("Pod", NAMESPACE, "b")


def test_more_writes_than_the_journal_holds_compare_everything_again() -> None:
    state = ClusterState([pod("gone"), pod("kept")])
    cursor = JournalCursor(state)
    cursor.mark("Pod")
    state.remove("Pod", NAMESPACE, "gone")
    for i in range(JOURNAL_LENGTH + 1):
        state.upsert(pod(f"p-{i % 3}", templates=("one-gpu",) * (1 + i % 2)))
    assert cursor.peek("Pod") is None
    changes = cursor.changed("Pod", {f"{NAMESPACE}/gone", f"{NAMESPACE}/kept"})
    assert sorted(_names(changes)) == [
        (f"{NAMESPACE}/gone", False),
        (f"{NAMESPACE}/kept", True),
        (f"{NAMESPACE}/p-0", True),
        (f"{NAMESPACE}/p-1", True),
        (f"{NAMESPACE}/p-2", True),
    ]
    assert cursor.take("Pod") == []  # caught up from there on


def test_a_relist_of_a_kind_is_answered_as_none() -> None:
    state = ClusterState([pod("a")])
    cursor = JournalCursor(state)
    cursor.mark("Pod")
    state.replace_kind("Pod", [pod("b")])
    assert cursor.take("Pod") is None
    state.upsert(pod("c"))
    assert cursor.take("Pod") == [(NAMESPACE, "c")]


def test_mark_skips_what_was_written_before() -> None:
    state = ClusterState()
    cursor = JournalCursor(state)
    state.upsert(pod("a"))
    cursor.mark("Pod")
    assert cursor.take("Pod") == []


# -- one follower for every reader: kinds x what happened since the cursor caught up --------

KINDS = ("Pod", "Job", "Node")  # namespaced and cluster-scoped


def _obj(kind: str, name: str, generation: int = 0) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"generation": str(generation)}}
    if kind != "Node":
        metadata["namespace"] = NAMESPACE
    return {"kind": kind, "metadata": metadata, "spec": {}}


def _key(kind: str, name: str) -> Key:
    return (None if kind == "Node" else NAMESPACE, name)


def _store() -> ClusterState:
    return ClusterState(_obj(kind, name) for kind in KINDS for name in ("a", "b"))


def _unchanged(state: ClusterState, kind: str, cursor: JournalCursor) -> Journal:
    for other in KINDS:
        if other != kind:  # news of other kinds is not news of this one
            state.upsert(_obj(other, "other"))
    return state.snapshot()


def _changed(state: ClusterState, kind: str, cursor: JournalCursor) -> Journal:
    state.upsert(_obj(kind, "c"))
    state.upsert(_obj(kind, "b", generation=1))
    state.remove(kind, *_key(kind, "a"))
    state.upsert(_obj(kind, "b", generation=2))  # written twice: answered once
    return state.snapshot()


def _relisted(state: ClusterState, kind: str, cursor: JournalCursor) -> Journal:
    state.replace_kind(kind, [_obj(kind, "b"), _obj(kind, "d")])
    return state.snapshot()


def _overrun(state: ClusterState, kind: str, cursor: JournalCursor) -> Journal:
    for i in range(JOURNAL_LENGTH + 1):  # more writes than the journal holds
        state.upsert(_obj(kind, "b", generation=i))
    return state.snapshot()


def _older_view(state: ClusterState, kind: str, cursor: JournalCursor) -> Journal:
    older = state.snapshot()
    state.upsert(_obj(kind, "c"))
    state.remove(kind, *_key(kind, "a"))
    cursor.mark(kind)  # the reader caught up with the newer view first
    return older  # then a decision asks on the older one


def _other_store(state: ClusterState, kind: str, cursor: JournalCursor) -> Journal:
    return _store().snapshot()  # the same objects, another store's revisions


@dataclass(frozen=True)
class Case:
    id: str
    happen: Callable[[ClusterState, str, JournalCursor], Journal]  # -> the journal read next
    names: tuple[str, ...] | None  # the names answered as changed; None: a relist


CASES = (
    Case("unchanged", _unchanged, ()),
    Case("changed", _changed, ("a", "b", "c")),
    Case("relist", _relisted, None),
    Case("journal-overrun", _overrun, None),
    Case("older-view", _older_view, ("a", "c")),
    Case("another-store", _other_store, None),
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_cursor_moved_to_a_journal_answers_what_differs_from_what_it_read(
    case: Case, kind: str
) -> None:
    state = _store()
    cursor = JournalCursor(state)
    cursor.mark(*KINDS)
    read = case.happen(state, kind, cursor)
    moved = cursor.position().reading(read)
    keys = None if case.names is None else [_key(kind, n) for n in case.names]
    assert moved.peek(kind) == (None if keys is None else set(keys))
    assert moved.take(kind) == keys
    assert moved.take(kind) == [] and moved.peek(kind) == set()  # caught up from there on
    again = cursor.position().reading(read)  # the cursor did not move: it answers as before
    assert again.take(kind) == keys


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_follow_answers_each_kind_that_changed_in_the_order_asked(case: Case) -> None:
    state = _store()
    cursor = JournalCursor(state)
    cursor.mark(*KINDS)
    read = case.happen(state, "Job", cursor)
    moved = cursor.position().reading(read)
    answered = moved.follow(*reversed(KINDS))
    assert moved.follow(*KINDS) == []  # caught up with every kind at once
    expected: dict[str, list[Key] | None]
    if read.source is not state.source:
        expected = dict.fromkeys(reversed(KINDS))
    elif case.names == ():
        expected = {"Node": [_key("Node", "other")], "Pod": [_key("Pod", "other")]}
    else:
        expected = {"Job": None if case.names is None else [_key("Job", n) for n in case.names]}
    assert answered == list(expected.items())


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_never_read_is_answered_as_a_relist(kind: str) -> None:
    state = _store()
    cursor = JournalCursor(state)
    assert cursor.peek(kind) is None and cursor.take(kind) is None
    assert cursor.take(kind) == []
    fresh = JournalCursor(ClusterState())  # nothing stored yet: still never read
    assert fresh.take(kind) is None and fresh.take(kind) == []


@pytest.mark.parametrize("kind", KINDS)
def test_changed_after_another_stores_view_compares_everything(kind: str) -> None:
    state = _store()
    cursor = JournalCursor(state)
    cursor.mark(kind)
    other = ClusterState([_obj(kind, "b"), _obj(kind, "c")])
    cached = {_name(kind, "a"), _name(kind, "b")}
    changes = cursor.position().reading(other.snapshot()).changed(kind, cached)
    assert sorted(_names(changes)) == [
        (_name(kind, "a"), False),
        (_name(kind, "b"), True),
        (_name(kind, "c"), True),
    ]


def _name(kind: str, name: str) -> str:
    namespace, _ = _key(kind, name)
    return f"{namespace or 'default'}/{name}"


def test_a_position_holds_no_view_of_the_store() -> None:
    state = _store()
    cursor = JournalCursor(state.snapshot())
    cursor.mark(*KINDS)
    position = cursor.position()
    assert position.source is state.source
    assert all(isinstance(v, int) for v in position.seen.values())
    held = gc.get_referents(position) + gc.get_referents(position.seen)
    assert not any(isinstance(obj, ClusterView) for obj in held)
