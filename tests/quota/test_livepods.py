"""Which pods hold quota and what a live pod is charged (`quota.livepods`).

Liveness is ResourceQuota's rule (phases, deletion with and without a grace period, the grace
boundary), read from pods as the real API server serves them (tests/recorded.py); a live pod is
charged the larger of its admission record and what its claims cost now.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from quota.charge import Charge
from quota.cluster import ClusterView
from quota.livepods import (
    ADMISSION_GATE,
    is_gated,
    is_live_job,
    is_live_pod,
    job_owner,
    live_pod_charge,
    pod_key,
    released_at,
    usage_from_pods,
)
from quota.settings import Settings
from tests.recorded import epoch, recorded, recorded_object, recorded_objects

GPU_CLASS = "gpu.example.com"
DELETED = "2027-01-15T08:00:00Z"
AT = epoch(DELETED)


def _pod(
    phase: str | None = "Running", deleted: str | None = None, grace: Any = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if deleted is not None:
        metadata["deletionTimestamp"] = deleted
    if grace is not None:
        metadata["deletionGracePeriodSeconds"] = grace
    obj: dict[str, Any] = {"kind": "Pod", "metadata": metadata, "spec": {}}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


@pytest.mark.parametrize(
    ("phase", "live"),
    [
        ("Pending", True),
        ("Running", True),
        ("Unknown", True),
        (None, True),  # just created: no status yet
        ("Succeeded", False),
        ("Failed", False),
    ],
)
def test_a_pod_holds_quota_until_it_succeeds_or_fails(phase: str | None, live: bool) -> None:
    assert is_live_pod(_pod(phase), AT) is live


@pytest.mark.parametrize(
    ("grace", "seconds_after_deletion", "live"),
    [
        pytest.param(30, 0, True, id="in-grace"),
        pytest.param(30, 29.5, True, id="just-before-grace-ends"),
        pytest.param(30, 30, True, id="grace-boundary-still-holds"),
        pytest.param(30, 30.5, False, id="just-after-grace-ends"),
        pytest.param(0, 0, True, id="no-grace-at-the-deletion-instant"),
        pytest.param(0, 1, False, id="no-grace-a-second-later"),
        pytest.param(-5, 1, False, id="negative-grace-is-none"),
        pytest.param(None, 10**9, True, id="deleted-without-grace-on-record-holds-until-gone"),
        pytest.param(True, 10**9, True, id="grace-not-an-integer-holds-until-gone"),
        pytest.param("30", 10**9, True, id="grace-as-text-holds-until-gone"),
    ],
)
def test_a_deleted_pod_holds_quota_until_its_grace_period_ends(
    grace: Any, seconds_after_deletion: float, live: bool
) -> None:
    assert is_live_pod(_pod("Running", DELETED, grace), AT + seconds_after_deletion) is live


def test_a_terminal_pod_holds_nothing_even_within_its_grace_period() -> None:
    assert not is_live_pod(_pod("Succeeded", DELETED, 3600), AT)


@pytest.mark.parametrize("stamp", ["yesterday", "", 12345])
def test_a_deletion_timestamp_that_cannot_be_read_keeps_the_pod_holding(stamp: Any) -> None:
    pod = _pod("Running", stamp, 30)
    assert released_at(pod) is None
    assert is_live_pod(pod, AT + 10**9)


@pytest.mark.parametrize("name", ["tune-0", "tune-25mz2"])
def test_a_pod_deleted_on_the_api_server_is_released_when_its_grace_ends(name: str) -> None:
    pod = recorded_object("Pod", "ml", name)
    metadata = pod["metadata"]
    release = epoch(metadata["deletionTimestamp"]) + metadata["deletionGracePeriodSeconds"]
    assert released_at(pod) == release
    assert is_live_pod(pod, release)
    assert not is_live_pod(pod, release + 1)


def test_draquotas_gate_marks_a_waiting_pod_and_no_other_gate_does() -> None:
    waiting = {pod_key(p) for p in recorded("Pod") if is_gated(p)}
    gates = {
        pod_key(p)
        for p in recorded("Pod")
        if any(g["name"] == ADMISSION_GATE for g in p["spec"].get("schedulingGates", []))
    }
    assert waiting == gates and waiting  # the recording has pods waiting in their queue
    other = _pod()
    other["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    assert not is_gated(other)
    other["spec"]["schedulingGates"] = "not-a-list"
    assert not is_gated(other)


def test_the_job_controlling_a_pod_is_named_by_its_uid() -> None:
    job = recorded_object("Job", "ml", "tune")
    pods = {pod_key(p): job_owner(p) for p in recorded("Pod")}
    assert pods.pop("ml/tune-25mz2") == job["metadata"]["uid"]
    assert set(pods.values()) == {""}  # the others are pods of their own


@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        pytest.param({"kind": "Job", "uid": "u1", "controller": False}, "", id="not-controller"),
        pytest.param({"kind": "ReplicaSet", "uid": "u1", "controller": True}, "", id="not-a-job"),
        pytest.param({"kind": "Job", "uid": 7, "controller": True}, "", id="uid-not-text"),
        pytest.param({"kind": "Job", "uid": "u1", "controller": True}, "u1", id="job"),
    ],
)
def test_only_a_controlling_job_owns_a_pod(owner: dict[str, Any], expected: str) -> None:
    pod = _pod()
    pod["metadata"]["ownerReferences"] = [owner]
    assert job_owner(pod) == expected


def _condition(kind: str, status: str) -> dict[str, Any]:
    return {"type": kind, "status": status}


@pytest.mark.parametrize(
    ("conditions", "deleted", "live"),
    [
        pytest.param([], False, True, id="running"),
        pytest.param([_condition("Suspended", "True")], False, True, id="suspended"),
        pytest.param([_condition("Complete", "True")], False, False, id="complete"),
        pytest.param([_condition("Failed", "True")], False, False, id="failed"),
        pytest.param([_condition("Complete", "False")], False, True, id="not-yet-complete"),
        pytest.param([], True, False, id="deleted"),
    ],
)
def test_a_job_holds_its_record_until_it_finishes_or_is_deleted(
    conditions: list[dict[str, Any]], deleted: bool, live: bool
) -> None:
    job = recorded_object("Job", "ml", "tune")
    job["status"]["conditions"] = conditions
    if deleted:
        job["metadata"]["deletionTimestamp"] = DELETED
    assert is_live_job(job) is live


def _view(*changed: dict[str, Any]) -> ClusterView:
    objects = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
               for o in (*recorded_objects(), *changed)}  # fmt: skip
    return ClusterView.of(objects.values())


def _recorded_time() -> float:
    """A moment of the recording: the terminating pods still in their grace period."""
    return min(epoch(p["metadata"]["deletionTimestamp"]) for p in recorded("Pod")
               if "deletionTimestamp" in p["metadata"])  # fmt: skip


def _generated_claim(pod_name: str, gpus: int) -> dict[str, Any]:
    pod = recorded_object("Pod", "ml", pod_name)
    name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = recorded_object("ResourceClaim", "ml", name)
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = gpus
    return claim


def test_a_live_pod_is_charged_what_its_generated_claims_cost_now() -> None:
    view = _view(_generated_claim("tune-0", 3))  # the template still asks for one
    charge = live_pod_charge(recorded_object("Pod", "ml", "tune-0"), view, Settings(), 0.0)
    assert charge is not None and charge.per_pod == {"gpus": 3}


def test_an_admission_record_is_never_lowered_by_what_the_pod_costs_now() -> None:
    pod = recorded_object("Pod", "ml", "tune-0")
    now = live_pod_charge(pod, _view(), Settings(), 0.0)
    assert now is not None
    record = dataclasses.replace(now, per_pod={"gpus": 4}, device_classes={GPU_CLASS: 4})
    assert live_pod_charge(pod, _view(), Settings(), 0.0, record) == record
    grown = live_pod_charge(pod, _view(_generated_claim("tune-0", 6)), Settings(), 0.0, record)
    assert grown is not None and grown.per_pod == {"gpus": 6}
    assert grown.flavors == record.flavors


def test_a_gated_pod_holds_nothing_until_draquota_records_it() -> None:
    pod = recorded_object("Pod", "research", "r-2")
    assert is_gated(pod)
    assert live_pod_charge(pod, _view(), Settings(), 0.0) is None
    record = Charge("research", "research/default", {"gpus": "lab"}, {"gpus": 1})
    assert live_pod_charge(pod, _view(), Settings(), 0.0, record) is not None


def test_a_pod_past_its_grace_holds_nothing_even_with_a_record() -> None:
    pod = recorded_object("Pod", "ml", "tune-0")
    release = released_at(pod)
    assert release is not None
    record = live_pod_charge(pod, _view(), Settings(), release)
    assert record is not None
    assert live_pod_charge(pod, _view(), Settings(), release + 1, record) is None


def test_usage_of_the_recorded_cluster_is_what_its_live_ungated_pods_hold() -> None:
    now = _recorded_time()
    usage = usage_from_pods(_view(), Settings(), now)
    holding = {pod_key(p) for p in recorded("Pod") if is_live_pod(p, now) and not is_gated(p)}
    assert usage.holders() == holding
    terminating = {pod_key(p) for p in recorded("Pod") if released_at(p) is not None}
    later = max(r for p in recorded("Pod") if (r := released_at(p)) is not None) + 1
    assert usage_from_pods(_view(), Settings(), later).holders() == holding - terminating


def test_usage_counts_a_pods_record_by_its_uid() -> None:
    pod = recorded_object("Pod", "research", "r-2")  # gated: nothing without its record
    record = Charge("research", "research/default", {"gpus": "lab"}, {"gpus": 2}, {GPU_CLASS: 2})
    usage = usage_from_pods(_view(), Settings(), 0.0, {pod["metadata"]["uid"]: record})
    assert usage.charge_of("research/r-2") == record


def test_a_pod_without_a_namespace_is_held_in_default() -> None:
    assert pod_key({"metadata": {"name": "p"}}) == "default/p"
    stamp = dt.datetime.fromtimestamp(AT, dt.UTC).isoformat()  # an offset, not `Z`
    assert released_at(_pod("Running", stamp, 5)) == AT + 5
