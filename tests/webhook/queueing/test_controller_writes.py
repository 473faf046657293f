"""What the queueing controller writes to the ledger: a waiting workload writes nothing.

On a live cluster every record written or released is a QuotaLedger write. A group whose
last pod did not fit used to be recorded and rolled back on every pass (1,485 writes in
42 s on the real control plane), its records briefly holding quota others were denied.
The ledger here counts what would be those writes; the pods go through the stand-in API
server and draquota's webhooks as in tests/webhook/queueing/test_controller.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quota.usage import Usage
from quota.verdict import Decision
from tests.security.cluster import Cluster
from tests.webhook.builders import NAMESPACE
from tests.webhook.queueing.test_controller import (
    ApiWriter,
    JobWriter,
    gpu_job,
    gpus,
    group,
    lower_quota,
    queueing_cluster,
    running,
    started,
    submit,
    submit_jobs,
    used,
)
from webhook.ledger.memory import MemoryLedger
from webhook.queueing.controller import QueueController


class CountingLedger:
    """The cluster's ledger, counting the writes a QuotaLedger would take: each record
    written and each record released. `after` runs after every decision and every write of
    the controller (a peer's admission squeezed in between them, as on a live cluster)."""

    blocking_io = False

    def __init__(self, inner: MemoryLedger, after: Callable[[], None] = lambda: None) -> None:
        self.inner = inner
        self.after = after
        self.writes = 0

    def usage(self) -> Usage:
        return self.inner.usage()

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
        decision = self.inner.admit(uid, evaluate, dry_run, pod, existing, cluster_queue, behind)
        if not dry_run and decision.allowed and decision.charge is not None:
            self.writes += 1
        self.after()
        return decision

    def ensure_elected(self) -> None:
        self.inner.ensure_elected()

    def release(self, uids: list[str]) -> None:
        self.inner.release(uids)
        self.writes += len(uids)
        self.after()

    def __getattr__(self, name: str) -> Any:  # record, users: reads
        return getattr(self.inner, name)


def counted(
    cluster: Cluster, writer: ApiWriter | None = None, after: Callable[[], None] = lambda: None
) -> tuple[QueueController, CountingLedger, ApiWriter]:
    writer = writer or ApiWriter(cluster)
    ledger = CountingLedger(cluster.ledger, after)
    queue = QueueController(
        cluster.backend, ledger, cluster.settings, None, writer, wall=cluster.clock
    )
    return queue, ledger, writer


def test_a_group_that_does_not_fit_yet_writes_nothing_then_starts_all_together() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("single", 2), *group("trio", 3, 3))
    queue, ledger, writer = counted(cluster)
    queue.run_once()
    assert running(cluster) == ["single"] and ledger.writes == 1
    for _ in range(3):
        queue.run_once()
    assert ledger.writes == 1  # the trio's two pods that fit were never written
    assert "1 more needed (requested 3, in use 2 of nominal 4)" in writer.waiting["trio-0"]
    cluster.state.remove("Pod", NAMESPACE, "single")
    queue.run_once()
    assert running(cluster) == ["trio-0", "trio-1", "trio-2"]
    assert ledger.writes == 1 + 3 and used(cluster) == 3


def test_a_group_that_can_never_fit_writes_nothing_over_many_passes() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, *group("trio", 3, 3))
    lower_quota(cluster, 2)
    queue, ledger, writer = counted(cluster)
    for _ in range(5):
        queue.run_once()
    assert ledger.writes == 0 and running(cluster) == []
    assert f"pod group {NAMESPACE}/trio can never fit" in writer.waiting["trio-0"]


def test_a_job_that_does_not_fit_writes_nothing_while_it_waits() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("single", 2))
    submit_jobs(cluster, gpu_job("wide", 1, parallelism=3))
    queue, ledger, _ = counted(cluster, JobWriter(cluster))
    for _ in range(3):
        queue.run_once()
    assert running(cluster) == ["single"] and started(cluster) == []
    assert ledger.writes == 1  # single's record only
    cluster.state.remove("Pod", NAMESPACE, "single")
    queue.run_once()
    assert started(cluster) == ["wide"] and ledger.writes == 2
