"""Jobs and Deployments on a real control plane: their controllers create the pods (with
generateName), the scheduler places them, and draquota charges each pod as it is created."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import (
    Flavor,
    Scenario,
    gpu_deployment,
    gpu_job,
    gpu_pod,
    scenario,
)

pytestmark = pytest.mark.e2e


def _apply(s: Scenario, obj: dict) -> None:
    s.cluster.apply(yaml.safe_dump(obj), "-n", s.namespace)


def _charged(pod: dict) -> bool:
    return "draquota.io/charge" in pod["metadata"].get("annotations", {})


@pytest.fixture(scope="module")
def jobs(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-jobs", Flavor("main", 4, {"e2e-jobs-1": 8}))


@pytest.fixture(scope="module")
def deployments(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-deploy", Flavor("main", 3, {"e2e-deploy-1": 8}))


def test_job_pods_with_generated_names_are_admitted_charged_and_scheduled(jobs: Scenario) -> None:
    _apply(jobs, gpu_job("sweep", 3))
    pods = eventually(lambda: (p := jobs.pods("job-name=sweep")) and len(p) == 3 and p, timeout=60)
    assert all(p["metadata"]["name"].startswith("sweep-") for p in pods)
    assert all(_charged(p) for p in pods)
    # the flavor's nodeLabels became a nodeSelector, and the scheduler honoured it
    eventually(
        lambda: all(p["spec"].get("nodeName") == "e2e-jobs-1" for p in jobs.pods("job-name=sweep")),
        timeout=60,
    )
    eventually(lambda: jobs.usage("main") == [3.0] * len(jobs.installed.replicas), timeout=30)


def test_job_that_can_never_fit_is_denied_at_submit(jobs: Scenario) -> None:
    job = gpu_job("too-wide", 5)
    applied = jobs.cluster.kubectl(
        "apply", "-n", jobs.namespace, "-f", "-", stdin=yaml.safe_dump(job), check=False
    )
    assert applied.returncode != 0
    assert applied.stderr.startswith("Error from server (QuotaExceeded)"), applied.stderr
    assert (
        '.draquota.io" denied the request: job e2e-jobs/too-wide exceeds quota of ClusterQueue '
        '"e2e-jobs" (LocalQueue e2e-jobs/default): insufficient quota for gpus '
        "(DeviceClass gpu.example.com) in flavor e2e-jobs-main, 5 pods x 1 = 5 > maximum "
        "capacity 4 (nominal 4)"
    ) in applied.stderr


def test_deployment_scaled_past_quota_gets_only_the_pods_that_fit(deployments: Scenario) -> None:
    _apply(deployments, gpu_deployment("web", 2))
    eventually(lambda: len(deployments.pods("app=web")) == 2, timeout=60)
    deployments.cluster.kubectl("scale", "deployment/web", "--replicas=5", "-n", "e2e-deploy")
    # the ReplicaSet controller keeps trying; draquota denies every pod past the quota of 3
    eventually(lambda: deployments.events("FailedCreate"), timeout=60)
    time.sleep(3)
    pods = deployments.pods("app=web")
    assert len(pods) == 3
    assert all(_charged(p) for p in pods)
    assert any(
        'exceeds quota of ClusterQueue "e2e-deploy"' in m
        for m in deployments.events("FailedCreate")
    )


def test_denial_of_a_generated_pod_names_its_owner(deployments: Scenario) -> None:
    messages = eventually(lambda: deployments.events("FailedCreate"), timeout=60)
    replicaset = json.loads(
        deployments.cluster.kubectl(
            "get", "rs", "-n", "e2e-deploy", "-l", "app=web", "-o", "json"
        ).stdout
    )["items"][0]["metadata"]["name"]
    denial = next(m for m in messages if "exceeds quota" in m)
    assert f"ReplicaSet e2e-deploy/{replicaset}" in denial and "generated" in denial, denial


@pytest.fixture
def freeing(draquota_cluster: Draquota) -> Scenario:
    name = f"e2e-free-{int(time.time() * 1000) % 100000}"
    return scenario(draquota_cluster, name, Flavor("main", 2, {f"{name}-1": 4}))


def _create(s: Scenario, name: str) -> tuple[bool, str]:
    out = s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump(gpu_pod(name)), check=False
    )
    return out.returncode == 0, out.stderr


def _force_delete(s: Scenario, name: str) -> None:
    # without a kubelet a bound pod deleted gracefully stays Terminating (and charged) forever
    s.cluster.kubectl("delete", "pod", name, "-n", s.namespace, "--grace-period=0", "--force")


def test_deleting_a_pod_frees_its_quota(freeing: Scenario) -> None:
    assert _create(freeing, "a")[0] and _create(freeing, "b")[0]
    admitted, why = _create(freeing, "c")
    assert not admitted and "exceeds quota" in why
    # the admissions are recorded by pod UID, and the records stay while the pods live
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in freeing.pods()}
    eventually(lambda: {r["id"] for r in freeing.reservations()} == set(uids.values()), timeout=60)
    _force_delete(freeing, "a")
    eventually(lambda: _create(freeing, "c")[0], timeout=20, interval=1)
    assert {p["metadata"]["name"] for p in freeing.pods()} == {"b", "c"}
    # and the reconciler deletes the record of the pod that is gone
    records = lambda: {r["id"] for r in freeing.reservations()}  # noqa: E731
    eventually(lambda: uids["a"] not in records() and uids["b"] in records(), timeout=30)


def test_deleting_a_pod_right_after_admission_frees_its_quota(freeing: Scenario) -> None:
    assert _create(freeing, "a")[0] and _create(freeing, "b")[0]
    _force_delete(freeing, "a")
    eventually(lambda: _create(freeing, "c")[0], timeout=10, interval=1)
