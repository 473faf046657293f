"""bench/haproxy.py: the benchmarks' round-robin proxy, HAProxy in a process of its own, in
front of two real TCP servers on 127.0.0.1."""

from __future__ import annotations

import importlib
import socket
import socketserver
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import free_port

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module():  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("haproxy")


class _Named(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(self.server.name)  # type: ignore[attr-defined]


@pytest.fixture
def backends() -> Iterator[dict[int, bytes]]:
    servers = []
    for name in (b"one", b"two"):
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Named)
        server.name = name  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield {s.server_address[1]: s.name for s in servers}  # type: ignore[attr-defined]
    for server in servers:
        server.shutdown()
        server.server_close()


def _answer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        return conn.recv(16)


@pytest.mark.skipif(
    not _module().available(), reason="needs Debian's haproxy (.ci/run installs it)"
)
def test_each_new_connection_goes_to_the_next_backend_and_removal_restarts(
    backends: dict[int, bytes], tmp_path: Path
) -> None:
    proxy = _module().HAProxy(free_port(), list(backends), tmp_path).start()
    try:
        first = proxy.process.pid
        assert sorted(_answer(proxy.port) for _ in range(4)) == [b"one", b"one", b"two", b"two"]
        proxy.remove(next(iter(backends)))
        assert proxy.process.pid != first  # restarted: open connections were cut
        assert {_answer(proxy.port) for _ in range(3)} == {b"two"}
    finally:
        proxy.stop()
    assert proxy.process is None
    with pytest.raises(OSError):
        _answer(proxy.port)
