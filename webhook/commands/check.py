"""What-if admission decisions for pods and workloads, without a webhook.

Inputs are decided in order, as if created now; every admitted pod counts against the
next, on top of the live pods (and, with a live cluster, the reservations in flight) of
the cluster. A pod or Job of a ClusterQueue with `whenFull: Queue` gets the answer the
queueing controller would give it once created: it joins the pods and Jobs already
waiting in the cluster, in the controller's order (priority, then creation: pods created
in the same second in name order), and is admitted at once if the controller's next pass
admits it, else it waits with the controller's reason and position. Claims, templates,
queues and other objects among the inputs join the cluster view before anything is
decided. Objects without a namespace go to `-n`, else the kubeconfig context's
namespace, else `default`.

The cluster is `--state DIR`, else a live one through `--kubeconfig FILE`, `$KUBECONFIG`
or `~/.kube/config` (listed once at cluster scope, nothing written), else none (only the
inputs). A malformed pod or workload is a denial item, not a crash. A file that cannot be
read, or a ClusterQueue, LocalQueue or ResourceFlavor among the inputs that is invalid,
exits 2 (so a quota setup can be checked without any pod).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quota.charge import Charge
from quota.cluster import Obj
from quota.decision import decide
from quota.errors import InvalidObject
from quota.flavorfilter import Placer
from quota.livepods import pod_key, pod_uid, usage_from_pods
from quota.messages import format_amount, format_amounts
from quota.objectkeys import namespace_of, object_key_of
from quota.placement import make_placer
from quota.queues import LocalQueue, parse_resource_flavor
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.sources import unit_in
from quota.usage import Usage
from quota.verdict import Decision
from quota.waiting import waiting_key
from quota.workloads import WORKLOAD_KINDS
from webhook.cli import EXIT_BAD_INPUT
from webhook.commands._cluster import Forbidden, Snapshot, cluster_config, read_cluster
from webhook.commands._common import (
    Progress,
    add_input_arguments,
    emit,
    in_namespace,
    load_settings,
    output_format,
    read_inputs,
)
from webhook.commands._kubeconfig import KubeConfig, add_kubeconfig_arguments, command_namespace
from webhook.commands._whatif import PassResult, as_created, next_pass
from webhook.store.clusterstate import ClusterState
from webhook.store.manifests import load_state

__all__ = ["check_objects", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    add_kubeconfig_arguments(parser)
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
        namespace_of(obj),
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


def _priority(obj: Mapping[str, Any], state: ClusterState) -> int:
    """The priority the API server gives a pod: `spec.priority`, else the value of its
    PriorityClass, else of the `globalDefault` one, else 0."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    value = spec.get("priority")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    values: dict[Any, int] = {}
    default = 0
    for cls in state.list("PriorityClass"):
        amount = cls.get("value")
        if isinstance(amount, int) and not isinstance(amount, bool):
            values[(cls.get("metadata") or {}).get("name")] = amount
            default = amount if cls.get("globalDefault") is True else default
    return values.get(spec.get("priorityClassName"), default)


def _after_pass(
    item: dict[str, Any], obj: Mapping[str, Any], created: Obj, done: PassResult
) -> dict[str, Any]:
    """The item of a pod or Job created waiting, after the controller's pass."""
    decision = done.decisions.get(pod_uid(created))
    if decision is not None and pod_key(created) in done.admitted:
        admitted = _item(obj, decision)
        admitted["message"] = f"{decision.message} by its queue at once"
        return admitted
    why = done.waiting.get(waiting_key(created))
    victims = list(done.preempted.get(waiting_key(created), ()))
    item = {**item, "preempts": victims} if victims else item
    return {**item, "message": f"{item['message']}: {why}"} if why else item


def check_objects(
    inputs: Sequence[Mapping[str, Any]],
    state: ClusterState,
    settings: Settings,
    placer: Placer | None = None,
    usage: Usage | None = None,
    records: Mapping[str, Charge] | None = None,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Decide the pods and workloads of `inputs` in order, as if created now.

    Each is decided as the webhook decides it at creation, against `usage` (default: the
    live pods of `state`) plus the inputs admitted before it. Those that wait in a queue
    with `whenFull: Queue` are then added to `state` as created (gated, suspended) and one
    pass of the queueing controller runs over everything waiting in the cluster
    (`webhook.commands._whatif`): their answer is the controller's, position included.
    Other inputs (claims, templates, queues, ...) are added to `state` first. `records`:
    the admission records the webhook would see, by UID.
    """
    decided = [obj for obj in inputs if obj.get("kind") in WORKLOAD_KINDS]
    for obj in inputs:
        if obj.get("kind") not in WORKLOAD_KINDS:
            state.upsert(obj)
    now = time.time() if now is None else now
    usage = usage_from_pods(state.snapshot(), settings, now) if usage is None else usage.copy()
    items: list[dict[str, Any]] = []
    created: list[tuple[int, Mapping[str, Any], Obj]] = []  # (item index, input, as created)
    for obj in decided:
        decision = decide(obj, state, usage, settings, placer)
        if decision.queued:
            uid = f"what-if-{len(items)}"
            local = decision.local_queue_name or ""
            waiting = as_created(dict(obj), local, uid, now, _priority(obj, state))
            state.upsert(waiting)
            created.append((len(items), obj, waiting))
        elif decision.allowed and decision.charge is not None:
            _, namespace, name = _identity(obj)
            usage.add(f"{namespace}/{name}", decision.charge)
        items.append(_item(obj, decision))
    if created:
        done = next_pass(state, settings, placer, usage, records or {}, now)
        for index, obj, waiting in created:
            items[index] = _after_pass(items[index], obj, waiting, done)
    return items


def _queue_of(item: dict[str, Any], table: QueueTable) -> str:
    charge = item["charge"] or {}
    if charge.get("clusterQueue"):
        return str(charge["clusterQueue"])
    local = table.local_queues.get(f"{item['namespace']}/{item.get('localQueue') or ''}")
    return local.cluster_queue if isinstance(local, LocalQueue) else "-"


def _charged(charge: Mapping[str, Any], table: QueueTable) -> str:
    """What a decision charges, counter and capacity amounts in their queue's unit (`40Gi`)."""
    queue = table.queues.get(str(charge.get("clusterQueue") or ""))
    usage = charge.get("usage") or {}
    if queue is None or not queue.sources:
        return format_amounts(usage)
    amounts = (
        f"{k}={format_amount(k, v, unit_in(queue.sources, k))}" for k, v in sorted(usage.items())
    )
    return ", ".join(amounts) or "-"


def _table(
    items: list[dict[str, Any]], wide: bool, queues: QueueTable
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
            _charged(charge, queues) if charge else "-",
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
        if item.get("preempts"):
            print(f"{item['namespace']}/{item['name']}: would preempt: {_victims(item)}")
        for warning in item["warnings"]:
            print(f"{item['namespace']}/{item['name']}: warning: {warning}")


def _victims(item: dict[str, Any]) -> str:
    """`ns/a, ns/b (InCohortReclamation)`: the victims of one item, by reason."""
    by_reason: dict[str, list[str]] = {}
    for victim in item["preempts"]:
        key, _, reason = str(victim).rpartition(" (")
        by_reason.setdefault(reason.rstrip(")"), []).append(key)
    return "; ".join(f"{', '.join(keys)} ({reason})" for reason, keys in by_reason.items())


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
            key = object_key_of(namespace_of(obj), name)
            local = table.local_queues.get(key)
            if isinstance(local, str):
                problems.append(local)
        elif kind == "ResourceFlavor":
            try:
                parse_resource_flavor(obj)
            except InvalidObject as exc:
                problems.append(str(exc))
    return problems


def _cluster(
    args: argparse.Namespace, config: KubeConfig | None, settings: Settings
) -> tuple[ClusterState, Snapshot | None]:
    """The cluster to decide against: --state, a live cluster, or none."""
    if config is None:
        return (load_state(args.state) if args.state else ClusterState()), None
    try:
        snapshot = read_cluster(config, settings)
    except Forbidden as exc:
        raise Forbidden(
            f"{exc}: draquota check decides with the usage of every queue and needs read "
            "access to the whole cluster; `draquota status` shows your namespace"
        ) from None
    return snapshot.state, snapshot


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    config = cluster_config(args, required=False)
    state, snapshot = _cluster(args, config, settings)
    namespace = command_namespace(args, config)
    progress = Progress("check")
    files = read_inputs(args, progress)
    inputs = [in_namespace(obj, namespace) for _, objects in files for obj in objects]
    progress.done()
    usage = snapshot.usage if snapshot is not None else None
    records = snapshot.records if snapshot is not None else None
    items = check_objects(inputs, state, settings, make_placer(state), usage, records)
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
            lambda wide: _table(items, wide, table),
            lambda i: f"{i['kind'].lower()}/{i['name']}",
        )
        if fmt in (None, "wide"):
            _print_notes(items)
    for problem in problems:
        print(f"draquota check: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT if problems else 0
