"""The queueing controller against a ClusterQueue with `whenFull: Queue`, in process.

Pods go through /mutate and /validate as the API server sends them
(tests/security/cluster.py); the controller's pod writes go through the validating
webhook too, as an update, so a pod is ungated only when draquota allows it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from quota.cluster import Obj
from quota.waiting import ADMISSION_GATE, GROUP_LABEL, GROUP_TOTAL_ANNOTATION, is_gated
from tests.security.cluster import Cluster
from tests.webhook.builders import FLAVOR, FLAVOR_LABELS, NAMESPACE, QUEUE, cluster_objects, pod
from webhook.edge.metrics import Metrics
from webhook.queueing.controller import QueueController

GPU = "gpu"


class ApiWriter:
    """The controller's writes, sent through the stand-in API server (and its webhook)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.waiting: dict[str, str] = {}
        self.denied: list[str] = []

    def admit(self, obj: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        current = copy.deepcopy(dict(obj))
        spec = current["spec"]
        spec["schedulingGates"] = [
            g for g in spec.get("schedulingGates", []) if g["name"] != ADMISSION_GATE
        ]
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **node_selector}
        answer = self.cluster.update(current)
        if not answer["allowed"]:
            self.denied.append(answer["status"]["message"])
        self.waiting.pop(current["metadata"]["name"], None)
        return bool(answer["allowed"])

    def wait(self, obj: Obj, message: str) -> bool:
        self.waiting[obj["metadata"]["name"]] = message
        return True


def queueing_cluster(gpus: int = 4, strategy: str = "BestEffortFIFO", **spec: Any) -> Cluster:
    objects = cluster_objects(gpus)
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            obj["spec"].update(whenFull="Queue", queueingStrategy=strategy, **spec)
    objects += [gpu_template(n) for n in (2, 3, 5)]
    return Cluster(objects)


def gpu_template(count: int) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"gpus-{count}", "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def gpus(name: str, count: int, priority: int | None = None, **labels: str) -> dict[str, Any]:
    """A pod asking for `count` GPUs through one template."""
    obj = pod(name, (f"gpus-{count}",) if count > 1 else ("one-gpu",), labels=labels or None)
    if priority is not None:
        obj["spec"]["priority"] = priority
    return obj


def controller(
    cluster: Cluster, metrics: Metrics | None = None
) -> tuple[QueueController, ApiWriter]:
    writer = ApiWriter(cluster)
    queue = QueueController(
        cluster.backend,
        cluster.ledger,
        cluster.settings,
        None,
        writer,
        wall=cluster.clock,
        metrics=metrics,
    )
    return queue, writer


def submit(cluster: Cluster, *pods: dict[str, Any]) -> None:
    for obj in pods:
        answer = cluster.create(obj)
        assert answer["allowed"], answer
        cluster.clock.now += 1  # creation order is queue order


def running(cluster: Cluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.state.list("Pod") if not is_gated(p))


def used(cluster: Cluster) -> int:
    return cluster.usage(QUEUE, FLAVOR, GPU)


def test_a_pod_of_a_queueing_queue_is_created_gated_and_holds_no_quota() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("a", 2))
    created = cluster.pod("a")
    assert is_gated(created)
    assert "nodeSelector" not in created["spec"]
    assert used(cluster) == 0
    assert cluster.ledger.records() == {}


def test_a_pod_that_could_never_fit_is_still_denied_at_submit() -> None:
    cluster = queueing_cluster(gpus=4)
    answer = cluster.create(gpus("huge", 5))
    assert not answer["allowed"]
    assert "request > maximum capacity (5 > 4)" in answer["status"]["message"]


def test_the_controller_admits_what_fits_and_ungates_it_with_its_flavor() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("a", 2), gpus("b", 2), gpus("c", 1))
    queue, writer = controller(cluster)
    done = queue.run_once()
    assert done.admitted == [f"{NAMESPACE}/a", f"{NAMESPACE}/b"]
    assert running(cluster) == ["a", "b"]
    assert cluster.pod("a")["spec"]["nodeSelector"] == FLAVOR_LABELS
    assert used(cluster) == 4
    assert writer.waiting["c"].startswith("waiting for quota: ")
    assert "1 more needed" in writer.waiting["c"]
    assert writer.waiting["c"].endswith(f"position 1 of 1 in ClusterQueue {QUEUE}")


@pytest.mark.parametrize(
    ("strategy", "started"),
    [("BestEffortFIFO", ["big", "small"]), ("StrictFIFO", ["big"])],
)
def test_strict_fifo_blocks_behind_the_head_best_effort_lets_smaller_pods_past(
    strategy: str, started: list[str]
) -> None:
    cluster = queueing_cluster(gpus=4, strategy=strategy)
    submit(cluster, gpus("big", 3), gpus("bigger", 2), gpus("small", 1))
    queue, writer = controller(cluster)
    queue.run_once()
    assert running(cluster) == started
    if strategy == "StrictFIFO":
        assert writer.waiting["small"].startswith("waiting behind pod team-a/bigger (StrictFIFO)")
        assert writer.waiting["small"].endswith("position 2 of 2 in ClusterQueue team-a")


def test_higher_priority_starts_first_then_older_first() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("old", 2, priority=0), gpus("newer", 2, priority=0))
    submit(cluster, gpus("urgent", 2, priority=1000))
    queue, writer = controller(cluster)
    queue.run_once()
    assert running(cluster) == ["urgent"]
    assert writer.waiting["old"].endswith("position 1 of 2 in ClusterQueue team-a")
    assert writer.waiting["newer"].endswith("position 2 of 2 in ClusterQueue team-a")


def test_freed_quota_starts_the_next_in_order() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("first", 2), gpus("second", 2), gpus("third", 2))
    queue, _ = controller(cluster)
    queue.run_once()
    assert running(cluster) == ["first"]
    cluster.state.remove("Pod", NAMESPACE, "first")
    queue.run_once()
    assert running(cluster) == ["second"]
    assert used(cluster) == 2


def group(name: str, members: int, total: int, count: int = 1) -> list[dict[str, Any]]:
    pods = []
    for i in range(members):
        obj = gpus(f"{name}-{i}", count, **{GROUP_LABEL: name})
        obj["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: str(total)}
        pods.append(obj)
    return pods


def test_a_pod_group_waits_until_all_its_pods_exist() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, *group("trio", 2, 3))
    queue, writer = controller(cluster)
    queue.run_once()
    assert running(cluster) == []
    assert writer.waiting["trio-0"] == "waiting for the pods of pod group team-a/trio: 2 of 3 exist"
    submit(cluster, *group("trio", 3, 3)[2:])
    queue.run_once()
    assert running(cluster) == ["trio-0", "trio-1", "trio-2"]
    assert used(cluster) == 3


def lower_quota(cluster: Cluster, gpus: int) -> None:
    """What an admin does with `kubectl edit clusterqueue`: the queue's nominal GPUs."""
    queue = copy.deepcopy(dict(cluster.state.get("ClusterQueue", None, QUEUE) or {}))
    (resource,) = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    resource["nominalQuota"] = gpus
    cluster.state.upsert(queue)


def test_a_pod_group_that_can_never_fit_any_more_starts_no_pod_and_says_so() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, *group("trio", 3, 3))
    lower_quota(cluster, 2)  # before the controller got to it
    queue, writer = controller(cluster)
    queue.run_once()
    assert running(cluster) == []
    assert cluster.ledger.records() == {}
    assert used(cluster) == 0
    # the group's numbers, not those of the one pod that did not fit, nor usage numbers
    assert writer.waiting["trio-2"].startswith(
        f"waiting for quota: pod group {NAMESPACE}/trio can never fit: insufficient quota for "
        f"gpu (DeviceClass gpu.example.com) in flavor {FLAVOR}, request > maximum capacity "
        "(3 > 2) (nominal 2)"
    )


def test_a_pod_group_that_could_never_fit_is_denied_as_its_pods_are_created() -> None:
    cluster = queueing_cluster(gpus=2)
    answer = cluster.create(group("trio", 1, 3)[0])
    assert not answer["allowed"]
    assert answer["status"]["message"] == (
        f"pod {NAMESPACE}/trio-0: pod group {NAMESPACE}/trio of 3 pods exceeds quota of "
        f'ClusterQueue "{QUEUE}" (LocalQueue {NAMESPACE}/default): insufficient quota for gpu '
        f"(DeviceClass gpu.example.com) in flavor {FLAVOR}, 3 pods x 1 = 3 > maximum capacity 2 "
        "(nominal 2)"
    )
    assert cluster.state.list("Pod") == []


def test_a_pod_group_waits_for_the_quota_of_all_its_pods() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("single", 2), *group("trio", 3, 3))
    queue, writer = controller(cluster)
    queue.run_once()
    assert running(cluster) == ["single"]
    assert writer.waiting["trio-0"].startswith(
        "waiting for quota: insufficient unused quota for gpu (DeviceClass gpu.example.com) in "
        f"flavor {FLAVOR}, 1 more needed (requested 3, in use 2 of nominal 4); position 1 of 1"
    )


def test_a_queued_admission_borrows_from_the_cohort() -> None:
    objects = cluster_objects(2)
    lender = copy.deepcopy(next(o for o in objects if o["kind"] == "ClusterQueue"))
    lender["metadata"]["name"] = "lender"
    lender["spec"]["cohort"] = "research"
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            obj["spec"].update(whenFull="Queue", cohort="research")
    cluster = Cluster([*objects, lender, gpu_template(3)])
    submit(cluster, gpus("wide", 3))
    queue, _ = controller(cluster)
    queue.run_once()
    assert running(cluster) == ["wide"]
    assert used(cluster) == 3


def test_a_rejecting_queue_is_untouched_by_the_controller() -> None:
    cluster = Cluster([*cluster_objects(2), gpu_template(2)])
    submit(cluster, gpus("a", 1))
    assert not is_gated(cluster.pod("a"))
    denied = cluster.create(gpus("b", 2))
    assert not denied["allowed"]
    assert "1 more needed" in denied["status"]["message"]
    queue, writer = controller(cluster)
    assert queue.run_once().admitted == []
    assert writer.waiting == {}


def test_a_crash_between_record_and_ungating_is_admitted_again_without_a_second_charge() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("a", 2))
    queue, writer = controller(cluster)
    writer.admit = lambda *_: False  # type: ignore[method-assign]  # the update never lands
    queue.run_once()
    assert running(cluster) == [] and used(cluster) == 2  # recorded, still gated
    queue, _ = controller(cluster)  # the next leader
    queue.run_once()
    assert running(cluster) == ["a"]
    assert used(cluster) == 2


def test_metrics_count_waiting_workloads_and_the_time_admitted_ones_waited() -> None:
    cluster = queueing_cluster(gpus=2)
    metrics = Metrics()
    metrics.watch(cluster.backend, cluster.ledger, cluster.settings)
    submit(cluster, gpus("first", 2), gpus("second", 2))
    cluster.clock.now += 90
    queue, _ = controller(cluster, metrics)
    queue.run_once()
    text = metrics.render().decode()
    assert f'draquota_pending_workloads{{cluster_queue="{QUEUE}"}} 1.0' in text
    assert f'draquota_queue_wait_seconds_count{{cluster_queue="{QUEUE}"}} 1.0' in text
    assert f'draquota_queue_wait_seconds_bucket{{cluster_queue="{QUEUE}",le="60.0"}} 0.0' in text
    assert f'draquota_queue_wait_seconds_bucket{{cluster_queue="{QUEUE}",le="300.0"}} 1.0' in text


def gpu_job(name: str, count: int, parallelism: int = 1) -> dict[str, Any]:
    """A Job whose `parallelism` pods ask for `count` GPUs each."""
    template = gpus("unused", count)
    del template["metadata"]["name"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }  # fmt: skip


def submit_jobs(cluster: Cluster, *jobs: dict[str, Any]) -> None:
    for job in jobs:
        answer = cluster.create_job(job)
        assert answer["allowed"], answer
        cluster.clock.now += 1


def job_state(cluster: Cluster, name: str) -> dict[str, Any]:
    job = cluster.state.get("Job", NAMESPACE, name)
    assert job is not None
    return dict(job)


def started(cluster: Cluster) -> list[str]:
    jobs = cluster.state.list("Job", NAMESPACE)
    return sorted(j["metadata"]["name"] for j in jobs if not j["spec"].get("suspend"))


class JobWriter(ApiWriter):
    """Starts a Job as the API server and the Job controller would: the update, then its pods."""

    def start(self, job: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        current = copy.deepcopy(dict(job))
        current["spec"]["suspend"] = False
        pod_spec = current["spec"]["template"]["spec"]
        pod_spec["nodeSelector"] = {**pod_spec.get("nodeSelector", {}), **node_selector}
        answer = self.cluster.update_job(current)
        if not answer["allowed"]:
            self.denied.append(answer["status"]["message"])
        return bool(answer["allowed"])


def job_controller(cluster: Cluster) -> tuple[QueueController, JobWriter]:
    writer = JobWriter(cluster)
    queue = QueueController(
        cluster.backend, cluster.ledger, cluster.settings, None, writer, wall=cluster.clock
    )
    return queue, writer


def test_a_job_of_a_queueing_queue_is_created_suspended_and_holds_nothing() -> None:
    cluster = queueing_cluster(gpus=4)
    submit_jobs(cluster, gpu_job("train", 2))
    assert job_state(cluster, "train")["spec"]["suspend"] is True
    assert cluster.state.list("Pod") == [] and used(cluster) == 0


def test_six_two_gpu_jobs_two_start_whole_four_wait_suspended_then_the_next_in_order() -> None:
    cluster = queueing_cluster(gpus=4)
    submit_jobs(cluster, *(gpu_job(f"job-{i}", 2) for i in range(6)))
    queue, writer = job_controller(cluster)
    queue.run_once()
    assert started(cluster) == ["job-0", "job-1"]
    assert writer.denied == []
    pods = cluster.state.list("Pod")
    assert sorted(p["metadata"]["name"] for p in pods) == ["job-0-0", "job-1-0"]
    assert all(p["spec"]["nodeSelector"] == FLAVOR_LABELS and not is_gated(p) for p in pods)
    assert used(cluster) == 4  # the Jobs' records; their pods are not charged again
    assert writer.waiting["job-2"].startswith("waiting for quota: ")
    assert writer.waiting["job-5"].endswith(f"position 4 of 4 in ClusterQueue {QUEUE}")
    cluster.state.remove("Job", NAMESPACE, "job-0")  # deleted: its pods go with it
    cluster.state.remove("Pod", NAMESPACE, "job-0-0")
    queue.run_once()
    assert started(cluster) == ["job-1", "job-2"]
    assert used(cluster) == 4


def test_a_job_is_admitted_whole_for_the_pods_it_runs_at_once() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("single", 2))
    submit_jobs(cluster, gpu_job("pair", 1, parallelism=3))
    queue, writer = job_controller(cluster)
    queue.run_once()
    assert running(cluster) == ["single"] and started(cluster) == []
    assert "1 more needed (requested 3, in use 2 of nominal 4)" in writer.waiting["pair"]
    cluster.state.remove("Pod", NAMESPACE, "single")
    queue.run_once()
    assert started(cluster) == ["pair"]
    assert running(cluster) == ["pair-0", "pair-1", "pair-2"]
    assert used(cluster) == 3


def test_a_job_that_could_never_fit_is_denied_at_submit() -> None:
    cluster = queueing_cluster(gpus=4)
    answer = cluster.create_job(gpu_job("wide", 2, parallelism=3))
    assert not answer["allowed"]
    assert "3 pods x 2 = 6 > maximum capacity 4" in answer["status"]["message"]


def test_a_finished_job_releases_its_charge() -> None:
    cluster = queueing_cluster(gpus=2)
    submit_jobs(cluster, gpu_job("first", 2), gpu_job("second", 2))
    queue, _ = job_controller(cluster)
    queue.run_once()
    finished = job_state(cluster, "first")
    finished["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    cluster.state.upsert(finished)
    pod = cluster.pod("first-0")
    pod["status"] = {"phase": "Succeeded"}
    cluster.state.upsert(pod)
    queue.run_once()
    assert started(cluster) == ["first", "second"]
    assert used(cluster) == 2


def test_a_jobs_priority_is_its_templates_priority_class() -> None:
    cluster = queueing_cluster(gpus=2)
    cluster.state.upsert({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": "urgent"}, "value": 1000})  # fmt: skip
    cluster.state.upsert({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": "usual"}, "value": 10,
                          "globalDefault": True})  # fmt: skip
    low = gpu_job("older", 2)
    high = gpu_job("urgent", 2)
    high["spec"]["template"]["spec"]["priorityClassName"] = "urgent"
    submit_jobs(cluster, low, high)
    submit(cluster, gpus("pod", 2, priority=100))  # above the default 10, below urgent
    queue, writer = job_controller(cluster)
    queue.run_once()
    assert started(cluster) == ["urgent"]
    assert writer.waiting["pod"].endswith("position 1 of 2 in ClusterQueue team-a")
    assert writer.waiting["older"].endswith("position 2 of 2 in ClusterQueue team-a")


def test_a_group_ungated_in_part_is_finished_by_the_next_pass() -> None:
    cluster = queueing_cluster(gpus=3)
    submit(cluster, *group("trio", 3, 3))
    queue, writer = controller(cluster)
    ungate = writer.admit
    writer.admit = lambda pod, *rest: pod["metadata"]["name"] != "trio-2" and ungate(pod, *rest)  # type: ignore[method-assign]
    queue.run_once()
    assert running(cluster) == ["trio-0", "trio-1"]  # the last update did not land
    writer.admit = ungate  # type: ignore[method-assign]
    queue.run_once()
    assert running(cluster) == ["trio-0", "trio-1", "trio-2"]
    assert used(cluster) == 3
