"""A round-robin TCP proxy in a process of its own (HAProxy), for benchmarks.

tests/e2e/cluster.RoundRobinProxy relays in a Python thread: right for the e2e tier, which
cuts and hangs connections at will, but in a benchmark it runs inside the benchmark's own
process, beside its clients. Every webhook call and every watch event of draquota then costs
CPU nobody counts and holds the GIL the clients need, and the allow-all pair it is compared
with is called directly. A Service's routing is done by the kernel; HAProxy in TCP mode is
the nearest on this machine (`apt-get install haproxy`), its CPU counted like the others'.

`HAProxy` takes over the port of a RoundRobinProxy and offers the calls the benchmark makes of
one: `add`, `remove`, `drop_connections`, `stop`. A change of backends restarts it, which cuts
the open connections, as RoundRobinProxy's `drop_connections` does.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["HAProxy", "available"]

_DEFAULTS = """\
global
    maxconn 4096
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
"""


def available() -> bool:
    return shutil.which("haproxy") is not None


def _config(port: int, backends: Sequence[int]) -> str:
    servers = "".join(f"    server r{p} 127.0.0.1:{p}\n" for p in backends)
    return (
        _DEFAULTS
        + f"frontend in\n    bind 127.0.0.1:{port}\n    default_backend out\n"
        + f"backend out\n    balance roundrobin\n{servers}"
    )


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class HAProxy:
    """HAProxy on 127.0.0.1:`port`, handing each new connection to the next backend."""

    def __init__(self, port: int, backends: Sequence[int], workdir: Path) -> None:
        self.port = port
        self.backends = list(backends)
        self._config = workdir / f"haproxy-{port}.cfg"
        self._log = workdir / f"haproxy-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> HAProxy:
        self._config.write_text(_config(self.port, self.backends), encoding="utf-8")
        with self._log.open("ab") as log:
            self.process = subprocess.Popen(
                ["haproxy", "-db", "-f", str(self._config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"haproxy did not listen: {self._log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def _restart(self) -> None:
        self.stop()
        self.start()

    def add(self, port: int) -> None:
        if port not in self.backends:
            self.backends.append(port)
            self._restart()

    def remove(self, port: int) -> None:
        if port in self.backends:
            self.backends.remove(port)
            self._restart()

    def drop_connections(self) -> None:
        self._restart()
