"""The status queues report: a ClusterQueue's to admins, a LocalQueue's to its namespace.

Pure: the shell passes the queue table, usage and the current time, and writes the result
to the `status` subresource when it differs (`webhook.kube.queuestatus`).

A LocalQueue's status carries its ClusterQueue's quota and usage too, with the cohort's
lending as `quota.lending` attributes it: the namespace's users may read LocalQueues
(ClusterRole draquota-localqueue-viewer, aggregated to view, edit and admin) but not
ClusterQueues. Quantities are strings in the resource's own units (`format_amount`: cpu
"1500m", memory "2Gi", devices "2").

Invariant: every list is at most as long as the CRDs allow (`MAX_*`, checked against
manifests/base/crds by the tests), so that no queue spec or cohort, however big, makes the
API server refuse the write on a list bound; a longer list keeps its first entries (peers:
the largest amounts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from quota.charge import FlavorResource
from quota.holdings import Holdings
from quota.lending import lending
from quota.messages import format_amount
from quota.queues import ClusterQueue, LocalQueue, ResourceQuota
from quota.queuetable import QueueTable
from quota.sources import unit_in

__all__ = [
    "MAX_FLAVORS",
    "MAX_PEERS",
    "MAX_RESOURCES",
    "MAX_SUMMARY",
    "cluster_queue_status",
    "cluster_queue_summary",
    "local_queue_condition",
    "local_queue_status",
    "queue_condition",
    "sources_condition",
]

MAX_FLAVORS = 256  # a ClusterQueue names at most 16 resource groups of 16 flavors
MAX_RESOURCES = 16  # a resource group covers at most 16 resources
MAX_PEERS = 64  # lentTo / borrowedFrom entries of one resource
MAX_SUMMARY = 256  # characters of a ClusterQueue's usageSummary
SOURCES_CONDITION = "DeviceSourcesPublished"

UsageOf = Callable[[str], Mapping[FlavorResource, int]]


def _keys(queue: ClusterQueue | None) -> list[FlavorResource]:
    """The flavor-resources a queue has quota for, in the order its spec lists them."""
    if queue is None:
        return []
    keys = (
        FlavorResource(flavor.name, resource)
        for group in queue.groups
        for flavor in group.flavors
        for resource in group.covered
        if resource in flavor.resources
    )
    return list(dict.fromkeys(keys))


def _by_flavor(rows: Iterable[tuple[FlavorResource, dict[str, Any]]]) -> list[dict[str, Any]]:
    """`[{name: flavor, resources: [row, ...]}]` in first-seen order, within the CRD's bounds."""
    flavors: dict[str, list[dict[str, Any]]] = {}
    for key, row in rows:
        flavors.setdefault(key.flavor, []).append(row)
    return [
        {"name": flavor, "resources": resources[:MAX_RESOURCES]}
        for flavor, resources in list(flavors.items())[:MAX_FLAVORS]
    ]


def _flavors_usage(
    queue: ClusterQueue | None, usage: Mapping[FlavorResource, int]
) -> list[dict[str, Any]]:
    """Kueue's `flavorsUsage`: every flavor-resource of the queue (0 when unused), then any
    other one held (a charge from before the spec changed), sorted."""
    keys = _keys(queue)
    known = set(keys)
    keys += sorted(key for key, value in usage.items() if value and key not in known)
    return _by_flavor(
        (key, {"name": key.resource, "total": _amount(queue, key.resource, usage.get(key, 0))})
        for key in keys
    )


def _usage_summary(queue: ClusterQueue | None, usage: Mapping[FlavorResource, int]) -> str:
    """`on-demand gpus=2/4 cpu=1500m/8, spot gpus=0/2`: in use of nominal, for one column."""
    parts: dict[str, list[str]] = {}
    for key in _keys(queue):
        quota = (queue.quota(key) if queue else None) or ResourceQuota(0)
        used, nominal = (
            _amount(queue, key.resource, n) for n in (usage.get(key, 0), quota.nominal)
        )
        parts.setdefault(key.flavor, []).append(f"{key.resource}={used}/{nominal}")
    text = ", ".join(f"{flavor} {' '.join(items)}" for flavor, items in parts.items())
    return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 3] + "..."


def _with_transition(
    condition: Mapping[str, str], previous: Mapping[str, Any] | None, now: str
) -> dict[str, str]:
    """The condition with its lastTransitionTime: kept from `previous` (the status the object
    has) unless the condition's status changes (Kubernetes condition rules)."""
    old = next(
        (
            c
            for c in (previous or {}).get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type") == condition["type"]
        ),
        None,
    )
    if old is not None and old.get("status") == condition["status"]:
        return {**condition, "lastTransitionTime": str(old.get("lastTransitionTime"))}
    return {**condition, "lastTransitionTime": now}


def cluster_queue_status(
    table: QueueTable,
    name: str,
    usage: Mapping[FlavorResource, int],
    previous: Mapping[str, Any] | None,
    now: str,
    pending: int | None = None,
    admitted: int | None = None,
    unpublished: Sequence[str] = (),
) -> dict[str, Any]:
    """The `status` of ClusterQueue `name`: the `Active` condition, usage per flavor (and as
    one line, `usageSummary`, for `kubectl get -o wide`), the `admitted` pods and Jobs
    holding its quota and the `pending` workloads waiting in it.

    `previous` is the status the object has (see `_with_transition`). `unpublished` lists
    the counter and capacity resources no device publishes
    (`quota.devicecharge.unpublished_sources`): they are charged 0, so the queue says so in
    a `DeviceSourcesPublished` condition.
    """
    queue = table.queues.get(name)
    conditions = [queue_condition(table, name)]
    if queue is not None and queue.sources:
        conditions.append(sources_condition(unpublished))
    status: dict[str, Any] = {
        "conditions": [_with_transition(c, previous, now) for c in conditions],
        "flavorsUsage": _flavors_usage(queue, usage),
        "usageSummary": _usage_summary(queue, usage),
    }
    if admitted is not None:
        status["admittedWorkloads"] = admitted
    if pending is not None:
        status["pendingWorkloads"] = pending
    return status


def _amount(queue: ClusterQueue | None, resource: str, value: int) -> str:
    """An amount in the resource's units (a counter or capacity: its nominalQuota's)."""
    return format_amount(resource, value, unit_in(queue.sources if queue else {}, resource))


def _peers(queue: ClusterQueue, resource: str, amounts: Mapping[str, int]) -> list[dict[str, str]]:
    kept = sorted(amounts.items(), key=lambda item: (-item[1], item[0]))[:MAX_PEERS]
    return [{"clusterQueue": q, "amount": _amount(queue, resource, n)} for q, n in sorted(kept)]


def _quota_row(
    table: QueueTable, queue: ClusterQueue, key: FlavorResource, usage_of: UsageOf
) -> dict[str, Any]:
    """One resource of the `clusterQueue` part: quota, use, and lending in the cohort."""
    quota = queue.quota(key) or ResourceQuota(0)
    lent = lending(table, queue, key, usage_of)

    def amount(value: int) -> str:
        return _amount(queue, key.resource, value)

    row: dict[str, Any] = {
        "name": key.resource,
        "nominal": amount(quota.nominal),
        "inUse": amount(usage_of(queue.name).get(key, 0)),
        "borrowed": amount(lent.borrowed),
        "lent": amount(lent.lent),
        "lendable": amount(lent.lendable),
    }
    if quota.borrowing_limit is not None:
        row["borrowingLimit"] = amount(quota.borrowing_limit)
    if quota.lending_limit is not None:
        row["lendingLimit"] = amount(quota.lending_limit)
    if lent.lent_to:
        row["lentTo"] = _peers(queue, key.resource, lent.lent_to)
    if lent.borrowed_from:
        row["borrowedFrom"] = _peers(queue, key.resource, lent.borrowed_from)
    return row


def cluster_queue_summary(table: QueueTable, name: str, usage_of: UsageOf) -> dict[str, Any]:
    """The `clusterQueue` part of the status of ClusterQueue `name`'s LocalQueues: its cohort
    and, per flavor and resource, nominal quota, use, what it borrowed and lent (to whom, from
    whom) and can still lend. Only `name` when the ClusterQueue does not parse (or exist).

    `usage_of(queue)` is a ClusterQueue's usage; the cohort's members are read through it."""
    queue = table.queues.get(name)
    summary: dict[str, Any] = {"name": name}
    if queue is None:
        return summary
    if queue.cohort is not None:
        summary["cohort"] = queue.cohort
    summary["flavors"] = _by_flavor(
        (key, _quota_row(table, queue, key, usage_of)) for key in _keys(queue)
    )
    return summary


def local_queue_status(
    table: QueueTable,
    local: LocalQueue,
    held: Holdings,
    pending: int,
    summary: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    """The `status` of a LocalQueue, for its namespace's users: whether pods can be submitted
    to it (`Active`), the pods and Jobs holding quota through it and what they hold, the
    workloads waiting in it, and its ClusterQueue's `summary` (`cluster_queue_summary`)."""
    condition = local_queue_condition(table, local.cluster_queue)
    return {
        "conditions": [_with_transition(condition, previous, now)],
        "admittedWorkloads": held.local_queues.get(local.key, 0),
        "pendingWorkloads": pending,
        "flavorsUsage": _flavors_usage(
            table.queues.get(local.cluster_queue), held.local_usage.get(local.key, {})
        ),
        "clusterQueue": dict(summary),
    }


def local_queue_condition(table: QueueTable, cluster_queue: str) -> dict[str, str]:
    """The `Active` condition of a LocalQueue pointing at `cluster_queue` (Kueue's reasons)."""
    if cluster_queue in table.invalid:
        return {
            "type": "Active",
            "status": "False",
            "reason": "ClusterQueueIsInactive",
            "message": f"ClusterQueue {cluster_queue} admits nothing: "
            f"{table.invalid[cluster_queue]}",
        }
    if cluster_queue not in table.queues:
        return {
            "type": "Active",
            "status": "False",
            "reason": "ClusterQueueDoesNotExist",
            "message": f"ClusterQueue {cluster_queue} not found",
        }
    return {
        "type": "Active",
        "status": "True",
        "reason": "Ready",
        "message": f"can submit pods to ClusterQueue {cluster_queue}",
    }


def sources_condition(unpublished: Sequence[str]) -> dict[str, str]:
    """The `DeviceSourcesPublished` condition of a queue with counter or capacity resources:
    `False` with a warning naming each one no device publishes (charged 0)."""
    if not unpublished:
        message = "every counter and capacity resource is published by some device"
        return {
            "type": SOURCES_CONDITION,
            "status": "True",
            "reason": "Published",
            "message": message,
        }
    return {
        "type": SOURCES_CONDITION,
        "status": "False",
        "reason": "Unpublished",
        "message": f"charged 0 until a device publishes it: {'; '.join(unpublished)}",
    }


def queue_condition(table: QueueTable, name: str) -> dict[str, str]:
    """The `Active` status condition of a ClusterQueue (the shell adds lastTransitionTime).

    Reported for admins the way Kueue does: `True`/`Ready`, or `False` with the
    problems that make the queue admit nothing.
    """
    if name in table.invalid:
        return {
            "type": "Active",
            "status": "False",
            "reason": "InvalidSpec",
            "message": f"ClusterQueue {name} admits nothing: {table.invalid[name]}",
        }
    if name not in table.queues:
        return {"type": "Active", "status": "Unknown", "reason": "NotFound", "message": ""}
    return {
        "type": "Active",
        "status": "True",
        "reason": "Ready",
        "message": "can admit pods",
    }
