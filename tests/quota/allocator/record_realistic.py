"""Record what the allocator answers, without any budget and without skipping twin devices
(upstream's exact search tree), for the realistic generated claims.

    .venv/bin/python -m tests.quota.allocator.record_realistic

writes `realistic_results.json` beside this file; `test_realistic_budget.py` compares the
bounded allocator against it. Run it again only when the generator changes: the recorded
answers are the reference, not something to refresh until a test passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quota.allocator import Budget, BudgetExceeded, DeviceID, gather_pools, parse_slice
from quota.allocator.search import Search
from quota.claimspec import parse_claim_spec
from quota.deviceclasses import parse_device_class
from tests.quota.allocator import realistic

FIXTURE = Path(__file__).with_name("realistic_results.json")
# Beyond this many steps the answer is recorded as unknown (never compared): a search that
# long is no claim anyone would call realistic, with or without a budget.
RECORD_STEPS = 2_000_000


def picks(search: Search) -> list[list[list[str]]]:
    """Per claim, the (request, device) pairs chosen, in result order."""
    return [[[p.request.result_name, p.candidate.device.name] for p in c] for c in search.results]


def answer(case: realistic.RealisticCase) -> Any:
    """The picks, None when the claims cannot be placed, "unknown" beyond RECORD_STEPS."""
    node = realistic.node()
    pools = gather_pools([parse_slice(s) for s in realistic.slices()], node)
    classes = {c.name: c for c in map(parse_device_class, realistic.classes())}
    specs = [
        parse_claim_spec(c, "v1", f"ResourceClaim claim-{i}") for i, c in enumerate(case.claims)
    ]
    allocated = frozenset(DeviceID(realistic.DRIVER, realistic.NODE, d) for d in case.allocated)
    search = Search(
        specs,
        [f"claim-{i}" for i in range(len(specs))],
        node,
        pools,
        classes,
        allocated,
        budget=Budget(steps=RECORD_STEPS, cel_cost=10**15),
        prune=False,
    )
    search.prepare()
    try:
        return picks(search) if search.run() else None
    except BudgetExceeded:
        return "unknown"


def main() -> None:
    recorded = {case.id: answer(case) for case in realistic.cases()}
    FIXTURE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    placed = sum(1 for v in recorded.values() if isinstance(v, list))
    unknown = sum(1 for v in recorded.values() if v == "unknown")
    print(f"{FIXTURE}: {len(recorded)} cases, {placed} placed, {unknown} unknown")


if __name__ == "__main__":
    main()
