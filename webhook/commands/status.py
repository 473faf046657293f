"""Quota and usage per ClusterQueue, flavor and resource, and whether each queue is valid.

One row per ClusterQueue, flavor and resource: nominal quota, in use, borrowed
from the cohort, and lendable (the unused quota cohort members can borrow from
this queue now, at most its lendingLimit). `-o wide` adds the limits and what the
queue could still take. A queue that is invalid admits nothing: it is listed with
its problems and the command exits 2, so a quota setup can be checked before any
pod is submitted. Quantities are in the resource's own units (cpu in cores).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quota.assignment import quota_view
from quota.charge import FlavorResource
from quota.errors import InvalidObject
from quota.messages import format_amount
from quota.queues import ClusterQueue, parse_resource_flavor
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.usage import Usage
from webhook.clusterstate import ClusterState
from webhook.commands._cluster import live_snapshot, memory_usage
from webhook.commands._common import add_output_argument, emit, load_settings, output_format
from webhook.state import load_state

__all__ = ["configure", "queue_status", "run"]

EXIT_INVALID = 2


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--state", type=Path, metavar="DIR", help="directory of manifests standing in for a cluster"
    )
    source.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="a live cluster (read only: one LIST)"
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="webhook config file (deviceClassMappings, ...)"
    )
    add_output_argument(parser)


def _amount(resource: str, value: int | None) -> str | None:
    return None if value is None else format_amount(resource, value)


def _resources(
    table: QueueTable, queue: ClusterQueue, usage: Usage, flavor: str, resources: Sequence[str]
) -> list[dict[str, Any]]:
    out = []
    for resource in resources:
        key = FlavorResource(flavor, resource)
        quota = queue.quota(key)
        if quota is None:
            continue
        view = quota_view(table, queue, key, usage.of)
        borrowed = max(0, view.used - view.nominal)
        lendable = None
        if queue.cohort is not None:
            limit = quota.nominal if quota.lending_limit is None else quota.lending_limit
            lendable = max(0, min(limit, view.nominal - view.used))
        out.append(
            {
                "name": resource,
                "nominal": format_amount(resource, view.nominal),
                "inUse": format_amount(resource, view.used),
                "borrowed": format_amount(resource, borrowed),
                "lendable": _amount(resource, lendable),
                "available": format_amount(resource, max(0, view.available)),
                "borrowingLimit": _amount(resource, quota.borrowing_limit),
                "lendingLimit": _amount(resource, quota.lending_limit),
            }
        )
    return out


def queue_status(state: ClusterState, usage: Usage, settings: Settings) -> list[dict[str, Any]]:
    """Every ClusterQueue with its validity and, per flavor and resource, its quota and usage."""
    table = queue_table(state.snapshot(), settings)
    names = sorted(set(table.queues) | set(table.invalid))
    items = []
    for name in names:
        queue = table.queues.get(name)
        invalid = table.invalid.get(name)
        # A queue that parsed has a list of rule problems; one that did not, its parse error.
        problems = [] if invalid is None else invalid.split("; ") if queue else [invalid]
        item: dict[str, Any] = {
            "name": name,
            "cohort": queue.cohort if queue else None,
            "active": invalid is None,
            "problems": problems,
            "flavors": [],
        }
        if queue is not None:
            for group in queue.groups:
                for flavor in group.flavors:
                    resources = _resources(table, queue, usage, flavor.name, group.covered)
                    item["flavors"].append({"name": flavor.name, "resources": resources})
        items.append(item)
    return items


def _setup_problems(state: ClusterState, settings: Settings) -> list[str]:
    """Problems of the other queue objects: unparseable flavors and LocalQueues, dangling ones."""
    table = queue_table(state.snapshot(), settings)
    problems = []
    for obj in state.list("ResourceFlavor"):
        try:
            parse_resource_flavor(obj)
        except InvalidObject as exc:
            problems.append(str(exc))
    known = set(table.queues) | set(table.invalid)
    for key, local in sorted(table.local_queues.items()):
        if isinstance(local, str):
            problems.append(local)
        elif local.cluster_queue not in known:
            problems.append(
                f"LocalQueue {key}: spec.clusterQueue: ClusterQueue {local.cluster_queue} not found"
            )
    return problems


def _table(
    items: list[dict[str, Any]], wide: bool
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    header: tuple[str, ...] = (
        "CLUSTERQUEUE", "COHORT", "ACTIVE", "FLAVOR", "RESOURCE", "NOMINAL", "IN USE"
    )  # fmt: skip
    header += ("BORROWED", "LENDABLE")
    if wide:
        header += ("AVAILABLE", "BORROWING LIMIT", "LENDING LIMIT")
    rows: list[tuple[Any, ...]] = []
    for item in items:
        head = (item["name"], item["cohort"] or "-", "True" if item["active"] else "False")
        lines = [(flavor["name"], r) for flavor in item["flavors"] for r in flavor["resources"]]
        if not lines:
            rows.append((*head, "-", "-", "-", "-", "-", "-", *(("-",) * 3 if wide else ())))
        for flavor, r in lines:
            row: tuple[Any, ...] = (*head, flavor, r["name"], r["nominal"], r["inUse"])
            row += (r["borrowed"],)
            row += (r["lendable"] or "-",)
            if wide:
                row += (r["available"], r["borrowingLimit"] or "-", r["lendingLimit"] or "-")
            rows.append(row)
    return header, rows


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    if args.state is not None:
        state = load_state(args.state)
        usage = memory_usage(state, settings)
    else:
        state, usage_of = live_snapshot(args.kubeconfig, settings)
        usage = usage_of()
    items = queue_status(state, usage, settings)
    problems = _setup_problems(state, settings)
    fmt = output_format(args)
    if not items and fmt in (None, "wide"):
        print("No ClusterQueues found.", file=sys.stderr)
    else:
        emit(fmt, items, lambda wide: _table(items, wide), lambda i: f"clusterqueue/{i['name']}")
    invalid = [item for item in items if not item["active"]]
    for item in invalid:
        for problem in item["problems"]:
            where = "" if problem.startswith("ClusterQueue ") else f"ClusterQueue {item['name']}: "
            print(f"draquota status: {where}{problem}", file=sys.stderr)
    for problem in problems:
        print(f"draquota status: {problem}", file=sys.stderr)
    return EXIT_INVALID if invalid or problems else 0
