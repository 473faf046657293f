"""One elected replica holds quota for all three (issue 30), on the real control plane: the
others forward it the creates that would hold quota; killed mid-burst, the replica taking
over waits out the dead one's window and the quota still ends exact; stopped (a rolling
update), it writes its records and hands over at once."""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import Flavor, Scenario, create_cpu_pod, scenario

pytestmark = pytest.mark.e2e

QUOTA = 60
PODS = 150
WORKERS = 16
BUDGET = 240.0  # seconds for a scenario, the takeover wait included


def _burst(s: Scenario, api: k8s.CoreV1Api, at_third: Any) -> tuple[dict[int, str], set[str]]:
    """PODS creates from WORKERS clients; `at_third()` runs when a third have been sent; every
    refusal is retried (as a controller would) until BUDGET. The outcomes, and the messages
    of the refusals."""
    started = time.monotonic()

    def one(index: int) -> str:
        if index == PODS // 3:
            at_third()
        return create_cpu_pod(api, s.namespace, f"p{index}")

    with ThreadPoolExecutor(WORKERS) as pool:
        outcomes = dict(zip(range(PODS), pool.map(one, range(PODS)), strict=True))
    messages = {o for o in outcomes.values() if o.startswith("retry")}
    while failed := [i for i, o in outcomes.items() if o.startswith("retry")]:
        assert time.monotonic() - started < BUDGET, Counter(outcomes.values())
        time.sleep(2)
        for index in failed:
            outcomes[index] = create_cpu_pod(api, s.namespace, f"p{index}")
            if outcomes[index].startswith("retry"):
                messages.add(outcomes[index])
    return outcomes, messages


def _exact(s: Scenario, api: k8s.CoreV1Api, outcomes: dict[int, str]) -> None:
    """Exactly the quota admitted, stored, and reported by every replica; the records left
    are of pods that exist (a record of a create that failed expires)."""
    counts = Counter(outcomes.values())
    assert counts == {"admitted": QUOTA, "denied": PODS - QUOTA}, counts
    pods = api.list_namespaced_pod(s.namespace).items
    assert len(pods) == QUOTA
    per_pod = json.loads(pods[0].metadata.annotations["draquota.io/charge"])["usage"]["cpu"]
    replicas = len(s.installed.replicas)
    eventually(lambda: s.usage("main", "cpu") == [float(QUOTA * per_pod)] * replicas, timeout=60)
    names = {f"{s.namespace}/{p.metadata.name}" for p in pods}
    eventually(lambda: {r["pod"] for r in s.reservations()} <= names, timeout=90)


def _told_to_retry(messages: set[str]) -> bool:
    """Every denial draquota gave (403; a request cut with its replica is a 500) says to
    submit again."""
    denials = [m for m in messages if m.startswith("retry 403")]
    return all("draquota" in m and ("retry" in m[10:] or "again" in m) for m in denials)


@pytest.fixture
def burst(draquota_cluster: Draquota, request: pytest.FixtureRequest) -> Scenario:
    name = "e2e-elect-" + request.node.name.split("_")[1][:6]
    return scenario(draquota_cluster, name, Flavor("main", 0, {}, cpu=QUOTA))


def test_killing_the_elected_replica_mid_burst_still_admits_exactly_the_quota(
    burst: Scenario, kube: k8s.ApiClient
) -> None:
    installed, api = burst.installed, k8s.CoreV1Api(kube)
    victim = installed.elected()
    with installed.disrupted():
        try:
            outcomes, messages = _burst(burst, api, lambda: installed.kill(victim))
            assert installed.elected() is not victim
        finally:
            installed.restart(victim)
    _exact(burst, api, outcomes)
    assert _told_to_retry(messages), messages


def test_stopping_the_elected_replica_hands_over_without_the_takeover_wait(
    burst: Scenario, kube: k8s.ApiClient
) -> None:
    installed, api = burst.installed, k8s.CoreV1Api(kube)
    victim = installed.elected()

    def stop() -> None:
        installed.proxy.remove(victim.port)  # the Service drops a terminating pod
        victim.stop()  # SIGTERM: refuse, write the records, release the Lease

    with installed.disrupted():
        try:
            outcomes, messages = _burst(burst, api, stop)
            assert installed.elected() is not victim
        finally:
            installed.restart(victim)
    _exact(burst, api, outcomes)
    assert len(burst.reservations()) == QUOTA  # every record written before the handover
    assert _told_to_retry(messages), messages
    # released, not expired: the next replica held quota without waiting out a dead one
    assert not any("AdmittingReplicaTakingOver" in m or "taking over" in m for m in messages)
