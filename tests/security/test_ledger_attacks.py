"""Attacks on the shared QuotaLedger, against draquota replicas over tests/fakeapi.

Two replicas (each a KubeBackend + ClusterLedger + the app) share one fake API
server, as two pods of the Deployment share the cluster.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonpatch
import orjson
import pytest

from quota.charge import CHARGE_ANNOTATION, FlavorResource
from quota.decision import decide
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from tests.fakeapi import FakeApiServer
from tests.security.cluster import Clock
from tests.webhook.builders import AppClient, review
from tests.webhook.kube.conftest import FAST
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from webhook.edge.app import create_app
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.options import LedgerOptions
from webhook.ledger.reservations import shards_of

pytestmark = pytest.mark.integration

GPU = FlavorResource("default", "gpu")
TTL = 60
QUIET = LedgerOptions(reconcile_interval=3600)  # reconciled only when a test says so


@dataclass
class Replica:
    backend: KubeBackend
    ledger: ClusterLedger
    http: AppClient
    clock: Clock

    def call(self, endpoint: str, document: dict[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = self.http.post(f"/{endpoint}", json=document).json()
        return response["response"]

    def usage(self) -> int:
        return self.ledger.usage().of(QUEUE).get(GPU, 0)


def replica(
    client: KubeClient,
    clock: Clock,
    options: LedgerOptions = QUIET,
) -> Replica:
    settings = Settings(placement="Off", reservation_ttl_seconds=TTL, admission_deadline_seconds=30)
    backend = KubeBackend(client, FAST)
    ledger = ClusterLedger(client, backend, settings, options, clock=clock, wall=clock)
    backend.attach(ledger)
    http = AppClient(create_app(backend, ledger, settings))
    backend.start()
    assert backend.wait_until_ready(10), backend.ready()
    return Replica(backend, ledger, http, clock)


@pytest.fixture
def replicas(api: FakeApiServer, client: KubeClient) -> Iterator[tuple[Replica, Replica]]:
    for obj in cluster_objects(2):
        api.create(obj)
    # B's clock runs ten reservation TTLs ahead of A's
    pair = (replica(client, Clock()), replica(client, Clock(Clock().now + 10 * TTL)))
    yield pair
    for r in pair:
        r.backend.stop()


def admitted(r: Replica, name: str, uid: str) -> dict[str, Any] | None:
    """Mutate and validate pod `name` with `uid` through replica `r`; the pod if allowed."""
    obj = gpu_pod(name)
    mutated = r.call("mutate", review(obj))
    if not mutated["allowed"]:
        return None
    obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
    obj["metadata"]["uid"] = uid
    return obj if r.call("validate", review(obj))["allowed"] else None


def test_06_decoy_annotations_do_not_confirm_an_admission_in_flight(
    api: FakeApiServer,
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    victim = admitted(a, "victim", "uid-victim")  # admitted; the create is still in flight
    assert victim is not None
    # the attacker copies the victim's charge annotation onto pods of their own
    for i in range(3):
        decoy = gpu_pod(
            f"decoy-{i}", {CHARGE_ANNOTATION: victim["metadata"]["annotations"][CHARGE_ANNOTATION]}
        )
        decoy["spec"]["resourceClaims"] = []
        api.create(decoy)
    eventually(lambda: b.backend.state.get("Pod", NAMESPACE, "decoy-2") is not None)
    assert b.usage() == 1
    assert admitted(b, "one-more", "uid-one-more") is not None
    assert admitted(b, "greedy", "uid-greedy") is None  # 2 of 2: the victim still counts
    # and no reconciler deletes the victim's record
    assert a.ledger.reconcile() == 0 and b.ledger.reconcile() == 0
    entries = [
        e.id for s in shards_of(api.objects("QuotaLedger"))[f"queue-{QUEUE}"] for e in s.entries
    ]
    assert "uid-victim" in entries


def test_10_a_replica_with_a_skewed_clock_cannot_expire_others_reservations(
    api: FakeApiServer,
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    assert admitted(a, "p0", "uid-p0") is not None  # in flight: its pod is not created yet
    eventually(lambda: b.ledger.records().get("uid-p0") is not None)
    for r in (a, b):
        r.clock.now += TTL / 2
    # B judges the record's age on its own clock, from when it first saw it: not expired
    assert b.usage() == 1
    assert b.ledger.reconcile() == 0
    assert admitted(b, "p1", "uid-p1") is not None
    assert admitted(b, "p2", "uid-p2") is None
    # a reservation whose pod never comes expires a TTL after each replica first saw it
    eventually(lambda: a.ledger.records().get("uid-p1") is not None)
    for r in (a, b):
        r.clock.now += TTL + 1
    assert a.usage() == 0 and b.usage() == 0


def test_an_admission_that_fails_to_decide_does_not_deny_its_batch(
    api: FakeApiServer, replicas: tuple[Replica, Replica]
) -> None:
    """Admissions of one cohort arriving together are decided and written together (group
    commit): a pod whose decision fails must fail alone, or it could deny other teams'."""
    a = replicas[0]

    def evaluator(name: str) -> Callable[[Usage], Decision]:
        pod = gpu_pod(name)

        def evaluate(usage: Usage) -> Decision:
            if name == "hostile":
                raise RecursionError("a decision that fails")
            return decide(pod, a.backend.state, usage, a.ledger.settings)

        return evaluate

    results: dict[str, Decision] = {}

    def one(name: str) -> None:
        results[name] = a.ledger.admit(
            f"uid-{name}", evaluator(name), False, f"{NAMESPACE}/{name}", cluster_queue=QUEUE
        )

    api.latency = 0.3  # ok-1's write is slow: the other two queue and are decided together
    first = threading.Thread(target=one, args=("ok-1",))
    first.start()
    time.sleep(0.1)
    rest = [threading.Thread(target=one, args=(n,)) for n in ("hostile", "ok-2")]
    for thread in rest:
        thread.start()
    for thread in [first, *rest]:
        thread.join(30)
    api.latency = 0.0
    assert results["ok-1"].allowed and results["ok-2"].allowed
    assert not results["hostile"].allowed
    assert results["hostile"].reason == "LedgerUnavailable"
    assert a.usage() == 2


def _team_b(cohort: str) -> list[dict[str, Any]]:
    """Another team: namespace `team-b`, its template, ClusterQueue `other` in `cohort`."""
    objects = {o["kind"]: o for o in cluster_objects(100, cohort)}
    namespace, template = objects["Namespace"], objects["ResourceClaimTemplate"]
    queue, local = objects["ClusterQueue"], objects["LocalQueue"]
    namespace["metadata"]["name"] = template["metadata"]["namespace"] = "team-b"
    queue["metadata"]["name"] = local["spec"]["clusterQueue"] = "other"
    local["metadata"]["namespace"] = "team-b"
    return [namespace, template, queue, local]


def _routed(r: Replica, uid: str, namespace: str, queue: str) -> Decision:
    pod = gpu_pod(uid)
    pod["metadata"]["namespace"] = namespace

    def evaluate(usage: Usage) -> Decision:
        return decide(pod, r.backend.state, usage, r.ledger.settings)

    return r.ledger.admit(uid, evaluate, False, f"{namespace}/{uid}", cluster_queue=queue)


def test_a_group_churning_in_one_queue_leaves_no_shards_and_keeps_to_its_write_rate(
    api: FakeApiServer, client: KubeClient
) -> None:
    """Issue 29: a pod group written and taken back pass after pass (1,485 writes in 42 s,
    160 QuotaLedgers a minute never deleted). Now its queue writes at most its rate, the
    shards it fills and empties are deleted, and the records another team writes to the same
    cohort's shards meanwhile, through another replica, all stay, gathered in few shards."""
    for obj in [*cluster_objects(100, "shared"), *_team_b("shared")]:
        api.create(obj)
    clock = Clock()
    rate, burst, rounds = 10, 20, 12
    options = LedgerOptions(
        reconcile_interval=3600,
        shard_bytes=2048,  # about 10 records: the churn fills many shards
        write_rate=rate,
        write_burst=burst,
        write_wait=0,  # a write over the rate is refused at once (a queued group would wait)
        empty_grace=5,
    )
    churner, peer = replica(client, clock, options), replica(client, clock, options)
    try:
        written = 0
        kept: list[str] = []
        for round_ in range(rounds):
            clock.now += 1.0  # one pass a second, a group of 30 each
            members = [f"g{round_}-{i}" for i in range(30)]
            decisions = [_routed(churner, uid, NAMESPACE, QUEUE) for uid in members]
            assert {d.reason for d in decisions} <= {"Admitted", "LedgerBusy"}
            written += sum(d.allowed for d in decisions)
            churner.ledger.release(
                [u for u, d in zip(members, decisions, strict=True) if d.allowed]
            )
            uid = f"b{round_}"
            assert _routed(peer, uid, "team-b", "other").allowed  # the other queue's own pace
            pod = gpu_pod(uid)
            pod["metadata"].update(namespace="team-b", uid=uid)
            api.create(pod)  # and runs
            kept.append(uid)
        # a burst, then the rate: whatever the group asked for (30 a second)
        assert rate * (rounds - 1) <= written <= burst + rate * (rounds - 1)
        assert churner.ledger.ledger_writes()[(QUEUE, "throttled")] == 30 * rounds - written
        filled = shards_of(api.objects("QuotaLedger"))["cohort-shared"]
        assert len(filled) >= 10
        eventually(lambda: all(r.ledger.record(u) for r in (churner, peer) for u in kept))
        for _ in range(2):  # the sparse shards are emptied, then deleted past the grace
            for r in (churner, peer):
                r.ledger.reconcile()
            clock.now += 10
        shards = shards_of(api.objects("QuotaLedger"))["cohort-shared"]
        assert sorted(e.id for s in shards for e in s.entries) == sorted(kept)
        held = sum(e.size for s in shards for e in s.entries)
        assert len(shards) <= 4 * held // 2048 + 1
        assert len(api.objects("QuotaLedger")) == len(shards) + 1  # and the head
        eventually(lambda: peer.ledger.usage().of("other").get(GPU, 0) == len(kept))
        eventually(lambda: churner.ledger.usage().of(QUEUE).get(GPU, 0) == 0)
    finally:
        for r in (churner, peer):
            r.backend.stop()
