"""Hostile-load benchmark (issue 10): ordinary admissions while hostile requests are in flight.

Starts `draquota serve --state` on 127.0.0.1 (the cluster of bench/webhook_bench.py plus
the hostile ResourceClaimTemplates of tests/robustness/hostile.py) and drives it from
one asyncio process with keep-alive TLS connections:

- ordinary: `--connections` closed-loop clients POSTing /validate for the benchmark pod
  (as mutated by draquota), each with its own uid;
- probes: one client GETting /healthz every 20 ms;
- hostile (second phase only, POSTed to /mutate, which the API server calls first):
  one client per kind at `--rate` requests/s (one in
  flight at a time; `--rate 0`: back to back), each request new:
  `explode` (firstAvailable search with no solution: step budget), `nope` (a request
  no device matches: pre-check), `cel-bind` (list equality under 8 cel.bind: CEL cost
  estimate), `quantity` (cpu 0.000000001e999999), `queue-names` (a new
  draquota.io/queue-name each time: metric labels), `annotation` (a charge annotation
  of 100 000 `[`). The claim entry names change per request, so no cache answers them.

Phases: baseline (no hostile), hostile, baseline again; ratios are against the mean of
the two baselines of the same run. Reported: ordinary throughput and p99, /healthz p99,
and per hostile kind the number answered, the slowest answer against the deadline, and
the reasons. Targets: ordinary throughput >= 0.8 x baseline, ordinary p99 < 50 ms,
every hostile request answered within its deadline.

Run: .venv/bin/python bench/hostile_bench.py [--nodes 500] [--seconds 10] [--connections 8]
Not a CI test: timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.webhook_bench import (  # noqa: E402
    GPU_CLASS,
    NAMESPACE,
    UID,
    _free_port,
    _mutated_body,
    _server,
    bench_pod,
    build_cluster,
    review,
)
from certs.files import write_material  # noqa: E402
from certs.rotation import issue  # noqa: E402
from certs.serving import ServingSpec  # noqa: E402
from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL  # noqa: E402
from quota.settings import Settings  # noqa: E402
from tests.robustness.hostile import (  # noqa: E402
    cel_spec,
    first_available_spec,
    nested_bind_equality,
    nothing_matches_request,
    unsatisfiable_constraint_spec,
)

__all__ = ["main", "run"]

DEADLINE = Settings().admission_deadline_seconds
HOSTILE_TEMPLATES = {
    "explode": unsatisfiable_constraint_spec(),
    "nope": first_available_spec(3, 8, nothing_matches_request()),
    "cel-bind": cel_spec(nested_bind_equality()),
}


def _template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(spec).replace("gpu.example.com", GPU_CLASS)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": json.loads(text)},
    }


def _claim_pod(name: str, template: str, entry: str) -> dict[str, Any]:
    obj = bench_pod(name)
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": entry}]}
    obj["spec"]["resourceClaims"] = [{"name": entry, "resourceClaimTemplateName": template}]
    return obj


def hostile_body(kind: str, n: int) -> bytes:
    """The n-th hostile AdmissionReview of a kind (names vary, so nothing is cached)."""
    name = f"hostile-{kind}-{n}"
    if kind in HOSTILE_TEMPLATES:
        obj = _claim_pod(name, kind, f"e{n}")
    elif kind == "quantity":
        obj = bench_pod(name)
        obj["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "0.000000001e999999"}
    elif kind == "queue-names":
        obj = bench_pod(name)
        obj["metadata"]["labels"] = {QUEUE_LABEL: f"q-{n}"}
    elif kind == "annotation":
        obj = bench_pod(name)
        obj["metadata"]["annotations"] = {CHARGE_ANNOTATION: "[" * 100_000}
    else:
        raise ValueError(kind)
    return orjson.dumps(review(obj, f"{name}-uid"))


HOSTILE_KINDS = ("explode", "nope", "cel-bind", "quantity", "queue-names", "annotation")


class Connection:
    """One keep-alive HTTPS connection speaking just enough HTTP/1.1."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self.host, self.port, self.context = host, port, context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.context
            )
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclass
class Series:
    latencies: list[float] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    errors: int = 0

    def add(self, seconds: float, reason: str) -> None:
        self.latencies.append(seconds)
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _reason(body: bytes) -> str:
    response = orjson.loads(body).get("response") or {}
    if response.get("allowed"):
        return "Allowed"
    return str((response.get("status") or {}).get("reason"))


async def _loop(
    url_port: int,
    context: ssl.SSLContext,
    stop: float,
    series: Series,
    make: Callable[[int], tuple[str, str, bytes]],
    period: float = 0.0,
) -> None:
    conn = Connection("127.0.0.1", url_port, context)
    try:
        for n in itertools.count():
            if time.monotonic() >= stop:
                return
            method, path, body = make(n)
            started = time.monotonic()
            try:
                status, answer = await conn.request(method, path, body)
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
                series.errors += 1
                conn = Connection("127.0.0.1", url_port, context)
                continue
            elapsed = time.monotonic() - started
            reason = _reason(answer) if path != "/healthz" and status == 200 else str(status)
            series.add(elapsed, reason)
            if period > elapsed:
                await asyncio.sleep(period - elapsed)
    finally:
        await conn.close()


async def _phase(
    port: int,
    context: ssl.SSLContext,
    validate_body: bytes,
    seconds: float,
    connections: int,
    hostile: bool,
    tag: str,
    rate: float = 0.0,
) -> dict[str, Any]:
    stop = time.monotonic() + seconds
    ordinary, probes = Series(), Series()
    uids = itertools.count()
    template = validate_body.split(UID.encode())

    def ordinary_request(_n: int) -> tuple[str, str, bytes]:
        uid = f"{tag}-{next(uids)}".encode()
        return "POST", "/validate", uid.join(template)

    tasks = [_loop(port, context, stop, ordinary, ordinary_request) for _ in range(connections)]
    tasks.append(_loop(port, context, stop, probes, lambda _n: ("GET", "/healthz", b""), 0.02))
    per_kind: dict[str, Series] = {}
    if hostile:
        for kind in HOSTILE_KINDS:
            per_kind[kind] = Series()

            def make(n: int, kind: str = kind) -> tuple[str, str, bytes]:
                # The API server calls the mutating webhook first: a denial there is final.
                return "POST", "/mutate", hostile_body(kind, n + 1_000_000 * len(tag))

            period = 1 / rate if rate else 0.0
            tasks.append(_loop(port, context, stop, per_kind[kind], make, period))
    started = time.monotonic()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    return {
        "ordinary": {
            "rps": len(ordinary.latencies) / elapsed,
            "p50_ms": ordinary.pct(0.5) * 1000,
            "p99_ms": ordinary.pct(0.99) * 1000,
            "reasons": ordinary.reasons,
            "errors": ordinary.errors,
        },
        "healthz": {"p99_ms": probes.pct(0.99) * 1000, "count": len(probes.latencies)},
        "hostile": {
            kind: {
                "answered": len(s.latencies),
                "max_ms": max(s.latencies, default=float("nan")) * 1000,
                "within_deadline": all(x < DEADLINE for x in s.latencies) and not s.errors,
                "reasons": s.reasons,
                "errors": s.errors,
            }
            for kind, s in per_kind.items()
        },
    }


def run(
    nodes: int, seconds: int, connections: int, work: Path, rate: float = 5.0
) -> dict[str, Any]:
    state, cert_dir = work / "cluster", work / "certs"
    build_cluster(state, nodes)
    templates = [_template(name, spec) for name, spec in HOSTILE_TEMPLATES.items()]
    (state / "hostile.yaml").write_text(yaml.safe_dump_all(templates))
    write_material(
        cert_dir,
        issue(ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",)), datetime.now(UTC)),
    )
    port = _free_port()
    command = [
        sys.executable, "-m", "webhook.cli", "serve", "--state", str(state),
        "--cert-dir", str(cert_dir), "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "ERROR",
    ]  # fmt: skip
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    results: dict[str, Any] = {
        "nodes": nodes,
        "seconds": seconds,
        "connections": connections,
        "rate": rate,
    }
    with _server(command, port, cert_dir, work / "draquota.log") as url:
        _, validate_body = _mutated_body(url, cert_dir)

        async def scenario() -> None:
            await _phase(
                port, context, validate_body, max(1, seconds // 5), connections, False, "w"
            )
            results["before"] = await _phase(
                port, context, validate_body, seconds, connections, False, "a"
            )
            results["hostile"] = await _phase(
                port, context, validate_body, seconds, connections, True, "bb", rate
            )
            results["after"] = await _phase(
                port, context, validate_body, seconds, connections, False, "ccc"
            )
            conn = Connection("127.0.0.1", port, context)
            _, metrics = await conn.request("GET", "/metrics")
            await conn.close()
            text = metrics.decode()
            results["metrics"] = {
                "bytes": len(metrics),
                "decision_series": sum(
                    1 for line in text.splitlines()
                    if line.startswith("draquota_admission_decisions_total{")
                ),
            }  # fmt: skip

        asyncio.run(scenario())
    base = {
        key: statistics.mean(
            [results["before"]["ordinary"][key], results["after"]["ordinary"][key]]
        )
        for key in ("rps", "p99_ms")
    }
    base_health = statistics.mean(
        [results["before"]["healthz"]["p99_ms"], results["after"]["healthz"]["p99_ms"]]
    )
    hostile = results["hostile"]
    results["ratios"] = {
        "ordinary_throughput": hostile["ordinary"]["rps"] / base["rps"],
        "ordinary_p99": hostile["ordinary"]["p99_ms"] / base["p99_ms"],
        "healthz_p99": hostile["healthz"]["p99_ms"] / base_health,
    }
    return results


def report(r: dict[str, Any]) -> str:
    lines = [
        f"cluster: {r['nodes']} nodes x 8 GPUs; {r['connections']} ordinary connections; "
        f"{r['seconds']} s per phase; deadline {DEADLINE:g} s; hostile: one client per kind, "
        + (f"{r['rate']:g} req/s each" if r["rate"] else "closed loop"),
        "| phase | ordinary req/s | p50 ms | p99 ms | /healthz p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for phase in ("before", "hostile", "after"):
        o, h = r[phase]["ordinary"], r[phase]["healthz"]
        lines.append(
            f"| {phase} | {o['rps']:.0f} | {o['p50_ms']:.2f} | {o['p99_ms']:.2f} | "
            f"{h['p99_ms']:.2f} |"
        )
    ratios = r["ratios"]
    lines.append(
        f"ratios (hostile / mean of baselines): throughput {ratios['ordinary_throughput']:.2f}, "
        f"ordinary p99 {ratios['ordinary_p99']:.2f}, /healthz p99 {ratios['healthz_p99']:.2f}"
    )
    lines += [
        "| hostile kind | answered | slowest ms | within deadline | reasons |",
        "|---|---:|---:|---|---|",
    ]
    for kind, h in r["hostile"]["hostile"].items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(h["reasons"].items()))
        lines.append(
            f"| {kind} | {h['answered']} | {h['max_ms']:.1f} | {h['within_deadline']} | {reasons} |"
        )
    reasons = r["hostile"]["ordinary"]["reasons"]
    lines.append(f"ordinary answers during the hostile phase: {reasons}")
    m = r["metrics"]
    lines.append(
        f"/metrics after the run: {m['bytes']} bytes, {m['decision_series']} decision series"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument(
        "--rate", type=float, default=5.0, help="hostile requests/s per kind (0: closed loop)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="draquota-hostile-") as tmp:
        results = run(args.nodes, args.seconds, args.connections, Path(tmp), args.rate)
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
