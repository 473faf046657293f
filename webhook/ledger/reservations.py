"""QuotaLedger objects: the admission records of a cohort, stored in the cluster.

An entry records what draquota admitted one pod for, keyed by the pod's UID
(set by the API server before validating admission, so no user can choose or
copy it). It is written when the pod is admitted and stays while the pod holds
quota: before the pod exists it is a reservation, afterwards the pod's admitted
charge. Only draquota's ServiceAccount may write QuotaLedger objects.

A cohort's records are sharded into objects `<base>-<n>` (`base` is
`cohort-<cohort>`, or `queue-<name>` for a ClusterQueue without a cohort). New
records go to the highest shard, the active one; every admission of the cohort
writes it with a resourceVersion precondition, which serialises them across
replicas. When the active shard is full it is sealed (a write like any other,
so whoever read it before conflicts) and the next shard takes over. Sealed
shards only lose entries, which needs no serialisation: usage only drops.

Shards that hold no record are deleted, so a shard's name can come back: a replica whose
view is behind could otherwise create again, as the active shard, a shard that was sealed
and deleted meanwhile, and decide on records it has not seen. The head `<base>-head`,
never deleted, says which index was created last (`TOP_ANNOTATION`); a shard is created
only by whoever moved the head to its index (a write with the head's resourceVersion), so
an index is never the active shard twice. Only shards below the head's index are deleted.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from quota.charge import Charge
from quota.errors import DraquotaError
from webhook.kube.resources import QUOTA_LEDGER
from webhook.store.clusterstate import ClusterState

__all__ = [
    "SHARD_BYTES",
    "TOP_ANNOTATION",
    "Reservation",
    "Shard",
    "head_name",
    "head_object",
    "head_top",
    "ledger_base",
    "ledger_object",
    "shard_index",
    "shard_name",
    "shards_of",
]

# A shard is sealed before its entries pass this many bytes of JSON (about 160 records). The
# API server's cost per write grows with the object (validation, etcd, every watcher's
# copy), and a write rewrites the whole active shard; a shard sealed sooner means more
# objects, and a head move, a create and reads at each seal. Records written behind come
# in batches (one write per cohort and interval), so seals, not bytes, dominated at 8 KiB:
# bench/README.md has both. `spec.reservations` is an atomic list, so managedFields holds
# one entry for it, not one per record.
SHARD_BYTES = 32 * 1024

_SHARD = re.compile(r"^(?P<base>(?:cohort|queue)-.+)-(?P<index>[0-9]{1,6})$")
# On a ledger's head: the index of the shard created last (a decimal string).
TOP_ANNOTATION = "draquota.io/top-shard"
_HEAD_SUFFIX = "-head"


@dataclass(frozen=True)
class Reservation:
    """One entry of `spec.reservations`: pod UID, queue, pod `ns/name`, charge JSON."""

    id: str
    cluster_queue: str
    pod: str
    charge: str
    reserved_at: float = 0.0  # seconds since the epoch, for people reading the object

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)

    @functools.cached_property
    def document(self) -> Mapping[str, Any]:
        """The entry as the object holds it; built once (a shard is rewritten per admission)."""
        out = {"id": self.id, "clusterQueue": self.cluster_queue, "pod": self.pod}
        out["charge"] = self.charge
        if self.reserved_at:
            at = dt.datetime.fromtimestamp(self.reserved_at, dt.UTC)
            out["reservedAt"] = at.isoformat(timespec="seconds").replace("+00:00", "Z")
        return MappingProxyType(out)

    @functools.cached_property
    def size(self) -> int:
        """How many bytes the entry takes in the object's JSON (with its separator)."""
        return len(orjson.dumps(dict(self.document))) + 2

    def parsed_charge(self) -> Charge | None:
        try:
            return Charge.from_annotation(self.charge, f"QuotaLedger entry {self.id}")
        except DraquotaError:
            return None


@dataclass(frozen=True)
class Shard:
    """One QuotaLedger object as read: its entries, sealed flag and resourceVersion."""

    name: str
    entries: tuple[Reservation, ...] = ()
    sealed: bool = False
    resource_version: str = ""

    @property
    def index(self) -> int:
        return shard_index(self.name) or 0

    def size(self) -> int:
        return sum(entry.size for entry in self.entries)

    @classmethod
    def of(cls, obj: Mapping[str, Any], known: Mapping[str, Reservation] | None = None) -> Shard:
        """The shard in `obj`; an entry equal to one of `known` (by id) is that object, so what
        it derived once (its size, its document) is not derived again."""
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        raw = spec.get("reservations") if isinstance(spec, Mapping) else None
        known = known or {}
        entries = tuple(
            e for e in (_entry(r, known) for r in (raw if isinstance(raw, list) else ())) if e
        )
        return cls(
            name=str(metadata.get("name") or ""),
            entries=entries,
            sealed=bool(isinstance(spec, Mapping) and spec.get("sealed") is True),
            resource_version=str(metadata.get("resourceVersion") or ""),
        )


def _entry(raw: Any, known: Mapping[str, Reservation]) -> Reservation | None:
    if not isinstance(raw, Mapping):
        return None
    same = known.get(raw.get("id"))  # type: ignore[arg-type]
    if same is not None and same.document == raw:
        return same
    rid, queue, charge = raw.get("id"), raw.get("clusterQueue"), raw.get("charge")
    if not (isinstance(rid, str) and isinstance(queue, str) and isinstance(charge, str)):
        return None
    return Reservation(rid, queue, str(raw.get("pod") or ""), charge, _epoch(raw.get("reservedAt")))


def _epoch(value: Any) -> float:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def ledger_object(shard: Shard, entries: Sequence[Reservation], sealed: bool) -> dict[str, Any]:
    """The body that creates (no resourceVersion) or updates a shard."""
    metadata: dict[str, Any] = {"name": shard.name}
    if shard.resource_version:
        metadata["resourceVersion"] = shard.resource_version
    spec: dict[str, Any] = {"reservations": [e.to_dict() for e in entries]}
    if sealed:
        spec["sealed"] = True
    return {
        "apiVersion": QUOTA_LEDGER.api_version,
        "kind": QUOTA_LEDGER.kind,
        "metadata": metadata,
        "spec": spec,
    }


def ledger_base(state: ClusterState, cluster_queue: str) -> str:
    """`cohort-<cohort>` when the queue is in a cohort, else `queue-<cluster_queue>`."""
    queue = state.get("ClusterQueue", None, cluster_queue) or {}
    spec = queue.get("spec") or {}
    cohort = spec.get("cohort") if isinstance(spec, Mapping) else None
    if isinstance(cohort, str) and cohort:
        return f"cohort-{cohort}"
    return f"queue-{cluster_queue}"


def shard_name(base: str, index: int) -> str:
    return f"{base}-{index}"


def shard_index(name: str) -> int | None:
    """The index of a shard name, or None when `name` is not one."""
    match = _SHARD.match(name)
    return int(match.group("index")) if match else None


def shards_of(objects: Iterable[Mapping[str, Any]]) -> dict[str, list[Shard]]:
    """Shards by ledger base, in index order; objects that are not shards are ignored."""
    out: dict[str, list[Shard]] = {}
    for obj in objects:
        shard = Shard.of(obj)
        match = _SHARD.match(shard.name)
        if match:
            out.setdefault(match.group("base"), []).append(shard)
    for shards in out.values():
        shards.sort(key=lambda s: s.index)
    return out


def head_name(base: str) -> str:
    """The head of a ledger base: not a shard (no index), never deleted."""
    return f"{base}{_HEAD_SUFFIX}"


def head_top(obj: Mapping[str, Any] | None) -> int | None:
    """The index a head says was created last; None without a head, or with a head whose
    annotation is not a decimal index (nothing then trusts it to allow a deletion)."""
    metadata = (obj or {}).get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(TOP_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(value, str) and value.isdigit() and len(value) <= 6:
        return int(value)
    return None


def head_object(base: str, top: int, resource_version: str = "") -> dict[str, Any]:
    """The body that creates (no resourceVersion) or moves a head to index `top`."""
    body = ledger_object(Shard(head_name(base), resource_version=resource_version), [], False)
    body["metadata"]["annotations"] = {TOP_ANNOTATION: str(top)}
    return body
