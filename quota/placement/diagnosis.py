"""Why the claims of a pod fit no node: the first request no node can meet on its own, with
the best any node offers, or that each request fits somewhere but not all on one node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quota.allocations import Allocated
from quota.allocator import Budget
from quota.claims import PodClaim
from quota.claimspec import ClaimSpec, ExactRequest
from quota.placement.index import Index, NodeView

__all__ = ["claim_label", "diagnose"]


def claim_label(claim: PodClaim) -> str:
    return claim.template or claim.claim or claim.entry


def diagnose(
    index: Index,
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


def _distinct(
    index: Index, nodes: Sequence[Mapping[str, Any]], allocated: Allocated
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


def _shortfall(
    label: str, claim: PodClaim, exact: ExactRequest, need: int, attribute: str | None, best: int
) -> str:
    noun = "device" if need == 1 else "devices"
    same = f" with the same {attribute}" if attribute else ""
    offer = f"the most any node offers is {best}" if best else "no node offers any"
    return (
        f"request {label} of claim {claim_label(claim)}: needs {need} {noun} of class "
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
    index: Index,
    view: NodeView,
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
