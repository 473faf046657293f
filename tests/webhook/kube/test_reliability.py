"""Reliability scenarios of issue 4: several replicas, one quota, concurrent admissions, a crash.

Each replica is a KubeBackend + ClusterLedger with its own connection pool, watching the
same fake API server. The "API server" side is simulated by the test: a pod is created
(with the charge annotation the mutating webhook stamps) only when its replica allowed it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from quota.charge import CHARGE_ANNOTATION
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.objects import QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from tests.webhook.ledger.test_cluster import GPU, TTL, Clock, Instance, start_instance
from webhook.kube.client import KubeClient
from webhook.ledger.options import LedgerOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUOTA = 100
PODS = 300
OPTIONS = LedgerOptions(reconcile_interval=3600)


class Replica:
    def __init__(self, kubeconfig: Path, clock: Clock) -> None:
        self.client = KubeClient.from_kubeconfig(str(kubeconfig))
        self.instance: Instance = start_instance(self.client, clock, OPTIONS)
        self.dead = False

    def kill(self) -> None:
        self.dead = True
        self.instance.backend.stop()
        self.client.api_client.close()


def submit(api: FakeApiServer, replica: Replica, index: int) -> str:
    """What the API server would see for pod `index`: its outcome as a short word."""
    if replica.dead:
        return "unavailable"
    uid = f"uid-{index}"
    pod = gpu_pod(f"p{index}")
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    decision = replica.instance.ledger.admit(uid, replica.instance.evaluator(pod), False, key)
    if replica.dead:
        return "lost"  # the replica died before answering: the pod is not created
    if not decision.allowed:
        assert decision.reason == "QuotaExceeded", decision.message
        assert f'exceeds quota of ClusterQueue "{QUEUE}"' in decision.message
        return "denied"
    assert decision.charge is not None
    created = gpu_pod(f"p{index}", {CHARGE_ANNOTATION: decision.charge.to_annotation()})
    created["metadata"]["uid"] = uid  # the uid the API server showed the webhook
    api.create(created)
    return "admitted"


def load(
    api: FakeApiServer,
    replicas: Sequence[Replica],
    indexes: range,
    on_submitted: dict[int, threading.Event] | None = None,
) -> list[str]:
    def one(index: int) -> str:
        if on_submitted and index in on_submitted:
            on_submitted[index].set()
        return submit(api, replicas[index % len(replicas)], index)

    with ThreadPoolExecutor(max_workers=24) as pool:
        return list(pool.map(one, indexes))


def converged(replicas: Sequence[Replica], api: FakeApiServer) -> bool:
    pods = len(api.objects("Pod"))
    return all(len(r.instance.backend.state.list("Pod")) == pods for r in replicas)


@pytest.fixture
def cluster(api: FakeApiServer, kubeconfig: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    for obj in cluster_objects(QUOTA):
        api.create(obj)
    yield api, kubeconfig


def test_three_replicas_admit_exactly_the_quota(cluster: tuple[FakeApiServer, Path]) -> None:
    api, kubeconfig = cluster
    clock = Clock()
    replicas = [Replica(kubeconfig, clock) for _ in range(3)]
    try:
        outcomes = load(api, replicas, range(PODS))
        assert outcomes.count("admitted") == QUOTA
        assert outcomes.count("denied") == PODS - QUOTA
        assert len(api.objects("Pod")) == QUOTA
        eventually(lambda: converged(replicas, api))
        for replica in replicas:
            assert replica.instance.ledger.usage().of(QUEUE) == {GPU: QUOTA}
    finally:
        for replica in replicas:
            replica.kill()


def test_replica_killed_mid_load_and_restarted_loses_and_double_counts_nothing(
    cluster: tuple[FakeApiServer, Path],
) -> None:
    api, kubeconfig = cluster
    clock = Clock()
    replicas = [Replica(kubeconfig, clock) for _ in range(3)]
    try:
        crash = {PODS // 4: threading.Event()}
        killer = threading.Thread(target=lambda: (crash[PODS // 4].wait(30), replicas[2].kill()))
        killer.start()
        first = load(api, replicas, range(PODS // 2), crash)
        killer.join()
        assert "unavailable" in first
        eventually(lambda: converged(replicas[:2], api))
        before = replicas[0].instance.ledger.usage().of(QUEUE)
        assert replicas[1].instance.ledger.usage().of(QUEUE) == before
        admitted = first.count("admitted")
        assert before[GPU] >= admitted  # pods, plus reservations of answers that were lost

        replicas[2] = Replica(kubeconfig, clock)  # the restart
        assert replicas[2].instance.ledger.usage().of(QUEUE) == before

        clock.now += TTL + 1  # lost answers' reservations expire on every replica's clock
        replicas[2].instance.ledger.reconcile()
        eventually(lambda: converged(replicas, api))
        for replica in replicas:
            assert replica.instance.ledger.usage().of(QUEUE) == {GPU: admitted}

        second = load(api, replicas, range(PODS // 2, PODS))
        assert admitted + second.count("admitted") == QUOTA
        assert len(api.objects("Pod")) == QUOTA
        eventually(lambda: converged(replicas, api))
        for replica in replicas:
            assert replica.instance.ledger.usage().of(QUEUE) == {GPU: QUOTA}
    finally:
        for replica in replicas:
            if not replica.dead:
                replica.kill()
