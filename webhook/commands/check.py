"""What-if admission decisions for pods and workloads, without a webhook.

Inputs are decided in order; every admitted pod
counts against the next, on top of the live pods (and, with --kubeconfig, the
reservations in flight) of the cluster. A pod of a ClusterQueue with `whenFull:
Queue` is admitted at once when it fits and nobody waits ahead of it that its
queueingStrategy makes it wait behind; otherwise it waits, and the output gives
its position in the order waiting pods would start in. Claims, templates, queues and other
objects among the inputs join the cluster view before anything is decided.
With --kubeconfig the cluster is listed once and nothing is written to it.

A malformed pod or workload is a denial item, not a crash. A file that cannot be
read, or a ClusterQueue, LocalQueue or ResourceFlavor among the inputs that is
invalid, exits 2 (so a quota setup can be checked without any pod).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quota.decision import conclude, conclude_job, decide, prepare
from quota.derived import DerivedCache
from quota.errors import InvalidObject
from quota.flavorfilter import Placer
from quota.livepods import usage_from_pods
from quota.messages import format_amounts
from quota.placement import make_placer
from quota.queues import STRICT_FIFO, LocalQueue, parse_resource_flavor
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from quota.workloads import WORKLOAD_KINDS
from webhook.cli import EXIT_BAD_INPUT
from webhook.clusterstate import ClusterState
from webhook.commands._cluster import live_snapshot
from webhook.commands._common import (
    Progress,
    add_input_arguments,
    emit,
    load_settings,
    output_format,
    read_inputs,
)
from webhook.state import load_state

__all__ = ["check_objects", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="decide against a live cluster (read only: listed once, nothing written)",
    )
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
        "localQueue": decision.local_queue_name,
        "waits": decision.queued,
    }


def _priority(obj: Mapping[str, Any]) -> int:
    spec = obj.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _from_queue(
    obj: Mapping[str, Any],
    queued: Decision,
    state: ClusterState,
    settings: Settings,
    placer: Placer | None,
    usage: Usage,
    ahead: list[str],
    cache: DerivedCache,
) -> Decision:
    """A pod its queue takes: admitted at once when it fits and its queueingStrategy lets it
    past those waiting `ahead`, else still queued, saying why."""
    prepared = prepare(obj, state, settings, placer, cache=cache)
    if isinstance(prepared, Decision):
        return prepared
    queue = prepared.route.queue
    if queue.queueing_strategy == STRICT_FIFO and ahead:
        why = f"behind {ahead[0]} (StrictFIFO)"
        return dataclasses.replace(queued, message=f"{queued.message} {why}")
    job = prepared.workload.kind == "Job"
    now = conclude_job(prepared, usage) if job else conclude(prepared, usage, enqueue=False)
    if now.allowed:
        return dataclasses.replace(now, message=f"{now.message} by its queue at once")
    why = f"for quota: {now.shortfall or now.message}"
    return dataclasses.replace(queued, message=f"{queued.message} {why}")


def _positions(items: list[dict[str, Any]], waiting: dict[str, list[tuple[int, int]]]) -> None:
    """Number each waiting item by the order its ClusterQueue would start them in."""
    for entries in waiting.values():
        entries.sort(key=lambda entry: (-entry[0], entry[1]))
        for position, (_, index) in enumerate(entries, 1):
            items[index]["message"] += f"; position {position} of {len(entries)}"


def check_objects(
    inputs: Sequence[Mapping[str, Any]],
    state: ClusterState,
    settings: Settings,
    placer: Placer | None = None,
    usage: Usage | None = None,
) -> list[dict[str, Any]]:
    """Decide the pods and workloads of `inputs` in order; admitted pods count against later ones.

    Other inputs (claims, templates, queues, ...) are added to `state` first. Input
    pods are not live pods of the state: each counts only once it is admitted.
    `usage` is what the cluster already uses (default: its live pods).
    """
    decided = [obj for obj in inputs if obj.get("kind") in WORKLOAD_KINDS]
    for obj in inputs:
        if obj.get("kind") not in WORKLOAD_KINDS:
            state.upsert(obj)
    cache = DerivedCache()
    if usage is None:
        usage = usage_from_pods(state.snapshot(), settings, time.time(), cache=cache)
    else:
        usage = usage.copy()
    items: list[dict[str, Any]] = []
    waiting: dict[str, list[tuple[int, int]]] = {}  # ClusterQueue -> (priority, item index)
    table = queue_table(state.snapshot(), settings, cache=cache)
    for obj in decided:
        decision = decide(obj, state, usage, settings, placer, cache=cache)
        _, namespace, name = _identity(obj)
        if decision.queued:
            queue = _queue_of(_item(obj, decision), table)
            ahead = [items[i]["name"] for _, i in waiting.get(queue, ())]
            decision = _from_queue(obj, decision, state, settings, placer, usage, ahead, cache)
            if decision.queued:
                waiting.setdefault(queue, []).append((_priority(obj), len(items)))
        if decision.allowed and decision.charge is not None:
            usage.add(f"{namespace}/{name}", decision.charge)
        items.append(_item(obj, decision))
    _positions(items, waiting)
    return items


def _queue_of(item: dict[str, Any], table: QueueTable) -> str:
    charge = item["charge"] or {}
    if charge.get("clusterQueue"):
        return str(charge["clusterQueue"])
    local = table.local_queues.get(f"{item['namespace']}/{item.get('localQueue') or ''}")
    return local.cluster_queue if isinstance(local, LocalQueue) else "-"


def _table(
    items: list[dict[str, Any]], wide: bool
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    rows = []
    for item in items:
        charge = item["charge"] or {}
        flavors = sorted(set((charge.get("flavors") or {}).values()))
        row: tuple[Any, ...] = (
            item["kind"],
            item["namespace"],
            item["name"],
            "waits" if item["waits"] else "admitted" if item["allowed"] else "DENIED",
            item["reason"],
            item["clusterQueue"] or "-",
            ",".join(flavors) or "-",
            format_amounts(charge.get("usage") or {}) if charge else "-",
        )
        if wide:
            selector = ",".join(f"{k}={v}" for k, v in item["nodeSelector"].items())
            row += (selector or "-", item["message"])
        rows.append(row)
    header = ("KIND", "NAMESPACE", "NAME", "DECISION", "REASON", "QUEUE", "FLAVOR", "CHARGE")
    return ((*header, "NODE SELECTOR", "MESSAGE") if wide else header), rows


def _print_notes(items: list[dict[str, Any]]) -> None:
    waits = sum(1 for item in items if item["waits"])
    admitted = sum(1 for item in items if item["allowed"]) - waits
    waiting = f", {waits} wait in their queue" if waits else ""
    print(f"\n{admitted} allowed, {len(items) - admitted - waits} denied{waiting}")
    notes = [item for item in items if not item["allowed"] or item["waits"] or item["warnings"]]
    if notes:
        print()
    for item in notes:
        if not item["allowed"] or item["waits"]:
            print(f"{item['namespace']}/{item['name']}: {item['message']}")
        for warning in item["warnings"]:
            print(f"{item['namespace']}/{item['name']}: warning: {warning}")


def _input_queue_problems(
    inputs: Sequence[Mapping[str, Any]], state: ClusterState, settings: Settings
) -> list[str]:
    """Why the queue objects given as inputs cannot be used (empty when all are valid)."""
    table = queue_table(state.snapshot(), settings)
    problems = []
    for obj in inputs:
        kind = obj.get("kind")
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if kind == "ClusterQueue" and name in table.invalid:
            reason = table.invalid[name]
            prefix = f"ClusterQueue {name}: "
            problems.append(reason if reason.startswith(prefix) else prefix + reason)
        elif kind == "LocalQueue":
            key = f"{metadata.get('namespace') or 'default'}/{name}"
            local = table.local_queues.get(key)
            if isinstance(local, str):
                problems.append(local)
        elif kind == "ResourceFlavor":
            try:
                parse_resource_flavor(obj)
            except InvalidObject as exc:
                problems.append(str(exc))
    return problems


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    if args.state is not None and args.kubeconfig is not None:
        raise InvalidObject("--kubeconfig", "", "cannot be used with --state")
    usage: Usage | None = None
    if args.kubeconfig is not None:
        state, usage_of = live_snapshot(args.kubeconfig, settings)
        usage = usage_of()
    else:
        state = load_state(args.state) if args.state else ClusterState()
    progress = Progress("check")
    inputs = [obj for _, objects in read_inputs(args, progress) for obj in objects]
    progress.done()
    items = check_objects(inputs, state, settings, make_placer(state), usage)
    if items and not state.list("ResourceSlice") and settings.placement != "Off":
        print(
            "draquota check: placement not checked: the cluster has no ResourceSlices",
            file=sys.stderr,
        )
    table = queue_table(state.snapshot(), settings)
    for item in items:
        item["clusterQueue"] = None if item["reason"] == "NotManaged" else _queue_of(item, table)
        if item["clusterQueue"] == "-":
            item["clusterQueue"] = None
        item.pop("localQueue", None)
    problems = _input_queue_problems(inputs, state, settings)
    fmt = output_format(args)
    if items or fmt in ("json", "yaml"):
        emit(
            fmt,
            items,
            lambda wide: _table(items, wide),
            lambda i: f"{i['kind'].lower()}/{i['name']}",
        )
        if fmt in (None, "wide"):
            _print_notes(items)
    for problem in problems:
        print(f"draquota check: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT if problems else 0
