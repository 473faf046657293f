"""Pod groups on the real control plane: a waiting group writes nothing to the QuotaLedger.

A group whose last pod did not fit was recorded pod by pod and rolled back on every
controller pass (1,485 QuotaLedger writes in 42 s). Now a group is decided as a whole in
memory first: while it waits, the QuotaLedger objects of its queue keep their
resourceVersions; a group that could never fit in its queue is denied as its pods are
created. A big group's records fill several QuotaLedger shards, which are deleted again
once its pods are gone, and `draquota_ledger_writes_total` counts every record written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from quota.waiting import ADMISSION_GATE, GROUP_LABEL, GROUP_TOTAL_ANNOTATION
from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import UNSCHEDULED, Flavor, Scenario, gpu_pod, scenario

pytestmark = pytest.mark.e2e


def _member(name: str, group: str, total: int) -> dict[str, Any]:
    pod = gpu_pod(name, 1, {GROUP_LABEL: group})
    pod["metadata"]["annotations"] = {GROUP_TOTAL_ANNOTATION: str(total)}
    return pod


def _create(s: Scenario, *pods: dict[str, Any], check: bool = True) -> Any:
    return s.cluster.kubectl(
        "create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump_all(pods), check=check
    )


def _running(s: Scenario) -> list[str]:
    """Pods the queue admitted and the scheduler bound."""
    return sorted(
        p["metadata"]["name"]
        for p in s.pods()
        if {"name": ADMISSION_GATE} not in p["spec"].get("schedulingGates", [])
        and p["spec"].get("nodeName")
        and "deletionTimestamp" not in p["metadata"]
    )


def _waits_for_quota(s: Scenario, name: str) -> str:
    """The message of the pod's QuotaReserved condition when it says it waits for quota."""
    conditions = s.get("pod", name).get("status", {}).get("conditions", [])
    message = next((c["message"] for c in conditions if c["type"] == "QuotaReserved"), "")
    return message if message.startswith("waiting for quota") else ""


def _ledger_versions(s: Scenario) -> dict[str, str]:
    """resourceVersion of each QuotaLedger of the scenario's queue (no cohort: its own)."""
    items = json.loads(s.cluster.kubectl("get", "quotaledgers", "-o", "json").stdout)["items"]
    prefix = f"queue-{s.name}-"
    return {
        i["metadata"]["name"]: i["metadata"]["resourceVersion"]
        for i in items
        if i["metadata"]["name"].startswith(prefix)
    }


def test_a_group_that_could_never_fit_is_denied_as_its_pods_are_created(
    draquota_cluster: Draquota,
) -> None:
    s = scenario(draquota_cluster, "e2e-gw-deny", Flavor("d", 2, {"e2e-gw-deny-1": 8}))
    s.queueing()
    out = _create(s, _member("trio-0", "trio", 3), check=False)
    assert out.returncode != 0
    assert f"pod {s.namespace}/trio-0: pod group {s.namespace}/trio of 3 pods" in out.stderr
    assert "3 pods x 1 = 3 > maximum capacity 2 (nominal 2)" in out.stderr
    assert s.pods() == []


def test_a_waiting_group_leaves_the_quota_ledger_alone_then_starts_all_together(
    draquota_cluster: Draquota,
) -> None:
    s = scenario(draquota_cluster, "e2e-gw-wait", Flavor("w", 3, {"e2e-gw-wait-1": 8}))
    s.queueing()
    # another queue: what its pods' admission proves is that the controller made passes
    other = scenario(draquota_cluster, "e2e-gw-other", Flavor("o", 3, {"e2e-gw-other-1": 8}))
    other.queueing()
    _create(s, gpu_pod("single", 1))
    eventually(lambda: _running(s) == ["single"], timeout=60)
    _create(s, *(_member(f"trio-{i}", "trio", 3) for i in range(3)))
    eventually(lambda: _waits_for_quota(s, "trio-2"), timeout=30)
    before = _ledger_versions(s)
    assert before  # single's record is there
    for i in range(3):  # each admitted by a pass that began after the one before it
        _create(other, gpu_pod(f"pass-{i}", 1))
        eventually(lambda i=i: f"pass-{i}" in _running(other), timeout=60)
    assert _ledger_versions(s) == before
    assert "1 more needed (requested 3, in use 1 of nominal 3)" in _waits_for_quota(s, "trio-0")
    assert _running(s) == ["single"]
    s.cluster.kubectl(
        "delete", "pod", "single", "-n", s.namespace, "--grace-period=0", "--force", "--wait=true"
    )
    eventually(lambda: _running(s) == ["trio-0", "trio-1", "trio-2"], timeout=60)
    eventually(lambda: s.usage("w") == [3.0] * 3, timeout=30)


def _records(s: Scenario, outcome: str) -> float:
    """Records of the scenario's queue counted by every replica with this outcome."""
    counts = [
        r.metric("draquota_ledger_writes_total", cluster_queue=s.name, outcome=outcome)
        for r in s.installed.replicas
    ]
    return sum(c or 0.0 for c in counts)


def _admitted(s: Scenario) -> int:
    """Pods the queue admitted (ungated), bound or not."""
    return sum(
        1
        for p in s.pods()
        if {"name": ADMISSION_GATE} not in p["spec"].get("schedulingGates", [])
        and "deletionTimestamp" not in p["metadata"]
    )


def test_a_big_groups_quota_ledgers_go_once_its_pods_do_and_its_writes_are_counted(
    draquota_cluster: Draquota,
) -> None:
    size = 300  # about three shards of records (32 KiB each)
    nodes = {f"e2e-gw-big-{i}": size // 3 for i in range(1, 4)}  # a slice holds 128 at most
    s = scenario(draquota_cluster, "e2e-gw-big", Flavor("b", size, nodes))
    s.queueing()
    written = _records(s, "written")
    out = _create(s, _member("never-0", "never", size + 1), check=False)
    assert out.returncode != 0 and "maximum capacity" in out.stderr
    members = [_member(f"big-{i}", "big", size) for i in range(size)]
    for pod in members:  # admission is what is measured: no scheduler binds them
        pod["spec"]["schedulerName"] = UNSCHEDULED
    _create(s, *members)
    eventually(lambda: _admitted(s) == size, timeout=180)
    assert len(s.reservations()) == size
    shards = _ledger_versions(s)
    assert len(shards) >= 3  # shards filled, and the head
    # each member's record written once, by the queueing controller of one replica
    assert _records(s, "written") - written == size
    s.cluster.kubectl(  # 300 deletes, one by one: slower than the default 60 s under load
        "delete", "pods", "--all", "-n", s.namespace, "--grace-period=0", "--force", "--wait=true",
        timeout=240,
    )  # fmt: skip
    # records dropped by the reconcilers, then the emptied shards deleted after their grace:
    # the active shard and the head stay
    eventually(lambda: s.reservations() == [], timeout=60)
    eventually(lambda: len(_ledger_versions(s)) == 2, timeout=150, interval=2)
    assert _records(s, "removed") >= size
    deleted = [
        r.metric("draquota_ledger_shard_deletions_total", outcome="deleted")
        for r in s.installed.replicas
    ]
    assert sum(d or 0.0 for d in deleted) >= len(shards) - 2
