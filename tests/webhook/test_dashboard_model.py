"""The dashboard's page model (webhook.dashboard.model), from objects a real cluster served
(tests/webhook/dashboard_lab.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.holdings import holdings
from quota.queuetable import queue_table
from quota.settings import Settings
from tests.webhook import gpu_memory
from tests.webhook.dashboard_lab import admin_view, lab_objects, of
from webhook.commands._cluster import memory_usage
from webhook.commands._localqueues import computed_status
from webhook.commands._workloads import preempted_because
from webhook.dashboard.model import namespace_cards, parse_wait, preempted, routes, waiting
from webhook.dashboard.page import bar, body
from webhook.kube.trim import trimmed

WAIT_0 = (
    "waiting for quota: insufficient unused quota for gpus (DeviceClass gpu.example.com) in "
    "flavor on-demand, 2 more needed (requested 2, in use 2 of nominal 4; 2 lent to "
    "ClusterQueue ml; cohort lab can lend 0)"
)


@pytest.fixture
def lab() -> Iterator[list[dict[str, Any]]]:
    objects = lab_objects()
    before = copy.deepcopy(objects)
    yield objects
    assert objects == before, "the model changed its inputs"


def _card(cards: list[Any], name: str) -> Any:
    (card,) = (c for c in cards if c["name"] == name)
    return card


def test_an_admin_sees_research_lend_to_ml_and_ml_borrow_from_research(lab: Any) -> None:
    cards, _ = admin_view(lab)
    assert [c["name"] for c in cards] == ["ml", "research"]
    research, ml = _card(cards, "research"), _card(cards, "ml")
    assert research["flavors"] == [{"name": "on-demand", "resources": [{
        "name": "gpus", "nominal": "4", "inUse": "2", "borrowed": "0", "lent": "2",
        "lendable": "0", "lendingLimit": "2", "lentTo": [{"clusterQueue": "ml", "amount": "2"}],
    }]}]  # fmt: skip
    (gpus,) = ml["flavors"][0]["resources"]
    assert gpus["borrowedFrom"] == [{"clusterQueue": "research", "amount": "2"}]
    assert (research["cohort"], research["whenFull"], research["problems"]) == ("lab", "Queue", [])


def test_an_admin_counts_each_local_queue_as_of_now(lab: Any) -> None:
    cards, _ = admin_view(lab)
    assert _card(cards, "research")["localQueues"] == [
        {"key": "research/default", "admitted": 1, "pending": 2}
    ]
    assert _card(cards, "ml")["localQueues"] == [{"key": "ml/default", "admitted": 1, "pending": 0}]


def test_a_namespace_user_sees_the_same_quota_and_lending_as_the_admin(lab: Any) -> None:
    admin, _ = admin_view(lab)
    for namespace in ("research", "ml"):
        (card,) = namespace_cards(of(lab, "LocalQueue", namespace))
        assert card["flavors"] == _card(admin, namespace)["flavors"]
        assert card["cohort"] == "lab"
        assert card["problems"] == []
    (research,) = namespace_cards(of(lab, "LocalQueue", "research"))
    # what the LocalQueue's status says (written every few seconds), not recomputed
    assert research["localQueues"] == [{"key": "research/default", "admitted": 1, "pending": 2}]


def test_waiting_workloads_show_draquotas_reason_and_position_in_queue_order(lab: Any) -> None:
    rows = waiting(of(lab, "Pod"), of(lab, "Job"), of(lab, "Event"), {})
    assert [(r["kind"], r["key"], r["position"], r["of"], r["clusterQueue"]) for r in rows] == [
        ("Pod", "research/wait-0", 1, 2, "research"),
        ("Job", "research/train", 2, 2, "research"),
    ]
    assert rows[0]["reason"] == WAIT_0
    assert rows[1]["reason"].startswith("waiting for quota: insufficient unused quota for gpus")
    assert rows[0]["localQueue"] == rows[1]["localQueue"] == "research/default"


def test_pods_cached_without_status_take_the_reason_from_their_pending_event(lab: Any) -> None:
    full = waiting(of(lab, "Pod"), of(lab, "Job"), of(lab, "Event"), {})
    pods = [trimmed(p) for p in of(lab, "Pod")]  # what the informers keep of a pod
    conditions = [c for p in pods for c in (p or {}).get("status", {}).get("conditions", [])]
    assert not any(c.get("message") for c in conditions if c["type"] == "QuotaReserved")
    assert waiting(pods, of(lab, "Job"), of(lab, "Event"), {}) == full  # type: ignore[arg-type]


def test_a_workload_draquota_has_not_told_yet_waits_in_its_local_queues_cluster_queue(
    lab: Any,
) -> None:
    pods = copy.deepcopy(of(lab, "Pod", "research"))
    for pod in pods:
        pod["status"].pop("conditions", None)
    rows = waiting(pods, [], [], routes(of(lab, "LocalQueue")))
    assert [(r["key"], r["reason"], r["position"], r["clusterQueue"]) for r in rows] == [
        ("research/wait-0", "", None, "research")
    ]


def test_a_suspended_job_draquota_never_said_waits_is_not_shown(lab: Any) -> None:
    assert waiting([], of(lab, "Job"), [], {}) == []  # suspended by its user, say


def test_a_pod_being_deleted_no_longer_waits(lab: Any) -> None:
    pods = copy.deepcopy(of(lab, "Pod"))
    for pod in pods:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert waiting(pods, [], of(lab, "Event"), {}) == []


def _with_status(local_queue: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(local_queue)
    *parents, last = path.split(".")
    node = broken["status"]["clusterQueue"]
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = value
    return broken


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("flavors.0.resources.0.inUse", "two", "flavors[0].resources[0].inUse: "),
        ("flavors.0.resources.0.nominal", None, "flavors[0].resources[0].nominal: required"),
        ("flavors.0.resources.0.lentTo", "ml", "flavors[0].resources[0].lentTo: must be a list"),
        ("flavors", {"name": "x"}, "flavors: must be a list"),
        ("name", 7, "name: must be a string"),
    ],
    ids=["bad-quantity", "missing-nominal", "lent-to-not-a-list", "flavors-not-a-list", "name"],
)
def test_a_malformed_local_queue_status_names_the_local_queue_and_the_field(
    lab: Any, path: str, value: Any, problem: str
) -> None:
    (research,) = of(lab, "LocalQueue", "research")
    (card,) = namespace_cards([_with_status(research, path, value)])
    prefix = "LocalQueue research/default: status.clusterQueue."
    assert card["name"] == "research" and card["flavors"] == []
    assert [p[: len(prefix + problem)] for p in card["problems"]] == [prefix + problem]


def test_a_local_queue_without_status_yet_says_so(lab: Any) -> None:
    (research,) = of(lab, "LocalQueue", "research")
    fresh = {k: v for k, v in research.items() if k != "status"}
    (card,) = namespace_cards([fresh])
    assert card["problems"] == [
        "LocalQueue research/default: status.clusterQueue: not reported yet"
    ]
    assert card["localQueues"] == [{"key": "research/default", "admitted": None, "pending": None}]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (f"{WAIT_0}; position 1 of 2 in ClusterQueue research", (WAIT_0, 1, 2, "research")),
        (
            "waiting behind pod research/wait-0 (StrictFIFO); position 2 of 2 in ClusterQueue r",
            ("waiting behind pod research/wait-0 (StrictFIFO)", 2, 2, "r"),
        ),
        (
            "waiting for the pods of pod group research/g: 1 of 3 exist",
            ("waiting for the pods of pod group research/g: 1 of 3 exist", None, None, None),
        ),
        ("", ("", None, None, None)),
    ],
    ids=["quota", "strict-fifo", "incomplete-group", "not-told-yet"],
)
def test_the_position_is_read_from_the_message_draquota_wrote(
    message: str, expected: tuple[Any, ...]
) -> None:
    parsed = parse_wait(message)
    assert (parsed["reason"], parsed["position"], parsed["of"], parsed["clusterQueue"]) == expected


def test_an_inactive_local_queue_says_why_on_its_card(lab: Any) -> None:
    (research,) = copy.deepcopy(of(lab, "LocalQueue", "research"))
    research["status"]["conditions"] = [{
        "type": "Active", "status": "False", "reason": "ClusterQueueDoesNotExist",
        "message": "ClusterQueue research not found",
    }]  # fmt: skip
    (card,) = namespace_cards([research])
    assert card["problems"] == ["LocalQueue research/default: ClusterQueue research not found"]


def test_two_local_queues_of_one_cluster_queue_share_its_card(lab: Any) -> None:
    (research,) = of(lab, "LocalQueue", "research")
    fresh = copy.deepcopy(research)
    fresh["metadata"]["name"] = "a-new-one"  # no status yet, listed first
    del fresh["status"]
    (card,) = namespace_cards([fresh, research])
    assert card["flavors"] == research["status"]["clusterQueue"]["flavors"]
    assert card["problems"] == [
        "LocalQueue research/a-new-one: status.clusterQueue: not reported yet"
    ]
    assert [q["key"] for q in card["localQueues"]] == ["research/a-new-one", "research/default"]


def test_gpu_memory_shows_in_the_unit_of_its_nominal_quota_to_an_admin_and_a_user() -> None:
    """Six notebooks of one 1g.5gb slice (5Gi) hold 30Gi of ClusterQueue vision's 40Gi of GPU
    memory (tests/webhook/gpu_memory.py: partitionable GPUs recorded from the real cluster)."""
    cluster = gpu_memory.admitted(6)
    objects = [*gpu_memory.objects(), *cluster.state.list("Pod")]
    cards, _ = admin_view(objects)
    (vision,) = cards
    rows = {row["name"]: row for row in vision["flavors"][0]["resources"]}
    assert rows["gpu-memory"] == {
        "name": "gpu-memory", "nominal": "40Gi", "inUse": "30Gi", "borrowed": "0", "lent": "0",
        "lendable": "0",
    }  # fmt: skip
    assert (rows["gpus"]["nominal"], rows["gpus"]["inUse"]) == ("16", "6")
    # a namespace user's card: what the queue status writer put on the LocalQueue
    table = queue_table(cluster.state.snapshot(), Settings())
    usage = memory_usage(cluster.state, Settings())
    local_queues = computed_status(
        table, of(objects, "LocalQueue"), usage, holdings(usage), {}, "2026-11-27T10:00:00Z"
    )
    (card,) = namespace_cards(local_queues)
    assert card["flavors"] == vision["flavors"] and card["problems"] == []
    html = body({"scope": "test", "queues": [card], "waiting": []})
    assert "30Gi of 40Gi in use" in html
    shape = bar(rows["gpu-memory"], in_cohort=False)
    assert shape.segments == (("used", 75.0), ("free", 25.0)) and shape.nominal_at == 100.0


# -- preemptions (issue 26): recorded from the real control plane by
# tests/webhook/kube/record_preemption.py. research reclaimed what it lent ml: ml's pod
# tune-0 and Job tune are being evicted (a kubelet holds their pods), research's r-2 and
# r-3 wait for them.

PREEMPTION = Path(__file__).parent / "fixtures" / "preemption"
LISTED = {"pods": "Pod", "jobs": "Job", "events": "Event", "localqueues": "LocalQueue"}


def listed(namespace: str, plural: str) -> list[dict[str, Any]]:
    """A LIST the namespace's user got (with `kind`, as `list_objects` sets it)."""
    items = json.loads((PREEMPTION / namespace / f"{plural}.json").read_text())["items"]
    return [{**item, "kind": LISTED[plural]} for item in items]


def _suspended(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [job for job in jobs if job["spec"].get("suspend") is True]


def _preempted_in_ml(rows: list[dict[str, Any]]) -> None:
    assert [(r["kind"], r["key"], r["clusterQueue"]) for r in rows] == [
        ("Job", "ml/tune", "ml"),  # its pod stops with it: not a row of its own
        ("Pod", "ml/tune-0", "ml"),
    ]
    for row in rows:
        assert row["message"].startswith("Preempted to accommodate a workload (UID: ")
        assert "due to reclamation within the cohort by ClusterQueue research" in row["message"]


def test_a_namespace_user_sees_what_draquota_preempts_there_and_why() -> None:
    pods, jobs = listed("ml", "pods"), _suspended(listed("ml", "jobs"))
    _preempted_in_ml(preempted(pods, jobs, (), routes(listed("ml", "localqueues"))))


def test_an_admin_reads_the_same_from_the_cache_and_preempted_events() -> None:
    admin = PREEMPTION / "admin"
    objects = [
        d for f in ("pods", "jobs") for d in yaml.safe_load_all((admin / f"{f}.yaml").read_text())
    ]
    cached = [trimmed(obj) for obj in objects]
    assert any(preempted_because(obj) for obj in cached if obj)  # the cache keeps the marks
    pods = [o for o in cached if o and o["kind"] == "Pod"]
    jobs = [o for o in cached if o and o["kind"] == "Job"]
    events = listed("ml", "events")
    local_queues = list(yaml.safe_load_all((admin / "localqueues.yaml").read_text()))
    _preempted_in_ml(preempted(pods, jobs, events, routes(local_queues)))


def test_the_preemptors_wait_for_the_preemption_of_their_victims() -> None:
    pods, jobs = listed("research", "pods"), listed("research", "jobs")
    local_queues = routes(listed("research", "localqueues"))
    rows = waiting(pods, jobs, listed("research", "events"), local_queues)
    assert [(r["key"], r["position"], r["of"]) for r in rows] == [
        ("research/r-2", 1, 2),
        ("research/r-3", 2, 2),
    ]
    assert {r["reason"] for r in rows} == {
        "waiting for quota: Pending the preemption of 2 workload(s)"
    }
    assert preempted(pods, jobs, (), local_queues) == []  # research's own run on


def test_a_victim_is_no_longer_shown_once_its_pods_have_ended() -> None:
    pods, jobs = listed("ml", "pods"), _suspended(listed("ml", "jobs"))
    ended = copy.deepcopy(pods)
    for pod in ended:
        pod["status"]["phase"] = "Failed"  # what the kubelet reports of an evicted pod
    assert preempted(ended, jobs, listed("ml", "events"), {}) == []
    job_pods_gone = [p for p in pods if p["metadata"]["name"] == "tune-0"]
    rows = preempted(job_pods_gone, jobs, listed("ml", "events"), {})
    assert [r["key"] for r in rows] == ["ml/tune-0"]  # the Job waits again in its queue
