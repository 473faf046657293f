"""Preemption in queue mode on the real control plane (issue 26): lent quota comes back, and
priority means something.

Two scenarios share one cohort: research (nominal 4 GPUs, lends at most 2, reclaims from
any borrower) and ml (nominal 0 in research's flavor: all it runs is borrowed). Users are
namespace admins with their own tokens. What counts is what the scheduler allocated (the
devices in the allocations of each namespace's claims, as tests/e2e/test_queue_escapes.py
samples them). No kubelet runs: tests/e2e/kubelet.py plays it, and holds the victims in
their termination until the test has read what they were told.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.kubelet import FakeKubelet
from tests.e2e.objects import GPU_CLASS, Flavor, Scenario, gpu_pod, scenario
from tests.e2e.test_queue_escapes import allocated

pytestmark = pytest.mark.e2e

GATE = {"name": "draquota.io/admission"}


def _create(s: Scenario, user: Path, obj: dict[str, Any]) -> tuple[bool, str]:
    out = s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", kubeconfig=user, check=False,
        stdin=yaml.safe_dump(obj),
    )  # fmt: skip
    return out.returncode == 0, out.stderr


def _patch(s: Scenario, spec: dict[str, Any]) -> None:
    s.cluster.kubectl(
        "patch", "clusterqueue", s.name, "--type", "merge", "-p", json.dumps({"spec": spec})
    )


def _resources(flavor: str, gpus: int, lending: int | None = None) -> Any:
    quota: dict[str, Any] = {
        "name": "gpus",
        "kind": "DeviceClass",
        "deviceClassNames": [GPU_CLASS],
        "nominalQuota": gpus,
    }
    if lending is not None:
        quota["lendingLimit"] = lending
    resources = [{"name": "cpu", "nominalQuota": 1000}, quota]
    return [{"coveredResources": ["cpu", "gpus"],
             "flavors": [{"name": flavor, "resources": resources}]}]  # fmt: skip


def _disruption(pod: dict[str, Any]) -> dict[str, Any]:
    for condition in pod.get("status", {}).get("conditions") or ():
        if condition["type"] == "DisruptionTarget":
            return dict(condition)
    return {}


def _running(s: Scenario) -> list[str]:
    """Pods admitted and bound by the scheduler, not being deleted."""
    return sorted(
        p["metadata"]["name"]
        for p in s.pods()
        if GATE not in (p["spec"].get("schedulingGates") or ())
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    )


class Sampler:
    """Samples each namespace's allocated devices in the background; `peaks` per namespace."""

    def __init__(self, *scenarios: Scenario) -> None:
        self.scenarios = scenarios
        self.peaks = {s.namespace: 0 for s in scenarios}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(0.3):
            for s in self.scenarios:
                self.peaks[s.namespace] = max(self.peaks[s.namespace], allocated(s))


@pytest.fixture
def cohort(draquota_cluster: Draquota) -> Iterator[tuple[Scenario, Scenario]]:
    stamp = int(time.time() * 1000) % 100_000
    name = f"e2e-research-{stamp}"
    research = scenario(draquota_cluster, name, Flavor("f", 4, {f"{name}-1": 8}))
    ml = scenario(draquota_cluster, f"e2e-ml-{stamp}", Flavor("f", 0, {}))
    lab = f"e2e-lab-{stamp}"
    reclaim = {"reclaimWithinCohort": "Any"}
    groups = _resources(f"{name}-f", 4, lending=2)
    _patch(research, {"cohort": lab, "preemption": reclaim, "resourceGroups": groups})
    _patch(ml, {"cohort": lab, "resourceGroups": _resources(f"{name}-f", 0)})
    yield research.queueing(), ml.queueing()


def test_research_reclaims_what_ml_borrowed(cohort: tuple[Scenario, Scenario], kube: Any) -> None:
    research, ml = cohort
    bob, alice = ml.user("bob"), research.user("alice")
    with (
        FakeKubelet(kube, [research.namespace, ml.namespace]) as kubelet,
        Sampler(research, ml) as sampler,
    ):
        for i in range(2):
            assert _create(ml, bob, gpu_pod(f"ml-{i}"))[0]
        eventually(lambda: _running(ml) == ["ml-0", "ml-1"], timeout=90)
        kubelet.hold.update((ml.namespace, f"ml-{i}") for i in range(2))  # they terminate slowly
        for i in range(4):
            assert _create(research, alice, gpu_pod(f"r-{i}"))[0]
        victims = eventually(lambda: _evicted(ml, ["ml-0", "ml-1"]), timeout=60)
        for pod in victims:
            condition = _disruption(pod)
            assert condition["reason"] == "PreemptedByDraquota", condition
            assert f"by ClusterQueue {research.name}" in condition["message"]
        preempted = eventually(lambda: ml.events("Preempted"), timeout=30)
        assert all("due to reclamation within the cohort" in m for m in preempted), preempted
        assert _running(research) == ["r-0", "r-1"]  # the others wait for the victims
        waiting = research.get("pod", "r-2")["status"]["conditions"]
        assert any("Pending the preemption of" in c.get("message", "") for c in waiting)
        kubelet.hold.clear()  # the victims' containers stop: the kubelet finishes deleting them
        eventually(lambda: _running(research) == ["r-0", "r-1", "r-2", "r-3"], timeout=90)
        eventually(lambda: allocated(research) == 4, timeout=60)
    assert sampler.peaks[research.namespace] <= 4
    assert sampler.peaks[ml.namespace] <= 2
    assert [p["metadata"]["name"] for p in ml.pods()] == []
    counted = [
        r.metric("draquota_preempted_workloads_total", cluster_queue=ml.name,
                 reason="InCohortReclamation")
        for r in research.installed.replicas
    ]  # fmt: skip
    assert sum(v or 0 for v in counted) == 2, counted


def _evicted(s: Scenario, names: list[str]) -> list[dict[str, Any]] | None:
    pods = [s.get("pod", n) for n in names]
    marked = all(p["metadata"].get("deletionTimestamp") and _disruption(p) for p in pods)
    reasons = {_disruption(p).get("reason") for p in pods}
    return pods if marked and reasons == {"PreemptedByDraquota"} else None


def _priority_class(s: Scenario, name: str, value: int) -> str:
    full = f"{s.name}-{name}"
    s.cluster.apply(yaml.safe_dump({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                    "metadata": {"name": full}, "value": value}))  # fmt: skip
    return full


def test_a_high_priority_pod_evicts_the_lowest_priority_newest_pod_only(
    draquota_cluster: Draquota, kube: Any
) -> None:
    name = f"e2e-prio-{int(time.time() * 1000) % 100_000}"
    s = scenario(draquota_cluster, name, Flavor("f", 3, {f"{name}-1": 8}))
    _patch(s, {"preemption": {"withinClusterQueue": "LowerPriority"}})
    s.queueing()
    low, mid, high = (_priority_class(s, n, v) for n, v in (("low", 10), ("mid", 100),
                                                             ("high", 1000)))  # fmt: skip
    user = s.user("carol")
    with FakeKubelet(kube, [s.namespace]) as kubelet, Sampler(s) as sampler:
        for pod_name, cls in (("old-low", low), ("new-low", low), ("mid", mid)):
            pod = gpu_pod(pod_name)
            pod["spec"]["priorityClassName"] = cls
            assert _create(s, user, pod)[0]
            time.sleep(1.1)  # creation timestamps have whole seconds
        eventually(lambda: _running(s) == ["mid", "new-low", "old-low"], timeout=90)
        kubelet.hold.add((s.namespace, "new-low"))
        urgent = gpu_pod("urgent")
        urgent["spec"]["priorityClassName"] = high
        assert _create(s, user, urgent)[0]
        (victim,) = eventually(lambda: _evicted(s, ["new-low"]), timeout=60)
        assert "due to prioritization in the ClusterQueue" in _disruption(victim)["message"]
        assert _running(s) == ["mid", "old-low"]
        kubelet.hold.clear()
        eventually(lambda: _running(s) == ["mid", "old-low", "urgent"], timeout=90)
    assert sampler.peaks[s.namespace] <= 3


def test_a_pod_cannot_set_its_own_priority(draquota_cluster: Draquota) -> None:
    name = f"e2e-selfprio-{int(time.time() * 1000) % 100_000}"
    s = scenario(draquota_cluster, name, Flavor("f", 1, {f"{name}-1": 8})).queueing()
    pod = gpu_pod("inflated", labels={"priority": "1000000"})
    pod["spec"]["priority"] = 1_000_000
    created, why = _create(s, s.user("mallory"), pod)
    assert not created
    assert "must not be provided in pod spec" in why, why


@pytest.fixture
def reject_cohort(draquota_cluster: Draquota) -> tuple[Scenario, Scenario]:
    """research (nominal 4, lends 2, reclaims Any) and ml (nominal 0), both `whenFull: Reject`."""
    stamp = int(time.time() * 1000) % 100_000
    name = f"e2e-rreclaim-{stamp}"
    research = scenario(draquota_cluster, name, Flavor("f", 4, {f"{name}-1": 8}))
    ml = scenario(draquota_cluster, f"e2e-rml-{stamp}", Flavor("f", 0, {}))
    lab = f"e2e-rlab-{stamp}"
    groups = _resources(f"{name}-f", 4, lending=2)
    reclaim = {"reclaimWithinCohort": "Any"}
    _patch(research, {"cohort": lab, "preemption": reclaim, "resourceGroups": groups})
    _patch(ml, {"cohort": lab, "resourceGroups": _resources(f"{name}-f", 0)})
    return research, ml


def _dry_run_warns(s: Scenario, user: Path, text: str) -> bool:
    out = s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", "--dry-run=server", kubeconfig=user,
        check=False, stdin=yaml.safe_dump(gpu_pod("probe")),
    )  # fmt: skip
    return out.returncode == 0 and text in out.stderr


def test_in_reject_mode_research_reclaims_at_submit_what_ml_borrowed(
    reject_cohort: tuple[Scenario, Scenario], kube: Any
) -> None:
    research, ml = reject_cohort
    bob, alice = ml.user("bob", "edit"), research.user("alice", "edit")
    with (
        FakeKubelet(kube, [research.namespace, ml.namespace]) as kubelet,
        Sampler(research, ml) as sampler,
    ):
        for i in range(2):  # admitted once the replica deciding it has seen the cohort
            eventually(lambda i=i: _create(ml, bob, gpu_pod(f"ml-{i}"))[0], timeout=60)
        eventually(lambda: _running(ml) == ["ml-0", "ml-1"], timeout=90)
        kubelet.hold.update((ml.namespace, f"ml-{i}") for i in range(2))  # they terminate slowly
        for i in range(2):  # research's own two unlent GPUs: no reclaim, no warning
            created, stderr = _create(research, alice, gpu_pod(f"r-{i}"))
            assert created and "Warning:" not in stderr, stderr
        # a few dry runs in a row that would reclaim: every replica has seen research's policy
        for _ in range(3):
            eventually(lambda: _dry_run_warns(research, alice, "would reclaim from"), timeout=60)
        assert _running(ml) == ["ml-0", "ml-1"]  # dry runs evict nothing
        evicted = []
        for i in (2, 3):
            created, stderr = _create(research, alice, gpu_pod(f"r-{i}"))
            assert created, stderr
            assert f"Warning: reclaimed from ClusterQueue {ml.name}: evicted " in stderr, stderr
            evicted += [n for n in ("ml-0", "ml-1") if f"{ml.namespace}/{n}" in stderr]
        assert sorted(evicted) == ["ml-0", "ml-1"], evicted  # one each, never one twice
        victims = eventually(lambda: _evicted(ml, ["ml-0", "ml-1"]), timeout=60)
        for pod in victims:
            condition = _disruption(pod)
            assert condition["reason"] == "PreemptedByDraquota", condition
            reason = f"due to reclamation within the cohort by ClusterQueue {research.name}"
            assert reason in condition["message"], condition
        kubelet.hold.clear()
        eventually(lambda: _running(research) == ["r-0", "r-1", "r-2", "r-3"], timeout=90)
        eventually(lambda: [p["metadata"]["name"] for p in ml.pods()] == [], timeout=90)
        eventually(lambda: allocated(research) == 4, timeout=60)
        assert allocated(ml) == 0
        created, why = _create(ml, bob, gpu_pod("ml-2"))
        assert not created
        assert f'exceeds quota of ClusterQueue "{ml.name}"' in why, why
        assert "cohort" in why and "can lend 0" in why, why
    assert sampler.peaks[research.namespace] <= 4
    counted = [
        r.metric("draquota_preempted_workloads_total", cluster_queue=ml.name,
                 reason="InCohortReclamation")
        for r in research.installed.replicas
    ]  # fmt: skip
    assert sum(v or 0 for v in counted) == 2, counted
