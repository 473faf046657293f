"""The pod-creation throughput benchmark's figures (issue 30): creates/s, latency quantiles,
failures, per-create costs and the "Done when" ratios with their verdicts (no timing is
asserted here), and the allow-all pair registered with draquota's own webhook rules."""

from __future__ import annotations

import copy
import importlib
import sys
from base64 import b64decode
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml

from tests.recorded import recorded_object
from tests.webhook.builders import AppClient

BENCH = Path(__file__).resolve().parents[2] / "bench"
OVERLAY = Path(__file__).resolve().parents[2] / "manifests" / "base" / "webhooks.yaml"


def _module(name: str):  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def _run(phase: str, kind: str, seconds: float, latencies: list[float], **extra: Any) -> dict:
    return {"phase": phase, "kind": kind, "seconds": seconds, "latencies_ms": latencies,
            "failed": extra.get("failed", {}), "counters": extra.get("counters", {})}  # fmt: skip


def test_bursts_of_a_phase_pool_into_rate_quantiles_and_costs_per_attempted_create() -> None:
    fig = _module("throughput_figures")
    rows = fig.summarize([
        _run("D", "cpu", 2.0, [float(i) for i in range(1, 101)],
             counters={"cpu kube-apiserver": 1.0, "ledger PUT 200": 30.0}),
        _run("D", "cpu", 3.0, [1000.0] * 98, failed={"InternalError": 2},
             counters={"cpu kube-apiserver": 1.0, "ledger PUT 200": 10.0}),
    ])  # fmt: skip
    row = rows["D", "cpu"]
    assert row.created == 198 and row.seconds == 5.0 and round(row.rate, 1) == 39.6
    assert row.failed == {"InternalError": 2} and row.failures == 2
    # 198 latencies: p50 is the 99th smallest (99 ms), p99 the 196th (one of the 1000s)
    assert (row.p50_ms, row.p99_ms) == (99.0, 1000.0)
    assert row.per_create == {"cpu kube-apiserver": 0.01, "ledger PUT 200": 0.2}
    assert row.cpu_ms == 10.0


def test_ratios_name_each_target_of_the_issue_and_whether_it_is_met() -> None:
    fig = _module("throughput_figures")
    runs = []
    for phase, seconds, p99 in (("A", 1.0, 50.0), ("B", 2.0, 100.0), ("C", 2.5, 110.0),
                                ("D", 4.0, 150.0), ("E", 5.0, 300.0)):  # fmt: skip
        for kind in ("cpu", "gpu"):
            runs.append(_run(phase, kind, seconds, [10.0] * 98 + [p99] * 2))
    runs[-1]["failed"] = {"InternalError": 3}  # E gpu
    got = {(name, kind): (value, target, verdict)
           for name, kind, value, target, verdict in fig.ratios(fig.summarize(runs))}  # fmt: skip
    # 100 creates in the phase's seconds: rates A 100, B 50, C 40, D 25, E 20; p99 the 99th
    assert got["D/C creates/s", "cpu"] == (25 / 40, ">= 0.8", "NOT met")
    assert got["D/B creates/s", "gpu"] == (0.5, ">= 0.7", "NOT met")
    assert got["E/D creates/s", "cpu"] == (0.8, ">= 1.0", "NOT met")
    assert got["D/B p99", "cpu"] == (1.5, "<= 2.0", "met")
    assert got["E/B p99", "cpu"] == (3.0, "<= 2.0", "NOT met")
    assert got["B/A creates/s", "cpu"] == (0.5, "", "")
    assert got["E failed creates", "cpu"] == (0.0, "= 0", "met")
    assert got["E failed creates", "gpu"] == (3.0, "= 0", "NOT met")


def test_a_phase_that_did_not_run_leaves_its_ratios_unjudged() -> None:
    fig = _module("throughput_figures")
    rows = fig.summarize([_run("A", "cpu", 1.0, [5.0]), _run("B", "cpu", 1.0, [5.0])])
    got = {(n, k): (v, verdict) for n, k, v, _, verdict in fig.ratios(rows)}
    assert got["D/B creates/s", "cpu"] == (None, "n/a")
    assert got["B/A creates/s", "cpu"] == (1.0, "")
    assert got["E failed creates", "gpu"] == (None, "n/a")


def test_the_floor_phases_split_the_gap_between_the_allow_all_pair_and_draquota() -> None:
    """C to S: stamping pods; S to W: following the cluster; W to D: deciding and recording.
    The three ratios multiply to D/C."""
    fig = _module("throughput_figures")
    runs = [_run(phase, "cpu", seconds, [5.0] * 100)
            for phase, seconds in (("C", 1.0), ("S", 1.25), ("W", 2.0), ("D", 2.5))]  # fmt: skip
    got = {n: v for n, k, v, _, _ in fig.ratios(fig.summarize(runs)) if k == "cpu"}
    assert (got["S/C creates/s"], got["W/S creates/s"], got["D/W creates/s"]) == (0.8, 0.625, 0.8)
    product = got["S/C creates/s"] * got["W/S creates/s"] * got["D/W creates/s"]
    assert product == pytest.approx(got["D/C creates/s"])
    assert "the allow-all pair stamping pods" in fig.table(fig.summarize(runs))


def test_the_table_shows_failed_creates_with_their_reasons() -> None:
    fig = _module("throughput_figures")
    rows = fig.summarize([
        _run("E", "cpu", 10.0, [20.0] * 391, failed={"InternalError": 9}),
        _run("E", "gpu", 10.0, [30.0] * 395, failed={"InternalError": 5}),
    ])  # fmt: skip
    line = fig.table(rows).splitlines()[-1]
    assert line.startswith("| E draquota, 3 replicas behind a round-robin proxy | 39 / 40 |")
    assert "| 20 / 20 | 30 / 30 | **9 / 5** (`InternalError` 14) |" in line


def test_costs_give_webhook_time_ledger_requests_and_records_per_create() -> None:
    fig = _module("throughput_figures")
    counters = {
        "webhook validate.draquota.io validating sum": 20.0,
        "webhook validate.draquota.io validating count": 400.0,
        "ledger PUT 200": 150.0, "ledger PUT 409": 50.0,
        "ledger PUT seconds sum": 3.0, "ledger PUT seconds count": 200.0,
        "replica 0 ledger written": 300.0, "replica 1 ledger written": 100.0,
        "replica 1 ledger conflict": 40.0, "cpu draquota-0": 4.0,
    }  # fmt: skip
    (row,) = fig.summarize([_run("E", "cpu", 1.0, [1.0] * 400, counters=counters)]).values()
    text = "; ".join(fig.costs(row))
    assert "validate.draquota.io validating: 1.00 calls, 50.0 ms mean" in text
    assert "QuotaLedger requests PUT 200 0.38, PUT 409 0.12" in text
    assert "QuotaLedger PUT 15.0 ms mean (API server)" in text
    assert "draquota_ledger_writes_total conflict 0.10, written 1.00" in text
    assert "CPU ms: draquota-0 10.0" in text


def test_cores_busy_count_every_process_and_the_clients_over_the_wall_time() -> None:
    fig = _module("throughput_figures")
    # 396 created and 4 failed in 2 s; 3.2 CPU s measured and 0.8 s of the clients
    counters = {"cpu kube-apiserver": 2.0, "cpu draquota-0": 1.2, "clients cpu": 0.8}
    run = _run("D", "cpu", 2.0, [1.0] * 396, failed={"DeadlineExceeded": 4}, counters=counters)
    (row,) = fig.summarize([run]).values()
    assert row.cpu_ms == 8.0  # the clients are not the system measured
    assert row.clients_ms == 2.0
    assert round(row.cores, 6) == 2.0  # (3.2 + 0.8) CPU seconds over 2 s of wall time
    assert fig.machine({("D", "cpu"): row}, 2)[2] == "| D | cpu | 2.00 | 8.0 + 2.0 |"


def test_counters_are_read_from_prometheus_text_as_the_servers_print_it() -> None:
    fig = _module("throughput_figures")
    apiserver = "\n".join([
        "# TYPE apiserver_admission_webhook_admission_duration_seconds histogram",
        'apiserver_admission_webhook_admission_duration_seconds_bucket{name="v.x",operation='
        '"CREATE",rejected="false",type="validating",le="+Inf"} 3',
        'apiserver_admission_webhook_admission_duration_seconds_sum{name="v.x",operation='
        '"CREATE",rejected="false",type="validating"} 0.5',
        'apiserver_admission_webhook_admission_duration_seconds_count{name="v.x",operation='
        '"CREATE",rejected="false",type="validating"} 3',
        "# TYPE apiserver_request_total counter",
        'apiserver_request_total{code="409",resource="quotaledgers",verb="PUT"} 7',
        'apiserver_request_total{code="201",resource="pods",verb="POST"} 70',
    ])  # fmt: skip
    assert fig.apiserver_counters(apiserver) == {
        "webhook v.x validating sum": 0.5,
        "webhook v.x validating count": 3.0,
        "ledger PUT 409": 7.0,
    }
    replica = "\n".join([
        "# TYPE draquota_ledger_writes counter",
        'draquota_ledger_writes_total{cluster_queue="q",outcome="written"} 12.0',
        'draquota_ledger_writes_total{cluster_queue="r",outcome="written"} 3.0',
    ])  # fmt: skip
    assert fig.replica_counters(replica, 2) == {"replica 2 ledger written": 15.0}


def test_the_allow_all_pair_has_draquotas_rules_and_calls_only_the_app() -> None:
    allow_all = _module("allow_all")
    shipped = [d for d in yaml.safe_load_all(OVERLAY.read_text(encoding="utf-8")) if d]
    configs = allow_all.allow_all_webhooks(yaml.safe_dump_all(shipped), 4321, b"CA")
    assert [c["kind"] for c in configs] == [d["kind"] for d in shipped]
    for config, original in zip(configs, shipped, strict=True):
        assert config["metadata"] == {"name": "bench-allow-all"}
        for hook, theirs in zip(config["webhooks"], original["webhooks"], strict=True):
            assert hook["name"].endswith(".allow-all.bench")
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:4321/")
            assert hook["clientConfig"]["caBundle"] == "Q0E="
            for key in ("rules", "matchConditions", "failurePolicy", "timeoutSeconds"):
                assert hook.get(key) == theirs.get(key), key


def test_a_burst_stopped_before_its_first_create_gives_no_row_and_no_verdict() -> None:
    fig = _module("throughput_figures")
    rows = fig.summarize([_run("D", "gpu", 1.0, [5.0] * 10), _run("E", "gpu", 0.0, [])])
    assert ("E", "gpu") not in rows
    got = {(n, k): (v, verdict) for n, k, v, _, verdict in fig.ratios(rows)}
    assert got["E/D creates/s", "gpu"] == (None, "n/a")
    assert got["E failed creates", "gpu"] == (None, "n/a")


def _unstamped(stored: dict[str, Any]) -> dict[str, Any]:
    """The pod as its client wrote it: without what draquota's /mutate stamped."""
    submitted = copy.deepcopy(stored)
    submitted["metadata"].pop("labels", None)
    submitted["spec"].pop("nodeSelector", None)
    submitted["spec"].pop("schedulingGates", None)
    return submitted


def test_the_stamp_floor_patches_each_pod_as_draquota_stamped_a_recorded_one() -> None:
    """Phase S: the allow-all /mutate answers with the patch from the submitted pod to the
    pod the API server stored with draquota's stamp (recorded on the real control plane:
    r-0 admitted with the queue label and its flavor's nodeSelector, r-2 gated)."""
    allow_all, bench = _module("allow_all"), _module("webhook_bench")
    admitted = recorded_object("Pod", "research", "r-0")
    gated = recorded_object("Pod", "research", "r-2")
    gated["spec"].pop("resourceClaims")  # the "cpu" kind: a pod naming no claim
    stamps = {
        "gpu": allow_all.stamp_patch(_unstamped(admitted), admitted),
        "cpu": allow_all.stamp_patch(_unstamped(gated), gated),
    }
    client = AppClient(bench.allow_all_app(orjson.loads(orjson.dumps(stamps))))
    for stored in (admitted, gated):
        submitted = _unstamped(stored)
        body = orjson.dumps(bench.review(submitted, "uid-1"))
        response = client.post("/mutate", content=body).json()["response"]
        assert response["allowed"] and response["patchType"] == "JSONPatch"
        patched = jsonpatch.apply_patch(submitted, orjson.loads(b64decode(response["patch"])))
        assert patched == stored
        validated = client.post("/validate", content=body).json()["response"]
        assert validated == {"uid": "uid-1", "allowed": True}
    assert stamps["gpu"] != stamps["cpu"]


def test_the_allow_all_pair_without_stamps_patches_nothing() -> None:
    client = AppClient(_module("webhook_bench").allow_all_app())
    body = orjson.dumps(
        _module("webhook_bench").review(recorded_object("Pod", "research", "r-0"), "u")
    )
    assert client.post("/mutate", content=body).json()["response"] == {"uid": "u", "allowed": True}
