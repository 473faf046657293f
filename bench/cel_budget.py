"""The CPU one placement question may take at most: the worst questions built against the
work budget (CEL list-literal flood, a search that explodes, the heaviest realistic claims),
each against an ordinary pod's question measured in the same run.

    .venv/bin/python bench/cel_budget.py
"""

from __future__ import annotations

import time
from typing import Any

from quota.placement import make_placer
from tests.robustness.hostile import node_objects, unsatisfiable_constraint_spec
from tests.security.test_cel_budget import _claim, _flood
from webhook.store.clusterstate import ClusterState


def _cpu(placer: Any, claims: list[Any], repeat: int = 5) -> tuple[float, Any]:
    best, answer = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        answer = placer(claims, None)
        best = min(best, time.process_time() - start)
    return best, answer


def main() -> None:
    state = ClusterState(node_objects(nodes=20))
    one = {
        "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]}
    }
    ordinary, _ = _cpu(make_placer(state), [_claim("one", one)])
    cases = {
        "cel-flood (16 requests x 4 selectors of 300 literals)": lambda i: [
            _claim(f"f{i}", _flood(i))
        ],
        "search explodes (unsatisfiable matchAttribute)": lambda i: [
            _claim(f"x{i}", unsatisfiable_constraint_spec())
        ],
    }
    print(f"ordinary pod: {ordinary * 1e3:.2f} ms CPU")
    for name, claims in cases.items():
        worst = 0.0
        for i in range(5):  # fresh placer and new selectors: nothing remembered
            spent, answer = _cpu(make_placer(state), claims(i), repeat=1)
            worst = max(worst, spent)
        print(
            f"{name}: {worst * 1e3:.1f} ms CPU ({worst / ordinary:.0f}x ordinary), "
            f"steps {answer.steps}, cost {answer.cost}, too complex {answer.too_complex}"
        )


if __name__ == "__main__":
    main()
