"""Runs the allocator case table: results, "cannot be placed" and errors are distinct outcomes."""

from __future__ import annotations

import copy

import pytest

from quota.allocator import AllocationError, DeviceID, allocate
from tests.quota.allocator.cases import CASES, Case, Error


def _run(case: Case) -> object:
    return allocate(
        list(case.claims),
        case.node,
        case.slices,
        case.classes,
        allocated=frozenset(DeviceID(*d) for d in case.allocated),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_allocator_case(case: Case) -> None:
    before = copy.deepcopy((case.slices, case.classes, case.node))
    if isinstance(case.expect, Error):
        with pytest.raises(AllocationError) as info:
            _run(case)
        assert case.expect.text in str(info.value)
    else:
        assert _run(case) == case.expect
        assert _run(case) == case.expect, "allocation must be deterministic"
    assert (case.slices, case.classes, case.node) == before, "inputs must not be mutated"


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
