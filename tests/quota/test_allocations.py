"""Claim holdings kept per claim agree with a recount of every claim, whatever the changes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.allocations import ClaimAllocations, allocated_by
from quota.allocator.devices import DeviceID

DRIVER = "gpu.example.com"
POOLS = ["node-a", "node-b", "net"]
CLAIMS = [("team-a", f"c{i}") for i in range(5)]


@st.composite
def result(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request": "r",
        "driver": DRIVER,
        "pool": draw(st.sampled_from(POOLS)),
        "device": f"d{draw(st.integers(0, 3))}",
    }
    kind = draw(st.sampled_from(["exclusive", "shared", "admin"]))
    if kind == "shared":
        out["shareID"] = f"s{draw(st.integers(0, 9))}"
        out["consumedCapacity"] = {"memory": draw(st.sampled_from(["1Gi", "512Mi", "x"]))}
    elif kind == "admin":
        out["adminAccess"] = True
    return out


def claim(key: tuple[str, str], results: list[dict[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "ResourceClaim",
        "metadata": {"namespace": key[0], "name": key[1]},
        "spec": {},
    }
    if results:
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


CHANGES = st.lists(
    st.tuples(
        st.sampled_from(CLAIMS), st.one_of(st.none(), st.lists(result(), min_size=0, max_size=3))
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(CHANGES)
def test_updating_claim_by_claim_equals_recounting_every_claim(
    changes: list[tuple[tuple[str, str], list[dict[str, Any]] | None]],
) -> None:
    claims: dict[tuple[str, str], dict[str, Any]] = {}
    holdings = ClaimAllocations()
    for key, results in changes:
        before = holdings.snapshot()
        if results is None:
            claims.pop(key, None)
            touched = holdings.update([(key, None)])
        else:
            claims[key] = claim(key, results)
            touched = holdings.update([(key, claims[key])])
        after = holdings.snapshot()
        assert after == allocated_by(claims.values())
        changed = (after.exclusive ^ before.exclusive) | (after.shared ^ before.shared)
        assert {(d.driver, d.pool) for d in changed} <= touched
        for own in CLAIMS:
            others = [obj for k, obj in claims.items() if k != own]
            # a pod may name its shared claim in two entries
            assert holdings.without([own, own]) == allocated_by(others)
        assert holdings.snapshot() == allocated_by(claims.values())
    assert holdings.snapshot() == ClaimAllocations(claims.items()).snapshot()


def test_a_snapshot_is_not_changed_by_later_updates() -> None:
    first = claim(CLAIMS[0], [{"driver": DRIVER, "pool": "node-a", "device": "d0"}])
    holdings = ClaimAllocations([(CLAIMS[0], first)])
    snapshot = holdings.snapshot()
    assert holdings.update([(CLAIMS[0], None)]) == {(DRIVER, "node-a")}
    assert snapshot.exclusive == {DeviceID(DRIVER, "node-a", "d0")}
    assert not holdings.snapshot()


def test_a_device_two_claims_hold_stays_allocated_until_both_let_go() -> None:
    device = {"driver": DRIVER, "pool": "node-a", "device": "d0"}
    a, b = CLAIMS[:2]
    holdings = ClaimAllocations([(a, claim(a, [device])), (b, claim(b, [device]))])
    holdings.update([(a, None)])
    assert DeviceID(DRIVER, "node-a", "d0") in holdings.snapshot().exclusive
    holdings.update([(b, claim(b, []))])
    assert not holdings.snapshot()


def test_an_unchanged_claim_touches_no_pool() -> None:
    obj = claim(CLAIMS[0], [{"driver": DRIVER, "pool": "node-a", "device": "d0"}])
    holdings = ClaimAllocations([(CLAIMS[0], obj)])
    snapshot = holdings.snapshot()
    assert holdings.update([(CLAIMS[0], obj)]) == set()
    assert holdings.snapshot() is snapshot
