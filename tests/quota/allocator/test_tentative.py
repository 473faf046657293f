"""A search's tentative allocations, and the twins it may skip (quota/allocator/tentative.py,
twins.py): what an undo gives back, and which devices count as alike."""

from __future__ import annotations

from typing import Any

import pytest

from quota.allocator import AllocationError, DeviceID, gather_pools, parse_slice
from quota.allocator.search import Search
from quota.claimspec import ClaimSpec
from quota.deviceclasses import parse_device_class
from tests.quota.allocator.builders import (
    CLASS_A,
    DRIVER_A,
    claim,
    device,
    device_class,
    node,
    request,
    slice_,
)

NUMA = {"numa": 0}
OTHER_NUMA = {"numa": 1}


def _search(spec: ClaimSpec, *slices: dict[str, Any], allocated: frozenset = frozenset()) -> Search:
    classes = {CLASS_A: parse_device_class(device_class(CLASS_A, DRIVER_A))}
    pools = gather_pools([parse_slice(s) for s in slices], node())
    search = Search([spec], ["claim-0"], node(), pools, classes, allocated)
    search.prepare()
    return search


def _same_numa(*requests: dict[str, Any]) -> ClaimSpec:
    return claim(*requests, constraints=[{"matchAttribute": "driver-a/numa"}])


def test_undo_gives_back_the_device_and_the_constraint() -> None:
    devices = [device("d0", attrs=NUMA), device("d1", attrs=OTHER_NUMA), device("d2", attrs=NUMA)]
    slices = slice_("s", "pool-1", devices=devices)
    search = _search(_same_numa(request("a", count=2)), slices)
    tentative, (d0, d1, d2) = search.tentative, search.candidates.items
    req = search.requests[0][0][0]
    undo = tentative.allocate(req, d0, must=False)
    assert undo is not None and tentative.in_use(req, d0.device)
    assert tentative.allocate(req, d1, must=False) is None  # another NUMA node than d0
    undo()
    assert tentative.picks == [[]] and not tentative.in_use(req, d0.device)
    # the constraint no longer remembers d0's NUMA node: d1 fits now, then d2 does not
    assert tentative.allocate(req, d1, must=False) is not None
    assert tentative.allocate(req, d2, must=False) is None
    assert [pick.candidate for pick in tentative.picks[0]] == [d1]


def test_a_constraint_broken_by_all_devices_is_invalid_input_naming_claim_and_request() -> None:
    slices = slice_(
        "s", "pool-1", devices=[device("d0", attrs=NUMA), device("d1", attrs=OTHER_NUMA)]
    )
    search = _search(_same_numa(request("a", allocationMode="All")), slices)
    req = search.requests[0][0][0]
    assert req.all_devices is not None and len(req.all_devices) == 2
    assert search.tentative.allocate(req, req.all_devices[0], must=True) is not None
    with pytest.raises(AllocationError) as caught:
        search.tentative.allocate(req, req.all_devices[1], must=True)
    assert (caught.value.claim, caught.value.request) == ("claim-0", "a")
    assert [pick.candidate for pick in search.tentative.picks[0]] == [req.all_devices[0]]


def test_a_device_held_outside_the_search_is_held_for_good() -> None:
    held = DeviceID(DRIVER_A, "pool-1", "d0")
    search = _search(
        claim(request("a")),
        slice_("s", "pool-1", devices=["d0", "d1"]),
        allocated=frozenset({held}),
    )
    req = search.requests[0][0][0]
    d0, d1 = search.candidates.items
    assert search.tentative.held(req, d0) and not search.tentative.held(req, d1)
    assert list(search.candidates.usable(req, 0)) == [1]


def test_devices_alike_but_for_their_name_are_twins_within_one_slice() -> None:
    alike = [device("d0", attrs=NUMA), device("d1", attrs=NUMA), device("d2", attrs=OTHER_NUMA)]
    shareable = [device(f"f{i}", allowMultipleAllocations=True) for i in range(2)]
    search = _search(
        claim(request("a")),
        slice_("s", "pool-1", devices=alike, count=2),
        slice_("t", "pool-1", devices=[device("e0", attrs=NUMA)], count=2),
        slice_("u", "pool-3", devices=shareable),
    )
    names = [c.device.name for c in search.candidates.items]
    key = {name: search.twins.of(i) for i, name in enumerate(names)}
    assert key["d0"] is not None and key["d0"] == key["d1"]
    assert key["d2"] != key["d0"]  # another attribute
    assert key["e0"] != key["d0"]  # another slice of the same pool
    assert key["f0"] is None and key["f1"] is None  # shareable: told apart by capacity use
