"""CPU a replica spends forwarding one /validate to the elected replica, against a floor.

A replica that is not elected forwards every pod create's /validate to the one that is
(`webhook.edge.forwarding`): with three replicas behind a Service, two creates in three.
That client's CPU is paid on the same machines as everything else, so it is measured
here, in one run, for:

- `forwarder`: `Forwarder.forward` itself, as a replica calls it (aiohttp since stop 36);
- `floor`: the same request over the same kind of kept-alive TLS connections, written as
  prepared bytes on asyncio streams and read back by Content-Length: the least a client
  can do (no header model, no pool);
- `httpx`: the client forwarding used before stop 36, when httpx is installed.

The elected replica is webhook_bench's allow-all floor (draquota's own ASGI layer) served
as `draquota serve` serves it, in a thread of this process; the request is the recorded
review of `tests.webhook.forwarding_lab`. Each client runs on the main thread's
event loop, `--concurrency` requests at a time, and its CPU is `time.thread_time()` of
that thread only (the server's thread is not counted).

    .venv/bin/python bench/forward_hop.py [--requests 4000] [--concurrency 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.webhook_bench import allow_all_floor_app
from certs.files import write_material
from certs.material import CA_CRT
from certs.rotation import issue
from certs.serving import ServingSpec
from tests.webhook.forwarding_lab import Election, recorded_review, serving
from webhook.edge.forwarding import FORWARDED_HEADER, Forwarder
from webhook.edge.review import parse_review

Send = Callable[[], Awaitable[None]]


def _request(host: str, port: int, body: bytes) -> bytes:
    head = (
        f"POST /validate HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"{FORWARDED_HEADER}: bench\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Floor:
    """Kept-alive TLS streams, one per concurrent request, each a prepared request written
    and an answer read by its Content-Length."""

    def __init__(self, url: str, cert_dir: Path, body: bytes, server_name: str) -> None:
        host, _, port = url.removeprefix("https://").rpartition(":")
        self.host, self.port, self.server_name = host, int(port), server_name
        self.context = ssl.create_default_context(cafile=str(cert_dir / CA_CRT))
        self.request = _request(host, self.port, body)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def send(self) -> None:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.context, server_hostname=self.server_name
            )
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.idle.append((reader, writer))

    async def aclose(self) -> None:
        for _, writer in self.idle:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for _, w in self.idle), return_exceptions=True)


async def _cpu_per_request(send: Send, requests: int, concurrency: int) -> float:
    """Microseconds of this thread's CPU per request, after one warm-up batch."""
    await asyncio.gather(*(send() for _ in range(concurrency)))
    started = time.thread_time()
    for _ in range(requests // concurrency):
        await asyncio.gather(*(send() for _ in range(concurrency)))
    return 1e6 * (time.thread_time() - started) / (requests // concurrency * concurrency)


async def _forwarder(url: str, cert_dir: Path, body: bytes, n: int, c: int) -> float:
    forwarder = Forwarder(Election(address=url), cert_dir, 5.0, "bench")
    req = parse_review(body)

    async def send() -> None:
        assert (await forwarder.forward(req, body)).outcome == "forwarded"

    try:
        return await _cpu_per_request(send, n, c)
    finally:
        await forwarder.aclose()


async def _floor(url: str, cert_dir: Path, body: bytes, n: int, c: int) -> float:
    floor = Floor(url, cert_dir, body, ServingSpec().all_dns_names()[0])
    try:
        return await _cpu_per_request(floor.send, n, c)
    finally:
        await floor.aclose()


async def _httpx(url: str, cert_dir: Path, body: bytes, n: int, c: int) -> float:
    import httpx  # a test dependency: only measured where it is installed

    context = ssl.create_default_context(cafile=str(cert_dir / CA_CRT))
    extensions = {"sni_hostname": ServingSpec().all_dns_names()[0]}
    headers = {"content-type": "application/json", FORWARDED_HEADER: "bench"}
    async with httpx.AsyncClient(verify=context, trust_env=False) as client:

        async def send() -> None:
            answer = await client.post(
                f"{url}/validate", content=body, headers=headers, extensions=extensions
            )
            assert answer.status_code == 200

        return await _cpu_per_request(send, n, c)


CLIENTS = {"floor": _floor, "forwarder": _forwarder, "httpx": _httpx}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="each client this many times")
    args = parser.parse_args(argv)
    body = recorded_review()
    results: dict[str, list[float]] = {name: [] for name in CLIENTS}
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = Path(tmp)
        write_material(cert_dir, issue(ServingSpec(), datetime.now(UTC)))
        with serving(allow_all_floor_app(), cert_dir) as server:
            for _ in range(args.rounds):
                for name, client in CLIENTS.items():
                    run = client(server.url, cert_dir, body, args.requests, args.concurrency)
                    results[name].append(asyncio.run(run))
    floor = min(results["floor"])
    print(f"{args.requests} requests of {len(body)} bytes, {args.concurrency} at a time")
    print("| client | CPU µs per request (each round) | best / floor's best |")
    print("|---|---|---|")
    for name, values in results.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {name} | {shown} | {min(values) / floor:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
