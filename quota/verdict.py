"""What an admission check answers: a `Decision`, and the denials built from bad input."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from quota.charge import Charge
from quota.errors import DraquotaError, NotFound, ObjectRef

__all__ = [
    "Decision",
    "Verdict",
    "deny",
    "refusal",
]


class Verdict(enum.Enum):
    """How an admission check ends; the shell maps each refusal to its own answer."""

    ADMITTED = "Admitted"
    """Allowed: admitted, queued (the pod waits, gated) or not managed by draquota."""
    DENIED = "Denied"
    """A valid object that draquota refuses: over quota, unplaceable, a missing object."""
    INVALID = "Invalid"
    """A malformed object: draquota cannot read what it asks for."""


@dataclass(frozen=True)
class Decision:
    """A verdict, with a CamelCase reason and a message."""

    verdict: Verdict
    reason: str
    message: str = ""
    warnings: tuple[str, ...] = ()
    charge: Charge | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    local_queue_name: str | None = None  # of the LocalQueue the object was routed to
    queued: bool = False  # allowed into a queueing ClusterQueue: the pod waits, gated
    shortfall: str = ""  # of a QuotaExceeded denial: what is missing, in which flavors
    # of a denial for missing objects: every one the decision looked up and did not find
    missing: tuple[ObjectRef, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ADMITTED


def deny(reason: str, message: str, queue: str | None = None, invalid: bool = False) -> Decision:
    verdict = Verdict.INVALID if invalid else Verdict.DENIED
    return Decision(verdict, reason, message, local_queue_name=queue)


def _sentence(message: str) -> str:
    """Kubernetes message style: errors start with the object (`Pod ns/name`), lowercased."""
    return message[:1].lower() + message[1:]


def refusal(exc: DraquotaError) -> Decision:
    """The denial for bad input: a missing object is DENIED naming it (and listing in
    `missing` all the objects found missing), anything else INVALID."""
    if isinstance(exc, NotFound):
        kind = "ClaimNotFound" if exc.kind.startswith("ResourceClaim") else "NotFound"
        return replace(deny(kind, _sentence(str(exc))), missing=exc.missing)
    return deny("InvalidObject", _sentence(str(exc)), invalid=True)
