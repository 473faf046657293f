"""A claim's request, checked and compiled for the search, and the devices it may get.

A request is refused before any device is looked at when it names no class, an
unknown class, an empty selector or an unsupported allocation mode (invalid input,
not "does not fit"). Each selector's compile cost and static cost estimate are
charged to the budget here, class selectors first, as upstream checks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quota.allocator.budget import Budget
from quota.allocator.capacity import Consumption, consumption, requested_capacity
from quota.allocator.cel import Selector, compile_selector
from quota.allocator.devices import Device, Slice
from quota.allocator.errors import AllocationError
from quota.allocator.pools import Pool
from quota.claimspec import ALL, EXACT_COUNT, ExactRequest
from quota.deviceclasses import DeviceClass

__all__ = ["Candidate", "Request", "build_request"]


@dataclass(frozen=True)
class Candidate:
    """A device reachable from the node, with the pool and slice it came from."""

    pool: Pool
    slice: Slice
    device: Device


@dataclass
class Request:
    """A request, or one alternative of a `firstAvailable` request, ready for the search.

    `all_devices` is None for ExactCount; for All, the search fills it with the devices
    the request gets, and `num_devices` with their number."""

    claim: int
    name: str
    sub: str | None
    exact: ExactRequest
    device_class: DeviceClass
    selectors: tuple[Selector, ...]
    num_devices: int = 0
    all_devices: list[Candidate] | None = None

    @property
    def result_name(self) -> str:
        return f"{self.name}/{self.sub}" if self.sub else self.name

    @property
    def wants_all(self) -> bool:
        return self.exact.allocation_mode == ALL

    def uses_capacity(self, device: Device) -> bool:
        """Whether capacity matters: the device is shareable or the request asks for some."""
        return device.allow_multiple_allocations or bool(self.exact.capacity)

    def consumption(self, device: Device) -> Consumption | None:
        """Capacity one allocation of the device consumes for this request; None: cannot."""
        return consumption(device, requested_capacity(self.exact.capacity, device.driver))


def build_request(
    ci: int,
    claim: str,
    name: str,
    sub: str | None,
    exact: ExactRequest,
    classes: Mapping[str, DeviceClass],
    budget: Budget,
) -> Request:
    """The request `name` (alternative `sub`) of the claim at index `ci`, named `claim` in
    errors; AllocationError when it cannot be searched for, BudgetExceeded when a selector
    costs more than the budget allows."""
    label = f"{name}/{sub}" if sub else name
    device_class = classes.get(exact.device_class_name)
    for i, expression in enumerate(exact.selectors):
        if expression is None:
            raise AllocationError(
                f"selector #{i}: CEL expression empty (unsupported selector type?)",
                claim,
                label,
            )
    if not exact.device_class_name:
        raise AllocationError("missing device class name (unsupported request type?)", claim, label)
    if device_class is None:
        raise AllocationError(
            f"could not retrieve device class {exact.device_class_name}: not found",
            claim,
            label,
        )
    selectors = []
    for i, expression in enumerate(device_class.selectors):
        if expression is None:
            raise AllocationError(
                f"class {device_class.name}: selector #{i}: CEL expression empty "
                "(unsupported selector type?)",
                claim,
                label,
            )
        budget.compile(expression)
        selector = _compiled(expression, f"class {device_class.name}: selector #{i}")
        where = f"DeviceClass {device_class.name}: spec.selectors[{i}].cel.expression"
        budget.admit(selector.static_cost, expression, where, claim, label)
        selectors.append(selector)
    for i, expression in enumerate(exact.selectors):
        budget.compile(str(expression))
        selector = _compiled(str(expression), f"claim {claim}: selector #{i}")
        where = f"selectors[{i}].cel.expression"
        budget.admit(selector.static_cost, str(expression), where, claim, label)
        selectors.append(selector)
    if exact.allocation_mode not in (EXACT_COUNT, ALL):
        raise AllocationError(f"unsupported count mode {exact.allocation_mode}", claim, label)
    count = exact.count if exact.allocation_mode == EXACT_COUNT else 0
    return Request(ci, name, sub, exact, device_class, tuple(selectors), count)


def _compiled(expression: str, where: str) -> Selector:
    try:
        return compile_selector(expression)
    except AllocationError as exc:
        raise AllocationError(f"{where}: {exc.reason}") from exc
