"""The attacks of tests/security whose outcome depends on the real API server.

The API server resets status on create, sets the UID and the generated name before it
calls the validating webhook, keeps a gracefully deleted pod on a node Terminating
(there is no kubelet here to finish it), and the resourceclaim controller generates
a pod's claims from its templates. Each test is the attack as a namespace user would
run it with kubectl or the kubernetes client.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import GPU_CLASS, Flavor, Scenario, gpu_pod, remove_pods_later, scenario

pytestmark = pytest.mark.e2e

QUEUE_LABEL = "draquota.io/queue-name"
CHARGE = "draquota.io/charge"


def _unique(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 1_000_000}"


def _create(s: Scenario, obj: dict[str, Any]) -> tuple[bool, str]:
    out = s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False
    )
    return out.returncode == 0, out.stderr


def _template(name: str, count: int) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _with_template(name: str, template: str) -> dict[str, Any]:
    pod = gpu_pod(name)
    pod["spec"]["resourceClaims"] = [{"name": "gpu-0", "resourceClaimTemplateName": template}]
    return pod


@pytest.fixture
def two_gpus(draquota_cluster: Draquota) -> Scenario:
    name = _unique("e2e-sec")
    return scenario(draquota_cluster, name, Flavor("main", 2, {f"{name}-1": 8}))


def test_01_a_pod_deleted_with_a_long_grace_period_keeps_its_devices(two_gpus: Scenario) -> None:
    holder = gpu_pod("holder", 2)
    holder["spec"]["terminationGracePeriodSeconds"] = 86400
    assert _create(two_gpus, holder)[0]
    eventually(lambda: two_gpus.get("pod", "holder")["spec"].get("nodeName"), timeout=60)
    two_gpus.cluster.kubectl("delete", "pod", "holder", "-n", two_gpus.namespace, "--wait=false")
    deleting = two_gpus.get("pod", "holder")["metadata"]
    assert deleting["deletionTimestamp"] and deleting["deletionGracePeriodSeconds"] == 86400
    admitted, why = _create(two_gpus, gpu_pod("next", 1))
    assert not admitted
    assert "in use 2 of nominal 2" in why, why


def test_02_swapping_a_template_after_admission_does_not_lower_the_charge(
    two_gpus: Scenario,
) -> None:
    s = two_gpus
    s.cluster.apply(yaml.safe_dump(_template("big", 2)), "-n", s.namespace)
    assert _create(s, _with_template("train-0", "big"))[0]
    # the resourceclaim controller generates the pod's claim and records it in pod status
    eventually(lambda: s.get("pod", "train-0").get("status", {}).get("resourceClaimStatuses"))
    s.cluster.kubectl("delete", "resourceclaimtemplate", "big", "-n", s.namespace)
    s.cluster.apply(yaml.safe_dump(_template("big", 1)), "-n", s.namespace)
    time.sleep(2)  # every replica has seen the new template
    admitted, why = _create(s, _with_template("train-1", "big"))
    assert not admitted
    assert "in use 2 of nominal 2" in why, why
    assert s.usage("main") == [2.0] * len(s.installed.replicas)


def test_03_a_named_claim_recreated_with_allocation_mode_all_is_denied(
    two_gpus: Scenario,
) -> None:
    s = two_gpus
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}
        },
    }
    s.cluster.apply(yaml.safe_dump(claim), "-n", s.namespace)
    user = gpu_pod("user", 0)
    user["spec"]["resourceClaims"] = [{"name": "gpu-0", "resourceClaimName": "shared"}]
    user["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu-0"}]
    user["spec"]["nodeSelector"] = {"e2e.draquota.io/nowhere": "true"}  # never scheduled
    assert _create(s, user)[0]
    s.cluster.kubectl("delete", "resourceclaim", "shared", "-n", s.namespace, "--wait=true")
    claim["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    admitted, why = _create(s, claim)
    assert not admitted
    assert "QuotaExceeded" in why and f'exceeds quota of ClusterQueue "{s.name}"' in why, why


def test_04_status_in_a_create_is_reset_and_does_not_skip_admission(
    two_gpus: Scenario, kube: k8s.ApiClient
) -> None:
    s = two_gpus
    core = k8s.CoreV1Api(kube)
    created = []
    for i in range(4):
        body = gpu_pod(f"failed-{i}", 1)
        body["status"] = {"phase": "Failed"}
        try:
            created.append(core.create_namespaced_pod(s.namespace, body))
        except k8s.ApiException as exc:
            assert exc.status == 403 and "exceeds quota" in exc.body, exc.body
    assert len(created) == 2
    for pod in created:
        assert pod.status.phase == "Pending"  # the API server reset it
        assert pod.metadata.labels[QUEUE_LABEL] == "default"
        assert CHARGE in pod.metadata.annotations
        assert pod.spec.node_selector == {"e2e.draquota.io/pool": f"{s.name}-main"}


def test_09_a_resize_past_quota_is_denied(draquota_cluster: Draquota) -> None:
    name = _unique("e2e-resize")
    s = scenario(draquota_cluster, name, Flavor("main", 2, {f"{name}-1": 8}, cpu=2))
    pod = gpu_pod("web", 0)
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1"},
        "limits": {"cpu": "1"},
    }
    assert _create(s, pod)[0]
    patch = {"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "8"}, "limits": {"cpu": "8"}}}]}}  # fmt: skip
    out = s.cluster.kubectl(
        "patch", "pod", "web", "-n", s.namespace, "--subresource", "resize",
        "--type", "strategic", "-p", json.dumps(patch), check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "insufficient quota for cpu" in out.stderr or "exceeds quota" in out.stderr, out.stderr
    patch["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2"},
        "limits": {"cpu": "2"},
    }
    s.cluster.kubectl(
        "patch", "pod", "web", "-n", s.namespace, "--subresource", "resize",
        "--type", "strategic", "-p", json.dumps(patch),
    )  # fmt: skip
    extra = gpu_pod("extra", 0)
    del extra["spec"]["resourceClaims"]
    admitted, why = _create(s, extra)
    assert not admitted and "insufficient unused quota for cpu" in why, why


def test_11_a_jobs_queue_label_reaches_its_pods(draquota_cluster: Draquota) -> None:
    name = _unique("e2e-jobq")
    s = scenario(draquota_cluster, name, Flavor("main", 2, {f"{name}-1": 8}))
    # the namespace's only LocalQueue is `lq`: pods without the label would be unmanaged
    s.cluster.kubectl("delete", "localqueue", "default", "-n", s.namespace)
    local = {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "lq"},
        "spec": {"clusterQueue": s.name},
    }
    s.cluster.apply(yaml.safe_dump(local), "-n", s.namespace)
    time.sleep(2)
    template = gpu_pod("unused", 1)
    template["spec"]["restartPolicy"] = "Never"

    def job(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: "lq"}},
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "template": {"metadata": {}, "spec": template["spec"]},
            },
        }

    assert _create(s, job("a"))[0]
    eventually(lambda: len(s.pods()) >= 2, timeout=60)
    # the queue is full: a second Job is denied at create, as its pods would be
    created, why = _create(s, job("b"))
    assert not created and "insufficient unused quota for gpus" in why, why
    pods = s.pods()
    assert len(pods) == 2
    assert all(p["metadata"]["labels"][QUEUE_LABEL] == "lq" for p in pods)
    eventually(lambda: s.usage("main") == [2.0] * len(s.installed.replicas), timeout=30)


def test_07_creating_a_name_that_exists_reserves_nothing(two_gpus: Scenario) -> None:
    s = two_gpus
    assert _create(s, gpu_pod("train", 1))[0]
    for _ in range(20):
        admitted, why = _create(s, gpu_pod("train", 1))
        assert not admitted and ("AlreadyExists" in why or "already exists" in why), why
    uid = s.get("pod", "train")["metadata"]["uid"]
    assert [r["id"] for r in s.reservations()] == [uid]
    assert _create(s, gpu_pod("other", 1))[0]


def test_08_a_server_dry_run_records_nothing(two_gpus: Scenario) -> None:
    s = two_gpus
    for i in range(5):
        out = s.cluster.kubectl(
            "create", "-n", s.namespace, "--dry-run=server", "-f", "-",
            stdin=yaml.safe_dump(gpu_pod(f"dry-{i}", 2)),
        )  # fmt: skip
        assert out.returncode == 0
    assert s.reservations() == []
    assert _create(s, gpu_pod("real", 2))[0]


def test_05_a_forged_charge_annotation_is_stripped_and_fills_no_queue(
    two_gpus: Scenario, draquota_cluster: Draquota
) -> None:
    s = two_gpus
    outside = _unique("e2e-nolq")  # a namespace no ClusterQueue selects, without LocalQueues
    s.cluster.kubectl("create", "namespace", outside)
    remove_pods_later(outside)
    forged = json.dumps(
        {
            "clusterQueue": s.name,
            "localQueue": f"{s.namespace}/default",
            "flavors": {"gpus": f"{s.name}-main"},
            "usage": {"gpus": 2},
            "deviceClasses": {GPU_CLASS: 2},
            "sharedClaims": {},
        }
    )
    thief = gpu_pod("thief", 0)
    del thief["spec"]["resourceClaims"]
    thief["metadata"]["annotations"] = {CHARGE: forged}
    out = s.cluster.kubectl(
        "create", "-n", outside, "-f", "-", stdin=yaml.safe_dump(thief), check=False
    )
    assert out.returncode == 0, out.stderr
    stored = json.loads(
        s.cluster.kubectl("get", "pod", "thief", "-n", outside, "-o", "json").stdout
    )
    assert CHARGE not in stored["metadata"].get("annotations", {})
    assert _create(s, gpu_pod("owner", 2))[0]  # team's own quota is whole
