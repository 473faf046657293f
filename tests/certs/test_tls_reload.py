"""A live HTTPS server keeps answering through a serving-certificate renewal and a CA rotation.

The server is uvicorn with a trivial ASGI app, reloading its certificate with
`certs.reload.CertReloader` on its own event loop (the way `draquota serve` does). The client
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
from dataclasses import dataclass, field
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


def _app(reloader: CertReloader) -> Callable[..., Any]:
    async def app(
        scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] == "lifespan":
            watcher: asyncio.Task[None] | None = None
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
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


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    write_material(tmp_path, issue(SPEC, datetime.now(UTC)))
    config = uvicorn.Config(
        None,
        ssl_certfile=str(tmp_path / "tls.crt"),
        ssl_keyfile=str(tmp_path / "tls.key"),
        lifespan="on",
        ws="none",
        http="h11",
        log_level="warning",
    )
    config.load()
    reloader = CertReloader(config.ssl, tmp_path, interval=0.02)
    reloader.load()
    config.app = _app(reloader)
    config.loaded_app = config.app
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(config)
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


@dataclass
class Run:
    served: list[int] = field(default_factory=list)  # serial of each presented certificate
    failures: list[str] = field(default_factory=list)


def _requests_until(port: int, cert_dir: Path, run: Run, serial: int | None, extra: int) -> None:
    """Requests (trusting ca.crt as it is now) until `serial` is served, then `extra` more."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    after = 0
    while after < extra and len(run.served) < MAX_REQUESTS and time.monotonic() < deadline:
        try:
            cert = _request(port, (cert_dir / "ca.crt").read_bytes())
            run.served.append(cert.serial_number)
        except (OSError, ssl.SSLError, AssertionError) as exc:
            run.failures.append(f"{type(exc).__name__}: {exc}")
            continue
        if serial is None or cert.serial_number == serial:
            after += 1


def _distinct(serials: list[int]) -> list[int]:
    return [s for i, s in enumerate(serials) if i == 0 or serials[i - 1] != s]


def test_handshakes_succeed_through_renewal_and_ca_rotation(server: Server, tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    first = store.load()
    run = Run()
    _requests_until(server.port, tmp_path, run, None, extra=10)

    renewed = renew_serving(first, SPEC, datetime.now(UTC))
    store.save(renewed)
    _requests_until(server.port, tmp_path, run, renewed.serving.cert.serial_number, extra=10)

    rotated = rotate_ca(renewed, SPEC, datetime.now(UTC))
    store.save(rotated)
    _requests_until(server.port, tmp_path, run, rotated.serving.cert.serial_number, extra=10)

    assert run.failures == []
    assert _distinct(run.served) == [
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
