"""`draquota allocate FILE... --state DIR [--node NAME] [--json]` (SPEC §7).

All claims given — ResourceClaim objects, and the claims of pods and pod-template
workloads — are placed together, as the claims of one pod would be: on one node
(with `--node`, on that node), honouring devices already allocated to claims in
the state directory. A claim that is already allocated keeps its allocation.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from quota.allocator import AllocationError
from quota.claims import PodClaim, claim_spec_of, expand_pod_claims
from quota.cluster import ClusterState
from quota.devices import claim_devices
from quota.errors import NotFound
from quota.placement import Placement, place_claims
from quota.workloads import WORKLOAD_KINDS, as_workload
from webhook.commands._common import add_input_arguments, inputs_and_state, print_json, print_table

__all__ = ["collect_claims", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser, state_required=True)
    parser.add_argument("--node", metavar="NAME", help="place the claims on this node only")


def _standalone(obj: Mapping[str, Any]) -> tuple[str, PodClaim]:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or "default"
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    spec = claim_spec_of(obj)
    if obj.get("kind") == "ResourceClaim":
        allocation = (obj.get("status") or {}).get("allocation")
        claim = PodClaim(
            name, namespace, spec, claim_devices(spec), claim=name, allocation=allocation
        )
    else:
        claim = PodClaim(name, namespace, spec, claim_devices(spec), template=name)
    return name, claim


def collect_claims(
    inputs: Sequence[Mapping[str, Any]], state: ClusterState
) -> list[tuple[str, PodClaim]]:
    """(display name, claim) for every claim to place, each claim once."""
    from_workloads: list[tuple[str, PodClaim]] = []
    referenced: set[tuple[str, str]] = set()
    for obj in inputs:
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        workload = as_workload(obj)
        for claim in expand_pod_claims(workload.pod, state, workload.ref):
            kind = "ResourceClaim" if claim.shared else "ResourceClaimTemplate"
            referenced.add((kind, claim.key))
            if claim.shared:
                if all(c.key != claim.key or not c.shared for _, c in from_workloads):
                    from_workloads.append((str(claim.claim), claim))
            else:
                from_workloads.append((f"{workload.name}-{claim.entry}", claim))
    standalone = []
    for obj in inputs:
        kind = obj.get("kind")
        if kind not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        name, claim = _standalone(obj)
        if (kind, claim.key) not in referenced:
            standalone.append((name, claim))
    return from_workloads + standalone


def _items(claims: list[tuple[str, PodClaim]], placement: Placement) -> list[dict[str, Any]]:
    items = []
    for i, (name, claim) in enumerate(claims):
        allocation = placement.allocations[i] if placement.ok and placement.allocations else None
        items.append(
            {
                "namespace": claim.namespace,
                "name": name,
                "ok": placement.ok,
                "node": placement.node,
                "reason": placement.reason,
                "allocation": allocation,
            }
        )
    return items


def _devices(allocation: Mapping[str, Any] | None) -> str:
    if not allocation:
        return "-"
    results = (allocation.get("devices") or {}).get("results") or ()
    return (
        ", ".join(f"{r['request']}={r['driver']}/{r['pool']}/{r['device']}" for r in results) or "-"
    )


def run(args: argparse.Namespace) -> int:
    inputs, state = inputs_and_state(args.files, args.state)
    claims = collect_claims(inputs, state)
    if args.node and state.list("Node") and state.get("Node", None, args.node) is None:
        raise NotFound("Node", None, args.node, referrer="--node")
    placement = place_claims([c for _, c in claims], state, node=args.node)
    if placement.invalid:
        raise AllocationError(placement.reason)
    items = _items(claims, placement)
    if args.json:
        print_json({"items": items})
        return 0
    rows = [
        (
            item["namespace"],
            item["name"],
            "yes" if item["ok"] else "no",
            item["node"] or "-",
            _devices(item["allocation"]) if item["ok"] else item["reason"],
        )
        for item in items
    ]
    print_table(("NAMESPACE", "NAME", "OK", "NODE", "DEVICES / REASON"), rows)
    return 0
