"""The dashboard's HTTP server: one page, its JSON, its stylesheet and script; GET only.

The page model is rebuilt every 2 s by one thread (`Dashboard`), whatever the number of
viewers, and every request answers the latest one. The kubeconfig and its credentials
stay in this process: the page holds only what the model holds.

Headers forbid what the page does not need: a Content-Security-Policy allowing scripts,
styles and fetches from this origin only (no inline script or style, no other origin),
no framing, no MIME sniffing, no caching. A server on a loopback address answers only
requests whose Host header names a loopback address and its port, so that a web page
elsewhere cannot read it by pointing its own DNS name at 127.0.0.1 (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import orjson

from webhook.dashboard.assets import SCRIPT, STYLE
from webhook.dashboard.page import body, document
from webhook.dashboard.sources import Source

__all__ = ["HEADERS", "Dashboard", "DashboardServer"]

INTERVAL = 2.0
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class Dashboard:
    """The latest page model of `source` and its rendering, rebuilt every `interval` s."""

    def __init__(
        self,
        source: Source,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source, self.interval, self.clock = source, interval, clock
        self._lock = threading.Lock()
        self._model: dict[str, Any] = {"loading": "starting"}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        """Read the model once; a failed read keeps the last model and says why."""
        try:
            model = self.source.model()
            model["generated"] = time.strftime("%H:%M:%S UTC", time.gmtime(self.clock()))
        except Exception as exc:  # API errors, a malformed object: shown, and tried again
            model = {**self._model, "error": f"not updated: {' '.join(str(exc).split())[:300]}"}
        with self._lock:
            self._model = model

    def page(self) -> dict[str, Any]:
        """`{"model": ..., "html": ...}`: what /api/dashboard answers."""
        with self._lock:
            model = self._model
        return {"model": model, "html": body(model)}

    def document(self) -> str:
        with self._lock:
            return document(self._model)

    def start(self) -> None:
        self.source.start()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="dashboard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.source.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


class DashboardServer(ThreadingHTTPServer):
    """Serves `dashboard` on host:port (port 0: any free port; `url` names the real one)."""

    daemon_threads = True

    def __init__(self, host: str, port: int, dashboard: Dashboard) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.dashboard = dashboard
        super().__init__((host, port), _Handler)
        self.port = int(self.server_address[1])
        name = f"[{host}]" if ":" in host else host
        self.url = f"http://{name}:{self.port}/"
        self.hosts: frozenset[str] | None = None  # any Host header
        if _loopback(host):
            names = ("127.0.0.1", "localhost", "[::1]", name)
            self.hosts = frozenset(f"{n}:{self.port}" for n in names)


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "draquota-dashboard"
    sys_version = ""

    def do_GET(self) -> None:
        hosts = self.server.hosts
        if hosts is not None and (self.headers.get("Host") or "").lower() not in hosts:
            self._send(403, "text/plain", b"unexpected Host header\n")
            return
        dashboard = self.server.dashboard
        path = urlsplit(self.path).path
        if path == "/":
            self._send(200, "text/html", dashboard.document().encode())
        elif path == "/api/dashboard":
            self._send(200, "application/json", orjson.dumps(dashboard.page()))
        elif path == "/dashboard.js":
            self._send(200, "text/javascript", SCRIPT.encode())
        elif path == "/dashboard.css":
            self._send(200, "text/css", STYLE.encode())
        elif path == "/favicon.ico":  # browsers ask for it: no icon, and no error logged
            self._send(204, "image/x-icon", b"")
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, code: int, content_type: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a page refreshing every 2 s would fill the terminal
