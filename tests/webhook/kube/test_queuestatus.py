"""Queue status on the fake API: what a ClusterQueue and its LocalQueue report, written only
when it changes."""

from __future__ import annotations

from typing import Any

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
            {"name": "default", "resources": [{"name": "gpu", "total": "1"}]}
        ]
        assert status["usageSummary"] == "default gpu=1/2"
        assert (status["admittedWorkloads"], status["pendingWorkloads"]) == (1, 0)
        (local,) = api.objects("LocalQueue")
        assert local["status"]["admittedWorkloads"] == 1
        assert local["status"]["pendingWorkloads"] == 0
        assert local["status"]["conditions"][0]["status"] == "True"
        assert local["status"]["flavorsUsage"] == status["flavorsUsage"]
        assert local["status"]["clusterQueue"] == {
            "name": QUEUE,
            "flavors": [
                {
                    "name": "default",
                    "resources": [
                        {"name": "gpu", "nominal": "2", "inUse": "1", "borrowed": "0",
                         "lent": "0", "lendable": "0"}
                    ],
                }
            ],
        }  # fmt: skip
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


def test_local_queue_status_follows_admissions_and_is_written_once_per_change(
    api: FakeApiServer, client: KubeClient
) -> None:
    instance = make(api, client, Clock(), nominal=2)
    try:
        writer = QueueStatusWriter(
            client, instance.backend, instance.ledger, instance.ledger.settings
        )
        assert writer.sync() == 2
        _settled(instance)
        assert writer.sync() == 0
        for i in range(2):
            pod = gpu_pod(f"p{i}")
            decision = instance.ledger.admit(
                f"uid-{i}", instance.evaluator(pod), False, f"team-a/p{i}"
            )
            assert decision.allowed
        assert writer.sync() == 2  # both admissions in one write per queue
        (local,) = api.objects("LocalQueue")
        assert local["status"]["admittedWorkloads"] == 2
        assert local["status"]["clusterQueue"]["flavors"][0]["resources"][0]["inUse"] == "2"
        _settled(instance, admitted=2)
        assert writer.sync() == 0
    finally:
        instance.backend.stop()


def _settled(instance: Any, admitted: int = 0) -> None:
    """The informer has the written statuses back."""
    eventually(lambda: all((q.get("status") or {}).get("admittedWorkloads") == admitted
                           for kind in ("ClusterQueue", "LocalQueue")
                           for q in instance.backend.state.list(kind)))  # fmt: skip
