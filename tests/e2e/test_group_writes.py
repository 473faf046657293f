"""Pod groups on the real control plane: a waiting group writes nothing to the QuotaLedger.

A group whose last pod did not fit was recorded pod by pod and rolled back on every
controller pass (1,485 QuotaLedger writes in 42 s). Now a group is decided as a whole in
memory first: while it waits, the QuotaLedger objects of its queue keep their
resourceVersions; a group that could never fit in its queue is denied as its pods are
created.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from quota.waiting import ADMISSION_GATE, GROUP_LABEL, GROUP_TOTAL_ANNOTATION
from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import Flavor, Scenario, gpu_pod, scenario

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
