"""Property: the depth-first search finds a solution exactly when one exists.

A brute force over all combinations of free devices per request (with the claim's
matchAttribute constraint) must agree with `allocate()` on random small clusters,
and every solution `allocate()` returns must be valid.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.allocator import DeviceID, allocate
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

NUMA = f"{DRIVER_A}/numa"


def _cluster(numas: list[int]) -> tuple[dict[str, Any], ...]:
    devices = [device(f"device-{i}", attrs={"numa": n}) for i, n in enumerate(numas)]
    return (slice_("slice-1", "pool-1", devices=devices),)


def _brute_force(numas: list[int], taken: set[int], counts: list[int], match: bool) -> bool:
    free = [i for i in range(len(numas)) if i not in taken]

    def assign(k: int, used: frozenset[int], value: int | None) -> bool:
        if k == len(counts):
            return True
        for combo in itertools.combinations([i for i in free if i not in used], counts[k]):
            values = {numas[i] for i in combo}
            if match and (len(values) > 1 or (value is not None and values - {value})):
                continue
            next_value = value if value is not None or not values else next(iter(values))
            if assign(k + 1, used | set(combo), next_value):
                return True
        return False

    return assign(0, frozenset(), None)


@settings(max_examples=80, deadline=None)
@given(
    numas=st.lists(st.integers(0, 2), min_size=0, max_size=7),
    counts=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    match=st.booleans(),
    data=st.data(),
)
def test_search_agrees_with_brute_force(
    numas: list[int], counts: list[int], match: bool, data: st.DataObject
) -> None:
    taken = data.draw(st.sets(st.integers(0, max(0, len(numas) - 1)), max_size=len(numas)))
    taken &= set(range(len(numas)))
    constraints = [{"matchAttribute": NUMA}] if match else None
    spec = claim(
        *(request(f"req-{k}", count=c) for k, c in enumerate(counts)), constraints=constraints
    )
    results = allocate(
        [spec],
        node(),
        _cluster(numas),
        [device_class(CLASS_A, DRIVER_A)],
        allocated=frozenset(DeviceID(DRIVER_A, "pool-1", f"device-{i}") for i in taken),
    )
    assert (results is not None) == _brute_force(numas, taken, counts, match)
    if results is None:
        return
    picked = [int(r["device"].split("-")[1]) for r in results[0]["devices"]["results"]]
    assert len(picked) == sum(counts) == len(set(picked))
    assert not set(picked) & taken
    if match:
        assert len({numas[i] for i in picked}) == 1
