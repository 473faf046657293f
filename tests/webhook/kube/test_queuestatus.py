"""Queue status on the fake API: what a ClusterQueue and its LocalQueue report, written only
when it changes; for counter resources, whether a device publishes them, and amounts in their
unit (issue 27, over the partitionable GPUs recorded in tests/webhook/gpu_memory.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quota.status import SOURCES_CONDITION
from tests.fakeapi import FakeApiServer
from tests.webhook import gpu_memory
from tests.webhook.kube.objects import QUEUE, gpu_pod
from tests.webhook.kube.test_backend import eventually
from tests.webhook.ledger.test_cluster import Clock, make, start_instance
from webhook.kube.client import KubeClient
from webhook.kube.queuestatus import QueueStatusWriter
from webhook.ledger.options import LedgerOptions
from webhook.store.clusterstate import ClusterState

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


def _condition(status: dict, kind: str) -> dict:
    (condition,) = (c for c in status.get("conditions") or () if c["type"] == kind)
    return condition


def test_a_counter_no_device_publishes_is_a_false_condition_until_a_driver_publishes_it(
    api: FakeApiServer, client: KubeClient
) -> None:
    """ClusterQueue vision charges GPU memory by the `memory` counter: before the recorded
    partitionable GPUs are published it says the resource is charged 0; once they are, it
    says it is published. Amounts are in the unit of nominalQuota (40Gi)."""
    for obj in gpu_memory.objects():
        if obj["kind"] != "ResourceSlice":
            api.create(obj)
    instance = start_instance(client, Clock(), LedgerOptions(reconcile_interval=3600))
    try:
        writer = QueueStatusWriter(
            client, instance.backend, instance.ledger, instance.ledger.settings
        )
        writer.sync()
        status = _status(api, gpu_memory.QUEUE)
        unpublished = _condition(status, SOURCES_CONDITION)
        assert (unpublished["status"], unpublished["reason"]) == ("False", "Unpublished")
        assert unpublished["message"] == (
            "charged 0 until a device publishes it: gpu-memory: no device of "
            "a100.gpu.example.com, mig-1g.5gb.gpu.example.com publishes counter memory"
        )
        assert _condition(status, "Active")["status"] == "True"  # a warning: it still admits
        assert status["usageSummary"] == "a100 gpus=0/16 gpu-memory=0/40Gi"
        for obj in gpu_memory.recorded("ResourceSlice"):
            api.create(obj)
        eventually(lambda: len(instance.backend.state.list("ResourceSlice")) == 2)
        assert writer.sync() >= 1
        published = _condition(_status(api, gpu_memory.QUEUE), SOURCES_CONDITION)
        assert (published["status"], published["reason"]) == ("True", "Published")
    finally:
        instance.backend.stop()


def test_local_queue_status_reports_gpu_memory_in_its_unit(
    api: FakeApiServer, client: KubeClient
) -> None:
    for obj in gpu_memory.objects():
        api.create(obj)
    instance = start_instance(client, Clock(), LedgerOptions(reconcile_interval=3600))
    try:
        for i in range(3):  # three 1g.5gb slices, 5Gi of GPU memory each
            pod = copy.deepcopy(gpu_pod(f"notebook-{i}"))
            pod["metadata"]["namespace"] = gpu_memory.NAMESPACE
            pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "mig-slice"
            key = f"{gpu_memory.NAMESPACE}/notebook-{i}"
            decision = instance.ledger.admit(f"uid-{i}", instance.evaluator(pod), False, key)
            assert decision.allowed, decision.message
        writer = QueueStatusWriter(
            client, instance.backend, instance.ledger, instance.ledger.settings
        )
        writer.sync()
        (local,) = api.objects("LocalQueue")
        rows = {r["name"]: r for r in local["status"]["clusterQueue"]["flavors"][0]["resources"]}
        assert (rows["gpu-memory"]["nominal"], rows["gpu-memory"]["inUse"]) == ("40Gi", "15Gi")
        assert (rows["gpus"]["nominal"], rows["gpus"]["inUse"]) == ("16", "3")
        summary = _status(api, gpu_memory.QUEUE)["usageSummary"]
        assert summary == "a100 gpus=3/16 gpu-memory=15Gi/40Gi"
    finally:
        instance.backend.stop()
