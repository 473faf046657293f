"""What draquota told the user of a waiting pod or Job, read back from the objects.

The queueing controller shows why a workload waits in two places with one message: a
pod's `QuotaReserved` condition (status False while it waits) and a `Pending` Event on the
pod or Job (`webhook.kube.podwriter` writes both). The message is `quota.waiting.Wait`'s:
the reason, then `; position N of M in ClusterQueue Q` when the workload has a place in
line. Readers (`draquota status`, the dashboard) read the position from that message
rather than working it out again, so that they always agree with `kubectl describe`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMPONENT",
    "PENDING",
    "PENDING_EVENTS",
    "QUOTA_RESERVED",
    "ShownWait",
    "latest_messages",
    "parse_wait",
    "pending_messages",
    "quota_reserved",
]

QUOTA_RESERVED = "QuotaReserved"  # the pod condition, and the Event of an admission
PENDING = "Pending"  # the condition's reason while it waits, and the Event saying why
COMPONENT = "draquota"  # the Events' source.component
PENDING_EVENTS = f"reason={PENDING},source={COMPONENT}"  # their field selector
_POSITION = re.compile(
    r"^(?P<reason>.*); position (?P<at>\d+) of (?P<of>\d+) in ClusterQueue (?P<cq>\S+)$"
)


@dataclass(frozen=True)
class ShownWait:
    """A waiting message taken apart; no position for a workload that has no place in line
    yet (an incomplete pod group, one that can never start) or no message at all."""

    reason: str
    position: int | None = None
    of: int | None = None
    cluster_queue: str | None = None


def parse_wait(message: str) -> ShownWait:
    """The reason, position and ClusterQueue of a waiting message. Without a position, a
    ClusterQueue named in the reason may be a lender, not the queue the workload waits in."""
    match = _POSITION.match(message)
    if match is None:
        return ShownWait(message)
    return ShownWait(match["reason"], int(match["at"]), int(match["of"]), match["cq"])


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def quota_reserved(pod: Mapping[str, Any]) -> tuple[str, str]:
    """The status and message of the pod's `QuotaReserved` condition ("", "" when none)."""
    conditions = _mapping(pod.get("status")).get("conditions")
    for condition in map(_mapping, conditions if isinstance(conditions, list) else ()):
        if condition.get("type") == QUOTA_RESERVED:
            return str(condition.get("status") or ""), str(condition.get("message") or "")
    return "", ""


def pending_messages(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """UID of the object -> the message of draquota's latest `Pending` Event about it."""
    return latest_messages(events, PENDING)


def latest_messages(events: Iterable[Mapping[str, Any]], reason: str) -> dict[str, str]:
    """UID of the object -> the message of draquota's latest Event with `reason` about it."""
    latest: dict[str, tuple[str, str]] = {}
    for event in events:
        involved, source = _mapping(event.get("involvedObject")), _mapping(event.get("source"))
        if event.get("reason") != reason or source.get("component") != COMPONENT:
            continue
        uid, when = str(involved.get("uid") or ""), str(event.get("lastTimestamp") or "")
        if uid and when >= latest.get(uid, ("", ""))[0]:
            latest[uid] = (when, str(event.get("message") or ""))
    return {uid: message for uid, (_, message) in latest.items()}
