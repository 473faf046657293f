"""QuotaLedger objects (webhook/ledger/reservations.py): the entries a shard holds as the API
server stores them, shard and head names, and which ledger a ClusterQueue's records go to.

Reservations expiring by their TTL is the ledger's rule, not this module's: it is tested in
tests/webhook/ledger/test_cluster.py and tests/webhook/ledger/test_memory.py.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from quota.charge import Charge
from tests.recorded import recorded
from webhook.ledger.reservations import (
    SHARD_BYTES,
    TOP_ANNOTATION,
    Reservation,
    Shard,
    head_name,
    head_object,
    head_top,
    ledger_base,
    ledger_object,
    shard_index,
    shard_name,
    shards_of,
)
from webhook.store.clusterstate import ClusterState

CHARGE = Charge("gpus", "team-a/default", {"gpu": "a100"}, {"gpu": 1}, {"gpu.example.com": 1})
RESERVED_AT = 1_800_000_000.0


def _entry(uid: str, at: float = RESERVED_AT) -> Reservation:
    return Reservation(uid, "gpus", f"team-a/{uid}", CHARGE.to_annotation(), at)


def _stored(body: dict[str, Any], version: str = "7") -> dict[str, Any]:
    """The object as the API server answers it: the body plus a resourceVersion, via JSON."""
    stored: dict[str, Any] = orjson.loads(orjson.dumps(body))
    stored["metadata"]["resourceVersion"] = version
    return stored


def test_a_shard_written_and_read_back_holds_the_same_entries_and_seal() -> None:
    entries = [_entry("u1"), _entry("u2", at=0.0)]
    for sealed in (False, True):
        shard = Shard.of(_stored(ledger_object(Shard("queue-gpus-3"), entries, sealed)))
        assert shard.entries == tuple(entries)
        assert (shard.name, shard.index, shard.sealed) == ("queue-gpus-3", 3, sealed)
        assert shard.resource_version == "7"


def test_the_reservation_time_is_written_for_people_in_utc() -> None:
    document = _entry("u1").to_dict()
    assert document["reservedAt"] == "2027-01-15T08:00:00Z"
    assert "reservedAt" not in _entry("u1", at=0.0).to_dict()


def test_an_update_carries_the_resource_version_read_and_a_create_none() -> None:
    update = ledger_object(Shard("queue-gpus-0", resource_version="41"), [], False)
    create = ledger_object(Shard("queue-gpus-0"), [], False)
    assert update["metadata"]["resourceVersion"] == "41"
    assert "resourceVersion" not in create["metadata"]
    assert (create["apiVersion"], create["kind"]) == ("draquota.io/v1beta1", "QuotaLedger")


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("not-an-object", id="not-a-mapping"),
        pytest.param({"clusterQueue": "gpus", "charge": "{}"}, id="no-id"),
        pytest.param({"id": "u", "charge": "{}"}, id="no-queue"),
        pytest.param({"id": "u", "clusterQueue": "gpus"}, id="no-charge"),
        pytest.param({"id": 7, "clusterQueue": "gpus", "charge": "{}"}, id="id-not-text"),
    ],
)
def test_an_entry_that_is_not_a_record_is_skipped_and_the_others_kept(bad: Any) -> None:
    body = ledger_object(Shard("queue-gpus-0"), [_entry("u1")], False)
    body["spec"]["reservations"].insert(0, bad)
    assert [e.id for e in Shard.of(_stored(body)).entries] == ["u1"]


@pytest.mark.parametrize("sealed", ["true", 1, "yes"])
def test_only_a_boolean_true_seals_a_shard(sealed: Any) -> None:
    body = ledger_object(Shard("queue-gpus-0"), [], False)
    body["spec"]["sealed"] = sealed
    assert not Shard.of(body).sealed


def test_reading_a_shard_again_reuses_the_entries_already_known() -> None:
    known = {e.id: e for e in (_entry("u1"), _entry("u2"))}
    body = ledger_object(Shard("queue-gpus-0"), list(known.values()), False)
    body["spec"]["reservations"][1]["pod"] = "team-a/changed"
    again = Shard.of(_stored(body), known)
    assert again.entries[0] is known["u1"]
    assert again.entries[1] is not known["u2"] and again.entries[1].pod == "team-a/changed"


def test_a_shards_size_bounds_the_json_of_its_entries() -> None:
    entries = [_entry(f"uid-{i:04d}") for i in range(40)]
    shard = Shard("queue-gpus-0", tuple(entries))
    written = orjson.dumps(ledger_object(shard, entries, False)["spec"]["reservations"])
    assert len(written) <= shard.size() <= len(written) + 2 * len(entries)
    assert entries[0].size * 2 < SHARD_BYTES  # a shard holds more than one record


def test_an_entry_whose_charge_cannot_be_read_has_no_charge() -> None:
    assert _entry("u1").parsed_charge() == CHARGE
    assert Reservation("u2", "gpus", "team-a/u2", "not json").parsed_charge() is None


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("queue-gpus-0", 0),
        ("cohort-lab-12", 12),
        ("cohort-a-b-3", 3),
        ("queue-gpus-999999", 999999),
        ("queue-gpus-1000000", None),
        ("cohort-lab-head", None),
        ("other-gpus-1", None),
        ("queue-gpus", None),
    ],
)
def test_shard_names_carry_their_index(name: str, index: int | None) -> None:
    assert shard_index(name) == index
    if index is not None:
        assert shard_name(name.rsplit("-", 1)[0], index) == name


def test_shards_are_grouped_by_ledger_in_index_order_and_heads_are_not_shards() -> None:
    names = ["cohort-lab-10", "cohort-lab-9", "queue-gpus-0", "cohort-lab-head", "unrelated"]
    objects = [ledger_object(Shard(n), [], False) for n in names]
    grouped = shards_of(objects)
    assert {base: [s.name for s in shards] for base, shards in grouped.items()} == {
        "cohort-lab": ["cohort-lab-9", "cohort-lab-10"],
        "queue-gpus": ["queue-gpus-0"],
    }


def test_a_head_says_which_index_was_created_last() -> None:
    head = head_object("cohort-lab", 4, resource_version="12")
    assert head["metadata"]["name"] == head_name("cohort-lab") == "cohort-lab-head"
    assert head["metadata"]["resourceVersion"] == "12"
    assert head_top(_stored(head)) == 4
    assert shard_index(head["metadata"]["name"]) is None


@pytest.mark.parametrize("value", ["x", "-1", "1.5", "1234567", "", None])
def test_a_head_whose_index_cannot_be_read_is_not_trusted(value: Any) -> None:
    head = head_object("cohort-lab", 1)
    head["metadata"]["annotations"] = {TOP_ANNOTATION: value}
    assert head_top(head) is None
    assert head_top(None) is None


def test_a_cluster_queue_in_a_cohort_records_in_the_cohorts_ledger() -> None:
    state = ClusterState(recorded("ClusterQueue"))
    for queue in state.list("ClusterQueue"):
        cohort = queue["spec"].get("cohort")
        name = queue["metadata"]["name"]
        expected = f"cohort-{cohort}" if cohort else f"queue-{name}"
        assert ledger_base(state, name) == expected
    assert {q["spec"].get("cohort") for q in state.list("ClusterQueue")} == {"lab"}
    alone = recorded("ClusterQueue")[0]
    del alone["spec"]["cohort"]
    state.upsert(alone)
    assert ledger_base(state, alone["metadata"]["name"]) == f"queue-{alone['metadata']['name']}"
    assert ledger_base(state, "unknown") == "queue-unknown"
