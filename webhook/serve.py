"""Serving the app over TLS with uvicorn: our own SSLContext, reloaded in place.

The SSLContext is built here (TLS 1.2+) and handed to uvicorn; `CertReloader`
calls `load_cert_chain` on that live context when the files change, so new
handshakes get the new certificate and open connections are never dropped.
Shutdown stops accepting, aborts idle keep-alive connections at once (a TLS
close would wait for the peer), and lets in-flight requests finish within
`graceful_seconds`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path
from typing import Any

import uvicorn

from certs.reload import CertReloader

__all__ = ["WebhookServer", "server_context", "webhook_server"]


def server_context(
    cert_dir: Path, reload_interval: float = 2.0
) -> tuple[ssl.SSLContext, CertReloader]:
    """A TLS 1.2+ server context loaded from `cert_dir/tls.crt` and `tls.key`, and its reloader."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    reloader = CertReloader(context, cert_dir, interval=reload_interval)
    reloader.load()
    return context, reloader


class WebhookServer(uvicorn.Server):
    """uvicorn.Server that watches the certificate on its own event loop while it serves."""

    def __init__(self, config: uvicorn.Config, reloader: CertReloader) -> None:
        super().__init__(config)
        self.reloader = reloader
        self._watch: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._watch = asyncio.create_task(self.reloader.watch())
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for server in self.servers:
            server.close()
        self._abort_idle_connections()
        await super().shutdown(sockets)

    def _abort_idle_connections(self) -> None:
        # A TLS close waits for the peer's close_notify, which an idle keep-alive
        # client (the API server's connection pool) never sends: without this,
        # shutdown would sit out the whole graceful timeout.
        for connection in list(self.server_state.connections):
            cycle = getattr(connection, "cycle", None)
            if cycle is None or getattr(cycle, "response_complete", False):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()


def webhook_server(
    app: Any,
    host: str,
    port: int,
    context: ssl.SSLContext,
    reloader: CertReloader,
    graceful_seconds: float = 10.0,
) -> WebhookServer:
    """A server for `app` on host:port over `context` (call `.run()`, or `.serve()` in a loop)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        server_header=False,
        lifespan="on",
        timeout_graceful_shutdown=int(graceful_seconds),
        timeout_keep_alive=30,
    )
    config.load()
    config.ssl = context  # our context, so that the reloader can swap the chain in place
    return WebhookServer(config, reloader)
