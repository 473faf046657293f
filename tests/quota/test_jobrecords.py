"""Which pods a Job's record covers (`quota.jobrecords`): the oldest `pods` of them holding a
slot by ResourceQuota's rule, each pod at most its share."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from quota.charge import Charge, share, times, within
from quota.jobrecords import covered_keys, holds_slot, slots
from quota.waiting import ADMISSION_GATE

NOW = 1_800_000_000.0
ONE_POD = Charge("cq", "team-a/default", {"gpu": "a100"}, {"gpu": 2}, {"gpu.example.com": 2})


def job(parallelism: int, completions: int | None = None) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    spec: dict[str, Any] = {"parallelism": parallelism, "template": template}
    if completions is not None:
        spec["completions"] = completions
    return {"kind": "Job", "metadata": {"name": "train", "namespace": "team-a"}, "spec": spec}


def pod(name: str, created: str = "2027-01-15T08:00:00Z", **state: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "creationTimestamp": created}
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {"phase": state.get("phase", "Running")}
    if "deleted" in state:  # seconds before NOW, with a grace period
        at = NOW - state["deleted"]
        stamp = dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")
        metadata.update(deletionTimestamp=stamp, deletionGracePeriodSeconds=state["grace"])
    if state.get("gated"):
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return {"kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("record", "the_job", "expected"),
    [
        pytest.param(times(ONE_POD, 3), job(1), 3, id="as-recorded"),
        pytest.param(ONE_POD, job(2, 5), 2, id="legacy-record-the-jobs-parallelism"),
        pytest.param(ONE_POD, job(4, 1), 1, id="legacy-record-fewer-completions"),
        pytest.param(ONE_POD, None, 0, id="legacy-record-without-its-job"),
    ],
)
def test_slots(record: Charge, the_job: dict[str, Any] | None, expected: int) -> None:
    assert slots(record, the_job) == expected


@pytest.mark.parametrize(
    ("the_pod", "own_record", "holds"),
    [
        pytest.param(pod("running"), False, True, id="running"),
        pytest.param(pod("done", phase="Succeeded"), False, False, id="succeeded"),
        pytest.param(pod("failed", phase="Failed"), False, False, id="failed"),
        pytest.param(pod("terminating", deleted=10, grace=60), False, True, id="in-grace"),
        pytest.param(pod("gone", deleted=100, grace=30), False, False, id="grace-over"),
        pytest.param(pod("waiting", gated=True), False, False, id="gated-waits-on-its-own"),
        pytest.param(pod("own"), True, False, id="with-a-record-of-its-own"),
    ],
)
def test_holds_slot(the_pod: dict[str, Any], own_record: bool, holds: bool) -> None:
    records = {the_pod["metadata"]["uid"]: ONE_POD} if own_record else {}
    assert holds_slot(the_pod, records, NOW) is holds


def test_the_oldest_pods_holding_a_slot_are_covered_and_no_more() -> None:
    pods = [
        ("ns/c", pod("c", "2027-01-15T08:00:03Z")),
        ("ns/a", pod("a", "2027-01-15T08:00:01Z", deleted=10, grace=86_400)),
        ("ns/b", pod("b", "2027-01-15T08:00:02Z")),
        ("ns/d", pod("d", "2027-01-15T08:00:00Z", phase="Succeeded")),
    ]
    assert covered_keys(times(ONE_POD, 2), job(2), pods, {}, NOW) == {"ns/a", "ns/b"}
    assert covered_keys(times(ONE_POD, 3), job(3), pods, {}, NOW) == {"ns/a", "ns/b", "ns/c"}


def test_a_share_is_one_pods_charge_and_within_compares_amounts() -> None:
    record = times(ONE_POD, 3)
    assert (record.pods, record.per_pod["gpu"]) == (3, 6)
    one = share(record, 3)
    assert one.per_pod == ONE_POD.per_pod and one.device_classes == ONE_POD.device_classes
    assert within(ONE_POD, one)
    larger = Charge("cq", "team-a/default", {"gpu": "a100"}, {"gpu": 4}, {"gpu.example.com": 4})
    assert not within(larger, one)
    other_class = Charge("cq", "team-a/default", {}, {}, {"nic.example.com": 1})
    assert not within(other_class, one)


def test_a_jobs_record_keeps_its_pod_count_through_its_text() -> None:
    record = times(ONE_POD, 4)
    assert Charge.from_annotation(record.to_annotation(), "QuotaLedger x") == record
    assert '"pods":4' in record.to_annotation()
    assert '"pods"' not in ONE_POD.to_annotation()  # a pod's own record is written as before
