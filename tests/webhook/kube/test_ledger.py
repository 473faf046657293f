"""ClusterLedger on the fake API: reservations in QuotaLedger objects, conflicts, reconciling."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from quota.charge import CHARGE_ANNOTATION, FlavorResource
from quota.decision import Decision, decide
from quota.settings import Settings
from quota.usage import Usage
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.conftest import FAST
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.kube.ledger import ClusterLedger, LedgerOptions
from webhook.kube.reservations import reservations_of

pytestmark = pytest.mark.integration

GPU = FlavorResource("default", "gpu")
TTL = 60


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Instance:
    backend: KubeBackend
    ledger: ClusterLedger
    clock: Clock = field(default_factory=Clock)

    def evaluator(self, pod: dict, uid: str) -> Callable[[Usage], Decision]:
        def evaluate(usage: Usage) -> Decision:
            return decide(pod, self.backend.state, usage, self.ledger.settings, reservation=uid)

        return evaluate


def start_instance(client: KubeClient, clock: Clock, options: LedgerOptions) -> Instance:
    backend = KubeBackend(client, FAST)
    ledger = ClusterLedger(
        client, backend, Settings(reservation_ttl_seconds=TTL), options, clock=clock
    )
    backend.start()
    assert backend.wait_until_ready(10), backend.ready()
    return Instance(backend, ledger, clock)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(
    api: FakeApiServer,
    client: KubeClient,
    clock: Clock,
    nominal: int = 2,
    cohort: str | None = None,
    max_attempts: int = 20,
) -> Instance:
    for obj in cluster_objects(nominal, cohort):
        api.create(obj)
    options = LedgerOptions(reconcile_interval=3600, max_attempts=max_attempts)
    return start_instance(client, clock, options)


@pytest.fixture
def one(api: FakeApiServer, client: KubeClient, clock: Clock) -> Iterator[Instance]:
    instance = make(api, client, clock)
    yield instance
    instance.backend.stop()


def ledger_entries(api: FakeApiServer, name: str = f"queue-{QUEUE}") -> list:
    objects = {o["metadata"]["name"]: o for o in api.objects("QuotaLedger")}
    return reservations_of(objects.get(name))


def test_allowed_admission_is_written_to_the_queue_ledger(
    api: FakeApiServer, one: Instance
) -> None:
    pod = gpu_pod("p0")
    decision = one.ledger.admit("uid-0", one.evaluator(pod, "uid-0"), dry_run=False)
    assert decision.allowed
    [entry] = ledger_entries(api)
    assert (entry.id, entry.cluster_queue) == ("uid-0", QUEUE)
    assert entry.expires_at == one.clock.now + TTL
    assert decision.charge is not None
    assert entry.charge == decision.charge.to_annotation()
    assert one.ledger.usage().of(QUEUE) == {GPU: 1}


def test_cohort_queues_share_one_ledger(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    instance = make(api, client, clock, cohort="research")
    try:
        assert instance.ledger.admit("u", instance.evaluator(gpu_pod("p"), "u"), False).allowed
        assert [o["metadata"]["name"] for o in api.objects("QuotaLedger")] == ["cohort-research"]
    finally:
        instance.backend.stop()


def test_dry_run_decides_without_writing(api: FakeApiServer, one: Instance) -> None:
    decision = one.ledger.admit("uid-0", one.evaluator(gpu_pod("p0"), "uid-0"), dry_run=True)
    assert decision.allowed
    assert api.objects("QuotaLedger") == []


def test_quota_exhausted_by_reservations_denies(api: FakeApiServer, one: Instance) -> None:
    for i in range(2):
        assert one.ledger.admit(f"u{i}", one.evaluator(gpu_pod(f"p{i}"), f"u{i}"), False).allowed
    denied = one.ledger.admit("u2", one.evaluator(gpu_pod("p2"), "u2"), False)
    assert (denied.allowed, denied.reason) == (False, "QuotaExceeded")
    assert "in use 2 of nominal 2" in denied.message
    assert [e.id for e in ledger_entries(api)] == ["u0", "u1"]


def test_retried_admission_does_not_count_twice(api: FakeApiServer, one: Instance) -> None:
    for _ in range(3):
        assert one.ledger.admit("same", one.evaluator(gpu_pod("p"), "same"), False).allowed
    assert [e.id for e in ledger_entries(api)] == ["same"]


def test_conflict_rereads_and_reevaluates(api: FakeApiServer, one: Instance) -> None:
    """Another replica writes between our read and our write: 409, read again, decide again."""
    assert one.ledger.admit("a", one.evaluator(gpu_pod("a"), "a"), False).allowed
    seen: list[int] = []
    evaluate = one.evaluator(gpu_pod("b"), "b")

    def racing(usage: Usage) -> Decision:
        seen.append(usage.of(QUEUE).get(GPU, 0))
        if len(seen) == 2:  # after our GET: a rival takes the last GPU first
            rival = api.objects("QuotaLedger")[0]
            rival["spec"]["reservations"].append({**rival["spec"]["reservations"][0], "id": "x"})
            api.update(rival)
        return evaluate(usage)

    decision = one.ledger.admit("b", racing, dry_run=False)
    assert one.ledger.conflicts == 1
    assert seen == [1, 1, 2]  # cached, first fresh read, re-read after the conflict
    assert (decision.allowed, decision.reason) == (False, "QuotaExceeded")
    assert sorted(e.id for e in ledger_entries(api)) == ["a", "x"]


def test_endless_conflicts_fail_closed(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    instance = make(api, client, clock, nominal=100, max_attempts=3)
    try:
        assert instance.ledger.admit("a", instance.evaluator(gpu_pod("a"), "a"), False).allowed
        evaluate = instance.evaluator(gpu_pod("b"), "b")

        def always_racing(usage: Usage) -> Decision:
            api.update(api.objects("QuotaLedger")[0])  # bumps the resourceVersion
            return evaluate(usage)

        decision = instance.ledger.admit("b", always_racing, dry_run=False)
        assert (decision.allowed, decision.reason, decision.code) == (
            False,
            "LedgerUnavailable",
            403,
        )
        assert "too many concurrent updates" in decision.message
        assert decision.charge is None
        assert [e.id for e in ledger_entries(api)] == ["a"]
    finally:
        instance.backend.stop()


def test_unreachable_api_fails_closed(api: FakeApiServer, one: Instance) -> None:
    api.unreachable("reset")
    decision = one.ledger.admit("u", one.evaluator(gpu_pod("p"), "u"), dry_run=False)
    assert (decision.allowed, decision.reason) == (False, "LedgerUnavailable")
    assert "QuotaLedger queue-gpus" in decision.message
    api.reachable()


def test_expired_reservations_stop_counting_and_are_deleted(
    api: FakeApiServer, one: Instance
) -> None:
    assert one.ledger.admit("gone", one.evaluator(gpu_pod("p"), "gone"), False).allowed
    one.clock.now += TTL + 1
    assert one.ledger.usage().of(QUEUE) == {}
    assert one.ledger.reconcile() == 1
    assert ledger_entries(api) == []


def test_confirmed_reservation_counts_once_and_goes_after_the_grace(
    api: FakeApiServer, one: Instance
) -> None:
    pod = gpu_pod("p")
    decision = one.ledger.admit("r1", one.evaluator(pod, "r1"), False)
    assert decision.charge is not None
    api.create(gpu_pod("p", {CHARGE_ANNOTATION: decision.charge.to_annotation()}))
    eventually(lambda: one.backend.state.get("Pod", NAMESPACE, "p") is not None)
    assert one.ledger.usage().of(QUEUE) == {GPU: 1}  # pod and reservation: counted once
    assert one.ledger.reconcile() == 0  # confirmed now, kept for the grace period
    one.clock.now += one.ledger.options.confirm_grace
    assert one.ledger.reconcile() == 1
    assert ledger_entries(api) == []
    eventually(lambda: one.backend.state.list("QuotaLedger")[0]["spec"]["reservations"] == [])
    assert one.ledger.usage().of(QUEUE) == {GPU: 1}


def test_release_removes_the_reservation(api: FakeApiServer, one: Instance) -> None:
    assert one.ledger.admit("r", one.evaluator(gpu_pod("p"), "r"), False).allowed
    one.ledger.release("r")
    one.ledger.release("never-existed")
    assert ledger_entries(api) == []
    assert one.ledger.usage().of(QUEUE) == {}
