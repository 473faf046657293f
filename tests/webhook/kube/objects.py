"""Builders for the objects of the reliability scenarios: one GPU queue and pods asking one GPU."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

NAMESPACE = "team-a"
GPU_CLASS = "gpu.example.com"
QUEUE = "gpus"
TEMPLATE = "one-gpu"


def cluster_objects(nominal: int, cohort: str | None = None) -> list[Obj]:
    """A namespace, a GPU DeviceClass, a one-GPU claim template and a queue of `nominal` GPUs."""
    queue_spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["gpu"],
                "flavors": [
                    {
                        "name": "default",
                        "resources": [
                            {
                                "name": "gpu",
                                "kind": "DeviceClass",
                                "deviceClassNames": [GPU_CLASS],
                                "nominalQuota": nominal,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    if cohort:
        queue_spec["cohort"] = cohort
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]
                    }
                }
            },
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default"},
            "spec": {},
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": QUEUE},
            "spec": queue_spec,
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {"clusterQueue": QUEUE},
        },
    ]


def gpu_pod(name: str, annotations: dict[str, str] | None = None) -> Obj:
    """A pod asking one GPU through the template, in the queue's namespace."""
    metadata: Obj = {"name": name, "namespace": NAMESPACE}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}],
        },
    }
