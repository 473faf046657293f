"""The QuotaLedger object: reservations of admissions in flight, stored in the cluster.

One cluster-scoped `draquota.io/v1beta1` QuotaLedger per cohort (`cohort-<cohort>`),
or per ClusterQueue without a cohort (`queue-<name>`): every admission that could
take quota another queue might borrow writes the same object, so the API server's
resourceVersion precondition serialises them across webhook replicas.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quota.charge import Charge
from quota.cluster import ClusterState
from quota.errors import DraquotaError
from webhook.kube.resources import QUOTA_LEDGER

__all__ = ["Reservation", "ledger_name", "ledger_object", "reservations_of"]


@dataclass(frozen=True)
class Reservation:
    """One entry of `spec.reservations`; `charge` is the annotation JSON."""

    id: str
    cluster_queue: str
    pod: str
    charge: str
    expires_at: float  # seconds since the epoch

    def to_dict(self) -> dict[str, Any]:
        expires = dt.datetime.fromtimestamp(self.expires_at, dt.UTC)
        return {
            "id": self.id,
            "clusterQueue": self.cluster_queue,
            "pod": self.pod,
            "charge": self.charge,
            "expiresAt": expires.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }

    def parsed_charge(self) -> Charge | None:
        try:
            return Charge.from_annotation(self.charge, f"QuotaLedger reservation {self.id}")
        except DraquotaError:
            return None


def _entry(raw: Any) -> Reservation | None:
    if not isinstance(raw, Mapping):
        return None
    try:
        expires = dt.datetime.fromisoformat(str(raw.get("expiresAt")).replace("Z", "+00:00"))
    except ValueError:
        return None
    rid, queue, charge = raw.get("id"), raw.get("clusterQueue"), raw.get("charge")
    if not (isinstance(rid, str) and isinstance(queue, str) and isinstance(charge, str)):
        return None
    return Reservation(rid, queue, str(raw.get("pod") or ""), charge, expires.timestamp())


def reservations_of(obj: Mapping[str, Any] | None) -> list[Reservation]:
    """The well-formed entries of a QuotaLedger object (malformed ones are dropped)."""
    if not obj:
        return []
    spec = obj.get("spec") or {}
    raw = spec.get("reservations") if isinstance(spec, Mapping) else None
    if not isinstance(raw, list):
        return []
    return [e for e in map(_entry, raw) if e is not None]


def ledger_object(
    name: str, entries: Sequence[Reservation], resource_version: str | None
) -> dict[str, Any]:
    """The body to create (no resourceVersion) or update (with the version read) a ledger."""
    metadata: dict[str, Any] = {"name": name}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": QUOTA_LEDGER.api_version,
        "kind": QUOTA_LEDGER.kind,
        "metadata": metadata,
        "spec": {"reservations": [e.to_dict() for e in entries]},
    }


def ledger_name(state: ClusterState, cluster_queue: str) -> str:
    """`cohort-<cohort>` when the queue is in a cohort, else `queue-<cluster_queue>`."""
    queue = state.get("ClusterQueue", None, cluster_queue) or {}
    spec = queue.get("spec") or {}
    cohort = spec.get("cohort") if isinstance(spec, Mapping) else None
    if isinstance(cohort, str) and cohort:
        return f"cohort-{cohort}"
    return f"queue-{cluster_queue}"
