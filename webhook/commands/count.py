"""`draquota count FILE... [--state DIR] [--json]`: devices per DeviceClass."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from quota.claims import claim_spec_of
from quota.cluster import ClusterState
from quota.demand import pod_demand
from quota.devices import claim_devices
from quota.workloads import WORKLOAD_KINDS, as_workload
from webhook.commands._common import add_input_arguments, inputs_and_state, print_json, print_table

__all__ = ["configure", "count_object", "run"]

CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)


def count_object(obj: Mapping[str, Any], state: ClusterState) -> dict[str, int]:
    """Devices per class of a claim or template spec, or of one pod of a workload."""
    if obj.get("kind") in CLAIM_KINDS:
        return claim_devices(claim_spec_of(obj))
    return pod_demand(as_workload(obj), state).all_devices()


def run(args: argparse.Namespace) -> int:
    inputs, state = inputs_and_state(args.files, args.state)
    items = []
    for obj in inputs:
        kind = obj.get("kind")
        if kind not in CLAIM_KINDS and kind not in WORKLOAD_KINDS:
            continue
        metadata = obj.get("metadata") or {}
        items.append(
            {
                "kind": kind,
                "namespace": metadata.get("namespace") or "default",
                "name": metadata.get("name") or metadata.get("generateName"),
                "devices": count_object(obj, state),
            }
        )
    if args.json:
        print_json({"items": items})
    else:
        rows = [
            (
                item["kind"],
                item["namespace"],
                item["name"],
                ", ".join(f"{c}={n}" for c, n in item["devices"].items()) or "-",
            )
            for item in items
        ]
        print_table(("KIND", "NAMESPACE", "NAME", "DEVICES"), rows)
    return 0
