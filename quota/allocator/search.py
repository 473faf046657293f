"""Depth-first search over claims, requests, alternatives and devices (KEP-4381/4816).

The order is the scheduler's incubating allocator's: claims in order, requests in
order, `firstAvailable` alternatives in order, devices in pool (driver, name),
slice name and slice order. Within one request, devices are chosen as
combinations, never permutations: the next device of a request is searched only
after the previous pick (`start`), so {d1, d2} is tried but {d2, d1} is not. The
first complete solution wins; there is no scoring.

Every tentative allocation returns an undo closure. Invariant: when a recursive
call returns False, the shared state (in-flight devices, counters, constraints,
results) is exactly what it was before the call.

Longer than 400 lines because the search is one backtracking algorithm: its recursion,
tentative allocations and their undo share one state and the invariant above.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from quota.allocator.budget import Budget
from quota.allocator.capacity import CapacityLedger, Consumption, consumption, requested_capacity
from quota.allocator.cel import Selector, compile_selector
from quota.allocator.constraints import ClaimConstraint, build_constraints
from quota.allocator.counters import CounterLedger
from quota.allocator.devices import Device, DeviceID, Slice
from quota.allocator.errors import AllocationError
from quota.allocator.nodes import node_matches
from quota.allocator.pools import Pool
from quota.allocator.taints import taint_blocks
from quota.claimspec import ALL, ALLOCATION_RESULTS_MAX_SIZE, EXACT_COUNT, ClaimSpec, ExactRequest
from quota.deviceclasses import DeviceClass

__all__ = ["Candidate", "Pick", "Request", "Search", "SelectorMemo"]

# (selector expression, id(device)) -> match; owned by whoever owns the Device objects.
SelectorMemo = dict[tuple[str, int], bool]


@dataclass(frozen=True)
class Candidate:
    """A device reachable from the node, with the pool and slice it came from."""

    pool: Pool
    slice: Slice
    device: Device


@dataclass
class Request:
    """A request, or one alternative of a `firstAvailable` request, ready for the search."""

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

    def uses_capacity(self, device: Device) -> bool:
        """Whether capacity matters: the device is shareable or the request asks for some."""
        return device.allow_multiple_allocations or bool(self.exact.capacity)

    def consumption(self, device: Device) -> Consumption | None:
        """Capacity one allocation of the device consumes for this request; None: cannot."""
        return consumption(device, requested_capacity(self.exact.capacity, device.driver))


@dataclass(frozen=True)
class Pick:
    """One allocated device of a claim (`consumed` set on devices shared between claims)."""

    request: Request
    candidate: Candidate
    consumed: Consumption | None = None


@dataclass
class _Found:
    """The usable devices of one request found so far: `indices` (ascending) among the
    candidates below `scanned`."""

    indices: list[int] = field(default_factory=list)
    scanned: int = 0


class _SizeExceeded(Exception):
    """More than 32 results would be needed: backtrack to the last firstAvailable choice."""


@dataclass
class Search:
    """One allocation attempt of some claims on one node."""

    claims: Sequence[ClaimSpec]
    claim_names: Sequence[str]
    node: Mapping[str, Any] | None
    pools: Sequence[Pool]
    classes: Mapping[str, DeviceClass]
    allocated: Container[DeviceID]
    memo: SelectorMemo = field(default_factory=dict)
    shared_allocated: Container[DeviceID] = frozenset()
    allocated_capacity: Mapping[DeviceID, Mapping[str, Decimal]] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    requests: list[list[list[Request]]] = field(default_factory=list)
    selected: dict[tuple[int, int], int] = field(default_factory=dict)
    results: list[list[Pick]] = field(default_factory=list)
    steps: int = 0
    budget: Budget = field(default_factory=Budget)
    prune: bool = True  # skip twins of devices that failed (False: upstream's exact tree)

    def __post_init__(self) -> None:
        self.counters = CounterLedger(self.allocated, self.shared_allocated)
        self.capacity = CapacityLedger(self.allocated_capacity, self.shared_allocated)
        self.in_flight: dict[DeviceID, set[int]] = {}
        self._selectable: dict[tuple[int, int], bool] = {}
        self._found: dict[int, _Found] = {}
        self._twins: dict[int, tuple[int, str]] = {}
        self.constraints: list[list[ClaimConstraint]] = []
        usable = [p for p in self.pools if not p.incomplete and not p.invalid]
        # Pools whose devices need binding conditions go last (incubating order).
        usable.sort(key=lambda p: any(d.binding_conditions for s in p.slices for d in s.devices))
        self.candidates = [Candidate(p, s, d) for p in usable for s in p.slices for d in s.devices]

    # -- preparation ---------------------------------------------------------------------------

    def prepare(self) -> None:
        """Validate every claim and request before searching (errors are invalid input)."""
        for ci, spec in enumerate(self.claims):
            claim = self.claim_names[ci]
            minimum, per_request = 0, []
            for request in spec.requests:
                if request.first_available:
                    alts = [
                        self._request(ci, request.name, sub.name, sub.exact)
                        for sub in request.first_available
                    ]
                    minimum += min(a.num_devices for a in alts)
                else:
                    assert request.exactly is not None
                    alts = [self._request(ci, request.name, None, request.exactly)]
                    minimum += alts[0].num_devices
                per_request.append(alts)
            if minimum > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"number of requested devices {minimum} exceeds the claim limit of "
                    f"{ALLOCATION_RESULTS_MAX_SIZE}",
                    claim,
                )
            self.requests.append(per_request)
            self.constraints.append(build_constraints(spec.constraints, claim))
            self.results.append([])

    def _request(self, ci: int, name: str, sub: str | None, exact: ExactRequest) -> Request:
        claim = self.claim_names[ci]
        label = f"{name}/{sub}" if sub else name
        device_class = self.classes.get(exact.device_class_name)
        for i, expression in enumerate(exact.selectors):
            if expression is None:
                raise AllocationError(
                    f"selector #{i}: CEL expression empty (unsupported selector type?)",
                    claim,
                    label,
                )
        if not exact.device_class_name:
            raise AllocationError(
                "missing device class name (unsupported request type?)", claim, label
            )
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
            self.budget.compile(expression)
            selector = _compiled(expression, f"class {device_class.name}: selector #{i}")
            where = f"DeviceClass {device_class.name}: spec.selectors[{i}].cel.expression"
            self.budget.admit(selector.static_cost, expression, where, claim, label)
            selectors.append(selector)
        for i, expression in enumerate(exact.selectors):
            self.budget.compile(str(expression))
            selector = _compiled(str(expression), f"claim {claim}: selector #{i}")
            where = f"selectors[{i}].cel.expression"
            self.budget.admit(selector.static_cost, str(expression), where, claim, label)
            selectors.append(selector)
        request = Request(ci, name, sub, exact, device_class, tuple(selectors))
        if exact.allocation_mode == EXACT_COUNT:
            request.num_devices = exact.count
        elif exact.allocation_mode == ALL:
            request.all_devices = self._all_devices(request, claim, label)
            request.num_devices = len(request.all_devices)
        else:
            raise AllocationError(f"unsupported count mode {exact.allocation_mode}", claim, label)
        return request

    def _all_devices(self, request: Request, claim: str, label: str) -> list[Candidate]:
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"asks for all devices, but resource pool {pool.ref} is currently being "
                    "updated",
                    claim,
                    label,
                )
            if pool.invalid:
                raise AllocationError(
                    f"asks for all devices, but resource pool {pool.ref} is currently invalid: "
                    f"{pool.invalid}",
                    claim,
                    label,
                )
        return [
            c
            for i, c in enumerate(self.candidates)
            if self.selectable(request, i) and self._capacity_possible(request, c.device)
        ]

    def _capacity_possible(self, request: Request, device: Device) -> bool:
        # All filters out devices whose existing allocations leave too little capacity;
        # what the current search allocates is checked when the device is added.
        if not request.uses_capacity(device):
            return True
        amounts = request.consumption(device)
        if amounts is None:
            return False
        return not device.allow_multiple_allocations or self.capacity.fits(
            device, amounts, include_allocating=False
        )

    # -- device checks -------------------------------------------------------------------------

    def selectable(self, request: Request, index: int) -> bool:
        """Class selectors, request selectors, per-device node selection (memoised)."""
        key = (id(request), index)
        known = self._selectable.get(key)
        if known is not None:
            return known
        candidate = self.candidates[index]
        device = candidate.device
        result = all(self._matches(sel, device) for sel in request.selectors)
        if result and candidate.slice.per_device_node_selection:
            result = node_matches(
                self.node, device.node_name, device.all_nodes, device.node_selector
            )
        self._selectable[key] = result
        return result

    def _matches(self, selector: Selector, device: Device) -> bool:
        key = (selector.expression, id(device))
        known = self.memo.get(key)
        if known is None:
            known = self.memo[key] = selector.matches(device.cel, self.budget)
        return known

    def _usable(self, request: Request, start: int) -> Iterator[int]:
        """Indices from `start` of the devices the request could ever use in this search:
        not held by other claims, matching its selectors. Found lazily, in candidate order
        (a device is looked at, and its selectors evaluated, only when the search reaches
        it, as upstream does), and remembered: a device is looked at once per request,
        whatever the backtracking, and that first look is the step charged for it."""
        found = self._found.get(id(request))
        if found is None:
            found = self._found[id(request)] = _Found()
        pos = bisect_left(found.indices, start)
        while True:
            if pos < len(found.indices):
                yield found.indices[pos]
                pos += 1
                continue
            if found.scanned >= len(self.candidates):
                return
            index = found.scanned
            found.scanned += 1
            self.budget.step()
            candidate = self.candidates[index]
            if self._held(request, candidate) or not self.selectable(request, index):
                continue
            found.indices.append(index)
            if index < start:
                pos = len(found.indices)

    def _held(self, request: Request, candidate: Candidate) -> bool:
        """Unusable for good because of claims outside this search: held by them, or its
        counters used up by them (what the search's own tentative allocations cannot undo)."""
        device = candidate.device
        if device.consumes_counters and not self.counters.ever_fits(candidate.pool, device):
            return True
        if request.exact.admin_access:
            return False
        if device.allow_multiple_allocations:
            return device.id in self.allocated
        return device.id in self.allocated or device.id in self.shared_allocated

    def _in_use(self, request: Request, device: Device) -> bool:
        device_id = device.id
        holders = self.in_flight.get(device_id)
        if request.exact.admin_access:
            # Admin access may share a device with anything, but never twice in one claim.
            return holders is not None and request.claim in holders
        if device.allow_multiple_allocations:
            # Shareable: only a dedicated (exclusive) allocation makes it unavailable.
            return device_id in self.allocated
        return device_id in self.allocated or device_id in self.shared_allocated or bool(holders)

    def allocate_device(
        self, request: Request, candidate: Candidate, must: bool
    ) -> Callable[[], None] | None:
        """Tentatively allocate; an undo closure on success, None when the device cannot be used."""
        device = candidate.device
        if self._in_use(request, device):
            return None
        consumed: Consumption | None = None
        if request.uses_capacity(device):
            amounts = request.consumption(device)
            if amounts is None:
                return None
            if device.allow_multiple_allocations:
                if not self.capacity.fits(device, amounts):
                    return None
                consumed = amounts
        # A shareable device already in use has paid its counters.
        counted = bool(device.consumes_counters) and not (
            consumed is not None and self.capacity.in_use(device.id)
        )
        if counted and not self.counters.try_consume(candidate.pool, device):
            return None
        if taint_blocks(device.taints, request.exact.tolerations):
            if counted:
                self.counters.release(candidate.pool, device)
            return None
        constraints = self.constraints[request.claim]
        for i, constraint in enumerate(constraints):
            if constraint.add(request.name, request.sub, device):
                continue
            for earlier in constraints[:i]:
                earlier.remove(request.name, request.sub, device)
            if counted:
                self.counters.release(candidate.pool, device)
            if must:
                raise AllocationError(
                    f"cannot add device {device.id} because a claim constraint would not be "
                    "satisfied",
                    self.claim_names[request.claim],
                    request.result_name,
                )
            return None
        if consumed is not None:
            self.capacity.add(device, consumed)
        else:
            self.in_flight.setdefault(device.id, set()).add(request.claim)
        picks = self.results[request.claim]
        picks.append(Pick(request, candidate, consumed))
        size = len(picks) - 1

        def undo() -> None:
            for constraint in constraints:
                constraint.remove(request.name, request.sub, device)
            if consumed is not None:
                self.capacity.add(device, consumed, -1)
            else:
                self.in_flight[device.id].discard(request.claim)
            if counted:
                self.counters.release(candidate.pool, device)
            del picks[size:]

        return undo

    # -- the search ----------------------------------------------------------------------------

    def run(self) -> bool:
        """True when every claim got devices (see `results` and `selected`)."""
        try:
            return self._one(0, 0, 0, 0, False, 0)
        except _SizeExceeded:
            return False

    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        self.steps += 1
        self.budget.step()
        if ci == len(self.claims):
            return True
        if ri == len(self.requests[ci]):
            try:
                return self._one(ci + 1, 0, 0, 0, False, 0)
            except _SizeExceeded:
                return False  # a later claim may fit once an earlier choice changes
        alternatives = self.requests[ci][ri]
        if alternatives[0].sub is not None and not in_sub:
            return self._alternatives(ci, ri, len(alternatives))
        request = alternatives[si]
        if request.all_devices is not None and not request.all_devices:
            return False  # All needs at least one device
        if di >= request.num_devices:
            return self._one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + request.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _SizeExceeded
        if request.all_devices is not None:
            undo = self.allocate_device(request, request.all_devices[di], must=True)
            if undo is None:
                return False  # order does not matter for All: nothing else to try
            return self._next(ci, ri, si, di + 1, in_sub, 0, undo)
        step = self.budget.step
        prune = self.prune and not request.exact.admin_access and not request.exact.capacity
        failed: set[tuple[int, str]] = set()
        for index in self._usable(request, start):
            step()  # every usable device tried is work, not only every recursion
            candidate = self.candidates[index]
            if self._in_use(request, candidate.device):
                continue
            twin = self._twin(index) if prune else None
            if twin is not None and twin in failed:
                continue  # a device just like one that failed here fails too
            undo = self.allocate_device(request, candidate, must=False)
            if undo is None or not self._next(ci, ri, si, di + 1, in_sub, index + 1, undo):
                if twin is not None:
                    failed.add(twin)
                continue
            return True
        return False

    def _twin(self, index: int) -> tuple[int, str] | None:
        """What makes devices interchangeable for the search: the same slice and everything
        but the name (attributes, counters, taints...: what selectors, constraints and
        counters see). Shareable devices have none (their capacity use tells them apart).

        Why skipping twins keeps the answer: after a device fails at a point of the search,
        picking its twin there searches (with the two names swapped) a subset of what the
        first pick searched, because the first pick could still choose the twin later and
        the twin's pick cannot choose the first. Nothing solvable is skipped, so the first
        solution found, and the devices in it, are the ones found without skipping."""
        known = self._twins.get(index)
        if known is None:
            candidate = self.candidates[index]
            device = candidate.device
            if device.allow_multiple_allocations:
                known = self._twins[index] = (-1, "")
            else:
                shape = repr(dataclasses.replace(device, name=""))
                known = self._twins[index] = (id(candidate.slice), shape)
        return None if known[0] == -1 else known

    def _next(
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, undo: Callable[[], None]
    ) -> bool:
        try:
            done = self._one(ci, ri, si, di, in_sub, start)
        except BaseException:
            undo()
            raise
        if not done:
            undo()
        return done

    def _alternatives(self, ci: int, ri: int, count: int) -> bool:
        only_size = True
        for si in range(count):
            try:
                if self._one(ci, ri, si, 0, True, 0):
                    self.selected[(ci, ri)] = si
                    return True
            except _SizeExceeded:
                continue
            only_size = False
        if only_size:
            raise _SizeExceeded
        return False


def _compiled(expression: str, where: str) -> Selector:
    try:
        return compile_selector(expression)
    except AllocationError as exc:
        raise AllocationError(f"{where}: {exc.reason}") from exc
