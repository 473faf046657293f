"""Record the objects `draquota dashboard` reads, from a real control plane with draquota.

    .venv/bin/python -m tests.webhook.record_dashboard [--out FILE]

starts the Kubernetes v1.36.2 control plane of ../shared/k8s with draquota installed (one
replica: `tests.e2e.cluster.running_cluster`) and sets up the issue's cohort: ClusterQueue
`research` (4 GPUs, lendingLimit 2) and `ml` (no GPUs of its own) in cohort `lab`, both
`whenFull: Queue`, one flavor on one fake node of 8 GPUs. `ml/borrow-0` takes 2 GPUs
(borrowed from research), `research/run-0` 2 more (research is full), then
`research/wait-0` (2 GPUs) and the Job `research/train` (1 GPU) wait, in that order. Once
draquota has told both why they wait and written the LocalQueues' status, every object the
dashboard reads is saved, as the API server serves it (without managedFields), to
tests/webhook/fixtures/dashboard/lab.yaml (`--out` elsewhere). The control plane is
stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster import REPO, ControlPlane, eventually, missing_reason, running_cluster

OUT = REPO / "tests" / "webhook" / "fixtures" / "dashboard" / "lab.yaml"
GPU_CLASS = "gpu.example.com"
POOL = {"e2e.draquota.io/pool": "lab"}
KINDS = ("namespaces", "resourceflavors", "clusterqueues", "localqueues", "pods", "jobs",
         "resourceclaims", "resourceclaimtemplates", "deviceclasses")  # fmt: skip
NAMESPACES = ("research", "ml")


def _queue(name: str, gpus: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": "lab",
            "whenFull": "Queue",
            "namespaceSelector": {"matchLabels": {"lab": name}},
            "resourceGroups": [{
                "coveredResources": ["gpus"],
                "flavors": [{"name": "on-demand", "resources": [
                    {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS],
                     **gpus}]}],
            }],
        },
    }  # fmt: skip


def _setup() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": "draquota.io/v1beta1", "kind": "ResourceFlavor",
         "metadata": {"name": "on-demand"}, "spec": {"nodeLabels": POOL}},
        _queue("research", {"nominalQuota": 4, "lendingLimit": 2}),
        _queue("ml", {"nominalQuota": 0, "borrowingLimit": 2}),
    ]  # fmt: skip
    for namespace in NAMESPACES:
        objects += [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": namespace, "labels": {"lab": namespace}}},
            {"apiVersion": "draquota.io/v1beta1", "kind": "LocalQueue",
             "metadata": {"name": "default", "namespace": namespace},
             "spec": {"clusterQueue": namespace}},
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "gpu", "namespace": namespace},
             "spec": {"spec": {"devices": {"requests": [
                 {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}}},
        ]  # fmt: skip
    return objects


def _pod(name: str, gpus: int) -> dict[str, Any]:
    claims = [{"name": f"gpu-{i}", "resourceClaimTemplateName": "gpu"} for i in range(gpus)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.example.com/train:1.0",
                            "resources": {"claims": [{"name": c["name"]} for c in claims]}}],
            "resourceClaims": claims,
        },
    }  # fmt: skip


def _job(name: str, gpus: int) -> dict[str, Any]:
    spec = _pod("unused", gpus)["spec"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": spec}}}  # fmt: skip


def _create(cluster: ControlPlane, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))


def _get(cluster: ControlPlane, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    scope = ["-n", namespace] if namespace else ["-A"]
    return list(json.loads(cluster.kubectl("get", kind, *scope, "-o", "json").stdout)["items"])


def _settled(cluster: ControlPlane) -> bool:
    """wait-0 and train say why they wait, with their positions; the LocalQueues say what
    research lent to ml."""
    pods = {p["metadata"]["name"]: p for p in _get(cluster, "pods", "research")}
    conditions = pods["wait-0"].get("status", {}).get("conditions", [])
    told = [c for c in conditions if c["type"] == "QuotaReserved" and "position" in c["message"]]
    events = _get(cluster, "events", "research")
    job_told = any(e["reason"] == "Pending" and e["involvedObject"]["name"] == "train"
                   and "position 2 of 2" in e["message"] for e in events)  # fmt: skip
    local = {q["metadata"]["namespace"]: q for q in _get(cluster, "localqueues")}
    flavors = local["research"].get("status", {}).get("clusterQueue", {}).get("flavors", [])
    lent = any(r.get("lentTo") for f in flavors for r in f["resources"])
    return bool(told and job_told and lent and local["research"]["status"]["pendingWorkloads"])


def _kept(obj: dict[str, Any]) -> dict[str, Any]:
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def _ours(obj: dict[str, Any]) -> bool:
    """The scenario's objects: its namespaces and what is in them, and cluster-scoped ones."""
    metadata = obj["metadata"]
    if obj["kind"] == "Namespace":
        return metadata["name"] in NAMESPACES
    if obj["kind"] == "Event" and obj.get("source", {}).get("component") != "draquota":
        return False
    return metadata.get("namespace") in (None, *NAMESPACES)


def record(out: Path) -> None:
    with running_cluster(Path(tempfile.mkdtemp(prefix="record-dashboard-")), 1) as installed:
        cluster = installed.cluster
        cluster.apply(REPO / "manifests" / "examples" / "cluster" / "deviceclasses.yaml")
        cluster.fake_node("lab-1", 8, POOL)
        cluster.apply(yaml.safe_dump_all(_setup()))
        _create(cluster, "ml", _pod("borrow-0", 2))
        _create(cluster, "research", _pod("run-0", 2))
        eventually(lambda: all(p["spec"].get("nodeName") for p in _get(cluster, "pods")), 60)
        _create(cluster, "research", _pod("wait-0", 2))
        time.sleep(1.1)  # creation timestamps have whole seconds: one apart keeps the order
        _create(cluster, "research", _job("train", 1))
        eventually(lambda: _settled(cluster), timeout=90)
        objects = [_kept(o) for kind in (*KINDS, "events") for o in _get(cluster, kind) if _ours(o)]
    out.parent.mkdir(parents=True, exist_ok=True)
    header = "# recorded by `.venv/bin/python -m tests.webhook.record_dashboard`\n"
    out.write_text(header + yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    print(f"{out}: {len(objects)} objects", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if (reason := missing_reason()) is not None:
        print(f"record_dashboard: {reason}", file=sys.stderr)
        return 2
    record(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
