"""The status a ClusterQueue reports to admins: whether it can admit, and what it holds.

Pure: the shell passes the queue table, the queue's usage and the current time,
and writes the result to the `status` subresource when it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quota.charge import FlavorResource
from quota.queuetable import QueueTable

__all__ = ["cluster_queue_status", "local_queue_status", "queue_condition"]


def _quantity(resource: str, amount: int) -> int | str:
    # Amounts are millicores for cpu (quota.quantity.amount); a quantity string says so.
    return f"{amount}m" if resource == "cpu" else amount


def _flavors_usage(usage: Mapping[FlavorResource, int]) -> list[dict[str, Any]]:
    by_flavor: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(usage):
        by_flavor.setdefault(key.flavor, []).append(
            {"name": key.resource, "total": _quantity(key.resource, usage[key])}
        )
    return [{"name": flavor, "resources": resources} for flavor, resources in by_flavor.items()]


def cluster_queue_status(
    table: QueueTable,
    name: str,
    usage: Mapping[FlavorResource, int],
    previous: Mapping[str, Any] | None,
    now: str,
    pending: int | None = None,
    admitted: int | None = None,
) -> dict[str, Any]:
    """The `status` of ClusterQueue `name`: the `Active` condition, usage per flavor, the
    `admitted` pods and Jobs holding its quota and, for a queue with `whenFull: Queue`, the
    `pending` workloads waiting in it.

    `previous` is the status the object has; the condition keeps its
    lastTransitionTime unless its status changes (Kubernetes condition rules).
    """
    condition = dict(queue_condition(table, name))
    old = next(
        (
            c
            for c in (previous or {}).get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type") == condition["type"]
        ),
        None,
    )
    if old is not None and old.get("status") == condition["status"]:
        condition["lastTransitionTime"] = str(old.get("lastTransitionTime"))
    else:
        condition["lastTransitionTime"] = now
    status: dict[str, Any] = {"conditions": [condition], "flavorsUsage": _flavors_usage(usage)}
    if admitted is not None:
        status["admittedWorkloads"] = admitted
    if pending is not None:
        status["pendingWorkloads"] = pending
    return status


def local_queue_status(admitted: int, pending: int | None) -> dict[str, Any]:
    """The counts a LocalQueue reports to its namespace's users: pods and Jobs holding quota
    through it and, when its ClusterQueue queues, workloads waiting in it."""
    status: dict[str, Any] = {"admittedWorkloads": admitted}
    if pending is not None:
        status["pendingWorkloads"] = pending
    return status


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
