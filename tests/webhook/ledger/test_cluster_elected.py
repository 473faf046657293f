"""ClusterLedger with an elector, on the fake API: the elected replica decides alone, answers
before its records are written, hands them over when it stops, and a replica taking over
from a dead one waits out the dead one's window."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from quota.settings import Settings
from quota.verdict import Decision
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.conftest import FAST
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from tests.webhook.ledger.test_cluster import GPU, TTL, Clock, Instance, ledger_entries
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.kube.lease import Term
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.elected import HeldElsewhere
from webhook.ledger.options import LedgerOptions

pytestmark = pytest.mark.integration

WAIT = 45.0  # seconds a replica taking over from a dead one waits


@dataclass
class Elector:
    current: Term | None = None

    def leading(self) -> bool:
        return self.current is not None

    def term(self) -> Term | None:
        return self.current


@dataclass
class Replica(Instance):
    elector: Elector = field(default_factory=Elector)


def replica(client: KubeClient, clock: Clock, elector: Elector, interval: float) -> Replica:
    backend = KubeBackend(client, FAST)
    options = LedgerOptions(reconcile_interval=3600, flush_interval=interval, takeover_wait=WAIT)
    settings = Settings(reservation_ttl_seconds=TTL)
    ledger = ClusterLedger(
        client, backend, settings, options, clock=clock, wall=clock, elector=elector
    )
    backend.attach(ledger)
    backend.start()
    assert backend.wait_until_ready(10), backend.ready()
    return Replica(backend, ledger, clock, elector)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def two(api: FakeApiServer, client: KubeClient, clock: Clock) -> Iterator[list[Replica]]:
    for obj in cluster_objects(2, None):
        api.create(obj)
    replicas = [replica(client, clock, Elector(), 3600) for _ in range(2)]
    yield replicas
    for one in replicas:
        one.backend.stop()


def admit(one: Replica, uid: str, name: str, dry_run: bool = False) -> Decision:
    return one.ledger.admit(
        uid,
        one.evaluator(gpu_pod(name)),
        dry_run,
        f"{NAMESPACE}/{name}",
        cluster_queue=QUEUE,
        behind=True,
    )


def test_the_elected_replica_counts_what_it_admits_before_the_records_are_written(
    api: FakeApiServer, two: list[Replica], clock: Clock
) -> None:
    elected = two[0]
    elected.elector.current = Term(clock.now, taken_over=False)
    assert admit(elected, "u0", "p0").allowed  # written at once, or with the next one
    assert admit(elected, "u1", "p1").allowed  # written within the hour (the interval)
    denied = admit(elected, "u2", "p2")
    assert (denied.allowed, denied.reason) == (False, "QuotaExceeded")
    assert elected.ledger.usage().of(QUEUE) == {GPU: 2}
    eventually(lambda: "u0" in {e.id for e in ledger_entries(api)})
    assert "u2" not in {e.id for e in ledger_entries(api)}


def test_a_replica_not_elected_sends_what_would_hold_quota_away_and_answers_the_rest(
    api: FakeApiServer, two: list[Replica], clock: Clock
) -> None:
    elected, other = two
    with pytest.raises(HeldElsewhere):  # the request goes to the elected replica
        admit(other, "u0", "p0")
    assert admit(other, "u0", "p0", dry_run=True).allowed
    assert api.objects("QuotaLedger") == []
    elected.elector.current = Term(clock.now, taken_over=False)
    assert admit(elected, "u0", "p0").allowed and admit(elected, "u1", "p1").allowed
    # u1 goes with u0's write, or an interval (an hour here) after it; a stopping replica
    # writes every record first (relying on the first would race the writer thread)
    elected.ledger.stop()
    assert {e.id for e in ledger_entries(api)} == {"u0", "u1"}
    eventually(lambda: other.ledger.usage().of(QUEUE) == {GPU: 2})
    denied = admit(other, "u2", "p2")  # a denial holds nothing: any replica answers it
    assert (denied.allowed, denied.reason) == (False, "QuotaExceeded")


def test_a_handover_writes_every_record_before_the_next_replica_decides(
    api: FakeApiServer, two: list[Replica], clock: Clock
) -> None:
    first, second = two
    first.elector.current = Term(clock.now, taken_over=False)
    assert admit(first, "u0", "p0").allowed
    eventually(lambda: [e.id for e in ledger_entries(api)] == ["u0"])
    assert admit(first, "u1", "p1").allowed  # not due for an hour
    assert [e.id for e in ledger_entries(api)] == ["u0"]
    first.ledger.stop()  # refuses from now on, writes what is left
    assert sorted(e.id for e in ledger_entries(api)) == ["u0", "u1"]
    first.elector.current = None
    second.elector.current = Term(clock.now, taken_over=False)  # released: no wait
    denied = admit(second, "u2", "p2")
    assert (denied.allowed, denied.reason) == (False, "QuotaExceeded")


def test_a_stopping_replica_refuses_what_would_hold_quota(
    api: FakeApiServer, two: list[Replica], clock: Clock
) -> None:
    first = two[0]
    first.elector.current = Term(clock.now, taken_over=False)
    first.ledger.stop()
    refused = admit(first, "u0", "p0")
    assert (refused.allowed, refused.reason) == (False, "AdmittingReplicaMoved")
    assert api.objects("QuotaLedger") == []


def test_a_replica_taking_over_from_a_dead_one_waits_until_its_pods_are_visible(
    api: FakeApiServer, two: list[Replica], clock: Clock
) -> None:
    dead, taker = two
    dead.elector.current = Term(clock.now, taken_over=False)
    assert admit(dead, "u0", "p0").allowed
    eventually(lambda: [e.id for e in ledger_entries(api)] == ["u0"])
    dead.elector.current = None
    taker.elector.current = Term(clock.now, taken_over=True)
    waiting = admit(taker, "u1", "p1")
    assert (waiting.allowed, waiting.reason) == (False, "AdmittingReplicaTakingOver")
    assert f"in {WAIT:.0f}s" in waiting.message
    clock.now += WAIT
    assert admit(taker, "u1", "p1").allowed
    assert taker.ledger.usage().of(QUEUE) == {GPU: 2}


def test_a_record_released_before_it_was_written_holds_nothing_and_is_never_written(
    api: FakeApiServer, two: list[Replica], clock: Clock
) -> None:
    elected = two[0]
    elected.elector.current = Term(clock.now, taken_over=False)
    assert admit(elected, "u0", "p0").allowed
    eventually(lambda: [e.id for e in ledger_entries(api)] == ["u0"])
    assert admit(elected, "u1", "p1").allowed  # not due for an hour
    elected.ledger.release(["u1"])  # the queue takes it back
    assert elected.ledger.usage().of(QUEUE) == {GPU: 1}
    assert elected.ledger.record("u1") is None
    elected.ledger.stop()
    assert [e.id for e in ledger_entries(api)] == ["u0"]
