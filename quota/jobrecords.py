"""What the admission record of a Job admitted as a whole covers.

The queue records a Job for the pods it runs at once (`Charge.pods`, each charged
`share(record)`) and the Job controller creates them. The record is a bound, not a
licence: it covers at most that many pods at a time, the oldest first, each at most
its share. A pod beyond the record is a workload of its own, charged and admitted as
any pod (so a Job whose pods are deleted with a long grace period cannot run
replacements beside them on the same record).

Which pods count is Kubernetes' ResourceQuota rule, as for every pod: a pod holds its
slot until it is Succeeded or Failed, or deleted and its grace period has passed. A
pod still gated by draquota (waiting as a workload of its own) and a pod with a record
of its own hold no slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from quota.charge import Charge
from quota.cluster import Obj
from quota.errors import DraquotaError
from quota.livepods import is_gated, is_live_pod, pod_uid
from quota.workloads import as_workload

__all__ = ["covered_keys", "holds_slot", "slots"]


def slots(record: Charge, job: Obj | None) -> int:
    """How many pods `record` covers: as recorded; a record written before records counted
    pods covers the pods the Job runs at once now (which cannot grow once it is recorded)."""
    if record.pods:
        return record.pods
    if job is None:
        return 0
    try:
        return as_workload(job).pods
    except DraquotaError:  # a Job that cannot be read covers nothing more
        return 0


def holds_slot(pod: Obj, records: Mapping[str, Charge], now: float) -> bool:
    """The pod takes one of its Job record's slots: live, not gated, no record of its own."""
    return is_live_pod(pod, now) and not is_gated(pod) and pod_uid(pod) not in records


def _age(item: tuple[str, Obj]) -> tuple[str, str]:
    key, pod = item
    metadata = pod.get("metadata")
    created = metadata.get("creationTimestamp") if isinstance(metadata, Mapping) else None
    return (created if isinstance(created, str) else "", key)


def covered_keys(
    record: Charge,
    job: Obj | None,
    pods: Iterable[tuple[str, Obj]],
    records: Mapping[str, Charge],
    now: float,
) -> frozenset[str]:
    """The keys of the pods `record` covers among the Job's `pods` (key, pod): the oldest
    `slots` that hold a slot (creation time, then key: the same answer on every replica)."""
    holding = [(key, pod) for key, pod in pods if holds_slot(pod, records, now)]
    room = slots(record, job)
    if len(holding) > room:
        holding = sorted(holding, key=_age)[:room]
    return frozenset(key for key, _ in holding)
