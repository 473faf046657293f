"""Claim constraints: `matchAttribute` and `distinctAttribute` (KEP-4381).

A constraint is scoped to the requests it names (all when empty); naming `req`
covers every subrequest of `req`, naming `req/sub` only that subrequest.
Attribute names are fully qualified; an attribute a device published without a
domain belongs to its driver's domain. Constraints are monotonic: once adding a
device fails, adding more cannot succeed, so the search may prune there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quota.allocator.devices import Device
from quota.allocator.errors import AllocationError
from quota.claimspec import Constraint

__all__ = ["ClaimConstraint", "DistinctAttribute", "MatchAttribute", "build_constraints"]


def _lookup(device: Device, name: str) -> tuple[str, Any] | None:
    if "/" not in name:
        name = f"{device.driver}/{name}"
    return device.attributes.get(name)


@dataclass
class ClaimConstraint:
    """Shared scope logic of both constraint kinds."""

    requests: frozenset[str]
    attribute: str

    def applies(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (sub is not None and f"{request}/{sub}" in self.requests)

    def add(self, request: str, sub: str | None, device: Device) -> bool:
        raise NotImplementedError

    def remove(self, request: str, sub: str | None, device: Device) -> None:
        raise NotImplementedError


@dataclass
class MatchAttribute(ClaimConstraint):
    """Every device in scope has the attribute, all with the same type and value."""

    value: tuple[str, Any] | None = None
    count: int = 0

    def add(self, request: str, sub: str | None, device: Device) -> bool:
        if not self.applies(request, sub):
            return True
        attribute = _lookup(device, self.attribute)
        if attribute is None:
            return False
        if self.count == 0:
            self.value, self.count = attribute, 1
            return True
        if attribute[0] in ("unknown", "list") or attribute != self.value:
            return False
        self.count += 1
        return True

    def remove(self, request: str, sub: str | None, device: Device) -> None:
        if self.applies(request, sub):
            self.count -= 1


@dataclass
class DistinctAttribute(ClaimConstraint):
    """Every device in scope has the attribute, with a value no other device has.

    Values are remembered per request name, as upstream does: a later device of
    the same request replaces the value of the earlier one.
    """

    values: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def add(self, request: str, sub: str | None, device: Device) -> bool:
        if not self.applies(request, sub):
            return True
        attribute = _lookup(device, self.attribute)
        if attribute is None:
            return False
        if attribute[0] == "unknown":
            raise AllocationError(
                f"distinctAttribute {self.attribute}: unsupported attribute value "
                f"on device {device.id}"
            )
        if attribute[0] == "list" or any(attribute == value for value in self.values.values()):
            return False
        self.values[_key(request, sub)] = attribute
        return True

    def remove(self, request: str, sub: str | None, device: Device) -> None:
        if self.applies(request, sub):
            self.values.pop(_key(request, sub), None)


def _key(request: str, sub: str | None) -> str:
    return f"{request}/{sub}" if sub else request


def build_constraints(constraints: tuple[Constraint, ...], claim: str) -> list[ClaimConstraint]:
    """Fresh constraint state for one claim; an empty constraint is invalid input."""
    out: list[ClaimConstraint] = []
    for i, c in enumerate(constraints):
        scope = frozenset(c.requests)
        if c.match_attribute:
            out.append(MatchAttribute(scope, c.match_attribute))
        elif c.distinct_attribute:
            out.append(DistinctAttribute(scope, c.distinct_attribute))
        else:
            raise AllocationError(
                f"constraint #{i}: empty constraint (unsupported constraint type?)", claim
            )
    return out
