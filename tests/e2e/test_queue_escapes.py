"""Queue mode against a namespace user on the real control plane (issue 29, items 1 to 3).

The user is a ServiceAccount with the built-in `admin` role of its namespace and its own
token. What counts is what the scheduler allocated: the devices in the allocations of the
namespace's ResourceClaims. At every sample it stays within the queue's quota, and once
things settle draquota's usage metric equals it on every replica.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import GPU_CLASS, Flavor, Scenario, gpu_job, gpu_pod, scenario

pytestmark = pytest.mark.e2e

GATE = {"name": "draquota.io/admission"}


def _as(s: Scenario, user: Path, *args: str, stdin: str | None = None) -> tuple[bool, str]:
    out = s.cluster.kubectl(*args, "-n", s.namespace, kubeconfig=user, check=False, stdin=stdin)
    return out.returncode == 0, out.stderr


def _create(s: Scenario, user: Path, obj: dict[str, Any]) -> tuple[bool, str]:
    return _as(s, user, "create", "-f", "-", stdin=yaml.safe_dump(obj))


def allocated(s: Scenario) -> int:
    """Devices the scheduler allocated to the namespace's claims."""
    out = s.cluster.kubectl("get", "resourceclaims", "-n", s.namespace, "-o", "json").stdout
    return sum(
        len(((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []))
        for c in json.loads(out)["items"]
    )


def _template(name: str, count: int) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
    spec = {"spec": {"devices": {"requests": [request]}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _within(s: Scenario, quota: int, seconds: float) -> None:
    """Sample what is allocated for a while: never above the quota."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert allocated(s) <= quota
        time.sleep(0.5)


def _settled(s: Scenario, flavor: str) -> None:
    eventually(lambda: s.usage(flavor) == [float(allocated(s))] * 3, timeout=30)


@pytest.fixture
def two(draquota_cluster: Draquota) -> Scenario:
    name = f"e2e-esc-{int(time.time() * 1000) % 100_000}"
    return scenario(draquota_cluster, name, Flavor("f", 2, {f"{name}-1": 8})).queueing()


def _job_pods(s: Scenario) -> list[dict[str, Any]]:
    return [p for p in s.pods("job-name=train") if not p["metadata"].get("deletionTimestamp")]


def test_a_job_whose_pods_are_deleted_with_a_long_grace_runs_no_more_than_its_record(
    two: Scenario,
) -> None:
    user = two.user("mallory")
    job = gpu_job("train", gpus=2)
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 86_400
    job["spec"]["backoffLimit"] = 10  # a deleted pod counts as failed: it is replaced
    assert _create(two, user, job)[0]
    eventually(lambda: allocated(two) == 2, timeout=90)
    for _ in range(2):  # delete the running pod without waiting; the Job controller replaces it
        (current,) = _job_pods(two)
        assert _as(two, user, "delete", "pod", current["metadata"]["name"], "--wait=false")[0]
        eventually(lambda: _job_pods(two), timeout=90)  # after the Job's back-off: 10 s, 20 s
        _within(two, 2, seconds=4)
        assert all(GATE in p["spec"]["schedulingGates"] for p in _job_pods(two))
    _settled(two, "f")


def test_a_job_pod_whose_labels_are_changed_keeps_its_job(two: Scenario) -> None:
    user = two.user("mallory")
    assert _create(two, user, gpu_job("train", gpus=2))[0]
    eventually(lambda: allocated(two) == 2, timeout=90)
    (pod,) = _job_pods(two)
    name = pod["metadata"]["name"]
    # the Job controller releases a pod whose labels stop matching its selector: draquota
    # denies that release, as the pod would then be charged on its own beyond the quota
    assert _as(two, user, "label", "pod", name, "batch.kubernetes.io/controller-uid-",
               "controller-uid-", "job-name-", "batch.kubernetes.io/job-name-")[0]  # fmt: skip
    _within(two, 2, seconds=8)
    assert two.get("pod", name)["metadata"].get("ownerReferences")
    _settled(two, "f")


def test_a_waiting_pod_is_charged_by_its_generated_claim_not_its_new_template(
    draquota_cluster: Draquota,
) -> None:
    name = f"e2e-gen-{int(time.time() * 1000) % 100_000}"
    s = scenario(draquota_cluster, name, Flavor("f", 4, {f"{name}-1": 8})).queueing()
    user = s.user("mallory")
    assert _create(s, user, gpu_pod("holder", 2))[0]
    eventually(lambda: allocated(s) == 2, timeout=90)
    assert _create(s, user, _template("big", 4))[0]
    waiter = gpu_pod("waiter")
    waiter["spec"]["resourceClaims"] = [{"name": "gpu-0", "resourceClaimTemplateName": "big"}]
    assert _create(s, user, waiter)[0]
    eventually(lambda: s.get("pod", "waiter").get("status", {}).get("resourceClaimStatuses"))
    assert _as(s, user, "delete", "resourceclaimtemplate", "big")[0]
    assert _create(s, user, _template("big", 1))[0]  # 1 would fit beside the holder's 2
    _within(s, 4, seconds=8)
    assert GATE in s.get("pod", "waiter")["spec"]["schedulingGates"]
    assert _as(s, user, "delete", "pod", "holder", "--grace-period=0", "--force")[0]
    eventually(lambda: allocated(s) == 4, timeout=90)  # the waiter runs with its 4 GPUs
    _settled(s, "f")


def test_recreating_a_waiting_pods_named_claim_does_not_let_it_jump_the_queue(
    draquota_cluster: Draquota,
) -> None:
    name = f"e2e-jump-{int(time.time() * 1000) % 100_000}"
    s = scenario(draquota_cluster, name, Flavor("f", 2, {f"{name}-1": 8})).queueing("StrictFIFO")
    user = s.user("mallory")
    assert _create(s, user, gpu_pod("holder", 2))[0]
    eventually(lambda: allocated(s) == 2, timeout=90)
    assert _create(s, user, gpu_pod("head", 2))[0]
    time.sleep(1.1)  # creation timestamps have whole seconds
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "mine"}, "spec": _template("x", 1)["spec"]["spec"]}  # fmt: skip
    assert _create(s, user, claim)[0]
    jumper = gpu_pod("jumper")
    jumper["spec"]["resourceClaims"] = [{"name": "gpu-0", "resourceClaimName": "mine"}]
    assert _create(s, user, jumper)[0]
    assert _as(s, user, "delete", "resourceclaim", "mine")[0]
    assert _create(s, user, claim)[0]
    ungate = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
    done, why = _as(s, user, "patch", "pod", "jumper", "--type=json", "-p", ungate)
    assert not done and "still waiting for quota" in why, why
    _within(s, 2, seconds=4)
    _settled(s, "f")
