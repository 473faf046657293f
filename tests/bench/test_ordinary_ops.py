"""The ordinary-traffic benchmark's figures: medians per phase, the added median and ratio, and
failures shown rather than hidden (no timing is asserted here)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module():  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("ordinary_ops")


def test_each_operation_gets_its_medians_added_median_and_ratio() -> None:
    ops = _module()
    rows = ops.summarize(
        ["pod label, managed"],
        {"pod label, managed": {"with": [9.0, 10.0, 30.0], "without": [5.0, 4.0, 6.0, 100.0]}},
        {},
    )
    (row,) = rows
    assert (row.with_ms, row.without_ms) == (10.0, 5.5)
    assert row.added_ms == 4.5 and round(row.ratio, 3) == 1.818
    assert row.samples == (3, 4) and row.failed == (0, 0) and row.failure == ""
    assert "| pod label, managed | 10.0 | 5.5 | +4.5 | 1.82 | 3 / 4 |  |" in ops.table(rows)


def test_an_operation_failing_with_draquota_is_reported_with_its_message() -> None:
    ops = _module()
    denied = "PATCH /api/v1/namespaces/a/pods/p: 400: admission webhook denied the request"
    rows = ops.summarize(
        ["pod annotate, managed", "pod eviction"],
        {"pod annotate, managed": {"without": [3.0]}, "pod eviction": {}},
        {"pod annotate, managed": {"with": [denied, denied]}},
    )
    annotate, eviction = rows
    assert annotate.with_ms is None and annotate.added_ms is None and annotate.ratio is None
    assert annotate.failed == (2, 0) and annotate.failure == denied
    assert eviction.samples == (0, 0) and eviction.failure == ""
    text = ops.table(rows)
    assert "| pod annotate, managed | n/a | 3.0 | n/a | n/a | 0 / 1 | **2 / 0** |" in text
    assert f"- pod annotate, managed: {denied}" in text


def test_rows_keep_the_order_of_the_operations() -> None:
    ops = _module()
    names = ["b", "a", "c"]
    samples = {n: {"with": [2.0], "without": [1.0]} for n in names}
    assert [r.operation for r in ops.summarize(names, samples, {})] == names


def test_a_long_denial_keeps_its_start_and_the_error_it_ends_with_on_one_line() -> None:
    ops = _module()
    denial = 'pods "p" is forbidden: expression \'a ||\n  b' + " ||\n  c" * 200
    denial += "' resulted in error: no such key: subResource"
    line = ops.one_line(denial)
    assert "\n" not in line and len(line) < 300
    assert line.startswith('pods "p" is forbidden: expression')
    assert line.endswith("resulted in error: no such key: subResource")
    assert ops.one_line("short\n  message") == "short message"
