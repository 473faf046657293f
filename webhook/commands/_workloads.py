"""The workloads of a namespace as `draquota status` lists them, like `kubectl get workloads`:
what holds quota and what waits for it, one row per workload.

A workload is a pod, a pod group (the pods sharing `draquota.io/pod-group-name`) or a Job
(with its pods); a group or Job is reported with its totals.

It holds quota when it has a charge: a live pod charged by draquota, a Job admitted as a
whole by its ClusterQueue (`charge_of(job_holder(key))`) or through its pods. A pod its
queue admitted (`QuotaReserved` True) holds quota too, charged by an admission record a
namespace user cannot read: there, its flavor and amounts show as unknown.

It waits when it carries draquota's scheduling gate (a pod) or is suspended in a
LocalQueue (a Job). Why it waits, and its position, are what the queueing controller
wrote (a pod's `QuotaReserved` condition, a Job's `Pending` Event), unless the caller
worked them out itself (`why`); a preemptor waits `Pending the preemption of N
workload(s)`. Nothing here reads a ClusterQueue: a namespace user can list all of it.

It is `Preempted` while draquota evicts it for a preemptor: a pod (or a pod of a group)
marked `DisruptionTarget` with reason `PreemptedByDraquota`, until it is gone; a Job
suspended again with the `draquota.io/preempted` annotation, while its pods still stop or
its record is still held (then it waits again, at its position). Its message is the mark's,
which names the preemptor and the ClusterQueue that reclaimed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from quota.cluster import Obj
from quota.errors import InvalidObject
from quota.livepods import is_gated, is_live_job, is_live_pod, job_owner, pod_key, pod_uid
from quota.messages import format_amount
from quota.objectkeys import namespace_of, object_key
from quota.routing import DEFAULT_LOCAL_QUEUE
from quota.usage import Usage
from quota.waiting import GROUP_LABEL, GROUP_TOTAL_ANNOTATION
from quota.waitreport import parse_wait, pending_messages, quota_reserved
from webhook.ledger.podusage import job_holder
from webhook.queueing.admittedworkloads import DISRUPTION_TARGET, PREEMPTED_ANNOTATION, is_marked

__all__ = [
    "Units",
    "annotated_charges",
    "preempted_because",
    "workload_items",
    "workload_notes",
    "workload_table",
]

ChargeOf = Callable[[str], Charge | None]
# How the amounts of a counter or capacity resource print, by (ClusterQueue, resource): the
# unit style of its nominalQuota (`quota.sources.unit_of`); a resource not listed prints as
# `quota.messages.format_amount` prints it without one.
Units = Mapping[tuple[str, str], str]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _meta(obj: Obj) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


@dataclass
class _Row:
    kind: str
    namespace: str
    name: str
    local_queue: str
    created: str
    waiting: bool = False
    mark: str = ""  # why draquota evicts it, while it does
    pods: int = 0
    total: int | None = None
    message: str = ""
    charges: dict[str, Charge] = field(default_factory=dict)


def annotated_charges(pods: Iterable[Obj]) -> dict[str, Charge]:
    """What each pod's charge annotation says it holds, by `ns/name` (what a namespace user
    can read; an annotation that does not parse is left out)."""
    out = {}
    for pod in pods:
        text = _mapping(_meta(pod).get("annotations")).get(CHARGE_ANNOTATION)
        if isinstance(text, str) and not is_gated(pod):
            try:
                out[pod_key(pod)] = Charge.from_annotation(text, f"pod {pod_key(pod)}")
            except InvalidObject:
                continue
    return out


def _local_queue(labels: Mapping[str, Any], namespace: str, local_queues: set[str]) -> str:
    """The LocalQueue a pod or Job goes to: its label, else `default` where it exists."""
    label = labels.get(QUEUE_LABEL)
    if isinstance(label, str) and label:
        return label
    return DEFAULT_LOCAL_QUEUE if f"{namespace}/{DEFAULT_LOCAL_QUEUE}" in local_queues else ""


def _job_rows(
    jobs: Iterable[Obj], events: Mapping[str, str], local_queues: set[str], charge_of: ChargeOf
) -> dict[str, _Row]:
    """A row per live Job of a LocalQueue, by UID."""
    rows = {}
    for job in jobs:
        if not is_live_job(job):
            continue
        metadata, spec = _meta(job), _mapping(job.get("spec"))
        namespace, name = namespace_of(job), str(metadata.get("name"))
        template_labels = _mapping(_meta(_mapping(spec.get("template"))).get("labels"))
        labels = {**_mapping(metadata.get("labels")), **template_labels}
        local = _local_queue(labels, namespace, local_queues)
        if not local:
            continue
        row = _Row("Job", namespace, name, local, str(metadata.get("creationTimestamp") or ""))
        row.waiting = spec.get("suspend") is True
        row.message = events.get(pod_uid(job), "") if row.waiting else ""
        row.mark = preempted_because(job)
        holder = job_holder(object_key(job))
        if (charge := charge_of(holder)) is not None:
            row.charges[holder] = charge
        rows[pod_uid(job)] = row
    return rows


def _reserved(pod: Obj) -> bool:
    return quota_reserved(pod)[0] == "True"


def preempted_because(obj: Obj) -> str:
    """Why draquota evicts the pod or Job ("" when it does not): the message of its
    `DisruptionTarget` condition (a pod), of its PREEMPTED_ANNOTATION (a suspended Job)."""
    if obj.get("kind") == "Job":
        mark = _mapping(_meta(obj).get("annotations")).get(PREEMPTED_ANNOTATION)
        suspended = _mapping(obj.get("spec")).get("suspend") is True
        return (mark or "preempted") if suspended and isinstance(mark, str) else ""
    if not is_marked(obj):
        return ""
    for condition in map(_mapping, _list(_mapping(obj.get("status")).get("conditions"))):
        if condition.get("type") == DISRUPTION_TARGET and condition.get("message"):
            return str(condition["message"])
    return "preempted"


def _add_pod(rows: dict[tuple[str, str, str], _Row], pod: Obj, charge: Charge | None,
             local_queues: set[str]) -> None:  # fmt: skip
    metadata = _meta(pod)
    namespace = namespace_of(pod)
    labels = _mapping(metadata.get("labels"))
    group = labels.get(GROUP_LABEL)
    kind, name = ("PodGroup", str(group)) if group else ("Pod", str(metadata.get("name")))
    if charge is not None:  # a charge names its LocalQueue `ns/name`
        local = charge.local_queue.rpartition("/")[2]
    else:
        local = _local_queue(labels, namespace, local_queues)
    created = str(metadata.get("creationTimestamp") or "")
    row = rows.setdefault((kind, namespace, name), _Row(kind, namespace, name, local, created))
    row.created = min(row.created, created) if row.created else created
    row.pods += 1
    if charge is not None:
        row.charges[pod_key(pod)] = charge
    row.mark = row.mark or preempted_because(pod)
    if is_gated(pod):
        row.waiting = True
        reserved, message = quota_reserved(pod)
        row.message = row.message or (message if reserved == "False" else "")
    if group:
        total = _mapping(metadata.get("annotations")).get(GROUP_TOTAL_ANNOTATION)
        row.total = int(total) if isinstance(total, str) and total.isdigit() else row.total


def workload_items(
    pods: Iterable[Obj],
    jobs: Iterable[Obj],
    events: Iterable[Obj],
    local_queues: set[str],
    charge_of: ChargeOf,
    now: float,
    why: Mapping[str, str] | None = None,
    units: Units | None = None,
) -> list[dict[str, Any]]:
    """Every workload holding or waiting for quota. `local_queues`: the `ns/name` of every
    LocalQueue; `charge_of(holder)`: what a pod (`ns/name`) or a Job admitted as a whole
    (`job_holder`) holds; `events`: draquota's `Pending` Events of Jobs. `why`: the waiting
    message of each workload by key (`ns/name`, `ns/group`) to show instead of what the
    controller last wrote, when the caller worked it out itself. `units`: how counter and
    capacity amounts print (`40Gi`, not 42949672960)."""
    jobs_by_uid = _job_rows(jobs, pending_messages(events), local_queues, charge_of)
    rows: dict[tuple[str, str, str], _Row] = {}
    for pod in pods:
        if not is_live_pod(pod, now):
            continue
        charge = charge_of(pod_key(pod))
        job = jobs_by_uid.get(job_owner(pod))
        if job is not None:
            job.pods += 1
            if charge is not None:
                job.charges[pod_key(pod)] = charge
        elif charge is not None or is_gated(pod) or is_marked(pod) or _reserved(pod):
            _add_pod(rows, pod, charge, local_queues)
    every = [*rows.values(), *jobs_by_uid.values()]
    for row in every:
        if row.kind == "Job" and not (row.pods or row.charges):
            row.mark = ""  # its pods and record are gone: it waits again at its position
        if why is not None and row.waiting:
            row.message = why.get(f"{row.namespace}/{row.name}", "")
    return sorted((_item(row, now, units or {}) for row in every), key=_order)


def _held(charges: Mapping[str, Charge], units: Units) -> list[dict[str, Any]]:
    """What the charges hold together (a shared claim once), per flavor and resource, in
    each resource's unit."""
    usage = Usage(charges)
    totals: dict[str, list[dict[str, str]]] = {}
    for queue in sorted({charge.cluster_queue for charge in charges.values()}):
        for key, amount in usage.of(queue).items():
            unit = units.get((queue, key.resource), "")
            entry = {"name": key.resource, "total": format_amount(key.resource, amount, unit)}
            totals.setdefault(key.flavor, []).append(entry)
    return [{"name": flavor, "resources": resources} for flavor, resources in totals.items()]


def _status(row: _Row) -> str:
    if row.mark:
        return "Preempted"
    return "Waiting" if row.waiting else "Admitted"


def _item(row: _Row, now: float, units: Units) -> dict[str, Any]:
    shown = parse_wait("" if row.mark else row.message)
    return {
        "kind": row.kind,
        "namespace": row.namespace,
        "name": row.name,
        "localQueue": row.local_queue,
        "status": _status(row),
        "pods": row.pods,
        "totalPods": row.total,
        "flavorsUsage": _held(row.charges, units),
        "position": shown.position,
        "of": shown.of,
        "message": row.mark or row.message,
        "age": _age(row.created, now),
    }


def _order(item: Mapping[str, Any]) -> tuple[Any, ...]:
    waiting = item["status"] == "Waiting"
    position = item["position"] or (0 if not waiting else 1 << 62)  # unknown: last
    return (item["namespace"], waiting, position, item["kind"], item["name"])


def _age(created: str, now: float) -> str:
    """How long ago, as kubectl shows it (`45s`, `12m`, `3h`, `5d`); `-` when unknown."""
    try:
        since = dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "-"
    seconds = max(0, int(now - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _usage_text(item: Mapping[str, Any]) -> tuple[str, str]:
    flavors = item["flavorsUsage"]
    names = ",".join(f["name"] for f in flavors) or "-"
    amounts = [f"{r['name']}={r['total']}" for f in flavors for r in f["resources"]]
    return names, ",".join(amounts) or "-"


def workload_table(
    items: Sequence[Mapping[str, Any]], wide: bool, namespaces: bool
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """kubectl-style rows; wide adds the controller's message."""
    header: tuple[str, ...] = ("NAMESPACE",) if namespaces else ()
    header += ("WORKLOAD", "KIND", "LOCALQUEUE", "STATUS", "PODS", "FLAVOR", "RESOURCES")
    header += ("POSITION", "AGE", *(("MESSAGE",) if wide else ()))
    rows = []
    for item in items:
        pods = str(item["pods"])
        if item["totalPods"] is not None:
            pods = f"{pods}/{item['totalPods']}"
        position = f"{item['position']} of {item['of']}" if item["position"] else "-"
        row: tuple[Any, ...] = (item["namespace"],) if namespaces else ()
        row += (item["name"], item["kind"], item["localQueue"] or "-", item["status"], pods)
        row += (*_usage_text(item), position, item["age"])
        if wide:
            row += (item["message"] or "-",)
        rows.append(row)
    return header, rows


def workload_notes(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why each waiting workload waits, and why each preempted one is evicted, one line each,
    as the queueing controller said it."""
    return [
        f"{item['kind'].lower()} {item['namespace']}/{item['name']}: {item['message']}"
        for item in items
        if item["status"] in ("Waiting", "Preempted") and item["message"]
    ]
