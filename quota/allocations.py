"""What the cluster's ResourceClaims hold: the devices named in their `status.allocation`.

Placement reads this on every admission. At 100,000 pods there are as many allocated
claims, and the scheduler changes some of them all the time, so the holdings are kept
per claim: a changed claim costs its own results, not a pass over every claim.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from quota.allocator.devices import DeviceID
from quota.errors import DraquotaError
from quota.quantity import parse_quantity

__all__ = ["Allocated", "ClaimAllocations", "ClaimKey", "Held", "allocated_by", "held_by"]

ClaimKey = tuple[str | None, str]  # (namespace, name)
PoolKey = tuple[str, str]  # (driver, pool)


@dataclass(frozen=True)
class Allocated:
    """What claim statuses hold: exclusive devices, shared devices and their consumed capacity."""

    exclusive: frozenset[DeviceID] = frozenset()
    shared: frozenset[DeviceID] = frozenset()
    capacity: Mapping[DeviceID, Mapping[str, Decimal]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.exclusive or self.shared)


@dataclass(frozen=True)
class Held:
    """The devices one claim's status holds (admin access holds nothing: it never makes a
    device unavailable)."""

    exclusive: tuple[DeviceID, ...] = ()
    shared: tuple[tuple[DeviceID, Mapping[str, Decimal]], ...] = ()

    def devices(self) -> tuple[DeviceID, ...]:
        return (*self.exclusive, *(d for d, _ in self.shared))


def _results(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return [r for r in results if isinstance(r, Mapping)]


def _consumed(result: Mapping[str, Any]) -> dict[str, Decimal]:
    consumed: dict[str, Decimal] = {}
    for name, value in (result.get("consumedCapacity") or {}).items():
        try:
            consumed[name] = parse_quantity(value)
        except DraquotaError:
            continue
    return consumed


def held_by(obj: Mapping[str, Any]) -> Held:
    """What a ResourceClaim's allocation holds."""
    exclusive: list[DeviceID] = []
    shared: list[tuple[DeviceID, Mapping[str, Decimal]]] = []
    for r in _results(obj):
        device = DeviceID(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        if r.get("shareID"):
            shared.append((device, _consumed(r)))
        elif not r.get("adminAccess"):
            exclusive.append(device)
    return Held(tuple(exclusive), tuple(shared))


def _sum(holdings: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for consumed in holdings:
        for name, value in consumed.items():
            total[name] = total.get(name, Decimal(0)) + value
    return total


def allocated_by(claims: Iterable[Mapping[str, Any]]) -> Allocated:
    """Everything the claims hold together, computed from scratch."""
    exclusive: set[DeviceID] = set()
    shared: dict[DeviceID, list[Mapping[str, Decimal]]] = {}
    for obj in claims:
        held = held_by(obj)
        exclusive.update(held.exclusive)
        for device, consumed in held.shared:
            shared.setdefault(device, []).append(consumed)
    capacity = {device: _sum(holdings) for device, holdings in shared.items()}
    return Allocated(frozenset(exclusive), frozenset(shared), capacity)


def _total(holders: Mapping[ClaimKey, list[Mapping[str, Decimal]]]) -> dict[str, Decimal]:
    return _sum(consumed for held in holders.values() for consumed in held)


class ClaimAllocations:
    """The holdings of every claim, and of every device the claims that hold it.

    `update` applies changed claims one by one (re-applying a claim is harmless) and
    says which pools changed, so placement keeps what it derived for every other node.
    `snapshot` is an immutable Allocated that later updates never change. Thread-safe.
    """

    def __init__(self, claims: Iterable[tuple[ClaimKey, Mapping[str, Any]]] = ()) -> None:
        self._lock = threading.Lock()
        self._held: dict[ClaimKey, Held] = {}
        self._exclusive: Counter[DeviceID] = Counter()
        # per shared device, what each claim holding it consumes (a claim may share it twice)
        self._shared: dict[DeviceID, dict[ClaimKey, list[Mapping[str, Decimal]]]] = {}
        for key, obj in claims:
            self._set(key, held_by(obj))
        capacity = {d: _total(holders) for d, holders in self._shared.items()}
        self._snapshot = Allocated(frozenset(self._exclusive), frozenset(self._shared), capacity)

    def snapshot(self) -> Allocated:
        return self._snapshot

    def update(self, changes: Iterable[tuple[ClaimKey, Mapping[str, Any] | None]]) -> set[PoolKey]:
        """Apply each claim's current object (None: deleted); the pools whose holdings changed."""
        with self._lock:
            touched: set[DeviceID] = set()
            for key, obj in changes:
                held = held_by(obj) if obj is not None else Held()
                before = self._held.get(key, Held())
                if held == before:
                    continue
                touched.update(before.devices(), held.devices())
                self._unset(key, before)
                self._set(key, held)
            if touched:
                self._snapshot = self._renewed(touched)
            return {(d.driver, d.pool) for d in touched}

    def without(self, keys: Iterable[ClaimKey]) -> Allocated:
        """What every claim but these holds (a pod's own shared claims do not block it)."""
        with self._lock:
            # each claim once: a pod may name the same shared claim in two entries
            own = [(key, held) for key in dict.fromkeys(keys) if (held := self._held.get(key))]
            if not own:
                return self._snapshot
            for key, held in own:
                self._unset(key, held)
            try:
                return self._renewed({d for _, held in own for d in held.devices()})
            finally:
                for key, held in own:
                    self._set(key, held)

    def _set(self, key: ClaimKey, held: Held) -> None:
        if held == Held():
            self._held.pop(key, None)
            return
        self._held[key] = held
        self._exclusive.update(held.exclusive)
        for device, consumed in held.shared:
            self._shared.setdefault(device, {}).setdefault(key, []).append(consumed)

    def _unset(self, key: ClaimKey, held: Held) -> None:
        self._held.pop(key, None)
        self._exclusive.subtract(held.exclusive)
        for device in held.exclusive:
            if self._exclusive[device] <= 0:
                del self._exclusive[device]
        for device, _ in held.shared:
            holders = self._shared.get(device, {})
            holders.pop(key, None)
            if not holders:
                self._shared.pop(device, None)

    def _renewed(self, touched: set[DeviceID]) -> Allocated:
        """The snapshot with the touched devices brought up to date (set copies, no claim scan)."""
        old = self._snapshot
        exclusive = (old.exclusive - touched) | {d for d in touched if d in self._exclusive}
        shared = (old.shared - touched) | {d for d in touched if d in self._shared}
        capacity = dict(old.capacity)
        for device in touched:
            holders = self._shared.get(device)
            if holders:
                capacity[device] = _total(holders)
            else:
                capacity.pop(device, None)
        return Allocated(frozenset(exclusive), frozenset(shared), capacity)
