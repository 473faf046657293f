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
from webhook.app import create_app
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.kube.ledger import ClusterLedger, LedgerOptions
from webhook.kube.reservations import shards_of

pytestmark = pytest.mark.integration

GPU = FlavorResource("default", "gpu")
TTL = 60


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


def replica(client: KubeClient, clock: Clock) -> Replica:
    settings = Settings(placement="Off", reservation_ttl_seconds=TTL, admission_deadline_seconds=30)
    backend = KubeBackend(client, FAST)
    options = LedgerOptions(reconcile_interval=3600)
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
