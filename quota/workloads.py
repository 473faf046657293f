"""Pods and the workloads that stamp them out from a pod template (SPEC §3.5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from quota.cluster import Obj
from quota.errors import InvalidObject, object_ref
from quota.fields import FieldReader
from quota.objectkeys import namespace_of

__all__ = ["WORKLOAD_KINDS", "Workload", "as_workload"]

# kind -> path of its pod template
WORKLOAD_KINDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "Pod": (),
        "PodTemplate": ("template",),
        "Job": ("spec", "template"),
        "CronJob": ("spec", "jobTemplate", "spec", "template"),
        "Deployment": ("spec", "template"),
        "ReplicaSet": ("spec", "template"),
        "ReplicationController": ("spec", "template"),
        "StatefulSet": ("spec", "template"),
        "DaemonSet": ("spec", "template"),
    }
)


@dataclass(frozen=True)
class Workload:
    """A pod, or the pod every replica of a workload would be.

    `pod` is a Pod-shaped object (the template's metadata and spec in the
    workload's namespace); `pods` is how many run at once for a Job, else 1;
    `template_path` is where the pod spec sits in the original object.
    """

    ref: str
    kind: str
    namespace: str
    name: str
    pod: Mapping[str, Any]
    pods: int = 1
    template_path: str = ""
    suspended: bool = False  # a Job created with `spec.suspend: true`: no pod runs yet


def _job_pods(reader: FieldReader, job_spec: Mapping[str, Any], path: str) -> int:
    values = []
    for field in ("parallelism", "completions"):
        value = job_spec.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise reader.fail(f"{path}.{field}", f"must be a non-negative integer, got {value!r}")
        values.append(value)
    if job_spec.get("parallelism") is None:
        values.append(1)
    return min(values)


def as_workload(obj: Obj) -> Workload:
    """The pod (template) of a Pod or pod-template workload; InvalidObject for any other kind."""
    kind = obj.get("kind")
    metadata = obj.get("metadata")
    if not isinstance(kind, str) or not isinstance(metadata, Mapping):
        raise InvalidObject(
            "object", "kind", "not a Kubernetes object (kind and metadata required)"
        )
    namespace = namespace_of(obj)
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    ref = object_ref(kind, namespace, name)
    if kind not in WORKLOAD_KINDS:
        raise InvalidObject(ref, "kind", f'unsupported kind "{kind}"')
    if kind == "Pod":
        return Workload(ref, kind, namespace, name, obj)
    reader = FieldReader(ref)
    template: Mapping[str, Any] = obj
    for depth, key in enumerate(WORKLOAD_KINDS[kind]):
        template = reader.mapping(template.get(key), ".".join(WORKLOAD_KINDS[kind][: depth + 1]))
    path = ".".join(WORKLOAD_KINDS[kind])
    if not template.get("spec"):
        raise reader.fail(f"{path}.spec", "required")
    template_meta = reader.mapping(template.get("metadata"), f"{path}.metadata")
    labels = dict(reader.mapping(metadata.get("labels"), "metadata.labels"))
    labels.update(reader.mapping(template_meta.get("labels"), f"{path}.metadata.labels"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template_meta, "name": name, "namespace": namespace, "labels": labels},
        "spec": template["spec"],
    }
    pods, suspended = 1, False
    if kind == "Job":
        job_spec = reader.mapping(obj.get("spec"), "spec")
        pods, suspended = _job_pods(reader, job_spec, "spec"), job_spec.get("suspend") is True
    elif kind == "CronJob":
        job_spec = reader.mapping(
            reader.mapping(obj.get("spec"), "spec").get("jobTemplate"), "spec.jobTemplate"
        )
        pods = _job_pods(
            reader,
            reader.mapping(job_spec.get("spec"), "spec.jobTemplate.spec"),
            "spec.jobTemplate.spec",
        )
    return Workload(ref, kind, namespace, name, pod, pods, path, suspended)
