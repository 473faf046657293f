"""Objects the e2e scenarios create: one namespace, queue and node pool per scenario.

Every scenario gets its own namespace (label `e2e.draquota.io/scenario: NAME`), a
ClusterQueue selecting only that label, a LocalQueue `default`, and flavors whose
`nodeLabels` name only that scenario's fake nodes, so scenarios sharing the session's
control plane never charge or place on each other's quota and devices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiException, CoreV1Api

from tests.e2e.cluster import REPO, ControlPlane, Draquota, eventually

__all__ = [
    "GPU_CLASS",
    "IMAGE",
    "POOL_LABEL",
    "Flavor",
    "Scenario",
    "gpu_deployment",
    "gpu_job",
    "gpu_pod",
    "pod_template",
    "scenario",
]

GPU_CLASS = "gpu.example.com"
POOL_LABEL = "e2e.draquota.io/pool"
SCENARIO_LABEL = "e2e.draquota.io/scenario"
IMAGE = "registry.example.com/train:1.0"
# Pods that only measure admission name a scheduler nobody runs: kube-scheduler leaves them
# alone instead of retrying hundreds of unschedulable pods and throttling the next module's.
UNSCHEDULED = "e2e-nobody"


@dataclass(frozen=True)
class Flavor:
    name: str
    gpus: int  # nominal quota of resource `gpus`
    nodes: Mapping[str, int]  # fake node name -> GPUs it publishes
    cpu: int | str = 1000


@dataclass
class Scenario:
    """A namespace with its own ClusterQueue (resource `gpus`, plus `cpu`), flavors and nodes."""

    installed: Draquota
    name: str
    flavors: Sequence[Flavor]

    @property
    def cluster(self) -> ControlPlane:
        return self.installed.cluster

    @property
    def namespace(self) -> str:
        return self.name

    def objects(self) -> list[dict[str, Any]]:
        flavors = [
            {
                "apiVersion": "draquota.io/v1beta1",
                "kind": "ResourceFlavor",
                "metadata": {"name": f"{self.name}-{f.name}"},
                "spec": {"nodeLabels": {POOL_LABEL: f"{self.name}-{f.name}"}},
            }
            for f in self.flavors
        ]
        queue = {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": self.name},
            "spec": {
                "namespaceSelector": {"matchLabels": {SCENARIO_LABEL: self.name}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "gpus"],
                        "flavors": [
                            {
                                "name": f"{self.name}-{f.name}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": f.cpu},
                                    {
                                        "name": "gpus",
                                        "kind": "DeviceClass",
                                        "deviceClassNames": [GPU_CLASS],
                                        "nominalQuota": f.gpus,
                                    },
                                ],
                            }
                            for f in self.flavors
                        ],
                    }
                ],
            },
        }
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.namespace, "labels": {SCENARIO_LABEL: self.name}},
        }
        local = {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": self.namespace},
            "spec": {"clusterQueue": self.name},
        }
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu", "namespace": self.namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]
                    }
                }
            },
        }
        return [namespace, *flavors, queue, local, template]

    def create(self) -> Scenario:
        self.cluster.apply(REPO / "manifests" / "examples" / "cluster" / "deviceclasses.yaml")
        for flavor in self.flavors:
            for node, gpus in flavor.nodes.items():
                self.cluster.fake_node(node, gpus, {POOL_LABEL: f"{self.name}-{flavor.name}"})
        self.cluster.apply(yaml.safe_dump_all(self.objects()))
        # every replica sees the queue as active before the scenario starts
        eventually(self.queue_active, timeout=30)
        return self

    def queue_active(self) -> bool:
        queue = self.get("clusterqueue", self.name, namespaced=False)
        conditions = queue.get("status", {}).get("conditions", [])
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    def get(self, kind: str, name: str, namespaced: bool = True) -> dict[str, Any]:
        args = ["get", kind, name, "-o", "json"]
        if namespaced:
            args += ["-n", self.namespace]
        return dict(json.loads(self.cluster.kubectl(*args).stdout))

    def pods(self, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", "pods", "-n", self.namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.cluster.kubectl(*args).stdout)["items"])

    def usage(self, flavor: str, resource: str = "gpus") -> list[float | None]:
        """The queue's usage as every replica reports it."""
        labels = {"cluster_queue": self.name, "flavor": f"{self.name}-{flavor}"}
        return [
            r.metric("draquota_queue_usage", resource=resource, **labels)
            for r in self.installed.replicas
        ]

    def reservations(self) -> list[dict[str, Any]]:
        """Reservations of this queue still held in the QuotaLedgers."""
        ledgers = json.loads(self.cluster.kubectl("get", "quotaledgers", "-o", "json").stdout)
        return [
            r
            for ledger in ledgers["items"]
            for r in ledger.get("spec", {}).get("reservations") or []
            if r.get("clusterQueue") == self.name
        ]

    def user(self, name: str, role: str = "admin", namespace: str | None = None) -> Path:
        """A kubeconfig of ServiceAccount `name` of the scenario's namespace, bound to the
        built-in ClusterRole `role` in `namespace` (the scenario's): a namespace user with
        their own token."""
        namespace = namespace or self.namespace
        self.cluster.apply(
            yaml.safe_dump({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": name, "namespace": self.namespace}})
        )  # fmt: skip
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-{role}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
        }  # fmt: skip
        self.cluster.apply(yaml.safe_dump(binding))
        path = self.installed.workdir / f"{self.namespace}-{name}.kubeconfig"
        return self.cluster.token_kubeconfig(path, name, self.namespace)

    def queueing(self, strategy: str = "BestEffortFIFO") -> Scenario:
        """The scenario's ClusterQueue queues (`whenFull: Queue`) once every replica gates."""
        patch = {"spec": {"whenFull": "Queue", "queueingStrategy": strategy}}
        self.cluster.kubectl(
            "patch", "clusterqueue", self.name, "--type", "merge", "-p", json.dumps(patch)
        )
        # the API server spreads server dry runs over the replicas: a few in a row that come
        # back gated mean every replica has seen the change
        for _ in range(3):
            eventually(self._gated_on_dry_run, timeout=60)
        return self

    def _gated_on_dry_run(self) -> bool:
        out = self.cluster.kubectl(
            "create", "-n", self.namespace, "-f", "-", "--dry-run=server", "-o", "json",
            stdin=yaml.safe_dump(gpu_pod("probe", 1)), check=False,
        )  # fmt: skip
        spec = json.loads(out.stdout)["spec"] if out.returncode == 0 else {}
        return {"name": "draquota.io/admission"} in spec.get("schedulingGates", [])

    def events(self, reason: str) -> list[str]:
        out = self.cluster.kubectl(
            "get", "events", "-n", self.namespace, "--field-selector", f"reason={reason}",
            "-o", "json",
        ).stdout  # fmt: skip
        return [e["message"] for e in json.loads(out)["items"]]


# Namespaces of the scenarios created so far: their pods are removed after each test module
# (tests/e2e/fixtures.py), so that pods left Pending by one module (on purpose, or on nodes
# that do not exist) do not keep the scheduler busy, and its API budget, for the next ones.
CREATED: list[str] = []


def scenario(installed: Draquota, name: str, *flavors: Flavor) -> Scenario:
    created = Scenario(installed, name, flavors).create()
    CREATED.append(created.namespace)
    return created


def remove_pods_later(namespace: str) -> None:
    """Have the pods of a namespace a test made itself removed after its module too."""
    CREATED.append(namespace)


def remove_pods(cluster: ControlPlane, namespaces: list[str]) -> None:
    """Delete every pod of these namespaces at once (no kubelet would ever finish them)."""
    for namespace in namespaces:
        cluster.kubectl(
            "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
            "--wait=false", check=False, timeout=120,
        )  # fmt: skip


def cpu_pod(name: str) -> dict[str, Any]:
    """A pod of one cpu and no claims, for a scheduler nobody runs: it measures admission,
    not the scheduler's allocator (admitted pods stay Pending)."""
    container = {"name": "main", "image": IMAGE, "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": UNSCHEDULED, "containers": [container]},
    }


def create_cpu_pod(api: CoreV1Api, namespace: str, name: str) -> str:
    """Create `cpu_pod(name)`: `admitted` (a 409 too: an
    earlier attempt was stored after all), `denied` (for quota), else `retry <status>:
    <message>`, a refusal the user retries as a controller would."""
    try:
        api.create_namespaced_pod(namespace, cpu_pod(name))
    except ApiException as exc:
        if exc.status == 409:
            return "admitted"
        body = json.loads(exc.body or "{}")
        if exc.status == 403 and body.get("reason") == "QuotaExceeded":
            return "denied"
        return f"retry {exc.status}: {body.get('message', '')[:300]}"
    return "admitted"


def gpu_pod(name: str, gpus: int = 1, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod with `gpus` claims from the scenario's one-GPU template."""
    claims = [{"name": f"gpu-{i}", "resourceClaimTemplateName": "gpu"} for i in range(gpus)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {
                        "requests": {"cpu": "10m"},
                        "claims": [{"name": c["name"]} for c in claims],
                    },
                }
            ],
            "resourceClaims": claims,
        },
    }


def gpu_job(
    name: str, parallelism: int = 1, completions: int | None = None, gpus: int = 1
) -> dict[str, Any]:
    """A Job of `completions` (default: `parallelism`) pods, `parallelism` at a time, each with
    `gpus` claims from the scenario's one-GPU template; pods never retry (no kubelet fails them
    anyway)."""
    template = pod_template(gpus)
    template["spec"]["restartPolicy"] = "Never"
    spec = {"parallelism": parallelism, "completions": completions or parallelism,
            "backoffLimit": 0, "template": template}  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def gpu_deployment(name: str, replicas: int, gpus: int = 1) -> dict[str, Any]:
    """A Deployment of `replicas` pods labelled `app: NAME`, each with `gpus` one-GPU claims."""
    template = pod_template(gpus)
    template["metadata"]["labels"] = {"app": name}
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": template}  # fmt: skip
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}


def pod_template(gpus: int = 1) -> dict[str, Any]:
    pod = gpu_pod("unused", gpus)
    return {"metadata": {"labels": {"app": "e2e"}}, "spec": pod["spec"]}
