"""Shared counters of partitionable devices (KEP-4815).

A pool publishes counter sets; a device consumes amounts from them. What is
available is each counter's value minus what already-allocated devices of the
pool consume, wherever those devices are (other nodes too); the result may be
negative, which means nothing is left. The devices being allocated in the
current search add their consumption on top, and roll it back on backtrack.
"""

from __future__ import annotations

from collections.abc import Container
from decimal import Decimal

from quota.allocator.devices import Device, DeviceID
from quota.allocator.pools import Pool

__all__ = ["CounterLedger"]

Key = tuple[str, str]  # (driver, pool)


class CounterLedger:
    """Available and in-flight counter consumption for one allocation attempt."""

    def __init__(
        self, allocated: Container[DeviceID], shared: Container[DeviceID] = frozenset()
    ) -> None:
        # A device shared between claims consumes its counters once, like a dedicated one.
        self._allocated = allocated
        self._shared = shared
        self._available: dict[Key, dict[str, dict[str, Decimal]]] = {}
        self._consumed: dict[Key, dict[str, dict[str, Decimal]]] = {}

    def _available_of(self, pool: Pool) -> dict[str, dict[str, Decimal]]:
        key = (pool.driver, pool.name)
        cached = self._available.get(key)
        if cached is not None:
            return cached
        available = {name: dict(counters) for name, counters in (pool.counter_sets or {}).items()}
        for s in (*pool.slices, *pool.other_slices):
            for device in s.devices:
                if not device.consumes_counters or not (
                    device.id in self._allocated or device.id in self._shared
                ):
                    continue
                for set_name, counters in device.consumes_counters:
                    target = available.get(set_name, {})
                    for counter, amount in counters.items():
                        if counter in target:
                            target[counter] -= amount
        self._available[key] = available
        return available

    def try_consume(self, pool: Pool, device: Device) -> bool:
        """Add the device's consumption if every counter of the pool still covers what is used.

        Like upstream, every counter of the pool is checked, not only the ones the device
        consumes: a pool already over-committed by allocated devices offers nothing.
        """
        available = self._available_of(pool)
        consumed = self._consumed.setdefault((pool.driver, pool.name), {})
        for set_name, counters in device.consumes_counters:
            used = consumed.setdefault(set_name, {})
            for counter, amount in counters.items():
                used[counter] = used.get(counter, Decimal(0)) + amount
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for counter, have in counters.items():
                if have < used.get(counter, Decimal(0)):
                    self.release(pool, device)
                    return False
        return True

    def ever_fits(self, pool: Pool, device: Device) -> bool:
        """Whether the device's consumption fits what allocated devices leave, with nothing
        in flight: when it does not, no allocation in this attempt can use the device."""
        available = self._available_of(pool)
        if any(have < 0 for counters in available.values() for have in counters.values()):
            return False
        for set_name, counters in device.consumes_counters:
            have_set = available.get(set_name, {})
            for counter, amount in counters.items():
                if counter in have_set and have_set[counter] < amount:
                    return False
        return True

    def release(self, pool: Pool, device: Device) -> None:
        """Undo `try_consume` of the device."""
        consumed = self._consumed[(pool.driver, pool.name)]
        for set_name, counters in device.consumes_counters:
            for counter, amount in counters.items():
                consumed[set_name][counter] -= amount
