"""The Grafana dashboard and the alerting rules use only metrics and labels /metrics exposes."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from quota.settings import Settings
from tests.webhook.builders import AppClient, review
from webhook.app import create_app
from webhook.backend import MemoryLedger
from webhook.statedir import StateDirBackend

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
EXAMPLES = ROOT / "manifests" / "examples"
# Labels Prometheus adds to every scraped series (targets, relabelling), and histogram buckets.
TARGET_LABELS = {"namespace", "pod", "job", "instance", "service", "container", "le"}
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "absent", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "label_values", "topk", "bottomk", "offset", "bool", "clamp_min", "delta",
}  # fmt: skip
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')


@functools.cache
def exposed() -> dict[str, dict[str, set[str]]]:
    """Sample name -> label -> values, from /metrics after real admissions and a bad body."""
    backend = StateDirBackend(EXAMPLES / "cluster")
    ledger = MemoryLedger(backend.state, Settings())
    client = AppClient(create_app(backend, ledger, Settings(), None, certs_ready=lambda: True))
    for path in sorted((EXAMPLES / "workloads").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj["kind"] == "Pod":
                assert (
                    client.post("/validate", content=orjson.dumps(review(obj))).status_code == 200
                )
    assert client.post("/validate", content=b"not json").status_code == 400
    text = client.get("/metrics").text
    samples: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        # A family with no samples yet still names its series (counters end in _total).
        suffix = "_total" if family.type == "counter" else ""
        samples.setdefault(family.name + suffix, {})
        for sample in family.samples:
            labels = samples.setdefault(sample.name, {})
            for key, value in sample.labels.items():
                labels.setdefault(key, set()).add(value)
    return samples


def _expressions() -> Iterator[tuple[str, str]]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield f"dashboard: {panel['title']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"dashboard: ${variable['name']}", variable["query"]["query"]
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield f"alert: {rule['alert']}", rule["expr"]


EXPRESSIONS = list(_expressions())


def test_the_dashboard_and_the_rules_have_queries() -> None:
    where = {w.split(":")[0] for w, _ in EXPRESSIONS}
    assert where == {"dashboard", "alert"}
    assert len(EXPRESSIONS) >= 15


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_every_metric_and_label_used_is_exposed(where: str, expr: str) -> None:
    samples = exposed()
    used: list[str] = []
    for metric, label in re.findall(r"label_values\((\w+),\s*(\w+)\)", expr):
        assert label in samples.get(metric, {}), f"{where}: {metric} has no label {label}"
        return
    for metric, body in SELECTOR.findall(expr):
        for label, op, value in MATCHER.findall(body):
            if metric:
                labels = samples.get(metric, {})
                assert label in labels or label in TARGET_LABELS, f"{metric} has no label {label}"
                if op == "=" and label in ("allowed", "endpoint") and "$" not in value:
                    assert json.loads(value) in labels[label], f"{metric}{{{label}={value}}}"
    bare = SELECTOR.sub(lambda m: m.group(1) or "", STRING.sub('""', expr))
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # range selectors: [5m], [$__rate_interval]
    bare = re.sub(r"\b(by|without)\s*\(([^)]*)\)", r"\1", bare)  # grouping labels
    for word in re.findall(r"(?<![\w$.])[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
        if word in PROMQL_WORDS:
            continue
        used.append(word)
        assert word in samples, f"{where}: {word} is not a metric /metrics exposes"
    grouping = re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
    for group in grouping:
        for label in (part.strip() for part in group.split(",")):
            assert any(label in labels for labels in samples.values()) or label in TARGET_LABELS
    assert used, f"{where}: no metric found in {expr!r}"


def test_alert_rules_are_well_formed() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    for rule in rules["groups"][0]["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    orjson.loads((MONITORING / "dashboard.json").read_bytes())
