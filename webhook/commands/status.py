"""Quota and usage of the queues, and the workloads holding and waiting for it.

The cluster is `--state DIR`, else a live one through `--kubeconfig FILE`, `$KUBECONFIG`
or `~/.kube/config` (listed once, nothing written). What is shown depends on who asks:

- An admin (may list the whole cluster) gets one row per ClusterQueue, flavor and
  resource: nominal quota, in use, borrowed from the cohort and lendable (what cohort
  members can still borrow from it: its unused pooled quota, less what it has lent).
  `-o wide` adds what it could still take, what it lent and to whom, what it borrowed
  and from whom, and its limits. `-n NS` shows the LocalQueues and workloads of NS
  instead, `-A` every ClusterQueue, LocalQueue and workload.
- A namespace user (refused at cluster scope: the built-in `edit` role) gets the
  LocalQueues of the namespace (`-n`, else the kubeconfig context's, else `default`)
  with their ClusterQueue's quota and usage as the LocalQueue status reports it, and
  the namespace's workloads: what holds quota, and what waits, with the queueing
  controller's position and reason.

A queue that is invalid admits nothing: it is listed with its problems and the command
exits 2, so a quota setup can be checked before any pod is submitted. Quantities are in
the resource's own units (cpu in cores; a counter or capacity resource in the unit of its
nominalQuota, `40Gi`): an admin's from the ClusterQueues, a namespace user's as the
LocalQueue status reports them (`_localqueues.reported_units`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from quota.assignment import quota_view
from quota.charge import Charge, FlavorResource
from quota.errors import InvalidObject
from quota.holdings import holdings
from quota.messages import format_amount
from quota.placement import make_placer
from quota.queues import parse_resource_flavor
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.sources import unit_in
from quota.status import cluster_queue_summary
from quota.usage import Usage
from quota.waiting import waiting_in
from webhook.commands._cluster import (
    CLUSTER,
    Forbidden,
    Snapshot,
    cluster_config,
    memory_usage,
    read_cluster,
)
from webhook.commands._common import (
    add_output_argument,
    emit,
    load_settings,
    output_format,
    print_json,
    print_table,
)
from webhook.commands._kubeconfig import add_kubeconfig_arguments, command_namespace
from webhook.commands._localqueues import (
    computed_status,
    local_queue_item,
    local_queue_table,
    reported_units,
    resource_row,
)
from webhook.commands._whatif import next_pass
from webhook.commands._workloads import (
    Units,
    annotated_charges,
    workload_items,
    workload_notes,
    workload_table,
)
from webhook.store.clusterstate import ClusterState
from webhook.store.manifests import load_state

__all__ = ["configure", "queue_status", "run"]

EXIT_INVALID = 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state", type=Path, metavar="DIR", help="directory of manifests standing in for a cluster"
    )
    add_kubeconfig_arguments(parser, all_namespaces=True)
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="webhook config file (deviceClassMappings, ...)"
    )
    add_output_argument(parser)


def _resources(
    table: QueueTable, name: str, usage: Usage, summary: dict[str, Any]
) -> list[dict[str, Any]]:
    """The summary's flavors with every field present, and what the queue could still take."""
    queue = table.queues[name]
    flavors = []
    for flavor in summary.get("flavors") or ():
        rows = []
        for raw in flavor["resources"]:
            row = resource_row(raw)
            view = quota_view(table, queue, FlavorResource(flavor["name"], row["name"]), usage.of)
            unit = unit_in(queue.sources, row["name"])
            row["available"] = format_amount(row["name"], max(0, view.available), unit)
            if queue.cohort is None:
                row["lendable"] = None  # nobody to lend to
            rows.append(row)
        flavors.append({"name": flavor["name"], "resources": rows})
    return flavors


def queue_status(state: ClusterState, usage: Usage, settings: Settings) -> list[dict[str, Any]]:
    """Every ClusterQueue with its validity and, per flavor and resource, its quota, usage and
    lending in its cohort (`quota.status.cluster_queue_summary`, as LocalQueues report it)."""
    table = queue_table(state.snapshot(), settings)
    items = []
    for name in sorted(set(table.queues) | set(table.invalid)):
        queue = table.queues.get(name)
        invalid = table.invalid.get(name)
        # A queue that parsed has a list of rule problems; one that did not, its parse error.
        problems = [] if invalid is None else invalid.split("; ") if queue else [invalid]
        summary = cluster_queue_summary(table, name, usage.of)
        items.append(
            {
                "kind": "ClusterQueue",
                "name": name,
                "cohort": queue.cohort if queue else None,
                "active": invalid is None,
                "problems": problems,
                "flavors": _resources(table, name, usage, summary) if queue else [],
            }
        )
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


def _peers(peers: Sequence[dict[str, str]]) -> str:
    return ",".join(f"{p['clusterQueue']}:{p['amount']}" for p in peers) or "-"


def _table(
    items: list[dict[str, Any]], wide: bool
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    header: tuple[str, ...] = (
        "CLUSTERQUEUE", "COHORT", "ACTIVE", "FLAVOR", "RESOURCE", "NOMINAL", "IN USE"
    )  # fmt: skip
    header += ("BORROWED", "LENDABLE")
    extra = ("AVAILABLE", "LENT", "LENT TO", "BORROWED FROM", "BORROWING LIMIT", "LENDING LIMIT")
    header += extra if wide else ()
    rows: list[tuple[Any, ...]] = []
    for item in items:
        head = (item["name"], item["cohort"] or "-", "True" if item["active"] else "False")
        lines = [(flavor["name"], r) for flavor in item["flavors"] for r in flavor["resources"]]
        if not lines:
            rows.append((*head, *("-",) * (6 + (len(extra) if wide else 0))))
        for flavor, r in lines:
            row: tuple[Any, ...] = (*head, flavor, r["name"], r["nominal"], r["inUse"])
            row += (r["borrowed"], r["lendable"] or "-")
            if wide:
                row += (r["available"], r["lent"] if item["cohort"] else "-")
                row += (_peers(r["lentTo"]), _peers(r["borrowedFrom"]))
                row += (r["borrowingLimit"] or "-", r["lendingLimit"] or "-")
            rows.append(row)
    return header, rows


def _read(args: argparse.Namespace, settings: Settings) -> tuple[Snapshot, str | None]:
    """The cluster as this user may read it, and the namespace to show (None: every one)."""
    config = cluster_config(args, required=True)
    namespace = None if args.all_namespaces else command_namespace(args, config)
    if config is None:
        state = load_state(args.state)
        return Snapshot(state, CLUSTER, str(args.state), memory_usage(state, settings)), namespace
    try:
        return read_cluster(config, settings, namespace, job_events=True), namespace
    except Forbidden as exc:
        if not args.all_namespaces:
            raise
        raise Forbidden(f"{exc}: -A needs read access to the whole cluster") from None


def _namespace_items(
    snapshot: Snapshot, settings: Settings, namespace: str | None, now: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """LocalQueues and workloads of `namespace` (None: of every namespace)."""
    state = snapshot.state
    locals_ = state.list("LocalQueue", namespace)
    pods, jobs = state.list("Pod", namespace), state.list("Job", namespace)
    if snapshot.scope == CLUSTER:
        table = queue_table(state.snapshot(), settings)
        pending: dict[str, int] = {}
        for waiting in waiting_in(state.snapshot(), table, now).values():
            for workload in waiting:
                pending[workload.local_queue] = pending.get(workload.local_queue, 0) + 1
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        held = holdings(snapshot.usage)
        locals_ = computed_status(table, locals_, snapshot.usage, held, pending, stamp)
        charge_of: Callable[[str], Charge | None] = snapshot.usage.charge_of
        placer = make_placer(state)
        why = next_pass(state, settings, placer, snapshot.usage, snapshot.records, now).waiting
        units: Units | None = _units(table)
    else:
        charge_of, why, units = annotated_charges(pods).get, None, None
    local_items = sorted(map(local_queue_item, locals_), key=lambda i: (i["namespace"], i["name"]))
    keys = {f"{i['namespace']}/{i['name']}" for i in local_items}
    units = reported_units(local_items) if units is None else units  # a user's: as reported
    workloads = workload_items(pods, jobs, snapshot.events, keys, charge_of, now, why, units)
    return local_items, workloads


def _units(table: QueueTable) -> Units:
    """How counter and capacity amounts print, from the ClusterQueues that define them."""
    return {
        (name, resource): source.unit
        for name, queue in table.queues.items()
        for resource, source in queue.sources.items()
    }


def _show(fmt: str | None, queues: list[dict[str, Any]], local_items: list[dict[str, Any]],
          workloads: list[dict[str, Any]], namespaces: bool) -> None:  # fmt: skip
    """ClusterQueues (with -A), LocalQueues and workloads, as tables or one document."""
    if fmt in ("json", "yaml"):
        document = {"items": [*queues, *local_items], "workloads": workloads}
        if fmt == "json":
            print_json(document)
        else:
            sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
        return
    if fmt == "name":
        for item in [*queues, *local_items, *workloads]:
            print(f"{item['kind'].lower()}/{item['name']}")
        return
    wide = fmt == "wide"
    tables = [_table(queues, wide)] if queues else []
    if local_items:
        tables.append(local_queue_table(local_items, wide, namespaces))
    if workloads:
        tables.append(workload_table(workloads, wide, namespaces))
    for i, (header, rows) in enumerate(tables):
        if i:
            print()
        print_table(header, rows)
    notes = [] if wide else workload_notes(workloads)
    if notes:
        print()
        print("\n".join(notes))


def _local_problems(local_items: list[dict[str, Any]]) -> list[str]:
    """LocalQueues that admit nothing; a note for those whose status is not reported yet."""
    problems = []
    for item in local_items:
        where = f"LocalQueue {item['namespace']}/{item['name']}"
        if item["active"] is None:
            print(f"draquota status: {where}: no status reported yet", file=sys.stderr)
        elif not item["active"]:
            problems.append(f"{where}: {item['message']}")
    return problems


def _queue_problems(
    items: list[dict[str, Any]], state: ClusterState, settings: Settings
) -> list[str]:
    """The problems of invalid ClusterQueues and of the other queue objects."""
    problems = []
    for item in items:
        for problem in item["problems"]:
            where = "" if problem.startswith("ClusterQueue ") else f"ClusterQueue {item['name']}: "
            problems.append(f"{where}{problem}")
    return problems + _setup_problems(state, settings)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    snapshot, namespace = _read(args, settings)
    fmt = output_format(args)
    state = snapshot.state
    items = queue_status(state, snapshot.usage, settings) if snapshot.scope == CLUSTER else []
    if snapshot.scope == CLUSTER and not args.namespace and not args.all_namespaces:
        if not items and fmt in (None, "wide"):
            print("No ClusterQueues found.", file=sys.stderr)
        else:
            emit(
                fmt, items, lambda wide: _table(items, wide), lambda i: f"clusterqueue/{i['name']}"
            )
        problems = _queue_problems(items, state, settings)
    else:
        local_items, workloads = _namespace_items(snapshot, settings, namespace, time.time())
        if not local_items and fmt in (None, "wide"):
            where = f"namespace {namespace}" if namespace else "any namespace"
            print(f"No LocalQueues found in {where}.", file=sys.stderr)
        queues = items if namespace is None else []
        _show(fmt, queues, local_items, workloads, namespace is None)
        problems = _queue_problems(items, state, settings) if namespace is None else []
        problems += _local_problems(local_items) if namespace is not None else []
    for problem in problems:
        print(f"draquota status: {problem}", file=sys.stderr)
    return EXIT_INVALID if problems else 0
