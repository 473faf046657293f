"""Quota metrics on the real control plane: what an admin's Prometheus scrapes.

Pods are created with kubectl, so the API server calls draquota's webhooks for them; then
each replica's /metrics is read. Every replica computes the quota gauges from its own
cluster view, so every replica is asserted. Quota, usage, lent and borrowed are in the
same units (cpu in millicores), labelled `cluster_queue`, `flavor`, `resource`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import GPU_CLASS, Flavor, Scenario, gpu_pod, scenario

pytestmark = pytest.mark.e2e

NOMINAL = "draquota_cluster_queue_nominal_quota"
BORROWING_LIMIT = "draquota_cluster_queue_borrowing_limit"
LENDING_LIMIT = "draquota_cluster_queue_lending_limit"
LENT = "draquota_cluster_queue_lent"
BORROWED = "draquota_cluster_queue_borrowed"


def _create(s: Scenario, *pods: dict[str, Any]) -> None:
    s.cluster.kubectl("create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump_all(pods))


def _everywhere(installed: Draquota, name: str, **labels: str) -> list[float | None]:
    """The series `name{labels}` as each replica serves it (None where it has none)."""
    return [r.metric(name, **labels) for r in installed.replicas]


@pytest.fixture(scope="module")
def single(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-metrics", Flavor("main", 4, {"e2e-metrics-1": 8}, cpu=2))


def test_nominal_quota_of_the_queue_is_exported_beside_its_usage(single: Scenario) -> None:
    _create(single, gpu_pod("train-0", 2), gpu_pod("train-1", 1))
    eventually(lambda: single.usage("main") == [3.0] * 3, timeout=30)
    labels = {"cluster_queue": single.name, "flavor": f"{single.name}-main"}
    everywhere = len(single.installed.replicas)
    assert _everywhere(single.installed, NOMINAL, resource="gpus", **labels) == [4.0] * everywhere
    # 2 cores of quota and 2 x 10m requested, both in millicores
    assert _everywhere(single.installed, NOMINAL, resource="cpu", **labels) == [2000.0] * everywhere
    assert single.usage("main", "cpu") == [20.0] * everywhere
    # no limits set, no cohort: none of those series
    for name in (BORROWING_LIMIT, LENDING_LIMIT, LENT, BORROWED):
        assert _everywhere(single.installed, name, resource="gpus", **labels) == [None] * everywhere


def _lender(borrower: Scenario, name: str, cohort: str) -> dict[str, Any]:
    """A ClusterQueue of no namespace in `cohort`, lending 2 of its 4 GPUs of the borrower's
    flavor (the issue's research queue)."""
    gpus = {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS],
            "nominalQuota": 4, "lendingLimit": 2}  # fmt: skip
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [
                {
                    "coveredResources": ["gpus"],
                    "flavors": [{"name": f"{borrower.name}-main", "resources": [gpus]}],
                }
            ],
        },
    }


def test_quota_a_member_lends_is_lent_by_it_and_borrowed_by_the_other(
    draquota_cluster: Draquota,
) -> None:
    borrower = scenario(
        draquota_cluster, "e2e-metrics-ml", Flavor("main", 0, {"e2e-metrics-ml-1": 4})
    )
    lender, cohort = "e2e-metrics-research", "e2e-metrics-lab"
    borrower.cluster.apply(yaml.safe_dump(_lender(borrower, lender, cohort)))
    borrower.cluster.kubectl(
        "patch", "clusterqueue", borrower.name, "--type", "merge",
        "-p", json.dumps({"spec": {"cohort": cohort}}),
    )  # fmt: skip
    flavor, replicas = f"{borrower.name}-main", len(draquota_cluster.replicas)
    at_lender = {"cluster_queue": lender, "flavor": flavor, "resource": "gpus"}
    at_borrower = {"cluster_queue": borrower.name, "flavor": flavor, "resource": "gpus"}
    # every replica sees the cohort before the borrower submits
    eventually(
        lambda: (
            _everywhere(draquota_cluster, NOMINAL, **at_lender) == [4.0] * replicas
            and _everywhere(draquota_cluster, BORROWED, **at_borrower) == [0.0] * replicas
        ),
        timeout=30,
    )
    _create(borrower, gpu_pod("borrows-2", 2))
    eventually(
        lambda: (
            _everywhere(draquota_cluster, BORROWED, **at_borrower) == [2.0] * replicas
            and _everywhere(draquota_cluster, LENT, **at_lender) == [2.0] * replicas
        ),
        timeout=30,
    )
    assert _everywhere(draquota_cluster, LENDING_LIMIT, **at_lender) == [2.0] * replicas
    assert _everywhere(draquota_cluster, LENT, **at_borrower) == [0.0] * replicas
    assert _everywhere(draquota_cluster, BORROWED, **at_lender) == [0.0] * replicas
    assert _everywhere(draquota_cluster, "draquota_queue_usage", **at_borrower) == [2.0] * replicas
