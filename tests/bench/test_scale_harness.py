"""The scale harness builds a consistent cluster and its placement measurement runs: a broken
harness would report figures for a cluster that is not the one described."""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path

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
