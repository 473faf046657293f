"""ClusterLedger on the fake API: reservations in QuotaLedger objects, conflicts, reconciling."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from quota.charge import FlavorResource
from quota.decision import decide
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.conftest import FAST
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.options import LedgerOptions
from webhook.ledger.reservations import Reservation, shards_of

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

    def evaluator(self, pod: dict) -> Callable[[Usage], Decision]:
        def evaluate(usage: Usage) -> Decision:
            return decide(pod, self.backend.state, usage, self.ledger.settings)

        return evaluate


def start_instance(client: KubeClient, clock: Clock, options: LedgerOptions) -> Instance:
    backend = KubeBackend(client, FAST)
    ledger = ClusterLedger(
        client, backend, Settings(reservation_ttl_seconds=TTL), options, clock=clock, wall=clock
    )
    backend.attach(ledger)
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


def ledger_entries(api: FakeApiServer, base: str = f"queue-{QUEUE}") -> list[Reservation]:
    shards = shards_of(api.objects("QuotaLedger")).get(base, [])
    return [entry for shard in shards for entry in shard.entries]


def admit(instance: Instance, uid: str, name: str, dry_run: bool = False) -> Decision:
    pod = gpu_pod(name)
    return instance.ledger.admit(uid, instance.evaluator(pod), dry_run, f"{NAMESPACE}/{name}")


def create_pod(api: FakeApiServer, name: str, uid: str) -> None:
    pod = gpu_pod(name)
    pod["metadata"]["uid"] = uid
    api.create(pod)


def test_allowed_admission_is_recorded_by_pod_uid(api: FakeApiServer, one: Instance) -> None:
    decision = admit(one, "uid-0", "p0")
    assert decision.allowed
    [entry] = ledger_entries(api)
    assert (entry.id, entry.cluster_queue, entry.pod) == ("uid-0", QUEUE, f"{NAMESPACE}/p0")
    assert decision.charge is not None
    assert entry.charge == decision.charge.to_annotation()
    assert one.ledger.usage().of(QUEUE) == {GPU: 1}


def test_the_ledger_has_loaded_records_and_pods_when_the_backend_is_ready(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    for obj in cluster_objects(2, None):
        api.create(obj)
    create_pod(api, "p0", "uid-0")
    backend = KubeBackend(client, FAST)
    ledger = ClusterLedger(client, backend, Settings(), LedgerOptions(reconcile_interval=3600))
    backend.attach(ledger)
    assert ledger.warming()
    backend.start()
    try:
        assert backend.wait_until_ready(10), backend.ready()
        assert ledger.warming() == ""
        assert ledger.view.pods.usage.of(QUEUE) == {GPU: 1}  # charged already, not on first use
    finally:
        backend.stop()


def test_cohort_queues_share_one_ledger(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    instance = make(api, client, clock, cohort="research")
    try:
        assert admit(instance, "u", "p").allowed
        names = sorted(o["metadata"]["name"] for o in api.objects("QuotaLedger"))
        assert names == ["cohort-research-0", "cohort-research-head"]
    finally:
        instance.backend.stop()


def test_dry_run_decides_without_writing(api: FakeApiServer, one: Instance) -> None:
    assert admit(one, "uid-0", "p0", dry_run=True).allowed
    assert api.objects("QuotaLedger") == []


def test_quota_exhausted_by_reservations_denies(api: FakeApiServer, one: Instance) -> None:
    for i in range(2):
        assert admit(one, f"u{i}", f"p{i}").allowed
    denied = admit(one, "u2", "p2")
    assert (denied.allowed, denied.reason) == (False, "QuotaExceeded")
    assert "in use 2 of nominal 2" in denied.message
    assert [e.id for e in ledger_entries(api)] == ["u0", "u1"]


def test_retried_admission_does_not_count_twice(api: FakeApiServer, one: Instance) -> None:
    for _ in range(3):
        assert admit(one, "same", "p").allowed
    assert [e.id for e in ledger_entries(api)] == ["same"]


def test_conflict_rereads_and_reevaluates(api: FakeApiServer, one: Instance) -> None:
    """Another replica writes between our read and our write: 409, read again, decide again."""
    assert admit(one, "a", "a").allowed
    seen: list[int] = []
    evaluate = one.evaluator(gpu_pod("b"))

    def racing(usage: Usage) -> Decision:
        seen.append(usage.of(QUEUE).get(GPU, 0))
        if len(seen) == 1:  # while we decide on the cached ledger, a rival takes the last GPU
            rival = api.objects("QuotaLedger")[0]
            rival["spec"]["reservations"].append({**rival["spec"]["reservations"][0], "id": "x"})
            api.update(rival)
        return evaluate(usage)

    decision = one.ledger.admit("b", racing, False, f"{NAMESPACE}/b")
    assert one.ledger.conflicts == 1
    assert seen == [1, 2]  # decided on the cache; after the conflict, on a fresh read
    assert (decision.allowed, decision.reason) == (False, "QuotaExceeded")
    assert sorted(e.id for e in ledger_entries(api)) == ["a", "x"]


def test_endless_conflicts_fail_closed(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    instance = make(api, client, clock, nominal=100, max_attempts=3)
    try:
        assert admit(instance, "a", "a").allowed
        evaluate = instance.evaluator(gpu_pod("b"))

        def always_racing(usage: Usage) -> Decision:
            api.update(api.objects("QuotaLedger")[0])  # bumps the resourceVersion
            return evaluate(usage)

        decision = instance.ledger.admit("b", always_racing, False, f"{NAMESPACE}/b")
        assert (decision.verdict, decision.reason) == (Verdict.DENIED, "LedgerUnavailable")
        assert "too many concurrent updates" in decision.message
        assert decision.charge is None
        assert [e.id for e in ledger_entries(api)] == ["a"]
    finally:
        instance.backend.stop()


def test_unreachable_api_fails_closed(api: FakeApiServer, one: Instance) -> None:
    api.unreachable("reset")
    decision = admit(one, "u", "p")
    assert (decision.allowed, decision.reason) == (False, "LedgerUnavailable")
    assert "QuotaLedger queue-gpus" in decision.message
    api.reachable()


def test_reservation_whose_pod_never_came_expires_on_this_replicas_clock(
    api: FakeApiServer, one: Instance
) -> None:
    assert admit(one, "never", "p").allowed
    one.clock.now += TTL - 1
    assert one.ledger.usage().of(QUEUE) == {GPU: 1}
    assert one.ledger.reconcile() == 0
    one.clock.now += 2
    assert one.ledger.usage().of(QUEUE) == {}
    assert one.ledger.reconcile() == 1
    assert ledger_entries(api) == []


def test_record_stays_while_its_pod_lives_and_goes_when_it_is_deleted(
    api: FakeApiServer, one: Instance
) -> None:
    decision = admit(one, "uid-p", "p")
    assert decision.charge is not None
    create_pod(api, "p", "uid-p")
    eventually(lambda: one.backend.state.get("Pod", NAMESPACE, "p") is not None)
    assert one.ledger.usage().of(QUEUE) == {GPU: 1}  # pod and its record: counted once
    one.clock.now += 10 * TTL
    assert one.ledger.reconcile() == 0  # the admitted charge of a live pod stays
    assert [e.id for e in ledger_entries(api)] == ["uid-p"]
    api.delete("Pod", NAMESPACE, "p")
    eventually(lambda: one.backend.state.get("Pod", NAMESPACE, "p") is None)
    assert one.ledger.usage().of(QUEUE) == {}  # released at once, not after a TTL
    assert one.ledger.reconcile() == 1
    assert ledger_entries(api) == []


def test_reconciling_checks_only_records_that_changed_or_lost_their_pod(
    api: FakeApiServer, client: KubeClient, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for obj in cluster_objects(100, None):
        api.create(obj)
    instance = start_instance(client, clock, LedgerOptions(reconcile_interval=3600))
    try:
        for i in range(8):
            assert admit(instance, f"u{i}", f"p{i}").allowed
            create_pod(api, f"p{i}", f"u{i}")
        eventually(lambda: len(instance.backend.state.list("Pod")) == 8)
        checked: list[str] = []
        droppable = instance.ledger.upkeep.droppable
        monkeypatch.setattr(
            instance.ledger.upkeep, "droppable", lambda u: checked.append(u) or droppable(u)
        )
        assert instance.ledger.reconcile() == 0  # every record is held by its pod: pruned
        assert instance.ledger.reconcile() == 0
        assert checked == []
        api.delete("Pod", NAMESPACE, "p3")
        eventually(lambda: instance.backend.state.get("Pod", NAMESPACE, "p3") is None)
        assert instance.ledger.reconcile() == 1
        assert checked == ["u3"]
        assert sorted(e.id for e in ledger_entries(api)) == [f"u{i}" for i in range(8) if i != 3]
    finally:
        instance.backend.stop()


def all_at_once(admit_one: Callable[[str, str], Decision]) -> None:
    """6 threads, released together, each admitting 5 pods (`u-i-j`, `p-i-j`)."""
    barrier = threading.Barrier(6)

    def worker(index: int) -> None:
        barrier.wait()
        for j in range(5):
            assert admit_one(f"u-{index}-{j}", f"p-{index}-{j}").allowed

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_one_replica_never_conflicts_with_itself(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    for obj in cluster_objects(1000, None):
        api.create(obj)
    instance = start_instance(client, clock, LedgerOptions(reconcile_interval=3600))
    try:
        assert admit(instance, "u-first", "first").allowed  # creates the shard
        all_at_once(lambda uid, name: admit(instance, uid, name))
        assert len(ledger_entries(api)) == 31
        # the cohort lock orders this replica's writes: none may be refused as stale
        assert instance.ledger.conflicts == 0
    finally:
        instance.backend.stop()


def test_a_full_shard_is_sealed_and_the_next_one_takes_new_records(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    for obj in cluster_objects(100, None):
        api.create(obj)
    options = LedgerOptions(reconcile_interval=3600, shard_bytes=1500)
    instance = start_instance(client, clock, options)
    try:
        for i in range(8):
            assert admit(instance, f"u{i}", f"p{i}").allowed
        shards = shards_of(api.objects("QuotaLedger"))[f"queue-{QUEUE}"]
        assert len(shards) > 1
        assert all(s.sealed for s in shards[:-1]) and not shards[-1].sealed
        assert all(s.size() <= 1500 for s in shards)
        assert sorted(e.id for e in ledger_entries(api)) == [f"u{i}" for i in range(8)]
        assert instance.ledger.usage().of(QUEUE) == {GPU: 8}
    finally:
        instance.backend.stop()


def test_an_admission_without_conflict_decides_once_and_writes_once(
    api: FakeApiServer, one: Instance
) -> None:
    assert admit(one, "u0", "p0").allowed  # creates the shard
    eventually(lambda: one.backend.state.list("QuotaLedger"))
    decisions: list[int] = []
    evaluate = one.evaluator(gpu_pod("p1"))

    def counting(usage: Usage) -> Decision:
        decisions.append(1)
        return evaluate(usage)

    api.calls.clear()
    assert one.ledger.admit("u1", counting, False, f"{NAMESPACE}/p1").allowed
    ledger_calls = [c for c in api.calls if "quotaledgers/" in c[1]]  # not the watch
    assert (len(decisions), ledger_calls) == (
        1,
        [("PUT", "/apis/draquota.io/v1beta1/quotaledgers/queue-gpus-0")],
    )


def test_admissions_routed_beforehand_decide_once_each_however_many_arrive_together(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    """With the ClusterQueue known before deciding, the cohort's lock comes first: no
    admission is decided on a shard another one is about to write, so none decides twice."""
    for obj in cluster_objects(1000, None):
        api.create(obj)
    # one shard holds them all: sealing a full shard decides its batch again, on the next one
    options = LedgerOptions(reconcile_interval=3600, shard_bytes=64 * 1024)
    instance = start_instance(client, clock, options)
    decisions: list[str] = []
    try:
        assert admit(instance, "u-first", "first").allowed  # creates the shard

        def routed(uid: str, name: str) -> Decision:
            evaluate = instance.evaluator(gpu_pod(name))

            def counting(usage: Usage) -> Decision:
                decisions.append(uid)
                return evaluate(usage)

            return instance.ledger.admit(
                uid, counting, False, f"{NAMESPACE}/{name}", cluster_queue=QUEUE
            )

        all_at_once(routed)
        assert len(ledger_entries(api)) == 31
        assert sorted(decisions) == sorted(f"u-{i}-{j}" for i in range(6) for j in range(5))
        assert instance.ledger.conflicts == 0
    finally:
        instance.backend.stop()


def _routed(instance: Instance, uid: str, name: str) -> Decision:
    return instance.ledger.admit(
        uid, instance.evaluator(gpu_pod(name)), False, f"{NAMESPACE}/{name}", cluster_queue=QUEUE
    )


def _together(count: int, admit_one: Callable[[int], Decision]) -> list[Decision]:
    barrier = threading.Barrier(count)
    decisions: list[Decision | None] = [None] * count

    def worker(index: int) -> None:
        barrier.wait()
        decisions[index] = admit_one(index)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(d is not None for d in decisions)
    return [d for d in decisions if d is not None]


def _ledger_writes(api: FakeApiServer) -> int:
    return sum(1 for m, path in api.calls if "quotaledgers" in path and m in ("PUT", "POST"))


def test_admissions_that_arrive_during_a_write_are_written_together(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    """Group commit: a cohort's records go to one object, written one writer at a time; the
    admissions that wait meanwhile are decided and written in one write, not one each."""
    instance = make(api, client, clock, nominal=1000)
    try:
        assert _routed(instance, "u-first", "first").allowed  # creates the shard
        api.calls.clear()
        api.latency = 0.2  # every write takes long enough for all the others to arrive
        decisions = _together(6, lambda i: _routed(instance, f"u{i}", f"p{i}"))
        api.latency = 0.0
        assert all(d.allowed for d in decisions)
        assert sorted(e.id for e in ledger_entries(api)) == [
            "u-first",
            *(f"u{i}" for i in range(6)),
        ]
        assert _ledger_writes(api) <= 2  # the first arrival's write, then everyone else's
        assert instance.ledger.conflicts == 0
        assert instance.ledger.usage().of(QUEUE) == {GPU: 7}
    finally:
        instance.backend.stop()


def test_admissions_written_together_never_exceed_the_quota(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    """Each admission of a batch is decided on the usage with the ones before it: with room
    for 3, exactly 3 of 8 arriving together are admitted, and only their records written."""
    instance = make(api, client, clock, nominal=3)
    try:
        api.latency = 0.1
        decisions = _together(8, lambda i: _routed(instance, f"u{i}", f"p{i}"))
        api.latency = 0.0
        admitted = sorted(f"u{i}" for i, d in enumerate(decisions) if d.allowed)
        assert len(admitted) == 3
        assert {d.reason for d in decisions if not d.allowed} == {"QuotaExceeded"}
        assert sorted(e.id for e in ledger_entries(api)) == admitted
        assert instance.ledger.usage().of(QUEUE) == {GPU: 3}
    finally:
        instance.backend.stop()
