"""Reading back what draquota told the user of a waiting workload (quota.waitreport)."""

from __future__ import annotations

import pytest

from quota.waiting import Wait
from quota.waitreport import ShownWait, parse_wait, pending_messages, quota_reserved

WHY = "waiting for quota: insufficient unused quota for gpus, 2 more needed; 2 lent to ml"


@pytest.mark.parametrize(
    ("wait", "shown"),
    [
        (Wait(WHY, "research", 3, 4), ShownWait(WHY, 3, 4, "research")),
        # no place in line yet: the message is the reason alone, whatever it names
        (
            Wait("waiting for the pods of pod group r/g: 1 of 3 exist", "r"),
            ShownWait("waiting for the pods of pod group r/g: 1 of 3 exist"),
        ),
    ],
    ids=["positioned", "incomplete-group"],
)
def test_the_message_the_controller_writes_reads_back(wait: Wait, shown: ShownWait) -> None:
    assert parse_wait(wait.message) == shown


def _event(uid: str, reason: str, when: str, message: str, component: str = "draquota") -> dict:
    return {"involvedObject": {"uid": uid}, "source": {"component": component},
            "reason": reason, "lastTimestamp": when, "message": message}  # fmt: skip


def test_the_latest_pending_event_of_draquota_is_the_message() -> None:
    events = [
        _event("a", "Pending", "2026-11-27T10:00:01Z", "position 2"),
        _event("a", "Pending", "2026-11-27T10:00:05Z", "position 1"),
        _event("a", "QuotaReserved", "2026-11-27T10:00:09Z", "admitted"),
        _event("b", "Pending", "2026-11-27T10:00:09Z", "not ours", component="kueue"),
        {"involvedObject": "garbled", "reason": "Pending"},
    ]
    assert pending_messages(events) == {"a": "position 1"}


def test_the_quota_reserved_condition_is_read_with_its_status() -> None:
    pod = {"status": {"conditions": [
        {"type": "Ready", "status": "False", "message": "no"},
        {"type": "QuotaReserved", "status": "False", "message": WHY},
    ]}}  # fmt: skip
    assert quota_reserved(pod) == ("False", WHY)
    assert quota_reserved({"status": {"conditions": "garbled"}}) == ("", "")
