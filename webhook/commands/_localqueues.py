"""LocalQueues as `draquota status` shows them to their namespace's users.

A LocalQueue's status (written by the queue status writer, `quota.status.local_queue_status`)
carries its ClusterQueue's quota, usage and cohort lending, so that a user who may read
only their namespace sees them. An admin's `status` computes the same status from the
cluster view with the same function, so both read one shape. Values are reported as they
are (quantity strings); one that is missing shows as `-`.

Those strings are also where a namespace user learns the unit of a counter or capacity
resource (`reported_units`): the user may not read the ClusterQueue that defines it, and the
status writer prints such amounts in the unit of their nominalQuota (`40Gi`), while device
counts are always plain numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from quota.cluster import Obj
from quota.holdings import Holdings
from quota.objectkeys import namespace_of
from quota.queues import LocalQueue
from quota.queuetable import QueueTable
from quota.sources import unit_of
from quota.status import cluster_queue_summary, local_queue_status
from quota.usage import Usage

__all__ = [
    "RESOURCE_FIELDS",
    "computed_status",
    "local_queue_item",
    "local_queue_table",
    "reported_units",
    "resource_row",
]

RESOURCE_FIELDS = (
    "nominal", "inUse", "borrowed", "lent", "lendable", "borrowingLimit", "lendingLimit"
)  # fmt: skip


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _peers(value: Any) -> list[dict[str, str]]:
    return [
        {"clusterQueue": str(peer.get("clusterQueue")), "amount": str(peer.get("amount"))}
        for peer in map(_mapping, _list(value))
        if peer.get("clusterQueue") is not None
    ]


def resource_row(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One flavor-resource of a ClusterQueue summary, every field present (None: unset)."""
    row: dict[str, Any] = {"name": str(raw.get("name"))}
    for field in RESOURCE_FIELDS:
        value = raw.get(field)
        row[field] = None if value is None else str(value)
    row["lentTo"] = _peers(raw.get("lentTo"))
    row["borrowedFrom"] = _peers(raw.get("borrowedFrom"))
    return row


def _flavors(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": str(flavor.get("name")),
            "resources": [resource_row(_mapping(r)) for r in _list(flavor.get("resources"))],
        }
        for flavor in map(_mapping, _list(summary.get("flavors")))
    ]


def _active(status: Mapping[str, Any]) -> tuple[bool | None, str]:
    for condition in map(_mapping, _list(status.get("conditions"))):
        if condition.get("type") == "Active":
            return condition.get("status") == "True", str(condition.get("message") or "")
    return None, ""


def local_queue_item(obj: Obj) -> dict[str, Any]:
    """The LocalQueue with what its status reports (None for what it does not report yet)."""
    metadata, status = _mapping(obj.get("metadata")), _mapping(obj.get("status"))
    summary = _mapping(status.get("clusterQueue"))
    active, message = _active(status)
    return {
        "kind": "LocalQueue",
        "namespace": namespace_of(obj),
        "name": str(metadata.get("name")),
        "clusterQueue": str(_mapping(obj.get("spec")).get("clusterQueue") or "") or None,
        "cohort": summary.get("cohort"),
        "active": active,
        "message": message,
        "admittedWorkloads": status.get("admittedWorkloads"),
        "pendingWorkloads": status.get("pendingWorkloads"),
        "flavorsUsage": _list(status.get("flavorsUsage")),
        "flavors": _flavors(summary),
    }


def reported_units(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """The unit style (`quota.sources.unit_of`) of each resource with a suffixed amount in the
    LocalQueues' reported quota, by (ClusterQueue, resource). Any of a row's amounts tells it:
    one that is 0, or not a multiple of a suffix, prints as a plain number."""
    units: dict[tuple[str, str], str] = {}
    for item in items:
        for flavor in item["flavors"]:
            for row in flavor["resources"]:
                found = (unit_of(row[f]) for f in RESOURCE_FIELDS if row[f] is not None)
                if unit := next((u for u in found if u), ""):
                    units.setdefault((str(item["clusterQueue"]), row["name"]), unit)
    return units


def computed_status(
    table: QueueTable,
    local_queues: Iterable[Obj],
    usage: Usage,
    held: Holdings,
    pending: Mapping[str, int],
    now: str,
) -> list[Obj]:
    """The LocalQueues with the status the queue status writer gives them now (an admin's
    view: computed from the cluster, not read). `pending`: waiting workloads by `ns/name`."""
    out: list[Obj] = []
    for obj in local_queues:
        metadata = _mapping(obj.get("metadata"))
        parsed = table.local_queues.get(f"{metadata.get('namespace')}/{metadata.get('name')}")
        if not isinstance(parsed, LocalQueue):
            invalid = {"type": "Active", "status": "False", "reason": "InvalidSpec"}
            out.append({**obj, "status": {"conditions": [{**invalid, "message": str(parsed)}]}})
            continue
        summary = cluster_queue_summary(table, parsed.cluster_queue, usage.of)
        status = local_queue_status(
            table, parsed, held, pending.get(parsed.key, 0), summary, None, now
        )
        out.append({**obj, "status": status})
    return out


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _peer_text(peers: Sequence[Mapping[str, str]]) -> str:
    return ",".join(f"{p['clusterQueue']}:{p['amount']}" for p in peers) or "-"


def local_queue_table(
    items: Sequence[Mapping[str, Any]], wide: bool, namespaces: bool
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """One row per LocalQueue, flavor and resource of its ClusterQueue (`namespaces`: with a
    NAMESPACE column); wide adds the cohort, lending and limits."""
    header: tuple[str, ...] = ("NAMESPACE",) if namespaces else ()
    header += ("LOCALQUEUE", "CLUSTERQUEUE", "ADMITTED", "PENDING", "FLAVOR", "RESOURCE")
    header += ("NOMINAL", "IN USE", "BORROWED", "LENDABLE")
    if wide:
        header += ("COHORT", "LENT", "LENT TO", "BORROWED FROM")
        header += ("BORROWING LIMIT", "LENDING LIMIT")
    rows: list[tuple[Any, ...]] = []
    for item in items:
        head: tuple[Any, ...] = (item["namespace"],) if namespaces else ()
        head += (item["name"], _text(item["clusterQueue"]))
        head += (_text(item["admittedWorkloads"]), _text(item["pendingWorkloads"]))
        lines = [(f["name"], r) for f in item["flavors"] for r in f["resources"]]
        for flavor, r in lines or [("-", resource_row({"name": "-"}))]:
            row = (*head, flavor, r["name"], *(_text(r[f]) for f in RESOURCE_FIELDS[:3]))
            row += (_text(r["lendable"]),)
            if wide:
                row += (_text(item["cohort"]), _text(r["lent"]))
                row += (_peer_text(r["lentTo"]), _peer_text(r["borrowedFrom"]))
                row += (_text(r["borrowingLimit"]), _text(r["lendingLimit"]))
            rows.append(row)
    return header, rows
