"""Place claims on nodes with the DRA allocator, as the scheduler would.

The claims of one pod (or pod-template workload) are placed together, as the
scheduler would: on one node (with `--node`, on that node), honouring devices
already allocated to claims in the state directory. The ResourceClaims and
templates of a file that no pod of that file uses are placed together too; every
pod and every file is a separate what-if against the same cluster. `--together`
places every claim given as the claims of one pod. A claim that is already
allocated keeps its allocation.

The cluster is `--state DIR`, else a live one through `--kubeconfig FILE`, `$KUBECONFIG`
or `~/.kube/config` (listed once, nothing written; its ResourceSlices are cluster-scoped,
so this needs an admin's read access). Objects without a namespace go to `-n`, else the
kubeconfig context's namespace, else `default`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quota.allocator import AllocationError
from quota.allocator.budget import DEFAULT_SEARCH_STEPS, NODE_SEARCH_STEPS
from quota.claims import PodClaim, claim_spec_of, expand_pod_claims
from quota.devices import claim_devices
from quota.errors import InvalidObject, NotFound
from quota.objectkeys import namespace_of
from quota.placement import ClusterPlacer, Placement, make_placer
from quota.settings import Settings
from quota.workloads import WORKLOAD_KINDS, as_workload
from webhook.commands._cluster import cluster_config, read_cluster
from webhook.commands._common import (
    Progress,
    add_input_arguments,
    emit,
    in_namespace,
    output_format,
    read_inputs,
)
from webhook.commands._kubeconfig import add_kubeconfig_arguments, command_namespace
from webhook.store.clusterstate import ClusterState
from webhook.store.manifests import STDIN, load_state

__all__ = ["collect_claims", "configure", "run"]

# What placing reads of a live cluster: devices, nodes, and the claims that hold devices.
KINDS = ("ResourceSlice", "DeviceClass", "Node", "ResourceClaim", "ResourceClaimTemplate")


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_kubeconfig_arguments(parser)
    parser.add_argument("--node", metavar="NAME", help="place the claims on this node only")
    parser.add_argument(
        "--max-steps",
        type=_steps,
        default=DEFAULT_SEARCH_STEPS,
        metavar="N",
        help="search steps one pod's placement may take before it is answered too complex, "
        f"as admission does (default {DEFAULT_SEARCH_STEPS}, one node at most "
        f"{NODE_SEARCH_STEPS * 100 // DEFAULT_SEARCH_STEPS}%% of them); 0: no bound",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="place all claims given as the claims of one pod (default: each pod, and each "
        "file's other claims, separately)",
    )


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of steps: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no bound) or more, not {value}")
    return value


def _placer(state: ClusterState, max_steps: int) -> ClusterPlacer:
    """A placer with `max_steps` (0: no bound), one node's share scaled like the default's."""
    if max_steps == 0:
        return make_placer(state, steps=sys.maxsize, node_steps=None)
    share = max(1, max_steps * NODE_SEARCH_STEPS // DEFAULT_SEARCH_STEPS)
    return make_placer(state, steps=max_steps, node_steps=share)


def _standalone(obj: Mapping[str, Any]) -> tuple[str, PodClaim]:
    metadata = obj.get("metadata") or {}
    namespace = namespace_of(obj)
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
        for claim in expand_pod_claims(
            workload.pod, state.snapshot(), workload.ref, base=workload.template_path
        ):
            kind = "ResourceClaim" if claim.shared else "ResourceClaimTemplate"
            referenced.add((kind, claim.key))
            if claim.shared:
                if all(c.key != claim.key or not c.shared for _, c in from_workloads):
                    from_workloads.append((str(claim.claim), claim))
            else:
                from_workloads.append((f"{workload.name}-{claim.entry}", claim))
    standalone = []
    for obj in inputs:
        obj_kind = obj.get("kind")
        if obj_kind not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        name, claim = _standalone(obj)
        if (obj_kind, claim.key) not in referenced:
            standalone.append((name, claim))
    return from_workloads + standalone


def _groups(
    files: list[tuple[Path, list[Mapping[str, Any]]]], state: ClusterState, together: bool
) -> list[tuple[str, list[tuple[str, PodClaim]]]]:
    """(group label, claims) to place, each group as the claims of one pod would be."""
    if together:
        inputs = [obj for _, objects in files for obj in objects]
        return [("all", collect_claims(inputs, state))]
    groups = []
    for path, objects in files:
        source = "-" if path == STDIN else str(path)
        workloads = [obj for obj in objects if obj.get("kind") in WORKLOAD_KINDS]
        for obj in workloads:
            metadata = obj.get("metadata") or {}
            label = f"{str(obj['kind']).lower()}/{metadata.get('name') or '<unnamed>'}"
            groups.append((label, collect_claims([obj], state)))
        others = [obj for obj in objects if obj.get("kind") not in WORKLOAD_KINDS]
        rest = collect_claims(others, state)
        referenced = {claim.key for _, claims in groups for _, claim in claims if claim.shared}
        rest = [(name, claim) for name, claim in rest if claim.key not in referenced]
        if rest:
            groups.append((source, rest))
    return [(label, claims) for label, claims in groups if claims]


def _items(
    group: str, claims: list[tuple[str, PodClaim]], placement: Placement
) -> list[dict[str, Any]]:
    items = []
    for i, (name, claim) in enumerate(claims):
        allocation = placement.allocations[i] if placement.ok and placement.allocations else None
        items.append(
            {
                "group": group,
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
    config = cluster_config(args, required=True)
    namespace = command_namespace(args, config)
    if config is not None:
        state, source = read_cluster(config, Settings(), kinds=KINDS).state, str(config.path)
    else:
        state, source = load_state(args.state), str(args.state)
    progress = Progress("allocate")
    read = read_inputs(args, progress)
    progress.done()
    files = [(path, [in_namespace(obj, namespace) for obj in objects]) for path, objects in read]
    for _, objects in files:
        for obj in objects:
            state.upsert(obj)
    if args.node and state.list("Node") and state.get("Node", None, args.node) is None:
        raise NotFound("Node", None, args.node, referrer="--node")
    if not state.list("ResourceSlice"):
        raise InvalidObject(
            source, "", "no ResourceSlices: there are no devices to place claims on"
        )
    groups = _groups(files, state, args.together)
    items: list[dict[str, Any]] = []
    placer = _placer(state, args.max_steps)  # one placement index for every group
    for group, claims in groups:
        placement = placer.place([c for _, c in claims], node=args.node)
        if placement.invalid:
            raise AllocationError(placement.reason)
        items.extend(_items(group, claims, placement))
    fmt = output_format(args)
    if fmt is None or fmt == "wide":
        how = (
            "all claims placed together as one pod (--together)"
            if args.together
            else "the claims of each pod placed together, each pod and each file's other "
            "claims separately (--together: all as one pod)"
        )
        print(f"draquota allocate: {len(groups)} group(s): {how}", file=sys.stderr)

    def table(wide: bool) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        rows = []
        for item in items:
            detail = _devices(item["allocation"]) if item["ok"] else item["reason"]
            rows.append(
                (
                    item["group"],
                    item["namespace"],
                    item["name"],
                    "yes" if item["ok"] else "no",
                    item["node"] or "-",
                    detail if wide or len(detail) <= 100 else detail[:97] + "...",
                )
            )
        return ("GROUP", "NAMESPACE", "NAME", "OK", "NODE", "DEVICES / REASON"), rows

    emit(fmt, items, table, lambda i: f"resourceclaim/{i['name']}")
    return 0
