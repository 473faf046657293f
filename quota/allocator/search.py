"""Depth-first search over claims, requests, alternatives and devices (KEP-4381/4816).

The order is the scheduler's incubating allocator's: claims in order, requests in
order, `firstAvailable` alternatives in order, devices in candidate order
(`quota.allocator.candidates`). Within one request, devices are chosen as
combinations, never permutations: the next device of a request is searched only
after the previous pick (`start`), so {d1, d2} is tried but {d2, d1} is not. The
first complete solution wins; there is no scoring.

Every tentative allocation (`quota.allocator.tentative`) returns an undo closure.
Invariant: when a recursive call returns False, the shared state (in-flight devices,
counters, capacity, constraints, picks) is exactly what it was before the call.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from quota.allocator.budget import Budget
from quota.allocator.candidates import Candidates, SelectorMemo
from quota.allocator.constraints import build_constraints
from quota.allocator.devices import DeviceID
from quota.allocator.errors import AllocationError
from quota.allocator.pools import Pool
from quota.allocator.requests import Candidate, Request, build_request
from quota.allocator.tentative import Pick, TentativeAllocation
from quota.allocator.twins import Twins
from quota.claimspec import ALLOCATION_RESULTS_MAX_SIZE, ClaimSpec, ExactRequest
from quota.deviceclasses import DeviceClass

__all__ = ["Search"]


class _SizeExceeded(Exception):
    """More than 32 results would be needed: backtrack to the last firstAvailable choice."""


@dataclass
class Search:
    """One allocation attempt of some claims on one node: `prepare`, then `run`."""

    claims: Sequence[ClaimSpec]
    claim_names: Sequence[str]
    node: Mapping[str, Any] | None
    pools: Sequence[Pool]
    classes: Mapping[str, DeviceClass]
    allocated: Container[DeviceID]
    memo: SelectorMemo = field(default_factory=dict)
    shared_allocated: Container[DeviceID] = frozenset()
    allocated_capacity: Mapping[DeviceID, Mapping[str, Decimal]] = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    prune: bool = True  # skip twins of devices that failed (False: upstream's exact tree)
    # requests[claim][request]: the request, or its firstAvailable alternatives in order
    requests: list[list[list[Request]]] = field(default_factory=list, init=False)
    selected: dict[tuple[int, int], int] = field(default_factory=dict, init=False)
    steps: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.tentative = TentativeAllocation(
            self.claim_names, self.allocated, self.shared_allocated, self.allocated_capacity
        )
        self.candidates = Candidates(
            self.pools, self.node, self.memo, self.budget, self.tentative.held
        )
        self.twins = Twins(self.candidates.items)

    @property
    def results(self) -> list[list[Pick]]:
        """The picks of each claim, in claim order (a solution once `run` returned True)."""
        return self.tentative.picks

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
            self.tentative.add_claim(build_constraints(spec.constraints, claim))

    def _request(self, ci: int, name: str, sub: str | None, exact: ExactRequest) -> Request:
        claim = self.claim_names[ci]
        request = build_request(ci, claim, name, sub, exact, self.classes, self.budget)
        if request.wants_all:
            request.all_devices = self._all_devices(request, claim)
            request.num_devices = len(request.all_devices)
        return request

    def _all_devices(self, request: Request, claim: str) -> list[Candidate]:
        """The devices an All request gets: every selectable one with capacity left; an
        incomplete or invalid pool makes "all" unknowable."""
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"asks for all devices, but resource pool {pool.ref} is currently being "
                    "updated",
                    claim,
                    request.result_name,
                )
            if pool.invalid:
                raise AllocationError(
                    f"asks for all devices, but resource pool {pool.ref} is currently invalid: "
                    f"{pool.invalid}",
                    claim,
                    request.result_name,
                )
        candidates, could_fit = self.candidates, self.tentative.could_fit
        return [
            c
            for i, c in enumerate(candidates.items)
            if candidates.selectable(request, i) and could_fit(request, c.device)
        ]

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
        tentative = self.tentative
        if len(tentative.picks[ci]) + request.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _SizeExceeded
        if request.all_devices is not None:
            undo = tentative.allocate(request, request.all_devices[di], must=True)
            if undo is None:
                return False  # order does not matter for All: nothing else to try
            return self._next(ci, ri, si, di + 1, in_sub, 0, undo)
        step, items, in_use = self.budget.step, self.candidates.items, tentative.in_use
        prune = self.prune and not request.exact.admin_access and not request.exact.capacity
        failed: set[tuple[int, str]] = set()
        for index in self.candidates.usable(request, start):
            step()  # every usable device tried is work, not only every recursion
            candidate = items[index]
            if in_use(request, candidate.device):
                continue
            twin = self.twins.of(index) if prune else None
            if twin is not None and twin in failed:
                continue  # a device just like one that failed here fails too
            undo = tentative.allocate(request, candidate, must=False)
            if undo is None or not self._next(ci, ri, si, di + 1, in_sub, index + 1, undo):
                if twin is not None:
                    failed.add(twin)
                continue
            return True
        return False

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
