"""`JournalCursor`, how far a reader has followed a `ClusterState`'s journal
(quota/journal.py), over a real `ClusterState` and its journal.

What a user notices through it: after a sync, the next one handles exactly the objects
written since (in a stable order), and after more writes than the journal holds (or a
relist) everything is compared again, deleted objects included.
"""

from __future__ import annotations

from typing import Any

from quota.journal import JournalCursor
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
