"""draquota and kube-scheduler on fake nodes with ResourceSlices: the flavor draquota picks
steers the pod (nodeSelector from the flavor's nodeLabels), the scheduler then allocates its
claims on that flavor's node, and what draquota admits gets scheduled."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import POOL_LABEL, Flavor, Scenario, gpu_pod, remove_pods_later, scenario

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def sched(draquota_cluster: Draquota) -> Scenario:
    # small: quota 2 on a 2-GPU node; big: quota 16 on an 8-GPU node (more quota than devices);
    # and, as in any real cluster, a node of free GPUs that no flavor of this queue names
    s = scenario(
        draquota_cluster,
        "e2e-sched",
        Flavor("small", 2, {"e2e-sched-small-1": 2}),
        Flavor("big", 16, {"e2e-sched-big-1": 8}),
    )
    s.cluster.fake_node("e2e-sched-elsewhere", 8)
    # draquota has seen the nodes' ResourceSlices before the scenarios start: a server dry run
    # of a one-GPU pod, a few times over (the API server spreads its calls over the replicas),
    # is steered to the first flavor
    for _ in range(3):
        eventually(lambda: _steered(s) == {POOL_LABEL: "e2e-sched-small"}, timeout=60)
    return s


def _steered(s: Scenario) -> dict[str, str] | None:
    out = s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", "--dry-run=server", "-o", "json",
        stdin=yaml.safe_dump(gpu_pod("probe", 1)), check=False,
    )  # fmt: skip
    return json.loads(out.stdout)["spec"].get("nodeSelector") if out.returncode == 0 else None


def _create(s: Scenario, name: str, gpus: int, dry_run: bool = False) -> tuple[bool, str]:
    extra = ["--dry-run=server"] if dry_run else []
    out = s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", *extra,
        stdin=yaml.safe_dump(gpu_pod(name, gpus)), check=False,
    )  # fmt: skip
    return out.returncode == 0, out.stderr


def _scheduled(s: Scenario, name: str) -> dict[str, Any]:
    def bound() -> dict[str, Any]:
        pod = s.get("pod", name)
        conditions = pod.get("status", {}).get("conditions", [])
        assert pod["spec"].get("nodeName"), f"pod {name} is not bound yet: {conditions}"
        return pod

    return dict(eventually(bound, timeout=60))


def _allocated_pools(s: Scenario, pod: dict[str, Any]) -> list[str]:
    pools = []
    for status in pod.get("status", {}).get("resourceClaimStatuses", []):
        claim = s.get("resourceclaim", status["resourceClaimName"])
        results = claim["status"]["allocation"]["devices"]["results"]
        pools += [r["pool"] for r in results if r["driver"] == "gpu.example.com"]
    return pools


def test_the_first_flavor_steers_the_pod_to_its_node_where_the_scheduler_allocates(
    sched: Scenario,
) -> None:
    assert _create(sched, "a", 1)[0]
    pod = _scheduled(sched, "a")
    assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "e2e-sched-small"}
    assert json.loads(pod["metadata"]["annotations"]["draquota.io/charge"])["flavors"]["gpus"] == (
        "e2e-sched-small"
    )
    assert pod["spec"]["nodeName"] == "e2e-sched-small-1"
    assert _allocated_pools(sched, pod) == ["e2e-sched-small-1"]


def test_a_pod_past_the_first_flavor_goes_to_the_next_flavor_and_its_node(sched: Scenario) -> None:
    assert _create(sched, "b", 2)[0]
    pod = _scheduled(sched, "b")
    assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "e2e-sched-big"}
    assert pod["spec"]["nodeName"] == "e2e-sched-big-1"
    assert _allocated_pools(sched, pod) == ["e2e-sched-big-1"] * 2


def test_every_pod_draquota_admits_gets_scheduled(sched: Scenario) -> None:
    assert _create(sched, "c", 5)[0]
    pod = _scheduled(sched, "c")
    assert _allocated_pools(sched, pod) == ["e2e-sched-big-1"] * 5
    assert all(p["spec"].get("nodeName") for p in sched.pods())


def test_claims_no_node_can_hold_are_denied_although_quota_would_fit(sched: Scenario) -> None:
    created, why = _create(sched, "too-big", 9)  # quota 16 - 7 in use fits; 8 GPUs per node
    assert not created
    # on any node, or on every flavor's nodes (depending on what else the cluster holds)
    assert "claims cannot be placed on" in why and "too complex" not in why, why


def test_a_pod_whose_devices_are_busy_right_now_is_admitted_with_a_warning(
    sched: Scenario,
) -> None:
    # 7 of the big node's 8 GPUs are allocated; 2 more fit the quota and the node's devices.
    # Once draquota's view has the scheduler's allocations, the answer carries the warning.
    eventually(lambda: "Warning:" in _create(sched, "waits", 2, dry_run=True)[1])
    created, why = _create(sched, "waits", 2)
    assert created, why
    assert "Warning:" in why


def test_what_draquota_denies_as_unplaceable_the_scheduler_cannot_schedule_either(
    sched: Scenario,
) -> None:
    # The same pod, in a namespace no queue manages (so draquota lets it through untouched),
    # pinned to the nodes of the flavor draquota judged: the scheduler finds no node either.
    free = "e2e-sched-unmanaged"
    sched.cluster.kubectl("create", "namespace", free)
    remove_pods_later(free)
    template = sched.get("resourceclaimtemplate", "gpu")
    template["metadata"] = {"name": "gpu", "namespace": free}
    sched.cluster.apply(yaml.safe_dump(template))
    pod = gpu_pod("too-big", 9)
    pod["spec"]["nodeSelector"] = {POOL_LABEL: "e2e-sched-big"}
    sched.cluster.kubectl("create", "-n", free, "-f", "-", stdin=yaml.safe_dump(pod))

    def unschedulable() -> str:
        out = sched.cluster.kubectl("get", "pod", "too-big", "-n", free, "-o", "json").stdout
        conditions = json.loads(out).get("status", {}).get("conditions", [])
        return next(
            (
                c["message"]
                for c in conditions
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            ),
            "",
        )

    assert "cannot allocate all claims" in eventually(unschedulable, timeout=60)
