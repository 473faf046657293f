"""What draquota adds per request, in process: both ASGI apps driven directly.

`bench/run.py` measures whole servers under `wrk`: TLS, uvicorn, h11 and the event loop
cost the same for draquota and the allow-all baseline, and the machine's noise moves
both by ±5 % between runs. This drives the two apps of that benchmark (the same
cluster, the same AdmissionReviews, a uid per request) through their ASGI interface in
one process, no sockets, and reports microseconds per request and the difference: the
cost of draquota's own code (envelope, decision, ledger, metrics), to compare commits.
The floor is the allow-all app on draquota's own ASGI layer (`webhook.edge.asgi`): `decision`
is what draquota adds to it, `added` what it adds to the FastAPI baseline.

    .venv/bin/python bench/app_cost.py [--nodes 500] [--requests 2000] [--rounds 5]

Each figure is the best of `--rounds` rounds: the least disturbed by the machine.
Server figures are higher (the app's code shares caches with TLS and the event loop
there): in bench/README's runs, about 1.6 to 1.8x what this reports.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asgi_post import post_review  # noqa: E402
from webhook_bench import (  # noqa: E402
    UID,
    admission_bodies,
    allow_all_app,
    allow_all_floor_app,
    build_cluster,
    probe_review,
)

__all__ = ["main", "measure", "report"]

App = Callable[..., Any]


def _draquota(state: Path) -> App:
    from webhook.bootstrap import embedded
    from webhook.commands._common import load_settings
    from webhook.edge.app import create_app
    from webhook.store.statedir import StateDirBackend

    settings = load_settings(None)
    wiring = embedded(StateDirBackend(state), settings)
    return create_app(wiring.backend, wiring.ledger, settings, wiring.placer)


async def _bodies(app: App) -> dict[str, str]:
    """The /mutate and /validate bodies of `bench/run.py`, probing this app."""
    response = await post_review(app, "/mutate", orjson.dumps(probe_review()))
    mutate, validate = admission_bodies(response)
    return {"/mutate": mutate.decode(), "/validate": validate.decode()}


async def _round(app: App, path: str, template: str, requests: int, ids: Any) -> float:
    """Microseconds per request; every request has its own uid and pod name."""
    bodies = [template.replace(UID, f"u{next(ids):09d}").encode() for _ in range(requests)]
    started = time.perf_counter()
    for body in bodies:
        answer = await post_review(app, path, body)
        if not answer["allowed"]:
            raise RuntimeError(f"{path}: denied: {answer.get('status')}")
    return (time.perf_counter() - started) / requests * 1e6


async def _measure(state: Path, requests: int, rounds: int) -> dict[str, dict[str, float]]:
    draquota = _draquota(state)
    apps = (("baseline", allow_all_app()), ("floor", allow_all_floor_app()), ("draquota", draquota))
    bodies, ids = await _bodies(draquota), itertools.count()
    figures: dict[str, dict[str, float]] = {}
    for path, template in bodies.items():
        best: dict[str, float] = {}
        for name, app in apps:
            await _round(app, path, template, max(1, requests // 10), ids)  # warm-up
            times = [await _round(app, path, template, requests, ids) for _ in range(rounds)]
            best[name] = min(times)
        best["added"] = best["draquota"] - best["baseline"]
        best["decision"] = best["draquota"] - best["floor"]
        figures[path] = best
    return figures


def measure(nodes: int, requests: int, rounds: int) -> dict[str, dict[str, float]]:
    """Per endpoint: µs per request of the baseline, of draquota, and what draquota adds."""
    with tempfile.TemporaryDirectory(prefix="draquota-app-cost-") as work:
        state = Path(work) / "cluster"
        build_cluster(state, nodes)
        return asyncio.run(_measure(state, requests, rounds))


def report(figures: dict[str, dict[str, float]]) -> str:
    columns = ("baseline", "floor", "draquota", "added", "decision")
    lines = [f"{'endpoint':<12}" + "".join(f"{c + ' µs':>14}" for c in columns)]
    for path, f in figures.items():
        lines.append(f"{path:<12}" + "".join(f"{f[c]:>14.1f}" for c in columns))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.nodes, args.requests, args.rounds)
    print(orjson.dumps(figures).decode() if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
