"""The example cluster and workloads of manifests/examples on a real API server.

An admin creates the example cluster; a user applies each example workload with
`kubectl apply` and sees what `draquota check` predicts offline for the same files and
state: the same decision, the exact denial text after the API server's prefix, the same
warnings, and the same charge annotation on admitted pods.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import REPO, ControlPlane, Draquota, eventually, run_draquota

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "manifests" / "examples"
CLUSTER = EXAMPLES / "cluster"
WORKLOADS = sorted((EXAMPLES / "workloads").glob("*.yaml"))
CHARGE = "draquota.io/charge"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


@pytest.fixture(scope="module")
def example_cluster(draquota_cluster: Draquota) -> ControlPlane:
    """The example cluster as an admin builds it. Its pods predate the quotas (they were
    running before draquota was installed), so they are created before the queues, and the
    Succeeded one is marked so through the status subresource (the API server resets status
    on create)."""
    cluster = draquota_cluster.cluster
    for name in ("namespaces", "deviceclasses", "claims", "nodes", "resourceslices"):
        cluster.apply(CLUSTER / f"{name}.yaml")
    for node in _docs(CLUSTER / "nodes.yaml"):
        cluster.fake_node(node["metadata"]["name"])  # Ready, labels kept, no kubelet
    cluster.apply(CLUSTER / "pods.yaml")
    for pod in _docs(CLUSTER / "pods.yaml"):
        phase = pod.get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            meta = pod["metadata"]
            cluster.kubectl(
                "patch", "pod", meta["name"], "-n", meta["namespace"], "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": {"phase": phase}}),
            )  # fmt: skip
    cluster.apply(CLUSTER / "queues.yaml")
    # Every replica has rebuilt team-a's usage from the live pods: 2 GPUs + the shared claim.
    labels = {"cluster_queue": "team-a", "flavor": "on-demand", "resource": "gpus"}
    eventually(
        lambda: all(
            r.metric("draquota_queue_usage", **labels) == 3 for r in draquota_cluster.replicas
        ),
        timeout=30,
    )
    return cluster


@pytest.fixture(scope="module")
def predicted() -> dict[str, dict[str, Any]]:
    """`draquota check` over the same files and state, offline: what the user should see."""
    out = run_draquota(
        "check", *map(str, WORKLOADS), "--state", str(CLUSTER), "--json", check=True
    ).stdout
    items = json.loads(out)["items"]
    assert len(items) == len(WORKLOADS)
    return {path.name: item for path, item in zip(WORKLOADS, items, strict=True)}


def _denial(stderr: str, path: Path) -> str:
    """The message after the API server's `admission webhook "..." denied the request: `."""
    pattern = (
        rf'^Error from server \(\w+\): error when creating "{re.escape(str(path))}": '
        r'admission webhook "(?:validate|mutate)\.draquota\.io" denied the request: (.*)$'
    )
    found = re.search(pattern, stderr.strip(), re.MULTILINE)
    assert found, stderr
    return found.group(1)


def _warnings(stderr: str) -> list[str]:
    return [line.removeprefix("Warning: ") for line in stderr.splitlines() if "Warning: " in line]


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.stem for p in WORKLOADS])
def test_example_workload_gets_what_draquota_check_predicts(
    example_cluster: ControlPlane, predicted: dict[str, dict[str, Any]], path: Path
) -> None:
    expected = predicted[path.name]
    applied = example_cluster.kubectl("apply", "-f", str(path), check=False)
    if not expected["allowed"]:
        assert applied.returncode != 0, applied.stdout
        assert _denial(applied.stderr, path) == expected["message"]
        return
    assert applied.returncode == 0, applied.stderr
    assert _warnings(applied.stderr) == list(expected["warnings"])
    doc = _docs(path)[0]
    if doc["kind"] != "Pod":
        return
    pod = json.loads(
        example_cluster.kubectl(
            "get", "pod", doc["metadata"]["name"], "-n", doc["metadata"]["namespace"], "-o", "json"
        ).stdout
    )
    annotation = pod["metadata"].get("annotations", {}).get(CHARGE)
    if expected["charge"] is None:
        assert annotation is None
    else:
        charge = json.loads(annotation)
        assert charge == expected["charge"]

        # the admission is recorded by the pod's UID in a QuotaLedger, where users cannot
        # write: written behind the answer, within the elected replica's write interval
        def records() -> dict[str, Any]:
            ledgers = json.loads(
                example_cluster.kubectl("get", "quotaledgers", "-o", "json").stdout
            )
            return {
                r["id"]: json.loads(r["charge"])
                for ledger in ledgers["items"]
                for r in ledger["spec"].get("reservations") or []
            }

        uid = pod["metadata"]["uid"]
        assert eventually(lambda: records().get(uid), timeout=10) == expected["charge"]


def test_example_job_gets_its_pods_created_with_generated_names_and_each_charged(
    example_cluster: ControlPlane,
) -> None:
    # 05-admit-job.yaml: parallelism 2, so the job controller creates 2 pods sweep-xxxxx
    def pods() -> list[dict[str, Any]]:
        out = example_cluster.kubectl(
            "get", "pods", "-n", "team-a", "-l", "job-name=sweep", "-o", "json"
        )
        found = json.loads(out.stdout)["items"]
        return found if len(found) == 2 else []

    for pod in eventually(pods, timeout=60):
        assert pod["metadata"]["name"].startswith("sweep-")
        charge = json.loads(pod["metadata"]["annotations"][CHARGE])
        assert (charge["clusterQueue"], charge["usage"]["gpus"]) == ("team-a", 1)
