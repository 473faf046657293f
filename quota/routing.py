"""Which queues a workload goes to: its LocalQueue (label `draquota.io/queue-name`, else
`default` in the namespace; none: not managed) and that queue's ClusterQueue, which must
exist, be valid and select the namespace (SPEC §4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quota.charge import QUEUE_LABEL
from quota.cluster import ClusterView, Obj
from quota.hints import queue_hint
from quota.objectkeys import object_key_of
from quota.queues import ClusterQueue, LocalQueue
from quota.queuetable import QueueTable
from quota.selectors import requirement_matches
from quota.verdict import Decision, deny
from quota.workloads import Workload

__all__ = [
    "DEFAULT_LOCAL_QUEUE",
    "Route",
    "namespace_selected",
    "queue_label",
    "route_of",
    "subject_of",
]


DEFAULT_LOCAL_QUEUE = "default"


@dataclass(frozen=True)
class Route:
    """A workload's LocalQueue and the ClusterQueue it points to."""

    local: LocalQueue
    queue: ClusterQueue


def subject_of(workload: Workload) -> str:
    """How a denial names the object: a pod whose name a controller generates is named after
    its owner, since `par4-` or `par4-x7k2p` means nothing to the user who made the Job."""
    subject = f"{workload.kind.lower()} {workload.namespace}/{workload.name}"
    metadata = workload.pod.get("metadata") or {}
    generated = metadata.get("generateName")
    if workload.kind != "Pod" or not isinstance(generated, str) or not generated:
        return subject
    name = metadata.get("name")
    if not isinstance(name, str) or not name or name == generated:
        subject = f"pod {workload.namespace}/{generated}<generated>"
    else:
        subject = f"{subject} (generated name)"
    owners = metadata.get("ownerReferences")
    owner = (
        next((o for o in owners if isinstance(o, Mapping) and o.get("controller")), None)
        if isinstance(owners, list)
        else None
    )
    if owner is None:
        return subject
    return f"{subject} of {owner.get('kind')} {workload.namespace}/{owner.get('name')}"


def queue_label(workload: Workload) -> str:
    labels = (workload.pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


def namespace_selected(queue: ClusterQueue, namespace: Obj | None, name: str) -> bool:
    """Whether the queue's namespaceSelector selects the namespace (null selects none)."""
    selector = queue.namespace_selector
    if selector is None:
        return False
    labels = dict(((namespace or {}).get("metadata") or {}).get("labels") or {})
    labels.setdefault("kubernetes.io/metadata.name", name)
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(requirement_matches(e, labels) for e in selector.get("matchExpressions") or ())


def route_of(workload: Workload, state: ClusterView, table: QueueTable) -> Route | Decision | None:
    """The queues of a workload, a denial, or None when it is not managed."""
    subject, namespace = subject_of(workload), workload.namespace
    label = queue_label(workload)
    name = label or DEFAULT_LOCAL_QUEUE
    local = table.local_queues.get(object_key_of(namespace, name))
    if local is None:
        if not label:
            return None
        hint = queue_hint(namespace, name, table.local_queues)
        return deny(
            "LocalQueueNotFound",
            f"{subject}: LocalQueue {namespace}/{name} not found (label {QUEUE_LABEL}){hint}",
            queue=name,
        )
    if isinstance(local, str):
        return deny("InvalidLocalQueue", f"{subject}: {local}", queue=name)
    where = f'ClusterQueue "{local.cluster_queue}" (LocalQueue {local.key})'
    queue = table.queues.get(local.cluster_queue)
    if local.cluster_queue in table.invalid:
        problem = table.invalid[local.cluster_queue]
        return deny(
            "InvalidClusterQueue",
            f"{subject}: {where} is invalid and admits nothing: {problem}",
            queue=name,
        )
    if queue is None:
        return deny(
            "ClusterQueueNotFound",
            f'{subject}: ClusterQueue "{local.cluster_queue}" not found '
            f"(LocalQueue {local.key} points to it)",
            queue=name,
        )
    if not namespace_selected(queue, state.get("Namespace", None, namespace), namespace):
        return deny(
            "NamespaceNotSelected",
            f"{subject}: namespace {namespace} is not selected by the namespaceSelector of {where}",
            queue=name,
        )
    return Route(local, queue)
