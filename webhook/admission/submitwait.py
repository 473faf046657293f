"""The answer at submit for a pod or Job allowed into a queueing ClusterQueue: the warning
`waits in ClusterQueue research, position 2: waiting for quota: ...` that `kubectl create`
prints, from the validating call (the one that decides).

What waits in that ClusterQueue comes from a `WaitingIndex` (the LocalQueues pointing to it,
then their gated pods and suspended Jobs); each is prepared outside the ledger's lock, as the
queueing controller would prepare it; under the lock only the controller's next pass is
played against usage (`quota.position.wait_at_submit`), on a dry run that records nothing.
The cost is bounded by what waits in that one ClusterQueue.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from quota.cluster import ClusterView, Obj
from quota.decision import Prepared
from quota.livepods import pod_key, pod_uid
from quota.position import wait_at_submit, wait_warning
from quota.queues import LocalQueue
from quota.queuetable import QueueTable
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from quota.waiting import Wait, waiting_among, waiting_key
from webhook.ledger import Ledger
from webhook.ledger.podusage import job_holder
from webhook.queueing.waitingindex import WaitingIndex

__all__ = ["SubmitWait"]

Prepare = Callable[[Obj, ClusterView], "Prepared | Decision"]


def _created(obj: Obj, now: float) -> Obj:
    """The object with a creation time (the API server sets one before it asks the validating
    webhook; an object without one is taken as created now, behind everyone who waits)."""
    metadata: Mapping[str, Any] = obj.get("metadata") or {}
    if metadata.get("creationTimestamp"):
        return obj
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**obj, "metadata": {**metadata, "creationTimestamp": stamp}}


class SubmitWait:
    """Where a workload allowed into a queueing ClusterQueue will stand, as a warning."""

    def __init__(self, ledger: Ledger, prepare: Prepare, wall: Callable[[], float] = time.time):
        self.ledger = ledger
        self.prepare = prepare
        self.wall = wall
        self.index = WaitingIndex()
        self._locals: tuple[QueueTable | None, dict[str, list[str]]] = (None, {})

    def warning(self, obj: Obj, prepared: Prepared, view: ClusterView) -> str:
        """The warning for `obj` ("" when the controller's next pass admits it)."""
        queue = prepared.route.queue
        now = self.wall()
        created = _created(obj, now)
        key, kind = pod_key(created), created.get("kind")
        pods, jobs = self.index.waiting(view, self._local_queues(prepared.table, queue.name))
        mine = pods if kind == "Pod" else jobs
        mine[:] = [o for o in mine if pod_key(o) != key] + [created]
        classes = view.list("PriorityClass") if jobs else []
        workloads = waiting_among(pods, jobs, prepared.table, classes, now).get(queue.name, [])
        ready: dict[tuple[Any, str], Prepared | Decision] = {(kind, key): prepared}
        for other in (*pods, *jobs):
            entry = (other.get("kind"), pod_key(other))
            if entry not in ready:
                ready[entry] = self.prepare(other, view)
        found: list[Wait | None] = []

        def evaluate(usage: Usage) -> Decision:
            found[:] = [
                wait_at_submit(
                    queue,
                    workloads,
                    waiting_key(created),
                    lambda o: ready[(o.get("kind"), pod_key(o))],
                    usage,
                    job_holder,
                )
            ]
            return Decision(Verdict.ADMITTED, "Queued")  # a dry run: nothing is recorded

        uid = pod_uid(created) or "submit-wait"
        self.ledger.admit(uid, evaluate, True, key, cluster_queue=queue.name)
        wait = found[0] if found else None
        return wait_warning(wait) if wait is not None else ""

    def _local_queues(self, table: QueueTable, cluster_queue: str) -> list[str]:
        """The LocalQueues (`ns/name`) that point to `cluster_queue`, kept per queue table."""
        known, by_queue = self._locals
        if known is not table:
            by_queue = {}
            for local_key, local in table.local_queues.items():
                if isinstance(local, LocalQueue):
                    by_queue.setdefault(local.cluster_queue, []).append(local_key)
            self._locals = (table, by_queue)
        return by_queue.get(cluster_queue, [])
