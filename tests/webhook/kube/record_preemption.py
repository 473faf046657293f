"""Record a preemption in progress on a real cluster, as an admin and as namespace users see it.

    .venv/bin/python -m tests.webhook.kube.record_preemption [--out DIR]

starts the Kubernetes v1.36.2 control plane of ../shared/k8s with draquota installed, as the
e2e tier does (`tests.e2e.cluster.running_cluster`), and sets up issue 26's reclaim: a cohort
`lab` of ClusterQueue `research` (4 GPUs, lendingLimit 2, `reclaimWithinCohort: Any`) and
`ml` (no GPUs of its own), both `whenFull: Queue`, sharing flavor `lab` on one fake node of 8
GPUs. ml runs pod `tune-0` and Job `tune` (one pod) on the 2 GPUs research lends; then
research submits 4 one-GPU pods. draquota admits 2 and preempts ml's two workloads for the
others: `tune-0` is marked (`DisruptionTarget`, reason PreemptedByDraquota) and evicted, Job
`tune` is suspended again with the `draquota.io/preempted` annotation. `tests.e2e.kubelet`
plays the kubelet and holds ml's pods in their termination, so that the recording catches
the victims on their way out and research's `r-2` and `r-3` waiting `Pending the preemption
of 2 workload(s)`, once both LocalQueues' status reports it. It keeps
(tests/webhook/fixtures/preemption/ unless `--out`):

- `admin/*.yaml`: the admin's view of every object `draquota status` reads, as a `--state`
  directory;
- `ml/*.json`, `research/*.json`: the LISTs a ServiceAccount bound to the built-in `edit`
  role of that namespace gets: LocalQueues, pods, Jobs and draquota's Events (`Pending` of
  Jobs, `Preempted`).

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
from kubernetes import config as k8s_config

from tests.e2e.cluster import REPO, ControlPlane, Draquota, eventually, running_cluster
from tests.e2e.kubelet import FakeKubelet
from tests.e2e.objects import GPU_CLASS, gpu_job, gpu_pod
from webhook.kube.client import KubeClient

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "preemption"
POOL = "e2e.draquota.io/pool"
ADMIN_KINDS = (
    "pods", "jobs", "namespaces", "nodes", "priorityclasses", "deviceclasses",
    "resourceslices", "resourceclaims", "resourceclaimtemplates", "clusterqueues",
    "localqueues", "resourceflavors",
)  # fmt: skip
USER_LISTS = {
    "localqueues": "/apis/draquota.io/v1beta1/namespaces/{ns}/localqueues",
    "pods": "/api/v1/namespaces/{ns}/pods",
    "jobs": "/apis/batch/v1/namespaces/{ns}/jobs",
    "events": "/api/v1/namespaces/{ns}/events",
}
EVENTS = "source=draquota"


def _queue(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    quota = {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS],
             "nominalQuota": gpus, **({"lendingLimit": 2} if gpus else {})}  # fmt: skip
    groups = [{"coveredResources": ["gpus"], "flavors": [{"name": "lab", "resources": [quota]}]}]
    selector = {"matchLabels": {"kubernetes.io/metadata.name": name}}
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohort": "lab", "namespaceSelector": selector, "whenFull": "Queue",
                 "resourceGroups": groups, **spec},
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


def _get(cluster: ControlPlane, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def _create(cluster: ControlPlane, namespace: str, *objects: dict[str, Any]) -> None:
    for obj in objects:  # one at a time: distinct creation order
        cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))


def _running(cluster: ControlPlane, namespace: str) -> list[str]:
    pods = _get(cluster, "pods", "-n", namespace)["items"]
    return sorted(p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running")


def _reason(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = pod.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def _settled(cluster: ControlPlane) -> bool:
    """ml's pod and Job are being evicted for research, whose last two pods say they wait."""
    ml = _get(cluster, "pods", "-n", "ml")["items"]
    marked = [p for p in ml if p["metadata"].get("deletionTimestamp")]
    job = _get(cluster, "job", "tune", "-n", "ml")
    research = {p["metadata"]["name"]: p for p in _get(cluster, "pods", "-n", "research")["items"]}
    waits = [_reason(research[n], "QuotaReserved").get("message", "") for n in ("r-2", "r-3")]
    return (
        len(marked) == 2
        and _reason(_get(cluster, "pod", "tune-0", "-n", "ml"), "DisruptionTarget").get("reason")
        == "PreemptedByDraquota"
        and "draquota.io/preempted" in job["metadata"].get("annotations", {})
        and all("Pending the preemption of" in w for w in waits)
        and _reported(cluster, "ml")
        and _reported(cluster, "research").get("pendingWorkloads") == 2
    )


def _reported(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    """The namespace's LocalQueue status, once draquota's status writer has written it."""
    status: dict[str, Any] = _get(cluster, "localqueue", "default", "-n", namespace).get(
        "status", {}
    )
    return status if status.get("clusterQueue") else {}


def _set_up(installed: Draquota, kubelet: FakeKubelet) -> None:
    cluster = installed.cluster
    cluster.apply(REPO / "manifests" / "examples" / "cluster" / "deviceclasses.yaml")
    cluster.fake_node("lab-1", 8, {POOL: "lab"})
    flavor = {"apiVersion": "draquota.io/v1beta1", "kind": "ResourceFlavor",
              "metadata": {"name": "lab"}, "spec": {"nodeLabels": {POOL: "lab"}}}  # fmt: skip
    research = _queue("research", 4, preemption={"reclaimWithinCohort": "Any"})
    objects = [flavor, research, _queue("ml", 0)]
    objects += _namespace_objects("research") + _namespace_objects("ml")
    cluster.apply(yaml.safe_dump_all(objects))
    _create(cluster, "ml", gpu_pod("tune-0"), gpu_job("tune"))
    eventually(lambda: len(_running(cluster, "ml")) == 2, timeout=120)
    kubelet.hold.update(("ml", name) for name in _running(cluster, "ml"))  # slow to stop
    _create(cluster, "research", *(gpu_pod(f"r-{i}") for i in range(4)))
    eventually(lambda: _settled(cluster), timeout=120)


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


def _record_user(installed: Draquota, namespace: str, out: Path) -> None:
    cluster = installed.cluster
    cluster.kubectl("create", "serviceaccount", "user", "-n", namespace)
    cluster.kubectl(
        "create", "rolebinding", "user-edit", "-n", namespace, "--clusterrole=edit",
        f"--serviceaccount={namespace}:user",
    )  # fmt: skip
    path = installed.workdir / f"{namespace}.kubeconfig"
    client = KubeClient.from_kubeconfig(str(cluster.token_kubeconfig(path, "user", namespace)))
    (out / namespace).mkdir(parents=True, exist_ok=True)
    for name, url in USER_LISTS.items():
        query = [("fieldSelector", EVENTS)] if name == "events" else []
        document = _trimmed(client.request("GET", url.format(ns=namespace), query))
        (out / namespace / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base, running_cluster(Path(base), 1) as installed:
        api = k8s_config.new_client_from_config(config_file=str(installed.cluster.kubeconfig))
        with FakeKubelet(api, ["ml", "research"]) as kubelet:
            _set_up(installed, kubelet)
            _record_admin(installed.cluster, args.out)
            for namespace in ("ml", "research"):
                _record_user(installed, namespace, args.out)
        api.close()
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
