"""Devices per DeviceClass of claims, templates, pods and workloads (one pod of each)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from quota.claims import CLAIM_KINDS, claim_spec_of
from quota.demand import pod_demand
from quota.derived import DerivedCache
from quota.devices import claim_devices
from quota.workloads import WORKLOAD_KINDS, as_workload
from webhook.clusterstate import ClusterState
from webhook.commands._common import (
    Progress,
    add_input_arguments,
    emit,
    inputs_and_state,
    output_format,
)

__all__ = ["configure", "count_object", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)


def count_object(
    obj: Mapping[str, Any], state: ClusterState, cache: DerivedCache | None = None
) -> dict[str, int]:
    """Devices per class of a claim or template spec, or of one pod of a workload."""
    if obj.get("kind") in CLAIM_KINDS:
        return claim_devices(claim_spec_of(obj))
    return pod_demand(as_workload(obj), state.snapshot(), cache=cache).all_devices()


def run(args: argparse.Namespace) -> int:
    progress = Progress("count")
    inputs, state = inputs_and_state(args, progress)
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
                "namespace": metadata.get("namespace") or "default",
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
