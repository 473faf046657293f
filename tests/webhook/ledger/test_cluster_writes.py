"""Record writes per ClusterQueue: paced, counted, and exported on /metrics (fake API server)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from quota.decision import decide
from quota.verdict import Decision
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.objects import NAMESPACE, QUEUE, TEMPLATE, cluster_objects, gpu_pod
from tests.webhook.ledger.test_cluster import Clock, Instance, admit, start_instance
from webhook.edge.metrics import Metrics
from webhook.kube.client import KubeClient
from webhook.ledger.options import LedgerOptions

pytestmark = pytest.mark.integration

OTHER, OTHER_NAMESPACE = "other", "team-b"


def other_team() -> list[dict[str, Any]]:
    """A second namespace, template, ClusterQueue `other` (no cohort) and its LocalQueue."""
    objects = {o["kind"]: o for o in cluster_objects(100)}
    namespace = copy.deepcopy(objects["Namespace"])
    namespace["metadata"]["name"] = OTHER_NAMESPACE
    template = copy.deepcopy(objects["ResourceClaimTemplate"])
    template["metadata"]["namespace"] = OTHER_NAMESPACE
    queue = copy.deepcopy(objects["ClusterQueue"])
    queue["metadata"]["name"] = OTHER
    local = copy.deepcopy(objects["LocalQueue"])
    local["metadata"]["namespace"] = OTHER_NAMESPACE
    local["spec"]["clusterQueue"] = OTHER
    return [namespace, template, queue, local]


def routed(instance: Instance, uid: str, name: str, namespace: str, queue: str) -> Decision:
    pod = gpu_pod(name)
    pod["metadata"]["namespace"] = namespace
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == TEMPLATE

    def evaluate(usage: Any) -> Decision:
        return decide(pod, instance.backend.state, usage, instance.ledger.settings)

    return instance.ledger.admit(uid, evaluate, False, f"{namespace}/{name}", cluster_queue=queue)


@pytest.fixture
def paced(api: FakeApiServer, client: KubeClient) -> Iterator[Instance]:
    """One record a second per ClusterQueue, two at once, no waiting."""
    for obj in [*cluster_objects(100), *other_team()]:
        api.create(obj)
    options = LedgerOptions(reconcile_interval=3600, write_rate=1, write_burst=2, write_wait=0)
    instance = start_instance(client, Clock(), options)
    yield instance
    instance.backend.stop()


def test_a_queue_over_its_write_rate_is_refused_to_retry_and_writes_nothing(
    api: FakeApiServer, paced: Instance
) -> None:
    for i in range(2):
        assert routed(paced, f"u{i}", f"p{i}", NAMESPACE, QUEUE).allowed
    refused = routed(paced, "u2", "p2", NAMESPACE, QUEUE)
    assert (refused.allowed, refused.reason) == (False, "LedgerBusy")
    assert refused.message == (
        f"draquota cannot reserve quota now: ClusterQueue {QUEUE} is writing admission "
        "records faster than 1 per second; retry"
    )
    recorded = [r["id"] for o in api.objects("QuotaLedger") for r in o["spec"]["reservations"]]
    assert sorted(recorded) == ["u0", "u1"]
    # another queue's records are not held back by it
    assert routed(paced, "o0", "o0", OTHER_NAMESPACE, OTHER).allowed
    assert paced.ledger.ledger_writes() == {
        (QUEUE, "written"): 2,
        (QUEUE, "throttled"): 1,
        (OTHER, "written"): 1,
    }


def test_an_admission_decided_before_routing_is_paced_by_the_queue_it_was_decided_for(
    paced: Instance,
) -> None:
    for i in range(2):
        assert admit(paced, f"u{i}", f"p{i}").allowed  # no cluster_queue: the decision names it
    refused = admit(paced, "u2", "p2")
    assert refused.reason == "LedgerBusy" and QUEUE in refused.message


def _sample(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def test_writes_removals_conflicts_and_objects_are_exported(
    api: FakeApiServer, client: KubeClient
) -> None:
    for obj in cluster_objects(100):
        api.create(obj)
    instance = start_instance(client, Clock(), LedgerOptions(reconcile_interval=3600))
    try:
        for i in range(3):
            assert admit(instance, f"u{i}", f"p{i}").allowed
        evaluate = instance.evaluator(gpu_pod("b"))
        raced: list[int] = []

        def racing(usage: Any) -> Decision:
            if not raced:  # another replica writes the shard while this one decides
                raced.append(1)
                shard = next(o for o in api.objects("QuotaLedger") if o["spec"]["reservations"])
                api.update(shard)
            return evaluate(usage)

        assert instance.ledger.admit("b", racing, False, f"{NAMESPACE}/b").allowed
        instance.ledger.release(["u0"])
        metrics = Metrics()
        metrics.watch(instance.backend, instance.ledger, instance.ledger.settings)
        text = metrics.render().decode()
        written = _sample(
            text, "draquota_ledger_writes_total", cluster_queue=QUEUE, outcome="written"
        )
        assert written == 4.0
        for outcome in ("conflict", "removed"):
            labels = {"cluster_queue": QUEUE, "outcome": outcome}
            assert _sample(text, "draquota_ledger_writes_total", **labels) == 1.0
        assert _sample(text, "draquota_ledger_objects", ledger=f"queue-{QUEUE}") == 2.0
    finally:
        instance.backend.stop()
