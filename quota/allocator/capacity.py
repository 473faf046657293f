"""Consumable capacity of devices that allow multiple allocations (KEP-5075).

A request may ask for amounts of a device's capacities (`capacity.requests`). On a
device with `allowMultipleAllocations`, each allocation consumes an amount of every
capacity: the request rounded up by the device's `requestPolicy`, the policy's
default when not requested, or the whole capacity when there is no policy; the
sum over existing and in-flight allocations must stay within the capacity value.
On an ordinary device the request only filters (it must fit the device at all).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from quota.allocator.devices import CapacityPolicy, Device, DeviceID, Quantity, split_name
from quota.quantity import parse_quantity

__all__ = ["CapacityLedger", "Consumption", "consumption", "requested_capacity"]

# qualified capacity name -> (published name, amount)
Consumption = dict[str, tuple[str, Quantity]]


def requested_capacity(capacity: Mapping[str, Any] | None, driver: str) -> dict[str, Quantity]:
    """`exactly.capacity.requests`, keyed by qualified name for the device's driver."""
    requests = (capacity or {}).get("requests") or {}
    out = {}
    for name, value in requests.items():
        domain, short = split_name(str(name), driver)
        out[f"{domain}/{short}"] = Quantity(parse_quantity(value), str(value))
    return out


def _round_up(requested: Quantity, policy: CapacityPolicy) -> Quantity:
    if policy.range_min is not None:
        low = policy.range_min
        if requested.value < low.value:
            return low
        if policy.range_step is None:
            return requested
        steps = ((requested.value - low.value) / policy.range_step.value).to_integral_value(
            rounding=ROUND_CEILING
        )
        value = low.value + steps * policy.range_step.value
        return requested if value == requested.value else Quantity(value, _text(value))
    for valid in policy.valid_values:
        if requested.value <= valid.value:
            return valid
    return requested


def _text(value: Decimal) -> str:
    return format(value.normalize(), "f") if value != 0 else "0"


def _violates(amount: Quantity, policy: CapacityPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount.value == policy.default.value:
        return False
    if policy.has_range:
        if policy.range_max is not None and amount.value > policy.range_max.value:
            return True
        if policy.range_step is not None:
            low = policy.range_min.value if policy.range_min is not None else Decimal(0)
            span = amount.value - low
            steps = (span / policy.range_step.value).to_integral_value(rounding=ROUND_FLOOR)
            return steps * policy.range_step.value != span
        return False
    if policy.valid_values:
        return all(amount.value != v.value for v in policy.valid_values)
    return False


def consumption(device: Device, requested: Mapping[str, Quantity]) -> Consumption | None:
    """What one allocation of the device consumes, or None if the request cannot be met.

    None when the request names a capacity the device lacks, an amount violates the
    policy, or an amount alone exceeds the capacity.
    """
    known = {qualified for _, qualified, _, _ in device.capacity_specs}
    if any(name not in known for name in requested):
        return None
    out: Consumption = {}
    for published, qualified, value_text, policy in device.capacity_specs:
        total = Quantity(device.capacity[qualified], value_text)
        asked = requested.get(qualified)
        if asked is None:
            amount = policy.default if policy and policy.default is not None else total
        elif policy is None:
            amount = asked
        else:
            amount = _round_up(asked, policy)
        if _violates(amount, policy) or amount.value > total.value:
            return None
        out[qualified] = (published, amount)
    return out


class CapacityLedger:
    """Capacity used on shareable devices: by existing allocations plus the current search.

    It also tracks which shareable devices are in use (shared before, or by an in-flight
    allocation): only the first share of a device consumes its counters.
    """

    def __init__(
        self,
        allocated: Mapping[DeviceID, Mapping[str, Decimal]],
        shared: Container[DeviceID] = frozenset(),
    ) -> None:
        self._allocated = allocated
        self._shared = shared
        self._allocating: dict[DeviceID, dict[str, Decimal]] = {}
        self._shares: dict[DeviceID, int] = {}

    def in_use(self, device_id: DeviceID) -> bool:
        """Whether the device already has a share (existing or in flight)."""
        return (
            self._shares.get(device_id, 0) > 0
            or device_id in self._shared
            or device_id in self._allocated
        )

    def fits(self, device: Device, amounts: Consumption, include_allocating: bool = True) -> bool:
        """Whether the amounts fit on top of what is used (optionally ignoring in-flight use)."""
        used = self._allocated.get(device.id, {})
        flight = self._allocating.get(device.id, {}) if include_allocating else {}
        for qualified, (published, amount) in amounts.items():
            base = used.get(qualified, used.get(published, Decimal(0)))
            if base + flight.get(qualified, Decimal(0)) + amount.value > device.capacity[qualified]:
                return False
        return True

    def add(self, device: Device, amounts: Consumption, sign: int = 1) -> None:
        """Record (or with sign -1, undo) an in-flight share of the device."""
        flight = self._allocating.setdefault(device.id, {})
        for qualified, (_, amount) in amounts.items():
            flight[qualified] = flight.get(qualified, Decimal(0)) + sign * amount.value
        self._shares[device.id] = self._shares.get(device.id, 0) + sign
