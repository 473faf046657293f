"""Answers at admission on the real control plane, as `kubectl create` prints them.

A pod created to wait in a queueing ClusterQueue prints `Warning: waits in ClusterQueue X,
position N: ...`; a Job whose pods cannot start now in a rejecting queue is denied at
create; mistyped names get a did-you-mean; a denial in a cohort says what was lent, to
whom, and what was borrowed, from whom.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import (
    GPU_CLASS,
    SCENARIO_LABEL,
    Flavor,
    Scenario,
    gpu_job,
    gpu_pod,
    remove_pods_later,
    scenario,
)

pytestmark = pytest.mark.e2e

COHORT = "e2e-lab"


def _create(
    s: Scenario, obj: dict[str, Any], *extra: str, namespace: str = ""
) -> subprocess.CompletedProcess[str]:
    return s.cluster.kubectl(
        "create", "-n", namespace or s.namespace, "-f", "-", *extra,
        stdin=yaml.safe_dump(obj), check=False,
    )  # fmt: skip


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


def _all_replicas_see(s: Scenario, gpus: float, flavor: str) -> None:
    eventually(lambda: s.usage(flavor) == [gpus] * len(s.installed.replicas), timeout=30)


@pytest.fixture(scope="module")
def rejecting(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-answers", Flavor("r", 2, {"e2e-answers-1": 8}))


def test_a_typo_in_the_queue_label_gets_a_did_you_mean(rejecting: Scenario) -> None:
    out = _create(rejecting, gpu_pod("typo", 1, {"draquota.io/queue-name": "defualt"}))
    assert out.returncode != 0
    assert (
        "LocalQueue e2e-answers/defualt not found (label draquota.io/queue-name): "
        "did you mean default? (LocalQueues in e2e-answers: default)"
    ) in out.stderr, out.stderr


def test_a_typo_in_a_device_class_gets_a_did_you_mean(rejecting: Scenario) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "typo"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.exmaple.com"}}]}}},
    }  # fmt: skip
    _create(rejecting, template)
    pod = gpu_pod("class-typo", 1)
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "typo"
    out = _create(rejecting, pod)
    assert out.returncode != 0
    assert (
        "device class gpu.exmaple.com not mapped to any resource of ClusterQueue "
        f'"e2e-answers" (LocalQueue e2e-answers/default): did you mean {GPU_CLASS}? '
        f"(the ClusterQueue maps {GPU_CLASS})"
    ) in out.stderr, out.stderr


def test_kueues_queue_label_is_named_as_not_read(rejecting: Scenario) -> None:
    pod = gpu_pod("kueue", 1, {"kueue.x-k8s.io/queue-name": "default"})
    out = _create(rejecting, pod, "--dry-run=server")
    assert out.returncode == 0, out.stderr
    assert _warnings(out.stderr) == [
        "Warning: kueue.x-k8s.io/queue-name is not read by draquota; use draquota.io/queue-name"
    ]


def test_a_job_whose_pods_cannot_start_now_is_denied_at_create(rejecting: Scenario) -> None:
    assert _create(rejecting, gpu_pod("hold", 1)).returncode == 0
    _all_replicas_see(rejecting, 1.0, "r")
    out = _create(rejecting, gpu_job("pair", 2))
    assert out.returncode != 0
    assert (
        'denied the request: job e2e-answers/pair exceeds quota of ClusterQueue "e2e-answers" '
        "(LocalQueue e2e-answers/default): insufficient unused quota for gpus (DeviceClass "
        f"{GPU_CLASS}) in flavor e2e-answers-r, 1 more needed (requested 2, in use 1 of nominal 2)"
    ) in out.stderr, out.stderr
    gone = rejecting.cluster.kubectl("get", "job", "pair", "-n", rejecting.namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # the one pod it runs at once fits: created, and its pod admitted
    assert _create(rejecting, gpu_job("single", 1)).returncode == 0
    eventually(lambda: len(rejecting.pods("job-name=single")) == 1, timeout=60)


def test_a_pod_that_waits_is_told_where_it_stands_at_create(draquota_cluster: Draquota) -> None:
    s = scenario(draquota_cluster, "e2e-answers-q", Flavor("q", 2, {"e2e-answers-q-1": 8}))
    s.queueing()
    assert _create(s, gpu_pod("first", 2)).returncode == 0
    eventually(lambda: not s.get("pod", "first")["spec"].get("schedulingGates"), timeout=60)
    _all_replicas_see(s, 2.0, "q")
    out = _create(s, gpu_pod("second", 1))
    assert out.returncode == 0, out.stderr
    why = (
        f"waiting for quota: insufficient unused quota for gpus (DeviceClass {GPU_CLASS}) in "
        "flavor e2e-answers-q-q, 1 more needed (requested 1, in use 2 of nominal 2)"
    )
    warning = f"Warning: waits in ClusterQueue {s.name}, position 1: {why}"
    assert _warnings(out.stderr) == [warning]
    # the controller's own answer says the same
    pending = f"{why}; position 1 of 1 in ClusterQueue {s.name}"
    eventually(lambda: s.events("Pending") == [pending], timeout=30)


def _member_queue(name: str, flavor: str, nominal: int) -> list[dict[str, Any]]:
    """A namespace `name` and its ClusterQueue of that name in the cohort, on `flavor`."""
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": name, "labels": {SCENARIO_LABEL: name}}},
        {"apiVersion": "draquota.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {"cohort": COHORT, "namespaceSelector": {"matchLabels": {SCENARIO_LABEL: name}},
                  "resourceGroups": [{"coveredResources": ["cpu", "gpus"], "flavors": [
                      {"name": flavor, "resources": [
                          {"name": "cpu", "nominalQuota": 1000},
                          {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS],
                           "nominalQuota": nominal}]}]}]}},
        {"apiVersion": "draquota.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": "default", "namespace": name}, "spec": {"clusterQueue": name}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "gpu", "namespace": name},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}}},
    ]  # fmt: skip


def test_a_denial_says_what_was_lent_to_whom_and_borrowed_from_whom(
    draquota_cluster: Draquota,
) -> None:
    research = scenario(draquota_cluster, "e2e-lend", Flavor("f", 4, {"e2e-lend-1": 8}))
    flavor = "e2e-lend-f"
    patch = {"spec": {"cohort": COHORT, "resourceGroups": [{"coveredResources": ["cpu", "gpus"],
             "flavors": [{"name": flavor, "resources": [
                 {"name": "cpu", "nominalQuota": 1000},
                 {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS],
                  "nominalQuota": 4, "lendingLimit": 2}]}]}]}}  # fmt: skip
    research.cluster.kubectl(
        "patch", "clusterqueue", research.name, "--type", "merge", "-p", json.dumps(patch)
    )
    ml = "e2e-lend-ml"
    research.cluster.apply(yaml.safe_dump_all(_member_queue(ml, flavor, 1)))
    remove_pods_later(ml)
    assert _create(research, gpu_pod("notebook", 2)).returncode == 0
    _all_replicas_see(research, 2.0, "f")

    def ml_takes_three() -> bool:  # once every replica sees the cohort, ml borrows research's 2
        return _create(research, gpu_pod("train", 3), namespace=ml).returncode == 0

    eventually(ml_takes_three, timeout=30)
    eventually(
        lambda: [r.metric("draquota_queue_usage", cluster_queue=ml, flavor=flavor, resource="gpus")
                 for r in research.installed.replicas] == [3.0] * len(research.installed.replicas),
        timeout=30,
    )  # fmt: skip
    out = _create(research, gpu_pod("more", 2))
    assert out.returncode != 0
    assert (
        f"2 more needed (requested 2, in use 2 of nominal 4; 2 lent to ClusterQueue {ml}; "
        f"cohort {COHORT} can lend 0)"
    ) in out.stderr, out.stderr
    out = _create(research, gpu_pod("again", 1), namespace=ml)
    assert out.returncode != 0
    assert (
        f"1 more needed (requested 1, in use 3 of nominal 1, 2 borrowed from ClusterQueue "
        f"{research.name}; cohort {COHORT} can lend 0)"
    ) in out.stderr, out.stderr
