"""`draquota check FILE... [--state DIR] [--config FILE] [--json]`: what-if admission decisions.

Inputs are decided in order; every admitted pod counts against the next, on top
of the live pods found in --state. Claims, templates, queues and other objects
among the inputs join the cluster view before anything is decided. A malformed
pod or workload is a denial item, not a crash; a file that cannot be read exits 2.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quota.cluster import ClusterState
from quota.decision import Decision, Placer, decide
from quota.livepods import usage_from_pods
from quota.messages import format_amounts
from quota.placement import make_placer
from quota.settings import Settings
from quota.usage import Usage
from quota.workloads import WORKLOAD_KINDS
from webhook.commands._common import (
    add_input_arguments,
    load_settings,
    print_json,
    print_table,
)
from webhook.state import load_documents, load_state

__all__ = ["check_objects", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="webhook config file (deviceClassMappings, ...)"
    )


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    kind = obj.get("kind")
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    return (
        kind if isinstance(kind, str) else "<unknown>",
        str(metadata.get("namespace") or "default"),
        str(name),
    )


def _item(obj: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
    kind, namespace, name = _identity(obj)
    return {
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "allowed": decision.allowed,
        "reason": decision.reason,
        "message": decision.message,
        "warnings": list(decision.warnings),
        "charge": decision.charge.to_dict() if decision.charge else None,
        "nodeSelector": dict(decision.node_selector),
    }


def check_objects(
    inputs: Sequence[Mapping[str, Any]],
    state: ClusterState,
    settings: Settings,
    placer: Placer | None = None,
) -> list[dict[str, Any]]:
    """Decide the pods and workloads of `inputs` in order; admitted pods count against later ones.

    Other inputs (claims, templates, queues, ...) are added to `state` first. Input
    pods are not live pods of the state: each counts only once it is admitted.
    """
    decided = [obj for obj in inputs if obj.get("kind") in WORKLOAD_KINDS]
    for obj in inputs:
        if obj.get("kind") not in WORKLOAD_KINDS:
            state.upsert(obj)
    usage: Usage = usage_from_pods(state, settings, time.time())
    items = []
    for obj in decided:
        decision = decide(obj, state, usage, settings, placer)
        if decision.allowed and decision.charge is not None:
            _, namespace, name = _identity(obj)
            usage.add(f"{namespace}/{name}", decision.charge)
        items.append(_item(obj, decision))
    return items


def _print_human(items: list[dict[str, Any]]) -> None:
    rows = []
    for item in items:
        charge = item["charge"] or {}
        flavors = sorted(set((charge.get("flavors") or {}).values()))
        rows.append(
            (
                item["kind"],
                item["namespace"],
                item["name"],
                "admitted" if item["allowed"] else "DENIED",
                item["reason"],
                charge.get("clusterQueue", "-"),
                ",".join(flavors) or "-",
                format_amounts(charge.get("usage") or {}) if charge else "-",
            )
        )
    print_table(
        ("KIND", "NAMESPACE", "NAME", "DECISION", "REASON", "QUEUE", "FLAVOR", "CHARGE"), rows
    )
    admitted = sum(1 for item in items if item["allowed"])
    print(f"\n{admitted} allowed, {len(items) - admitted} denied")
    notes = [item for item in items if not item["allowed"] or item["warnings"]]
    if notes:
        print()
    for item in notes:
        if not item["allowed"]:
            print(f"{item['namespace']}/{item['name']}: {item['message']}")
        for warning in item["warnings"]:
            print(f"{item['namespace']}/{item['name']}: warning: {warning}")


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    state = load_state(args.state) if args.state else ClusterState()
    inputs: list[Mapping[str, Any]] = []
    for path in args.files:
        inputs.extend(load_documents(path))
    items = check_objects(inputs, state, settings, make_placer(state))
    if args.json:
        print_json({"items": items})
    else:
        _print_human(items)
    return 0
