"""`ShardIndex` on its own: shards in, records and the active shard out, no I/O."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from quota.cluster import Obj
from webhook.ledger.reservations import Reservation, Shard, ledger_object
from webhook.ledger.shards import RecordChange, ShardIndex, base_of

BASE = "cohort-team"
TTL = 60.0


def entry(uid: str, charge: str = "c1") -> Reservation:
    return Reservation(uid, "queue-a", f"ns/{uid}", charge)


def shard(index: int, *entries: Reservation, sealed: bool = False, version: str = "1") -> Obj:
    """A shard as the API server stores it (the body draquota writes, with its version)."""
    return ledger_object(Shard(f"{BASE}-{index}", resource_version=version), entries, sealed)


def head(top: int) -> Obj:
    obj = ledger_object(Shard(f"{BASE}-head", resource_version="1"), [], False)
    obj["metadata"]["annotations"] = {"draquota.io/top-shard": str(top)}
    return obj


def load(index: ShardIndex, *objects: Obj, now: float = 0.0) -> list[RecordChange]:
    """Apply objects as the view has them; the changes, sorted by UID."""
    named = [(str(o["metadata"]["name"]), o) for o in objects]
    before = copy.deepcopy(named)
    changes = sorted(index.apply(named, now))
    assert named == before, "the index changed the objects handed in"
    return changes


def gone(index: ShardIndex, number: int, now: float = 0.0) -> list[RecordChange]:
    return sorted(index.apply([(f"{BASE}-{number}", None)], now))


# -- which entry is a UID's record ----------------------------------------------------------


@dataclass(frozen=True)
class RecordCase:
    id: str
    steps: list[list[tuple[int, Obj | None]]]  # loads, each a list of (index, shard or gone)
    changes: list[tuple[str, str | None, bool]]  # of the last load: (uid, charge, changed)
    holders: dict[str, set[int]] = field(default_factory=dict)


RECORD_CASES = [
    RecordCase(
        "a-new-record-is-a-changed-charge",
        [[(0, shard(0, entry("u1")))]],
        [("u1", "c1", True)],
        {"u1": {0}},
    ),
    RecordCase(
        "the-highest-shard-holding-a-uid-wins",
        [[(0, shard(0, entry("u1", "old")))], [(1, shard(1, entry("u1", "resized")))]],
        [("u1", "resized", True)],
        {"u1": {0, 1}},
    ),
    RecordCase(
        "the-same-charge-moved-to-another-shard-is-no-charge-change",
        [[(0, shard(0, entry("u1"), sealed=True))], [(1, shard(1, entry("u1")))]],
        [("u1", "c1", False)],
        {"u1": {0, 1}},
    ),
    RecordCase(
        "the-lower-entry-stands-once-the-higher-is-taken-out",
        [
            [(0, shard(0, entry("u1", "old"))), (1, shard(1, entry("u1", "resized")))],
            [(1, shard(1, version="2"))],
        ],
        [("u1", "old", True)],
        {"u1": {0}},
    ),
    RecordCase(
        "a-record-whose-last-shard-went-is-gone",
        [[(0, shard(0, entry("u1"), entry("u2")))], [(0, None)]],
        [("u1", None, True), ("u2", None, True)],
        {"u1": set(), "u2": set()},
    ),
    RecordCase(
        "an-unchanged-shard-changes-nothing",
        [[(0, shard(0, entry("u1")))], [(0, shard(0, entry("u1"), version="2"))]],
        [],
        {"u1": {0}},
    ),
    RecordCase(
        "a-head-holds-no-record",
        [[(0, shard(0, entry("u1"))), (-1, head(0))]],
        [("u1", "c1", True)],
        {"u1": {0}},
    ),
]


@pytest.mark.parametrize("case", RECORD_CASES, ids=lambda c: c.id)
def test_a_uids_record_is_the_entry_of_the_highest_shard_holding_it(case: RecordCase) -> None:
    index = ShardIndex()
    changes: list[RecordChange] = []
    for step in case.steps:
        named = [
            (f"{BASE}-head" if number < 0 else f"{BASE}-{number}", obj) for number, obj in step
        ]
        changes = sorted(index.apply(named, 0.0))
    got = [(c.uid, c.entry.charge if c.entry else None, c.charge_changed) for c in changes]
    assert got == case.changes
    for uid, numbers in case.holders.items():
        assert index.holders(uid) == {f"{BASE}-{n}" for n in numbers}
        assert index.has_record(uid) == bool(numbers)


# -- where new records go -------------------------------------------------------------------


@dataclass(frozen=True)
class ActiveCase:
    id: str
    shards: list[Obj]
    head: int | None  # the head's index, as the caller's view has it
    active: str  # name of the active shard
    version: str  # its resourceVersion ("": still to be created)
    top: int | None


ACTIVE_CASES = [
    ActiveCase("a-new-ledger-starts-at-shard-0", [], None, f"{BASE}-0", "", None),
    ActiveCase("the-highest-shard-loaded", [shard(0, entry("u1"))], None, f"{BASE}-0", "1", 0),
    ActiveCase(
        "after-a-sealed-top-the-next-to-create",
        [shard(0, entry("u1"), sealed=True)],
        0,
        f"{BASE}-1",
        "",
        0,
    ),
    ActiveCase(
        "a-head-ahead-of-the-view-names-a-shard-not-loaded",
        [shard(0, entry("u1"), sealed=True)],
        2,
        f"{BASE}-2",
        "",
        2,
    ),
    ActiveCase(
        "a-head-behind-the-view-is-overruled-by-the-highest-loaded",
        [shard(0, sealed=True), shard(3, entry("u1"), version="7")],
        1,
        f"{BASE}-3",
        "7",
        3,
    ),
]


@pytest.mark.parametrize("case", ACTIVE_CASES, ids=lambda c: c.id)
def test_new_records_go_to_the_highest_shard_created_unless_sealed(case: ActiveCase) -> None:
    index = ShardIndex()
    load(index, *case.shards)
    active = index.active(BASE, case.head)
    assert (active.name, active.resource_version) == (case.active, case.version)
    assert index.top(BASE, case.head) == case.top


def test_the_top_falls_back_to_the_next_highest_when_the_highest_goes() -> None:
    index = ShardIndex()
    load(index, shard(0, entry("u0")), shard(2, entry("u2")), shard(5, entry("u5")))
    gone(index, 5)
    assert index.top(BASE, None) == 2
    gone(index, 2)
    gone(index, 0)
    assert index.top(BASE, None) is None


def test_the_active_shard_holds_the_entries_as_loaded() -> None:
    index = ShardIndex()
    load(index, shard(0, entry("u1"), entry("u2")))
    assert [e.id for e in index.active(BASE, 0).entries] == ["u1", "u2"]
    assert [e.id for e in index.entries(f"{BASE}-0")] == ["u1", "u2"]
    assert index.entries(f"{BASE}-9") == []


# -- reservations: counted on this replica's clock --------------------------------------------


def test_a_record_expires_by_when_this_replica_first_saw_it_not_by_its_reserved_at() -> None:
    index = ShardIndex()
    written_long_ago = Reservation("u1", "queue-a", "ns/p", "c1", reserved_at=1.0)
    load(index, shard(0, written_long_ago), now=1000.0)
    assert not index.expired("u1", 1000.0 + TTL, TTL)
    assert index.expired("u1", 1000.0 + TTL + 1, TTL)
    load(index, shard(1, entry("u1", "resized")), now=2000.0)  # a resize: seen before
    assert index.expired("u1", 1000.0 + TTL + 1, TTL)


def test_reservations_lapse_oldest_first_and_each_once() -> None:
    index = ShardIndex()
    load(index, shard(0, entry("old")), now=0.0)
    load(index, shard(0, entry("old"), entry("new"), version="2"), now=50.0)
    index.decided("mine", 55.0)
    reserved = {"old", "new", "mine"}
    assert index.lapsed(60.0, TTL, reserved.__contains__) == []
    assert index.lapsed(61.0, TTL, reserved.__contains__) == ["old"]
    reserved.discard("mine")  # its pod came: it counts with the pod now
    assert index.lapsed(62.0, TTL, reserved.__contains__) == []  # "new" is older, in time
    assert index.lapsed(111.0, TTL, reserved.__contains__) == ["new", "mine"]
    assert index.lapsed(999.0, TTL, reserved.__contains__) == []


def test_a_record_gone_takes_its_first_seen_time_along() -> None:
    index = ShardIndex()
    load(index, shard(0, entry("u1")), now=0.0)
    gone(index, 0)
    assert not index.expired("u1", 1e9, TTL)
    assert index.lapsed(1e9, TTL, lambda uid: True) == []
    load(index, shard(1, entry("u1")), now=500.0)  # back: first seen again
    assert not index.expired("u1", 500.0 + TTL, TTL)


# -- what the reconciler looks for ---------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "sealed", "sparse"),
    [
        pytest.param(1, True, True, id="sealed-and-a-quarter-full-exactly"),
        pytest.param(1, False, False, id="the-unsealed-shard-is-never-sparse"),
        pytest.param(0, True, False, id="an-empty-shard-is-deleted-not-compacted"),
        pytest.param(2, True, False, id="over-a-quarter-full"),
    ],
)
def test_a_sparse_shard_is_sealed_and_a_quarter_full_or_less(
    entries: int, sealed: bool, sparse: bool
) -> None:
    held = [entry(f"u{i}") for i in range(entries)]
    limit = 4 * entry("u0").size  # a shard of this many bytes is a quarter full with one
    index = ShardIndex()
    load(index, shard(0, *held, sealed=sealed))
    assert index.sparse(f"{BASE}-0", limit) is sparse


def test_an_empty_shard_is_named_after_its_grace_with_the_version_it_was_seen_empty_at() -> None:
    index = ShardIndex()
    load(index, shard(0, entry("u1")), shard(1, entry("u2")), now=0.0)
    load(index, shard(0, version="5"), now=10.0)
    assert index.empty_for(69.0, 60.0) == []
    assert index.empty_for(70.0, 60.0) == [(f"{BASE}-0", "5")]
    load(index, shard(0, entry("late"), version="6"), now=71.0)  # written again: not empty
    assert index.empty_for(1000.0, 60.0) == []
    load(index, shard(0, version="7"), now=100.0)
    index.forget_empty(f"{BASE}-0")  # deleted; its DELETED event comes later
    assert index.empty_for(1000.0, 60.0) == []


def test_a_base_is_its_name_without_the_index_or_head() -> None:
    assert base_of("cohort-a-b-12") == "cohort-a-b"
    assert base_of("queue-x-head") == "queue-x"
