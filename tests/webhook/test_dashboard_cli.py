"""`draquota dashboard` at the command line: where it finds the cluster, the URL it prints, and
one line on stderr with exit 2 when it cannot start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakeapi import FakeApiServer
from tests.webhook.dashboard_lab import lab_objects
from tests.webhook.kube.conftest import write_kubeconfig
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(resource_versions=("v1",), bookmark_interval=0.1).start()
    for obj in lab_objects():
        server.create(obj)
    yield server
    server.stop()


def _start(*args: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """`draquota dashboard ARGS`, and the first line it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "dashboard", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    out = process.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(out.readline()), daemon=True)
    reader.start()
    reader.join(30)
    return process, (lines[0] if lines else "")


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=15)
    return process.returncode, err


@pytest.mark.integration
def test_with_kubeconfig_in_the_environment_it_prints_its_url_and_serves_the_page(
    api: FakeApiServer, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", api.url)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    process, line = _start(env=env)
    try:
        assert line.startswith("http://127.0.0.1:") and line.endswith("/\n"), line
        page = httpx.get(line.strip(), timeout=10)
        assert page.status_code == 200
        assert "not-a-secret" not in page.text  # the kubeconfig's token stays in the process
    finally:
        code, err = _stop(process)
    assert code == 0, err
    assert "draquota dashboard: Every ClusterQueue, kept current by watches" in err


def test_without_any_kubeconfig_it_says_where_it_looked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["dashboard"]) == 2
    assert capsys.readouterr().err == (
        "draquota dashboard: no cluster: give --kubeconfig FILE "
        "(no $KUBECONFIG, no ~/.kube/config)\n"
    )


def test_a_missing_kubeconfig_file_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.kubeconfig"
    assert main(["dashboard", "--kubeconfig", str(missing)]) == 2
    assert capsys.readouterr().err == f"draquota dashboard: kubeconfig {missing}: no such file\n"


@pytest.mark.integration
def test_a_port_in_use_is_named(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", api.url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["dashboard", "--kubeconfig", str(kubeconfig), "--port", str(port)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"draquota dashboard: --host 127.0.0.1 --port {port}: Address already in use\n"
    )
