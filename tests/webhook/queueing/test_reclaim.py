"""Reject-mode reclaim at admission (webhook/queueing/reclaim.py): a pod denied for quota its cohort
borrowed is admitted by evicting the borrowers its queue's `reclaimWithinCohort` allows.

The cohort of tests/webhook/reclaim_builders.py behind the stand-in API server; ml borrows
research's two lent GPUs, then research wants its quota back.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.webhook.builders import TEMPLATE, pod, review
from tests.webhook.preemption_builders import (
    PDB_REFUSAL,
    after_grace,
    disruption,
    gpu_pod,
    running,
    submit,
    used,
)
from tests.webhook.reclaim_builders import Replica, preempted, reject_lab


def _ml_borrows_two(replica: Replica, priority: int | None = None) -> None:
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("ml", f"ml-{i}", priority) for i in range(2)))
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))  # its own, unlent 2
    assert used(cluster, "ml") == 2 and used(cluster, "research") == 2


def _create(replica: Replica, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    answer = replica.cluster.create(obj, dry_run=dry_run)
    replica.cluster.clock.now += 1
    return answer


def test_a_lender_gets_back_what_its_cohort_borrowed_by_evicting_the_newest_borrower() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    _ml_borrows_two(replica)
    answer = _create(replica, gpu_pod("research", "r-2"))
    assert answer["allowed"], answer
    assert answer["warnings"] == ["reclaimed from ClusterQueue ml: evicted ml/ml-1"]
    victim = cluster.pod("ml-1", "ml")
    assert victim["metadata"]["deletionTimestamp"]
    condition = disruption(victim)
    assert condition["reason"] == "PreemptedByDraquota"
    assert "due to reclamation within the cohort by ClusterQueue research" in condition["message"]
    assert "preemptor: pod research/r-2" in condition["message"]
    assert running(cluster, "ml") == ["ml-0"]
    answer = _create(replica, gpu_pod("research", "r-3"))
    assert answer["warnings"] == ["reclaimed from ClusterQueue ml: evicted ml/ml-0"]
    assert replica.evictor.marked == ["ml/ml-1", "ml/ml-0"]
    assert used(cluster, "research") == 4  # never above its nominal quota
    assert preempted(replica, "ml", "InCohortReclamation") == 2


def test_while_the_victims_terminate_the_overlap_is_counted_and_nobody_else_takes_it() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    _ml_borrows_two(replica)
    assert _create(replica, gpu_pod("research", "r-2"))["allowed"]
    assert used(cluster, "ml") == 2 and used(cluster, "research") == 3  # ml-1 still counts
    answer = _create(replica, gpu_pod("other", "o-0"))  # outside the cohort: its own quota
    assert answer["allowed"]
    denied = _create(replica, gpu_pod("ml", "ml-2"))
    assert not denied["allowed"]
    assert denied["status"]["reason"] == "QuotaExceeded"
    after_grace(cluster)
    assert used(cluster, "ml") == 1 and used(cluster, "research") == 3


def test_once_the_victims_are_gone_the_borrower_is_told_its_cohort_lends_nothing() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    _ml_borrows_two(replica)
    for name in ("r-2", "r-3"):
        assert _create(replica, gpu_pod("research", name))["allowed"]
    after_grace(cluster)
    assert used(cluster, "ml") == 0 and used(cluster, "research") == 4
    denied = _create(replica, gpu_pod("ml", "ml-2"))
    assert not denied["allowed"]
    message = denied["status"]["message"]
    assert 'exceeds quota of ClusterQueue "ml"' in message, message
    assert "in use 0 of nominal 0; cohort lab can lend 0" in message, message


def test_a_dry_run_says_what_it_would_evict_and_evicts_nothing() -> None:
    replica = reject_lab()
    _ml_borrows_two(replica)
    answer = _create(replica, gpu_pod("research", "r-2"), dry_run=True)
    assert answer["allowed"]
    assert answer["warnings"] == ["would reclaim from ClusterQueue ml: evicts ml/ml-1"]
    assert replica.evictor.marked == [] and replica.evictor.evictions == []
    assert running(replica.cluster, "ml") == ["ml-0", "ml-1"]
    assert preempted(replica, "ml", "InCohortReclamation") == 0


def test_mutate_stamps_the_pod_as_admitted_and_warns_only_on_a_dry_run() -> None:
    replica = reject_lab()
    _ml_borrows_two(replica)
    created = replica.cluster.call("mutate", review(gpu_pod("research", "r-2")))
    assert created["allowed"] and "patch" in created  # stamped: /validate warns and evicts
    assert not created.get("warnings")
    dry = replica.cluster.call("mutate", review(gpu_pod("research", "r-2"), dry_run=True))
    assert dry["warnings"] == ["would reclaim from ClusterQueue ml: evicts ml/ml-1"]
    assert replica.evictor.marked == []


def test_without_an_evictor_nothing_is_reclaimed() -> None:
    replica = reject_lab(evictor=False)
    _ml_borrows_two(replica)
    answer = _create(replica, gpu_pod("research", "r-2"))
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "QuotaExceeded"
    assert running(replica.cluster, "ml") == ["ml-0", "ml-1"]


@pytest.mark.parametrize(
    ("policy", "ml_priority", "reclaims"),
    [
        ({"reclaimWithinCohort": "Never"}, 0, False),
        ({"reclaimWithinCohort": "LowerPriority"}, 0, False),  # equal priority stays
        ({"reclaimWithinCohort": "LowerPriority"}, -10, True),
        ({"reclaimWithinCohort": "Any"}, 1_000, True),
    ],
    ids=["never", "lower-priority-equal", "lower-priority-lower", "any-higher"],
)
def test_the_queues_reclaim_policy_decides(
    policy: dict[str, Any], ml_priority: int, reclaims: bool
) -> None:
    replica = reject_lab(**policy)
    _ml_borrows_two(replica, ml_priority)
    answer = _create(replica, gpu_pod("research", "r-2", priority=0))
    assert answer["allowed"] is reclaims
    assert replica.evictor.marked == (["ml/ml-1"] if reclaims else [])


def test_a_pod_that_would_go_above_its_nominal_quota_reclaims_nothing() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("ml", f"ml-{i}") for i in range(2)))
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))
    submit(cluster, gpu_pod("research", "r-2"))  # reclaims ml-1: research uses 3 of 4
    replica.evictor.marked.clear()
    answer = _create(replica, pod("big", (TEMPLATE, TEMPLATE), namespace="research"))
    assert not answer["allowed"]  # 3 + 2 > 4: no reclaim makes it fit within its nominal
    assert replica.evictor.marked == []
    assert running(cluster, "ml") == ["ml-0"]


def test_in_reject_mode_a_pod_never_evicts_pods_of_its_own_queue() -> None:
    replica = reject_lab(reclaimWithinCohort="Any", withinClusterQueue="LowerPriority")
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("research", f"r-{i}", priority=0) for i in range(4)))
    answer = _create(replica, gpu_pod("research", "urgent", priority=1_000))
    assert not answer["allowed"]
    assert replica.evictor.marked == []


def test_a_refused_eviction_denies_the_pod_and_its_retry_evicts_the_same_victim() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    _ml_borrows_two(replica)
    replica.evictor.refuse.add("ml/ml-1")
    denied = _create(replica, gpu_pod("research", "r-2"))
    assert not denied["allowed"]
    assert (
        f"reclaiming it failed: pod ml/ml-1: {PDB_REFUSAL}; submit again"
        in (denied["status"]["message"])
    )
    assert used(cluster, "research") == 2
    replica.evictor.refuse.clear()  # the budget allows it now
    answer = _create(replica, gpu_pod("research", "r-2"))
    assert answer["allowed"], answer
    assert answer["warnings"] == ["reclaimed from ClusterQueue ml: being evicted already: ml/ml-1"]
    assert replica.evictor.marked == ["ml/ml-1"]  # marked once, never another victim
    assert running(cluster, "ml") == ["ml-0"]


def test_a_replica_dying_between_the_evictions_and_the_record_loses_no_preemptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replica = reject_lab()
    cluster = replica.cluster
    _ml_borrows_two(replica)
    admit = cluster.ledger.admit

    def dies_on_write(*args: Any, **kwargs: Any) -> Any:
        if not args[2] and replica.evictor.evictions:  # the record, after the evictions
            raise ConnectionError("replica killed")
        return admit(*args, **kwargs)

    monkeypatch.setattr(cluster.ledger, "admit", dies_on_write)
    lost = _create(replica, gpu_pod("research", "r-2"))
    assert not lost["allowed"]
    assert running(cluster, "ml") == ["ml-0"]  # ml-1 was evicted before the record
    monkeypatch.setattr(cluster.ledger, "admit", admit)
    retried = _create(replica, gpu_pod("research", "r-2"))
    assert retried["allowed"], retried
    assert replica.evictor.marked == ["ml/ml-1"] and replica.evictor.evictions == ["ml/ml-1"]
    assert running(cluster, "ml") == ["ml-0"]
    assert used(cluster, "research") == 3
    assert preempted(replica, "ml", "InCohortReclamation") == 1


def _job(name: str, parallelism: int) -> dict[str, Any]:
    template = gpu_pod("research", "unused")
    del template["metadata"]["name"]
    pods = {"metadata": template["metadata"], "spec": template["spec"]}
    spec = {"parallelism": parallelism, "completions": parallelism, "template": pods}
    metadata = {"name": name, "namespace": "research"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def test_a_job_whose_pods_would_reclaim_is_accepted_and_its_pods_reclaim_as_they_come() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    _ml_borrows_two(replica)
    answer = cluster.create_job(_job("train", 2))
    assert answer["allowed"], answer
    assert answer["warnings"] == [
        "its pods would reclaim from ClusterQueue ml: evicts ml/ml-1, ml/ml-0"
    ]
    assert replica.evictor.marked == []  # nothing is evicted for the Job itself
    for pod_answer in cluster.run_job(answer["object"]):  # the Job controller makes its pods
        assert pod_answer["allowed"], pod_answer
        cluster.clock.now += 1
    assert sorted(replica.evictor.marked) == ["ml/ml-0", "ml/ml-1"]
    assert used(cluster, "research") == 4


def test_a_job_that_would_go_above_its_nominal_quota_is_still_denied() -> None:
    replica = reject_lab()
    _ml_borrows_two(replica)
    answer = replica.cluster.create_job(_job("big", 3))  # 2 held + 3 > nominal 4
    assert not answer["allowed"] and answer["status"]["reason"] == "QuotaExceeded"
    assert replica.evictor.marked == []
