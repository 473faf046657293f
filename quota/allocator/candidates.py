"""The devices one search may pick from, in search order, and which of them each request
could ever use.

The order is the incubating allocator's: usable pools in the order given (`gather_pools`:
driver, then pool name), pools whose devices need binding conditions last, then slice
order and device order.
Incomplete and invalid pools offer no candidates.

What a request could ever use is found lazily and remembered: a device is looked at
(its selectors evaluated, one search step charged) only when the search first reaches
it for that request, as upstream does, and never again whatever the backtracking.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quota.allocator.budget import Budget
from quota.allocator.cel import Selector
from quota.allocator.devices import Device
from quota.allocator.nodes import node_matches
from quota.allocator.pools import Pool
from quota.allocator.requests import Candidate, Request

__all__ = ["Candidates", "SelectorMemo"]

# (selector expression, id(device)) -> match; owned by whoever owns the Device objects.
SelectorMemo = dict[tuple[str, int], bool]

# Whether a device is unusable for a request for good, whatever the search does.
Held = Callable[[Request, Candidate], bool]


@dataclass
class _Found:
    """The usable devices of one request found so far: `indices` (ascending) among the
    candidates below `scanned`."""

    indices: list[int] = field(default_factory=list)
    scanned: int = 0


class Candidates:
    """The candidate devices of one search on one node (`items`, in search order)."""

    def __init__(
        self,
        pools: Sequence[Pool],
        node: Mapping[str, Any] | None,
        memo: SelectorMemo,
        budget: Budget,
        held: Held,
    ) -> None:
        usable = [p for p in pools if not p.incomplete and not p.invalid]
        usable.sort(key=lambda p: any(d.binding_conditions for s in p.slices for d in s.devices))
        self.items = [Candidate(p, s, d) for p in usable for s in p.slices for d in s.devices]
        self._node = node
        self._memo = memo
        self._budget = budget
        self._held = held
        self._selectable: dict[tuple[int, int], bool] = {}
        self._found: dict[int, _Found] = {}

    def selectable(self, request: Request, index: int) -> bool:
        """Class selectors, request selectors, per-device node selection (memoised)."""
        key = (id(request), index)
        known = self._selectable.get(key)
        if known is not None:
            return known
        candidate = self.items[index]
        device = candidate.device
        result = all(self._matches(sel, device) for sel in request.selectors)
        if result and candidate.slice.per_device_node_selection:
            result = node_matches(
                self._node, device.node_name, device.all_nodes, device.node_selector
            )
        self._selectable[key] = result
        return result

    def _matches(self, selector: Selector, device: Device) -> bool:
        key = (selector.expression, id(device))
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = selector.matches(device.cel, self._budget)
        return known

    def usable(self, request: Request, start: int) -> Iterator[int]:
        """Indices from `start` of the devices the request could ever use in this search:
        not held by claims outside it, matching its selectors, in candidate order. The
        first look at a device is the step charged for it."""
        found = self._found.get(id(request))
        if found is None:
            found = self._found[id(request)] = _Found()
        pos = bisect_left(found.indices, start)
        while True:
            if pos < len(found.indices):
                yield found.indices[pos]
                pos += 1
                continue
            if found.scanned >= len(self.items):
                return
            index = found.scanned
            found.scanned += 1
            self._budget.step()
            candidate = self.items[index]
            if self._held(request, candidate) or not self.selectable(request, index):
                continue
            found.indices.append(index)
            if index < start:
                pos = len(found.indices)
