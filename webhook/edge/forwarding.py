"""Forwarding `/validate` to the elected replica, the only one that admits what holds quota.

One replica, the holder of the Lease `draquota-queueing`, decides every admission that
holds quota, in memory (`webhook.ledger.cluster`). Every other replica forwards it the API
server's `/validate` requests that would hold quota, at the address it advertises on the
Lease, and answers with what it answered: pod creates at once (`Forwarder.sends`), anything
else once its own decision finds it would hold quota (`webhook.ledger.elected.HeldElsewhere`).
Everything else, `/mutate` included, each replica answers itself, so that what draquota
does not enforce never waits for the elected replica.

Invariants:
- fail closed: every failure (no holder known, holder unreachable, a timeout, TLS, an
  answer that is not a 200 AdmissionReview response for the same uid) is answered with a
  denial of the original request (reason `AdmittingReplicaUnavailable`), never an allow;
- the body goes out byte for byte as the API server sent it, and the answer comes back as
  the elected replica wrote it: the forwarding replica parses the request only to deny it
  or to check that the answer is for it;
- a request is forwarded at most once: it carries `FORWARDED_HEADER`, and a replica that
  receives it while not elected refuses what would hold quota rather than forwarding it
  on (`webhook.edge.app`);
- the elected replica is verified against the cert dir's `ca.crt` under the Service's
  name, the first DNS name of this replica's own `tls.crt` (all replicas serve the same
  certificate; sent as SNI, so that connecting to a pod IP still verifies it), or, for a
  certificate without DNS names, under the host of the advertised address. This replica
  presents its `tls.crt` as its client certificate (it carries extendedKeyUsage
  clientAuth), which an elected replica serving with `--client-ca` requires;
- a certificate rotation is followed: the client is rebuilt when any of the three files
  changes (a mounted Secret is swapped through a symlink: the files' identity changes).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp.connector import NEEDS_CLEANUP_CLOSED
from cryptography import x509

from certs.material import CA_CRT, TLS_CRT, TLS_KEY
from webhook.edge.asgi import Answer, json_answer
from webhook.edge.review import AdmissionRequest, Outcome, review_response
from webhook.edge.reviewtypes import ADMISSION_API_VERSION, ADMISSION_KIND
from webhook.edge.serve import KEEP_ALIVE_SECONDS

__all__ = [
    "FORWARDED_HEADER",
    "HOP_SECONDS",
    "UNAVAILABLE",
    "Elected",
    "Forwarded",
    "Forwarder",
    "advertise_address",
    "denial",
]

FORWARDED_HEADER = "X-Draquota-Forwarded"
UNAVAILABLE = "AdmittingReplicaUnavailable"
# Beyond the admission deadline, how long a forwarding replica waits for the elected one:
# that replica answers by its own deadline, and its answer says more than a timeout here.
HOP_SECONDS = 0.5
# below the elected replica's own keep-alive, so that this side always closes first
KEEPALIVE_SECONDS = KEEP_ALIVE_SECONDS - 10
WILDCARDS = frozenset({"", "0.0.0.0", "::"})

log = logging.getLogger("draquota.forwarding")


class Elected(Protocol):
    """Which replica admits (`webhook.kube.lease.LeaseElector`)."""

    def leading(self) -> bool: ...

    def observed(self) -> bool: ...

    def holder_address(self) -> str: ...


@dataclass(frozen=True)
class Forwarded:
    """What to send back, and how forwarding went: `forwarded` or `unavailable`."""

    answer: Answer
    outcome: str


@dataclass(frozen=True)
class _Client:
    """An HTTP client over one version of the certificate files."""

    http: aiohttp.ClientSession
    server_name: str  # what the elected replica's certificate is checked for ("": its host)
    stamp: tuple[tuple[int, int, int], ...]


def advertise_address(explicit: str | None, host: str, port: int, pod_ip: str) -> str:
    """Where other replicas reach this one: `explicit` (an https URL), else the pod's IP,
    else `host` unless it is a wildcard; "" when none is known. ValueError names a bad
    `explicit` URL."""
    if explicit is not None:
        if not _is_https_origin(explicit):
            raise ValueError(
                f"--advertise-address {explicit!r}: must be https://HOST[:PORT], "
                "where the other replicas reach this one"
            )
        return explicit.rstrip("/")
    where = pod_ip or ("" if host in WILDCARDS else host)
    return f"https://{_bracketed(where)}:{port}" if where else ""


def _is_https_origin(url: str) -> bool:
    parts = urlsplit(url)
    try:
        port = parts.port  # ValueError when out of range or not a number
    except ValueError:
        return False
    plain = not (parts.query or parts.fragment or parts.username or parts.path not in ("", "/"))
    return parts.scheme == "https" and bool(parts.hostname) and port != 0 and plain


def _bracketed(host: str) -> str:
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host  # a DNS name


def denial(req: AdmissionRequest, why: str) -> Answer:
    """A denial of `req` that says `why` and to submit again."""
    outcome = Outcome(False, 403, UNAVAILABLE, f"{req.ref}: {why}: submit again")
    return json_answer(200, review_response(req.uid, outcome, mutating=False))


class Forwarder:
    """Forwards `/validate` bodies to the elected replica over TLS, presenting this
    replica's certificate and keeping the connection alive; waits for an answer up to the
    admission `deadline` plus `HOP_SECONDS`; `identity` is what `FORWARDED_HEADER` says."""

    def __init__(self, elected: Elected, cert_dir: Path, deadline: float, identity: str) -> None:
        self.elected = elected
        self.cert_dir = Path(cert_dir)
        self.timeout = deadline + HOP_SECONDS
        self.identity = identity or "unknown"
        self._client: _Client | None = None
        self._closing: set[asyncio.Task[None]] = set()

    def leading(self) -> bool:
        """Whether this replica is the elected one (and decides itself)."""
        return self.elected.leading()

    def ready(self) -> tuple[bool, str]:
        """Whether this replica knows who is elected (it read the Lease once); else why not.
        Only a replica starting is unready for this: later, while no replica is elected,
        it still answers everything that holds no quota itself."""
        if self.elected.leading() or self.elected.observed():
            return True, ""
        return False, "the Lease that elects the replica that admits was not read yet"

    def sends(self, req: AdmissionRequest, forwarded: bool) -> bool:
        """Whether to send `req` to the elected replica before deciding it here: a pod
        created (holding quota whenever admitted), unless this replica is elected or the
        request was forwarded already."""
        if forwarded or self.elected.leading():
            return False
        return (
            req.kind == "Pod"
            and req.operation == "CREATE"
            and not req.sub_resource
            and not req.dry_run
        )

    async def forward(self, req: AdmissionRequest, body: bytes) -> Forwarded:
        """The elected replica's answer to `body` (the review `req` was parsed from, sent as
        it came), or a denial saying why there is none."""
        address = self.elected.holder_address()
        if not address:
            return self._unavailable(req, "no replica is elected to admit yet", "")
        try:
            client = self._current()
        except (OSError, ssl.SSLError, ValueError) as exc:
            return self._unavailable(req, "this replica's certificates do not load", repr(exc))
        try:
            status, content = await _post(client, f"{address}/validate", body, self.identity)
        except TimeoutError as exc:
            why = f"the admitting replica did not answer within {self.timeout:g}s"
            return self._unavailable(req, why, f"{address}: {exc!r}")
        except (aiohttp.ClientError, OSError) as exc:
            return self._unavailable(req, "the admitting replica is unreachable", repr(exc))
        if status != 200:
            why = f"the admitting replica answered HTTP {status}"
            return self._unavailable(req, why, _text(content))
        if not _answers(content, req.uid):
            why = "the admitting replica's answer is not an AdmissionReview for this request"
            return self._unavailable(req, why, _text(content))
        return Forwarded((200, content), "forwarded")

    async def aclose(self) -> None:
        """Close every connection (at shutdown)."""
        closing = list(self._closing)
        for task in closing:
            task.cancel()  # each closes its client as it ends
        await asyncio.gather(*closing, return_exceptions=True)
        if self._client is not None:
            await self._client.http.close()
            self._client = None

    def _unavailable(self, req: AdmissionRequest, why: str, detail: str) -> Forwarded:
        log.warning(
            "forwarding failed",
            extra={"why": why, "detail": detail, "holder": self.elected.holder_address()},
        )
        message = f"draquota's admitting replica is unavailable ({why})"
        return Forwarded(denial(req, message), "unavailable")

    def _current(self) -> _Client:
        stamp = _stamp(self.cert_dir)
        client = self._client
        if client is not None and client.stamp == stamp:
            return client
        self._client = _build(self.cert_dir, self.timeout, stamp)
        if client is not None:
            self._retire(client.http)
        return self._client

    def _retire(self, http: aiohttp.ClientSession) -> None:
        """Close a client of older certificates once its requests in flight are answered."""

        async def close_later() -> None:
            try:
                await asyncio.sleep(self.timeout)
            finally:
                await http.close()

        task = asyncio.get_running_loop().create_task(close_later())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def _stamp(cert_dir: Path) -> tuple[tuple[int, int, int], ...]:
    stamps = []
    for name in (CA_CRT, TLS_CRT, TLS_KEY):
        info = os.stat(cert_dir / name)  # follows the symlink a mounted Secret swaps
        stamps.append((info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(stamps)


def _build(cert_dir: Path, timeout: float, stamp: tuple[tuple[int, int, int], ...]) -> _Client:
    context = ssl.create_default_context(cafile=str(cert_dir / CA_CRT))
    context.load_cert_chain(certfile=str(cert_dir / TLS_CRT), keyfile=str(cert_dir / TLS_KEY))
    certificate = x509.load_pem_x509_certificate((cert_dir / TLS_CRT).read_bytes())
    http = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            ssl=context,
            limit=100,
            # idle connections end here before the elected replica ends them: a POST on
            # a connection the server has just closed fails, and is not retried (it is
            # not idempotent)
            keepalive_timeout=KEEPALIVE_SECONDS,
            # a connection dropped mid-request (a timeout) is aborted at close, not left
            # half shut down when the loop ends: needed by the Pythons whose TLS
            # transports leak otherwise (before 3.12.8), a warning on the others
            enable_cleanup_closed=NEEDS_CLEANUP_CLOSED,
        ),
        timeout=aiohttp.ClientTimeout(total=timeout),
        trust_env=False,  # never through a proxy from the environment
    )
    return _Client(http, _service_name(certificate), stamp)


async def _post(client: _Client, url: str, body: bytes, identity: str) -> tuple[int, bytes]:
    """The status and body of the answer to `body` POSTed to `url`, the elected replica's
    certificate checked for `client.server_name` (sent as SNI) when there is one."""
    headers = {"content-type": "application/json", FORWARDED_HEADER: identity}
    server_name = client.server_name or None
    async with client.http.post(
        url, data=body, headers=headers, server_hostname=server_name
    ) as response:
        return response.status, await response.read()


def _text(content: bytes) -> str:
    return content[:200].decode("utf-8", errors="replace")


def _service_name(certificate: x509.Certificate) -> str:
    """The first DNS name of the certificate ("" when it has none)."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return ""
    names = san.value.get_values_for_type(x509.DNSName)
    return names[0] if names else ""


def _answers(answer: bytes, uid: str) -> bool:
    """Whether `answer` is an AdmissionReview response to the request with this `uid`."""
    try:
        review = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return False
    response = review.get("response") if isinstance(review, Mapping) else None
    return (
        bool(uid)
        and isinstance(response, Mapping)
        and review.get("apiVersion") == ADMISSION_API_VERSION
        and review.get("kind") == ADMISSION_KIND
        and isinstance(response.get("allowed"), bool)
        and response.get("uid") == uid
    )
