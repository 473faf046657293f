"""Fairness between teams: another team's pod create latency while one namespace floods
draquota with expensive decisions (issue 29, item 4; target: p99 under 1 s).

Starts the real v1.36.2 control plane and installs draquota as the e2e tier does
(`tests.e2e.cluster.running_cluster`; `--replicas` processes, 1 by default, as the issue's
attack was run), makes two namespaces, each with its own ClusterQueue and quota far above
what is created, then alternates two phases `--rounds` times:

- quiet: the team (a namespace admin, its own token) creates `--team-pods` pods one after
  another, each claiming one GPU from a template, and each create is timed through the API
  server (the kubernetes client; mutating and validating webhook included);
- flood: the same while `--loops` threads of the flooding namespace's admin create pods whose
  template has 16 requests x 4 selectors `device.driver in [300 literals]`, a template per pod
  (tests/e2e/flood.py), bounded in pods and time;
- free-flood: the same flood from a namespace no ClusterQueue selects, whose pods draquota
  lets in without deciding anything: what the flood costs the API server, etcd, the
  controllers and the flooding clients on this machine, without draquota's decisions.

After each create, the same pod (another name) is posted as a dry-run AdmissionReview
straight to the first replica's /mutate and timed: draquota's own answer time, apart from
what the API server, etcd and the controllers spend on the flood on the same machine.

Reported: per phase kind, the team's p50 and p99 create latency and webhook answer time
(nearest rank), the ratios flood/quiet, every create that failed by reason, and the flood's
own outcomes by reason.
Everything started is stopped, also on error or SIGTERM.

    .venv/bin/python bench/fairness.py [--replicas 1] [--team-pods 100] [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import run_live  # noqa: E402

__all__ = ["main", "measure", "report"]

QUIET, FLOOD, FREE = "quiet", "flood", "free-flood"
FLOODING, TEAM, UNMANAGED = "bench-fair-flood", "bench-fair-team", "bench-fair-free"


@dataclass(frozen=True)
class Teams:
    """The two namespaces and the kubeconfig of each one's admin."""

    team: str
    member: Path
    flooding: str
    flooder: Path
    free: str  # a namespace no ClusterQueue selects: draquota lets its pods in at once
    free_flooder: Path
    webhook: Any  # an httpx.Client of the first replica, for draquota's own answer time


def _phase(args: argparse.Namespace, teams: Teams, phase: str, round_: int) -> dict[str, Any]:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    from tests.e2e.flood import Flood, create_pod, plain_pod

    member = k8s_config.new_client_from_config(config_file=str(teams.member))
    api = k8s.CoreV1Api(member)
    flood = None
    if phase in (FLOOD, FREE):
        where = (
            (teams.flooder, teams.flooding) if phase == FLOOD else (teams.free_flooder, teams.free)
        )
        flood = Flood(*where, args.loops, 10_000, args.flood_seconds)
        flood.start()
        flood.wait_started()
    try:
        outcomes, answers = [], []
        for i in range(args.team_pods):
            name = f"{phase}-{round_}-{i}"
            outcomes.append(create_pod(api, teams.team, plain_pod(name, "gpu")))
            answers.append(_webhook_seconds(teams, plain_pod(f"{name}-direct", "gpu")))
        active = flood.active() if flood else 0
    finally:
        flooded = flood.stop() if flood else Counter()
        member.close()
    return {
        "phase": phase,
        "seconds": [o.seconds for o in outcomes if o.reason == "Created"],
        "webhook_seconds": answers,
        "failed": dict(Counter(o.reason for o in outcomes if o.reason != "Created")),
        "messages": sorted({o.message for o in outcomes if o.message})[:5],
        "flood": dict(flooded),
        "flood_loops_still_running_at_end": active,
    }


def _webhook_seconds(teams: Teams, pod: dict[str, Any]) -> float:
    """How long the first replica takes to answer /mutate for `pod` of the team, posted to it
    directly as a dry run (nothing is held): draquota's own share of a create's latency."""
    from tests.webhook.builders import review

    pod["metadata"]["namespace"] = teams.team
    body = json.dumps(review(pod, dry_run=True))
    started = time.perf_counter()
    answer = teams.webhook.post("/mutate", content=body)
    elapsed = time.perf_counter() - started
    assert answer.json()["response"]["allowed"], answer.text
    return elapsed


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tests.e2e.cluster import running_cluster
    from tests.e2e.objects import Flavor, Scenario, scenario

    started = time.monotonic()
    phases: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="draquota-fairness-", ignore_cleanup_errors=True) as tmp,
        running_cluster(Path(tmp), args.replicas) as installed,
    ):
        flooding = scenario(installed, FLOODING, Flavor("main", 10**6, {f"{FLOODING}-1": 16}))
        team = scenario(installed, TEAM, Flavor("main", 10**5, {f"{TEAM}-1": 8}))
        installed.cluster.kubectl("create", "namespace", UNMANAGED)
        free = Scenario(installed, UNMANAGED, [])  # only for its user: no queue, no nodes
        webhook = installed.replicas[0].client()
        teams = Teams(
            team.namespace, team.user("member", "admin"),
            flooding.namespace, flooding.user("flooder", "admin"),
            UNMANAGED, free.user("flooder", "admin"), webhook,
        )  # fmt: skip
        _phase(args, teams, QUIET, 0)  # warm-up, not counted
        for round_ in range(1, args.rounds + 1):
            for phase in (QUIET, FLOOD, FREE):
                if time.monotonic() - started > args.max_seconds:
                    break
                print(f"round {round_}: {phase}", file=sys.stderr, flush=True)
                phases.append(_phase(args, teams, phase, round_))
        webhook.close()
    return {
        "meta": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "replicas": args.replicas,
            "team_pods": args.team_pods,
            "rounds": args.rounds,
            "loops": args.loops,
            "cpus": os.cpu_count(),
            "loadavg_end": os.getloadavg(),
            "seconds": time.monotonic() - started,
        },
        "phases": phases,
    }


def _summary(result: dict[str, Any], phase: str) -> dict[str, Any]:
    from tests.e2e.flood import quantile

    runs = [p for p in result["phases"] if p["phase"] == phase]
    seconds = [s for p in runs for s in p["seconds"]]
    direct = [s for p in runs for s in p["webhook_seconds"]]
    failed: Counter[str] = Counter()
    flood: Counter[str] = Counter()
    for p in runs:
        failed.update(p["failed"])
        flood.update(p["flood"])
    return {
        "created": len(seconds),
        "p50_ms": 1000 * quantile(seconds, 0.5) if seconds else float("nan"),
        "p99_ms": 1000 * quantile(seconds, 0.99) if seconds else float("nan"),
        "webhook_p50_ms": 1000 * quantile(direct, 0.5) if direct else float("nan"),
        "webhook_p99_ms": 1000 * quantile(direct, 0.99) if direct else float("nan"),
        "failed": dict(failed),
        "flood": dict(flood),
    }


def report(result: dict[str, Any]) -> str:
    rows = {phase: _summary(result, phase) for phase in (QUIET, FLOOD, FREE)}
    meta = result["meta"]
    lines = [
        f"{meta['date']}: {meta['replicas']} replica(s), {meta['team_pods']} team creates per "
        f"phase, {meta['rounds']} rounds, {meta['loops']} flood loops, {meta['cpus']} CPUs",
        "create: through the API server; webhook: draquota's /mutate answer, posted directly",
        f"{'phase':<12}{'created':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'webhook p50':>13}{'webhook p99':>13}  failed",
    ]
    for name, row in rows.items():
        lines.append(
            f"{name:<12}{row['created']:>9}{row['p50_ms']:>9.0f}{row['p99_ms']:>9.0f}"
            f"{row['webhook_p50_ms']:>13.1f}{row['webhook_p99_ms']:>13.1f}  {row['failed'] or '-'}"
        )
    quiet = rows[QUIET]
    for name in (FLOOD, FREE):
        lines.append(
            f"{name}/quiet: create p50 x{rows[name]['p50_ms'] / quiet['p50_ms']:.2f}, "
            f"p99 x{rows[name]['p99_ms'] / quiet['p99_ms']:.2f}; webhook p50 "
            f"x{rows[name]['webhook_p50_ms'] / quiet['webhook_p50_ms']:.2f}, p99 "
            f"x{rows[name]['webhook_p99_ms'] / quiet['webhook_p99_ms']:.2f}; "
            f"its outcomes: {rows[name]['flood']}"
        )
    for p in result["phases"]:
        if p["messages"]:
            lines.append(f"{p['phase']}: {p['messages'][0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, choices=range(1, 6), default=1)
    parser.add_argument("--team-pods", type=int, default=100)
    parser.add_argument("--rounds", type=int, choices=range(1, 11), default=2)
    parser.add_argument("--loops", type=int, choices=range(1, 33), default=6)
    parser.add_argument("--flood-seconds", type=float, default=600.0, help="bound of one flood")
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--json", action="store_true")
    return run_live(parser.parse_args(argv), measure, report)


if __name__ == "__main__":
    sys.exit(main())
