"""The commands against a live cluster, as a namespace user and as an admin: `status` and
`check`, and `count` and `allocate` finding the cluster and namespace as kubectl does.

The fake API server serves objects recorded from the real control plane by
tests/webhook/kube/record_user_view.py (cohort lab: research has lent 2 GPUs to ml; pod
eval-0, pod group pair and Job sweep wait in research, in that order). As the user, it
answers like the API server answers a ServiceAccount bound to the built-in `edit` role in
`research`: every LIST outside that namespace is refused with the recorded 403.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakeapi import FakeApiServer
from tests.fakeapi.store import ApiError
from webhook.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "user-view"
USER_KINDS = {"localqueues": "LocalQueue", "pods": "Pod", "jobs": "Job", "events": "Event"}
WAITING = "position {} of 3 in ClusterQueue research"


pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")


def _kubeconfig(path: Path, url: str, namespace: str = "") -> Path:
    context: dict[str, str] = {"cluster": "fake", "user": "alice"}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "alice", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": context}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _resource_path(path: str) -> bool:
    parts = [p for p in path.split("/") if p]
    return (parts[:1] == ["api"] and len(parts) >= 3) or (parts[:1] == ["apis"] and len(parts) >= 4)


@pytest.fixture
def user(api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The recorded namespace `research`, served to its `edit` user; the requests they make."""
    for name, kind in USER_KINDS.items():
        for obj in json.loads((FIXTURES / "user" / f"{name}.json").read_text())["items"]:
            api.create({**obj, "kind": kind})
    forbidden = json.loads((FIXTURES / "user" / "forbidden.json").read_text())
    seen: list[tuple[str, str]] = []
    route = FakeApiServer.route

    def as_user(self: FakeApiServer, h: Any, method: str, path: str, query: Any) -> None:
        seen.append((method, path))
        if _resource_path(path) and "/namespaces/research/" not in f"{path}/":
            plural = path.rsplit("/", 1)[1]
            message = forbidden["message"].replace('"pods"', f'"{plural}"')
            raise ApiError(403, forbidden["reason"], message.replace("pods is", f"{plural} is"))
        route(self, h, method, path, query)

    monkeypatch.setattr(FakeApiServer, "route", as_user)
    return seen


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _tables(out: str) -> list[list[list[str]]]:
    """The blank-line separated blocks of the output, as rows of columns (3+ spaces apart)."""
    blocks = [block.splitlines() for block in out.strip().split("\n\n")]
    return [[[c.strip() for c in line.split("   ") if c.strip()] for line in b] for b in blocks]


def test_a_namespace_user_sees_their_local_queue_and_why_their_workloads_wait(
    api: FakeApiServer,
    user: list[tuple[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # no --kubeconfig: $KUBECONFIG, whose current context names the namespace
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "alice", api.url, "research")))
    code, out, err = _run(capsys, "status")
    assert (code, err) == (0, "")
    local_queues, workloads, notes = _tables(out)
    assert local_queues[1] == [
        "default", "research", "2", "3", "lab", "gpus", "4", "2", "0", "0"
    ]  # fmt: skip
    rows = {row[0]: row for row in workloads[1:]}
    assert [row[0] for row in workloads[1:]] == ["train-0", "train-1", "eval-0", "pair", "sweep"]
    assert rows["train-0"][1:5] == ["Pod", "default", "Admitted", "1"]
    assert rows["eval-0"][1:5] == ["Pod", "default", "Waiting", "1"]
    assert rows["pair"][1:5] == ["PodGroup", "default", "Waiting", "2/2"]
    assert rows["sweep"][1:4] == ["Job", "default", "Waiting"]
    assert [rows[name][-2] for name in ("eval-0", "pair", "sweep")] == [
        "1 of 3",
        "2 of 3",
        "3 of 3",
    ]
    why = {line[0].split(": ", 1)[0]: line[0].split(": ", 1)[1] for line in notes}
    assert why["pod research/eval-0"].startswith("waiting for quota: insufficient unused quota")
    assert why["pod research/eval-0"].endswith(WAITING.format(1))
    assert why["job research/sweep"].endswith(WAITING.format(3))
    # read only, and only the namespace once the cluster-wide LIST was refused
    assert {method for method, _ in user} == {"GET"}
    refused = [p for _, p in user if _resource_path(p) and "/namespaces/research/" not in p]
    assert refused == ["/api/v1/pods"]


def test_json_keeps_lendable_and_borrowed_and_adds_what_was_lent_to_whom(
    api: FakeApiServer,
    user: list[tuple[str, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = str(_kubeconfig(tmp_path / "alice", api.url))
    code, out, _ = _run(
        capsys, "status", "--kubeconfig", kubeconfig, "-n", "research", "-o", "json"
    )
    assert code == 0
    document = json.loads(out)
    (local,) = document["items"]
    assert (local["kind"], local["name"], local["clusterQueue"]) == (
        "LocalQueue",
        "default",
        "research",
    )
    (gpus,) = local["flavors"][0]["resources"]
    assert gpus["lendable"] == "0" and gpus["borrowed"] == "0"  # ml borrowed the lendable 2
    assert gpus["lent"] == "2"
    assert gpus["lentTo"] == [{"clusterQueue": "ml", "amount": "2"}]
    assert gpus["borrowedFrom"] == []
    waiting = [
        (w["kind"], w["name"], w["position"]) for w in document["workloads"] if w["position"]
    ]
    assert waiting == [("Pod", "eval-0", 1), ("PodGroup", "pair", 2), ("Job", "sweep", 3)]


def test_all_namespaces_needs_read_access_to_the_whole_cluster(
    api: FakeApiServer,
    user: list[tuple[str, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = str(_kubeconfig(tmp_path / "alice", api.url, "research"))
    code, out, err = _run(capsys, "status", "--kubeconfig", kubeconfig, "-A")
    assert (code, out) == (2, "")
    assert err.startswith(f"draquota status: {api.url}: 403 Forbidden: pods is forbidden: ")
    assert err.rstrip().endswith("-A needs read access to the whole cluster")


def test_check_as_a_namespace_user_says_it_needs_the_whole_cluster(
    api: FakeApiServer,
    user: list[tuple[str, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pods = tmp_path / "pod.yaml"
    pods.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
    kubeconfig = str(_kubeconfig(tmp_path / "alice", api.url, "research"))
    code, out, err = _run(capsys, "check", str(pods), "--kubeconfig", kubeconfig)
    assert (code, out) == (2, "")
    assert "403 Forbidden" in err
    assert "needs read access to the whole cluster; `draquota status` shows your namespace" in err


# -- as an admin: every object the decisions read --------------------------------------


@pytest.fixture
def admin(api: FakeApiServer) -> FakeApiServer:
    for path in sorted((FIXTURES / "admin").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            api.create(obj)
    return api


def _gpu_pod(name: str) -> dict[str, Any]:
    claims = [{"name": "g", "resourceClaimTemplateName": "gpu"}]
    container = {"name": "main", "image": "x", "resources": {"claims": [{"name": "g"}]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container], "resourceClaims": claims}}  # fmt: skip


def test_check_gives_a_pod_the_position_the_controller_would_in_the_context_namespace(
    admin: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(_gpu_pod("late")))
    kubeconfig = str(_kubeconfig(tmp_path / "admin", admin.url, "research"))
    code, out, _ = _run(capsys, "check", str(pod), "--kubeconfig", kubeconfig, "-o", "json")
    assert code == 0
    (item,) = json.loads(out)["items"]
    assert (item["namespace"], item["reason"], item["waits"]) == ("research", "Queued", True)
    assert item["message"].endswith("position 4 of 4 in ClusterQueue research")


def test_an_admin_sees_a_namespace_with_the_reasons_worked_out_now(
    admin: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = str(_kubeconfig(tmp_path / "admin", admin.url))
    code, out, _ = _run(
        capsys, "status", "--kubeconfig", kubeconfig, "-n", "research", "-o", "json"
    )
    assert code == 0
    document = json.loads(out)
    (local,) = document["items"]
    assert (local["admittedWorkloads"], local["pendingWorkloads"]) == (2, 3)
    by_name = {w["name"]: w for w in document["workloads"]}
    # admitted pods with what they hold, from the admin's usage
    assert by_name["train-0"]["flavorsUsage"] == [
        {"name": "lab", "resources": [{"name": "gpus", "total": "1"}]}
    ]
    # a Job's reason without its Event: the controller's next pass, worked out here
    assert by_name["sweep"]["message"].endswith(WAITING.format(3))


def test_count_and_allocate_read_templates_and_devices_in_the_context_namespace(
    admin: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the pod names template `gpu`, which exists in the cluster, in namespace research only
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(_gpu_pod("late")))
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    _kubeconfig(tmp_path / "home" / ".kube" / "config", admin.url, "research")
    code, out, _ = _run(capsys, "count", str(pod), "-o", "json")  # ~/.kube/config
    assert code == 0
    (item,) = json.loads(out)["items"]
    assert (item["namespace"], item["devices"]) == ("research", {"gpu.example.com": 1})
    code, out, _ = _run(capsys, "allocate", str(pod), "-o", "json")
    assert code == 0
    (placed,) = json.loads(out)["items"]
    assert (placed["namespace"], placed["ok"], placed["node"]) == ("research", True, "lab-1")
    code, _, err = _run(capsys, "count", str(pod), "-n", "elsewhere")
    assert code == 2
    assert "ResourceClaimTemplate elsewhere/gpu not found" in err
