"""`draquota dashboard` on the real control plane, looked at in headless Chromium.

A queueing ClusterQueue of 4 GPUs runs two 2-GPU pods and keeps a third waiting. The
dashboard runs as the cluster admin (every ClusterQueue, kept current by informers) and as
a namespace user with the built-in `edit` role (the namespace's LocalQueues, from their
status); a real browser loads each page and the tests read what it shows on the screen,
then watch the page change by itself when the waiting pod is admitted. A screenshot of
each page is kept in the e2e work directory (and the admin's at /tmp/dashboard.png).
Skipped, with the reason, where there is no Chromium.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.browser import Browser, Tab, missing_chromium
from tests.e2e.cluster import REPO, Draquota, eventually
from tests.e2e.objects import Flavor, Scenario, gpu_job, gpu_pod, scenario

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(missing_chromium() is not None, reason=f"{missing_chromium()}"),
]

NAME = "e2e-dash"
SHOWN_TO_LEAD = Path("/tmp/dashboard.png")


class Dashboard:
    """One `draquota dashboard` process; `url` is the line it printed on start."""

    def __init__(self, workdir: Path, kubeconfig: Path, *args: str) -> None:
        self.log = workdir / f"dashboard-{kubeconfig.stem}.log"
        command = [sys.executable, "-m", "webhook.cli", "dashboard",
                   "--kubeconfig", str(kubeconfig), "--port", "0", *args]  # fmt: skip
        with self.log.open("ab") as err:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        lines: list[str] = []
        out = self.process.stdout
        assert out is not None
        reader = threading.Thread(target=lambda: lines.append(out.readline()), daemon=True)
        reader.start()
        reader.join(60)
        assert lines and lines[0].startswith("http://127.0.0.1:"), self.tail()
        self.url = lines[0].strip()

    def tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _create(s: Scenario, *objects: dict[str, Any]) -> None:
    s.cluster.kubectl("create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump_all(objects))


def _delete_pod(s: Scenario, name: str) -> None:
    s.cluster.kubectl(
        "delete", "pod", name, "-n", s.namespace, "--grace-period=0", "--force", "--wait=true"
    )


def _gated(s: Scenario) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in s.pods()
        if {"name": "draquota.io/admission"} in p["spec"].get("schedulingGates", [])
    )


def _words(tab: Tab, selector: str) -> str:
    return " ".join(tab.text(selector).split())


def _waiting_rows(tab: Tab, namespace: str = NAME) -> list[str]:
    """The rows of the page's waiting table for workloads of `namespace`, as the screen
    shows them (the session's cluster holds other scenarios' waiting workloads too)."""
    rows = tab.evaluate(
        "[...document.querySelectorAll('#waiting tr.waiting')].map(r => r.innerText)"
    )
    shown = [" ".join(str(row).split()) for row in rows]
    return [row for row in shown if f" {namespace}/" in row]


@pytest.fixture(scope="module")
def lab(draquota_cluster: Draquota) -> Scenario:
    """4 GPUs, queueing: run-0 and run-1 (2 GPUs each) admitted, wait-0 (2 GPUs) waiting."""
    s = scenario(draquota_cluster, NAME, Flavor("d", 4, {f"{NAME}-1": 8})).queueing()
    _create(s, gpu_pod("run-0", 2), gpu_pod("run-1", 2))
    eventually(lambda: not _gated(s) and len(s.pods()) == 2, timeout=60)
    _create(s, gpu_pod("wait-0", 2))
    eventually(lambda: _gated(s) == ["wait-0"], timeout=60)
    return s


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as opened:
        yield opened


@pytest.fixture(scope="module")
def admin_page(lab: Scenario, browser: Browser) -> Iterator[Tab]:
    """The page of `draquota dashboard` run with the cluster admin's kubeconfig, kept open."""
    dashboard = Dashboard(lab.installed.workdir, lab.cluster.kubeconfig)
    try:
        yield browser.open(dashboard.url)
    finally:
        dashboard.stop()


def test_an_admin_sees_the_queue_its_usage_and_the_waiting_pod(
    lab: Scenario, admin_page: Tab
) -> None:
    tab = admin_page
    tab.wait(lambda: f"ClusterQueue {NAME}" in tab.text(), "the ClusterQueue on the page")
    queue = tab.text(f'section[data-queue="{NAME}"]')
    assert "whenFull: Queue" in queue
    assert f"LocalQueue {NAME}/default (2 admitted, 1 pending)" in queue  # counted as of now
    assert _words(tab, f'section[data-queue="{NAME}"]').count("4 of 4 in use") == 1  # gpus
    # its position once the queueing controller has told the pod (a pass every second)
    rows = tab.wait(lambda: [r for r in _waiting_rows(tab) if "1 of 1" in r], "a position")
    assert len(rows) == len(_waiting_rows(tab)) == 1, rows
    assert rows[0].startswith(f"1 of 1 Pod {NAME}/wait-0 {NAME} waiting for quota:"), rows
    assert "2 more needed" in rows[0]
    assert "Every ClusterQueue" in tab.text("#scope")
    screenshot = tab.screenshot(lab.installed.workdir / "dashboard-admin.png")
    SHOWN_TO_LEAD.write_bytes(screenshot.read_bytes())
    assert tab.errors == []  # the script ran under the page's Content-Security-Policy


def test_the_page_updates_itself_when_the_waiting_pod_is_admitted(
    lab: Scenario, admin_page: Tab
) -> None:
    tab = admin_page
    assert _waiting_rows(tab), "the waiting pod is on the page before"
    _delete_pod(lab, "run-0")
    eventually(lambda: _gated(lab) == [], timeout=60)
    tab.wait(lambda: not _waiting_rows(tab), "the waiting pod gone")
    assert f"LocalQueue {NAME}/default (2 admitted, 0 pending)" in tab.text()
    assert "4 of 4 in use" in _words(tab, f'section[data-queue="{NAME}"]')
    assert "updated" in tab.text("#updated") and "not since" not in tab.text("#updated")
    assert tab.errors == []


def test_a_namespace_user_sees_their_local_queue_and_their_waiting_job(
    lab: Scenario, browser: Browser
) -> None:
    kubeconfig = lab.user("dash-viewer", "edit")
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    _create(lab, gpu_job("train", gpus=1))  # the queue is full: the Job waits, suspended
    dashboard = Dashboard(lab.installed.workdir, kubeconfig, "-n", lab.namespace)
    try:
        tab = browser.open(dashboard.url)
        scope = tab.wait(lambda: tab.text("#scope"), "the page's scope")
        assert f"Namespace {lab.namespace}" in scope
        assert "cannot list" in scope and "at cluster scope: 403 Forbidden" in scope
        tab.wait(lambda: f"LocalQueue {lab.namespace}/default" in tab.text(), "the LocalQueue")
        # the LocalQueue's status, which draquota's replicas bring up to date every few seconds
        tab.wait(
            lambda: "4 of 4 in use" in _words(tab, f'section[data-queue="{NAME}"]'),
            "the ClusterQueue's usage from the LocalQueue's status",
        )
        counts = f"LocalQueue {lab.namespace}/default (2 admitted, 1 pending)"
        tab.wait(lambda: counts in tab.text(), "the LocalQueue's counts: wait-0 ran, train waits")
        rows = tab.wait(lambda: [r for r in _waiting_rows(tab) if "1 of 1" in r], "the Job")
        assert rows[0].startswith(f"1 of 1 Job {lab.namespace}/train {NAME} waiting for quota:")
        tab.screenshot(lab.installed.workdir / "dashboard-namespace.png")
        with httpx.Client() as http:  # nothing of the kubeconfig reaches the page
            for path in ("/", "/api/dashboard", "/dashboard.js"):
                assert token not in http.get(dashboard.url + path.lstrip("/")).text
        assert tab.errors == []
    finally:
        dashboard.stop()
