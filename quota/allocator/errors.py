"""Errors of the allocator: invalid input, as distinct from "cannot be placed".

DraquotaError
└── AllocationError        invalid input: CEL compile/runtime error, unknown class,
    │                      too many devices, All on an incomplete pool, ...
    └── InvalidPoolsError  no solution was found and some pool on the node was invalid
"""

from __future__ import annotations

from quota.errors import DraquotaError

__all__ = ["AllocationError", "InvalidPoolsError"]


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
