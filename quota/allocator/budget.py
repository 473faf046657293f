"""Deterministic work budgets of one placement question: search steps and CEL cost.

Admission must answer every pod quickly, so the work one question may cause is
counted, never timed: the depth-first search spends one step per call of its
recursive step (the upstream allocator's `allocateOne` invocations), one per usable
device it tries there, and one the first time it looks at a device for a request (a
large shared pool is work even without recursion; looks that memoisation saves are
not charged again), and every
CEL evaluation spends its estimated cost (`quota.allocator.celcost`) before it
runs. Counting makes the outcome reproducible: the same claims on the same
cluster always run out at the same point, on any machine and under any load.

Running out is its own outcome, `BudgetExceeded`: not "cannot be placed" (no
answer was found either way) and not invalid input (the claims are well formed;
they are too complex for admission to check).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quota.allocator.errors import BudgetExceeded

__all__ = [
    "COMPILE_COST_PER_CHARACTER",
    "DEFAULT_CEL_COST",
    "DEFAULT_SEARCH_STEPS",
    "EVALUATION_COST_LIMIT",
    "NODE_SEARCH_STEPS",
    "Budget",
    "NodeUndecided",
]

# Search steps of one placement question, across all nodes tried (nodes identical to
# one already searched are not searched again). An ordinary pod needs a few steps per
# claim and device; the realistic generated claims (tests/quota/allocator/realistic.py)
# need at most about 2 600. With the CEL budget, one question stays well under 50 ms of
# CPU (bench/cel_budget.py).
DEFAULT_SEARCH_STEPS = 8_000
# Steps one node's search may take before placement leaves it undecided and tries the
# next node: one pathological node (say 8 one-device claims and 8 devices, one of them
# tainted: 8! orders) cannot use the whole budget while another node would fit at once.
NODE_SEARCH_STEPS = 4_000
# The API server's limit for one DRA selector (resourceapi.CELSelectorExpressionMaxCost).
EVALUATION_COST_LIMIT = 1_000_000
# CEL cost of one placement question, across all evaluations (memoised results are free);
# a unit is calibrated to at most ~42 ns of this CEL runtime on the costliest shapes.
DEFAULT_CEL_COST = 300_000
# Compiling costs about as much per character as a few dozen evaluation steps; every
# distinct expression of a question is charged once, cached or not, so the charge does
# not depend on what earlier questions compiled.
COMPILE_COST_PER_CHARACTER = 20


class NodeUndecided(Exception):
    """One node's search used its share of the steps (`Budget.node_limit`); never escapes
    placement, which moves on to the next node."""

    def __init__(self, used: int) -> None:
        self.used = used
        super().__init__(f"node search stopped after step {used}")


@dataclass
class Budget:
    """Steps and CEL cost left for one placement question; not thread-safe (one per question)."""

    steps: int = DEFAULT_SEARCH_STEPS
    cel_cost: int = DEFAULT_CEL_COST
    evaluation_cost: int = EVALUATION_COST_LIMIT
    used_steps: int = 0
    used_cost: int = 0
    node_limit: int | None = None  # used_steps past which the current node is left undecided
    node_steps: int | None = NODE_SEARCH_STEPS  # one node's share (None: no share, no limit)
    compiled: set[str] = field(default_factory=set)

    def step(self, claim: str = "", request: str = "") -> None:
        """Spend one search step; BudgetExceeded once more than `steps` were spent."""
        self.used_steps += 1
        if self.used_steps > self.steps:
            raise BudgetExceeded("steps", self.used_steps, self.steps, claim, request)
        if self.node_limit is not None and self.used_steps > self.node_limit:
            raise NodeUndecided(self.used_steps)

    def evaluate(self, static_cost: int, cost: int, expression: str) -> None:
        """Spend the estimated `cost` of one CEL evaluation before it runs; an expression
        whose `static_cost` (for any device) is above the per-evaluation limit never runs."""
        if static_cost > self.evaluation_cost:
            raise BudgetExceeded(
                "cel-evaluation", static_cost, self.evaluation_cost, expression=expression
            )
        self.used_cost += cost
        if self.used_cost > self.cel_cost:
            raise BudgetExceeded("cel", self.used_cost, self.cel_cost, expression=expression)

    def admit(
        self, static_cost: int, expression: str, field: str, claim: str, request: str
    ) -> None:
        """Refuse, before any device is looked at, a selector whose estimate for any device
        is above the per-evaluation limit (as the API server refuses to store one)."""
        if static_cost > self.evaluation_cost:
            raise BudgetExceeded(
                "cel-evaluation",
                static_cost,
                self.evaluation_cost,
                claim,
                request,
                expression=expression,
                field=field,
            )

    def compile(self, expression: str) -> None:
        """Spend the cost of compiling an expression, once per distinct expression."""
        if expression in self.compiled:
            return
        self.compiled.add(expression)
        self.used_cost += COMPILE_COST_PER_CHARACTER * len(expression)
        if self.used_cost > self.cel_cost:
            raise BudgetExceeded("cel", self.used_cost, self.cel_cost, expression=expression)
