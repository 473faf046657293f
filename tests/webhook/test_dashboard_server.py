"""The dashboard's HTTP server (webhook.dashboard.server) on 127.0.0.1, and the page in a real
browser (headless Chromium; those tests are skipped, with the reason, without it)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.browser import Browser, missing_chromium
from tests.webhook.dashboard_lab import admin_view, lab_objects
from webhook.dashboard.page import body
from webhook.dashboard.server import Dashboard, DashboardServer
from webhook.kube.client import TransportError

pytestmark = pytest.mark.integration

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HOSTILE = "<img src=x onerror=\"document.title='owned'\"><script>document.title='owned'</script>"
browser_only = pytest.mark.skipif(missing_chromium() is not None, reason=f"{missing_chromium()}")


class _Source:
    """A source whose model the test sets; `failure` is raised instead when set."""

    scope = "Every ClusterQueue"

    def __init__(self) -> None:
        cards, rows = admin_view(lab_objects())
        self.now: dict[str, Any] = {"scope": self.scope, "queues": cards, "waiting": rows}
        self.failure: Exception | None = None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def model(self) -> dict[str, Any]:
        if self.failure is not None:
            raise self.failure
        return copy.deepcopy(self.now)


@pytest.fixture
def source() -> _Source:
    return _Source()


@pytest.fixture
def server(source: _Source) -> Iterator[DashboardServer]:
    served = DashboardServer("127.0.0.1", 0, Dashboard(source, interval=0.2))
    served.dashboard.start()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    served.server_close()
    served.dashboard.stop()
    thread.join(5)


def test_port_0_takes_a_free_port_and_the_url_names_it(server: DashboardServer) -> None:
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}/"


def test_the_page_is_served_with_a_strict_content_security_policy(server: DashboardServer) -> None:
    answer = httpx.get(server.url)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert 'ClusterQueue <span class="name">research</span>' in answer.text
    for path, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        asset = httpx.get(server.url + path)
        assert (asset.status_code, asset.headers["content-type"]) == (200, f"{kind}; charset=utf-8")
        assert asset.headers["content-security-policy"] == CSP


def test_the_json_endpoint_holds_the_model_and_the_fragment_the_page_shows(
    server: DashboardServer, source: _Source
) -> None:
    page = httpx.get(server.url + "api/dashboard").json()
    assert page["model"]["queues"] == source.now["queues"]
    assert page["model"]["generated"].endswith(" UTC")
    assert page["html"] == body(page["model"])


def test_a_page_of_another_site_cannot_read_it_through_its_own_dns_name(
    server: DashboardServer,
) -> None:
    # DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its own Host
    refused = httpx.get(
        server.url + "api/dashboard", headers={"Host": f"evil.example:{server.port}"}
    )
    assert (refused.status_code, refused.text) == (403, "unexpected Host header\n")
    for host in ("localhost", "127.0.0.1"):
        answer = httpx.get(server.url, headers={"Host": f"{host}:{server.port}"})
        assert answer.status_code == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_it_is_read_only(server: DashboardServer, method: str) -> None:
    assert httpx.request(method, server.url + "api/dashboard").status_code == 501


def test_an_unknown_path_is_not_found(server: DashboardServer) -> None:
    assert httpx.get(server.url + "kubeconfig").status_code == 404


def test_a_failed_refresh_keeps_the_last_page_and_says_why(source: _Source) -> None:
    dashboard = Dashboard(source)
    dashboard.refresh()
    source.failure = TransportError("GET /api/v1/pods: connection refused")
    dashboard.refresh()
    model = dashboard.page()["model"]
    assert model["queues"] == source.now["queues"]
    assert model["error"] == "not updated: GET /api/v1/pods: connection refused"
    source.failure = None
    dashboard.refresh()
    assert "error" not in dashboard.page()["model"]


@browser_only
def test_in_a_browser_names_are_text_and_the_page_refreshes_itself(
    server: DashboardServer, source: _Source
) -> None:
    for row in source.now["waiting"]:
        row["reason"] = HOSTILE
    server.dashboard.refresh()
    with Browser() as browser:
        tab = browser.open(server.url)
        assert tab.text("#waiting").count(HOSTILE) == 2
        assert tab.evaluate("document.querySelectorAll('main img, main script').length") == 0
        assert tab.evaluate("document.title") == "draquota dashboard"
        source.now["waiting"] = []  # both admitted: the open page shows it by itself
        tab.wait(lambda: "Nothing waits." in tab.text("#waiting"), "the page refreshed", 10)
        assert tab.evaluate("document.title") == "draquota dashboard"
        assert tab.errors == []  # nothing the Content-Security-Policy had to block


@browser_only
def test_in_a_browser_a_dashboard_that_stopped_answering_says_so(
    server: DashboardServer,
) -> None:
    with Browser() as browser:
        tab = browser.open(server.url)
        server.shutdown()
        server.server_close()
        tab.wait(lambda: "not since" in tab.text("#updated"), "the stale notice", 10)
        assert tab.evaluate("document.getElementById('updated').className") == "stale"
