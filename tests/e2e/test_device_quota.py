"""Quota by what devices hold, on the real control plane (issue 27).

A fake node publishes two partitionable A100-40GB (tests/e2e/device_pools.py: a whole GPU
consumes its 40Gi `memory` counter, each of eight 1g.5gb slices 5Gi) and two shareable 100G
NICs (`bandwidth` capacity, requests rounded up to validValues or a validRange). The
scenario's ClusterQueue grants `gpu-memory` 40Gi (`kind: DeviceCounter`, counter `memory`)
and `nic-bandwidth` 100G (`kind: DeviceCapacity`, capacity `bandwidth`), beside device
counts (`gpus`, `nics`) of 16 that never bind here: each denial is one a device count would
have let through. A namespace user (built-in role `edit`) creates the pods; kube-scheduler
allocates what draquota admits, and consumes on the NICs exactly what draquota charged.
Last, the GPU-memory example of `make demo` (manifests/examples/gpu-memory) gets from the
API server what `draquota check` predicts offline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.utils import parse_quantity

from tests.e2e.cluster import REPO, ControlPlane, Draquota, eventually, run_draquota
from tests.e2e.device_pools import (
    GPU_DRIVER,
    MIG_CLASS,
    NIC_CLASSES,
    RANGE_NIC_CLASS,
    STEPS_NIC_CLASS,
    WHOLE_GPU_CLASS,
    mig_pool,
    nic_classes,
    shared_nic_pool,
)
from tests.e2e.objects import CREATED, IMAGE, Flavor, Scenario, remove_pods_later

pytestmark = pytest.mark.e2e

NAME = "e2e-devquota"
NODE = f"{NAME}-node-1"
FLAVOR = f"{NAME}-pool"
CHARGE = "draquota.io/charge"
GPU_MEMORY = "gpu-memory"
NIC_BANDWIDTH = "nic-bandwidth"
GPUS = "gpus"
NICS = "nics"
# claim templates of the scenario: name -> (device class, bandwidth request or None)
TEMPLATES: Mapping[str, tuple[str, str | None]] = {
    "mig-slice": (MIG_CLASS, None),
    "whole-a100": (WHOLE_GPU_CLASS, None),
    "steps-15g": (STEPS_NIC_CLASS, "15G"),
    "steps-20g": (STEPS_NIC_CLASS, "20G"),
    "steps-1g": (STEPS_NIC_CLASS, "1G"),
    "range-15g": (RANGE_NIC_CLASS, "15G"),
    "range-11g": (RANGE_NIC_CLASS, "11G"),
    "range-default": (RANGE_NIC_CLASS, None),
}


@dataclass
class DeviceQuotaScenario(Scenario):
    """The scenario's ClusterQueue charges GPU memory and NIC bandwidth beside devices."""

    def objects(self) -> list[dict[str, Any]]:
        objects = super().objects()
        queue = next(o for o in objects if o["kind"] == "ClusterQueue")
        gpu_classes = [WHOLE_GPU_CLASS, MIG_CLASS]
        resources = [
            {"name": "cpu", "nominalQuota": 1000},
            {
                "name": GPUS,
                "kind": "DeviceClass",
                "deviceClassNames": gpu_classes,
                "nominalQuota": 16,
            },
            {
                "name": NICS,
                "kind": "DeviceClass",
                "deviceClassNames": list(NIC_CLASSES),
                "nominalQuota": 16,
            },
            {
                "name": GPU_MEMORY,
                "kind": "DeviceCounter",
                "deviceClassNames": gpu_classes,
                "counter": "memory",
                "driver": GPU_DRIVER,
                "nominalQuota": "40Gi",
            },
            {
                "name": NIC_BANDWIDTH,
                "kind": "DeviceCapacity",
                "deviceClassNames": list(NIC_CLASSES),
                "capacity": "bandwidth",
                "nominalQuota": "100G",
            },
        ]
        queue["spec"]["resourceGroups"] = [
            {
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": FLAVOR, "resources": resources}],
            }
        ]
        return [*objects, *(_template(name, self.namespace) for name in TEMPLATES)]


def _template(name: str, namespace: str) -> dict[str, Any]:
    device_class, bandwidth = TEMPLATES[name]
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if bandwidth:
        exactly["capacity"] = {"requests": {"bandwidth": bandwidth}}
    spec = {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def _pod(name: str, template: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": IMAGE,
        "resources": {"requests": {"cpu": "10m"}, "claims": [{"name": "dev"}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
        },
    }


@dataclass
class User:
    """A namespace user (ServiceAccount bound to the built-in `edit` ClusterRole)."""

    scenario: Scenario
    kubeconfig: Path

    def create(self, name: str, template: str, dry_run: bool = False) -> tuple[bool, str]:
        extra = ["--dry-run=server", "-o", "json"] if dry_run else []
        out = self.scenario.cluster.kubectl(
            "create", "-f", "-", *extra, stdin=yaml.safe_dump(_pod(name, template)),
            kubeconfig=self.kubeconfig, check=False,
        )  # fmt: skip
        return out.returncode == 0, out.stdout if dry_run else out.stderr

    def charged(self, template: str) -> dict[str, int]:
        """What a server dry run of a pod of `template` would be charged (empty if denied)."""
        created, out = self.create("probe", template, dry_run=True)
        if not created:
            return {}
        annotation = json.loads(out)["metadata"].get("annotations", {}).get(CHARGE)
        return dict(json.loads(annotation)["usage"]) if annotation else {}


@pytest.fixture(scope="module")
def devq(draquota_cluster: Draquota) -> DeviceQuotaScenario:
    s = DeviceQuotaScenario(draquota_cluster, NAME, [Flavor("pool", 0, {NODE: 0})])
    cluster = s.cluster
    cluster.apply(yaml.safe_dump_all(nic_classes()))
    cluster.fake_node(NODE)  # Ready, no slices yet; the scenario labels it for its flavor
    cluster.apply(yaml.safe_dump_all(mig_pool(NODE) + shared_nic_pool(NODE)))
    s.create()
    CREATED.append(s.namespace)
    return s


@pytest.fixture(scope="module")
def user(devq: DeviceQuotaScenario) -> User:
    alice = User(devq, devq.user("alice", "edit"))
    # every replica has seen the slices: server dry runs (spread over the replicas by the API
    # server) are charged the slice's memory and the default bandwidth, a few times over
    for _ in range(3):
        eventually(lambda: alice.charged("mig-slice").get(GPU_MEMORY) == _q("5Gi"), timeout=60)
        eventually(
            lambda: alice.charged("range-default").get(NIC_BANDWIDTH) == _q("10G"), timeout=60
        )
    return alice


def _q(quantity: str) -> int:
    return int(parse_quantity(quantity))


def _charge(s: Scenario, name: str) -> dict[str, int]:
    """The non-zero amounts of the pod's charge annotation."""
    annotations = s.get("pod", name)["metadata"]["annotations"]
    return {k: v for k, v in json.loads(annotations[CHARGE])["usage"].items() if v}


def _allocation(s: Scenario, name: str) -> list[dict[str, Any]]:
    """The device results of the pod's claim once kube-scheduler has bound the pod."""

    def allocated() -> list[dict[str, Any]]:
        pod = s.get("pod", name)
        statuses = pod.get("status", {}).get("resourceClaimStatuses", [])
        assert pod["spec"].get("nodeName") == NODE and statuses, f"{name} not bound yet"
        claim = s.get("resourceclaim", statuses[0]["resourceClaimName"])
        return list(claim["status"]["allocation"]["devices"]["results"])

    return list(eventually(allocated, timeout=60))


def _usage_everywhere(s: Scenario, resource: str, amount: int) -> bool:
    return all(value == amount for value in s.usage("pool", resource))


def test_eight_slices_fill_the_gpu_memory_quota_and_are_allocated(
    devq: DeviceQuotaScenario, user: User
) -> None:
    for i in range(1, 9):
        created, why = user.create(f"slice-{i}", "mig-slice")
        assert created, why
        assert _charge(devq, f"slice-{i}") == {"cpu": 10, GPUS: 1, GPU_MEMORY: _q("5Gi")}
    for i in range(1, 9):
        (result,) = _allocation(devq, f"slice-{i}")
        assert result["driver"] == GPU_DRIVER and "-mig-" in result["device"]
    eventually(lambda: _usage_everywhere(devq, GPU_MEMORY, _q("40Gi")), timeout=30)


def test_a_ninth_slice_is_denied_by_gpu_memory(devq: DeviceQuotaScenario, user: User) -> None:
    created, why = user.create("slice-9", "mig-slice")
    assert not created
    assert "insufficient unused quota for gpu-memory" in why, why
    assert "5Gi more needed" in why, why
    assert "quota for gpus" not in why, why  # 9 of 16 devices: the count lets it through


def test_a_whole_gpu_beside_the_slices_is_denied_by_gpu_memory(
    devq: DeviceQuotaScenario, user: User
) -> None:
    created, why = user.create("whole-0", "whole-a100")
    assert not created
    assert "insufficient unused quota for gpu-memory" in why, why
    assert "40Gi more needed" in why, why
    assert "quota for gpus" not in why, why


# Each pod's bandwidth request, what the NIC's requestPolicy rounds it to, and the NIC:
# 15G and 20G on validValues (10G, 25G, 50G, 100G) take 25G each; 15G and 11G on the
# validRange (10G..100G, step 10G) take 20G; no request takes the default 10G. 71G asked,
# 100G charged: the queue is full.
BANDWIDTH = [
    ("nic-1", "steps-15g", "25G", "nic-0"),
    ("nic-2", "steps-20g", "25G", "nic-0"),
    ("nic-3", "range-15g", "20G", "nic-1"),
    ("nic-4", "range-11g", "20G", "nic-1"),
    ("nic-5", "range-default", "10G", "nic-1"),
]


def test_bandwidth_claims_are_charged_what_the_scheduler_consumes_rounded_up(
    devq: DeviceQuotaScenario, user: User
) -> None:
    for pod, template, rounded, _ in BANDWIDTH:
        created, why = user.create(pod, template)
        assert created, why
        assert _charge(devq, pod) == {"cpu": 10, NICS: 1, NIC_BANDWIDTH: _q(rounded)}, pod
    for pod, _, rounded, nic in BANDWIDTH:
        (result,) = _allocation(devq, pod)
        assert result["device"] == nic
        # the scheduler consumed on the shared NIC exactly what draquota charged
        assert _q(result["consumedCapacity"]["bandwidth"]) == _q(rounded), result
        assert result.get("shareID"), result
    eventually(lambda: _usage_everywhere(devq, NIC_BANDWIDTH, _q("100G")), timeout=30)


def test_a_request_that_would_fit_unrounded_is_denied_once_rounded(
    devq: DeviceQuotaScenario, user: User
) -> None:
    # 71G asked so far: 1G more would fit 100G, but 1G on validValues takes 10G
    created, why = user.create("nic-6", "steps-1g")
    assert not created
    assert "insufficient unused quota for nic-bandwidth" in why, why
    assert "10G more needed" in why, why
    assert "quota for nics" not in why, why  # 6 of 16 devices


# ---------------------------------------------------------------- the example of `make demo`

EXAMPLES = REPO / "manifests" / "examples"
EXAMPLE = EXAMPLES / "gpu-memory"
EXAMPLE_CLUSTER = EXAMPLES / "cluster"
EXAMPLE_NODE = "gpu-node-6"
EXAMPLE_NAMESPACE = "vision"
DENIED = re.compile(
    r'admission webhook "(?:validate|mutate)\.draquota\.io" denied the request: (.*)$'
)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


@pytest.fixture(scope="module")
def example(draquota_cluster: Draquota) -> ControlPlane:
    """The A100 node of the example cluster with its slices, and the example's queue."""
    cluster = draquota_cluster.cluster
    cluster.apply(EXAMPLE_CLUSTER / "deviceclasses.yaml")
    nodes = [
        d for d in _docs(EXAMPLE_CLUSTER / "nodes.yaml") if d["metadata"]["name"] == EXAMPLE_NODE
    ]
    slices = [
        d
        for d in _docs(EXAMPLE_CLUSTER / "resourceslices.yaml")
        if d["spec"]["nodeName"] == EXAMPLE_NODE
    ]
    cluster.apply(yaml.safe_dump_all(nodes + slices))
    cluster.fake_node(EXAMPLE_NODE)  # Ready, labels kept
    cluster.apply(EXAMPLE / "00-queues.yaml")
    remove_pods_later(EXAMPLE_NAMESPACE)
    probe = _docs(EXAMPLE / "01-slices.yaml")[0]

    def charged_memory() -> int | None:
        out = cluster.kubectl(
            "create", "-f", "-", "--dry-run=server", "-o", "json",
            stdin=yaml.safe_dump(probe), check=False,
        )  # fmt: skip
        if out.returncode != 0:
            return None
        annotation = json.loads(out.stdout)["metadata"].get("annotations", {}).get(CHARGE)
        return json.loads(annotation)["usage"].get(GPU_MEMORY) if annotation else None

    for _ in range(3):  # every replica sees the queue and the slices
        eventually(lambda: charged_memory() == _q("5Gi"), timeout=60)
    return cluster


def test_the_gpu_memory_example_gets_what_draquota_check_predicts(example: ControlPlane) -> None:
    predicted = json.loads(
        run_draquota("check", str(EXAMPLE), "--state", str(EXAMPLE_CLUSTER), "--json").stdout
    )["items"]
    pods = _docs(EXAMPLE / "01-slices.yaml") + _docs(EXAMPLE / "02-whole-gpu.yaml")
    assert [p["name"] for p in predicted] == [p["metadata"]["name"] for p in pods]
    assert [p["allowed"] for p in predicted] == [True] * 8 + [False, False]
    for pod, expected in zip(pods, predicted, strict=True):
        out = example.kubectl("create", "-f", "-", stdin=yaml.safe_dump(pod), check=False)
        assert (out.returncode == 0) == expected["allowed"], out.stderr
        if expected["allowed"]:
            meta = pod["metadata"]
            got = example.kubectl("get", "pod", meta["name"], "-n", meta["namespace"], "-o", "json")
            charge = json.loads(got.stdout)["metadata"]["annotations"][CHARGE]
            assert json.loads(charge) == expected["charge"]
        else:
            found = DENIED.search(out.stderr.strip())
            assert found and found.group(1) == expected["message"], out.stderr
            assert "insufficient unused quota for gpu-memory" in expected["message"]
