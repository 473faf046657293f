"""The objects of the scale benchmark: a cluster as a scheduler and draquota would leave it.

`nodes` nodes with 8 GPUs each (one ResourceSlice per node), and on every 10th node a
partitionable pool (shared counters, a GPU and its 4 partitions); 200 namespaces with a
LocalQueue `default` each, 50 ClusterQueues in 5 cohorts; `pods` pods spread over the
namespaces, scheduled (`spec.nodeName`), 30% of them holding one GPU through a claim
generated from a template and allocated on their node (`status.allocation` on the claim,
`status.resourceClaimStatuses` on the pod), the rest asking cpu and memory only. Every pod
has an admission record in the QuotaLedger shards of its cohort, written as
`webhook.ledger.cluster` writes them (the charge is what `quota.livepods` computes for it).

Pods carry what real pods carry and draquota does not read (managed fields, env, volumes,
probes), so the trimmed cache is measured against realistic objects.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from quota.charge import Charge
from quota.livepods import live_pod_charge
from quota.settings import Settings
from webhook.ledger.reservations import (
    SHARD_BYTES,
    Reservation,
    Shard,
    ledger_object,
    shard_name,
)
from webhook.store.clusterstate import ClusterState

Obj = dict[str, Any]

GPU_CLASS = "gpu.example.com"
PART_CLASS = "partition.gpu.example.com"
DRIVER = "gpu.example.com"
NAMESPACES = 200
QUEUES = 50
COHORTS = 5
GPUS_PER_NODE = 8
GPU_SHARE = 0.3  # of the pods hold one GPU (2.4 of 8 per node at 20 pods per node)
TEMPLATE = "one-gpu"
FLAVOR = "on-demand"
POOL_LABEL = "example.com/pool"


@dataclass(frozen=True)
class Size:
    nodes: int
    pods: int


def namespace_of(index: int) -> str:
    return f"ns-{index % NAMESPACES:03d}"


def queue_of(namespace_index: int) -> str:
    return f"cq-{namespace_index % QUEUES:02d}"


def cohort_of(queue_index: int) -> str:
    return f"cohort-{queue_index % COHORTS}"


def _meta(name: str, namespace: str | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": name, **extra}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def device_classes() -> list[Obj]:
    def cls(name: str, kind: str) -> Obj:
        expr = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": _meta(name),
            "spec": {"selectors": [{"cel": {"expression": expr}}]},
        }

    return [cls(GPU_CLASS, "gpu"), cls(PART_CLASS, "partition")]


def queues(size: Size) -> list[Obj]:
    """ResourceFlavor, 50 ClusterQueues in 5 cohorts with room for the benchmark's admissions."""
    gpus = size.nodes * GPUS_PER_NODE // QUEUES
    objs: list[Obj] = [
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": _meta(FLAVOR),
            "spec": {"nodeLabels": {POOL_LABEL: "main"}},
        }
    ]
    for q in range(QUEUES):
        resources = [
            {"name": "gpu", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS, PART_CLASS],
             "nominalQuota": gpus * 4},
            {"name": "cpu", "nominalQuota": f"{size.pods}"},
            {"name": "memory", "nominalQuota": f"{size.pods}Gi"},
        ]  # fmt: skip
        objs.append(
            {
                "apiVersion": "draquota.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": _meta(queue_of(q)),
                "spec": {
                    "cohort": cohort_of(q),
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["gpu", "cpu", "memory"],
                            "flavors": [{"name": FLAVOR, "resources": resources}],
                        }
                    ],
                },
            }
        )
    return objs


def namespaces() -> Iterator[Obj]:
    for n in range(NAMESPACES):
        ns = namespace_of(n)
        yield {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns)}
        yield {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": _meta("default", ns),
            "spec": {"clusterQueue": queue_of(n)},
        }
        yield {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": _meta(TEMPLATE, ns),
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]
                    }
                }
            },
        }


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def _gpu(index: int, node: int) -> Obj:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "model": {"string": "LATEST-GPU-MODEL"},
            "index": {"int": index},
            "uuid": {"string": f"gpu-{node:05d}-{index}"},
            "driverVersion": {"version": "1.0.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:0{index // 4}"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _slice(name: str, node: str, pool: str, count: int, spec: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": _meta(name),
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
            **spec,
        },
    }


def _partitionable(node: str) -> list[Obj]:
    """A pool of one GPU and its 4 partitions over shared counters (DRAPartitionableDevices)."""
    pool = f"{node}-parts"
    counters = "gpu-0-counters"
    consumed = {"memory": {"value": "80Gi"}, "slices": {"value": "4"}}
    devices: list[Obj] = [
        {
            "name": "gpu-0",
            "attributes": {"type": {"string": "gpu"}, "index": {"int": 0}},
            "capacity": {"memory": {"value": "80Gi"}},
            "consumesCounters": [{"counterSet": counters, "counters": consumed}],
        }
    ]
    for p in range(4):
        devices.append(
            {
                "name": f"gpu-0-part-{p}",
                "attributes": {"type": {"string": "partition"}, "partition": {"int": p}},
                "capacity": {"memory": {"value": "20Gi"}},
                "consumesCounters": [
                    {
                        "counterSet": counters,
                        "counters": {"memory": {"value": "20Gi"}, "slices": {"value": "1"}},
                    }
                ],
            }
        )
    shared = {"sharedCounters": [{"name": counters, "counters": consumed}]}
    return [
        _slice(f"{pool}-counters", node, pool, 2, shared),
        _slice(f"{pool}-devices", node, pool, 2, {"devices": devices}),
    ]


def nodes(size: Size) -> Iterator[Obj]:
    for n in range(size.nodes):
        name = node_name(n)
        yield {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": _meta(name, labels={"kubernetes.io/hostname": name, POOL_LABEL: "main"}),
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        devices = [_gpu(i, n) for i in range(GPUS_PER_NODE)]
        yield _slice(f"{name}-{DRIVER}", name, name, 1, {"devices": devices})
        if n % 10 == 0:
            yield from _partitionable(name)


def _noise(name: str) -> tuple[Obj, Obj]:
    """What real pods carry and draquota never reads (about 3 KB of JSON)."""
    managed = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:pod-template-hash": {}}}},
        }
    ]
    container = {
        "image": "registry.example.com/train:1.2.3",
        "env": [{"name": f"VAR_{i}", "value": f"value-{i}-{name}"} for i in range(8)],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }
    return {"managedFields": managed, "labels": {"app": "train"}}, container


def pod(index: int, size: Size, uid: str | None = None) -> tuple[Obj, Obj | None]:
    """Pod `index`, scheduled, and its generated claim (allocated) when it holds a GPU."""
    ns = namespace_of(index)
    name = f"pod-{index:06d}"
    node = node_name(index % size.nodes)
    meta_noise, container = _noise(name)
    gpu = (index * 7919) % 100 < GPU_SHARE * 100
    uid = uid or str(uuid.UUID(int=index + 1))
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}}
    spec: Obj = {
        "nodeName": node,
        "containers": [{"name": "main", **container, "resources": resources}],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "restartPolicy": "Never",
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
    }
    status: Obj = {"phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1"}
    claim: Obj | None = None
    if gpu:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
        spec["containers"][0]["resources"] = {**resources, "claims": [{"name": "gpu"}]}
        claim_name = f"{name}-gpu-{index % 100000:05x}"
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
        claim = _claim(claim_name, ns, name, uid, node, index)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, ns, uid=uid, **meta_noise),
        "spec": spec,
        "status": status,
    }, claim


def _claim(name: str, ns: str, pod_name: str, pod_uid: str, node: str, index: int) -> Obj:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid,
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    result = {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{index % 8}"}
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": _meta(
            name,
            ns,
            annotations={"resource.kubernetes.io/pod-claim-name": "gpu"},
            ownerReferences=[owner],
        ),
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}
        },
        "status": {
            "allocation": {"devices": {"results": [result]}, "nodeSelector": selector},
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
        },
    }


def config_objects(size: Size) -> list[Obj]:
    """Everything but nodes, slices, pods and claims."""
    return [*device_classes(), *queues(size), *namespaces()]


class Charger:
    """The admission record of each pod, computed as draquota computes it (one per shape)."""

    def __init__(self, size: Size) -> None:
        self.state = ClusterState(config_objects(size))
        self.settings = Settings()
        self._cache: dict[tuple[str, bool], Charge] = {}

    def charge(self, pod_obj: Obj, claim: Obj | None) -> Charge:
        ns = pod_obj["metadata"]["namespace"]
        key = (ns, claim is not None)
        found = self._cache.get(key)
        if found is None:
            if claim is not None:
                self.state.upsert(claim)
            found = live_pod_charge(pod_obj, self.state, self.settings, time.time())
            assert found is not None, f"pod {ns}/{pod_obj['metadata']['name']} is not charged"
            self._cache[key] = found
        return found


def ledger_shards(records: list[tuple[str, Reservation]]) -> list[Obj]:
    """QuotaLedger objects holding the records (cohort base, entry): full shards sealed."""
    by_base: dict[str, list[Reservation]] = {}
    for base, entry in records:
        by_base.setdefault(base, []).append(entry)
    out: list[Obj] = []
    for base, entries in sorted(by_base.items()):
        index, current, size = 0, [], 0
        for entry in entries:
            if size + entry.size > SHARD_BYTES:
                out.append(ledger_object(Shard(shard_name(base, index)), current, sealed=True))
                index, current, size = index + 1, [], 0
            current.append(entry)
            size += entry.size
        out.append(ledger_object(Shard(shard_name(base, index)), current, sealed=False))
    return out


def workload(size: Size) -> Iterator[Obj]:
    """Every object of the cluster, ledger shards last."""
    yield from config_objects(size)
    yield from nodes(size)
    charger = Charger(size)
    records: list[tuple[str, Reservation]] = []
    now = time.time()
    for i in range(size.pods):
        pod_obj, claim = pod(i, size)
        if claim is not None:
            yield claim
        yield pod_obj
        charge = charger.charge(pod_obj, claim)
        meta = pod_obj["metadata"]
        cohort = cohort_of(int(charge.cluster_queue.split("-")[1]))
        entry = Reservation(
            meta["uid"], charge.cluster_queue, f"{meta['namespace']}/{meta['name']}",
            charge.to_annotation(), now,
        )  # fmt: skip
        records.append((f"cohort-{cohort}", entry))
    yield from ledger_shards(records)


def new_pod(index: int) -> Obj:
    """A pod as a user submits it (no uid, not scheduled): one GPU through the template."""
    ns = namespace_of(index)
    meta_noise, container = _noise(f"new-{index}")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(f"new-{index:07d}", ns, labels=meta_noise["labels"]),
        "spec": {
            "containers": [
                {
                    "name": "main",
                    **container,
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "claims": [{"name": "gpu"}],
                    },
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}],
            "restartPolicy": "Never",
        },
    }
