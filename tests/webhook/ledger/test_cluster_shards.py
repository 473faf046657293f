"""QuotaLedger shards come and go: empty ones are deleted, and no shard is ever the active one
twice, whatever a replica whose view is behind believes (fake API server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from quota.charge import FlavorResource
from quota.settings import Settings
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from tests.webhook.ledger.test_cluster import Clock, Instance, admit, ledger_entries, start_instance
from webhook.kube.client import KubeClient
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.options import LedgerOptions
from webhook.ledger.reservations import TOP_ANNOTATION, Reservation, Shard, shards_of
from webhook.store.clusterstate import ClusterState

pytestmark = pytest.mark.integration

BASE = f"queue-{QUEUE}"
HEAD = f"{BASE}-head"
GPU = FlavorResource("default", "gpu")
GRACE = 30


def names(api: FakeApiServer) -> list[str]:
    return sorted(o["metadata"]["name"] for o in api.objects("QuotaLedger"))


def head_index(api: FakeApiServer) -> int:
    head = next(o for o in api.objects("QuotaLedger") if o["metadata"]["name"] == HEAD)
    return int(head["metadata"]["annotations"][TOP_ANNOTATION])


def two_per_shard(api: FakeApiServer, client: KubeClient, clock: Clock) -> LedgerOptions:
    """Options whose shards hold two records each, measured on a record of this cluster."""
    probe = start_instance(client, clock, LedgerOptions(reconcile_interval=3600))
    try:
        assert admit(probe, "probe", "probe").allowed
        size = ledger_entries(api)[0].size
        probe.ledger.release(["probe"])
    finally:
        probe.backend.stop()
    for obj in api.objects("QuotaLedger"):
        api.delete("QuotaLedger", None, obj["metadata"]["name"])
    return LedgerOptions(reconcile_interval=3600, shard_bytes=2 * size + size // 2)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def many(api: FakeApiServer, client: KubeClient, clock: Clock) -> Iterator[Instance]:
    """Room for 100 pods; shards of two records; empty shards go after GRACE seconds."""
    for obj in cluster_objects(100):
        api.create(obj)
    options = two_per_shard(api, client, clock)
    instance = start_instance(
        client, clock, LedgerOptions(**{**vars(options), "empty_grace": GRACE})
    )
    yield instance
    instance.backend.stop()


def test_shards_emptied_below_the_head_are_deleted_after_the_grace(
    api: FakeApiServer, many: Instance
) -> None:
    for i in range(9):
        assert admit(many, f"u{i}", f"p{i}").allowed
    top = head_index(api)
    assert names(api) == sorted([*(f"{BASE}-{i}" for i in range(top + 1)), HEAD])
    assert top >= 3
    many.ledger.release([f"u{i}" for i in range(9)])
    assert ledger_entries(api) == []
    assert many.ledger.reconcile() == 0
    assert len(names(api)) == top + 2  # seen empty just now: kept for the grace
    many.clock.now += GRACE + 1
    many.ledger.reconcile()
    # the active shard and the head stay: the next admission writes where the last one did
    assert names(api) == [f"{BASE}-{top}", HEAD]
    assert many.ledger.shard_deletions() == {"deleted": top}
    assert admit(many, "again", "again").allowed
    assert [e.id for e in ledger_entries(api)] == ["again"]
    assert names(api) == [f"{BASE}-{top}", HEAD]


def test_a_shard_written_while_it_was_being_deleted_is_kept(
    api: FakeApiServer, many: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DELETE carries the resourceVersion of the empty shard the view saw: a writer that
    added a record meanwhile wins, and the record stays."""
    for i in range(5):
        assert admit(many, f"u{i}", f"p{i}").allowed
    many.ledger.release([f"u{i}" for i in range(5)])
    many.clock.now += GRACE + 1
    store = many.ledger.store
    delete = store.delete
    raced: list[str] = []

    def racing(name: str, version: str) -> str:
        if not raced:  # another writer puts a record in it just before our DELETE arrives
            raced.append(name)
            obj = next(o for o in api.objects("QuotaLedger") if o["metadata"]["name"] == name)
            record = Reservation("late", QUEUE, f"{NAMESPACE}/late", _charge_of(many, "late"))
            obj["spec"]["reservations"] = [record.to_dict()]
            api.update(obj)
        return delete(name, version)

    monkeypatch.setattr(store, "delete", racing)
    many.ledger.reconcile()
    assert raced and raced[0] in names(api)
    assert [e.id for e in ledger_entries(api)] == ["late"]
    assert many.ledger.shard_deletions()["conflict"] == 1
    eventually(lambda: many.ledger.record("late") is not None)
    many.clock.now += GRACE + 1
    many.ledger.reconcile()  # holding a record now: not deleted on the next pass either
    assert raced[0] in names(api)


def _charge_of(instance: Instance, uid: str) -> str:
    decision = admit(instance, uid, uid, dry_run=True)
    assert decision.charge is not None
    return decision.charge.to_annotation()


def test_a_shard_the_head_names_but_nobody_created_is_created_and_written(
    api: FakeApiServer, many: Instance
) -> None:
    """A replica moved the head to the next index and stopped before creating the shard: the
    others create it (empty) and write to it, rather than stall or skip it."""
    assert admit(many, "u0", "p0").allowed
    shard0, head = (
        next(o for o in api.objects("QuotaLedger") if o["metadata"]["name"] == n)
        for n in (f"{BASE}-0", HEAD)
    )
    shard0["spec"]["sealed"] = True
    api.update(shard0)
    head["metadata"]["annotations"][TOP_ANNOTATION] = "1"
    api.update(head)
    eventually(lambda: many.ledger.top(BASE) == 1)
    assert admit(many, "u1", "p1").allowed
    shards = shards_of(api.objects("QuotaLedger"))[BASE]
    assert [(s.index, [e.id for e in s.entries]) for s in shards] == [(0, ["u0"]), (1, ["u1"])]
    assert head_index(api) == 1


def test_a_ledger_without_a_head_keeps_its_shards(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    """Shards written by an older version, which knew no head: nothing says no replica of that
    version may still create them, so none is deleted until a head exists."""
    for obj in cluster_objects(100):
        api.create(obj)
    for index, sealed in ((0, True), (1, False)):
        body = {"reservations": [], **({"sealed": True} if sealed else {})}
        meta = {"name": f"{BASE}-{index}"}
        api.create(
            {
                "apiVersion": "draquota.io/v1beta1",
                "kind": "QuotaLedger",
                "metadata": meta,
                "spec": body,
            }
        )
    options = LedgerOptions(reconcile_interval=3600, empty_grace=GRACE)
    instance = start_instance(client, clock, options)
    try:
        instance.clock.now += GRACE + 1
        instance.ledger.reconcile()
        instance.clock.now += GRACE + 1
        instance.ledger.reconcile()
        assert names(api) == [f"{BASE}-0", f"{BASE}-1"]
        assert admit(instance, "u0", "p0").allowed  # written where the older version would
        assert [s.index for s in shards_of(api.objects("QuotaLedger"))[BASE] if s.entries] == [1]
    finally:
        instance.backend.stop()


class _Frozen:
    """The cluster view of a replica whose watch stopped at one moment."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def ready(self) -> tuple[bool, str]:
        return True, ""


def test_a_replica_behind_never_creates_again_a_shard_deleted_under_it(
    api: FakeApiServer, client: KubeClient, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's view stopped just after shard 1 was sealed, before shard 2 was created. Shard 2
    is then created, filled, sealed, emptied and deleted while the records that fill the
    queue land in shards 3 and 4. Creating shard 2 again, as its view says, B would decide on
    a queue it sees half empty: it must find the records it has not seen, and deny."""
    for obj in cluster_objects(3):
        api.create(obj)
    options = two_per_shard(api, client, clock)
    a = start_instance(client, clock, LedgerOptions(**{**vars(options), "empty_grace": 0}))
    frozen: list[ClusterState] = []
    create = a.ledger.store.create

    def snapshot(base: str, shard: Shard, entries: list[Reservation]) -> None:
        if shard.index == 2 and not frozen:
            state = a.backend.state
            frozen.append(ClusterState([o for k in state.kinds() for o in state.list(k)]))
        create(base, shard, entries)

    monkeypatch.setattr(a.ledger.store, "create", snapshot)
    try:
        steps: list[tuple[str, Callable[[], Any]]] = []
        for i in range(3):  # 0: [a0 a1] sealed, 1: [a2]
            steps.append((f"a{i}", lambda i=i: admit(a, f"a{i}", f"a{i}")))
        steps.append(("release", lambda: a.ledger.release(["a0", "a1"])))
        for i in (3, 4):  # 1: [a2 a3] sealed -- B's view stops here -- 2: [a4]
            steps.append((f"a{i}", lambda i=i: admit(a, f"a{i}", f"a{i}")))
        steps.append(("release", lambda: a.ledger.release(["a2", "a3"])))
        for i in (5, 6):  # 2: [a4 a5] sealed, 3: [a6]
            steps.append((f"a{i}", lambda i=i: admit(a, f"a{i}", f"a{i}")))
        steps.append(("release", lambda: a.ledger.release(["a4", "a5"])))
        for i in (7, 8):  # 3: [a6 a7] sealed, 4: [a8]: the queue is full
            steps.append((f"a{i}", lambda i=i: admit(a, f"a{i}", f"a{i}")))
        for what, step in steps:
            result = step()
            assert result is None or result.allowed, what
        a.ledger.reconcile()  # shards 0, 1, 2 are empty: deleted
        assert names(api) == [f"{BASE}-3", f"{BASE}-4", HEAD]
        assert frozen
        b = ClusterLedger(
            client, _Frozen(frozen[0]), Settings(reservation_ttl_seconds=60), options, clock, clock
        )
        assert b.usage().of(QUEUE) == {GPU: 2}  # a2, a3: all B has seen
        decision = b.admit("b0", lambda usage: _decide(b, usage), False, f"{NAMESPACE}/b0")
        assert (decision.allowed, decision.reason) == (False, "QuotaExceeded")
        assert names(api) == [f"{BASE}-3", f"{BASE}-4", HEAD]
        assert sorted(e.id for e in ledger_entries(api)) == ["a6", "a7", "a8"]
        assert b.usage().of(QUEUE) == {GPU: 3}
    finally:
        a.backend.stop()


def _decide(ledger: ClusterLedger, usage: Any) -> Any:
    from quota.decision import decide

    return decide(gpu_pod("b0"), ledger.state, usage, ledger.settings)


def test_records_of_running_pods_leave_sparse_shards_which_then_go(
    api: FakeApiServer, client: KubeClient, clock: Clock
) -> None:
    """A sealed shard a quarter full or less gives its records of running pods to the active
    shard; records that may still be taken back (a gated pod's, a reservation whose pod has
    not come) stay until they are records of running pods too."""
    for obj in cluster_objects(100):
        api.create(obj)
    options = two_per_shard(api, client, clock)  # 2.5 records of bytes: now 12.5
    options = LedgerOptions(
        **{**vars(options), "shard_bytes": options.shard_bytes * 5, "empty_grace": GRACE}
    )
    instance = start_instance(client, clock, options)
    try:
        for i in range(13):  # 0: u0..u11, sealed; 1: u12
            assert admit(instance, f"u{i}", f"p{i}").allowed
        instance.ledger.release([f"u{i}" for i in range(3, 12)])  # 0: u0 u1 u2, sparse
        running, gated = gpu_pod("p0"), gpu_pod("p1")
        running["metadata"]["uid"], gated["metadata"]["uid"] = "u0", "u1"
        gated["spec"]["schedulingGates"] = [{"name": "draquota.io/admission"}]
        for pod in (running, gated):
            api.create(pod)
        eventually(lambda: len(instance.backend.state.list("Pod")) == 2)
        usage = instance.ledger.usage().of(QUEUE)
        instance.ledger.reconcile()

        def held() -> dict[int, list[str]]:
            shards = shards_of(api.objects("QuotaLedger"))[BASE]
            return {s.index: sorted(e.id for e in s.entries) for s in shards}

        assert held() == {0: ["u1", "u2"], 1: ["u0", "u12"]}
        assert instance.ledger.usage().of(QUEUE) == usage
        del gated["spec"]["schedulingGates"]
        api.update({**api.objects("Pod")[1], "spec": gated["spec"]})
        late = gpu_pod("p2")
        late["metadata"]["uid"] = "u2"
        api.create(late)
        moved = {0: [], 1: ["u0", "u1", "u12", "u2"]}
        eventually(lambda: instance.ledger.reconcile() == 0 and held() == moved)
        instance.clock.now += GRACE + 1
        instance.ledger.reconcile()
        assert held() == {1: ["u0", "u1", "u12", "u2"]}
        assert instance.ledger.ledger_writes()[(QUEUE, "moved")] == 3
        assert instance.ledger.usage().of(QUEUE) == usage
    finally:
        instance.backend.stop()
