"""The node search: the first node, in name order, where all claims of a pod get devices
together.

A node whose free devices of some class cannot cover what the claims need at least is
skipped without running the search, so the common case does not search every node.
Before any search, a cheap pre-check per node asks of every request (each
`firstAvailable` alternative in turn) whether the node has enough devices that match its
class and its own selectors; a node that fails is never searched, so a pod with a request
no device matches is answered without searching at all. Nodes of one signature are
searched once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quota.allocations import Allocated
from quota.allocator import Budget, BudgetExceeded, InvalidPoolsError, allocate
from quota.allocator.budget import NodeUndecided
from quota.claimspec import ClaimSpec, DeviceRequest, ExactRequest
from quota.placement.index import Index, NodeView

__all__ = ["search"]


def search(
    index: Index,
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
        if budget.node_steps is not None:
            budget.node_limit = budget.used_steps + budget.node_steps
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
        share = budget.node_steps or 0
        raise BudgetExceeded("node-steps", share + 1, share)
    return None, invalid


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


def _alternatives(request: DeviceRequest) -> list[ExactRequest]:
    if request.exactly is not None:
        return [request.exactly]
    return [sub.exact for sub in request.first_available]


def _requests_can_be_met(
    index: Index,
    view: NodeView,
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
