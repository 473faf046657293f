"""Queueing on the real control plane: ClusterQueues with `whenFull: Queue`.

Pods are created gated (`draquota.io/admission`), hold nothing while they wait, and
the replica that holds the `draquota-queueing` Lease admits them in order: it
records their charge in the QuotaLedger, adds the flavor's nodeSelector and removes
the gate, and kube-scheduler binds them. Pod groups start all together or not at
all; killing the leader hands the queue to another replica through the Lease.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from quota.waiting import ADMISSION_GATE, GROUP_LABEL, GROUP_TOTAL_ANNOTATION
from tests.e2e.cluster import Draquota, Replica, eventually
from tests.e2e.objects import POOL_LABEL, Flavor, Scenario, gpu_job, gpu_pod, scenario

pytestmark = pytest.mark.e2e


def _create(s: Scenario, *pods: dict[str, Any]) -> None:
    s.cluster.kubectl("create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump_all(pods))


def _gated(pod: dict[str, Any]) -> bool:
    return {"name": ADMISSION_GATE} in pod["spec"].get("schedulingGates", [])


def _running(s: Scenario) -> list[str]:
    """Pods the queue admitted and the scheduler bound."""
    return sorted(
        p["metadata"]["name"]
        for p in s.pods()
        if not _gated(p) and p["spec"].get("nodeName") and "deletionTimestamp" not in p["metadata"]
    )


def _waiting(s: Scenario) -> dict[str, str]:
    """Gated pods and the message of their QuotaReserved condition."""
    waiting = {}
    for pod in s.pods():
        if _gated(pod):
            conditions = pod.get("status", {}).get("conditions", [])
            reserved = [c for c in conditions if c["type"] == "QuotaReserved"]
            waiting[pod["metadata"]["name"]] = reserved[0]["message"] if reserved else ""
    return waiting


def _quota_reserved(s: Scenario, name: str) -> str:
    """The status of the pod's QuotaReserved condition ("" when it has none)."""
    conditions = s.get("pod", name).get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == "QuotaReserved"), "")


def _events(s: Scenario, name: str) -> dict[str, str]:
    """The message of each Event on the pod, by reason, as `kubectl get events` shows them."""
    out = s.cluster.kubectl(
        "get", "events", "-n", s.namespace, "--field-selector", f"involvedObject.name={name}",
        "-o", "json",
    ).stdout  # fmt: skip
    items = json.loads(out)["items"]
    events = [e for e in items if e.get("source", {}).get("component") == "draquota"]
    assert len({e["reason"] for e in events}) == len(events), events  # one per reason, updated
    return {e["reason"]: e["message"] for e in events}


def _delete(s: Scenario, name: str) -> None:
    s.cluster.kubectl(
        "delete", "pod", name, "-n", s.namespace, "--grace-period=0", "--force", "--wait=true"
    )


@pytest.fixture(scope="module")
def fifo(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-queue", Flavor("q", 4, {"e2e-queue-1": 8})).queueing()


def test_six_two_gpu_pods_at_once_two_run_four_wait_gated_holding_nothing(fifo: Scenario) -> None:
    pods = [gpu_pod(f"job-{i}", 2) for i in range(6)]
    for pod in pods:
        _create(fifo, pod)
        time.sleep(0.05)  # distinct creation order within the same second is not kept

    def settled() -> dict[str, str]:
        assert _running(fifo) == ["job-0", "job-1"], fifo.pods()
        waiting = _waiting(fifo)
        assert sorted(waiting) == ["job-2", "job-3", "job-4", "job-5"]
        assert all("position" in message for message in waiting.values()), waiting
        return waiting

    waiting = eventually(settled, timeout=60)
    assert "waiting for quota: insufficient unused quota for gpus" in waiting["job-2"]
    assert "2 more needed" in waiting["job-2"]
    assert [_quota_reserved(fifo, name) for name in ("job-0", "job-1")] == ["True", "True"]
    assert all(_events(fifo, name).get("QuotaReserved", "").startswith(
        f"admitted by ClusterQueue {fifo.name}") for name in ("job-0", "job-1"))  # fmt: skip
    # why each one waits, in `kubectl describe pod` too: an Event with the condition's message
    eventually(lambda: all(_events(fifo, name).get("Pending") == _waiting(fifo)[name]
                           for name in waiting), timeout=30)  # fmt: skip
    assert all(p["spec"]["nodeSelector"] == {POOL_LABEL: "e2e-queue-q"} for p in fifo.pods()
               if p["metadata"]["name"] in ("job-0", "job-1"))  # fmt: skip
    eventually(lambda: fifo.usage("q") == [4.0] * 3, timeout=30)
    assert len(fifo.reservations()) == 2  # waiting pods hold no record
    queue = fifo.get("clusterqueue", fifo.name, namespaced=False)
    eventually(lambda: fifo.get("clusterqueue", fifo.name, namespaced=False)["status"].get(
        "pendingWorkloads") == 4, timeout=30)  # fmt: skip
    assert queue["spec"]["whenFull"] == "Queue"


def test_a_user_cannot_ungate_a_waiting_pod(fifo: Scenario) -> None:
    out = fifo.cluster.kubectl(
        "patch", "pod", "job-5", "-n", fifo.namespace, "--type", "json",
        "-p", json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]), check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert f"spec.schedulingGates: {ADMISSION_GATE} is removed by draquota" in out.stderr
    assert _gated(fifo.get("pod", "job-5"))


def test_deleting_a_running_pod_starts_the_next_in_order(fifo: Scenario) -> None:
    _delete(fifo, "job-0")
    eventually(lambda: _running(fifo) == ["job-1", "job-2"], timeout=60)
    assert sorted(_waiting(fifo)) == ["job-3", "job-4", "job-5"]
    # every admitted pod says so, none still says it waits (its condition is written first)
    assert [_quota_reserved(fifo, name) for name in ("job-1", "job-2")] == ["True", "True"]
    events = _events(fifo, "job-2")
    assert events["Pending"].startswith("waiting for quota: insufficient unused quota for gpus")
    assert "2 more needed" in events["Pending"]
    assert f"position 1 of 4 in ClusterQueue {fifo.name}" in events["Pending"]
    assert events["QuotaReserved"].startswith(f"admitted by ClusterQueue {fifo.name} after waiting")
    # job-3 moved up: the same Pending Event (one per reason) now has its new position
    eventually(lambda: "position 1 of 3" in _events(fifo, "job-3")["Pending"], timeout=30)
    eventually(lambda: fifo.usage("q") == [4.0] * 3, timeout=30)


def test_a_pod_that_can_never_fit_is_denied_at_submit(fifo: Scenario) -> None:
    out = fifo.cluster.kubectl(
        "create", "-n", fifo.namespace, "-f", "-", stdin=yaml.safe_dump(gpu_pod("huge", 5)),
        check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "request > maximum capacity (5 > 4)" in out.stderr


def _member(name: str, group: str, total: int) -> dict[str, Any]:
    pod = gpu_pod(name, 1, {GROUP_LABEL: group})
    pod["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: str(total)}
    return pod


def test_a_pod_group_of_three_starts_only_when_all_three_fit(draquota_cluster: Draquota) -> None:
    s = scenario(draquota_cluster, "e2e-group", Flavor("g", 3, {"e2e-group-1": 8})).queueing()
    _create(s, gpu_pod("single", 1))
    eventually(lambda: _running(s) == ["single"], timeout=60)
    _create(s, _member("trio-0", "trio", 3), _member("trio-1", "trio", 3))
    eventually(lambda: "2 of 3 exist" in _waiting(s).get("trio-0", ""), timeout=30)
    _create(s, _member("trio-2", "trio", 3))
    eventually(lambda: "waiting for quota" in _waiting(s).get("trio-2", ""), timeout=30)
    assert _running(s) == ["single"]
    assert len(s.reservations()) == 1  # the group holds nothing while it waits
    _delete(s, "single")
    eventually(lambda: _running(s) == ["trio-0", "trio-1", "trio-2"], timeout=60)
    eventually(lambda: s.usage("g") == [3.0] * 3, timeout=30)


def test_killing_the_leader_hands_the_queue_over_without_double_admission(
    draquota_cluster: Draquota,
) -> None:
    s = scenario(draquota_cluster, "e2e-lease", Flavor("l", 2, {"e2e-lease-1": 8})).queueing()
    replica = eventually(lambda: draquota_cluster.elected(), timeout=30)
    with draquota_cluster.disrupted():
        _lose_the_leader(s, draquota_cluster, replica)


def _lose_the_leader(s: Scenario, draquota_cluster: Draquota, replica: Replica) -> None:
    draquota_cluster.kill(replica)
    try:
        _create(s, gpu_pod("after-0", 1), gpu_pod("after-1", 1), gpu_pod("after-2", 1))
        eventually(lambda: _running(s) == ["after-0", "after-1"], timeout=90)
        assert eventually(lambda: draquota_cluster.elected(), timeout=30) is not replica
        time.sleep(3)  # a few more passes of the new leader: nothing more starts
        assert _running(s) == ["after-0", "after-1"]
        assert sorted(_waiting(s)) == ["after-2"]
        assert len(s.reservations()) == 2
    finally:
        draquota_cluster.restart(replica)


def _counts(status: dict[str, Any]) -> tuple[int, int]:
    """(admitted, pending) of a LocalQueue's status."""
    return status.get("admittedWorkloads", 0), status.get("pendingWorkloads", 0)


def _jobs(s: Scenario) -> dict[str, bool]:
    """Each Job of the scenario: True when it runs (unsuspended)."""
    out = s.cluster.kubectl("get", "jobs", "-n", s.namespace, "-o", "json").stdout
    return {j["metadata"]["name"]: not j["spec"].get("suspend") for j in json.loads(out)["items"]}


def test_six_two_gpu_jobs_two_run_four_wait_suspended_and_the_next_starts_in_order(
    draquota_cluster: Draquota,
) -> None:
    s = scenario(draquota_cluster, "e2e-qjobs", Flavor("j", 4, {"e2e-qjobs-1": 8})).queueing()
    for i in range(6):
        _create(s, gpu_job(f"job-{i}", gpus=2))
        time.sleep(1.1)  # creation timestamps have whole seconds: one apart keeps the order

    def two_run() -> bool:
        jobs = _jobs(s)
        assert jobs == {f"job-{i}": i < 2 for i in range(6)}, jobs
        return True

    eventually(two_run, timeout=90)
    eventually(lambda: _running(s) == sorted(_running(s)) and len(_running(s)) == 2, timeout=60)
    assert all(p["spec"]["nodeSelector"] == {POOL_LABEL: "e2e-qjobs-j"} for p in s.pods())
    eventually(lambda: s.usage("j") == [4.0] * 3, timeout=30)
    assert len(s.reservations()) == 2  # one record per running Job, none for its pods
    eventually(lambda: _counts(s.get("localqueue", "default")["status"]) == (2, 4), timeout=30)
    s.cluster.kubectl("delete", "job", "job-0", "-n", s.namespace, "--cascade=background")
    # no kubelet ends its pod: deleted at once, it holds nothing (its Job-tracking finalizer
    # may keep the object a while)
    s.cluster.kubectl(
        "delete", "pods", "-l", "job-name=job-0", "-n", s.namespace, "--grace-period=0",
        "--force", "--wait=false",
    )  # fmt: skip
    eventually(lambda: _jobs(s) == {f"job-{i}": i in (1, 2) for i in range(1, 6)}, timeout=90)
    eventually(lambda: s.usage("j") == [4.0] * 3, timeout=30)
