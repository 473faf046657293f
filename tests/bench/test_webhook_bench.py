"""The load benchmark's server CPU figure: read from /proc, reported next to wrk's figures."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import orjson
import pytest

from tests.webhook.builders import AppClient

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench():  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("webhook_bench")


def test_the_cpu_time_of_a_process_grows_while_it_works() -> None:
    bench = _bench()
    before = bench._cpu_seconds(os.getpid())
    sum(i * i for i in range(3_000_000))
    after = bench._cpu_seconds(os.getpid())
    assert before is not None and after is not None and after > before
    assert bench._cpu_seconds(2**22 + 12345) is None  # no such process


def test_the_report_shows_server_cpu_per_request_and_its_ratio() -> None:
    run = {"rps": 1000.0, "p50_us": 1000, "p99_us": 2000, "errors": 0, "requests": 10_000}
    results = {
        "nodes": 1, "seconds": 1, "connections": 8, "full_admission_rps": 400.0,
        "baseline_runs": [{**run, "cpu_us": 200.0}, {**run, "cpu_us": 200.0}],
        "baseline": {**run, "cpu_us": 200.0},
        "mutate": {**run, "cpu_us": 250.0}, "validate": {**run, "cpu_us": 250.0},
        "floor": {**run, "cpu_us": 150.0},
        "decisions": {}, "ratios": {"full_admission_cpu/baseline_pair": 0.8},
    }  # fmt: skip
    text = _bench().report(results)
    assert "server CPU µs/req" in text and " 250" in text
    assert "full_admission_cpu/baseline_pair" in text and "0.80" in text
    floor = next(line for line in text.splitlines() if line.startswith("floor"))
    assert floor.split()[-1] == "150"


@pytest.mark.parametrize("name", ["allow_all_app", "allow_all_floor_app"])
def test_the_allow_all_apps_answer_every_review_allowed_with_its_uid(name: str) -> None:
    bench = _bench()
    client = AppClient(getattr(bench, name)())
    body = orjson.dumps(bench.review(bench.bench_pod("p"), "uid-1"))
    for path in ("/mutate", "/validate"):
        answer = client.post(path, content=body)
        assert answer.status_code == 200
        assert answer.json()["response"] == {"uid": "uid-1", "allowed": True}
    assert client.get("/readyz").status_code == 200
