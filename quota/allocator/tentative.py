"""The devices one search has tentatively allocated, on top of existing allocations.

Owns what the search's picks change: devices in flight per claim, counters consumed,
capacity consumed on shareable devices, each claim's constraints and its picks. Every
tentative allocation returns an undo closure. Invariant: calling the undo of the latest
allocation not yet undone restores all of that exactly as it was before the allocation
(the search undoes in reverse order when it backtracks).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from quota.allocator.capacity import CapacityLedger, Consumption
from quota.allocator.constraints import ClaimConstraint
from quota.allocator.counters import CounterLedger
from quota.allocator.devices import Device, DeviceID
from quota.allocator.errors import AllocationError
from quota.allocator.requests import Candidate, Request
from quota.allocator.taints import taint_blocks

__all__ = ["Pick", "TentativeAllocation"]


@dataclass(frozen=True)
class Pick:
    """One allocated device of a claim (`consumed` set on devices shared between claims)."""

    request: Request
    candidate: Candidate
    consumed: Consumption | None = None


class TentativeAllocation:
    """The picks of the claims of one search (`picks`, one list per claim)."""

    def __init__(
        self,
        claim_names: Sequence[str],
        allocated: Container[DeviceID],
        shared_allocated: Container[DeviceID],
        allocated_capacity: Mapping[DeviceID, Mapping[str, Decimal]],
    ) -> None:
        self._claim_names = claim_names
        self._allocated = allocated
        self._shared_allocated = shared_allocated
        self._counters = CounterLedger(allocated, shared_allocated)
        self._capacity = CapacityLedger(allocated_capacity, shared_allocated)
        self._in_flight: dict[DeviceID, set[int]] = {}
        self._constraints: list[list[ClaimConstraint]] = []
        self.picks: list[list[Pick]] = []

    def add_claim(self, constraints: list[ClaimConstraint]) -> None:
        """Open the next claim, in claim order, with its constraints and no picks."""
        self._constraints.append(constraints)
        self.picks.append([])

    def held(self, request: Request, candidate: Candidate) -> bool:
        """Unusable for good because of claims outside this search: held by them, or its
        counters used up by them (what the search's own tentative allocations cannot undo)."""
        device = candidate.device
        if device.consumes_counters and not self._counters.ever_fits(candidate.pool, device):
            return True
        if request.exact.admin_access:
            return False
        if device.allow_multiple_allocations:
            return device.id in self._allocated
        return device.id in self._allocated or device.id in self._shared_allocated

    def could_fit(self, request: Request, device: Device) -> bool:
        """Whether existing allocations leave the request enough capacity on the device
        (what this search allocates is checked when the device is added)."""
        if not request.uses_capacity(device):
            return True
        amounts = request.consumption(device)
        if amounts is None:
            return False
        return not device.allow_multiple_allocations or self._capacity.fits(
            device, amounts, include_allocating=False
        )

    def in_use(self, request: Request, device: Device) -> bool:
        """Whether the device is taken for the request now, by existing allocations or by
        this search's picks."""
        device_id = device.id
        holders = self._in_flight.get(device_id)
        if request.exact.admin_access:
            # Admin access may share a device with anything, but never twice in one claim.
            return holders is not None and request.claim in holders
        if device.allow_multiple_allocations:
            # Shareable: only a dedicated (exclusive) allocation makes it unavailable.
            return device_id in self._allocated
        return device_id in self._allocated or device_id in self._shared_allocated or bool(holders)

    def allocate(
        self, request: Request, candidate: Candidate, must: bool
    ) -> Callable[[], None] | None:
        """Tentatively allocate; an undo closure on success, None when the device cannot be
        used. `must`: a constraint the device breaks is an AllocationError (All)."""
        device = candidate.device
        if self.in_use(request, device):
            return None
        consumed: Consumption | None = None
        if request.uses_capacity(device):
            amounts = request.consumption(device)
            if amounts is None:
                return None
            if device.allow_multiple_allocations:
                if not self._capacity.fits(device, amounts):
                    return None
                consumed = amounts
        # A shareable device already in use has paid its counters.
        counted = bool(device.consumes_counters) and not (
            consumed is not None and self._capacity.in_use(device.id)
        )
        if counted and not self._counters.try_consume(candidate.pool, device):
            return None
        if taint_blocks(device.taints, request.exact.tolerations):
            if counted:
                self._counters.release(candidate.pool, device)
            return None
        constraints = self._constraints[request.claim]
        for i, constraint in enumerate(constraints):
            if constraint.add(request.name, request.sub, device):
                continue
            for earlier in constraints[:i]:
                earlier.remove(request.name, request.sub, device)
            if counted:
                self._counters.release(candidate.pool, device)
            if must:
                raise AllocationError(
                    f"cannot add device {device.id} because a claim constraint would not be "
                    "satisfied",
                    self._claim_names[request.claim],
                    request.result_name,
                )
            return None
        if consumed is not None:
            self._capacity.add(device, consumed)
        else:
            self._in_flight.setdefault(device.id, set()).add(request.claim)
        picks = self.picks[request.claim]
        picks.append(Pick(request, candidate, consumed))
        size = len(picks) - 1

        def undo() -> None:
            for constraint in constraints:
                constraint.remove(request.name, request.sub, device)
            if consumed is not None:
                self._capacity.add(device, consumed, -1)
            else:
                self._in_flight[device.id].discard(request.claim)
            if counted:
                self._counters.release(candidate.pool, device)
            del picks[size:]

        return undo
