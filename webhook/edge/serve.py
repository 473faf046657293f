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
import logging
import socket
import ssl
from pathlib import Path
from typing import Any

import uvicorn

from certs.material import CA_CRT
from certs.reload import CertReloader

__all__ = ["WebhookServer", "server_context", "webhook_server"]

log = logging.getLogger("draquota.certs")

KEEP_ALIVE_SECONDS = 30  # how long an idle connection of the API server (or a replica) stays


def server_context(
    cert_dir: Path, reload_interval: float = 2.0, client_ca: Path | None = None
) -> tuple[ssl.SSLContext, CertReloader]:
    """A TLS 1.2+ server context loaded from `cert_dir/tls.crt` and `tls.key`, and its reloader.

    With `client_ca`, a client certificate is asked for and, when presented, must be
    signed by that CA or by the cert dir's `ca.crt` (the handshake fails otherwise): the
    API server presents the first, another replica forwarding an admission its own serving
    certificate (`webhook.edge.forwarding`). It stays optional at the TLS level so that kubelet
    probes (which present none) still reach /healthz and /readyz; the app refuses admission
    requests without one (`create_app(require_client_cert=)`). Without `client_ca` no
    client certificate is ever asked for.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_OPTIONAL
        reloader: CertReloader = _ReplicaTrustingReloader(context, cert_dir, reload_interval)
    else:
        reloader = CertReloader(context, cert_dir, interval=reload_interval)
    reloader.load()
    return context, reloader


class _ReplicaTrustingReloader(CertReloader):
    """Also trusts the cert dir's `ca.crt` for client certificates, each new one as it
    appears (a CA rotation): a CA once trusted stays trusted until the process restarts,
    as OpenSSL cannot remove a CA from a context's store."""

    def __init__(self, context: ssl.SSLContext, cert_dir: Path, interval: float) -> None:
        super().__init__(context, cert_dir, interval=interval)
        self._trusted = b""

    def check(self) -> bool:
        changed = super().check()
        bundle = self.cert_dir / CA_CRT
        try:
            content = bundle.read_bytes() if bundle.is_file() else b""
            if content and content != self._trusted:
                self.context.load_verify_locations(cadata=content.decode("ascii"))
                self._trusted = content
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("cannot trust %s for forwarding replicas: %s", bundle, exc)
        return changed


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


class _ClientCertificate:
    """ASGI middleware for one connection: tells the app whether the TLS peer presented a
    client certificate that the server context verified (ASGI's `tls` extension)."""

    def __init__(self, app: Any, subject: str | None) -> None:
        self.app = app
        self.subject = subject

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            extensions = {**scope.get("extensions", {}), "tls": {"client_cert_name": self.subject}}
            scope = {**scope, "extensions": extensions}
        await self.app(scope, receive, send)


def _peer_aware(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    class PeerAwareProtocol(protocol):  # type: ignore[misc, valid-type]
        app: Any  # uvicorn's protocol sets it: the ASGI app of this connection

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            peer = transport.get_extra_info("peercert")
            subject = None
            if peer:
                names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
                subject = names[0] if names else ""
            self.app = _ClientCertificate(self.app, subject)

    return PeerAwareProtocol


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
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    config.load()
    config.http_protocol_class = _peer_aware(config.http_protocol_class)
    config.ssl = context  # our context, so that the reloader can swap the chain in place
    return WebhookServer(config, reloader)
