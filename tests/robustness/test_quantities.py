"""Huge quantities of issue 10: invalid at admission, naming the field; saturated for live pods."""

from __future__ import annotations

from typing import Any

import pytest

from quota.charge import QUEUE_LABEL
from quota.decision import decide
from quota.demand import pod_demand
from quota.errors import InvalidQuantity
from quota.podresources import pod_resources
from quota.quantity import INT64_MAX
from quota.recharge import recompute_charge
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Verdict
from quota.workloads import as_workload
from tests.quota.queue_builders import scenario_objects
from webhook.store.clusterstate import ClusterState

HUGE = ["1e999999", "0.000000001e999999", "1e300000", "9" * 100_000]

SCENARIO: dict[str, Any] = {
    "queues": [{"name": "a", "groups": [{"default": {"cpu": 4}}]}],
    "localQueues": {"team-a/default": "a"},
}


def cpu_pod(cpu: str, containers: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {QUEUE_LABEL: "default"}},
        "spec": {
            "containers": [
                {"name": f"c{i}", "resources": {"requests": {"cpu": cpu}}}
                for i in range(containers)
            ]
        },
    }


@pytest.mark.parametrize("value", HUGE)
def test_admission_of_an_out_of_range_quantity_is_invalid_naming_the_field(value: str) -> None:
    state = ClusterState(scenario_objects(SCENARIO))
    decision = decide(cpu_pod(value), state, Usage(), Settings())
    assert (decision.verdict, decision.reason) == (Verdict.INVALID, "InvalidObject")
    assert decision.message.startswith(
        "pod team-a/p: spec.containers[0].resources.requests[cpu]: quantity "
    )
    assert "out of range" in decision.message


@pytest.mark.parametrize("value", HUGE)
def test_live_pod_with_an_out_of_range_quantity_is_charged_the_most(value: str) -> None:
    with pytest.raises(InvalidQuantity):
        pod_resources(cpu_pod(value), "Pod team-a/p", {})
    charged = pod_resources(cpu_pod(value, containers=2), "Pod team-a/p", {}, saturate=True)
    assert charged.requests == {"cpu": INT64_MAX}
    state = ClusterState(scenario_objects(SCENARIO))
    demand = pod_demand(as_workload(cpu_pod(value)), state, saturate=True)
    assert demand.resources == {"cpu": INT64_MAX}


def test_saturating_is_only_for_bad_values() -> None:
    charged = pod_resources(cpu_pod("250m", containers=2), "Pod team-a/p", {}, saturate=True)
    assert charged.requests == {"cpu": 500}


@pytest.mark.parametrize("value", HUGE)
def test_live_pod_with_an_out_of_range_quantity_stays_in_usage(value: str) -> None:
    state = ClusterState(scenario_objects(SCENARIO))
    charge = recompute_charge(cpu_pod(value), state, Settings())
    assert charge is not None and charge.per_pod == {"cpu": INT64_MAX}
