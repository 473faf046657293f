"""Attacks on queueing (ClusterQueues with `whenFull: Queue`): a waiting pod holds no quota,
so everything that would let it run without being admitted must fail."""

from __future__ import annotations

import copy

from quota.waiting import ADMISSION_GATE, is_gated
from tests.security.cluster import Cluster
from tests.webhook.builders import FLAVOR, FLAVOR_LABELS, QUEUE, cluster_objects, pod, review
from tests.webhook.queueing.test_controller import (
    controller,
    gpu_job,
    gpus,
    group,
    job_controller,
    job_state,
    queueing_cluster,
    running,
    started,
    submit,
    submit_jobs,
)
from tests.webhook.queueing.test_controller_writes import counted


def _ungated(obj: dict[str, object]) -> dict[str, object]:
    changed = copy.deepcopy(obj)
    changed["spec"]["schedulingGates"] = []  # type: ignore[index]
    return changed


def test_a_user_cannot_remove_draquotas_gate_from_a_waiting_pod() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("mine", 2), gpus("sneaky", 2))
    queue, _ = controller(cluster)
    queue.run_once()
    sneaky = _ungated(cluster.pod("sneaky"))
    sneaky["spec"]["nodeSelector"] = dict(FLAVOR_LABELS)  # type: ignore[index]
    answer = cluster.update(sneaky)
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "WaitingForQuota"
    assert (
        f"spec.schedulingGates: {ADMISSION_GATE} is removed by draquota"
        in (answer["status"]["message"])
    )
    assert is_gated(cluster.pod("sneaky"))
    assert cluster.usage(QUEUE, FLAVOR, "gpu") == 2


def test_an_admitted_pod_must_keep_its_flavors_node_selector_when_ungated() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("a", 2))
    queue, writer = controller(cluster)
    writer.admit = lambda *_: False  # type: ignore[method-assign]  # recorded, not ungated yet
    queue.run_once()
    answer = cluster.update(_ungated(cluster.pod("a")))  # the user races, without the selector
    assert not answer["allowed"]
    assert "spec.nodeSelector: must select the nodes of the flavor" in answer["status"]["message"]


def test_a_pod_that_skipped_the_mutating_webhook_is_not_let_in_ungated() -> None:
    cluster = queueing_cluster(gpus=2)
    forged = gpus("direct", 1)
    forged["metadata"]["uid"] = "uid-direct"
    answer = cluster.call("validate", review(forged))
    assert not answer["allowed"]
    assert f"spec.schedulingGates: must include {ADMISSION_GATE}" in answer["status"]["message"]


def test_a_gate_added_by_hand_in_a_rejecting_queue_does_not_hide_the_pods_charge() -> None:
    cluster = Cluster(cluster_objects(2))
    gated = pod("hidden")
    gated["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    assert cluster.create(gated)["allowed"]
    assert cluster.usage(QUEUE, FLAVOR, "gpu") == 1
    assert not cluster.create(pod("second-and-third", ("one-gpu", "one-gpu")))["allowed"]


def test_a_user_cannot_unsuspend_a_waiting_job() -> None:
    cluster = queueing_cluster(gpus=2)
    submit_jobs(cluster, gpu_job("mine", 2), gpu_job("impatient", 2))
    queue, _ = job_controller(cluster)
    queue.run_once()
    resumed = copy.deepcopy(job_state(cluster, "impatient"))
    resumed["spec"]["suspend"] = False
    answer = cluster.update(resumed)
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "WaitingForQuota"
    assert (
        "spec.suspend: draquota sets it to false when ClusterQueue" in (answer["status"]["message"])
    )
    assert job_state(cluster, "impatient")["spec"]["suspend"] is True


def test_a_job_that_skipped_the_mutating_webhook_is_not_let_in_running() -> None:
    cluster = queueing_cluster(gpus=2)
    job = gpu_job("direct", 1)
    job["metadata"]["uid"] = "uid-direct-job"
    answer = cluster.call("validate", review(job, kind="Job", resource="jobs", group="batch"))
    assert not answer["allowed"]
    assert "spec.suspend: must be true" in answer["status"]["message"]


def test_a_pod_naming_an_admitted_job_as_owner_does_not_ride_on_its_charge() -> None:
    cluster = queueing_cluster(gpus=4)
    submit_jobs(cluster, gpu_job("real", 2))
    queue, _ = job_controller(cluster)
    queue.run_once()
    job = job_state(cluster, "real")
    stowaway = gpus("stowaway", 2)
    stowaway["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "real",
         "uid": job["metadata"]["uid"], "controller": True}
    ]  # fmt: skip
    answer = cluster.create(stowaway)
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "NotJobController"
    assert cluster.usage(QUEUE, FLAVOR, "gpu") == 2


def test_a_pod_cannot_be_made_an_admitted_jobs_pod_by_an_update() -> None:
    cluster = queueing_cluster(gpus=4)
    submit_jobs(cluster, gpu_job("real", 2))
    queue, _ = job_controller(cluster)
    queue.run_once()
    submit(cluster, gpus("waiting", 2))  # gated, no record: charged nothing while it waits
    adopted = copy.deepcopy(cluster.pod("waiting"))
    adopted["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "real",
         "uid": job_state(cluster, "real")["metadata"]["uid"], "controller": True}
    ]  # fmt: skip
    answer = cluster.update(adopted)
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "NotJobController"


def test_an_admitted_job_cannot_grow_its_parallelism() -> None:
    cluster = queueing_cluster(gpus=4)
    submit_jobs(cluster, gpu_job("small", 1, parallelism=1))
    queue, _ = job_controller(cluster)
    queue.run_once()
    grown = copy.deepcopy(job_state(cluster, "small"))
    grown["spec"]["parallelism"] = grown["spec"]["completions"] = 4
    answer = cluster.update(grown)
    assert not answer["allowed"]
    assert (
        "spec.parallelism: a Job its ClusterQueue admitted as a whole cannot run more"
        in (answer["status"]["message"])
    )
    shrunk = copy.deepcopy(job_state(cluster, "small"))
    shrunk["spec"]["parallelism"] = 0  # scaling down is fine: the record keeps the larger charge
    assert cluster.update(shrunk)["allowed"]


def test_a_pod_named_like_a_job_is_not_left_out_of_the_usage_the_job_is_decided_on() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("train", 2))  # a pod named like the Job below
    queue, _ = job_controller(cluster)
    queue.run_once()
    submit_jobs(cluster, gpu_job("train", 2, parallelism=2))  # needs 4, only 2 are free
    queue.run_once()
    assert started(cluster) == []
    assert cluster.usage(QUEUE, FLAVOR, "gpu") == 2


PEER = "team-b"


def _cohort_with_a_peer() -> Cluster:
    """Team-a queues (whenFull Queue) and team-b rejects; 2 GPUs each, both in cohort lab
    without lending limits: all 4 GPUs are the cohort's to share."""
    objects = cluster_objects(2)
    queue = next(o for o in objects if o["kind"] == "ClusterQueue")
    peer = copy.deepcopy(queue)
    peer["metadata"]["name"] = "peer"
    peer["spec"]["cohort"] = "lab"
    queue["spec"].update(whenFull="Queue", cohort="lab")
    for obj in [o for o in objects if o["kind"] in ("LocalQueue", "ResourceClaimTemplate")]:
        moved = copy.deepcopy(obj)
        moved["metadata"]["namespace"] = PEER
        if obj["kind"] == "LocalQueue":
            moved["spec"]["clusterQueue"] = "peer"
        objects.append(moved)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PEER}}
    return Cluster([*objects, peer, namespace])


def test_a_group_that_never_gets_its_last_gpu_does_not_take_a_peers_quota_meanwhile() -> None:
    cluster = _cohort_with_a_peer()
    assert cluster.create(pod("peer-0", namespace=PEER))["allowed"]  # 3 GPUs left in lab
    submit(cluster, *group("quad", 4, 4))  # 4 could fit in lab, never while the peer runs
    denied: list[str] = []

    def peer_admits() -> None:  # the peer's next pod, within its own nominal quota
        answer = cluster.create(pod("peer-1", namespace=PEER), dry_run=True)
        if not answer["allowed"]:
            denied.append(answer["status"]["message"])

    queue, ledger, writer = counted(cluster, after=peer_admits)
    for _ in range(5):
        queue.run_once()
        peer_admits()
    assert denied == []
    assert ledger.writes == 0
    assert running(cluster) == ["peer-0"]
    assert "1 more needed (requested 4, in use 0 of nominal 2" in writer.waiting["quad-0"]
