"""A live HTTPS server keeps answering through a serving-certificate renewal and a CA rotation.

Two servers: `draquota serve`'s TLS stack (`webhook.edge.serve.server_context` and
`webhook_server`) and plain uvicorn wired by hand, both with a trivial ASGI app and
`certs.reload.CertReloader` polling on the server's event loop. The client
trusts the CA bundle read from ca.crt before every request, as the API server trusts the
injected caBundle, and opens a new connection each time so every request is a handshake.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography import x509

from certs.files import DirectoryStore, write_material
from certs.reload import CertReloader
from certs.rotation import issue, renew_serving, rotate_ca
from certs.serving import ServingSpec

pytestmark = pytest.mark.integration

SPEC = ServingSpec(ips=("127.0.0.1",), days=30, ca_days=365)
SERVICE_NAME = "draquota.draquota-system.svc"
MAX_REQUESTS = 600
DEADLINE_SECONDS = 60.0


def _app(reloader: CertReloader | None) -> Callable[..., Any]:
    async def app(
        scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] == "lifespan":
            watcher: asyncio.Task[None] | None = None
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    if reloader is not None:
                        watcher = asyncio.create_task(reloader.watch())
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if watcher is not None:
                        watcher.cancel()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


@dataclass
class Server:
    port: int
    reloader: CertReloader


def _uvicorn(cert_dir: Path) -> tuple[uvicorn.Server, CertReloader]:
    config = uvicorn.Config(
        None,
        ssl_certfile=str(cert_dir / "tls.crt"),
        ssl_keyfile=str(cert_dir / "tls.key"),
        lifespan="on",
        ws="none",
        http="h11",
        log_level="warning",
    )
    config.load()
    reloader = CertReloader(config.ssl, cert_dir, interval=0.02)
    reloader.load()
    config.app = config.loaded_app = _app(reloader)
    return uvicorn.Server(config), reloader


def _draquota_serve(cert_dir: Path) -> tuple[uvicorn.Server, CertReloader]:
    from webhook.edge.serve import server_context, webhook_server

    context, reloader = server_context(cert_dir, reload_interval=0.02)
    return webhook_server(_app(None), "127.0.0.1", 0, context, reloader), reloader


@pytest.fixture(params=[_draquota_serve, _uvicorn], ids=["draquota-serve", "uvicorn"])
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    write_material(tmp_path, issue(SPEC, datetime.now(UTC)))
    uv, reloader = request.param(tmp_path)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert uv.started
    try:
        yield Server(sock.getsockname()[1], reloader)
    finally:
        uv.should_exit = True
        thread.join(10)
        sock.close()


def _request(port: int, ca_pem: bytes) -> x509.Certificate:
    """One HTTPS request on a new connection; the certificate the server presented."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=SERVICE_NAME) as tls,
    ):
        tls.sendall(b"GET / HTTP/1.1\r\nHost: draquota\r\nConnection: close\r\n\r\n")
        response = b""
        while chunk := tls.recv(4096):
            response += chunk
        der = tls.getpeercert(binary_form=True)
    assert response.startswith(b"HTTP/1.1 200"), response[:100]
    return x509.load_der_x509_certificate(der)


class Client:
    """Requests in a background thread, trusting ca.crt as it is at each request, until stopped
    (at most MAX_REQUESTS, at most DEADLINE_SECONDS)."""

    def __init__(self, port: int, cert_dir: Path) -> None:
        self.port = port
        self.cert_dir = cert_dir
        self.served: list[int] = []  # serial of each presented certificate, in order
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not self._stop.is_set() and len(self.served) + len(self.failures) < MAX_REQUESTS:
            if time.monotonic() > deadline:
                break
            try:
                cert = _request(self.port, (self.cert_dir / "ca.crt").read_bytes())
            except (OSError, ssl.SSLError, AssertionError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            self.served.append(cert.serial_number)

    def wait_for(self, serial: int, then: int = 10) -> None:
        """Until `serial` has been served `then` times (or the client gave up)."""
        while self._thread.is_alive() and self.served.count(serial) < then:
            time.sleep(0.005)

    def __enter__(self) -> Client:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_SECONDS)


def _distinct(serials: list[int]) -> list[int]:
    return [s for i, s in enumerate(serials) if i == 0 or serials[i - 1] != s]


def test_handshakes_succeed_through_renewal_and_ca_rotation(server: Server, tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    first = store.load()
    renewed = renew_serving(first, SPEC, datetime.now(UTC))
    rotated = rotate_ca(renewed, SPEC, datetime.now(UTC))
    with Client(server.port, tmp_path) as client:
        client.wait_for(first.serving.cert.serial_number)
        store.save(renewed)  # while the client keeps connecting
        client.wait_for(renewed.serving.cert.serial_number)
        store.save(rotated)  # bundle (old + new CA) first, then the key and certificate
        client.wait_for(rotated.serving.cert.serial_number)

    assert client.failures == []
    assert _distinct(client.served) == [
        first.serving.cert.serial_number,
        renewed.serving.cert.serial_number,
        rotated.serving.cert.serial_number,
    ]
    assert server.reloader.reloads >= 3
    # Only the published bundle made that work: the old CA alone rejects the new certificate.
    with pytest.raises(ssl.SSLCertVerificationError):
        _request(server.port, first.bundle_pem())


def test_a_half_written_rotation_keeps_the_current_certificate(
    server: Server, tmp_path: Path
) -> None:
    first = DirectoryStore(tmp_path).load()
    other = issue(SPEC, datetime.now(UTC))
    # A key that does not belong to the certificate on disk: the reload fails and is retried.
    (tmp_path / "tls.key").write_bytes(other.serving.key.reveal())
    deadline = time.monotonic() + 10
    while not server.reloader.last_error and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.reloader.last_error
    assert _request(server.port, first.bundle_pem()).serial_number == (
        first.serving.cert.serial_number
    )
    (tmp_path / "tls.crt").write_bytes(other.serving.cert_pem())
    combined = first.bundle_pem() + other.bundle_pem()
    served = []
    deadline = time.monotonic() + 10
    while other.serving.cert.serial_number not in served and time.monotonic() < deadline:
        served.append(_request(server.port, combined).serial_number)
        time.sleep(0.02)
    assert set(served) <= {first.serving.cert.serial_number, other.serving.cert.serial_number}
    assert served[-1] == other.serving.cert.serial_number
    assert server.reloader.last_error == ""
