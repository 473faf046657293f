"""`draquota status` as an admin sees it: every ClusterQueue with its cohort lending, and
with -A every LocalQueue and workload (issue 25); counter resources in their units, as an
admin and as a namespace user sees them (issue 27); preemptions in progress (issue 26)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.holdings import holdings
from quota.queuetable import queue_table
from quota.settings import Settings
from tests.fakeapi import ApiError, FakeApiServer
from tests.security.cluster import Cluster
from tests.webhook import gpu_memory
from tests.webhook.gpu_memory import write_state
from webhook.cli import main
from webhook.commands import status
from webhook.commands._cluster import memory_usage
from webhook.commands._localqueues import computed_status
from webhook.ledger.memory import MemoryLedger

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")

# Recorded from the real control plane by tests/webhook/kube/record_user_view.py: in cohort
# lab, research (4 GPUs, lendingLimit 2) runs 2 pods and has lent 2 GPUs to ml (2 GPUs),
# which runs 4; pod eval-0, pod group pair and Job sweep wait in research.
LAB = Path(__file__).parent / "fixtures" / "user-view" / "admin"
USER = LAB.parent / "user"  # the API server's answers to a namespace user


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(block: str) -> list[dict[str, str]]:
    header, *rows = [re.split(r" {3,}", line.strip()) for line in block.splitlines()]
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_status_lendable_is_what_is_left_after_lending_and_names_the_borrower(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "status", "--state", str(LAB), "-o", "wide")
    assert (code, err) == (0, "")
    rows = {row["CLUSTERQUEUE"]: row for row in _rows(out)}
    research, ml = rows["research"], rows["ml"]
    assert (research["IN USE"], research["LENDABLE"]) == ("2", "0")  # ml borrowed the 2
    assert (research["LENT"], research["LENT TO"], research["BORROWED FROM"]) == ("2", "ml:2", "-")
    assert (ml["IN USE"], ml["BORROWED"], ml["BORROWED FROM"]) == ("4", "2", "research:2")
    code, out, _ = _run(capsys, "status", "--state", str(LAB), "-o", "json")
    items = {item["name"]: item for item in json.loads(out)["items"]}
    (gpus,) = items["research"]["flavors"][0]["resources"]
    assert {k: gpus[k] for k in ("borrowed", "lendable", "lent", "lentTo")} == {
        "borrowed": "0",
        "lendable": "0",
        "lent": "2",
        "lentTo": [{"clusterQueue": "ml", "amount": "2"}],
    }


def test_status_of_all_namespaces_lists_queues_local_queues_and_workloads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "status", "--state", str(LAB), "-A")
    assert code == 0
    queues, local_queues, workloads, notes = out.split("\n\n")
    assert [r["CLUSTERQUEUE"] for r in _rows(queues)] == ["ml", "research"]
    assert [(r["NAMESPACE"], r["LOCALQUEUE"]) for r in _rows(local_queues)] == [
        ("ml", "default"),
        ("research", "default"),
    ]
    listed = [(r["NAMESPACE"], r["WORKLOAD"], r["STATUS"], r["POSITION"]) for r in _rows(workloads)]
    assert listed == [
        *(("ml", f"tune-{i}", "Admitted", "-") for i in range(4)),
        ("research", "train-0", "Admitted", "-"),
        ("research", "train-1", "Admitted", "-"),
        ("research", "eval-0", "Waiting", "1 of 3"),
        ("research", "pair", "Waiting", "2 of 3"),
        ("research", "sweep", "Waiting", "3 of 3"),
    ]
    assert notes.splitlines()[0].startswith("pod research/eval-0: waiting for quota: ")


# -- counter resources (issue 27): ClusterQueue vision, 40Gi of GPU memory, six notebooks of
# one 1g.5gb slice (5Gi) admitted by draquota (tests/webhook/gpu_memory.py)


def _gpu_memory_state(tmp_path: Path) -> tuple[Cluster, Path]:
    cluster = gpu_memory.admitted(6)
    documents = [*gpu_memory.objects(), *cluster.state.list("Pod")]
    return cluster, write_state(tmp_path / "state", documents)


def test_status_shows_gpu_memory_in_the_unit_of_its_nominal_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = _gpu_memory_state(tmp_path)
    code, out, err = _run(capsys, "status", "--state", str(state), "-o", "wide")
    assert (code, err) == (0, "")
    rows = {row["RESOURCE"]: row for row in _rows(out)}
    memory = rows["gpu-memory"]
    assert (memory["NOMINAL"], memory["IN USE"], memory["AVAILABLE"]) == ("40Gi", "30Gi", "10Gi")
    assert (rows["gpus"]["NOMINAL"], rows["gpus"]["AVAILABLE"]) == ("16", "10")  # devices
    code, out, _ = _run(capsys, "status", "--state", str(state), "-o", "json")
    (queue,) = json.loads(out)["items"]
    shown = {r["name"]: r for r in queue["flavors"][0]["resources"]}
    assert {k: shown["gpu-memory"][k] for k in ("nominal", "inUse", "available", "borrowed")} == {
        "nominal": "40Gi",
        "inUse": "30Gi",
        "available": "10Gi",
        "borrowed": "0",
    }
    assert {k: shown["gpus"][k] for k in ("nominal", "inUse", "available")} == {
        "nominal": "16",
        "inUse": "6",
        "available": "10",
    }


def test_an_admin_sees_what_each_workload_holds_of_gpu_memory_in_its_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = _gpu_memory_state(tmp_path)
    code, out, _ = _run(capsys, "status", "--state", str(state), "-n", gpu_memory.NAMESPACE)
    assert code == 0
    local_queues, workloads = out.split("\n\n")
    memory = next(r for r in _rows(local_queues) if r["RESOURCE"] == "gpu-memory")
    assert (memory["NOMINAL"], memory["IN USE"]) == ("40Gi", "30Gi")
    held = {row["WORKLOAD"]: row["RESOURCES"] for row in _rows(workloads)}
    assert held == {f"notebook-{i}": "gpu-memory=5Gi,gpus=1" for i in range(1, 7)}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(bookmark_interval=0.1).start()
    yield server
    server.stop()


def _as_namespace_user(api: FakeApiServer, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake API server answers as the real one answers the `edit` role of `namespace`:
    a LIST elsewhere is refused with the 403 recorded from it."""
    forbidden = json.loads((USER / "forbidden.json").read_text())
    route = FakeApiServer.route

    def as_user(self: FakeApiServer, h: Any, method: str, path: str, query: Any) -> None:
        parts = path.strip("/").split("/")  # a resource: /api/v1/pods, /apis/g/v1/r, ...
        resource = len(parts) >= (3 if parts[0] == "api" else 4)
        if resource and f"/namespaces/{namespace}/" not in f"{path}/":
            plural = path.rsplit("/", 1)[1]
            raise ApiError(403, forbidden["reason"], forbidden["message"].replace("pods", plural))
        route(self, h, method, path, query)

    monkeypatch.setattr(FakeApiServer, "route", as_user)


def test_a_namespace_user_sees_gpu_memory_in_its_unit_from_what_draquota_wrote(
    api: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster, _ = _gpu_memory_state(tmp_path)
    namespace = gpu_memory.NAMESPACE
    # the LocalQueue's status as draquota's queue status writer computes it
    table = queue_table(cluster.state.snapshot(), Settings())
    usage = memory_usage(cluster.state, Settings())
    local_queues = cluster.state.list("LocalQueue", namespace)
    stamp = "2026-11-27T10:00:00Z"
    for obj in computed_status(table, local_queues, usage, holdings(usage), {}, stamp):
        api.create(obj)
    for pod in cluster.state.list("Pod", namespace):  # as draquota's /mutate annotated them
        api.create(pod)
    _as_namespace_user(api, namespace, monkeypatch)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [{"name": "alice", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "alice"}}],
        "current-context": "fake",
    }
    kubeconfig = tmp_path / "alice"
    kubeconfig.write_text(yaml.safe_dump(config))
    argv = ("status", "--kubeconfig", str(kubeconfig), "-n", namespace)
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (0, "")
    local_queues, workloads = out.split("\n\n")
    memory = next(r for r in _rows(local_queues) if r["RESOURCE"] == "gpu-memory")
    assert (memory["NOMINAL"], memory["IN USE"], memory["LENDABLE"]) == ("40Gi", "30Gi", "0")
    held = {row["WORKLOAD"]: row["RESOURCES"] for row in _rows(workloads)}
    assert held == {f"notebook-{i}": "gpu-memory=5Gi,gpus=1" for i in range(1, 7)}
    code, out, _ = _run(capsys, *argv, "-o", "json")
    totals = [r for w in json.loads(out)["workloads"] for f in w["flavorsUsage"]
              for r in f["resources"]]  # fmt: skip
    assert {r["name"]: r["total"] for r in totals} == {"gpu-memory": "5Gi", "gpus": "1"}


# -- preemptions (issue 26), recorded from the real control plane by
# tests/webhook/kube/record_preemption.py: research (4 GPUs, lent 2 to ml) admitted r-0 and
# r-1 and preempted ml's pod tune-0 and Job tune for r-2 and r-3, which wait for them to go;
# the victims are still terminating (a kubelet holds them).

PREEMPTION = Path(__file__).parent / "fixtures" / "preemption"
KINDS = {"pods": ("v1", "Pod"), "jobs": ("batch/v1", "Job"), "events": ("v1", "Event"),
         "localqueues": ("draquota.io/v1beta1", "LocalQueue")}  # fmt: skip


def _recorded(namespace: str, plural: str) -> list[dict[str, Any]]:
    """A LIST the namespace's user got, its items as the API server would create them."""
    api_version, kind = KINDS[plural]
    items = json.loads((PREEMPTION / namespace / f"{plural}.json").read_text())["items"]
    for item in items:
        item.update(apiVersion=api_version, kind=kind)
        item["metadata"].pop("resourceVersion", None)
    return list(items)


def _while_evicting(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` runs at the moment of the recording (the victims' Preempted Event), while the
    victims are within their grace period and still hold quota (in the usage too)."""
    events = [e for e in _recorded("ml", "events") if e["reason"] == "Preempted"]
    stamp = max(e["lastTimestamp"] for e in events)
    moment = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    monkeypatch.setattr(time, "time", lambda: moment)
    monkeypatch.setattr(
        status, "memory_usage", lambda state, settings: at(moment, state, settings).usage()
    )


def at(moment: float, state: Any, settings: Settings) -> MemoryLedger:
    """The ledger `status --state` starts from, on a clock stopped at `moment`."""
    return MemoryLedger(state, settings, wall=lambda: moment)


def _workloads(out: str) -> dict[str, dict[str, str]]:
    return {row["WORKLOAD"]: row for row in _rows(out.split("\n\n")[-2])}


def test_an_admin_sees_the_workloads_being_preempted_and_the_preemptors_waiting_for_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _while_evicting(monkeypatch)
    code, out, err = _run(
        capsys, "status", "--state", str(PREEMPTION / "admin"), "-A", "-o", "wide"
    )
    assert (code, err) == (0, "")
    rows = _workloads(out + "\n\n")
    assert {name: row["STATUS"] for name, row in rows.items()} == {
        "tune": "Preempted",  # the Job, suspended again while its pod stops
        "tune-0": "Preempted",
        "r-0": "Admitted",
        "r-1": "Admitted",
        "r-2": "Waiting",
        "r-3": "Waiting",
    }
    for victim in ("tune", "tune-0"):
        message = rows[victim]["MESSAGE"]
        assert "due to reclamation within the cohort by ClusterQueue research" in message
        assert re.search(r"preemptor: pod research/r-[23]$", message), message
        assert rows[victim]["RESOURCES"] == "gpus=1"  # still charged until it is gone
    for preemptor in ("r-2", "r-3"):
        assert rows[preemptor]["MESSAGE"].startswith(
            "waiting for quota: Pending the preemption of 2 workload(s); position"
        )
    code, out, _ = _run(capsys, "status", "--state", str(PREEMPTION / "admin"), "-A")
    notes = out.split("\n\n")[-1].splitlines()
    assert any(n.startswith("pod ml/tune-0: Preempted to accommodate a workload") for n in notes)
    assert any(n.startswith("job ml/tune: Preempted to accommodate a workload") for n in notes)


def test_status_json_gives_a_preempted_workload_its_state_and_reason_and_keeps_every_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _while_evicting(monkeypatch)
    code, out, _ = _run(capsys, "status", "--state", str(PREEMPTION / "admin"), "-A", "-o", "json")
    assert code == 0
    workloads = {w["name"]: w for w in json.loads(out)["workloads"]}
    _, before, _ = _run(capsys, "status", "--state", str(LAB), "-A", "-o", "json")
    keys = {key for w in json.loads(before)["workloads"] for key in w}
    victim = workloads["tune-0"]
    assert set(victim) == keys  # the same keys as every workload: nothing renamed
    assert (victim["status"], victim["position"]) == ("Preempted", None)
    assert "by ClusterQueue research" in victim["message"]
    assert workloads["r-2"]["status"] == "Waiting"
    assert "Pending the preemption of 2 workload(s)" in workloads["r-2"]["message"]


def test_a_preempted_job_whose_pods_are_gone_waits_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _while_evicting(monkeypatch)
    state = tmp_path / "state"
    shutil.copytree(PREEMPTION / "admin", state)
    pods = list(yaml.safe_load_all((state / "pods.yaml").read_text()))
    kept = [p for p in pods if not p["metadata"]["name"].startswith("tune-") or
            p["metadata"]["name"] == "tune-0"]  # fmt: skip
    assert len(kept) == len(pods) - 1  # the Job's pod ended its grace: the API server dropped it
    (state / "pods.yaml").write_text(yaml.safe_dump_all(kept))
    _, out, _ = _run(capsys, "status", "--state", str(state), "-n", "ml", "-o", "wide")
    rows = _workloads(out + "\n\n")
    assert (rows["tune"]["STATUS"], rows["tune-0"]["STATUS"]) == ("Waiting", "Preempted")
    assert "Preempted to accommodate" not in rows["tune"]["MESSAGE"]  # what the queue says now


def _user_kubeconfig(api: FakeApiServer, tmp_path: Path, namespace: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [{"name": "user", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "user",
                                                  "namespace": namespace}}],
        "current-context": "fake",
    }  # fmt: skip
    path = tmp_path / namespace
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("namespace", ["ml", "research"])
def test_a_namespace_user_sees_preemptions_as_draquota_wrote_them(
    namespace: str,
    api: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for plural in KINDS:
        for obj in _recorded(namespace, plural):
            api.create(obj)
    _as_namespace_user(api, namespace, monkeypatch)
    _while_evicting(monkeypatch)
    code, out, err = _run(
        capsys,
        "status",
        "--kubeconfig",
        str(_user_kubeconfig(api, tmp_path, namespace)),
        "-o",
        "wide",
    )
    assert (code, err) == (0, "")
    rows = _workloads(out + "\n\n")
    if namespace == "ml":  # the victims, and why
        assert {n: r["STATUS"] for n, r in rows.items()} == {
            "tune": "Preempted",
            "tune-0": "Preempted",
        }
        assert all("by ClusterQueue research" in r["MESSAGE"] for r in rows.values())
    else:  # the preemptors, waiting for them
        waiting = {n: r["MESSAGE"] for n, r in rows.items() if r["STATUS"] == "Waiting"}
        assert sorted(waiting) == ["r-2", "r-3"]
        assert all("Pending the preemption of 2 workload(s)" in m for m in waiting.values())
