"""What tests of forwarding share: recorded reviews, an election to set, a replica on TLS.

Reviews are requests the real v1.36.2 API server sent (tests/manifests/fixtures/admission,
recorded by `tests.manifests.record_reviews`), wrapped in their AdmissionReview envelope
without re-encoding: their bytes are the recording's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from webhook.edge.serve import server_context, webhook_server

ADMISSION = Path(__file__).resolve().parents[1] / "manifests" / "fixtures" / "admission"
POD = "pod-create-with-claim-template"  # Pod team-a/claimed, one GPU claim from a template
POD_REF = "Pod team-a/claimed"


def recorded_review(name: str = POD) -> bytes:
    """The AdmissionReview the API server sent for fixture `name`, as bytes."""
    request = (ADMISSION / f"{name}.json").read_bytes()
    return b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":%s}' % (request)


def uid_of(body: bytes) -> str:
    return str(orjson.loads(body)["request"]["uid"])


@dataclass
class Election:
    """Which replica admits, as a test sets it (`webhook.edge.forwarding.Elected`)."""

    lead: bool = False
    address: str = ""
    seen: bool = True  # the Lease was read

    def leading(self) -> bool:
        return self.lead

    def observed(self) -> bool:
        return self.seen

    def holder_address(self) -> str:
        return self.address


@dataclass(frozen=True)
class Running:
    url: str
    reloader: Any  # the server's CertReloader


@contextmanager
def serving(app: Any, cert_dir: Path, client_ca: Path | None = None) -> Iterator[Running]:
    """`app` served as `draquota serve` serves it (`webhook.edge.serve`), on 127.0.0.1 over TLS
    with the certificate of `cert_dir`, in a thread of its own, until the block ends."""
    context, reloader = server_context(cert_dir, reload_interval=3600, client_ca=client_ca)
    server = webhook_server(app, "127.0.0.1", 0, context, reloader, graceful_seconds=1)
    # IPPROTO_TCP, as uvicorn's own sockets: asyncio sets TCP_NODELAY only on those, and
    # without it every answer would wait for a delayed ACK (40 ms on Linux).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        assert thread.is_alive(), "the server thread ended before it started serving"
        time.sleep(0.01)
    assert server.started
    try:
        yield Running(f"https://127.0.0.1:{sock.getsockname()[1]}", reloader)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
