"""The Grafana dashboard and the alerting rules use only metrics and labels /metrics exposes.

"Exposes" is what app instances serve after real work on the example cluster
(manifests/examples): `serve --state` deciding the example pods and refusing a body, and a
replica whose example pods and queueing ClusterQueue's pods are created through /mutate
and /validate as the API server sends them (tests/security/cluster.py), with the queueing
controller admitting waiting pods, and preempting (tests/webhook/preemption_builders.py);
so every family has labelled samples.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from quota.cluster import Obj
from quota.settings import Settings
from quota.waiting import ADMISSION_GATE
from tests.security.cluster import Cluster
from tests.webhook import preemption_builders as lab
from tests.webhook.builders import AppClient, review
from webhook.edge.app import create_app
from webhook.edge.metrics import Metrics
from webhook.ledger.memory import MemoryLedger
from webhook.queueing.controller import QueueController
from webhook.store.statedir import StateDirBackend

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
EXAMPLES = ROOT / "manifests" / "examples"
# Labels Prometheus adds to every scraped series (targets, relabelling), and histogram buckets.
TARGET_LABELS = {"namespace", "pod", "job", "instance", "service", "container", "le"}
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "absent", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "label_values", "topk", "bottomk", "offset", "bool", "clamp_min", "delta",
    "humanizeDuration",
}  # fmt: skip
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
TEMPLATE_LABEL = re.compile(r"\{\{\s*(?:\$labels\.)?([a-zA-Z_]\w*)\s*\}\}")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')


class _Writer:
    """The queueing controller's pod writes, through the stand-in API server."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def admit(self, obj: Obj, node_selector: dict[str, str], message: str) -> bool:
        pod = copy.deepcopy(dict(obj))
        gates = pod["spec"].get("schedulingGates", [])
        pod["spec"]["schedulingGates"] = [g for g in gates if g["name"] != ADMISSION_GATE]
        pod["spec"]["nodeSelector"] = {**pod["spec"].get("nodeSelector", {}), **node_selector}
        return bool(self.cluster.update(pod)["allowed"])

    def start(self, job: Obj, node_selector: dict[str, str], message: str) -> bool:
        return False

    def wait(self, obj: Obj, message: str) -> bool:
        return True


def _docs(*paths: Path) -> list[dict[str, Any]]:
    return [obj for path in paths for obj in yaml.safe_load_all(path.read_text()) if obj]


def _samples(text: str, into: dict[str, dict[str, set[str]]]) -> None:
    """Add sample name -> label -> values of a /metrics text."""
    for family in text_string_to_metric_families(text):
        # A family with no samples yet still names its series (counters end in _total).
        suffix = "_total" if family.type == "counter" else ""
        into.setdefault(family.name + suffix, {})
        for sample in family.samples:
            labels = into.setdefault(sample.name, {})
            for key, value in sample.labels.items():
                labels.setdefault(key, set()).add(value)


def _served_state_dir() -> str:
    """/metrics of `serve --state` over the example cluster, after the example pods (not
    stored: the directory is the cluster) and a refused body; it counts reloads as relists."""
    backend = StateDirBackend(EXAMPLES / "cluster")
    ledger = MemoryLedger(backend.state, Settings())
    client = AppClient(create_app(backend, ledger, Settings(), None))
    for obj in _docs(*sorted((EXAMPLES / "workloads").glob("*.yaml"))):
        if obj["kind"] == "Pod":
            assert client.post("/validate", content=orjson.dumps(review(obj))).status_code == 200
    assert client.post("/validate", content=b"not json").status_code == 400
    return client.get("/metrics").text


def _queueing_replica() -> str:
    """/metrics of a replica over the example cluster and its queueing ClusterQueue, after
    the example pods were created and the queueing controller admitted 2 of 3 waiting pods
    (2 GPUs each, 4 GPUs) ten minutes after they were created."""
    cluster = Cluster(
        _docs(*sorted((EXAMPLES / "cluster").glob("*.yaml")), EXAMPLES / "queueing/00-queues.yaml")
    )
    for obj in _docs(*sorted((EXAMPLES / "workloads").glob("*.yaml"))):
        if obj["kind"] == "Pod":
            cluster.create(obj)
    for obj in _docs(EXAMPLES / "queueing" / "02-queue.yaml")[:3]:
        assert cluster.create(obj)["allowed"]
    cluster.clock.now += 600
    controller = QueueController(
        cluster.backend, cluster.ledger, cluster.settings, None, _Writer(cluster),
        wall=cluster.clock, metrics=cluster.client.app.state.metrics,
    )  # fmt: skip
    assert len(controller.run_once().admitted) == 2
    return cluster.client.get("/metrics").text


def _preempting_controller() -> str:
    """The queueing controller's metrics after research reclaimed the 2 GPUs ml borrowed from it
    (the cohort of tests/webhook/preemption_builders.py): two preemptions."""
    cluster = lab.reclaim_lab()
    lab.submit(cluster, *(lab.gpu_pod("ml", f"ml-{i}") for i in range(2)))
    lab.controller(cluster)[0].run_once()
    lab.submit(cluster, *(lab.gpu_pod("research", f"r-{i}") for i in range(4)))
    metrics = Metrics()
    lab.controller(cluster, metrics)[0].run_once()
    return metrics.render().decode()


@functools.cache
def exposed() -> dict[str, dict[str, set[str]]]:
    """Sample name -> label -> values that the app exposes after real work (module doc)."""
    samples: dict[str, dict[str, set[str]]] = {}
    _samples(_served_state_dir(), samples)
    _samples(_queueing_replica(), samples)
    _samples(_preempting_controller(), samples)
    return samples


@dataclass(frozen=True)
class Query:
    where: str
    expr: str
    shown: str = ""  # the legend or annotations: the labels they name must survive the query


def _queries() -> Iterator[Query]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield Query(f"dashboard: {panel['title']}", target["expr"], target["legendFormat"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield Query(f"dashboard: ${variable['name']}", variable["query"]["query"])
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            shown = " ".join(rule["annotations"].values())
            yield Query(f"alert: {rule['alert']}", rule["expr"], shown)


QUERIES = list(_queries())


def test_the_dashboard_and_the_rules_have_queries() -> None:
    where = {q.where.split(":")[0] for q in QUERIES}
    assert where == {"dashboard", "alert"}
    assert len(QUERIES) >= 15


def _metrics_used(query: Query) -> list[str]:
    """The metric names of a query: what is left without strings, selectors' bodies, ranges,
    grouping labels and PromQL's own words."""
    bare = SELECTOR.sub(lambda m: m.group(1) or "", STRING.sub('""', query.expr))
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # range selectors: [5m], [$__rate_interval]
    bare = GROUPING.sub(r"\1", bare)
    words = re.findall(r"(?<![\w$.])[a-zA-Z_:][a-zA-Z0-9_:]*", bare)
    return [word for word in words if word not in PROMQL_WORDS]


@pytest.mark.parametrize("query", QUERIES, ids=[q.where for q in QUERIES])
def test_every_metric_and_label_used_is_exposed(query: Query) -> None:
    samples, where = exposed(), query.where
    for metric, label in re.findall(r"label_values\((\w+),\s*(\w+)\)", query.expr):
        assert label in samples.get(metric, {}), f"{where}: {metric} has no label {label}"
        return
    used = _metrics_used(query)
    assert used, f"{where}: no metric found in {query.expr!r}"
    for word in used:
        assert word in samples, f"{where}: {word} is not a metric /metrics exposes"
    for metric, body in SELECTOR.findall(query.expr):
        for label, op, value in MATCHER.findall(body):
            if metric:
                labels = samples.get(metric, {})
                assert label in labels or label in TARGET_LABELS, f"{metric} has no label {label}"
                if op == "=" and label in ("allowed", "endpoint") and "$" not in value:
                    assert json.loads(value) in labels[label], f"{metric}{{{label}={value}}}"
    known = TARGET_LABELS.union(*(samples[metric] for metric in used))
    for _, group in GROUPING.findall(query.expr):
        for label in filter(None, (part.strip() for part in group.split(","))):
            assert label in known, f"{where}: no metric of {used} has label {label}"


@pytest.mark.parametrize("query", [q for q in QUERIES if q.shown], ids=lambda q: q.where)
def test_labels_a_legend_or_alert_shows_are_kept_by_its_query(query: Query) -> None:
    """A label aggregated away shows empty (`{{cluster_queue}}` of a `sum by (le)`)."""
    kept = [
        {part.strip() for part in group.split(",")}
        for word, group in GROUPING.findall(query.expr)
        if word == "by"
    ]
    for label in TEMPLATE_LABEL.findall(query.shown):
        assert all(label in group for group in kept), f"{query.where}: {label} is aggregated away"
        assert any(label in exposed()[metric] for metric in _metrics_used(query)) or (
            label in TARGET_LABELS
        ), f"{query.where}: no metric of the query has label {label}"


def test_queues_have_panels_and_alerts_for_quota_pending_and_wait() -> None:
    """What an admin watches of the queues is on the dashboard and alerted on."""
    panels = " ".join(q.expr for q in QUERIES if q.where.startswith("dashboard"))
    alerts = " ".join(q.expr for q in QUERIES if q.where.startswith("alert"))
    for metric in (
        "draquota_cluster_queue_nominal_quota",
        "draquota_cluster_queue_borrowing_limit",
        "draquota_cluster_queue_lent",
        "draquota_cluster_queue_borrowed",
        "draquota_pending_workloads",
        "draquota_queue_wait_seconds_bucket",
    ):
        assert metric in panels, metric
    for metric in ("draquota_pending_workloads", "draquota_queue_wait_seconds_bucket"):
        assert metric in alerts, metric


def test_alert_rules_are_well_formed() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    for rule in rules["groups"][0]["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    orjson.loads((MONITORING / "dashboard.json").read_bytes())
