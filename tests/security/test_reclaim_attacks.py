"""Attacks on Reject-mode reclaim at admission: a namespace user tries to have pods evicted that
its ClusterQueue has no claim on.

The cohort of tests/webhook/reclaim_builders.py (research lends 2 to ml, reclaims Any), and a
second cohort `lab2` where `thief` borrows from `donor`. What the real API server adds (it
refuses a pod that sets `spec.priority` itself) is shown in tests/e2e/test_preemption.py.
"""

from __future__ import annotations

from tests.security.test_preemption_attacks import PRIORITY_LABELS
from tests.webhook.preemption_builders import cluster_queue, gpu_pod, lab, running, submit
from tests.webhook.reclaim_builders import Replica, reject, reject_lab


def test_a_full_queue_never_reclaims_from_a_borrower_of_another_cohort() -> None:
    replica = Replica(
        lab(
            reject(cluster_queue("research", 2, lending=2, reclaimWithinCohort="Any")),
            reject(cluster_queue("donor", 2, cohort="lab2", lending=2)),
            reject(cluster_queue("thief", 0, cohort="lab2")),
        )
    )
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("thief", f"t-{i}") for i in range(2)))  # borrows donor's 2
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))
    answer = cluster.create(gpu_pod("research", "attack", priority=1_000_000))
    assert not answer["allowed"]
    assert replica.evictor.marked == [] and replica.evictor.evictions == []
    assert running(cluster, "thief") == ["t-0", "t-1"]


def test_priority_written_in_labels_does_not_reclaim_from_equal_priority_borrowers() -> None:
    replica = reject_lab(reclaimWithinCohort="LowerPriority")
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("ml", f"ml-{i}", priority=0) for i in range(2)))
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))
    answer = cluster.create(gpu_pod("research", "attack", labels=PRIORITY_LABELS))
    assert not answer["allowed"]
    assert replica.evictor.marked == []
    assert running(cluster, "ml") == ["ml-0", "ml-1"]


def test_a_dry_run_never_evicts() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("ml", f"ml-{i}") for i in range(2)))
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))
    for _ in range(3):
        answer = cluster.create(gpu_pod("research", "probe"), dry_run=True)
        assert answer["allowed"] and answer["warnings"][0].startswith("would reclaim")
    assert replica.evictor.marked == [] and replica.evictor.evictions == []
    assert running(cluster, "ml") == ["ml-0", "ml-1"]


def test_a_borrower_cannot_reclaim_from_the_lender_it_borrows_from() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))
    submit(cluster, *(gpu_pod("ml", f"ml-{i}") for i in range(2)))
    answer = cluster.create(gpu_pod("ml", "more", priority=1_000_000))
    assert not answer["allowed"]  # ml has no policy, and research does not borrow
    assert replica.evictor.marked == []
    assert running(cluster, "research") == ["r-0", "r-1"]


def test_retries_of_a_reclaiming_pod_evict_each_victim_once() -> None:
    replica = reject_lab()
    cluster = replica.cluster
    submit(cluster, *(gpu_pod("ml", f"ml-{i}") for i in range(2)))
    submit(cluster, *(gpu_pod("research", f"r-{i}") for i in range(2)))
    assert cluster.create(gpu_pod("research", "r-2"))["allowed"]
    for i in range(3):  # the same pod again under other names: research is at 3 of 4
        answer = cluster.create(gpu_pod("research", f"again-{i}"))
        assert answer["allowed"] is (i == 0)
    assert replica.evictor.marked == ["ml/ml-1", "ml/ml-0"]
    assert replica.evictor.evictions == ["ml/ml-1", "ml/ml-0"]
