"""`draquota status` and `check` with --kubeconfig: one LIST of the live cluster, no writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakeapi import FakeApiServer
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[3]
STATE = ROOT / "manifests" / "examples" / "cluster"
WORKLOADS = ROOT / "manifests" / "examples" / "workloads"


@pytest.fixture
def methods(api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    for path in sorted(STATE.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                api.create(obj)
    seen: list[str] = []
    route = FakeApiServer.route

    def recording(self: FakeApiServer, h: Any, method: str, path: str, query: Any) -> None:
        seen.append(method)
        route(self, h, method, path, query)

    monkeypatch.setattr(FakeApiServer, "route", recording)
    return seen


def test_status_and_check_against_a_live_cluster_only_read(
    kubeconfig: Path, methods: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    usage = {
        (i["name"], f["name"], r["name"]): r["inUse"]
        for i in items
        for f in i["flavors"]
        for r in f["resources"]
    }
    assert usage[("team-a", "on-demand", "gpus")] == "3"

    files = [str(p) for p in sorted(WORKLOADS.glob("*.yaml"))[:3]]
    assert main(["check", *files, "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    decided = [(i["name"], i["reason"]) for i in json.loads(capsys.readouterr().out)["items"]]
    assert decided == [
        ("train-0", "Admitted"),
        ("train-1", "Admitted"),
        ("train-2", "QuotaExceeded"),
    ]
    assert methods and set(methods) == {"GET"}


def test_unreachable_cluster_is_one_line_exit_2(
    api: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.stop()
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"draquota status: {api.url}: cannot reach the API server: ")
    assert err.count("\n") == 1
