"""What an admission check answers: a `Decision`, and the denials built from bad input."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from quota.charge import Charge
from quota.errors import DraquotaError, NotFound

__all__ = [
    "Decision",
    "deny",
    "refusal",
]


@dataclass(frozen=True)
class Decision:
    """Allowed or denied, with an HTTP-style code, a CamelCase reason and a message."""

    allowed: bool
    code: int
    reason: str
    message: str = ""
    warnings: tuple[str, ...] = ()
    charge: Charge | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    queue_name: str | None = None
    queued: bool = False  # allowed into a queueing ClusterQueue: the pod waits, gated
    shortfall: str = ""  # of a QuotaExceeded denial: what is missing, in which flavors


def deny(reason: str, message: str, code: int = 403, queue: str | None = None) -> Decision:
    return Decision(False, code, reason, message, queue_name=queue)


def _sentence(message: str) -> str:
    """Kubernetes message style: errors start with the object (`Pod ns/name`), lowercased."""
    return message[:1].lower() + message[1:]


def refusal(exc: DraquotaError) -> Decision:
    """The denial for bad input: a missing object is a 403 naming it, anything else a 400."""
    if isinstance(exc, NotFound):
        kind = "ClaimNotFound" if exc.kind.startswith("ResourceClaim") else "NotFound"
        return deny(kind, _sentence(str(exc)))
    return deny("InvalidObject", _sentence(str(exc)), code=400)
