"""Devices per DeviceClass of claims, templates, pods and workloads (one pod of each), and
what they are charged in the counter and capacity resources (GPU memory, bandwidth) of the
ClusterQueues the cluster view holds, in each resource's unit (`quota.devicecharge`).

Claims and templates a pod names are read from the inputs, then from the cluster:
`--state DIR`, else a live one through `--kubeconfig FILE`, `$KUBECONFIG` or
`~/.kube/config` (claims and templates listed once; a namespace user's of their namespace
only), else none. Objects without a namespace go to `-n`, else the kubeconfig context's
namespace, else `default`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from quota.claims import CLAIM_KINDS, claim_spec_of, expand_pod_claims
from quota.demand import catalog_of, pod_demand
from quota.devicecharge import claim_charge
from quota.devices import claim_devices
from quota.errors import InvalidObject, object_ref
from quota.messages import format_amount
from quota.quantity import sat_add
from quota.queues import parse_cluster_queue
from quota.settings import Settings
from quota.sources import DeviceSource
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
from webhook.store.manifests import load_state

# What counting reads of a live cluster: the claims and templates pods name, and the
# DeviceClasses that give extended resources (an admin's; a namespace user counts without).
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")

__all__ = ["charge_object", "configure", "count_object", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_kubeconfig_arguments(parser)


def count_object(obj: Mapping[str, Any], state: ClusterState) -> dict[str, int]:
    """Devices per class of a claim or template spec, or of one pod of a workload."""
    if obj.get("kind") in CLAIM_KINDS:
        return claim_devices(claim_spec_of(obj))
    return pod_demand(as_workload(obj), state.snapshot()).all_devices()


def _sources(state: ClusterState) -> dict[str, DeviceSource]:
    """Counter and capacity resources of the view's ClusterQueues (unparseable ones skipped)."""
    out: dict[str, DeviceSource] = {}
    for obj in state.list("ClusterQueue"):
        try:
            out.update(parse_cluster_queue(obj).sources)
        except InvalidObject:
            continue
    return dict(sorted(out.items()))


def charge_object(
    obj: Mapping[str, Any],
    state: ClusterState,
    sources: Mapping[str, DeviceSource],
) -> dict[str, str]:
    """Per counter or capacity resource, what a claim, a template or one pod of a workload is
    charged (shared claims included), in the resource's unit; resources it does not touch
    are left out."""
    if not sources:
        return {}
    view = state.snapshot()
    catalog = catalog_of(view)()
    if obj.get("kind") in CLAIM_KINDS:
        metadata = obj.get("metadata") or {}
        ref = object_ref(str(obj["kind"]), metadata.get("namespace"), metadata.get("name"))
        base = "spec.spec" if obj["kind"] == "ResourceClaimTemplate" else "spec"
        specs = [(claim_spec_of(obj), ref, base)]
    else:
        workload = as_workload(obj)
        claims = expand_pod_claims(workload.pod, view, workload.ref)
        specs = [
            (c.spec, object_ref("ResourceClaim", c.namespace, c.claim or c.template), "spec")
            for c in claims
        ]
    out = {}
    for resource, source in sources.items():
        total = sat_add(
            *(
                claim_charge(catalog, source, spec, ref, base=base).amount
                for spec, ref, base in specs
            )
        )
        if total:
            out[resource] = format_amount(resource, total, source.unit)
    return out


def run(args: argparse.Namespace) -> int:
    config = cluster_config(args, required=False)
    namespace = command_namespace(args, config)
    if config is not None:
        state = read_cluster(config, Settings(), namespace, KINDS).state
    else:
        state = load_state(args.state) if args.state else ClusterState()
    progress = Progress("count")
    files = read_inputs(args, progress)
    inputs = [in_namespace(obj, namespace) for _, objects in files for obj in objects]
    for obj in inputs:
        state.upsert(obj)
    counted = [
        obj for obj in inputs if obj.get("kind") in CLAIM_KINDS or obj.get("kind") in WORKLOAD_KINDS
    ]
    items = []
    sources = _sources(state)
    for i, obj in enumerate(counted):
        if i % 1000 == 0:
            progress.update(f"counted {i} of {len(counted)} objects")
        metadata = obj.get("metadata") or {}
        items.append(
            {
                "kind": obj["kind"],
                "namespace": metadata.get("namespace") or namespace,
                "name": metadata.get("name") or metadata.get("generateName"),
                "devices": count_object(obj, state),
            }
            | ({"charges": charge_object(obj, state, sources)} if sources else {})
        )
    progress.done()

    def table(wide: bool) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        rows = []
        for item in items:
            devices = item["devices"]
            row: tuple[Any, ...] = (
                item["kind"],
                item["namespace"],
                item["name"],
                ", ".join(f"{c}={n}" for c, n in devices.items()) or "-",
            )
            if sources:
                row += (", ".join(f"{r}={v}" for r, v in item["charges"].items()) or "-",)
            rows.append((*row, sum(devices.values())) if wide else row)
        header = ("KIND", "NAMESPACE", "NAME", "DEVICES", *(("CHARGES",) if sources else ()))
        return ((*header, "TOTAL") if wide else header), rows

    emit(output_format(args), items, table, lambda i: f"{i['kind'].lower()}/{i['name']}")
    return 0
