"""The search explores the same tree as the scheduler's incubating allocator.

Upstream counts its recursive `allocateOne` calls in a few shared test cases; equal
counts mean combinations (not permutations), the same pruning on the 32-result
limit and the same backtracking order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from quota.allocator import gather_pools, parse_slice
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
    subrequest,
)

TYPE_X = 'device.attributes["driver-a"].type == "X"'
TYPE_Y = 'device.attributes["driver-a"].type == "Y"'
XYY = (
    device("device-1", attrs={"type": "X"}),
    device("device-2", attrs={"type": "Y"}),
    device("device-3", attrs={"type": "Y"}),
)


def _alternatives(name: str, first: dict, second: dict) -> dict:
    return {"name": name, "firstAvailable": [first, second]}


@dataclass(frozen=True)
class Shape:
    id: str
    claim: ClaimSpec
    slices: tuple[dict, ...]
    ok: bool
    steps: int


SHAPES = (
    Shape(
        "check-combinations-within-single-request-single-pool-single-slice",
        claim(request("req-0", count=5)),
        (slice_("slice-1", "pool-1", devices=[f"device-{i}" for i in range(4)]),),
        False,
        16,
    ),
    Shape(
        "check-combinations-within-single-request-single-pool-multiple-slices",
        claim(request("req-0", count=5)),
        (
            slice_("slice-1", "pool-1", devices=["device-0", "device-1"], count=2),
            slice_("slice-2", "pool-1", devices=["device-2", "device-3"], count=2),
        ),
        False,
        16,
    ),
    Shape(
        "check-combinations-with-backtracking",
        claim(request("req-0", count=2), request("req-1", selectors=[TYPE_X])),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    device("device-1", attrs={"type": "X"}),
                    device("device-2", attrs={"type": "Y"}),
                    device("device-3", attrs={"type": "Y"}),
                ],
            ),
        ),
        True,
        12,
    ),
    Shape(
        "check-combinations-with-backtracking-across-slices-and-pools",
        claim(request("req-1", count=2), request("req-2", selectors=[TYPE_X])),
        (
            slice_("slice-1", "pool-1", devices=[XYY[0]], count=2),
            slice_("slice-2", "pool-1", devices=[XYY[1]], count=2),
            # Binding conditions put pool-2 last in the search order.
            slice_("slice-3", "pool-2", devices=[XYY[2] | {"bindingConditions": ["IsPrepared"]}]),
        ),
        True,
        12,
    ),
    Shape(
        "check-combinations-with-prioritized-list",
        claim(
            _alternatives(
                "req-1",
                subrequest("subReq-0", count=3, selectors=[TYPE_Y]),
                subrequest("subReq-1", count=2),
            ),
            _alternatives(
                "req-2", subrequest("subReq-0", count=2), subrequest("subReq-1", selectors=[TYPE_X])
            ),
        ),
        (slice_("slice-1", "pool-1", devices=list(XYY)),),
        True,
        26,
    ),
    Shape(
        "prioritized-list-max-allocation-limit-request",
        claim(
            _alternatives(
                "req-0", subrequest("subReq-0", count=32), subrequest("subReq-1", count=16)
            ),
            _alternatives(
                "req-1", subrequest("subReq-0", count=32), subrequest("subReq-1", count=16)
            ),
        ),
        (slice_("slice-1", "pool-1", devices=[f"device-{i}" for i in range(64)]),),
        True,
        75,
    ),
    Shape(
        "prioritized-list-max-allocation-allocation-mode-all",
        claim(
            _alternatives(
                "req-0",
                subrequest("subReq-0", allocationMode="All"),
                subrequest("subReq-1", count=2),
            ),
            request("req-1", count=2),
        ),
        (slice_("slice-1", "pool-1", devices=[f"device-{i}" for i in range(31)]),),
        True,
        42,
    ),
)


def _search(shape: Shape, prune: bool) -> Search:
    classes = {CLASS_A: parse_device_class(device_class(CLASS_A, DRIVER_A))}
    pools = gather_pools([parse_slice(s) for s in shape.slices], node())
    search = Search([shape.claim], ["claim-0"], node(), pools, classes, frozenset(), prune=prune)
    search.prepare()
    return search


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_search_tree_matches_upstream(shape: Shape) -> None:
    search = _search(shape, prune=False)
    assert search.run() is shape.ok
    assert search.steps == shape.steps


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_skipping_twin_devices_finds_the_same_devices_in_fewer_steps(shape: Shape) -> None:
    # Devices alike but for their name (device-0..3 here, or the two of type Y) fail alike:
    # after one fails at a point of the search, its twins are not tried there.
    exact, pruned = _search(shape, prune=False), _search(shape, prune=True)
    assert pruned.run() is exact.run() is shape.ok
    assert pruned.results == exact.results and pruned.selected == exact.selected
    assert pruned.steps <= exact.steps
