"""Answers at admission a user sees, through the stand-in API server (tests/security/cluster.py):
a Job of a rejecting queue that cannot start now, mistyped names, Kueue's queue label."""

from __future__ import annotations

import copy
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.hints import KUEUE_QUEUE_LABEL
from tests.security.cluster import Cluster
from tests.webhook.builders import GPU_CLASS, NAMESPACE, QUEUE, cluster_objects, pod, review
from tests.webhook.test_queueing import gpu_job, gpu_template, gpus

KUEUE_WARNING = "kueue.x-k8s.io/queue-name is not read by draquota; use draquota.io/queue-name"


def _rejecting(gpus_in_quota: int = 4) -> Cluster:
    return Cluster([*cluster_objects(gpus_in_quota), gpu_template(2)])


def test_a_job_whose_pods_cannot_start_now_is_denied_at_create() -> None:
    cluster = _rejecting()
    assert cluster.create(gpus("running", 2))["allowed"]
    denied = cluster.create_job(gpu_job("sweep", 1, parallelism=3))
    assert not denied["allowed"]
    assert denied["status"]["code"] == 403 and denied["status"]["reason"] == "QuotaExceeded"
    assert denied["status"]["message"] == (
        f'job {NAMESPACE}/sweep exceeds quota of ClusterQueue "{QUEUE}" (LocalQueue '
        f"{NAMESPACE}/default): insufficient unused quota for gpu (DeviceClass {GPU_CLASS}) in "
        "flavor a100, 1 more needed (requested 3, in use 2 of nominal 4)"
    )
    assert cluster.state.get("Job", NAMESPACE, "sweep") is None
    # the pods it runs at once fit: created, and its pods are admitted one by one
    assert cluster.create_job(gpu_job("pair", 1, parallelism=2))["allowed"]
    pair = cluster.state.get("Job", NAMESPACE, "pair")
    assert pair is not None
    assert all(answer["allowed"] for answer in cluster.run_job(dict(pair)))


def test_a_suspended_job_is_not_checked_against_what_is_free_now() -> None:
    cluster = _rejecting()
    assert cluster.create(gpus("running", 2))["allowed"]
    job = gpu_job("later", 1, parallelism=4)
    job["spec"]["suspend"] = True
    assert cluster.create_job(job)["allowed"]


def test_a_mistyped_local_queue_gets_a_did_you_mean() -> None:
    cluster = _rejecting()
    denied = cluster.create(gpus("typo", 1, **{QUEUE_LABEL: "defualt"}))
    assert not denied["allowed"]
    assert denied["status"]["message"].endswith(
        f"LocalQueue {NAMESPACE}/defualt not found (label {QUEUE_LABEL}): did you mean default? "
        f"(LocalQueues in {NAMESPACE}: default, user-queue)"
    )


def test_a_mistyped_device_class_gets_a_did_you_mean() -> None:
    objects = cluster_objects(4)
    template = copy.deepcopy(next(o for o in objects if o["kind"] == "ResourceClaimTemplate"))
    template["metadata"]["name"] = "typo"
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        "gpu.exmaple.com"
    )
    cluster = Cluster([*objects, template])
    denied = cluster.create(pod("typo", ("typo",)))
    assert not denied["allowed"] and denied["status"]["reason"] == "UnmappedDeviceClass"
    assert denied["status"]["message"].endswith(
        "device class gpu.exmaple.com not mapped to any resource of ClusterQueue "
        f'"{QUEUE}" (LocalQueue {NAMESPACE}/default): did you mean {GPU_CLASS}? (the '
        f"ClusterQueue maps {GPU_CLASS})"
    )


def _kueue_labelled(name: str, **labels: str) -> dict[str, Any]:
    return gpus(name, 1, **{KUEUE_QUEUE_LABEL: "default", **labels})


def _mutated(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """The /mutate answer: it stamps draquota's queue label, so it is the one that warns."""
    return cluster.call("mutate", review(obj))


def test_kueues_queue_label_is_named_as_not_read() -> None:
    cluster = _rejecting()
    answer = _mutated(cluster, _kueue_labelled("kueue-only"))
    assert answer["allowed"] and KUEUE_WARNING in answer["warnings"]
    answer = _mutated(cluster, _kueue_labelled("both", **{QUEUE_LABEL: "default"}))
    assert answer["allowed"] and KUEUE_WARNING not in answer.get("warnings", [])
    # in a namespace without a default LocalQueue the pod is not managed: still said
    unmanaged = _kueue_labelled("elsewhere")
    unmanaged["metadata"]["namespace"] = "sandbox"
    answer = _mutated(cluster, unmanaged)
    assert answer["allowed"] and KUEUE_WARNING in answer["warnings"]
