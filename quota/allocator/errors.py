"""Errors of the allocator: invalid input, and work beyond the budget, as distinct from
"cannot be placed".

DraquotaError
├── AllocationError        invalid input: CEL compile/runtime error, unknown class,
│   │                      too many devices, All on an incomplete pool, ...
│   └── InvalidPoolsError  no solution was found and some pool on the node was invalid
└── BudgetExceeded         well-formed claims too complex to check within the work
                           budget (search steps or CEL cost): neither placed nor refused
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from quota.errors import DraquotaError

__all__ = ["AllocationError", "BudgetExceeded", "InvalidPoolsError"]


class AllocationError(DraquotaError):
    """The claims cannot be allocated because their input is invalid (not a capacity problem)."""

    def __init__(self, message: str, claim: str = "", request: str = "") -> None:
        self.claim = claim
        self.request = request
        self.reason = message
        where = ", ".join(
            part
            for part in (f"claim {claim}" if claim else "", request and f"request {request}")
            if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class InvalidPoolsError(AllocationError):
    """Allocation failed on this node and some resource pool was invalid (`reasons` name them)."""

    def __init__(self, reasons: tuple[str, ...]) -> None:
        self.reasons = reasons
        super().__init__("invalid resource pools were encountered: " + "; ".join(reasons))


_WHAT: Mapping[str, str] = MappingProxyType(
    {
        "steps": "the device search took more than {limit} steps",
        "node-steps": "the device search took more than {limit} steps on a node without an answer, "
        "and no other node fits",
        "cel": "CEL selectors cost more than {limit} to evaluate",
        "cel-evaluation": "a CEL selector's estimated cost {used} exceeds the limit of {limit} "
        "for one evaluation",
    }
)
_HINT: Mapping[str, str] = MappingProxyType(
    {
        "steps": "use fewer firstAvailable alternatives, fewer requests per claim or looser "
        "matchAttribute constraints, or name the devices with selectors",
        "node-steps": "use fewer firstAvailable alternatives, fewer requests per claim or looser "
        "matchAttribute constraints, or name the devices with selectors",
        "cel": "use fewer or simpler selectors",
        "cel-evaluation": "avoid building large lists or strings (cel.bind, +, map) and comparing "
        "them",
    }
)


class BudgetExceeded(DraquotaError):
    """Checking the claims needs more work than admission allows (`kind`: steps |
    node-steps | cel | cel-evaluation; `used` of `limit`); where known, the claim, request,
    expression and the field that holds it."""

    def __init__(
        self,
        kind: str,
        used: int,
        limit: int,
        claim: str = "",
        request: str = "",
        expression: str = "",
        field: str = "",
    ) -> None:
        self.field = field  # where the expression is, e.g. "DeviceClass gpu: spec.selectors[0]..."
        self.kind = kind
        self.used = used
        self.limit = limit
        self.claim = claim
        self.request = request
        self.expression = expression
        super().__init__(self.message())

    def message(self) -> str:
        """`claim x, request y: too complex to check: <what>: <how to simplify>`."""
        where = ", ".join(
            part
            for part in (
                self.claim and f"claim {self.claim}",
                self.request and f"request {self.request}",
                self.field,
            )
            if part
        )
        what = _WHAT[self.kind].format(used=self.used, limit=self.limit)
        if self.expression:
            shown = self.expression if len(self.expression) <= 80 else self.expression[:77] + "..."
            what += f" ({shown!r})"
        if self.field:  # one selector refused: the answer says which, after what it is
            return f"too complex to check: {where}: {what}: {_HINT[self.kind]}"
        text = f"too complex to check: {what}: {_HINT[self.kind]}"
        return f"{where}: {text}" if where else text
