"""Answers at admission a user sees, through the stand-in API server (tests/security/cluster.py):
a Job of a rejecting queue that cannot start now, mistyped names, Kueue's queue label."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from quota.charge import QUEUE_LABEL
from quota.hints import KUEUE_QUEUE_LABEL
from quota.settings import Settings
from quota.verdict import Decision
from tests.security.cluster import Cluster
from tests.webhook.builders import (
    GPU_CLASS,
    NAMESPACE,
    QUEUE,
    FakeBackend,
    cluster_objects,
    cluster_state,
    pod,
    review,
)
from tests.webhook.queueing.test_controller import gpu_job, gpu_template, gpus
from webhook.admission.admit import Admission
from webhook.edge.review import Outcome, parse_review
from webhook.ledger.memory import MemoryLedger

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


# --- claims and templates the informers do not have yet: fetched, then decided again -------


def _template(name: str) -> dict[str, Any]:
    return {**gpu_template(1), "metadata": {"name": name, "namespace": NAMESPACE}}


def _admission(*fetchable: dict[str, Any]) -> tuple[Admission, FakeBackend]:
    """The Admission use case without HTTP, over a backend that answers GETs of `fetchable`."""
    state = cluster_state(4)
    backend = FakeBackend(state, fetchable=list(fetchable))
    settings = Settings(placement="Off")
    return Admission(backend, MemoryLedger(state, settings), settings), backend


def _mutate(admission: Admission, obj: dict[str, Any]) -> tuple[Outcome, Decision | None]:
    return admission.review(parse_review(orjson.dumps(review(obj))), mutating=True)


def test_every_claim_template_missing_from_the_cache_is_fetched_and_decided_again() -> None:
    admission, backend = _admission(_template("late-b"), _template("late-a"), _template("other"))
    outcome, decision = _mutate(admission, pod("p", templates=("one-gpu", "late-b", "late-a")))
    assert outcome.allowed and decision is not None and decision.missing == ()
    # exactly what the first decision missed, one GET each: not the cached one, nor "other"
    assert backend.fetched == [
        ("ResourceClaimTemplate", NAMESPACE, "late-a"),
        ("ResourceClaimTemplate", NAMESPACE, "late-b"),
    ]


def test_a_claim_template_still_missing_after_the_fetch_is_denied_naming_it() -> None:
    admission, backend = _admission(_template("late-a"))
    outcome, decision = _mutate(admission, pod("p", templates=("late-a", "ghost")))
    assert not outcome.allowed and outcome.reason == "ClaimNotFound"
    assert f"ResourceClaimTemplate {NAMESPACE}/ghost not found" in outcome.message
    assert decision is not None
    assert decision.missing == (("ResourceClaimTemplate", NAMESPACE, "ghost"),)
    assert backend.fetched == [  # decided again once: no second round of GETs
        ("ResourceClaimTemplate", NAMESPACE, "ghost"),
        ("ResourceClaimTemplate", NAMESPACE, "late-a"),
    ]


def test_a_denial_for_anything_but_a_missing_claim_fetches_nothing() -> None:
    admission, backend = _admission(_template("late"))
    over, _ = _mutate(admission, pod("p", templates=("one-gpu",) * 5))
    mistyped, _ = _mutate(admission, pod("q", labels={QUEUE_LABEL: "defualt"}))
    assert (over.reason, mistyped.reason) == ("QuotaExceeded", "LocalQueueNotFound")
    assert backend.fetched == []
