"""A ClusterQueue's preemption policy, `spec.preemption`, with Kueue's fields and defaults.

Kueue v1beta1 `ClusterQueuePreemption`, field for field, so spec blocks can be copied:

- `reclaimWithinCohort` (Never | LowerPriority | Any, default Never): whether a pod of this
  queue may evict workloads of other queues of the cohort that use more than their
  nominal quota, to get back the quota they borrowed;
- `withinClusterQueue` (Never | LowerPriority | LowerOrNewerEqualPriority, default Never):
  whether it may evict lower-priority workloads of its own queue (or, with the last,
  equal-priority ones admitted after it was created);
- `borrowWithinCohort.policy` (Never | LowerPriority, default Never) with
  `maxPriorityThreshold`: whether it may reclaim while itself borrowing, from workloads
  of lower priority than its own and at most the threshold.

Malformed values (a wrong type, a value outside an enum, a threshold outside int32) raise
InvalidObject naming the field, as the CRD's schema rejects them. Kueue's one rule across
the fields (its CRD rule and its webhook: `reclaimWithinCohort=Never and
borrowWithinCohort.Policy!=Never`) is a *problem*: a queue with problems admits nothing.
Victim choice is `quota.preemption`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quota.fields import FieldReader
from quota.strict import Schema, frozen_schema

__all__ = [
    "ANY",
    "LOWER_OR_NEWER_EQUAL_PRIORITY",
    "LOWER_PRIORITY",
    "NEVER",
    "PREEMPTION_FIELDS",
    "Preemption",
    "parse_preemption",
]

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
ANY = "Any"
RECLAIM_POLICIES = (NEVER, LOWER_PRIORITY, ANY)
WITHIN_POLICIES = (NEVER, LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)
BORROW_POLICIES = (NEVER, LOWER_PRIORITY)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Kueue's message for its one cross-field rule, word for word.
RECLAIM_NEVER_WITH_BORROW = "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"

# The fields of `spec.preemption`, as in manifests/base/crds/clusterqueues.yaml.
PREEMPTION_FIELDS: Schema = frozen_schema(
    {
        "reclaimWithinCohort": None,
        "withinClusterQueue": None,
        "borrowWithinCohort": {"policy": None, "maxPriorityThreshold": None},
    }
)


@dataclass(frozen=True)
class Preemption:
    """What a pending workload of the queue may evict to fit (all Never: nothing).

    `max_priority_threshold` None means no threshold beyond the preemptor's own priority.
    """

    reclaim_within_cohort: str = NEVER
    within_cluster_queue: str = NEVER
    borrow_within_cohort: str = NEVER
    max_priority_threshold: int | None = None

    @property
    def enabled(self) -> bool:
        """Whether the queue may evict anything at all."""
        return (self.reclaim_within_cohort, self.within_cluster_queue) != (NEVER, NEVER)

    def borrow_threshold(self, priority: int) -> int | None:
        """Priorities below the returned bound may be evicted in other queues while the
        preemptor borrows (Kueue: lower than the preemptor and at most
        `maxPriorityThreshold`); None when borrowWithinCohort is Never."""
        if self.borrow_within_cohort == NEVER:
            return None
        if self.max_priority_threshold is not None and self.max_priority_threshold < priority:
            return self.max_priority_threshold + 1
        return priority


def _enum(
    reader: FieldReader, raw: Mapping[str, Any], key: str, path: str, allowed: tuple[str, ...]
) -> str:
    value = reader.string(raw.get(key), f"{path}.{key}") or NEVER
    if value not in allowed:
        raise reader.fail(
            f"{path}.{key}", f"unsupported value {value!r}: expected {' or '.join(allowed)}"
        )
    return value


def _threshold(reader: FieldReader, value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise reader.fail(path, f"must be an integer, got {value!r}")
    if not INT32_MIN <= value <= INT32_MAX:
        raise reader.fail(path, f"must be a 32-bit integer, got {value}")
    return value


def parse_preemption(reader: FieldReader, raw: Any, path: str, problems: list[str]) -> Preemption:
    """The policy of a raw `spec.preemption` at `path` (absent: every field Never).

    Malformed fields raise InvalidObject; Kueue's cross-field rule is added to `problems`.
    """
    spec = reader.mapping(raw, path)
    borrow = reader.mapping(spec.get("borrowWithinCohort"), f"{path}.borrowWithinCohort")
    policy = Preemption(
        reclaim_within_cohort=_enum(reader, spec, "reclaimWithinCohort", path, RECLAIM_POLICIES),
        within_cluster_queue=_enum(reader, spec, "withinClusterQueue", path, WITHIN_POLICIES),
        borrow_within_cohort=_enum(
            reader, borrow, "policy", f"{path}.borrowWithinCohort", BORROW_POLICIES
        ),
        max_priority_threshold=_threshold(
            reader,
            borrow.get("maxPriorityThreshold"),
            f"{path}.borrowWithinCohort.maxPriorityThreshold",
        ),
    )
    if policy.reclaim_within_cohort == NEVER and policy.borrow_within_cohort != NEVER:
        problems.append(f"{path}: {RECLAIM_NEVER_WITH_BORROW}")
    return policy
