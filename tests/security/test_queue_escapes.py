"""Escapes from queue mode a namespace user found (issue 29): a queued Job running more than
its record, a waiting pod charged by a template it no longer uses, a waiting pod jumping
the queue through the re-check path. After each, what runs (pods not gated, still holding
quota by Kubernetes' rule) is at most the queue's quota, and the usage equals it."""

from __future__ import annotations

import copy
from typing import Any

from quota.livepods import is_gated, is_live_pod
from tests.security.cluster import JOB_CONTROLLER, Cluster
from tests.webhook.builders import pod, review
from tests.webhook.queueing.test_controller import (
    controller,
    gpu_job,
    gpu_template,
    gpus,
    job_controller,
    job_state,
    queueing_cluster,
    submit,
    submit_jobs,
    used,
)

DAY = 86_400


def _gpus_of(cluster: Cluster, obj: dict[str, Any]) -> int:
    """What a pod is allocated: its generated claims where they exist, else its templates."""
    generated = {
        s["name"]: s["resourceClaimName"]
        for s in (obj.get("status") or {}).get("resourceClaimStatuses", [])
    }
    total = 0
    for entry in obj["spec"].get("resourceClaims", []):
        if entry["name"] in generated:
            source = cluster.state.get("ResourceClaim", "team-a", generated[entry["name"]])
            spec = (source or {})["spec"]
        else:
            template = entry.get("resourceClaimTemplateName")
            source = cluster.state.get("ResourceClaimTemplate", "team-a", template)
            spec = (source or {})["spec"]["spec"]
        total += sum(r["exactly"].get("count", 1) for r in spec["devices"]["requests"])
    return total


def allocated(cluster: Cluster) -> int:
    """GPUs of the pods that run or may be scheduled: not gated, still holding by ResourceQuota's
    rule (a terminating pod holds its devices until its grace ends)."""
    return sum(
        _gpus_of(cluster, p)
        for p in cluster.state.list("Pod")
        if not is_gated(p) and is_live_pod(p, cluster.clock())
    )


def _running_job(gpus_each: int, quota: int) -> tuple[Cluster, dict[str, Any]]:
    cluster = queueing_cluster(gpus=quota)
    submit_jobs(cluster, gpu_job("train", gpus_each, parallelism=1))
    queue, _ = job_controller(cluster)
    queue.run_once()
    assert used(cluster) == gpus_each and allocated(cluster) == gpus_each
    return cluster, job_state(cluster, "train")


def _replacement(cluster: Cluster, job: dict[str, Any], name: str) -> dict[str, Any]:
    """The Job controller replaces a pod that is terminating (its default
    podReplacementPolicy): a new pod of the Job's template, made by the controller."""
    template = copy.deepcopy(job["spec"]["template"])
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
             "uid": job["metadata"]["uid"], "controller": True}  # fmt: skip
    replacement = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                   "metadata": {**template.get("metadata", {}), "name": name,
                                "namespace": "team-a", "ownerReferences": [owner]}}  # fmt: skip
    answer = cluster.create(replacement, user=JOB_CONTROLLER)
    cluster.clock.now += 1
    return answer


def test_replacements_beside_terminating_pods_do_not_run_on_the_jobs_record() -> None:
    cluster, job = _running_job(gpus_each=2, quota=2)
    queue, _ = controller(cluster)
    for i in range(3):  # delete with a day's grace, --wait=false; the controller replaces it
        name = "train-0" if i == 0 else f"train-r{i}"
        cluster.delete(name, grace=DAY)
        answer = _replacement(cluster, job, f"train-r{i + 1}")
        assert answer["allowed"]
        assert is_gated(answer["object"])  # beyond the record: it waits as a pod of its own
        queue.run_once()
        assert allocated(cluster) <= 2 and used(cluster) == allocated(cluster)


def test_a_replacement_runs_under_the_record_once_the_terminating_pod_is_gone() -> None:
    cluster, job = _running_job(gpus_each=2, quota=2)
    cluster.delete("train-0", grace=30)
    assert is_gated(_replacement(cluster, job, "train-r1")["object"])
    queue, _ = controller(cluster)
    queue.run_once()
    assert is_gated(cluster.pod("train-r1"))
    cluster.clock.now += 120  # train-0's grace ended: its slot is free
    queue.run_once()
    assert not is_gated(cluster.pod("train-r1"))
    assert cluster.ledger.record(cluster.pod("train-r1")["metadata"]["uid"]) is None
    assert used(cluster) == allocated(cluster) == 2


def test_a_pod_of_a_template_made_larger_is_not_covered_by_the_jobs_record() -> None:
    cluster, job = _running_job(gpus_each=2, quota=4)
    larger = gpu_template(4)
    larger["metadata"]["name"] = "gpus-2"  # the same name, four GPUs now
    cluster.state.upsert(larger)
    cluster.state.remove("Pod", "team-a", "train-0")  # deleted at once (grace 0)
    answer = _replacement(cluster, job, "train-r1")
    assert answer["allowed"] and is_gated(answer["object"])
    controller(cluster)[0].run_once()  # 4 more do not fit beside the record's 2
    assert is_gated(cluster.pod("train-r1"))
    assert used(cluster) == 2 and allocated(cluster) == 0


def test_a_pod_released_from_its_job_must_fit_on_its_own() -> None:
    cluster, _ = _running_job(gpus_each=2, quota=2)
    orphan = cluster.pod("train-0")
    orphan["metadata"]["ownerReferences"] = []
    answer = cluster.update(orphan, user=JOB_CONTROLLER)
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "QuotaExceeded"
    assert cluster.pod("train-0")["metadata"]["ownerReferences"]


def test_a_pod_released_from_its_job_is_charged_on_its_own_when_it_fits() -> None:
    cluster, job = _running_job(gpus_each=2, quota=4)
    orphan = cluster.pod("train-0")
    orphan["metadata"]["ownerReferences"] = []
    assert cluster.update(orphan, user=JOB_CONTROLLER)["allowed"]
    assert used(cluster) == 4  # the record's 2, and the pod's own 2
    answer = _replacement(cluster, job, "train-r1")  # the record's slot is free again
    assert answer["allowed"] and not is_gated(answer["object"])
    assert used(cluster) == allocated(cluster) == 4


def test_a_job_is_started_only_as_the_version_decided(monkeypatch: Any) -> None:
    cluster = queueing_cluster(gpus=2)
    submit_jobs(cluster, gpu_job("train", 2, parallelism=1))
    queue, writer = job_controller(cluster)
    grown = copy.deepcopy(job_state(cluster, "train"))
    grown["spec"]["parallelism"] = grown["spec"]["completions"] = 4  # while it is decided

    def start(job: dict[str, Any], node_selector: dict[str, str], message: str) -> bool:
        cluster.update(grown)  # the user's write lands first; the decided version is gone
        return False  # KubePodWriter does not start a changed Job (tests/webhook/kube)

    monkeypatch.setattr(writer, "start", start)
    queue.run_once()
    assert cluster.ledger.record(grown["metadata"]["uid"]) is None  # decided again next pass
    assert job_state(cluster, "train")["spec"]["suspend"] is True
    assert used(cluster) == 0


def _generated(cluster: Cluster, name: str, count: int) -> None:
    """The resourceclaim controller generated the gated pod's claim from its template."""
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": f"{name}-gpu-x1", "namespace": "team-a"},
             "spec": gpu_template(count)["spec"]["spec"]}  # fmt: skip
    cluster.state.upsert(claim)
    waiting = cluster.pod(name)
    entry = waiting["spec"]["resourceClaims"][0]["name"]
    waiting["status"]["resourceClaimStatuses"] = [
        {"name": entry, "resourceClaimName": claim["metadata"]["name"]}
    ]
    cluster.state.upsert(waiting)


def test_a_waiting_pod_is_charged_by_the_claim_generated_for_it() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("holder", 2))
    queue, _ = controller(cluster)
    queue.run_once()
    submit(cluster, gpus("big", 3))
    _generated(cluster, "big", 3)
    smaller = gpu_template(2)
    smaller["metadata"]["name"] = "gpus-3"  # the template replaced: 2 GPUs now
    cluster.state.upsert(smaller)
    queue.run_once()
    assert is_gated(cluster.pod("big"))  # its claim asks for 3; only 2 are free
    assert used(cluster) == allocated(cluster) == 2


def test_a_waiting_pod_gets_no_record_from_a_resize() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("head", 2), gpus("jumper", 1))
    queue, _ = controller(cluster)
    queue.run_once()
    jumper = cluster.pod("jumper")
    resized = copy.deepcopy(jumper)
    resized["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    answer = cluster.call("validate", review(resized, "UPDATE", old=jumper, sub_resource="resize"))
    assert answer["allowed"]
    assert cluster.ledger.record(jumper["metadata"]["uid"]) is None
    ungated = copy.deepcopy(jumper)
    ungated["spec"]["schedulingGates"] = []
    assert cluster.update(ungated)["status"]["reason"] == "WaitingForQuota"


def test_a_waiting_pod_gets_no_record_when_its_named_claim_is_created_again() -> None:
    cluster = queueing_cluster(gpus=2)
    submit(cluster, gpus("head", 2))
    named = pod("jumper", ())
    named["spec"]["resourceClaims"] = [{"name": "c0", "resourceClaimName": "mine"}]
    named["spec"]["containers"][0]["resources"] = {"claims": [{"name": "c0"}]}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "mine", "namespace": "team-a"},
             "spec": gpu_template(1)["spec"]["spec"]}  # fmt: skip
    cluster.state.upsert(claim)
    submit(cluster, named)
    queue, _ = controller(cluster)
    queue.run_once()
    cluster.state.remove("ResourceClaim", "team-a", "mine")
    answer = cluster.call(
        "validate", review(claim, kind="ResourceClaim", resource="resourceclaims",
                           group="resource.k8s.io")
    )  # fmt: skip
    assert answer["allowed"]
    assert cluster.ledger.record(cluster.pod("jumper")["metadata"]["uid"]) is None
    assert is_gated(cluster.pod("jumper")) and used(cluster) == 2
