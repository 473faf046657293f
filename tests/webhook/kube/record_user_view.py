"""Record what `draquota status` reads of a real cluster, as an admin and as a namespace user.

    .venv/bin/python -m tests.webhook.kube.record_user_view [--out DIR]

starts the Kubernetes v1.36.2 control plane of ../shared/k8s with draquota installed, as the
e2e tier does (`tests.e2e.cluster.running_cluster`), and sets up the lending of issue 25: a
cohort `lab` of ClusterQueue `research` (4 GPUs, lendingLimit 2, `whenFull: Queue`) and
`ml` (2 GPUs), sharing flavor `lab` on one fake node of 8 GPUs. research runs two one-GPU
pods; ml runs four, two of them on research's pooled quota; then research queues a
one-GPU pod, a pod group of two and a one-pod Job, which wait in that order. Once the
LocalQueue status shows the lending and every workload shows why it waits, it keeps
(tests/webhook/fixtures/user-view/ unless `--out`):

- `admin/*.yaml`: the admin's view of every object `draquota status` reads, as a `--state`
  directory (pods, Jobs, queues, flavors, DeviceClasses, ResourceSlices, Nodes, ...);
- `user/*.json`: the LISTs a ServiceAccount bound to the built-in `edit` role in `research`
  gets: LocalQueues, pods, Jobs and draquota's `Pending` Events of Jobs, in its namespace;
  and `forbidden.json`, the Status the API server answers its cluster-scope LIST of pods.

Every list is kept as the API server returned it but for `managedFields`, dropped for size.
The control plane is stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster import REPO, ControlPlane, Draquota, eventually, running_cluster
from tests.e2e.objects import GPU_CLASS, gpu_pod
from webhook.kube.client import ApiError, KubeClient

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "user-view"
POOL = "e2e.draquota.io/pool"
ADMIN_KINDS = (
    "pods", "jobs", "namespaces", "nodes", "priorityclasses", "deviceclasses",
    "resourceslices", "resourceclaims", "resourceclaimtemplates", "clusterqueues",
    "localqueues", "resourceflavors",
)  # fmt: skip
USER_LISTS = {
    "localqueues": "/apis/draquota.io/v1beta1/namespaces/research/localqueues",
    "pods": "/api/v1/namespaces/research/pods",
    "jobs": "/apis/batch/v1/namespaces/research/jobs",
    "events": "/api/v1/namespaces/research/events",
}
JOB_PENDING = "involvedObject.kind=Job,reason=Pending,source=draquota"


def _queue(name: str, gpus: int, **quota: Any) -> dict[str, Any]:
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": "lab",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "resourceGroups": [
                {
                    "coveredResources": ["gpus"],
                    "flavors": [
                        {
                            "name": "lab",
                            "resources": [
                                {"name": "gpus", "kind": "DeviceClass",
                                 "deviceClassNames": [GPU_CLASS], "nominalQuota": gpus, **quota}
                            ],
                        }
                    ],
                }
            ],
        },
    }  # fmt: skip


def _namespace_objects(name: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {"apiVersion": "draquota.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": "default", "namespace": name}, "spec": {"clusterQueue": name}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "gpu", "namespace": name},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}}},
    ]  # fmt: skip


def _create(cluster: ControlPlane, namespace: str, *objects: dict[str, Any]) -> None:
    for obj in objects:  # one at a time: distinct creation order
        cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))


def _pod(name: str, **labels: str) -> dict[str, Any]:
    pod = gpu_pod(name, 1, labels)
    pod["spec"]["schedulerName"] = "e2e-nobody"  # nothing to schedule: no kubelet
    return pod


def _group_pod(name: str) -> dict[str, Any]:
    pod = _pod(name, **{"draquota.io/pod-group-name": "pair"})
    pod["metadata"]["annotations"] = {"draquota.io/pod-group-total-count": "2"}
    return pod


def _job() -> dict[str, Any]:
    spec = _pod("unused")["spec"]
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep"},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": spec}},
    }


def _get(cluster: ControlPlane, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def _set_up(installed: Draquota) -> None:
    cluster = installed.cluster
    cluster.apply(REPO / "manifests" / "examples" / "cluster" / "deviceclasses.yaml")
    cluster.fake_node("lab-1", 8, {POOL: "lab"})
    flavor = {"apiVersion": "draquota.io/v1beta1", "kind": "ResourceFlavor",
              "metadata": {"name": "lab"}, "spec": {"nodeLabels": {POOL: "lab"}}}  # fmt: skip
    research = _queue("research", 4, lendingLimit=2)
    research["spec"]["whenFull"] = "Queue"
    objects = [flavor, research, _queue("ml", 2)]
    objects += _namespace_objects("research") + _namespace_objects("ml")
    cluster.apply(yaml.safe_dump_all(objects))
    eventually(lambda: all(_active(cluster, q) for q in ("research", "ml")), timeout=60)
    _create(cluster, "research", _pod("train-0"), _pod("train-1"))
    eventually(lambda: len(_admitted(cluster, "research")) == 2, timeout=60)
    _create(cluster, "ml", *(_pod(f"tune-{i}") for i in range(4)))
    _create(cluster, "research", _pod("eval-0"), _group_pod("pair-0"), _group_pod("pair-1"))
    _create(cluster, "research", _job())
    eventually(lambda: _settled(cluster), timeout=120)


def _active(cluster: ControlPlane, queue: str) -> bool:
    conditions = _get(cluster, "clusterqueue", queue).get("status", {}).get("conditions", [])
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def _admitted(cluster: ControlPlane, namespace: str) -> list[str]:
    pods = _get(cluster, "pods", "-n", namespace)["items"]
    return [p["metadata"]["name"] for p in pods if not p["spec"].get("schedulingGates")]


def _settled(cluster: ControlPlane) -> bool:
    """The lending shows in research's LocalQueue, and every waiting workload says why."""
    local = _get(cluster, "localqueue", "default", "-n", "research").get("status", {})
    gpus = local.get("clusterQueue", {}).get("flavors", [{}])[0].get("resources", [{}])[0]
    pods = _get(cluster, "pods", "-n", "research")["items"]
    waiting = [p for p in pods if p["spec"].get("schedulingGates")]
    reasons = [c.get("message", "") for p in waiting for c in p.get("status", {}).get(
        "conditions", []) if c["type"] == "QuotaReserved"]  # fmt: skip
    events = _get(cluster, "events", "-n", "research", "--field-selector", JOB_PENDING)
    return (
        gpus.get("lent") == "2"
        and local.get("pendingWorkloads") == 3
        and len(waiting) == 3
        and len(reasons) == 3
        and all("position" in r for r in reasons)
        and any("position" in e["message"] for e in events["items"])
    )


def _trimmed(document: Any) -> Any:
    for item in document.get("items") or ():
        item.get("metadata", {}).pop("managedFields", None)
    return document


def _record_admin(cluster: ControlPlane, out: Path) -> None:
    (out / "admin").mkdir(parents=True, exist_ok=True)
    for kind in ADMIN_KINDS:
        items = _trimmed(_get(cluster, kind, "-A"))["items"]
        text = yaml.safe_dump_all(items, sort_keys=False)
        (out / "admin" / f"{kind}.yaml").write_text(text, encoding="utf-8")


def _record_user(installed: Draquota, out: Path) -> None:
    cluster = installed.cluster
    cluster.kubectl("create", "serviceaccount", "alice", "-n", "research")
    cluster.kubectl(
        "create", "rolebinding", "alice-edit", "-n", "research", "--clusterrole=edit",
        "--serviceaccount=research:alice",
    )  # fmt: skip
    path = cluster.token_kubeconfig(installed.workdir / "alice.kubeconfig", "alice", "research")
    client = KubeClient.from_kubeconfig(str(path))
    (out / "user").mkdir(parents=True, exist_ok=True)
    for name, url in USER_LISTS.items():
        query = [("fieldSelector", JOB_PENDING)] if name == "events" else []
        document = _trimmed(client.request("GET", url, query))
        (out / "user" / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")
    try:
        client.request("GET", "/api/v1/pods", [("limit", 500)])
    except ApiError as exc:
        status = {"code": exc.code, "reason": exc.reason, "message": exc.message}
        (out / "user" / "forbidden.json").write_text(json.dumps(status, indent=1) + "\n")
    else:
        raise AssertionError("a namespace user listed every pod of the cluster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base, running_cluster(Path(base), 1) as installed:
        _set_up(installed)
        _record_admin(installed.cluster, args.out)
        _record_user(installed, args.out)
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
