"""The in-process cost benchmark drives both apps through admissions they allow."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_both_apps_answer_every_request_and_the_added_cost_is_reported() -> None:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    app_cost = importlib.import_module("app_cost")
    figures = app_cost.measure(nodes=4, requests=5, rounds=1)  # raises on any denial
    assert set(figures) == {"/mutate", "/validate"}
    for endpoint in figures.values():
        assert endpoint["draquota"] > 0 and endpoint["baseline"] > 0 and endpoint["floor"] > 0
        assert endpoint["added"] == endpoint["draquota"] - endpoint["baseline"]
        assert endpoint["decision"] == endpoint["draquota"] - endpoint["floor"]
    assert "/validate" in app_cost.report(figures)
