"""Issue 10, case 4: the QuotaLedger never grows into a write the API server refuses.

Records are sharded: the active shard is sealed before its entries pass
`shard_bytes` and the next one takes new records, so no object outgrows the cap
however many admissions are in flight, every admission writes one shard, and a
full shard denies nobody. Issue 29: nor do the shards grow in number as pods come and
go; emptied ones are deleted, sparse ones emptied.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from quota.decision import decide
from quota.settings import Settings
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.conftest import FAST, api, client, kubeconfig  # noqa: F401
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from tests.webhook.ledger.test_cluster import Clock
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.options import LedgerOptions
from webhook.ledger.reservations import SHARD_BYTES, shards_of

pytestmark = pytest.mark.integration

CAP = 4096  # bytes of entries per shard: small, so that a few hundred admissions fill many


def test_admissions_in_flight_fill_shards_that_never_outgrow_the_cap(
    api: FakeApiServer,  # noqa: F811
    client: KubeClient,  # noqa: F811
) -> None:
    for obj in cluster_objects(10_000):
        api.create(obj)
    backend = KubeBackend(client, FAST)
    ledger = ClusterLedger(
        client, backend, Settings(placement="Off"), LedgerOptions(shard_bytes=CAP)
    )
    backend.attach(ledger)
    backend.start()
    try:
        assert backend.wait_until_ready(10)
        for i in range(300):
            pod = gpu_pod(f"p{i}")
            decision = ledger.admit(
                f"uid-{i}",
                lambda usage, pod=pod: decide(pod, backend.state, usage, ledger.settings),
                False,
                f"{NAMESPACE}/p{i}",
            )
            assert decision.allowed, decision.message
        objects = api.objects("QuotaLedger")
        shards = shards_of(objects)[f"queue-{QUEUE}"]
        # as the API server stores them: compact JSON
        sizes = [len(json.dumps(o["spec"]["reservations"], separators=(",", ":"))) for o in objects]
        assert len(shards) >= 10
        assert max(sizes) <= CAP
        assert all(s.sealed for s in shards[:-1]) and not shards[-1].sealed
        assert sum(len(s.entries) for s in shards) == 300
        assert ledger.usage().of(QUEUE) == {next(iter(ledger.usage().of(QUEUE))): 300}
    finally:
        backend.stop()


def test_the_default_cap_keeps_every_object_far_below_the_api_servers_limit() -> None:
    # 10,000 admissions in flight spread over shards of SHARD_BYTES of entries each
    assert SHARD_BYTES * 1.25 < 256 * 1024  # room for the object's envelope and encoding


def _deciding(backend: KubeBackend, ledger: ClusterLedger, pod: dict[str, Any]) -> Any:
    return lambda usage: decide(pod, backend.state, usage, ledger.settings)


def test_pods_coming_and_going_leave_shards_bounded_by_the_records_they_hold(
    api: FakeApiServer,  # noqa: F811
    client: KubeClient,  # noqa: F811
) -> None:
    for obj in cluster_objects(10_000):
        api.create(obj)
    backend = KubeBackend(client, FAST)
    clock = Clock()
    unpaced = LedgerOptions(
        shard_bytes=CAP, reconcile_interval=3600, write_rate=1e6, write_burst=1e6, empty_grace=1
    )
    ledger = ClusterLedger(client, backend, Settings(placement="Off"), unpaced, clock=clock)
    backend.attach(ledger)
    backend.start()
    rng = random.Random(29)
    live: list[str] = []
    try:
        assert backend.wait_until_ready(10)
        for wave in range(3):  # 150 pods admitted and started, then 9 in 10 of them leave
            for i in range(150):
                name = f"w{wave}-{i}"
                pod = gpu_pod(name)
                assert ledger.admit(
                    name, _deciding(backend, ledger, pod), False, f"{NAMESPACE}/{name}"
                ).allowed
                pod["metadata"]["uid"] = name
                api.create(pod)
                live.append(name)
            eventually(lambda: len(backend.state.list("Pod")) == len(live))
            ledger.usage()  # and charged: seen running by the ledger
            for name in rng.sample(live, k=len(live) * 9 // 10):
                api.delete("Pod", NAMESPACE, name)
                live.remove(name)
            eventually(lambda: len(backend.state.list("Pod")) == len(live))
            for _ in range(4):  # records dropped, sparse shards emptied, empty ones deleted
                ledger.reconcile()
                clock.now += 2
        shards = shards_of(api.objects("QuotaLedger"))[f"queue-{QUEUE}"]
        assert sorted(e.id for s in shards for e in s.entries) == sorted(live)
        held = sum(e.size for s in shards for e in s.entries)
        assert len(shards) <= 4 * held // CAP + 1  # and the active one
        created = 3 * 150 * (held // len(live)) // CAP
        assert created > 3 * len(shards)  # what the waves filled, without deletions
    finally:
        backend.stop()
