"""The dashboard's page model: queues with their quota and lending, and what waits in them.

Pure: `webhook.dashboard.sources` hands these functions the objects it read and the page
renders what they return (plain, JSON-ready data). Both modes give a queue card the shape
of a LocalQueue's `status.clusterQueue` (quantities as strings in the resource's units), so
the page renders them alike: with cluster-wide read access the cards are computed here from
the ClusterQueues and the usage the webhook sees, by the function that writes that status
(`quota.status.cluster_queue_summary`, lending attributed by `quota.lending`);
with namespace access only they are read from the status draquota writes on the
namespace's LocalQueues, and a malformed status names the LocalQueue and the field.

Why a workload waits is what draquota told its user: the message of a gated pod's
`QuotaReserved` condition (the same as its `Pending` Event's), or of a suspended Job's
`Pending` Event. Its position is read
from that message (`...; position N of M in ClusterQueue Q`), never recomputed, so that
the page and `kubectl describe` always agree. A preemptor waits `Pending the preemption of
N workload(s)`.

A workload is being preempted while draquota evicts it (`preempted`): a pod it marked
(`DisruptionTarget`, reason PreemptedByDraquota), a suspended Job it marked preempted whose
pods still stop; why is the mark's message, which names the preemptor and the ClusterQueue
that reclaimed. Where the objects come trimmed (the informers' cache keeps neither pod
conditions nor Job annotations), the same message is read from draquota's `Preempted` Event.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.cluster import Obj
from quota.errors import InvalidObject
from quota.fields import FieldReader
from quota.holdings import holdings
from quota.livepods import TERMINAL_PHASES, is_gated, job_owner
from quota.objectkeys import namespace_of, object_key, object_key_of
from quota.quantity import amount
from quota.queuetable import QueueTable
from quota.routing import DEFAULT_LOCAL_QUEUE
from quota.status import cluster_queue_summary
from quota.usage import Usage
from quota.waiting import GROUP_LABEL
from quota.waitreport import COMPONENT, latest_messages, pending_messages, quota_reserved
from quota.waitreport import parse_wait as _parse
from webhook.commands._workloads import preempted_because

__all__ = [
    "RESOURCE_FIELDS",
    "cluster_cards",
    "namespace_cards",
    "parse_wait",
    "preempted",
    "preempted_messages",
    "routes",
    "waiting",
]

PREEMPTED = "Preempted"  # the reason of draquota's Event on a workload it preempts
PREEMPTED_EVENTS = f"reason={PREEMPTED},source={COMPONENT}"  # their field selector
# The quantities of a resource row, and which of them may be left out (limits not set).
RESOURCE_FIELDS = ("nominal", "inUse", "borrowed", "lent", "lendable")
LIMIT_FIELDS = ("borrowingLimit", "lendingLimit")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _meta(obj: Obj) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- queue cards --------------------------------------------------------------------------


def _local_queue_row(obj: Obj) -> dict[str, Any]:
    status = _mapping(obj.get("status"))
    return {
        "key": object_key(obj),
        "admitted": _count(status.get("admittedWorkloads")),
        "pending": _count(status.get("pendingWorkloads")),
    }


def _pending(rows: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """Waiting workloads per LocalQueue: a pod group counts once, as in LocalQueue status."""
    workloads = {(r["localQueue"], r["kind"], r["group"] or r["key"]) for r in rows}
    return Counter(local for local, _, _ in workloads)


def cluster_cards(
    table: QueueTable, usage: Usage, local_queues: Iterable[Obj], rows: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every ClusterQueue, valid or not, with the LocalQueues that submit to it and their
    counts as of now: holders of `usage` (`quota.holdings`) and the `waiting` rows."""
    held, pending = holdings(usage).local_queues, _pending(rows)
    pointing: dict[str, list[dict[str, Any]]] = {}
    for key, target in routes(local_queues).items():
        row = {"key": key, "admitted": held.get(key, 0), "pending": pending.get(key, 0)}
        pointing.setdefault(target, []).append(row)
    cards = []
    for name in sorted(set(table.queues) | set(table.invalid)):
        queue = table.queues.get(name)
        card = {"flavors": [], **cluster_queue_summary(table, name, usage.of)}
        invalid = table.invalid.get(name)
        card["whenFull"] = queue.when_full if queue else None
        card["problems"] = [invalid] if invalid else []
        card["localQueues"] = sorted(pointing.get(name, ()), key=lambda row: row["key"])
        cards.append(card)
    return cards


def _resource_row(reader: FieldReader, raw: Any, path: str) -> dict[str, Any]:
    row = reader.mapping(raw, path)
    name = reader.string(row.get("name"), f"{path}.name", required=True)
    out: dict[str, Any] = {"name": name}
    for field in (*RESOURCE_FIELDS, *LIMIT_FIELDS):
        value = row.get(field)
        if value is None and field in LIMIT_FIELDS:
            continue
        text = reader.string(value, f"{path}.{field}", required=True)
        amount(name, text, reader.ref, reader.at(f"{path}.{field}"))
        out[field] = text
    for field in ("lentTo", "borrowedFrom"):
        pairs = []
        for i, pair in enumerate(reader.items(row.get(field), f"{path}.{field}")):
            at = f"{path}.{field}[{i}]"
            pair = reader.mapping(pair, at)
            queue = reader.string(pair.get("clusterQueue"), f"{at}.clusterQueue", required=True)
            text = reader.string(pair.get("amount"), f"{at}.amount", required=True)
            amount(name, text, reader.ref, reader.at(f"{at}.amount"))
            pairs.append({"clusterQueue": queue, "amount": text})
        if pairs:
            out[field] = pairs
    return out


def _reported(obj: Obj) -> dict[str, Any]:
    """The LocalQueue's `status.clusterQueue`, checked; InvalidObject names the field."""
    reader = FieldReader(f"LocalQueue {object_key(obj)}", "status.clusterQueue")
    raw = reader.mapping(_mapping(obj.get("status")).get("clusterQueue"), "")
    if not raw:
        raise InvalidObject(reader.ref, "status.clusterQueue", "not reported yet")
    card: dict[str, Any] = {"name": reader.string(raw.get("name"), "name", required=True)}
    if cohort := reader.string(raw.get("cohort"), "cohort"):
        card["cohort"] = cohort
    flavors = []
    for i, flavor in enumerate(reader.items(raw.get("flavors"), "flavors")):
        at = f"flavors[{i}]"
        flavor = reader.mapping(flavor, at)
        name = reader.string(flavor.get("name"), f"{at}.name", required=True)
        items = reader.items(flavor.get("resources"), f"{at}.resources")
        rows = [_resource_row(reader, r, f"{at}.resources[{j}]") for j, r in enumerate(items)]
        flavors.append({"name": name, "resources": rows})
    card["flavors"] = flavors
    return card


def _inactive(obj: Obj) -> list[str]:
    """Why the LocalQueue says it admits nothing (its `Active` condition), if it does."""
    conditions = _mapping(obj.get("status")).get("conditions")
    return [
        f"LocalQueue {object_key(obj)}: {c.get('message') or c.get('reason') or 'not active'}"
        for c in (conditions if isinstance(conditions, list) else ())
        if isinstance(c, Mapping) and c.get("type") == "Active" and c.get("status") == "False"
    ]


def namespace_cards(local_queues: Iterable[Obj]) -> list[dict[str, Any]]:
    """One card per ClusterQueue the namespace's LocalQueues submit to, from their status.
    A LocalQueue whose status is missing, malformed or inactive adds that problem."""
    cards: dict[str, dict[str, Any]] = {}
    for obj in local_queues:
        problems = _inactive(obj)
        try:
            reported = _reported(obj)
        except InvalidObject as exc:
            target = _mapping(obj.get("spec")).get("clusterQueue")
            reported, problems = {"name": str(target or "?"), "flavors": []}, [str(exc), *problems]
        card = cards.setdefault(reported["name"], {"flavors": [], "problems": []})
        if not card["flavors"]:  # an earlier LocalQueue of the same ClusterQueue had no status
            card.update(reported)
        card["problems"] += problems
        card.setdefault("localQueues", []).append(_local_queue_row(obj))
        card["whenFull"] = None  # not part of what a LocalQueue reports
    return [cards[name] for name in sorted(cards)]


# -- waiting workloads --------------------------------------------------------------------


def parse_wait(message: str) -> dict[str, Any]:
    """The reason, position and ClusterQueue of a waiting message (`quota.waitreport`) as the
    page's row fields; None for what it does not say."""
    shown = _parse(message)
    return {"reason": shown.reason, "position": shown.position, "of": shown.of,
            "clusterQueue": shown.cluster_queue}  # fmt: skip


def _condition_message(pod: Obj) -> str:
    status, message = quota_reserved(pod)
    return message if status == "False" else ""


def _local_queue_of(obj: Obj, template: Mapping[str, Any] | None = None) -> str:
    labels = {**_mapping(_meta(obj).get("labels")), **_mapping((template or {}).get("labels"))}
    name = labels.get(QUEUE_LABEL)
    local = name if isinstance(name, str) and name else DEFAULT_LOCAL_QUEUE
    return object_key_of(namespace_of(obj), local)


def _row(
    kind: str, obj: Obj, message: str, routes: Mapping[str, str], local: str
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": kind,
        "key": object_key(obj),
        "localQueue": local,
        **parse_wait(message),
    }
    row["clusterQueue"] = row["clusterQueue"] or routes.get(local)
    group = _mapping(_meta(obj).get("labels")).get(GROUP_LABEL)
    row["group"] = group if isinstance(group, str) else None
    row["created"] = str(_meta(obj).get("creationTimestamp") or "")
    return row


def waiting(
    pods: Iterable[Obj], jobs: Iterable[Obj], events: Iterable[Obj], routes: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Pods that carry draquota's gate and suspended Jobs draquota said wait (a `Pending`
    Event), with the reason and position draquota showed them; sorted by ClusterQueue, then
    position (those without one last, oldest first). A pod's message is its condition's, or
    where `pods` come trimmed of their status (the informers' cache), its `Pending` Event's:
    draquota writes both with the same message. `routes`: LocalQueue `ns/name` -> its
    ClusterQueue, for a workload whose message does not name one yet."""
    pending = pending_messages(events)
    rows = []
    for pod in pods:
        if is_gated(pod) and not _meta(pod).get("deletionTimestamp"):
            message = _condition_message(pod) or pending.get(str(_meta(pod).get("uid")), "")
            rows.append(_row("Pod", pod, message, routes, _local_queue_of(pod)))
    for job in jobs:
        spec = _mapping(job.get("spec"))
        uid = str(_meta(job).get("uid") or "")
        if spec.get("suspend") is True and uid in pending:
            template = _meta(_mapping(spec.get("template")))
            rows.append(_row("Job", job, pending[uid], routes, _local_queue_of(job, template)))
    return sorted(rows, key=_order)


def _order(row: Mapping[str, Any]) -> tuple[str, int, str, str]:
    position = row["position"] if row["position"] is not None else 1 << 30
    return (row["clusterQueue"] or "", position, row["created"], row["key"])


# -- workloads being preempted ------------------------------------------------------------


def preempted_messages(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """UID of the object -> the message of draquota's latest `Preempted` Event about it."""
    return latest_messages(events, PREEMPTED)


def _stopping(pod: Obj) -> bool:
    return _mapping(pod.get("status")).get("phase") not in TERMINAL_PHASES


def preempted(
    pods: Iterable[Obj], jobs: Iterable[Obj], events: Iterable[Obj], routes: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The workloads draquota evicts for a preemptor, with why: pods it marked that have not
    ended, and suspended Jobs it marked whose pods (among `pods`) have not ended yet; the
    mark's message, else (trimmed objects) that of the object's `Preempted` Event. Sorted by
    ClusterQueue and key."""
    told = preempted_messages(events)
    pods = [pod for pod in pods if _stopping(pod)]
    rows, jobs_of_pods = [], {job_owner(pod) for pod in pods}
    for job in jobs:
        uid = str(_meta(job).get("uid") or "")
        spec = _mapping(job.get("spec"))
        message = preempted_because(job) or (told.get(uid, "") if spec.get("suspend") else "")
        if message and uid in jobs_of_pods:
            local = _local_queue_of(job, _meta(_mapping(spec.get("template"))))
            rows.append(_preempted_row("Job", job, message, routes, local))
    for pod in pods:
        message = preempted_because(pod) or told.get(str(_meta(pod).get("uid") or ""), "")
        if message:
            rows.append(_preempted_row("Pod", pod, message, routes, _local_queue_of(pod)))
    return sorted(rows, key=lambda row: (row["clusterQueue"] or "", row["key"]))


def _preempted_row(
    kind: str, obj: Obj, message: str, routes: Mapping[str, str], local: str
) -> dict[str, Any]:
    group = _mapping(_meta(obj).get("labels")).get(GROUP_LABEL)
    return {
        "kind": kind,
        "key": object_key(obj),
        "localQueue": local,
        "clusterQueue": routes.get(local),
        "group": group if isinstance(group, str) else None,
        "message": message,
    }


def routes(local_queues: Iterable[Obj]) -> dict[str, str]:
    """LocalQueue `ns/name` -> the ClusterQueue its spec names."""
    out = {}
    for obj in local_queues:
        target = _mapping(obj.get("spec")).get("clusterQueue")
        if isinstance(target, str):
            out[object_key(obj)] = target
    return out
