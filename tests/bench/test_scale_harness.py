"""The scale harness builds a consistent cluster and its placement measurement runs: a broken
harness would report figures for a cluster that is not the one described."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module(name: str):  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def test_a_small_cluster_has_its_nodes_pods_claims_and_ledger_records() -> None:
    cluster = _module("scale_cluster")
    kinds = Counter(o["kind"] for o in cluster.workload(cluster.Size(20, 200)))
    assert kinds["Node"] == 20 and kinds["Pod"] == 200
    assert kinds["ResourceClaim"] > 0 and kinds["QuotaLedger"] > 0


def test_placement_is_measured_before_and_after_claim_changes() -> None:
    bench = _module("scale_bench")
    figures = bench.placement(bench.Size(20, 200), calls=10)
    assert {"index_build_ms", "place_p50_ms", "changed_p50_ms", "changed_p99_ms"} <= set(figures)


def test_the_floor_webhook_allows_both_calls_of_an_admission() -> None:
    """The allow-all webhook is the floor the scale benchmark compares with: it must answer
    the same two calls as draquota, allowing, for the same request."""
    app = _module("webhook_bench").allow_all_app()
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}

    async def answers() -> list[Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://floor") as client:
            calls = [
                (await client.post(path, json={**review, "request": {"uid": "u-1"}})).json()
                for path in ("/mutate", "/validate")
            ]
            return [*calls, (await client.get("/readyz")).status_code]

    mutate, validate, ready = asyncio.run(answers())
    assert mutate["response"] == validate["response"] == {"uid": "u-1", "allowed": True}
    assert ready == 200


def test_the_report_compares_draquota_with_the_floor() -> None:
    bench = _module("scale_bench")
    load = {"p50_ms": 40.0, "p99_ms": 90.0, "per_second": 100.0}
    floor = {"p50_ms": 10.0, "p99_ms": 20.0, "per_second": 400.0}
    result = {"nodes": 5, "pods": 50, "ready_s": 1.0, "rss_ready_mib": 1.0, "rss_idle_mib": 1.0,
              "rss_load_mib": 1.0, "admission": load, "floor": floor}  # fmt: skip
    assert "| 50 | 10.0 / 20.0 | 400 | 4.00x | 0.25 |" in bench.report([result])
