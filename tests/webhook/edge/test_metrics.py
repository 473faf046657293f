"""Quota, limits, lending and usage on /metrics (webhook.edge.metrics), as an admin reads them.

The app runs over the example cluster of manifests/examples/cluster (the same files
tests/e2e/test_examples.py applies to the real API server): ClusterQueues team-a and
team-b in cohort research, team-a holding 3 on-demand GPUs through live pods. Pods are
created through /mutate and /validate as the API server sends them
(tests/security/cluster.py), so usage is what real admissions left.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from quota.queuetable import queue_table
from quota.settings import Settings
from tests.security.cluster import Cluster
from tests.webhook.builders import QUEUE, cluster_state
from webhook.edge.metrics import quota_families

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
GI = 2**30
Series = dict[tuple[str, str, str], float]


def _example_cluster() -> Cluster:
    objects = [
        obj
        for path in sorted((EXAMPLES / "cluster").glob("*.yaml"))
        for obj in yaml.safe_load_all(path.read_text())
        if obj
    ]
    return Cluster(objects)


def _scrape(*workloads: str) -> dict[str, Series]:
    """Every quota-labelled gauge of /metrics after creating the example workloads named."""
    cluster = _example_cluster()
    for name in workloads:
        answer = cluster.create(yaml.safe_load((EXAMPLES / "workloads" / name).read_text()))
        assert answer["allowed"], answer
    out: dict[str, Series] = {}
    for family in text_string_to_metric_families(cluster.client.get("/metrics").text):
        series = out.setdefault(family.name, {})
        for sample in family.samples:
            labels = sample.labels
            if set(labels) == {"cluster_queue", "flavor", "resource"}:
                key = (labels["cluster_queue"], labels["flavor"], labels["resource"])
                series[key] = sample.value
    return out


def test_nominal_quota_of_every_queue_flavor_and_resource_in_usage_units() -> None:
    scraped = _scrape("01-admit.yaml")
    assert scraped["draquota_cluster_queue_nominal_quota"] == {
        ("team-a", "default-flavor", "cpu"): 64_000,  # millicores, as usage
        ("team-a", "default-flavor", "memory"): 256 * GI,
        ("team-a", "default-flavor", "nics"): 4,
        ("team-a", "on-demand", "gpus"): 4,
        ("team-a", "spot", "gpus"): 4,
        ("team-b", "default-flavor", "cpu"): 64_000,
        ("team-b", "default-flavor", "memory"): 256 * GI,
        ("team-b", "on-demand", "gpus"): 4,
        ("team-b", "spot", "gpus"): 4,
    }
    usage = scraped["draquota_queue_usage"]
    assert usage[("team-a", "default-flavor", "cpu")] == 3_000  # 2 cores live, 1 admitted
    assert usage[("team-a", "on-demand", "gpus")] == 4  # at nominal


def test_limits_only_where_the_queue_sets_them() -> None:
    scraped = _scrape()
    assert scraped["draquota_cluster_queue_borrowing_limit"] == {
        ("team-a", "on-demand", "gpus"): 4,
        ("team-a", "spot", "gpus"): 0,  # set to 0: may not borrow at all
    }
    assert scraped["draquota_cluster_queue_lending_limit"] == {("team-a", "on-demand", "gpus"): 2}


def test_quota_borrowed_beyond_nominal_is_shown_lent_by_the_member_it_came_from() -> None:
    scraped = _scrape("01-admit.yaml", "02-borrow.yaml")  # team-a: 6 on-demand GPUs of 4
    borrowed = scraped["draquota_cluster_queue_borrowed"]
    lent = scraped["draquota_cluster_queue_lent"]
    assert {k: v for k, v in borrowed.items() if v} == {("team-a", "on-demand", "gpus"): 2}
    assert {k: v for k, v in lent.items() if v} == {("team-b", "on-demand", "gpus"): 2}
    # every cohort member has both series for every flavor-resource it lists, zeros included
    assert set(lent) == set(borrowed) == set(scraped["draquota_cluster_queue_nominal_quota"])


def test_a_queue_without_a_cohort_has_quota_but_no_lending_series() -> None:
    table = queue_table(cluster_state(gpus=2).snapshot(), Settings())
    families = {f.name: f.samples for f in quota_families(table, {})}
    assert [(s.labels, s.value) for s in families["draquota_cluster_queue_nominal_quota"]] == [
        ({"cluster_queue": QUEUE, "flavor": "a100", "resource": "gpu"}, 2.0)
    ]
    assert families["draquota_cluster_queue_lent"] == []
    assert families["draquota_cluster_queue_borrowed"] == []


def test_before_usage_was_ever_read_nothing_is_attributed_as_lent_or_borrowed() -> None:
    table = queue_table(_example_cluster().state.snapshot(), Settings())
    families = {f.name: f.samples for f in quota_families(table, None)}
    assert families["draquota_cluster_queue_nominal_quota"]
    assert families["draquota_cluster_queue_lent"] == []
    assert families["draquota_cluster_queue_borrowed"] == []
