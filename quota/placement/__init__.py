"""Cluster-wide placement: find one node where all claims of a pod get devices together.

The allocator answers for one node; placement picks the node, searching
(`quota.placement.search`) an index of the cluster kept per revision
(`quota.placement.index`), and says why when no node will do
(`quota.placement.diagnosis`).

Admission asks whether the claims can EVER be placed (`ClusterPlacer.__call__`): on the
published devices, ignoring current allocations, because devices free up and
quota, not the webhook, shares them out. It first tries the devices free now; when
that fails but an empty cluster would do, the answer is ok with `now=False` and a
reason saying why not now (the request the free devices cannot meet). `ClusterPlacer.place`
(the allocate command) answers for now.

Outcomes: `Placement(ok=True, node, allocations)`; `ok=False` with a reason
that names the request that cannot be met and why; `ok=False, invalid=True` when
the claims are invalid input (CEL error, unknown class, > 32 devices);
`ok=False, too_complex=True` when answering would need more than the work budget
(search steps, CEL cost: `quota.allocator.budget`). Placement never raises for
cluster content: malformed ResourceSlices and DeviceClasses are skipped and listed
in `ClusterPlacer.problems`.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quota.allocations import Allocated
from quota.allocator import AllocationError, Budget, BudgetExceeded
from quota.allocator.budget import DEFAULT_CEL_COST, DEFAULT_SEARCH_STEPS, NODE_SEARCH_STEPS
from quota.allocator.nodes import selector_matches
from quota.claims import PodClaim
from quota.cluster import ClusterView, ViewSource
from quota.placement.diagnosis import claim_label, diagnose
from quota.placement.index import INDEX_KINDS, Index, labels_match
from quota.placement.search import search

__all__ = ["NO_SLICES", "ClusterPlacer", "Placement", "make_placer", "place_claims"]

NO_SLICES = "the cluster publishes no ResourceSlices: placement not judged"


@dataclass(frozen=True)
class Placement:
    """Where the claims of one pod fit, or why they fit nowhere: what every placer answers
    (`quota.flavorfilter.Placer`), so callers read its outcome from typed fields.

    At most one of `invalid` and `too_complex` is set, and only with `ok=False`; `now=False`
    only with `ok=True`."""

    ok: bool
    node: str | None = None
    allocations: tuple[Mapping[str, Any], ...] = ()
    reason: str = ""
    invalid: bool = False  # the claims are invalid input (CEL error, unknown class, ...)
    too_complex: bool = False  # answering needs more than the work budget
    now: bool = True  # ok on the devices free now; False: only once allocated ones are released
    steps: int = 0  # search steps spent
    cost: int = 0  # CEL cost spent


class ClusterPlacer:
    """Places the claims of pods on a cluster view; its index is kept per revision, thread-safe.

    Each question is answered on the view it names (`on(view)`, or `view=`), else on a
    snapshot of `source` taken then. `steps` and `cel_cost` are the work budget of one
    placement question and `node_steps` one node's share of the steps, None for none
    (`quota.allocator.budget`).
    """

    def __init__(
        self,
        source: ViewSource,
        steps: int = DEFAULT_SEARCH_STEPS,
        cel_cost: int = DEFAULT_CEL_COST,
        node_steps: int | None = NODE_SEARCH_STEPS,
    ) -> None:
        self.source = source
        self.steps = steps
        self.cel_cost = cel_cost
        self.node_steps = node_steps
        self._index: Index | None = None
        self._lock = threading.Lock()

    def index(self, view: ClusterView | None = None) -> Index:
        view = view if view is not None else self.source.snapshot()
        revision = view.revision(*INDEX_KINDS)
        with self._lock:
            if self._index is None or self._index.revision != revision:
                self._index = Index(view, self._index)
            return self._index

    def on(self, view: ClusterView) -> Callable[..., Placement]:
        """Admission's question (`__call__`), answered on `view`."""
        return functools.partial(self, view=view)

    @property
    def problems(self) -> list[str]:
        """Cluster objects skipped because they are malformed."""
        return list(self.index().problems)

    def budget(self) -> Budget:
        """A fresh budget for one placement question."""
        return Budget(steps=self.steps, cel_cost=self.cel_cost, node_steps=self.node_steps)

    def __call__(
        self,
        claims: Sequence[PodClaim],
        node_labels: Mapping[str, str] | None = None,
        view: ClusterView | None = None,
    ) -> Placement:
        """Admission's question: can these claims EVER be placed (on the published devices,
        ignoring allocations)? `now=False` when not on the devices free right now. A view
        that publishes no ResourceSlice at all (a quota-only --state directory) cannot
        judge placement, so it does not deny: quota is still enforced."""
        index = self.index(view)
        if not index.slices:
            return Placement(True, None, (), NO_SLICES)
        with index.lock:
            return _place(index, claims, node_labels, None, self.budget(), ever=True)

    def place(
        self,
        claims: Sequence[PodClaim],
        node_labels: Mapping[str, str] | None = None,
        node: str | None = None,
        view: ClusterView | None = None,
    ) -> Placement:
        """Place all claims together on one node (matching `node_labels`, or named `node`),
        on the devices free now."""
        index = self.index(view)
        with index.lock:
            return _place(index, claims, node_labels, node, self.budget(), ever=False)


def _place(
    index: Index,
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
        nodes = [n for n in nodes if labels_match(n, node_labels)]
    if fixed:
        nodes = [n for n in nodes if all(_fits_allocation(n, c.allocation) for c in fixed)]
    if not nodes:
        where = "matching the claims' existing allocations and labels"
        return Placement(False, None, (), f"no node {where}")
    specs = [c.spec for c in todo]
    names = [claim_label(c) for c in todo]
    own = [(c.namespace, c.claim) for c in todo if c.claim]
    # a pod's own shared claims do not block it
    allocated = index.holdings.without(own) if own else index.allocated

    def spent(placement: Placement) -> Placement:
        return dataclasses.replace(placement, steps=budget.used_steps, cost=budget.used_cost)

    try:
        found, invalid = search(index, nodes, specs, names, allocated, budget)
        if found is not None:
            name, results = found
            return spent(Placement(True, name, _merge(claims, results), ""))
        judged = allocated
        if ever and allocated:
            someday, _ = search(index, nodes, specs, names, Allocated(), budget)
            if someday is not None:
                why = diagnose(index, nodes, todo, allocated, budget)
                return spent(Placement(True, None, (), why, now=False))
            judged = Allocated()
        reason = diagnose(index, nodes, todo, judged, budget)
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


def make_placer(
    state: ViewSource,
    steps: int = DEFAULT_SEARCH_STEPS,
    cel_cost: int = DEFAULT_CEL_COST,
    node_steps: int | None = NODE_SEARCH_STEPS,
) -> ClusterPlacer:
    """A placer for admission: `placer(claims, node_labels)` -> Placement (cached indexes)."""
    return ClusterPlacer(state, steps, cel_cost, node_steps)


def place_claims(
    claims: Sequence[PodClaim],
    state: ViewSource,
    node_labels: Mapping[str, str] | None = None,
    node: str | None = None,
) -> Placement:
    """Place all claims together on one node of `state` (the named `node` if given).

    Builds the placement index for this one question: to ask more than one, keep a
    `ClusterPlacer` (`make_placer`), which keeps its index until the cluster view changes.
    """
    return ClusterPlacer(state).place(claims, node_labels, node)
