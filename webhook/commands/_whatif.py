"""What the queueing controller would do next: one pass of
`webhook.queueing.controller.QueueController` over a cluster view, with a ledger and a pod writer
that only remember (nothing is written).

`draquota check` submits its pods and Jobs of queues with `whenFull: Queue` to the view as
the API server would create them (gated, suspended), then runs this pass: each gets the
answer the controller gives it once it exists, in the same order (`quota.waiting`), with the
same decisions, the same message and position, since this is the controller's own code with
in-memory adapters, not a copy of it.

Invariant: the ledger starts from the usage and admission records the webhook would see, and
a workload admitted in the pass counts against the ones after it, as in the controller. A
workload that would preempt names its victims (`PassResult.preempted`): the writer also
stands for the evictor, and evicts nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quota.charge import QUEUE_LABEL, Charge
from quota.cluster import Obj
from quota.flavorfilter import Placer
from quota.livepods import ADMISSION_GATE
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from webhook.store.clusterstate import ClusterState

__all__ = ["PassResult", "as_created", "next_pass"]


@dataclass(frozen=True)
class PassResult:
    """Workloads the pass admitted, the message of each one left waiting (both by workload key:
    `ns/name` of a pod or Job, `ns/group` of a pod group), and the decision of each admitted
    pod or Job by UID, and the victims of each workload that would preempt (`ns/name (reason)`)."""

    admitted: frozenset[str] = frozenset()
    waiting: Mapping[str, str] = field(default_factory=dict)
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    preempted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class _Ledger:
    """The controller's ledger in memory: starts from the cluster's usage and records."""

    blocking_io = False

    def __init__(self, usage: Usage, records: Mapping[str, Charge]) -> None:
        self._usage = usage.copy()
        self._records = dict(records)
        self._holders: dict[str, str] = {}  # uid -> usage holder, of what this pass admitted
        self.decisions: dict[str, Decision] = {}

    def usage(self) -> Usage:
        return self._usage.copy()

    def ensure_elected(self) -> None:
        """A what-if pass decides for itself."""

    def admit(
        self,
        uid: str,
        evaluate: Callable[[Usage], Decision],
        dry_run: bool,
        pod: str = "",
        existing: bool = False,
        cluster_queue: str = "",
        behind: bool = False,
    ) -> Decision:
        view = self._usage.copy()
        view.remove(uid)
        if existing and pod:
            view.remove(pod)
        decision = evaluate(view)
        if dry_run or not decision.allowed or decision.charge is None:
            return decision
        holder = pod or uid
        self._usage.add(holder, decision.charge)
        self._holders[uid] = holder
        self._records[uid] = decision.charge
        self.decisions[uid] = decision
        return decision

    def record(self, uid: str) -> Charge | None:
        return self._records.get(uid)

    def release(self, uids: list[str]) -> None:
        for uid in uids:
            self._records.pop(uid, None)
            self.decisions.pop(uid, None)
            holder = self._holders.pop(uid, None)
            if holder is not None:
                self._usage.remove(holder)

    def users(self, kind: str, namespace: str, name: str) -> list[Obj]:
        return []

    def held_slots(self, job: str, besides: str) -> int:
        return 0

    def knows(self, uid: str) -> bool:
        return True


class _Writer:
    """Every write lands, and nothing is written; every eviction too."""

    def admit(self, pod: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        return True

    def start(self, job: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        return True

    def wait(self, obj: Obj, message: str) -> bool:
        return True

    def mark(self, pod: Obj, message: str) -> bool:
        return True

    def evict(self, pod: Obj) -> str:
        return ""

    def suspend(self, job: Obj, message: str) -> bool:
        return True


class _Backend:
    """A cluster view that is synced and never changes."""

    blocking_io = False

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def ready(self) -> tuple[bool, str]:
        return True, ""

    def fetch(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return None


def next_pass(
    state: ClusterState,
    settings: Settings,
    placer: Placer | None,
    usage: Usage,
    records: Mapping[str, Charge],
    now: float,
) -> PassResult:
    """The controller's next pass over `state`, against `usage` and `records`."""
    from webhook.queueing.controller import QueueController

    ledger = _Ledger(usage, records)
    backend = _Backend(state)
    writer = _Writer()
    controller = QueueController(
        backend, ledger, settings, placer, writer, wall=lambda: now, evictor=writer
    )
    done = controller.run_once()
    preempted = {key: tuple(victims) for key, victims in done.preempted.items()}
    return PassResult(
        frozenset(done.admitted), dict(done.waiting), dict(ledger.decisions), preempted
    )


def _timestamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def as_created(obj: Obj, local_queue: str, uid: str, now: float, priority: int) -> Obj:
    """A pod or Job as the API server stores it after draquota's mutating webhook queued it:
    a name, a UID, its creation time (whole seconds, as the API server keeps it: pods created
    in the same second start in name order), its priority, the queue label, and draquota's
    scheduling gate (a pod) or `spec.suspend` (a Job)."""
    metadata = dict(obj.get("metadata") or {})
    metadata.setdefault("name", f"{metadata.get('generateName') or 'what-if-'}{uid}")
    metadata.update(uid=uid, creationTimestamp=_timestamp(now))
    metadata["labels"] = {**(metadata.get("labels") or {}), QUEUE_LABEL: local_queue}
    spec = dict(obj.get("spec") or {})
    if obj.get("kind") == "Job":
        spec["suspend"] = True
    else:
        gates = [g for g in spec.get("schedulingGates") or () if g != {"name": ADMISSION_GATE}]
        spec["schedulingGates"] = [*gates, {"name": ADMISSION_GATE}]
        spec.setdefault("priority", priority)
    return {**obj, "metadata": metadata, "spec": spec}
