"""Ordinary pod requests and DRA-backed extended resources (SPEC §3.3, §3.4)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.demand import pod_demand
from quota.errors import InvalidObject
from quota.workloads import as_workload
from tests.quota.builders import device_class
from webhook.store.clusterstate import ClusterState

CASES = yaml.safe_load((Path(__file__).parent / "fixtures/counting/pods.yaml").read_text())


def _state(case: dict[str, Any]) -> ClusterState:
    classes = case.get("classes") or {}
    return ClusterState(
        device_class(
            name, spec.get("extendedResourceName"), spec.get("created", "2026-01-01T00:00:00Z")
        )
        for name, spec in classes.items()
    )


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_pod_requests_table(case: dict[str, Any]) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": case["pod"],
    }
    before = copy.deepcopy(pod)
    if "error" in case:
        with pytest.raises(InvalidObject) as info:
            pod_demand(as_workload(pod), _state(case))
        assert info.value.obj == "Pod team-a/p"
        assert info.value.path == case["error"]["path"]
        assert case["error"]["contains"] in info.value.reason
        return
    demand = pod_demand(as_workload(pod), _state(case))
    assert dict(demand.resources) == case["resources"]
    assert demand.all_devices() == case["devices"]
    assert pod == before


def test_extended_devices_add_to_claim_devices() -> None:
    state = ClusterState(
        [
            {
                "apiVersion": "resource.k8s.io/v1beta1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "team-a"},
                "spec": {
                    "spec": {"devices": {"requests": [{"name": "g", "deviceClassName": "gpu"}]}}
                },
            }
        ]
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
            "containers": [
                {
                    "name": "a",
                    "resources": {"requests": {"deviceclass.resource.kubernetes.io/gpu": "2"}},
                }
            ],
        },
    }
    assert pod_demand(as_workload(pod), state).all_devices() == {"gpu": 3}
