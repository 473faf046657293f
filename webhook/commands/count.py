"""Devices per DeviceClass of claims, templates, pods and workloads (one pod of each).

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

from quota.claims import CLAIM_KINDS, claim_spec_of
from quota.demand import pod_demand
from quota.derived import DerivedCache
from quota.devices import claim_devices
from quota.settings import Settings
from quota.workloads import WORKLOAD_KINDS, as_workload
from webhook.clusterstate import ClusterState
from webhook.commands._cluster import cluster_config, read_cluster
from webhook.commands._common import (
    Progress,
    add_input_arguments,
    emit,
    in_namespace,
    output_format,
    read_inputs,
)
from webhook.commands._kubeconfig import add_kubeconfig_arguments, namespace_of
from webhook.state import load_state

# What counting reads of a live cluster: the claims and templates pods name, and the
# DeviceClasses that give extended resources (an admin's; a namespace user counts without).
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")

__all__ = ["configure", "count_object", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_kubeconfig_arguments(parser)


def count_object(
    obj: Mapping[str, Any], state: ClusterState, cache: DerivedCache | None = None
) -> dict[str, int]:
    """Devices per class of a claim or template spec, or of one pod of a workload."""
    if obj.get("kind") in CLAIM_KINDS:
        return claim_devices(claim_spec_of(obj))
    return pod_demand(as_workload(obj), state.snapshot(), cache=cache).all_devices()


def run(args: argparse.Namespace) -> int:
    config = cluster_config(args, required=False)
    namespace = namespace_of(args, config)
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
    cache = DerivedCache()
    for i, obj in enumerate(counted):
        if i % 1000 == 0:
            progress.update(f"counted {i} of {len(counted)} objects")
        metadata = obj.get("metadata") or {}
        items.append(
            {
                "kind": obj["kind"],
                "namespace": metadata.get("namespace") or namespace,
                "name": metadata.get("name") or metadata.get("generateName"),
                "devices": count_object(obj, state, cache),
            }
        )
    progress.done()

    def table(wide: bool) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        rows = []
        for item in items:
            devices = item["devices"]
            row = (
                item["kind"],
                item["namespace"],
                item["name"],
                ", ".join(f"{c}={n}" for c, n in devices.items()) or "-",
            )
            rows.append((*row, sum(devices.values())) if wide else row)
        header = ("KIND", "NAMESPACE", "NAME", "DEVICES")
        return ((*header, "TOTAL") if wide else header), rows

    emit(output_format(args), items, table, lambda i: f"{i['kind'].lower()}/{i['name']}")
    return 0
