"""300 concurrent pod creates against a quota of 100, through the real API server and three
replicas, with one replica SIGKILLed mid-burst and restarted."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client as k8s

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import Flavor, Scenario, create_cpu_pod, scenario

pytestmark = pytest.mark.e2e

QUOTA = 100
PODS = 300
WORKERS = 24
BUDGET = 240.0  # seconds for the whole scenario, reservation expiry included


@pytest.fixture(scope="module")
def burst(draquota_cluster: Draquota) -> Scenario:
    # 100 cpus of quota in a flavor whose nodes do not exist: admitted pods stay Pending
    return scenario(draquota_cluster, "e2e-burst", Flavor("main", 0, {}, cpu=QUOTA))


def test_300_concurrent_creates_against_100_admit_exactly_100_with_a_replica_killed(
    burst: Scenario, kube: k8s.ApiClient
) -> None:
    installed = burst.installed
    victim = installed.replicas[-1]
    api = k8s.CoreV1Api(kube)
    started = time.monotonic()
    restarted = threading.Event()
    connections = dict(installed.proxy.connections)

    def one(index: int) -> str:
        if index == PODS // 3:
            installed.kill(victim)
        if index == 2 * PODS // 3:
            threading.Thread(target=lambda: (installed.restart(victim), restarted.set())).start()
        return create_cpu_pod(api, burst.namespace, f"p{index}")

    with installed.disrupted(), ThreadPoolExecutor(WORKERS) as pool:
        outcomes = dict(zip(range(PODS), pool.map(one, range(PODS)), strict=True))
    # A request in flight on the killed replica fails (failurePolicy Fail): the user retries.
    while failed := [i for i, o in outcomes.items() if o.startswith("retry")]:
        assert time.monotonic() - started < BUDGET, Counter(outcomes.values())
        time.sleep(1)
        for index in failed:
            outcomes[index] = create_cpu_pod(api, burst.namespace, f"p{index}")
    assert restarted.wait(60), victim.tail()
    # the API server's calls were spread over every replica, the killed one included
    spread = {p: n - connections.get(p, 0) for p, n in installed.proxy.connections.items()}
    assert all(n > 0 for n in spread.values()), spread
    counts = Counter(outcomes.values())
    assert counts["admitted"] <= QUOTA, counts
    # Reservations made by the killed replica for requests that never completed hold quota
    # until they expire (reservationTTLSeconds); after that the quota is whole again.
    extra = PODS
    while counts["admitted"] < QUOTA:
        assert time.monotonic() - started < BUDGET, counts
        outcome = create_cpu_pod(api, burst.namespace, f"p{extra}")
        if outcome == "admitted":
            counts["admitted"] += 1
            extra += 1
        else:
            time.sleep(2)
    assert create_cpu_pod(api, burst.namespace, f"p{extra}") == "denied"
    pods = api.list_namespaced_pod(burst.namespace).items
    assert len(pods) == QUOTA
    assert all("draquota.io/charge" in (p.metadata.annotations or {}) for p in pods)
    # every replica, the restarted one included, reports the same usage: all of the quota
    per_pod = json.loads(pods[0].metadata.annotations["draquota.io/charge"])["usage"]["cpu"]
    eventually(
        lambda: burst.usage("main", "cpu") == [float(QUOTA * per_pod)] * len(installed.replicas),
        timeout=30,
    )
