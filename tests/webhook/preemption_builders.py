"""A cohort of queueing ClusterQueues with preemption, and an evictor that plays the API server.

Teams `research` and `ml` share cohort `lab` (flavor a100, one GPU per pod); team `other`
has a ClusterQueue of its own outside it. Pods go through /mutate and /validate
(tests/security/cluster.py); the controller's writes go through the same stand-in API
server: an eviction is a graceful delete, a suspended Job's pods are deleted gracefully as
the Job controller would.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from quota.charge import FlavorResource
from quota.cluster import Obj
from quota.livepods import pod_key, pod_uid
from tests.security.cluster import Cluster
from tests.webhook.builders import FLAVOR, GPU_CLASS, TEMPLATE, cluster_objects, pod
from tests.webhook.queueing.test_controller import ApiWriter
from webhook.edge.metrics import Metrics
from webhook.queueing.admittedworkloads import (
    DISRUPTION_TARGET,
    PREEMPTED_ANNOTATION,
    PREEMPTED_BY_DRAQUOTA,
)
from webhook.queueing.controller import QueueController

GPU = "gpu"
GRACE = 30
PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


def cluster_queue(
    name: str,
    nominal: int,
    cohort: str | None = "lab",
    lending: int | None = None,
    **preemption: Any,
) -> dict[str, Any]:
    base = next(o for o in cluster_objects(nominal) if o["kind"] == "ClusterQueue")
    queue = copy.deepcopy(base)
    queue["metadata"]["name"] = name
    queue["spec"].update(whenFull="Queue", queueingStrategy="BestEffortFIFO")
    if cohort:
        queue["spec"]["cohort"] = cohort
    resource = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    if lending is not None:
        resource["lendingLimit"] = lending
    if preemption:
        queue["spec"]["preemption"] = preemption
    return queue


def team(name: str, cluster_queue_name: str | None = None) -> list[dict[str, Any]]:
    """Namespace `name`, its LocalQueue `default` and its one-GPU template."""
    template = next(o for o in cluster_objects() if o["kind"] == "ResourceClaimTemplate")
    template = copy.deepcopy(template)
    template["metadata"]["namespace"] = name
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": name},
            "spec": {"clusterQueue": cluster_queue_name or name},
        },
        template,
    ]


def lab(*queues: dict[str, Any]) -> Cluster:
    """The DeviceClass, the flavor, and a team (namespace, LocalQueue) per ClusterQueue."""
    shared = [o for o in cluster_objects() if o["kind"] in ("DeviceClass", "ResourceFlavor")]
    objects = list(shared)
    for queue in queues:
        objects += [queue, *team(queue["metadata"]["name"])]
    return Cluster(objects)


def reclaim_lab(**research_preemption: Any) -> Cluster:
    """research: nominal 4, lends 2, reclaims Any (unless told otherwise); ml: nominal 0, borrows;
    other: nominal 2, outside the cohort."""
    policy = research_preemption or {"reclaimWithinCohort": "Any"}
    return lab(
        cluster_queue("research", 4, lending=2, **policy),
        cluster_queue("ml", 0),
        cluster_queue("other", 2, cohort=None),
    )


def gpu_pod(
    namespace: str, name: str, priority: int | None = None, labels: dict[str, str] | None = None
) -> Obj:
    obj = pod(name, (TEMPLATE,), labels=labels, namespace=namespace)
    if priority is not None:
        obj["spec"]["priority"] = priority
    return obj


def submit(cluster: Cluster, *pods: Obj) -> None:
    for obj in pods:
        answer = cluster.create(dict(obj))
        assert answer["allowed"], answer
        cluster.clock.now += 1  # creation order is queue order


def used(cluster: Cluster, queue: str) -> int:
    return cluster.ledger.usage().of(queue).get(FlavorResource(FLAVOR, GPU), 0)


def running(cluster: Cluster, namespace: str) -> list[str]:
    """Pods ungated and not deleted: what runs."""
    return sorted(
        p["metadata"]["name"]
        for p in cluster.state.list("Pod", namespace)
        if not p["spec"].get("schedulingGates") and not p["metadata"].get("deletionTimestamp")
    )


def disruption(pod_obj: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in (pod_obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == DISRUPTION_TARGET:
            return dict(condition)
    return {}


class ClusterEvictor:
    """Evictions as the API server carries them out: the condition on the pod's status, a
    graceful delete, a Job suspended through the webhook then its pods deleted."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.marked: list[str] = []
        self.evictions: list[str] = []  # every eviction request, refused or not
        self.suspended: list[str] = []
        self.refuse: set[str] = set()  # pods a PodDisruptionBudget protects
        self.messages: dict[str, str] = {}

    def _current(self, obj: Obj, kind: str = "Pod") -> dict[str, Any] | None:
        metadata = obj["metadata"]
        found = self.cluster.state.get(kind, metadata["namespace"], metadata["name"])
        if found is None or pod_uid(found) != pod_uid(obj):
            return None
        return copy.deepcopy(dict(found))

    def mark(self, obj: Obj, message: str) -> bool:
        current = self._current(obj)
        if current is None:
            return True
        status = current.setdefault("status", {})
        condition = {"type": DISRUPTION_TARGET, "status": "True",
                     "reason": PREEMPTED_BY_DRAQUOTA, "message": message}  # fmt: skip
        others = [c for c in status.get("conditions", []) if c["type"] != DISRUPTION_TARGET]
        status["conditions"] = [*others, condition]
        self.cluster.state.upsert(current)
        self.marked.append(pod_key(current))
        self.messages[pod_key(current)] = message
        return True

    def evict(self, pod: Obj) -> str:
        self.evictions.append(pod_key(pod))
        current = self._current(pod)
        if current is None or current["metadata"].get("deletionTimestamp"):
            return ""
        if pod_key(current) in self.refuse:
            return PDB_REFUSAL
        self.cluster.delete(current["metadata"]["name"], GRACE, current["metadata"]["namespace"])
        return ""

    def suspend(self, job: Obj, message: str) -> bool:
        current = self._current(job, "Job")
        if current is None:
            return False
        current["spec"]["suspend"] = True
        current["metadata"].setdefault("annotations", {})[PREEMPTED_ANNOTATION] = message
        if not self.cluster.update(current)["allowed"]:
            return False
        self.suspended.append(pod_key(current))
        self.messages[pod_key(current)] = message
        for p in self.cluster.state.list("Pod", current["metadata"]["namespace"]):
            owners = p["metadata"].get("ownerReferences") or ()
            if any(o.get("uid") == pod_uid(current) for o in owners):
                self.cluster.delete(p["metadata"]["name"], GRACE, p["metadata"]["namespace"])
        return True


def controller(
    cluster: Cluster, metrics: Metrics | None = None, writer: ApiWriter | None = None
) -> tuple[QueueController, ApiWriter, ClusterEvictor]:
    writer = writer or ApiWriter(cluster)
    evictor = ClusterEvictor(cluster)
    queue = QueueController(
        cluster.backend,
        cluster.ledger,
        cluster.settings,
        None,
        writer,
        wall=cluster.clock,
        metrics=metrics,
        evictor=evictor,
    )
    return queue, writer, evictor


def after_grace(cluster: Cluster) -> None:
    """Time passes until every evicted pod's grace has ended."""
    cluster.clock.now += 3 * GRACE


__all__ = [
    "GPU_CLASS",
    "GRACE",
    "PDB_REFUSAL",
    "ClusterEvictor",
    "after_grace",
    "cluster_queue",
    "controller",
    "disruption",
    "gpu_pod",
    "lab",
    "reclaim_lab",
    "running",
    "submit",
    "team",
    "used",
]
