"""The default work budget never turns a realistic claim that the allocator places into
"too complex" (issue 27), and skipping twin devices never changes what is placed.

The generated claims (`realistic.py`: firstAvailable lists, partitions of 8 GPUs sharing
counters, matchAttribute) were answered once without any budget and without skipping
twins (`record_realistic.py`); here the bounded allocator, with one node's share of the
default budget, must give the same devices for every case that was placed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from quota.allocator import Budget, BudgetExceeded, DeviceID, allocate
from quota.allocator.budget import NODE_SEARCH_STEPS, NodeUndecided
from tests.quota.allocator import realistic
from tests.quota.allocator.record_realistic import FIXTURE

RECORDED: dict[str, Any] = json.loads(FIXTURE.read_text())
CASES = realistic.cases()
SLICES, CLASSES, NODE = realistic.slices(), realistic.classes(), realistic.node()


def _bounded(case: realistic.RealisticCase) -> tuple[Any, Budget]:
    """Picks per claim, None (cannot be placed) or "too complex", as placement asks one node."""
    budget = Budget()
    budget.node_limit = NODE_SEARCH_STEPS
    allocated = frozenset(DeviceID(realistic.DRIVER, realistic.NODE, d) for d in case.allocated)
    try:
        results = allocate(list(case.claims), NODE, SLICES, CLASSES, allocated, budget=budget)
    except (BudgetExceeded, NodeUndecided):
        return "too complex", budget
    if results is None:
        return None, budget
    return [
        [[r["request"], r["device"]] for r in claim["devices"]["results"]] for claim in results
    ], budget


def test_the_recording_is_of_these_cases() -> None:
    assert sorted(RECORDED) == sorted(c.id for c in CASES)
    placed = [v for v in RECORDED.values() if isinstance(v, list)]
    assert len(placed) > len(CASES) // 2  # the generator makes mostly placeable claims


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_realistic_claims_place_as_without_a_budget(case: realistic.RealisticCase) -> None:
    expected = RECORDED[case.id]
    answer, budget = _bounded(case)
    if isinstance(expected, list):
        assert answer == expected, f"used {budget.used_steps} steps"
    elif expected is None:
        assert answer in (None, "too complex")  # unplaceable: proven or given up on
