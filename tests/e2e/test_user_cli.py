"""The draquota command line on the real control plane, as a namespace user and as an admin.

A user bound to the built-in `edit` role may read their namespace's pods, Jobs, Events and
LocalQueues and nothing cluster-scoped. `draquota status`, finding their kubeconfig through
`$KUBECONFIG` and the namespace in its current context, shows their LocalQueue and their
waiting pods with the position and reason the queueing controller gave them. `draquota
check` gives a pod the answer the controller then gives that pod once it is created, and
denies a Job in a full queue that rejects as the webhook denies it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import REPO, Draquota, eventually
from tests.e2e.objects import Flavor, Scenario, gpu_pod, scenario

pytestmark = pytest.mark.e2e


def _draquota(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m webhook.cli ARGS` with `$KUBECONFIG` set to `kubeconfig` and no other."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False, env=env,
    )  # fmt: skip


def _create(s: Scenario, *objects: dict[str, Any]) -> None:
    for obj in objects:  # one at a time: each is admitted or queued before the next
        s.cluster.kubectl("create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump(obj))


def _reason(s: Scenario, name: str) -> str:
    """The message of the pod's QuotaReserved condition ("" when it has none)."""
    conditions = s.get("pod", name).get("status", {}).get("conditions", [])
    return next((c["message"] for c in conditions if c["type"] == "QuotaReserved"), "")


def _pod_file(s: Scenario, name: str, gpus: int = 1) -> Path:
    path = s.installed.workdir / f"{s.namespace}-{name}.yaml"
    path.write_text(yaml.safe_dump(gpu_pod(name, gpus)), encoding="utf-8")  # no namespace
    return path


@pytest.fixture(scope="module")
def queue(draquota_cluster: Draquota) -> Scenario:
    """2 GPUs, both held by running pods; wait-0 then wait-1 waiting for one GPU each."""
    s = scenario(draquota_cluster, "e2e-user", Flavor("u", 2, {"e2e-user-1": 8})).queueing()
    _create(s, gpu_pod("run-0"), gpu_pod("run-1"))
    eventually(lambda: all(not _reason(s, n).startswith("waiting") and _reason(s, n)
                           for n in ("run-0", "run-1")), timeout=60)  # fmt: skip
    _create(s, gpu_pod("wait-0"), gpu_pod("wait-1"))
    eventually(lambda: "position 2 of 2" in _reason(s, "wait-1"), timeout=60)
    return s


def test_a_user_with_edit_sees_their_local_queue_and_why_their_pod_waits(queue: Scenario) -> None:
    alice = queue.user("alice", "edit")
    queue.cluster.kubectl(
        "config", "set-context", "--current", f"--namespace={queue.namespace}",
        kubeconfig=alice,
    )  # fmt: skip
    refused = queue.cluster.kubectl("get", "clusterqueues", kubeconfig=alice, check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr  # nothing cluster-scoped

    def shown() -> tuple[str, str]:
        result = _draquota("status", kubeconfig=alice)  # no --kubeconfig: $KUBECONFIG
        assert result.returncode == 0, result.stderr
        local, workloads, notes = result.stdout.strip().split("\n\n")
        # the LocalQueue's status, as the status writer last wrote it: 2 admitted, 2 pending
        assert local.splitlines()[1].split()[:4] == ["default", queue.name, "2", "2"], local
        return workloads, notes

    workloads, notes = eventually(shown, timeout=60)
    positions = {line.split()[0]: line.split() for line in workloads.splitlines()[1:]}
    assert positions["wait-0"][3:4] == ["Waiting"] and "1 of 2" in " ".join(positions["wait-0"])
    assert "2 of 2" in " ".join(positions["wait-1"])
    assert positions["run-0"][3] == "Admitted"
    why = dict(line.split(": ", 1) for line in notes.splitlines())
    assert why[f"pod {queue.namespace}/wait-1"] == _reason(queue, "wait-1")
    assert why[f"pod {queue.namespace}/wait-1"].startswith("waiting for quota: ")


def test_check_gives_a_pod_the_position_the_controller_then_gives_it(queue: Scenario) -> None:
    admin = queue.cluster.kubeconfig
    pod = _pod_file(queue, "wait-2")
    result = _draquota("check", str(pod), "-n", queue.namespace, "-o", "json", kubeconfig=admin)
    assert result.returncode == 0, result.stderr
    (item,) = json.loads(result.stdout)["items"]
    assert (item["namespace"], item["waits"]) == (queue.namespace, True)
    assert item["message"].endswith(f"; position 3 of 3 in ClusterQueue {queue.name}")
    queue.cluster.kubectl("create", "-n", queue.namespace, "-f", str(pod))
    given = eventually(lambda: "position" in _reason(queue, "wait-2") and _reason(queue, "wait-2"),
                       timeout=60)  # fmt: skip
    # the whole of the controller's message, reason and position, is what check said
    assert item["message"].endswith(f": {given}")


def test_check_denies_a_job_in_a_full_rejecting_queue_as_the_webhook_does(
    draquota_cluster: Draquota,
) -> None:
    s = scenario(draquota_cluster, "e2e-user-reject", Flavor("r", 1, {"e2e-user-reject-1": 8}))
    _create(s, gpu_pod("holds-it"))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "more"},
        "spec": {"template": {"spec": {**gpu_pod("x")["spec"], "restartPolicy": "Never"}}},
    }
    path = s.installed.workdir / "e2e-user-reject-job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    admin = s.cluster.kubeconfig
    result = _draquota("check", str(path), "-n", s.namespace, "-o", "json", kubeconfig=admin)
    assert result.returncode == 0, result.stderr
    (item,) = json.loads(result.stdout)["items"]
    assert (item["allowed"], item["reason"]) == (False, "QuotaExceeded")
    created = s.cluster.kubectl("create", "-n", s.namespace, "-f", str(path), check=False)
    assert created.returncode != 0
    assert item["message"] in created.stderr
