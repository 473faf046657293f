"""The placement index: everything placement derives from one revision of the cluster view.

Parsed slices grouped by node and pool, device classes, devices already allocated in
claim statuses, Node objects, and per node the pools and the number of free devices of
each class. It is rebuilt only when one of those kinds changes — when only claim
allocations change, the parsed devices, pools and CEL results are kept, and only nodes
whose pools hold a changed claim's devices are recounted (`quota.allocations` keeps what
each claim holds). Nodes of one shape (the same devices, allocated alike: `_signature`)
answer alike, so the search checks them once per question.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quota.allocations import Allocated, ClaimAllocations
from quota.allocator import AllocationError, Budget
from quota.allocator.candidates import SelectorMemo
from quota.allocator.cel import compile_selector
from quota.allocator.devices import Device, Slice, parse_slice
from quota.allocator.nodes import node_matches
from quota.allocator.pools import Pool, gather_pools
from quota.allocator.taintrules import apply_taint_rules, parse_taint_rule
from quota.claimspec import ExactRequest
from quota.cluster import ClusterView, meta_of
from quota.deviceclasses import DeviceClass, parse_device_class
from quota.errors import DraquotaError
from quota.journal import JournalCursor, JournalPosition

__all__ = ["INDEX_KINDS", "Index", "NodeView", "labels_match"]

INDEX_KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "Node", "DeviceTaintRule")

# What the parsed devices depend on: not ResourceClaims, which only say what is allocated.
DEVICE_KINDS = ("ResourceSlice", "DeviceClass", "Node", "DeviceTaintRule")

# Per node, how many distinct request shapes the pre-check remembers (users choose selectors).
_ENOUGH_CACHE = 512

# How many node label sets (flavors) the index remembers the nodes of.
_LABEL_SETS = 256

# How many (selector, device) results the index remembers before it forgets them all: users
# choose selectors, and one whose text is new every pod would otherwise grow it until the
# devices change. A question evaluates at most its CEL budget's worth, far fewer.
MEMO_ENTRIES = 100_000


@dataclass
class NodeView:
    node: Mapping[str, Any]
    pools: list[Pool]
    free: dict[str, int] = field(default_factory=dict)
    enough: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    signatures: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    _devices: list[tuple[Device, Slice]] | None = None
    total: dict[str, int] = field(default_factory=dict)  # devices per class, allocated or not

    def uses(self, pools: set[tuple[str, str]]) -> bool:
        """Whether devices of these (driver, pool) pools are on the node or count for it."""
        return any((p.driver, p.name) in pools for p in self.pools)

    def without_allocations(self) -> NodeView:
        """The same node and pools, without what was derived from allocations."""
        enough = {k: v for k, v in self.enough.items() if k[-1] == "none"}
        signatures = {k: v for k, v in self.signatures.items() if k == "none"}
        return NodeView(
            self.node, self.pools, {}, enough, signatures, self._devices, dict(self.total)
        )

    @property
    def devices(self) -> list[tuple[Device, Slice]]:
        if self._devices is None:
            self._devices = _devices(self.pools, self.node)
        return self._devices


class Index:
    """Everything placement derives from one revision of the cluster view."""

    # Set by both paths of __init__: built afresh, or carried over from the previous index.
    claims: JournalPosition  # how far `holdings` follows the journal of ResourceClaims
    holdings: ClaimAllocations
    allocated: Allocated
    problems: list[str]
    slices: list[Slice]
    classes: dict[str, DeviceClass]
    by_node: dict[str, list[Slice]]
    shared: list[Slice]
    by_pool: dict[tuple[str, str], list[Slice]]
    nodes: list[Mapping[str, Any]]
    by_labels: dict[tuple[tuple[str, str], ...], list[Mapping[str, Any]]]
    has_node_objects: bool
    views: dict[str, NodeView]
    memo: SelectorMemo

    def __init__(self, state: ClusterView, previous: Index | None = None) -> None:
        self.revision = state.revision(*INDEX_KINDS)
        self.devices_revision = state.revision(*DEVICE_KINDS)
        self.lock = threading.Lock()
        if previous is not None and previous.devices_revision == self.devices_revision:
            # Only allocations changed (the scheduler allocated or freed a claim): the parsed
            # devices, pools per node and CEL results stay; what depends on the changed
            # claims' pools goes. Either way in time: a decision may ask on a view older than
            # the one the previous index was built from (the cursor follows it back).
            cursor = previous.claims.reading(state)
            changed = cursor.take("ResourceClaim")
            self.claims = cursor.position()
            if changed is None:
                self.holdings, touched = _holdings(state), None
            else:
                self.holdings = previous.holdings
                updates = ((key, state.get("ResourceClaim", *key)) for key in changed)
                touched = self.holdings.update(updates)
            self.allocated = self.holdings.snapshot()
            self.problems = previous.problems
            self.slices, self.classes = previous.slices, previous.classes
            self.by_node, self.shared = previous.by_node, previous.shared
            self.by_pool, self.nodes = previous.by_pool, previous.nodes
            self.by_labels = previous.by_labels
            self.has_node_objects = previous.has_node_objects
            self.memo = previous.memo
            with previous.lock:  # a placement may still be adding views to it
                views = list(previous.views.items())
            # A view none of whose pools changed is shared with the previous index: a placement
            # there may still write to it, but writes the same values.
            self.views = {}
            for name, view in views:
                unchanged = touched is not None and not view.uses(touched)
                self.views[name] = view if unchanged else view.without_allocations()
            return
        cursor = JournalCursor(state)
        cursor.mark("ResourceClaim")
        self.claims = cursor.position()
        self.holdings = _holdings(state)
        self.allocated = self.holdings.snapshot()
        self.problems = []
        self.slices = self._parse(state.list("ResourceSlice"), parse_slice)
        self.classes = {
            c.name: c for c in self._parse(state.list("DeviceClass"), parse_device_class)
        }
        rules = self._parse(state.list("DeviceTaintRule"), parse_taint_rule)
        if rules:
            self.slices = [apply_taint_rules(s, rules, self.classes) for s in self.slices]
        self.by_node = {}
        self.shared = []
        self.by_pool = {}
        for s in self.slices:
            self.by_pool.setdefault((s.driver, s.pool), []).append(s)
            if s.node_name and not s.shared_counters:
                self.by_node.setdefault(s.node_name, []).append(s)
            else:
                self.shared.append(s)
        nodes = {(n.get("metadata") or {}).get("name"): n for n in state.list("Node")}
        self.has_node_objects = bool(nodes)
        if not nodes:
            # A view without Node objects (a bare --state directory): the nodes the
            # slices name stand in, without labels. With Node objects, a slice naming
            # a node that does not exist is stale and offers nothing.
            nodes = {name: {"kind": "Node", "metadata": {"name": name}} for name in self.by_node}
        self.nodes = [nodes[name] for name in sorted(n for n in nodes if n)]
        self.by_labels = {}
        self.views = {}
        self.memo = {}

    def _parse(self, objects: list[Mapping[str, Any]], parse: Callable[[Any], Any]) -> list[Any]:
        out = []
        for obj in objects:
            try:
                out.append(parse(obj))
            except DraquotaError as exc:
                self.problems.append(str(exc))
        return out

    def labelled(self, labels: Mapping[str, str] | None) -> list[Mapping[str, Any]]:
        """The nodes carrying these labels, in name order (remembered: a flavor's nodes are
        asked for on every admission, and filtering every node each time grows with the cluster)."""
        if not labels:
            return self.nodes
        key = tuple(sorted(labels.items()))
        found = self.by_labels.get(key)
        if found is None:
            if len(self.by_labels) >= _LABEL_SETS:
                self.by_labels.clear()
            found = self.by_labels[key] = [n for n in self.nodes if labels_match(n, labels)]
        return found

    def view(self, node: Mapping[str, Any]) -> NodeView:
        name = str((node.get("metadata") or {}).get("name"))
        known = self.views.get(name)
        if known is None:
            slices = [*self.by_node.get(name, ()), *self.shared]
            known = self.views[name] = NodeView(node, gather_pools(slices, node, self.by_pool))
        return known

    def free(self, view: NodeView, class_name: str, allocated: Allocated | None = None) -> int:
        """Devices of the class on the node not allocated to anyone (an upper bound); with
        `allocated` empty, all devices of the class (what the node could ever offer)."""
        everything = allocated is not None and not allocated
        cache = view.total if everything else view.free
        count = cache.get(class_name)
        if count is None:
            busy = frozenset() if everything else self.allocated.exclusive
            device_class = self.classes.get(class_name)
            count = (
                0
                if device_class is None
                else sum(
                    1
                    for d, s in view.devices
                    if d.id not in busy and self.matches(d, device_class.selectors)
                )
            )
            cache[class_name] = count
        return count

    def matches(
        self, device: Device, selectors: Sequence[str | None], budget: Budget | None = None
    ) -> bool:
        """All selectors match (memoised per revision); CEL cost is spent from `budget`."""
        for expression in selectors:
            if expression is None:
                return False
            key = (expression, id(device))
            known = self.memo.get(key)
            if known is None:
                try:
                    known = compile_selector(expression).matches(device.cel, budget)
                except AllocationError:
                    known = False  # the search reports the error itself
                if len(self.memo) >= MEMO_ENTRIES:
                    self.memo.clear()  # pods with ever new selectors must not grow it unbounded
                self.memo[key] = known
            if not known:
                return False
        return True

    def signature(self, view: NodeView, allocated: Allocated) -> tuple[Any, ...] | None:
        """The node's signature for the two allocation views every admission uses (no
        allocations, or the index's); None for any other (not worth computing)."""
        which = "none" if not allocated else "index" if allocated is self.allocated else ""
        if not which:
            return None
        known = view.signatures.get(which)
        if known is None:
            known = view.signatures[which] = _signature(view, allocated)
        return known

    def enough(
        self,
        view: NodeView,
        exact: ExactRequest,
        allocated: Allocated,
        budget: Budget,
    ) -> bool:
        """Whether the node has as many devices matching the request's class and selectors
        as it needs (allocated ones excluded unless admin access): a bound, not a search.
        One step of `budget` per call, cached or not, so the count is deterministic."""
        budget.step()
        device_class = self.classes.get(exact.device_class_name)
        if device_class is None:
            return False
        need = 1 if exact.allocation_mode == "All" else exact.count
        busy = frozenset() if exact.admin_access else allocated.exclusive
        # Cached for the two views every admission uses: no allocations, or the index's.
        which = "none" if not busy else "index" if busy is self.allocated.exclusive else ""
        key = (exact.device_class_name, tuple(exact.selectors), need, which)
        known = view.enough.get(key) if which else None
        if known is not None:
            return known
        selectors = (*device_class.selectors, *exact.selectors)
        found = 0
        for device, _ in view.devices:
            if device.id in busy or not self.matches(device, selectors, budget):
                continue
            found += 1
            if found >= need:
                break
        result = found >= need
        if which:
            if len(view.enough) >= _ENOUGH_CACHE:
                view.enough.clear()
            view.enough[key] = result
        return result


def _signature(view: NodeView, allocated: Allocated) -> tuple[Any, ...]:
    """What a search on this node depends on, without the node's own name.

    Nodes with equal signatures give the same answer to the same claims (their pools
    differ only in names), so one failed search answers for all of them: a cluster of
    a thousand identical nodes is searched once, not a thousand times. Shared slices
    count by identity, node-local ones by content (device repr without pool and node
    name, and whether it is allocated); node labels count when devices select nodes.
    """
    parts: list[Any] = []
    for pool in view.pools:
        if pool.incomplete or pool.invalid:
            parts.append(("pool", pool.ref))  # never equal to another node's
            continue
        if pool.other_slices or pool.counter_sets:
            # Slices of the pool on other nodes count for its counters: by identity.
            parts.append(("other", tuple(id(o) for o in pool.other_slices)))
            parts.append(("counters", repr(pool.counter_sets)))
        for s in pool.slices:
            if not s.node_name or s.shared_counters:
                parts.append(("shared", id(s)))
                if s.per_device_node_selection:  # its devices pick nodes by name
                    parts.append(("node", (view.node.get("metadata") or {}).get("name")))
                continue
            if s.per_device_node_selection:
                parts.append(("labels", repr((view.node.get("metadata") or {}).get("labels"))))
            devices = tuple(
                (
                    repr(dataclasses.replace(d, pool="", node_name="")),
                    d.id in allocated.exclusive,
                    d.id in allocated.shared,
                    repr(allocated.capacity.get(d.id)),
                )
                for d in s.devices
            )
            parts.append((s.driver, s.name.replace(s.node_name, ""), devices))
    return tuple(parts)


def _devices(pools: Sequence[Pool], node: Mapping[str, Any]) -> list[tuple[Device, Slice]]:
    out = []
    for pool in pools:
        if pool.incomplete or pool.invalid:
            continue
        for s in pool.slices:
            for d in s.devices:
                if s.per_device_node_selection and not node_matches(
                    node, d.node_name, d.all_nodes, d.node_selector
                ):
                    continue
                out.append((d, s))
    return out


def _holdings(state: ClusterView) -> ClaimAllocations:
    claims = state.list("ResourceClaim")
    return ClaimAllocations((meta_of(c)[1:], c) for c in claims)


def labels_match(node: Mapping[str, Any], labels: Mapping[str, str] | None) -> bool:
    if not labels:
        return True
    have = (node.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())
