"""`draquota serve` for real: a subprocess on 127.0.0.1 over TLS, certificate reload, shutdown."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from certs.files import write_material
from certs.rotation import issue
from certs.serving import ServingSpec
from quota.errors import InvalidObject
from quota.settings import Settings
from tests.webhook.builders import cluster_objects, node_objects, pod, submit
from webhook.commands._common import load_settings

pytestmark = pytest.mark.integration

SPEC = ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",))
DEADLINE = 30.0


def _issue(cert_dir: Path) -> None:
    write_material(cert_dir, issue(SPEC, datetime.now(UTC)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "webhook.cli", "serve", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


class Server:
    def __init__(self, tmp: Path, *extra: str) -> None:
        self.state = tmp / "state"
        self.state.mkdir()
        (self.state / "cluster.yaml").write_text(
            yaml.safe_dump_all(cluster_objects(2) + node_objects(2))
        )
        self.certs = tmp / "certs"
        _issue(self.certs)
        self.port = _free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = tmp / "server.log"
        self.process = _serve(
            self.log,
            "--state", str(self.state), "--cert-dir", str(self.certs),
            "--host", "127.0.0.1", "--port", str(self.port), "--watch-interval", "0.2", *extra,
        )  # fmt: skip

    def context(self) -> ssl.SSLContext:
        """A client context trusting the CA currently in the cert dir."""
        return ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

    def wait_ready(self) -> None:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/readyz", verify=self.context()).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("server did not become ready")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path)
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


def test_admission_over_tls_with_a_client_trusting_the_ca(server: Server) -> None:
    with httpx.Client(base_url=server.url, verify=server.context()) as client:

        def post(path: str, document: dict) -> dict:
            answer = client.post(path, content=orjson.dumps(document))
            assert answer.status_code == 200
            return answer.json()["response"]

        response = submit(post, pod("p"))
        assert response["allowed"] is True, response
        over = submit(post, pod("q", ("one-gpu",) * 2))
        assert over["status"]["reason"] == "QuotaExceeded"
        assert 'draquota_queue_usage{cluster_queue="team-a"' in client.get("/metrics").text


def test_plain_http_is_not_served(server: Server) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)


def _http_get(conn: ssl.SSLSocket, path: str) -> bytes:
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed by the server")
        data += chunk
    return data


def _peer_serial(server: Server, context: ssl.SSLContext) -> bytes | None:
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        return conn.getpeercert(binary_form=True)


def test_certificate_reload_serves_the_new_one_without_dropping_connections(
    server: Server,
) -> None:
    old_context = server.context()
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    kept = old_context.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        assert b" 200 " in _http_get(kept, "/healthz")
        before = kept.getpeercert(binary_form=True)
        _issue(server.certs)  # a new CA and serving certificate
        new_context = server.context()
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                if _peer_serial(server, new_context) != before:
                    break
            except ssl.SSLError:
                pass  # still the old certificate, which the new CA does not trust
            assert time.monotonic() < deadline, "new certificate never served"
            time.sleep(0.1)
        assert b" 200 " in _http_get(kept, "/healthz"), "the open connection keeps working"
        with pytest.raises(ssl.SSLError):
            _peer_serial(server, old_context)
    finally:
        kept.close()


def test_sigterm_shuts_down_gracefully(server: Server) -> None:
    with httpx.Client(base_url=server.url, verify=server.context()) as client:
        assert client.get("/healthz").status_code == 200  # an idle keep-alive connection
        server.process.send_signal(signal.SIGTERM)
    # uvicorn re-raises the signal once it has shut down cleanly, hence -SIGTERM
    assert server.stop() in (0, -signal.SIGTERM)
    log = server.log.read_text()
    assert "Application shutdown complete" in log
    assert '"level":"error"' not in log


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--state", "{tmp}/state", "--cert-dir", "{tmp}/none"],
            "tls.crt and tls.key are required",
        ),
        (
            ["--kubeconfig", "{tmp}/missing", "--cert-dir", "{tmp}/certs"],
            "cannot build a Kubernetes",
        ),
        (["--state", "{tmp}/missing", "--cert-dir", "{tmp}/certs"], "no such file or directory"),
    ],
    ids=["no-certificate", "bad-kubeconfig", "missing-state-dir"],
)
def test_bad_configuration_exits_2_with_a_message(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "state").mkdir()
    _issue(tmp_path / "certs")
    log = tmp_path / "server.log"
    process = _serve(log, *(a.format(tmp=tmp_path) for a in args), "--port", str(_free_port()))
    assert process.wait(timeout=DEADLINE) == 2
    assert message in log.read_text()


def test_config_file_is_parsed_into_settings(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("placement: Warn\nreservationTTLSeconds: 30\n")
    settings = load_settings(config)
    assert (settings.placement, settings.reservation_ttl_seconds) == ("Warn", 30)
    assert load_settings(None) == Settings()


@pytest.mark.parametrize(
    "text, path",
    [("placement: [", ""), ("placement: Sometimes\n", "placement")],
    ids=["yaml", "value"],
)
def test_bad_config_file_names_the_problem(tmp_path: Path, text: str, path: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with pytest.raises(InvalidObject) as raised:
        load_settings(config)
    assert raised.value.path == path


def test_state_mode_without_cert_dir_serves_a_throwaway_localhost_certificate(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "cluster.yaml").write_text(yaml.safe_dump_all(cluster_objects(1) + node_objects(1)))
    port, log = _free_port(), tmp_path / "server.log"
    process = _serve(log, "--state", str(state), "--host", "127.0.0.1", "--port", str(port))
    try:
        deadline = time.monotonic() + DEADLINE
        ca_file = None
        while ca_file is None and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            for line in log.read_text().splitlines():
                if line.startswith("{") and "ca_file" in (entry := orjson.loads(line)):
                    ca_file = entry["ca_file"]
            time.sleep(0.1)
        assert ca_file, log.read_text()
        context = ssl.create_default_context(cafile=ca_file)
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"https://localhost:{port}/healthz", verify=context)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=DEADLINE)


def test_live_modes_require_a_cert_dir(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2
    assert "--cert-dir is required" in done.stderr


def test_metrics_auth_by_the_api_server_needs_a_live_cluster(tmp_path: Path) -> None:
    args = ["serve", "--state", str(tmp_path), "--metrics-auth", "kubernetes"]
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2
    assert "--metrics-auth=kubernetes needs a live cluster" in done.stderr


def test_shutdown_closes_idle_keep_alive_connections(server: Server) -> None:
    raw = socket.create_connection(("127.0.0.1", server.port))
    client = server.context().wrap_socket(raw, server_hostname="localhost")
    client.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    answer = b""
    while not answer.endswith(b"}"):
        answer += client.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200")
    server.process.send_signal(signal.SIGTERM)
    # The server must close an idle keep-alive connection and exit at once, even while
    # the peer (the API server's connection pool) keeps its end open, instead of
    # waiting out the whole graceful-shutdown period (10 s).
    try:
        server.process.wait(timeout=5)
        client.settimeout(1)
        try:
            closed = client.recv(4096) == b""
        except (ConnectionError, ssl.SSLError):
            closed = True
        assert closed
    finally:
        client.close()
