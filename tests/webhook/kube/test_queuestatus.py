"""ClusterQueue status on the fake API: the Active condition and usage, written once."""

from __future__ import annotations

import pytest

from tests.fakeapi import FakeApiServer
from tests.webhook.kube.objects import QUEUE, gpu_pod
from tests.webhook.kube.test_backend import eventually
from tests.webhook.kube.test_ledger import Clock, make
from webhook.clusterstate import ClusterState
from webhook.kube.client import KubeClient
from webhook.kube.queuestatus import QueueStatusWriter

pytestmark = pytest.mark.integration


def _status(api: FakeApiServer, name: str) -> dict:
    return (
        next(q for q in api.objects("ClusterQueue") if q["metadata"]["name"] == name).get("status")
        or {}
    )


def test_queue_status_reports_active_and_usage_and_is_not_rewritten(
    api: FakeApiServer, client: KubeClient
) -> None:
    instance = make(api, client, Clock(), nominal=2)
    try:
        pod = gpu_pod("p0")
        decision = instance.ledger.admit("uid-0", instance.evaluator(pod), False, "team-a/p0")
        assert decision.allowed and decision.charge is not None
        writer = QueueStatusWriter(
            client, instance.backend, instance.ledger, instance.ledger.settings
        )
        assert writer.sync() == 2  # the ClusterQueue and its LocalQueue
        status = _status(api, QUEUE)
        (condition,) = status["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "Active",
            "True",
            "Ready",
        )
        assert status["flavorsUsage"] == [
            {"name": "default", "resources": [{"name": "gpu", "total": 1}]}
        ]
        assert status["admittedWorkloads"] == 1
        assert "pendingWorkloads" not in status  # the queue rejects when full
        (local,) = api.objects("LocalQueue")
        assert local["status"] == {"admittedWorkloads": 1}
        # once the informer has the written status, there is nothing left to write
        eventually(lambda: _cached_status(instance.backend.state, QUEUE).get("conditions"))
        eventually(lambda: all(q.get("status") for q in instance.backend.state.list("LocalQueue")))
        assert writer.sync() == 0, "an unchanged status is not written again"
        assert (
            _status(api, QUEUE)["conditions"][0]["lastTransitionTime"]
            == condition["lastTransitionTime"]
        )
    finally:
        instance.backend.stop()


def _cached_status(state: ClusterState, name: str) -> dict:
    queue = state.get("ClusterQueue", None, name) or {}
    return dict(queue.get("status") or {})
