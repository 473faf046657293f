"""Attacks on preemption (queue mode): a namespace user tries to have other teams' pods evicted.

The cohort of tests/webhook/preemption_builders.py behind the stand-in API server: research
(nominal 4, lends 2) and ml (nominal 0) share cohort `lab`; team `other` has a ClusterQueue
outside it. What the real API server adds (it refuses a pod that sets `spec.priority`
itself) is shown in tests/e2e/test_preemption.py.
"""

from __future__ import annotations

from tests.webhook.preemption_builders import (
    cluster_queue,
    controller,
    gpu_pod,
    lab,
    running,
    submit,
)

PRIORITY_LABELS = {
    "priority": "1000000",
    "kueue.x-k8s.io/priority-class": "system-cluster-critical",
    "scheduling.k8s.io/priority": "2000000000",
}


def test_a_high_priority_pod_never_evicts_pods_of_a_queue_outside_its_cohort() -> None:
    cluster = lab(
        cluster_queue("research", 2, reclaimWithinCohort="Any", withinClusterQueue="LowerPriority"),
        cluster_queue("other", 2, cohort=None),
    )
    submit(cluster, gpu_pod("other", "o-0", priority=0), gpu_pod("other", "o-1", priority=0))
    top = 1_000_000  # research's own pods are as important as the attacker's
    submit(cluster, gpu_pod("research", "r-0", top), gpu_pod("research", "r-1", top))
    queue, writer, evictor = controller(cluster)
    queue.run_once()
    submit(cluster, gpu_pod("research", "attack", priority=top))
    done = queue.run_once()
    assert evictor.marked == [] and done.preempted == {}
    assert running(cluster, "other") == ["o-0", "o-1"]
    assert "more needed" in writer.waiting["attack"]


def test_priority_written_in_labels_counts_for_nothing() -> None:
    cluster = lab(cluster_queue("research", 2, cohort=None, withinClusterQueue="LowerPriority"))
    submit(cluster, gpu_pod("research", "a", priority=0), gpu_pod("research", "b", priority=0))
    queue, writer, evictor = controller(cluster)
    queue.run_once()
    submit(cluster, gpu_pod("research", "attack", labels=PRIORITY_LABELS))
    queue.run_once()
    assert evictor.marked == []
    assert running(cluster, "research") == ["a", "b"]
    assert "more needed" in writer.waiting["attack"]


def test_a_reclaiming_team_evicts_only_what_the_other_team_borrowed_never_its_own() -> None:
    cluster = lab(
        cluster_queue("research", 2, lending=2, reclaimWithinCohort="Any"),
        cluster_queue("ml", 2),
    )
    submit(cluster, *(gpu_pod("ml", f"ml-{i}", priority=0) for i in range(4)))
    queue, _, evictor = controller(cluster)
    queue.run_once()
    assert running(cluster, "ml") == ["ml-0", "ml-1", "ml-2", "ml-3"]  # two of them borrowed
    submit(cluster, *(gpu_pod("research", f"r-{i}", priority=1_000) for i in range(3)))
    queue.run_once()
    assert sorted(evictor.marked) == ["ml/ml-2", "ml/ml-3"]  # research's 2, no more


def test_a_victim_already_terminating_is_not_evicted_twice_nor_replaced_by_another() -> None:
    cluster = lab(cluster_queue("research", 2, cohort=None, withinClusterQueue="LowerPriority"))
    submit(cluster, gpu_pod("research", "a", priority=0), gpu_pod("research", "b", priority=0))
    queue, writer, evictor = controller(cluster)
    queue.run_once()
    cluster.delete("b", 30, "research")  # its user deleted it: it terminates, still charged
    submit(cluster, gpu_pod("research", "urgent", priority=100))
    queue.run_once()
    queue.run_once()
    assert evictor.marked == [] and evictor.evictions == []
    assert writer.waiting["urgent"].startswith(
        "waiting for quota: Pending the preemption of 1 workload(s)"
    )
    assert running(cluster, "research") == ["a"]
