"""What a ClusterQueue and a LocalQueue report in their status (quota.status).

Every status computed here is also checked against the CRD's status schema, the one the
API server applies to the status writer's PUT: a status the schema refuses is never written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from quota.charge import Charge, FlavorResource
from quota.holdings import Holdings, holdings
from quota.queues import LocalQueue
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.status import (
    MAX_FLAVORS,
    MAX_PEERS,
    MAX_RESOURCES,
    MAX_SUMMARY,
    cluster_queue_status,
    cluster_queue_summary,
    local_queue_status,
)
from quota.usage import Usage
from tests.quota.queue_builders import scenario_objects
from webhook.store.clusterstate import ClusterState

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "crds"
NOW, LATER = "2026-11-21T00:00:00Z", "2026-11-21T01:00:00Z"
GPUS = FlavorResource("on-demand", "gpus")
CLASSES = {"gpus": ["gpu.example.com"]}
# The cohort: research lends 2 of its 4 GPUs, ml has none of its own and borrows.
LAB = [
    {"name": "research", "cohort": "lab", "classes": CLASSES,
     "groups": [{"on-demand": {"gpus": {"nominal": 4, "lendingLimit": 2}, "cpu": 8}}]},
    {"name": "ml", "cohort": "lab", "classes": CLASSES,
     "groups": [{"on-demand": {"gpus": {"nominal": 0, "borrowingLimit": 2}, "cpu": 0}}]},
]  # fmt: skip
LOCAL_QUEUES = {"team-a/default": "research", "team-a/batch": "research", "team-b/default": "ml"}


def _table(queues: list[dict[str, Any]], local: Mapping[str, str] = LOCAL_QUEUES) -> QueueTable:
    flavors = sorted({f for q in queues for group in q["groups"] for f in group})
    objects = scenario_objects({"flavors": flavors, "queues": queues, "localQueues": dict(local)})
    return queue_table(ClusterState(objects), Settings())


def _local(table: QueueTable, key: str) -> LocalQueue:
    local = table.local_queues[key]
    assert isinstance(local, LocalQueue)
    return local


def _charge(local: str, queue: str, gpus: int, cpu: int = 0, shared: str = "") -> Charge:
    per_pod = {"gpus": gpus, "cpu": cpu} if cpu else {"gpus": gpus}
    return Charge(
        queue,
        local,
        flavors={"gpus": "on-demand", "cpu": "on-demand"},
        per_pod={} if shared else per_pod,
        shared_claims={shared: {"gpus": gpus}} if shared else {},
    )


def _schema(crd: str) -> dict[str, Any]:
    """The CRD's status schema as JSON Schema (the x-kubernetes-* keys left out)."""

    def plain(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
        return [plain(v) for v in node] if isinstance(node, list) else node

    doc = yaml.safe_load((CRDS / crd).read_text(encoding="utf-8"))
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return dict(plain(schema))


def _valid(crd: str, status: Mapping[str, Any]) -> Mapping[str, Any]:
    jsonschema.validate(status, _schema(crd))
    return status


def _lab_status(key: str, used: Mapping[str, int], charges: Mapping[str, Charge]) -> Any:
    table = _table(LAB)
    usage = {name: {GPUS: value} for name, value in used.items()}
    local = _local(table, key)

    def usage_of(q: str) -> Mapping[FlavorResource, int]:
        return usage.get(q, {})

    summary = cluster_queue_summary(table, local.cluster_queue, usage_of)
    held = holdings(Usage(charges))
    return _valid("localqueues.yaml", local_queue_status(table, local, held, 0, summary, None, NOW))


def _totals(flavor: str, **totals: str) -> dict[str, Any]:
    """One flavor of `flavorsUsage`, resources in the order of the queue's spec."""
    return {"name": flavor, "resources": [{"name": r, "total": t} for r, t in totals.items()]}


def _gpus(status: Mapping[str, Any]) -> dict[str, Any]:
    (flavor,) = status["clusterQueue"]["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == "gpus")


def test_lender_local_queue_says_lent_to_whom_and_nothing_left_to_lend() -> None:
    charges = {
        "p1": _charge("team-a/default", "research", 2),
        "p2": _charge("team-b/default", "ml", 2),
    }
    status = _lab_status("team-a/default", {"research": 2, "ml": 2}, charges)
    assert status["clusterQueue"]["name"] == "research"
    assert status["clusterQueue"]["cohort"] == "lab"
    assert _gpus(status) == {
        "name": "gpus", "nominal": "4", "inUse": "2", "borrowed": "0", "lent": "2",
        "lendable": "0", "lendingLimit": "2", "lentTo": [{"clusterQueue": "ml", "amount": "2"}],
    }  # fmt: skip
    assert status["admittedWorkloads"] == 1
    assert status["flavorsUsage"] == [_totals("on-demand", gpus="2", cpu="0")]


def test_borrower_local_queue_says_borrowed_from_whom() -> None:
    charges = {"p2": _charge("team-b/default", "ml", 2)}
    status = _lab_status("team-b/default", {"research": 2, "ml": 2}, charges)
    assert _gpus(status) == {
        "name": "gpus", "nominal": "0", "inUse": "2", "borrowed": "2", "lent": "0",
        "lendable": "0", "borrowingLimit": "2",
        "borrowedFrom": [{"clusterQueue": "research", "amount": "2"}],
    }  # fmt: skip


def test_local_queues_of_one_cluster_queue_each_report_their_own_workloads() -> None:
    charges = {
        "team-a/p1": _charge("team-a/default", "research", 1, cpu=1500),
        "team-a/p2": _charge("team-a/default", "research", 1),
        "team-a/p3": _charge("team-a/batch", "research", 2),
    }
    for key, admitted, gpus, cpu in (
        ("team-a/default", 2, "2", "1500m"),
        ("team-a/batch", 1, "2", "0"),
    ):
        status = _lab_status(key, {"research": 4}, charges)
        assert status["admittedWorkloads"] == admitted
        assert status["flavorsUsage"] == [_totals("on-demand", gpus=gpus, cpu=cpu)]
        assert _gpus(status)["inUse"] == "4"  # the ClusterQueue's, the same for both


def test_a_shared_claim_counts_once_per_local_queue() -> None:
    charges = {
        "team-a/p1": _charge("team-a/default", "research", 2, shared="team-a/shared"),
        "team-a/p2": _charge("team-a/default", "research", 2, shared="team-a/shared"),
    }
    held = holdings(Usage(charges))
    assert held.local_usage == {"team-a/default": {GPUS: 2}}
    assert held.local_queues == {"team-a/default": 2}
    assert held.cluster_queues == {"research": 2}


def test_pending_is_a_count_even_when_nothing_waits() -> None:
    table = _table(LAB)
    local = _local(table, "team-a/default")
    summary = cluster_queue_summary(table, "research", lambda q: {})
    status = local_queue_status(table, local, Holdings(), 0, summary, None, NOW)
    assert (status["admittedWorkloads"], status["pendingWorkloads"]) == (0, 0)
    assert (
        local_queue_status(table, local, Holdings(), 3, summary, None, NOW)["pendingWorkloads"] == 3
    )


def test_local_queue_is_inactive_while_its_cluster_queue_is_missing_and_keeps_the_time() -> None:
    table = _table(LAB, {"team-a/default": "nowhere"})
    local = _local(table, "team-a/default")
    summary = cluster_queue_summary(table, "nowhere", lambda q: {})
    assert summary == {"name": "nowhere"}
    first = _valid(
        "localqueues.yaml", local_queue_status(table, local, Holdings(), 0, summary, None, NOW)
    )
    (condition,) = first["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "ClusterQueueDoesNotExist")
    assert condition["message"] == "ClusterQueue nowhere not found"
    again = local_queue_status(table, local, Holdings(), 0, summary, first, LATER)
    assert again["conditions"][0]["lastTransitionTime"] == NOW


def test_local_queue_of_an_invalid_cluster_queue_says_why_it_admits_nothing() -> None:
    broken = copy.deepcopy(LAB)
    broken[0]["groups"][0]["on-demand"]["gpus"]["lendingLimit"] = 9  # above nominalQuota
    table = _table(broken)
    local = _local(table, "team-a/default")
    summary = cluster_queue_summary(table, "research", lambda q: {})
    (condition,) = local_queue_status(table, local, Holdings(), 0, summary, None, NOW)["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "ClusterQueueIsInactive")
    assert "lendingLimit" in condition["message"]


def test_active_cluster_queue_reports_ready_and_usage_per_flavor() -> None:
    table = _table(LAB)
    usage = {GPUS: 3, FlavorResource("on-demand", "cpu"): 1500}
    status = _valid("clusterqueues.yaml", cluster_queue_status(table, "research", usage, None, NOW))
    assert status["conditions"] == [
        {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": "can admit pods",
            "lastTransitionTime": NOW,
        }
    ]
    assert status["flavorsUsage"] == [_totals("on-demand", gpus="3", cpu="1500m")]
    assert status["usageSummary"] == "on-demand gpus=3/4 cpu=1500m/8"


def test_invalid_cluster_queue_reports_why_it_admits_nothing_and_keeps_transition_time() -> None:
    broken = copy.deepcopy(LAB)
    broken[0]["groups"][0]["on-demand"]["gpus"]["lendingLimit"] = 9
    table = _table(broken)
    first = cluster_queue_status(table, "research", {}, None, NOW)
    (condition,) = first["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec")
    assert "lendingLimit" in condition["message"]
    again = cluster_queue_status(table, "research", {}, first, LATER)
    assert again["conditions"][0]["lastTransitionTime"] == NOW
    healed = cluster_queue_status(_table(LAB), "research", {}, first, "2026-11-21T02:00:00Z")
    assert healed["conditions"][0]["lastTransitionTime"] == "2026-11-21T02:00:00Z"


def _biggest_queue(name: str, cohort: str) -> dict[str, Any]:
    """As many flavors and resources as the ClusterQueue CRD allows."""
    groups = [
        {f"f{g}-{f}": {f"r{g}-{r}": 1 for r in range(16)} for f in range(16)} for g in range(16)
    ]
    return {"name": name, "cohort": cohort, "groups": groups}


def test_the_biggest_queue_and_cohort_give_statuses_the_crds_accept() -> None:
    borrowers = [{"name": f"b{i:03}", "cohort": "big", "groups": [{"f0-0": {"r0-0": 0}}]}
                 for i in range(MAX_PEERS + 6)]  # fmt: skip
    table = _table([_biggest_queue("big", "big"), *borrowers], {"ns/q": "big"})
    assert table.invalid == {}
    key = FlavorResource("f0-0", "r0-0")
    usage = {b["name"]: {key: 1} for b in borrowers} | {"big": {key: 1}}

    def usage_of(q: str) -> Mapping[FlavorResource, int]:
        return usage.get(q, {})

    summary = cluster_queue_summary(table, "big", usage_of)
    assert len(summary["flavors"]) == 256 == MAX_FLAVORS
    assert {len(f["resources"]) for f in summary["flavors"]} == {MAX_RESOURCES}
    (lent,) = (r for r in summary["flavors"][0]["resources"] if r["name"] == "r0-0")
    assert lent["lent"] == "0"  # big uses its one unit itself; nothing to lend
    local = local_queue_status(table, _local(table, "ns/q"), Holdings(), 0, summary, None, NOW)
    _valid("localqueues.yaml", local)
    status = cluster_queue_status(table, "big", usage_of("big"), None, NOW, 0, 0)
    _valid("clusterqueues.yaml", status)
    assert len(status["usageSummary"]) == MAX_SUMMARY and status["usageSummary"].endswith("...")


def test_lent_to_keeps_the_largest_borrowers_when_a_cohort_is_too_big_to_list() -> None:
    lender = {"name": "a", "cohort": "big", "groups": [{"on-demand": {"gpus": 1000}}]}
    borrowers = [{"name": f"b{i:03}", "cohort": "big", "groups": [{"on-demand": {"gpus": 0}}]}
                 for i in range(MAX_PEERS + 6)]  # fmt: skip
    table = _table([lender, *borrowers], {"ns/q": "a"})
    usage = {b["name"]: {GPUS: 1 + (i == 69)} for i, b in enumerate(borrowers)}
    summary = cluster_queue_summary(table, "a", lambda q: usage.get(q, {}))
    (row,) = summary["flavors"][0]["resources"]
    assert row["lent"] == str(MAX_PEERS + 7)  # the total is exact
    names = [entry["clusterQueue"] for entry in row["lentTo"]]
    assert len(names) == MAX_PEERS and names == sorted(names)
    assert "b069" in names  # the largest borrower is listed


@pytest.mark.parametrize(
    "crd, path, bound",
    [
        ("localqueues.yaml", ("flavorsUsage",), MAX_FLAVORS),
        ("localqueues.yaml", ("flavorsUsage", "resources"), MAX_RESOURCES),
        ("localqueues.yaml", ("clusterQueue", "flavors"), MAX_FLAVORS),
        ("localqueues.yaml", ("clusterQueue", "flavors", "resources"), MAX_RESOURCES),
        ("localqueues.yaml", ("clusterQueue", "flavors", "resources", "lentTo"), MAX_PEERS),
        ("localqueues.yaml", ("clusterQueue", "flavors", "resources", "borrowedFrom"), MAX_PEERS),
        ("clusterqueues.yaml", ("flavorsUsage",), MAX_FLAVORS),
        ("clusterqueues.yaml", ("flavorsUsage", "resources"), MAX_RESOURCES),
    ],
)
def test_the_writer_bounds_are_the_crd_bounds(crd: str, path: tuple[str, ...], bound: int) -> None:
    node = _schema(crd)
    for name in path:
        node = node.get("items", node)["properties"][name]
    assert node["maxItems"] == bound
