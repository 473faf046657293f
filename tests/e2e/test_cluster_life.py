"""Cluster life with draquota installed: the ordinary traffic of a cluster is never blocked.

Both webhooks fail closed in front of every pod and workload write of the cluster, so
everything draquota does not enforce must pass untouched: a namespace user's kubectl
label / annotate / patch / edit / scale / delete, the Job, ReplicaSet, Deployment,
StatefulSet, CronJob and garbage-collector controllers, the scheduler's bindings, the
resourceclaim controller, evictions and node drains. A FakeKubelet plays the kubelet of
the scenario's node (pods run, become Ready, finish, and go when deleted). After each
step the queue's usage, as every replica reports it, equals what the live pods hold.
The API server's own admission error counters are checked over the whole tier
(tests/e2e/fixtures.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from quota.waiting import ADMISSION_GATE
from tests.e2e.cluster import Draquota, eventually
from tests.e2e.kubelet import FakeKubelet
from tests.e2e.objects import (
    IMAGE,
    Flavor,
    Scenario,
    gpu_deployment,
    gpu_job,
    gpu_pod,
    scenario,
)

pytestmark = pytest.mark.e2e

# Two nodes of 8 GPUs (4 per PCIe root, as every other scenario's): test_examples expects no
# node of the session's cluster to offer 5 GPUs on one root.
NODES = ("e2e-life-1", "e2e-life-2")
FREE = "e2e-life-free"  # a namespace no ClusterQueue selects
EXCLUDED = "kube-system"  # never sent to draquota (namespaceSelector)
TIMINGS: dict[str, float] = {}  # what the Job steps measured, written next to the replicas' logs


@pytest.fixture(scope="module")
def life(draquota_cluster: Draquota) -> Scenario:
    s = scenario(draquota_cluster, "e2e-life", Flavor("f", 16, dict.fromkeys(NODES, 8)))
    s.cluster.kubectl("create", "namespace", FREE)
    return s


@pytest.fixture(scope="module")
def alice(life: Scenario) -> Path:
    """A namespace user: `admin` of the scenario's namespace, `edit` of an unmanaged one."""
    life.user("alice", "edit", FREE)
    return life.user("alice", "admin")


@pytest.fixture(scope="module")
def kubelet(kube: k8s.ApiClient, life: Scenario) -> Iterator[FakeKubelet]:
    with FakeKubelet(kube, [life.namespace, FREE]) as running:
        yield running


@pytest.fixture(scope="module", autouse=True)
def _timings_kept(draquota_cluster: Draquota) -> Iterator[None]:
    yield
    out = draquota_cluster.workdir / "cluster-life-timings.json"
    out.write_text(json.dumps(TIMINGS, indent=2), encoding="utf-8")


def _live(pod: dict[str, Any]) -> bool:
    gated = any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates", []))
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") and not gated


def held_gpus(s: Scenario) -> float:
    """GPUs the scenario's live pods hold: one per claim (every claim is of the one-GPU
    template), terminating pods included until the kubelet has finished them."""
    return float(sum(len(p["spec"].get("resourceClaims", [])) for p in s.pods() if _live(p)))


def usage_is_exact(s: Scenario, expected: float | None = None) -> None:
    """Every replica reports the queue's usage as what the live pods hold (or `expected`).

    A create that draquota admitted but the API server did not complete (a controller's
    request that timed out, or lost a race) holds a reservation until its pod appears or
    `reservationTTLSeconds` (60) pass: the wait covers that."""

    def exact() -> bool:
        want = held_gpus(s) if expected is None else expected
        got = [value or 0.0 for value in s.usage("f")]
        assert got == [want] * len(got), (got, want, s.reservations())
        return True

    eventually(exact, timeout=90, interval=0.5)


def _kubectl(s: Scenario, user: Path | None, *args: str, **kw: Any) -> str:
    out = s.cluster.kubectl(*args, kubeconfig=user, check=False, **kw)
    assert out.returncode == 0, f"kubectl {' '.join(args)} was blocked: {out.stderr}"
    return out.stdout


def _running(s: Scenario, namespace: str, selector: str, count: int) -> list[str]:
    def ready() -> list[str]:
        pods = json.loads(
            s.cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout
        )["items"]
        running = [
            p["metadata"]["name"]
            for p in pods
            if p.get("status", {}).get("phase") == "Running"
            and "deletionTimestamp" not in p["metadata"]
        ]
        assert len(running) == count and len(pods) == count, [
            (p["metadata"]["name"], p.get("status", {}).get("phase")) for p in pods
        ]
        return sorted(running)

    return list(eventually(ready, timeout=90, interval=0.5))


def _plain_pod(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, "resources": {"requests": {"cpu": "10m"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "e2e-nobody", "containers": [container]}}  # fmt: skip


# ------------------------------------------------------------------- kubectl on pods

TARGETS = {
    "managed": lambda s: (s.namespace, "held"),
    "unmanaged": lambda s: (FREE, "free"),
    "excluded": lambda s: (EXCLUDED, "e2e-life-system"),
}
EDITS = {
    "label": lambda pod, i: ["label", "pod", pod, f"e2e.example.com/step={i}", "--overwrite"],
    "annotate": lambda pod, i: ["annotate", "pod", pod, f"e2e.example.com/note=n{i}",
                                "--overwrite"],
    "patch-merge": lambda pod, i: ["patch", "pod", pod, "--type", "merge", "-p",
                                   json.dumps({"metadata": {"labels": {"merge": str(i)}}})],
    "patch-json": lambda pod, i: ["patch", "pod", pod, "--type", "json", "-p", json.dumps(
        [{"op": "add", "path": "/metadata/annotations/json", "value": str(i)}])],
    "patch-strategic": lambda pod, i: ["patch", "pod", pod, "--type", "strategic", "-p",
                                       json.dumps({"metadata": {"finalizers": ["e2e/keep"]}})],
}  # fmt: skip


# A pod of its Job may be evicted by the drain step: the Job retries, as any would.
CRON = {
    "apiVersion": "batch/v1",
    "kind": "CronJob",
    "metadata": {"name": "tick"},
    "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
             "jobTemplate": {"spec": {**gpu_job("unused", 1, 1)["spec"], "backoffLimit": 6}}},
}  # fmt: skip


@pytest.fixture(scope="module")
def targets(life: Scenario, alice: Path, kubelet: FakeKubelet) -> Scenario:
    _kubectl(life, alice, "create", "-n", life.namespace, "-f", "-",
             stdin=yaml.safe_dump(gpu_pod("held", 1)))  # fmt: skip
    _kubectl(life, alice, "create", "-n", FREE, "-f", "-", stdin=yaml.safe_dump(_plain_pod("free")))
    _kubectl(life, None, "create", "-n", EXCLUDED, "-f", "-",
             stdin=yaml.safe_dump(_plain_pod("e2e-life-system")))  # fmt: skip
    _running(life, life.namespace, "!app", 1)  # scheduled with its claim allocated, and run
    # a CronJob now: the controller starts its first Job at the next whole minute
    _kubectl(life, alice, "create", "-n", life.namespace, "-f", "-", stdin=yaml.safe_dump(CRON))
    return life


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_a_namespace_user_labels_annotates_and_patches_any_pod(
    targets: Scenario, alice: Path, target: str, edit: str
) -> None:
    s = targets
    namespace, pod = TARGETS[target](s)
    user = None if namespace == EXCLUDED else alice  # kube-system: only the cluster admin
    _kubectl(s, user, "-n", namespace, *EDITS[edit](pod, len(edit)))
    got = json.loads(s.cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "json").stdout)
    meta = got["metadata"]
    assert {
        "label": meta.get("labels", {}).get("e2e.example.com/step") == str(len(edit)),
        "annotate": meta.get("annotations", {}).get("e2e.example.com/note") == f"n{len(edit)}",
        "patch-merge": meta.get("labels", {}).get("merge") == str(len(edit)),
        "patch-json": meta.get("annotations", {}).get("json") == str(len(edit)),
        "patch-strategic": "e2e/keep" in meta.get("finalizers", []),
    }[edit]
    if edit == "patch-strategic":  # the finalizer goes again, as its controller would remove it
        _kubectl(s, user, "-n", namespace, "patch", "pod", pod, "--type", "json", "-p",
                 json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))  # fmt: skip
    usage_is_exact(s)
    assert held_gpus(s) >= 1


# ------------------------------------------------------------------- workloads


def _editor(tmp: Path, old: str, new: str) -> dict[str, str]:
    """KUBE_EDITOR for `kubectl edit`: a script that changes one line as a person would."""
    script = tmp / "editor.sh"
    script.write_text(f"#!/bin/sh\nsed -i 's/^{old}$/{new}/' \"$1\"\n", encoding="utf-8")
    script.chmod(0o755)
    return {"KUBE_EDITOR": str(script), "EDITOR": str(script)}


def _claims_bound(s: Scenario, pods: list[str]) -> None:
    """The scheduler bound each pod (pods/binding) and the resourceclaim controller and
    scheduler wrote each of its claims' status: allocated and reserved for the pod."""
    claims = json.loads(
        s.cluster.kubectl("get", "resourceclaims", "-n", s.namespace, "-o", "json").stdout
    )["items"]
    for pod in pods:
        mine = [
            c for c in claims
            if any(r.get("name") == pod for r in c.get("status", {}).get("reservedFor", []))
        ]  # fmt: skip
        assert len(mine) == 1 and mine[0]["status"].get("allocation"), (pod, claims)


def test_a_user_edits_a_deployments_replicas_and_rolls_it_out(
    targets: Scenario, alice: Path, tmp_path: Path
) -> None:
    s = targets
    _kubectl(s, alice, "apply", "-n", s.namespace, "-f", "-",
             stdin=yaml.safe_dump(gpu_deployment("web", 1)))  # fmt: skip
    _running(s, s.namespace, "app=web", 1)
    editor = _editor(tmp_path, "  replicas: 1", "  replicas: 3")
    _kubectl(s, alice, "edit", "deployment", "web", "-n", s.namespace, env=editor)
    pods = _running(s, s.namespace, "app=web", 3)
    _claims_bound(s, pods)
    usage_is_exact(s)
    # a rollout: a new ReplicaSet up, the old one down, old pods deleted and finished
    _kubectl(s, alice, "rollout", "restart", "deployment/web", "-n", s.namespace)
    _kubectl(s, alice, "rollout", "status", "deployment/web", "-n", s.namespace,
             "--timeout=120s", timeout=150)  # fmt: skip
    renewed = _running(s, s.namespace, "app=web", 3)
    assert not set(renewed) & set(pods)
    sets = json.loads(_kubectl(s, alice, "get", "rs", "-n", s.namespace, "-l", "app=web",
                               "-o", "json"))["items"]  # fmt: skip
    assert sorted(r["status"]["replicas"] for r in sets) == [0, 3]
    usage_is_exact(s)


def _replicaset(name: str, replicas: int) -> dict[str, Any]:
    rs = gpu_deployment(name, replicas)
    rs["kind"] = "ReplicaSet"
    return rs


def _owners(s: Scenario, selector: str) -> dict[str, list[str]]:
    pods = s.pods(selector)
    return {
        p["metadata"]["name"]: [o["uid"] for o in p["metadata"].get("ownerReferences", [])]
        for p in pods
    }


def test_pods_orphaned_by_the_garbage_collector_are_adopted_by_a_new_replicaset(
    targets: Scenario, alice: Path
) -> None:
    s = targets
    _kubectl(s, alice, "create", "-n", s.namespace, "-f", "-",
             stdin=yaml.safe_dump(_replicaset("solo", 2)))  # fmt: skip
    pods = _running(s, s.namespace, "app=solo", 2)
    # the garbage collector removes the owner reference from each pod (a pod UPDATE)
    _kubectl(s, alice, "delete", "rs", "solo", "-n", s.namespace, "--cascade=orphan")
    eventually(lambda: all(not o for o in _owners(s, "app=solo").values()), timeout=60)
    usage_is_exact(s)
    # the ReplicaSet controller adopts them again (another owner-reference UPDATE)
    _kubectl(s, alice, "create", "-n", s.namespace, "-f", "-",
             stdin=yaml.safe_dump(_replicaset("solo", 2)))  # fmt: skip
    uid = json.loads(_kubectl(s, alice, "get", "rs", "solo", "-n", s.namespace, "-o", "json"))[
        "metadata"]["uid"]  # fmt: skip
    eventually(lambda: _owners(s, "app=solo") == {pod: [uid] for pod in pods}, timeout=60)
    usage_is_exact(s)
    _kubectl(s, alice, "delete", "rs", "solo", "-n", s.namespace, "--cascade=background")
    eventually(lambda: not s.pods("app=solo"), timeout=60)
    usage_is_exact(s)


@pytest.mark.parametrize("cascade", ["background", "foreground", "orphan"])
def test_a_user_deletes_a_deployment_with_each_propagation_policy(
    targets: Scenario, alice: Path, cascade: str
) -> None:
    s = targets
    name = f"gone-{cascade}"
    _kubectl(s, alice, "create", "-n", s.namespace, "-f", "-",
             stdin=yaml.safe_dump(gpu_deployment(name, 1)))  # fmt: skip
    _running(s, s.namespace, f"app={name}", 1)
    _kubectl(s, alice, "delete", "deployment", name, "-n", s.namespace, f"--cascade={cascade}",
             "--wait=true", "--timeout=90s", timeout=120)  # fmt: skip
    if cascade == "orphan":  # the ReplicaSet and its pod stay; then the ReplicaSet goes too
        _running(s, s.namespace, f"app={name}", 1)
        _kubectl(s, alice, "delete", "rs", "-l", f"app={name}", "-n", s.namespace)
    eventually(lambda: not s.pods(f"app={name}"), timeout=60)
    usage_is_exact(s)


def _statefulset(name: str, replicas: int) -> dict[str, Any]:
    sts = gpu_deployment(name, replicas)
    sts["kind"] = "StatefulSet"
    sts["spec"]["serviceName"] = name
    return sts


def test_a_statefulset_scales_up_and_down(targets: Scenario, alice: Path) -> None:
    s = targets
    _kubectl(s, alice, "create", "-n", s.namespace, "-f", "-",
             stdin=yaml.safe_dump(_statefulset("db", 1)))  # fmt: skip
    _running(s, s.namespace, "app=db", 1)
    _kubectl(s, alice, "scale", "statefulset", "db", "-n", s.namespace, "--replicas=3")
    assert _running(s, s.namespace, "app=db", 3) == ["db-0", "db-1", "db-2"]
    usage_is_exact(s)
    _kubectl(s, alice, "scale", "statefulset", "db", "-n", s.namespace, "--replicas=1")
    assert _running(s, s.namespace, "app=db", 1) == ["db-0"]
    usage_is_exact(s)


def test_a_user_evicts_a_pod_through_the_eviction_api(targets: Scenario, alice: Path) -> None:
    s = targets
    (victim, *_) = _running(s, s.namespace, "app=web", 3)
    api = k8s_config.new_client_from_config(config_file=str(alice))
    try:
        eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=victim, namespace=s.namespace))
        k8s.CoreV1Api(api).create_namespaced_pod_eviction(victim, s.namespace, eviction)
    finally:
        api.close()
    eventually(lambda: victim not in _running(s, s.namespace, "app=web", 3), timeout=90)
    usage_is_exact(s)


def test_node_drains_evict_every_pod_and_they_come_back_after_uncordon(
    targets: Scenario, kubelet: FakeKubelet
) -> None:
    s = targets
    before = _running(s, s.namespace, "app=web", 3)
    for node in NODES:
        _kubectl(s, None, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                 "--force", "--timeout=120s", timeout=150)  # fmt: skip
    try:
        # the Deployment's replacements wait for a schedulable node; they are charged already
        eventually(lambda: len(s.pods("app=web")) == 3, timeout=60)
        assert not set(p["metadata"]["name"] for p in s.pods("app=web")) & set(before)
        assert all(not p["spec"].get("nodeName") for p in s.pods("app=web"))
        usage_is_exact(s)
    finally:
        for node in NODES:
            _kubectl(s, None, "uncordon", node)
    _running(s, s.namespace, "app=web", 3)
    usage_is_exact(s)


# ------------------------------------------------------------------- Jobs


def _job_status(s: Scenario, name: str) -> dict[str, Any]:
    return dict(s.get("job", name).get("status", {}))


def _complete(status: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions", [])
    )


def _finish(s: Scenario, kubelet: FakeKubelet, job: str, completions: int) -> float:
    """Run the Job's pods to success as they come, as the kubelet would; the monotonic time
    the last pod was marked Succeeded."""
    done: set[str] = set()
    last = 0.0
    deadline = time.monotonic() + 120
    while len(done) < completions:
        assert time.monotonic() < deadline, (job, done, _job_status(s, job))
        for pod in s.pods(f"job-name={job}"):
            name = pod["metadata"]["name"]
            if name not in done and pod.get("status", {}).get("phase") == "Running":
                kubelet.succeed(s.namespace, name)
                done.add(name)
                last = time.monotonic()
        time.sleep(0.1)
    return last


def _time_until(check: Any, since: float, timeout: float = 30.0) -> float:
    eventually(check, timeout=timeout, interval=0.05)
    return time.monotonic() - since


def _released(s: Scenario, flavor: str = "f") -> bool:
    return all(not value for value in s.usage(flavor))


def test_a_job_of_four_completions_completes_and_releases_its_charge(
    draquota_cluster: Draquota, kube: k8s.ApiClient
) -> None:
    s = scenario(draquota_cluster, "e2e-life-jobs", Flavor("f", 2, {"e2e-life-jobs-1": 4}))
    with FakeKubelet(kube, [s.namespace]) as kubelet:
        _kubectl(s, None, "create", "-n", s.namespace, "-f", "-",
                 stdin=yaml.safe_dump(gpu_job("four", 2, 4)))  # fmt: skip
        last = _finish(s, kubelet, "four", 4)
        TIMINGS["reject: Job Complete after its last pod Succeeded (s)"] = _time_until(
            lambda: _complete(_job_status(s, "four")), last
        )
        TIMINGS["reject: charge released after its last pod Succeeded (s)"] = _time_until(
            lambda: _released(s), last
        )
        # the Job controller removed its tracking finalizer from every pod
        assert all(not p["metadata"].get("finalizers") for p in s.pods("job-name=four"))
        assert _job_status(s, "four")["succeeded"] == 4
        # the quota is whole again: a Job of the whole quota runs
        _kubectl(s, None, "create", "-n", s.namespace, "-f", "-",
                 stdin=yaml.safe_dump(gpu_job("next", 2, 2)))  # fmt: skip
        _running(s, s.namespace, "job-name=next", 2)
        usage_is_exact(s, 2.0)
        # deleted while its pods run: the garbage collector deletes them, the charge goes
        _kubectl(s, None, "delete", "job", "next", "-n", s.namespace, "--wait=false")
        eventually(lambda: not s.pods("job-name=next"), timeout=60)
        eventually(lambda: _released(s), timeout=30)


def test_a_queued_job_completes_releases_and_the_next_waiting_job_starts(
    draquota_cluster: Draquota, kube: k8s.ApiClient
) -> None:
    s = scenario(draquota_cluster, "e2e-life-queue", Flavor("f", 2, {"e2e-life-queue-1": 4}))
    s.queueing()
    with FakeKubelet(kube, [s.namespace]) as kubelet:
        _kubectl(s, None, "create", "-n", s.namespace, "-f", "-",
                 stdin=yaml.safe_dump(gpu_job("first", 2, 4)))  # fmt: skip
        _running(s, s.namespace, "job-name=first", 2)
        _kubectl(s, None, "create", "-n", s.namespace, "-f", "-",
                 stdin=yaml.safe_dump(gpu_job("second", 2, 2)))  # fmt: skip
        eventually(lambda: s.get("job", "second")["spec"].get("suspend") is True, timeout=30)
        time.sleep(2)  # a few controller passes: the second Job stays suspended
        assert s.get("job", "second")["spec"]["suspend"] is True
        usage_is_exact(s, 2.0)
        last = _finish(s, kubelet, "first", 4)
        TIMINGS["queue: Job Complete after its last pod Succeeded (s)"] = _time_until(
            lambda: _complete(_job_status(s, "first")), last
        )
        TIMINGS["queue: next Job started after the last pod Succeeded (s)"] = _time_until(
            lambda: s.get("job", "second")["spec"].get("suspend") is False, last
        )
        assert all(not p["metadata"].get("finalizers") for p in s.pods("job-name=first"))
        last = _finish(s, kubelet, "second", 2)
        eventually(lambda: _complete(_job_status(s, "second")), timeout=30)
        TIMINGS["queue: charge released at the end (s)"] = _time_until(lambda: _released(s), last)


def test_a_cronjob_creates_jobs_that_run_and_complete(
    targets: Scenario, alice: Path, kubelet: FakeKubelet
) -> None:
    s = targets  # its CronJob was created with the scenario: its first minute has passed
    job = eventually(lambda: _cron_job(s), timeout=90, interval=1)
    _finish(s, kubelet, job, 1)
    eventually(lambda: _complete(_job_status(s, job)), timeout=30)
    _kubectl(s, alice, "patch", "cronjob", "tick", "-n", s.namespace, "--type", "merge",
             "-p", json.dumps({"spec": {"suspend": True}}))  # fmt: skip
    usage_is_exact(s)


def _cron_job(s: Scenario) -> str:
    """The newest unfinished Job the CronJob created ("" while there is none)."""
    jobs = json.loads(s.cluster.kubectl("get", "jobs", "-n", s.namespace, "-o", "json").stdout)
    owned = [
        j
        for j in jobs["items"]
        if any(o["kind"] == "CronJob" for o in j["metadata"].get("ownerReferences", []))
        and not j.get("status", {}).get("conditions")
    ]
    owned.sort(key=lambda j: str(j["metadata"]["creationTimestamp"]))
    return str(owned[-1]["metadata"]["name"]) if owned else ""
