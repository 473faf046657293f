"""The figures of bench/throughput.py (issue 30), from what its bursts recorded: per phase and
pod kind, creates/s, p50/p99 create latency, failed creates by reason and costs per create;
then the ratios the issue's "Done when" names, each with its target. Pure: plain data in,
text out, so its arithmetic is tested without a cluster.

A burst record (`runs` of the result) is `{"phase", "kind", "seconds", "latencies_ms" (of the
creates that succeeded), "failed" {reason: n}, "messages", "counters" {name: increase}}`;
counter names are `cpu PROCESS` (CPU seconds), `webhook NAME TYPE sum|count` (the API
server's admission time of a webhook), `ledger VERB CODE` (QuotaLedger requests the API
server served), `ledger PUT seconds sum|count`, `replica I ledger OUTCOME` (one draquota
replica's `draquota_ledger_writes_total`) and `clients cpu` (CPU seconds of the benchmark's
own process, whose threads are the clients: not in `cpu_ms`, which is the system measured).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "KINDS",
    "PHASES",
    "Row",
    "apiserver_counters",
    "machine",
    "quantile",
    "ratios",
    "replica_counters",
    "report",
    "summarize",
    "table",
]

PHASES = {
    "A": "no quota, no webhooks",
    "B": "built-in ResourceQuota (pods, cpu, memory, DRA device-class quota)",
    "C": "an allow-all mutating + validating webhook pair (uvicorn, TLS)",
    "D": "draquota, 1 replica",
    "E": "draquota, 3 replicas behind a round-robin proxy",
    "F": "draquota, 3 replicas, the proxy sending all to the elected one (a measurement)",
    "S": "the allow-all pair stamping pods as draquota's /mutate does (a measurement)",
    "W": "S's pair, draquota's replica running beside it unregistered (a measurement)",
}
KINDS = ("cpu", "gpu")


WEBHOOK_TIME = "apiserver_admission_webhook_admission_duration_seconds_"


def _apiserver_key(name: str, labels: Mapping[str, str]) -> str | None:
    end = name.rsplit("_", 1)[1]
    if name.startswith(WEBHOOK_TIME) and end in ("sum", "count"):
        return f"webhook {labels['name']} {labels['type']} {end}"
    if labels.get("resource") != "quotaledgers":
        return None
    if name == "apiserver_request_total":
        return f"ledger {labels['verb']} {labels['code']}"
    if name.startswith("apiserver_request_duration_seconds_") and end in ("sum", "count"):
        return f"ledger PUT seconds {end}" if labels.get("verb") == "PUT" else None
    return None


def apiserver_counters(text: str) -> dict[str, float]:
    """From the API server's /metrics: admission time and calls by webhook and type,
    QuotaLedger requests by verb and code, and the time the API server spent on their PUTs."""
    out: defaultdict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = _apiserver_key(sample.name, sample.labels)
            if key is not None:
                out[key] += sample.value
    return dict(out)


def replica_counters(text: str, index: int) -> dict[str, float]:
    """One draquota replica's `draquota_ledger_writes_total` by outcome (all ClusterQueues)."""
    out: defaultdict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "draquota_ledger_writes_total":
                out[f"replica {index} ledger {sample.labels['outcome']}"] += sample.value
    return dict(out)


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile, nearest rank (with 400 values, p99 is the 396th smallest)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Row:
    """One phase and pod kind over its bursts; `per_create` divides every counter's increase
    by the creates attempted."""

    phase: str
    kind: str
    created: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    failed: Mapping[str, int] = field(default_factory=dict)
    per_create: Mapping[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Creates/s: creates that succeeded over the wall time of the bursts."""
        return self.created / self.seconds if self.seconds > 0 else 0.0

    @property
    def failures(self) -> int:
        return sum(self.failed.values())

    @property
    def cpu_ms(self) -> float:
        """CPU ms per create of the control plane and the webhook processes together."""
        return 1000 * sum(v for k, v in self.per_create.items() if k.startswith("cpu "))

    @property
    def clients_ms(self) -> float:
        """CPU ms per create of the clients that sent the creates."""
        return 1000 * self.per_create.get("clients cpu", 0.0)

    @property
    def cores(self) -> float:
        """Cores kept busy over the bursts by every process counted, the clients included:
        near the machine's CPUs, the rate is set by the CPU each create costs."""
        attempts = self.created + self.failures
        spent = (self.cpu_ms + self.clients_ms) * attempts / 1000
        return spent / self.seconds if self.seconds > 0 else 0.0


def summarize(runs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Row]:
    """Rows by (phase, kind), in the order the bursts ran; bursts of one pair are pooled."""
    pooled: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        into = pooled.setdefault(
            (run["phase"], run["kind"]),
            {"seconds": 0.0, "latencies": [], "failed": Counter(), "counters": Counter()},
        )
        into["seconds"] += run["seconds"]
        into["latencies"] += run["latencies_ms"]
        into["failed"].update(run["failed"])
        into["counters"].update(run.get("counters", {}))
    rows = {}
    for (phase, kind), got in pooled.items():
        attempts = len(got["latencies"]) + sum(got["failed"].values())
        if not attempts:
            continue  # stopped by --max-seconds before its first create: no figure
        per_create = {k: v / attempts for k, v in got["counters"].items()}
        rows[phase, kind] = Row(
            phase,
            kind,
            len(got["latencies"]),
            got["seconds"],
            quantile(got["latencies"], 0.5),
            quantile(got["latencies"], 0.99),
            dict(got["failed"]),
            per_create,
        )
    return rows


def _over(
    rows: Mapping[tuple[str, str], Row], top: str, bottom: str, kind: str, what: str
) -> float | None:
    a, b = rows.get((top, kind)), rows.get((bottom, kind))
    if a is None or b is None:
        return None
    x, y = (a.rate, b.rate) if what == "rate" else (a.p99_ms, b.p99_ms)
    return x / y if x is not None and y else None


# (name, numerator phase, denominator phase, rate or p99, target: ">= x", "<= x" or "")
TARGETS = (
    ("D/C creates/s", "D", "C", "rate", ">= 0.8"),
    ("D/B creates/s", "D", "B", "rate", ">= 0.7"),
    ("E/D creates/s", "E", "D", "rate", ">= 1.0"),
    ("D/B p99", "D", "B", "p99", "<= 2.0"),
    ("E/B p99", "E", "B", "p99", "<= 2.0"),
    ("B/A creates/s", "B", "A", "rate", ""),
    ("C/A creates/s", "C", "A", "rate", ""),
    ("D/A creates/s", "D", "A", "rate", ""),
    ("F/D creates/s", "F", "D", "rate", ""),
    ("S/C creates/s", "S", "C", "rate", ""),
    ("W/S creates/s", "W", "S", "rate", ""),
    ("D/W creates/s", "D", "W", "rate", ""),
    ("D/S creates/s", "D", "S", "rate", ""),
)


def verdict(value: float | None, target: str) -> str:
    """`met` or `NOT met` against a target ">= x" / "<= x" / "= x"; `n/a` without a value;
    empty without a target (a ratio shown for context)."""
    if not target:
        return ""
    if value is None:
        return "n/a"
    op, bound = target.split()
    met = {">=": value >= float(bound), "<=": value <= float(bound), "=": value == float(bound)}
    return "met" if met[op] else "NOT met"


def ratios(rows: Mapping[tuple[str, str], Row]) -> list[tuple[str, str, float | None, str, str]]:
    """(name, kind, value, target, verdict) for each ratio of the issue, per pod kind, and
    E's failed creates (target 0)."""
    out = []
    for name, top, bottom, what, target in TARGETS:
        for kind in KINDS:
            value = _over(rows, top, bottom, kind, what)
            out.append((name, kind, value, target, verdict(value, target)))
    for kind in KINDS:
        row = rows.get(("E", kind))
        failed = None if row is None else float(row.failures)
        out.append(("E failed creates", kind, failed, "= 0", verdict(failed, "= 0")))
    return out


def _pair(rows: Mapping[tuple[str, str], Row], phase: str, show: Any) -> str:
    got = [rows.get((phase, kind)) for kind in KINDS]
    return " / ".join("n/a" if r is None else show(r) for r in got)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def table(rows: Mapping[tuple[str, str], Row]) -> str:
    """The issue's table, plus gpu latencies and CPU per create."""
    lines = [
        "| phase | creates/s cpu / gpu | p50 / p99 ms (cpu) | p50 / p99 ms (gpu) "
        "| failed creates cpu / gpu | CPU ms per create cpu / gpu |",
        "|---|---|---|---|---|---|",
    ]
    for phase, label in PHASES.items():
        if not any((phase, k) in rows for k in KINDS):
            continue
        lat = {k: rows.get((phase, k)) for k in KINDS}
        p = {
            k: "n/a" if r is None else f"{_ms(r.p50_ms)} / {_ms(r.p99_ms)}" for k, r in lat.items()
        }
        failed = _pair(rows, phase, lambda r: str(r.failures))
        if failed != "0 / 0":
            reasons = Counter[str]()
            for r in lat.values():
                reasons.update(r.failed if r else {})
            failed = f"**{failed}** ({', '.join(f'`{k}` {v}' for k, v in sorted(reasons.items()))})"
        lines.append(
            f"| {phase} {label} | {_pair(rows, phase, lambda r: f'{r.rate:.0f}')} "
            f"| {p['cpu']} | {p['gpu']} | {failed} "
            f"| {_pair(rows, phase, lambda r: f'{r.cpu_ms:.1f}')} |"
        )
    return "\n".join(lines)


def costs(row: Row) -> list[str]:
    """Where a create's time and work went: webhook calls and their mean time as the API
    server measured them, QuotaLedger requests, and draquota's ledger records, per create."""
    per = row.per_create
    parts = []
    for key in sorted(k for k in per if k.startswith("webhook ") and k.endswith(" count")):
        name = key.removesuffix(" count")
        mean = 1000 * per.get(f"{name} sum", 0.0) / per[key] if per[key] else 0.0
        parts.append(f"{name.removeprefix('webhook ')}: {per[key]:.2f} calls, {mean:.1f} ms mean")
    ledger = {
        k.removeprefix("ledger "): v
        for k, v in per.items()
        if k.startswith("ledger ") and "seconds" not in k
    }
    if ledger:
        parts.append(
            "QuotaLedger requests " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(ledger.items()))
        )
    if per.get("ledger PUT seconds count"):
        mean = 1000 * per.get("ledger PUT seconds sum", 0.0) / per["ledger PUT seconds count"]
        parts.append(f"QuotaLedger PUT {mean:.1f} ms mean (API server)")
    records: defaultdict[str, float] = defaultdict(float)
    for key, value in per.items():
        if key.startswith("replica ") and " ledger " in key:
            records[key.rsplit(" ", 1)[1]] += value
    if records:
        parts.append(
            "draquota_ledger_writes_total "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(records.items()))
        )
    cpu = ", ".join(
        f"{k.removeprefix('cpu ')} {1000 * v:.1f}"
        for k, v in sorted(per.items())
        if k.startswith("cpu ") and v
    )
    return [f"CPU ms: {cpu}", *parts]


def machine(rows: Mapping[tuple[str, str], Row], cpus: int) -> list[str]:
    """Per phase and kind, the cores kept busy and the CPU per create they were spent on:
    when every phase keeps the machine's CPUs near full, a ratio of rates is the inverse
    ratio of CPU per create."""
    lines = [
        f"| phase | kind | cores busy (of {cpus}) | CPU ms per create: measured + clients |",
        "|---|---|---|---|",
    ]
    for (phase, kind), row in rows.items():
        lines.append(
            f"| {phase} | {kind} | {row.cores:.2f} | {row.cpu_ms:.1f} + {row.clients_ms:.1f} |"
        )
    return lines


def report(result: Mapping[str, Any]) -> str:
    meta = result["meta"]
    rows = summarize(result["runs"])
    head = [
        f"{meta['date']}: {meta['pods']} creates per burst, {meta['clients']} clients, "
        f"{meta['bursts']} burst(s) per phase and kind, {meta['cpus']} CPUs, "
        f"{meta['seconds']:.0f} s; load average "
        f"{' '.join(f'{x:.2f}' for x in meta['loadavg_start'])} at the start, "
        f"{' '.join(f'{x:.2f}' for x in meta['loadavg_end'])} at the end",
    ]
    if meta.get("truncated"):
        head.append("stopped early: --max-seconds reached")
    lines = [
        *head,
        "",
        table(rows),
        "",
        "| ratio | kind | value | target | |",
        "|---|---|---|---|---|",
    ]
    for name, kind, value, target, verdict in ratios(rows):
        shown = "n/a" if value is None else f"{value:.2f}"
        lines.append(f"| {name} | {kind} | {shown} | {target} | {verdict} |")
    lines += ["", *machine(rows, meta["cpus"])]
    lines += ["", "Per create (counters' increase over the burst / creates attempted):"]
    for (phase, kind), row in rows.items():
        lines.append(f"- {phase} {kind}: " + "; ".join(costs(row)))
    for run in result["runs"]:
        for message in run.get("messages", [])[:1]:
            lines.append(f"- {run['phase']} {run['kind']} failure: {message}")
    return "\n".join(lines)
