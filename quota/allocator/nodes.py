"""Node selection: does a slice or device (nodeName / allNodes / nodeSelector) serve a node?"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quota.allocator.errors import AllocationError
from quota.selectors import NODE_OPERATORS, requirement_matches

__all__ = ["node_matches", "selector_matches"]


def _requirement(labels: Mapping[str, str], req: Mapping[str, Any]) -> bool:
    if req.get("operator", "") not in NODE_OPERATORS:
        raise AllocationError(
            f"node selector: unsupported operator {req.get('operator', '')!r} "
            f"for key {req.get('key', '')!r}"
        )
    return requirement_matches(req, labels)


def _term(node: Mapping[str, Any], term: Mapping[str, Any]) -> bool:
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches no node
    field_values = {"metadata.name": metadata.get("name", "")}
    for req in fields:
        if req.get("key") not in field_values:
            raise AllocationError(f"node selector: unsupported field {req.get('key')!r}")
    return all(_requirement(labels, r) for r in expressions) and all(
        _requirement(field_values, r) for r in fields
    )


def selector_matches(node: Mapping[str, Any], selector: Mapping[str, Any]) -> bool:
    """A v1 NodeSelector: terms are ORed, requirements within a term ANDed."""
    return any(_term(node, term) for term in selector.get("nodeSelectorTerms") or ())


def node_matches(
    node: Mapping[str, Any] | None,
    node_name: str,
    all_nodes: bool,
    selector: Mapping[str, Any] | None,
) -> bool:
    """The node-selection rule shared by slices and devices; a None node matches nothing."""
    if node_name:
        return node is not None and (node.get("metadata") or {}).get("name") == node_name
    if all_nodes:
        return True
    if selector is not None:
        return node is not None and selector_matches(node, selector)
    return False
