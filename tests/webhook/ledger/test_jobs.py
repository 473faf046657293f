"""`JobSlots`, the Jobs admitted as a whole and which of their pods hold a slot of the record
(webhook/ledger/jobs.py), on its own: records and the time are handed in, as `PodUsage` does.

What a user notices: the record covers the oldest pods holding a slot, a pod terminating
keeps its slot until its grace ends and then the next pod takes it, a pod with a record of
its own or a gated pod takes no slot, and a finished or replaced Job covers nobody.
`PodUsage`'s charges built on this are in tests/webhook/ledger/test_podusage.py.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from quota.charge import Charge
from tests.webhook.builders import FLAVOR, NAMESPACE, QUEUE, pod
from webhook.ledger.jobs import JobSlots

JOB_UID = "uid-job-train"
JOB_KEY = f"{NAMESPACE}/train"
NOW = 1_800_000_000.0
GRACE = 30
RECORD = Charge(QUEUE, f"{NAMESPACE}/default", {"gpu": FLAVOR}, {"gpu": 2}, pods=2)


def _stamp(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")


def _job(uid: str = JOB_UID, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": NAMESPACE, "uid": uid},
        "spec": {"parallelism": 2, "template": {"spec": pod("template")["spec"]}},
        "status": status,
    }


def _job_pod(name: str, age: int) -> dict[str, Any]:
    """A pod of Job `train`, created `age` seconds after the first."""
    obj = pod(name)
    owner = {"kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}
    obj["metadata"].update(
        uid=f"uid-{name}", creationTimestamp=_stamp(1_700_000_000 + age), ownerReferences=[owner]
    )
    return obj


def _deleted(obj: dict[str, Any], at: float) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(deletionTimestamp=_stamp(at), deletionGracePeriodSeconds=GRACE)
    return obj


def _slots(*pods: dict[str, Any], records: dict[str, Charge] | None = None) -> JobSlots:
    """Job `train` recorded for two pods, with `pods` cached and their slots noted at NOW.

    A cover is found when asked (`covers`, as `PodUsage` asks when it charges a pod): only
    then does a later slot change answer whose cover moved."""
    records = {JOB_UID: RECORD} if records is None else records
    slots = JobSlots()
    assert slots.put(JOB_KEY, _job()) == ""
    for obj in pods:
        slots.add_pod(JOB_UID, f"{NAMESPACE}/{obj['metadata']['name']}", obj)
    for obj in pods:
        slots.update_slot(JOB_UID, f"{NAMESPACE}/{obj['metadata']['name']}", obj, records, NOW)
    return slots


def _covered(slots: JobSlots, records: dict[str, Charge], now: float = NOW) -> set[str]:
    keys = [f"{NAMESPACE}/p{i}" for i in range(4)]
    return {key for key in keys if slots.covers(JOB_UID, key, records, now)}


def test_the_record_covers_the_oldest_pods_holding_a_slot() -> None:
    records = {JOB_UID: RECORD}
    slots = _slots(_job_pod("p2", 2), _job_pod("p0", 0), _job_pod("p1", 1))
    assert _covered(slots, records) == {f"{NAMESPACE}/p0", f"{NAMESPACE}/p1"}
    assert slots.held_slots(JOB_UID, besides="", records=records, now=NOW) == 3
    assert slots.held_slots(JOB_UID, besides="uid-p0", records=records, now=NOW) == 2
    share = slots.share(JOB_UID, records)
    assert share is not None and share.per_pod == {"gpu": 1}


def test_a_terminating_pod_keeps_its_slot_until_its_grace_ends_then_the_next_takes_it() -> None:
    records = {JOB_UID: RECORD}
    p0, p1, p2 = _job_pod("p0", 0), _job_pod("p1", 1), _job_pod("p2", 2)
    slots = _slots(p0, p1, p2)
    p0 = _deleted(p0, NOW)
    slots.add_pod(JOB_UID, f"{NAMESPACE}/p0", p0)
    assert slots.update_slot(JOB_UID, f"{NAMESPACE}/p0", p0, records, NOW + GRACE) == []
    assert _covered(slots, records, NOW + GRACE) == {f"{NAMESPACE}/p0", f"{NAMESPACE}/p1"}
    assert slots.holding(f"{NAMESPACE}/p0")
    later = NOW + GRACE + 1
    moved = slots.update_slot(JOB_UID, f"{NAMESPACE}/p0", p0, records, later)
    assert moved == [f"{NAMESPACE}/p2"]  # p0 gave its slot up: p2 is charged differently now
    assert not slots.holding(f"{NAMESPACE}/p0")
    assert _covered(slots, records, later) == {f"{NAMESPACE}/p1", f"{NAMESPACE}/p2"}


def test_a_pod_leaving_frees_its_slot_for_the_next() -> None:
    records = {JOB_UID: RECORD}
    slots = _slots(_job_pod("p0", 0), _job_pod("p1", 1), _job_pod("p2", 2))
    assert _covered(slots, records) == {f"{NAMESPACE}/p0", f"{NAMESPACE}/p1"}
    assert slots.remove_pod(JOB_UID, f"{NAMESPACE}/p1", records, NOW) == [f"{NAMESPACE}/p2"]
    assert _covered(slots, records) == {f"{NAMESPACE}/p0", f"{NAMESPACE}/p2"}
    assert slots.held_slots(JOB_UID, besides="", records=records, now=NOW) == 2


def test_a_pod_with_a_record_of_its_own_or_gated_takes_no_slot() -> None:
    gated = _job_pod("p1", 1)
    gated["spec"]["schedulingGates"] = [{"name": "draquota.io/admission"}]
    records = {JOB_UID: RECORD, "uid-p0": RECORD}
    slots = _slots(_job_pod("p0", 0), gated, _job_pod("p2", 2), records=records)
    assert _covered(slots, records) == {f"{NAMESPACE}/p2"}
    assert slots.held_slots(JOB_UID, besides="", records=records, now=NOW) == 1


def test_a_finished_job_covers_nobody_and_has_no_share() -> None:
    records = {JOB_UID: RECORD}
    slots = _slots(_job_pod("p0", 0))
    assert slots.put(JOB_KEY, _job(conditions=[{"type": "Complete", "status": "True"}])) == ""
    assert slots.forget_cover(JOB_UID) == [f"{NAMESPACE}/p0"]
    assert _covered(slots, records) == set()
    assert slots.share(JOB_UID, records) is None


def test_a_job_replaced_under_its_name_leaves_with_its_uid() -> None:
    records = {JOB_UID: RECORD}
    slots = _slots(_job_pod("p0", 0))
    assert slots.put(JOB_KEY, _job(uid="uid-job-new")) == JOB_UID
    assert slots.key_of(JOB_UID) is None and slots.key_of("uid-job-new") == JOB_KEY
    assert _covered(slots, records) == set()  # its pods belong to a Job that is gone
    assert slots.departed_from({JOB_KEY: _job(uid="uid-job-new")}) == []
    assert slots.departed_from({}) == ["uid-job-new"]
    assert slots.put(JOB_KEY, None) == "uid-job-new"
    assert slots.job(JOB_KEY) is None
