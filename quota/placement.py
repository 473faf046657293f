"""Cluster-wide placement: find one node where all claims of a pod get devices together.

The allocator answers for one node; placement picks the node. It keeps an index of
the cluster (parsed slices grouped by node and pool, device classes, devices already
allocated in claim statuses, Node objects), rebuilt only when one of those kinds
changes — when only claim allocations change, the parsed devices, pools and CEL
results are kept, and only nodes whose pools hold a changed claim's devices are
recounted (`quota.allocations` keeps what each claim holds) — and per node the pools
and the number of free devices of each class. A node whose free devices of some
class cannot cover what the claims need at least is skipped without running the
search, so the common case does not search every node. Nodes of one shape (the same
devices, allocated alike: `_signature`) are checked once per question.

Before any search, a cheap pre-check per node asks of every request (each
`firstAvailable` alternative in turn) whether the node has enough devices that
match its class and its own selectors; a node that fails is never searched, so a
pod with a request no device matches is answered without searching at all.

Admission asks whether the claims can EVER be placed (`Placer.__call__`): on the
published devices, ignoring current allocations, because devices free up and
quota, not the webhook, shares them out. It first tries the devices free now; when
that fails but an empty cluster would do, the answer is ok with `now=False` and a
reason saying why not now (the request the free devices cannot meet). `Placer.place`
(the allocate command) answers for now.

Outcomes: `Placement(ok=True, node, allocations)`; `ok=False` with a reason
that names the request that cannot be met and why; `ok=False, invalid=True` when
the claims are invalid input (CEL error, unknown class, > 32 devices);
`ok=False, too_complex=True` when answering would need more than the work budget
(search steps, CEL cost: `quota.allocator.budget`). Placement never raises for
cluster content: malformed ResourceSlices and DeviceClasses are skipped and listed
in `Placer.problems`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quota.allocations import Allocated, ClaimAllocations
from quota.allocator import (
    AllocationError,
    Budget,
    BudgetExceeded,
    InvalidPoolsError,
    allocate,
)
from quota.allocator.budget import (
    DEFAULT_CEL_COST,
    DEFAULT_SEARCH_STEPS,
    NODE_SEARCH_STEPS,
    NodeUndecided,
)
from quota.allocator.cel import compile_selector
from quota.allocator.devices import Device, Slice, parse_slice
from quota.allocator.nodes import node_matches, selector_matches
from quota.allocator.pools import Pool, gather_pools
from quota.allocator.search import SelectorMemo
from quota.allocator.taintrules import apply_taint_rules, parse_taint_rule
from quota.claims import PodClaim
from quota.claimspec import ClaimSpec, DeviceRequest, ExactRequest
from quota.cluster import ClusterState, meta_of
from quota.deviceclasses import DeviceClass, parse_device_class
from quota.errors import DraquotaError

__all__ = [
    "INDEX_KINDS",
    "NO_SLICES",
    "Placement",
    "Placer",
    "make_placer",
    "place_claims",
]

INDEX_KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "Node", "DeviceTaintRule")
# What the parsed devices depend on: not ResourceClaims, which only say what is allocated.
DEVICE_KINDS = ("ResourceSlice", "DeviceClass", "Node", "DeviceTaintRule")
NO_SLICES = "the cluster publishes no ResourceSlices: placement not judged"


@dataclass(frozen=True)
class Placement:
    """Where the claims of one pod fit, or why they fit nowhere."""

    ok: bool
    node: str | None
    allocations: tuple[Mapping[str, Any], ...]
    reason: str
    invalid: bool = False
    too_complex: bool = False
    now: bool = True  # ok on the devices free now; False: only once allocated ones are released
    steps: int = 0  # search steps spent
    cost: int = 0  # CEL cost spent


# Per node, how many distinct request shapes the pre-check remembers (users choose selectors).
_ENOUGH_CACHE = 512
# How many node label sets (flavors) the index remembers the nodes of.
_LABEL_SETS = 256


@dataclass
class _NodeView:
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

    def without_allocations(self) -> _NodeView:
        """The same node and pools, without what was derived from allocations."""
        enough = {k: v for k, v in self.enough.items() if k[-1] == "none"}
        signatures = {k: v for k, v in self.signatures.items() if k == "none"}
        return _NodeView(
            self.node, self.pools, {}, enough, signatures, self._devices, dict(self.total)
        )

    @property
    def devices(self) -> list[tuple[Device, Slice]]:
        if self._devices is None:
            self._devices = _devices(self.pools, self.node)
        return self._devices


class _Index:
    """Everything placement derives from one revision of the cluster view."""

    # Set by both paths of __init__: built afresh, or carried over from the previous index.
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
    views: dict[str, _NodeView]
    memo: SelectorMemo

    def __init__(self, state: ClusterState, previous: _Index | None = None) -> None:
        self.revision = state.revision(*INDEX_KINDS)
        self.devices_revision = state.revision(*DEVICE_KINDS)
        self.claims_revision = self.revision[INDEX_KINDS.index("ResourceClaim")]
        self.lock = threading.Lock()
        if previous is not None and previous.devices_revision == self.devices_revision:
            # Only allocations changed (the scheduler allocated or freed a claim): the parsed
            # devices, pools per node and CEL results stay; what depends on the changed
            # claims' pools goes.
            changed = state.changed_since("ResourceClaim", previous.claims_revision)
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
        asked for on every admission, and filtering 5,000 nodes each time costs ~10 ms)."""
        if not labels:
            return self.nodes
        key = tuple(sorted(labels.items()))
        found = self.by_labels.get(key)
        if found is None:
            if len(self.by_labels) >= _LABEL_SETS:
                self.by_labels.clear()
            found = self.by_labels[key] = [n for n in self.nodes if _labels_match(n, labels)]
        return found

    def view(self, node: Mapping[str, Any]) -> _NodeView:
        name = str((node.get("metadata") or {}).get("name"))
        known = self.views.get(name)
        if known is None:
            slices = [*self.by_node.get(name, ()), *self.shared]
            known = self.views[name] = _NodeView(node, gather_pools(slices, node, self.by_pool))
        return known

    def free(self, view: _NodeView, class_name: str, allocated: Allocated | None = None) -> int:
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
                self.memo[key] = known
            if not known:
                return False
        return True

    def signature(self, view: _NodeView, allocated: Allocated) -> tuple[Any, ...] | None:
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
        view: _NodeView,
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


def _signature(view: _NodeView, allocated: Allocated) -> tuple[Any, ...]:
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


def _holdings(state: ClusterState) -> ClaimAllocations:
    claims = state.list("ResourceClaim")
    return ClaimAllocations((meta_of(c)[1:], c) for c in claims)


def _claim_label(claim: PodClaim) -> str:
    return claim.template or claim.claim or claim.entry


def _labels_match(node: Mapping[str, Any], labels: Mapping[str, str] | None) -> bool:
    if not labels:
        return True
    have = (node.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


def _minimum_per_class(specs: Sequence[ClaimSpec]) -> dict[str, int]:
    """Devices per class that any placement needs at least (exclusive, non-admin requests;
    a `firstAvailable` request whose alternatives all ask one class needs their minimum)."""
    need: dict[str, int] = {}
    for spec in specs:
        for request in spec.requests:
            alternatives = _alternatives(request)
            classes = {a.device_class_name for a in alternatives}
            if len(classes) != 1 or any(a.admin_access for a in alternatives):
                continue
            n = min(1 if a.allocation_mode == "All" else a.count for a in alternatives)
            cls = classes.pop()
            need[cls] = need.get(cls, 0) + n
    return need


class Placer:
    """Places the claims of pods on the cluster view; cached per revision, thread-safe.

    `steps` and `cel_cost` are the work budget of one placement question
    (`quota.allocator.budget`).
    """

    def __init__(
        self,
        state: ClusterState,
        steps: int = DEFAULT_SEARCH_STEPS,
        cel_cost: int = DEFAULT_CEL_COST,
    ) -> None:
        self.state = state
        self.steps = steps
        self.cel_cost = cel_cost
        self._index: _Index | None = None
        self._lock = threading.Lock()

    def index(self) -> _Index:
        revision = self.state.revision(*INDEX_KINDS)
        with self._lock:
            if self._index is None or self._index.revision != revision:
                self._index = _Index(self.state, self._index)
            return self._index

    @property
    def problems(self) -> list[str]:
        """Cluster objects skipped because they are malformed."""
        return list(self.index().problems)

    def budget(self) -> Budget:
        """A fresh budget for one placement question."""
        return Budget(steps=self.steps, cel_cost=self.cel_cost)

    def __call__(
        self, claims: Sequence[PodClaim], node_labels: Mapping[str, str] | None = None
    ) -> Placement:
        """Admission's question: can these claims EVER be placed (on the published devices,
        ignoring allocations)? `now=False` when not on the devices free right now. A view
        that publishes no ResourceSlice at all (a quota-only --state directory) cannot
        judge placement, so it does not deny: quota is still enforced."""
        index = self.index()
        if not index.slices:
            return Placement(True, None, (), NO_SLICES)
        with index.lock:
            return _place(index, claims, node_labels, None, self.budget(), ever=True)

    def place(
        self,
        claims: Sequence[PodClaim],
        node_labels: Mapping[str, str] | None = None,
        node: str | None = None,
    ) -> Placement:
        """Place all claims together on one node (matching `node_labels`, or named `node`),
        on the devices free now."""
        index = self.index()
        with index.lock:
            return _place(index, claims, node_labels, node, self.budget(), ever=False)


def _place(
    index: _Index,
    claims: Sequence[PodClaim],
    node_labels: Mapping[str, str] | None,
    node_name: str | None,
    budget: Budget,
    ever: bool,
) -> Placement:
    fixed = [c for c in claims if c.allocation]
    todo = [c for c in claims if not c.allocation]
    if node_name is None:
        nodes = index.labelled(node_labels)
    else:
        nodes = [n for n in index.nodes if (n.get("metadata") or {}).get("name") == node_name]
        if not nodes and index.has_node_objects:
            return Placement(False, None, (), f"node {node_name} not found")
        if not nodes:
            # No Node objects in the view: the named node is a node without labels.
            nodes = [{"kind": "Node", "metadata": {"name": node_name}}]
        nodes = [n for n in nodes if _labels_match(n, node_labels)]
    if fixed:
        nodes = [n for n in nodes if all(_fits_allocation(n, c.allocation) for c in fixed)]
    if not nodes:
        where = "matching the claims' existing allocations and labels"
        return Placement(False, None, (), f"no node {where}")
    specs = [c.spec for c in todo]
    names = [_claim_label(c) for c in todo]
    own = [(c.namespace, c.claim) for c in todo if c.claim]
    # a pod's own shared claims do not block it
    allocated = index.holdings.without(own) if own else index.allocated

    def spent(placement: Placement) -> Placement:
        return dataclasses.replace(placement, steps=budget.used_steps, cost=budget.used_cost)

    try:
        found, invalid = _search(index, nodes, specs, names, allocated, budget)
        if found is not None:
            name, results = found
            return spent(Placement(True, name, _merge(claims, results), ""))
        judged = allocated
        if ever and allocated:
            someday, _ = _search(index, nodes, specs, names, Allocated(), budget)
            if someday is not None:
                why = _diagnose(index, nodes, todo, allocated, budget)
                return spent(Placement(True, None, (), why, now=False))
            judged = Allocated()
        reason = _diagnose(index, nodes, todo, judged, budget)
    except AllocationError as exc:
        return spent(Placement(False, None, (), str(exc), invalid=True))
    except BudgetExceeded as exc:
        return spent(Placement(False, None, (), str(exc), too_complex=True))
    if invalid:
        reason += f"; {invalid}"
    return spent(Placement(False, None, (), reason))


def _fits_allocation(node: Mapping[str, Any], allocation: Mapping[str, Any] | None) -> bool:
    selector = (allocation or {}).get("nodeSelector")
    return not selector or selector_matches(node, selector)


def _merge(
    claims: Sequence[PodClaim], results: list[dict[str, Any]]
) -> tuple[Mapping[str, Any], ...]:
    out: list[Mapping[str, Any]] = []
    fresh = iter(results)
    for claim in claims:
        out.append(claim.allocation if claim.allocation else next(fresh))
    return tuple(out)


def _search(
    index: _Index,
    nodes: Sequence[Mapping[str, Any]],
    specs: Sequence[ClaimSpec],
    names: Sequence[str],
    allocated: Allocated,
    budget: Budget,
) -> tuple[tuple[str, list[dict[str, Any]]] | None, str]:
    """The first node (in name order) where the claims fit, or None and any invalid-pool text."""
    # Invalid input (unknown class, bad CEL, > 32 devices) must surface even when every node
    # is skipped below: validate against no devices first.
    allocate(
        specs,
        None,
        classes=index.classes,
        claim_names=names,
        pools=(),
        memo=index.memo,
        budget=budget,
    )
    need = _minimum_per_class(specs)
    invalid = ""
    undecided = False
    failed: set[tuple[Any, ...]] = set()
    for node in nodes:
        view = index.view(node)
        # Free counts exclude every allocated device, so they bound the current view; with
        # no allocations (can the claims ever be placed?) the node's devices of each class.
        if (allocated is index.allocated or not allocated) and any(
            index.free(view, cls, allocated) < n for cls, n in need.items()
        ):
            continue
        signature = index.signature(view, allocated)
        if signature is not None and signature in failed:
            continue  # a node just like one where the claims did not fit
        if not _requests_can_be_met(index, view, specs, allocated, budget):
            if signature is not None:
                failed.add(signature)
            continue
        budget.node_limit = budget.used_steps + NODE_SEARCH_STEPS
        try:
            results = allocate(
                specs,
                node,
                classes=index.classes,
                allocated=allocated.exclusive,
                shared_allocated=allocated.shared,
                allocated_capacity=allocated.capacity,
                claim_names=names,
                pools=view.pools,
                memo=index.memo,
                budget=budget,
            )
        except InvalidPoolsError as exc:
            invalid = invalid or str(exc)  # node-local: other nodes may still do
            continue
        except NodeUndecided:
            # Too long a search here: try the other nodes (not nodes just like this one).
            undecided = True
            if signature is not None:
                failed.add(signature)
            continue
        finally:
            budget.node_limit = None
        if results is not None:
            return (str((node.get("metadata") or {}).get("name")), results), invalid
        if signature is not None:
            failed.add(signature)
    if undecided:
        # No node fits, but some could not be decided: that is no proof the claims never fit.
        raise BudgetExceeded("node-steps", NODE_SEARCH_STEPS + 1, NODE_SEARCH_STEPS)
    return None, invalid


def _alternatives(request: DeviceRequest) -> list[ExactRequest]:
    if request.exactly is not None:
        return [request.exactly]
    return [sub.exact for sub in request.first_available]


def _requests_can_be_met(
    index: _Index,
    view: _NodeView,
    specs: Sequence[ClaimSpec],
    allocated: Allocated,
    budget: Budget,
) -> bool:
    """The pre-check: every request has an alternative with enough matching devices here."""
    return all(
        any(index.enough(view, exact, allocated, budget) for exact in _alternatives(request))
        for spec in specs
        for request in spec.requests
    )


def _distinct(
    index: _Index, nodes: Sequence[Mapping[str, Any]], allocated: Allocated
) -> list[Mapping[str, Any]]:
    """One node of each signature (all nodes when signatures are not computed)."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for node in nodes:
        signature = index.signature(index.view(node), allocated)
        if signature is not None:
            if signature in seen:
                continue
            seen.add(signature)
        out.append(node)
    return out


def _diagnose(
    index: _Index,
    nodes: Sequence[Mapping[str, Any]],
    claims: Sequence[PodClaim],
    allocated: Allocated,
    budget: Budget,
) -> str:
    """Name the first request no node can meet on its own, with the best any node offers."""
    nodes = _distinct(index, nodes, allocated)
    for claim in claims:
        for request in claim.spec.requests:
            alternatives = (
                [(request.name, request.exactly)]
                if request.exactly is not None
                else [(f"{request.name}/{s.name}", s.exact) for s in request.first_available]
            )
            worst = None
            for label, exact in alternatives:
                attribute = _matched_attribute(claim.spec, request.name, label)
                need = 1 if exact.allocation_mode == "All" else exact.count
                best = 0
                for n in nodes:  # stop at the first node that offers enough
                    best = max(
                        best, _offer(index, index.view(n), exact, attribute, allocated, budget)
                    )
                    if best >= need:
                        break
                if best >= need:
                    worst = None
                    break
                worst = worst or _shortfall(label, claim, exact, need, attribute, best)
            if worst:
                return worst
    total = len(nodes)
    return (
        f"the claims fit no node together ({total} node{'s' if total != 1 else ''} checked): "
        "each request fits somewhere, but not all at once on one node"
    )


def _shortfall(
    label: str, claim: PodClaim, exact: ExactRequest, need: int, attribute: str | None, best: int
) -> str:
    noun = "device" if need == 1 else "devices"
    same = f" with the same {attribute}" if attribute else ""
    offer = f"the most any node offers is {best}" if best else "no node offers any"
    return (
        f"request {label} of claim {_claim_label(claim)}: needs {need} {noun} of class "
        f"{exact.device_class_name}{same}; {offer}"
    )


def _matched_attribute(spec: ClaimSpec, request: str, label: str) -> str | None:
    for constraint in spec.constraints:
        if constraint.match_attribute and (
            not constraint.requests
            or request in constraint.requests
            or label in constraint.requests
        ):
            return constraint.match_attribute
    return None


def _offer(
    index: _Index,
    view: _NodeView,
    exact: ExactRequest,
    attribute: str | None,
    allocated: Allocated,
    budget: Budget,
) -> int:
    budget.step()
    device_class = index.classes.get(exact.device_class_name)
    if device_class is None:
        return 0
    groups: dict[Any, int] = {}
    for device, _ in view.devices:
        if not exact.admin_access and device.id in allocated.exclusive:
            continue
        if not index.matches(device, (*device_class.selectors, *exact.selectors), budget):
            continue
        key: Any = None
        if attribute:
            name = attribute if "/" in attribute else f"{device.driver}/{attribute}"
            key = device.attributes.get(name)
            if key is None:
                continue
        groups[key] = groups.get(key, 0) + 1
    return max(groups.values(), default=0)


def make_placer(
    state: ClusterState, steps: int = DEFAULT_SEARCH_STEPS, cel_cost: int = DEFAULT_CEL_COST
) -> Placer:
    """A placer for admission: `placer(claims, node_labels)` -> Placement (cached indexes)."""
    return Placer(state, steps, cel_cost)


def place_claims(
    claims: Sequence[PodClaim],
    state: ClusterState,
    node_labels: Mapping[str, str] | None = None,
    node: str | None = None,
) -> Placement:
    """Place all claims together on one node of `state` (the named `node` if given).

    Builds the placement index for this one question: to ask more than one, keep a
    `Placer` (`make_placer`), which keeps its index until the cluster view changes.
    """
    return Placer(state).place(claims, node_labels, node)
