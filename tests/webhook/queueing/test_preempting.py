"""Preemption carried out by the queueing controller, in process (`webhook.queueing.preempting`).

The cohort of tests/webhook/preemption_builders.py: research (nominal 4, lends 2) and ml
(nominal 0, borrows); pods go through the webhooks of the stand-in API server, evictions
are graceful deletes, and a victim's charge ends with its grace as on a real cluster.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.waiting import GROUP_LABEL, GROUP_TOTAL_ANNOTATION
from tests.webhook.preemption_builders import (
    PDB_REFUSAL,
    after_grace,
    cluster_queue,
    controller,
    disruption,
    gpu_pod,
    lab,
    reclaim_lab,
    running,
    submit,
    used,
)
from tests.webhook.queueing.test_controller import JobWriter, gpu_job
from webhook.cli import main
from webhook.edge.metrics import Metrics
from webhook.queueing import preempting
from webhook.queueing.admittedworkloads import PREEMPTED_ANNOTATION, PREEMPTED_BY_DRAQUOTA


def borrowed(cluster: Any, pods: int = 2) -> None:
    """ml runs `pods` one-GPU pods, borrowed from research while research is idle."""
    submit(cluster, *(gpu_pod("ml", f"ml-{i}") for i in range(pods)))
    queue, _, _ = controller(cluster)
    queue.run_once()
    assert running(cluster, "ml") == [f"ml-{i}" for i in range(pods)]


def test_research_reclaims_what_it_lent_ml_and_is_admitted_once_the_borrowers_are_gone() -> None:
    cluster = reclaim_lab()
    borrowed(cluster)
    metrics = Metrics()
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(4)))
    queue, writer, evictor = controller(cluster, metrics)
    done = queue.run_once()
    assert running(cluster, "research") == ["r-0", "r-1"]
    assert sorted(evictor.marked) == ["ml/ml-0", "ml/ml-1"]
    assert sorted(v for vs in done.preempted.values() for v in vs) == [
        "ml/ml-0 (InCohortReclamation)",
        "ml/ml-1 (InCohortReclamation)",
    ]
    for name in ("ml-0", "ml-1"):
        victim = cluster.pod(name, "ml")
        assert victim["metadata"]["deletionTimestamp"]
        condition = disruption(victim)
        assert condition["reason"] == PREEMPTED_BY_DRAQUOTA
        assert (
            "due to reclamation within the cohort by ClusterQueue research"
            in (condition["message"])
        )
    assert writer.waiting["r-2"].startswith("waiting for quota: Pending the preemption of 1 ")
    assert writer.waiting["r-3"].endswith("position 2 of 2 in ClusterQueue research")
    assert used(cluster, "research") + used(cluster, "ml") <= 4
    queue.run_once()  # the victims still terminate: nobody more is evicted
    assert sorted(evictor.marked) == ["ml/ml-0", "ml/ml-1"]
    assert running(cluster, "research") == ["r-0", "r-1"]
    after_grace(cluster)
    queue.run_once()
    assert running(cluster, "research") == ["r-0", "r-1", "r-2", "r-3"]
    assert (used(cluster, "research"), used(cluster, "ml")) == (4, 0)
    text = metrics.render().decode()
    assert (
        'draquota_preempted_workloads_total{cluster_queue="ml",reason="InCohortReclamation"} 2.0'
        in text
    )


def test_only_the_borrowed_part_is_reclaimed_newest_first() -> None:
    cluster = lab(
        cluster_queue("research", 4, lending=2, reclaimWithinCohort="Any"),
        cluster_queue("ml", 1),
    )
    borrowed(cluster, pods=3)  # one of ml's own, two borrowed
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(4)))
    queue, _, evictor = controller(cluster)
    queue.run_once()
    assert sorted(evictor.marked) == ["ml/ml-1", "ml/ml-2"]  # the oldest stays: ml's own
    after_grace(cluster)
    queue.run_once()
    assert running(cluster, "research") == ["r-0", "r-1", "r-2", "r-3"]
    assert running(cluster, "ml") == ["ml-0"]


def test_within_the_queue_a_high_priority_pod_evicts_the_lowest_priority_newest_only() -> None:
    cluster = lab(cluster_queue("research", 3, cohort=None, withinClusterQueue="LowerPriority"))
    submit(
        cluster,
        gpu_pod("research", "old-low", priority=1),
        gpu_pod("research", "new-low", priority=1),
        gpu_pod("research", "mid", priority=5),
    )
    queue, _, evictor = controller(cluster)
    queue.run_once()
    submit(cluster, gpu_pod("research", "urgent", priority=100))
    done = queue.run_once()
    assert evictor.marked == ["research/new-low"]
    assert done.preempted == {"research/urgent": ["research/new-low (InClusterQueue)"]}
    message = disruption(cluster.pod("new-low", "research"))["message"]
    assert "due to prioritization in the ClusterQueue by ClusterQueue research" in message
    assert "preemptor: pod research/urgent" in message
    after_grace(cluster)
    queue.run_once()
    assert running(cluster, "research") == ["mid", "old-low", "urgent"]


def test_equal_priority_is_not_preempted_under_lower_priority() -> None:
    cluster = lab(cluster_queue("research", 2, cohort=None, withinClusterQueue="LowerPriority"))
    submit(cluster, gpu_pod("research", "a", priority=5), gpu_pod("research", "b", priority=5))
    queue, writer, evictor = controller(cluster)
    queue.run_once()
    submit(cluster, gpu_pod("research", "c", priority=5))
    queue.run_once()
    assert evictor.marked == []
    assert "1 more needed" in writer.waiting["c"]


def test_without_a_preemption_policy_nothing_is_evicted() -> None:
    cluster = lab(cluster_queue("research", 4, lending=2), cluster_queue("ml", 0))
    borrowed(cluster)
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(4)))
    queue, writer, evictor = controller(cluster)
    queue.run_once()
    assert evictor.marked == [] and running(cluster, "ml") == ["ml-0", "ml-1"]
    assert "more needed" in writer.waiting["r-2"]


def test_a_refused_eviction_is_retried_later_and_no_other_victim_is_chosen() -> None:
    cluster = lab(
        cluster_queue("research", 4, lending=2, reclaimWithinCohort="Any"),
        cluster_queue("ml", 1),
    )
    borrowed(cluster, pods=3)
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(4)))
    queue, writer, evictor = controller(cluster)
    evictor.refuse.add("ml/ml-2")  # a PodDisruptionBudget protects it
    queue.run_once()
    assert sorted(evictor.marked) == ["ml/ml-1", "ml/ml-2"]
    assert PDB_REFUSAL in writer.waiting["r-2"] + writer.waiting["r-3"]
    queue.run_once()
    assert evictor.evictions.count("ml/ml-2") == 2  # tried again
    assert sorted(evictor.marked) == ["ml/ml-1", "ml/ml-2"]  # ml-0 is never chosen
    evictor.refuse.clear()  # the budget allows it now
    queue.run_once()
    after_grace(cluster)
    queue.run_once()
    assert running(cluster, "research") == ["r-0", "r-1", "r-2", "r-3"]
    assert running(cluster, "ml") == ["ml-0"]


def test_a_new_leader_mid_eviction_finishes_it_and_chooses_no_one_more() -> None:
    cluster = lab(
        cluster_queue("research", 4, lending=2, reclaimWithinCohort="Any"),
        cluster_queue("ml", 1),
    )
    borrowed(cluster, pods=3)
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(4)))
    queue, _, evictor = controller(cluster)
    evictor.evict = lambda pod: "the replica died"  # type: ignore[method-assign]
    queue.run_once()  # marked, not evicted
    assert sorted(evictor.marked) == ["ml/ml-1", "ml/ml-2"]
    leader, _, successor = controller(cluster)
    leader.run_once()
    assert successor.marked == []  # the marks stand: no new choice
    assert sorted(successor.evictions) == ["ml/ml-1", "ml/ml-2"]
    assert running(cluster, "ml") == ["ml-0"]


def test_a_pod_group_is_evicted_whole() -> None:
    cluster = reclaim_lab()
    pair = [gpu_pod("ml", f"pair-{i}", labels={GROUP_LABEL: "pair"}) for i in range(2)]
    for obj in pair:
        obj["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: "2"}
    submit(cluster, *pair)
    queue, _, evictor = controller(cluster)
    queue.run_once()
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(3)))
    done = queue.run_once()
    assert sorted(evictor.marked) == ["ml/pair-0", "ml/pair-1"]  # one GPU was enough, but whole
    assert done.preempted == {"research/r-2": ["ml/pair (InCohortReclamation)"]}


def test_a_preempted_job_is_suspended_again_releases_its_record_and_waits_again() -> None:
    cluster = reclaim_lab()
    job = gpu_job("train", 1, parallelism=2)
    job["metadata"]["namespace"] = "ml"
    for obj in (job["spec"]["template"],):
        obj["metadata"].pop("namespace", None)
    answer = cluster.create_job(copy.deepcopy(job))
    assert answer["allowed"], answer
    writer = JobWriter(cluster)
    queue, _, evictor = controller(cluster, writer=writer)
    queue.run_once()
    assert used(cluster, "ml") == 2
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(4)))
    done = queue.run_once()
    assert evictor.suspended == ["ml/train"]
    assert done.preempted == {"research/r-2": ["Job:ml/train (InCohortReclamation)"]}
    stored = cluster.state.get("Job", "ml", "train")
    assert stored is not None and stored["spec"]["suspend"] is True
    assert "by ClusterQueue research" in stored["metadata"]["annotations"][PREEMPTED_ANNOTATION]
    assert cluster.ledger.record(stored["metadata"]["uid"]) is None
    assert used(cluster, "ml") == 2  # its terminating pods, charged on their own
    after_grace(cluster)
    done = queue.run_once()
    assert running(cluster, "research") == ["r-0", "r-1", "r-2", "r-3"]
    assert "ml/train" in done.waiting  # waits again in its queue
    assert used(cluster, "ml") == 0


def test_check_shows_which_workloads_a_pod_would_preempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = reclaim_lab()
    borrowed(cluster)
    kinds = ("Namespace", "DeviceClass", "ResourceFlavor", "ClusterQueue", "LocalQueue",
             "ResourceClaimTemplate", "Pod")  # fmt: skip
    objects = [dict(o) for kind in kinds for o in cluster.state.list(kind)]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    inputs = tmp_path / "research.yaml"
    inputs.write_text(yaml.safe_dump_all([gpu_pod("research", f"r-{i}") for i in range(4)]))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert main(["check", str(inputs), "--state", str(tmp_path / "cluster.yaml")]) == 0
    out = capsys.readouterr().out
    assert "research/r-2: would preempt: ml/ml-1 (InCohortReclamation)" in out
    assert "research/r-3: would preempt: ml/ml-0 (InCohortReclamation)" in out
    assert "Pending the preemption of 1 workload(s)" in out
    assert cluster.pod("ml-0", "ml")["spec"].get("schedulingGates") in (None, [])  # untouched


def test_a_long_queue_is_judged_for_preemption_a_bounded_number_of_times_per_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = lab(cluster_queue("research", 2, cohort=None, withinClusterQueue="LowerPriority"))
    submit(cluster, gpu_pod("research", "a", priority=50), gpu_pod("research", "b", priority=50))
    queue, _, evictor = controller(cluster)
    queue.run_once()
    submit(cluster, *(gpu_pod("research", f"w-{i}", priority=10) for i in range(3 * 32)))
    judged: list[str] = []
    choose = preempting.choose_victims

    def counting(*args: Any) -> Any:
        judged.append("once")
        return choose(*args)

    monkeypatch.setattr(preempting, "choose_victims", counting)
    done = queue.run_once()
    assert len(judged) == preempting.ATTEMPTS_PER_PASS
    assert len(done.waiting) == 3 * 32 and evictor.marked == []
