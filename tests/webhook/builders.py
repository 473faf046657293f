"""Builders shared by the webhook tests: a small cluster with one GPU queue, pods, reviews."""

from __future__ import annotations

import asyncio
import base64
import itertools
from typing import Any

import httpx
import jsonpatch
import orjson

from webhook.store.clusterstate import ClusterState

__all__ = [
    "FLAVOR",
    "FLAVOR_LABELS",
    "GPU_CLASS",
    "NAMESPACE",
    "QUEUE",
    "TEMPLATE",
    "AppClient",
    "FakeBackend",
    "cluster_objects",
    "cluster_state",
    "node_objects",
    "pod",
    "review",
    "submit",
]

NAMESPACE = "team-a"
QUEUE = "team-a"
GPU_CLASS = "gpu.example.com"
FLAVOR = "a100"
FLAVOR_LABELS = {"gpu.example.com/model": "a100"}
TEMPLATE = "one-gpu"
_uids = itertools.count(1)


def cluster_objects(gpus: int = 2) -> list[dict[str, Any]]:
    """Namespace team-a, a GPU DeviceClass, flavor a100, ClusterQueue team-a with `gpus` GPUs,
    LocalQueues team-a/default and team-a/user-queue, template team-a/one-gpu (one GPU)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_CLASS}"'}}]},
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {"nodeLabels": dict(FLAVOR_LABELS)},
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["gpu"],
                        "flavors": [
                            {
                                "name": FLAVOR,
                                "resources": [
                                    {
                                        "name": "gpu",
                                        "kind": "DeviceClass",
                                        "deviceClassNames": [GPU_CLASS],
                                        "nominalQuota": gpus,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        *(
            {
                "apiVersion": "draquota.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"clusterQueue": QUEUE},
            }
            for name in ("default", "user-queue")
        ),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": 1}}
                        ]
                    }
                }
            },
        },
    ]


def node_objects(nodes: int, gpus_per_node: int = 8) -> list[dict[str, Any]]:
    """Nodes labelled for flavor a100, each with a ResourceSlice of `gpus_per_node` GPUs."""
    objects: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"node-{i:04d}"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {**FLAVOR_LABELS, "kubernetes.io/hostname": name},
                },
            }
        )
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{GPU_CLASS}"},
                "spec": {
                    "driver": GPU_CLASS,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{d}"} for d in range(gpus_per_node)],
                },
            }
        )
    return objects


def cluster_state(gpus: int = 2) -> ClusterState:
    return ClusterState(cluster_objects(gpus))


def pod(
    name: str = "train-0",
    templates: tuple[str, ...] = (TEMPLATE,),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = NAMESPACE,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod with one template claim entry per name in `templates`."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"claims": [{"name": f"c{i}"} for i in range(len(templates))]},
            }
        ],
        "resourceClaims": [
            {"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)
        ],
    }
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    uid: str | None = None,
    dry_run: bool = False,
    old: dict[str, Any] | None = None,
    kind: str = "Pod",
    resource: str = "pods",
    group: str = "",
    sub_resource: str | None = None,
    user: str = "alice",
) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview as the API server sends it."""
    metadata = (obj or old or {}).get("metadata") or {}
    request: dict[str, Any] = {
        "uid": uid or f"00000000-0000-4000-8000-{next(_uids):012d}",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "operation": operation,
        "namespace": metadata.get("namespace", NAMESPACE),
        "name": metadata.get("name", ""),
        "userInfo": {"username": user},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


class AppClient:
    """A synchronous client for an ASGI app over httpx's ASGI transport (no sockets)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            return await client.request(method, path, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return asyncio.run(self._request(method, path, **kwargs))

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)


class FakeBackend:
    """An in-memory Backend: a ClusterState, a settable readiness, optional fetchable objects."""

    blocking_io = False

    def __init__(self, state: ClusterState, fetchable: list[dict[str, Any]] | None = None) -> None:
        self.state = state
        self.readiness: tuple[bool, str] = (True, "")
        self.fetchable = {
            (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
            for o in fetchable or []
        }
        self.fetched: list[tuple[str, str | None, str]] = []
        self.started = 0

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        pass

    def ready(self) -> tuple[bool, str]:
        return self.readiness

    def fetch(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.fetched.append((kind, namespace, name))
        found = self.fetchable.get((kind, namespace, name))
        if found is not None:  # stored by the backend, as KubeBackend.fetch does
            self.state.upsert(found)
        return found


def submit(
    post: Any, obj: dict[str, Any], uid: str | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """A pod create as the API server runs it: /mutate, apply the patch, give the pod its uid,
    /validate. `post(path, document)` returns the AdmissionReview response; the validating
    response (or the mutating denial) is returned."""
    mutated = post("/mutate", review(obj, dry_run=dry_run))
    if not mutated["allowed"]:
        return mutated
    if "patch" in mutated:
        obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
    metadata = {**obj["metadata"], "uid": uid or f"uid-{next(_uids)}"}
    return post("/validate", review({**obj, "metadata": metadata}, dry_run=dry_run))
