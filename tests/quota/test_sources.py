"""ClusterQueue resources of kind DeviceCounter / DeviceCapacity: parsing, problems, status."""

from __future__ import annotations

from typing import Any

import pytest

from quota.devicecharge import device_catalog, unpublished_sources
from quota.errors import InvalidObject
from quota.messages import format_amount
from quota.queues import parse_cluster_queue
from quota.sources import DEVICE_COUNTER_KIND, DeviceSource, unit_of
from quota.status import sources_condition
from tests.quota.builders import device_class
from tests.quota.test_devicecharge import A100, GPU


def _queue(*resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "a"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": [r["name"] for r in resources],
                    "flavors": [{"name": "a100", "resources": list(resources)}],
                }
            ]
        },
    }


MEMORY = {
    "name": "gpu-memory",
    "kind": "DeviceCounter",
    "deviceClassNames": [GPU],
    "counter": "memory",
    "driver": GPU,
    "deviceSelector": {"cel": {"expression": "device.driver == 'gpu.example.com'"}},
    "nominalQuota": "160Gi",
}


def test_counter_resource_parses_beside_device_count() -> None:
    gpus = {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU], "nominalQuota": 8}
    queue = parse_cluster_queue(_queue(gpus, MEMORY))
    assert queue.problems == ()
    assert queue.resource_classes == {"gpus": (GPU,)}
    assert queue.sources == {
        "gpu-memory": DeviceSource(
            DEVICE_COUNTER_KIND,
            "memory",
            (GPU,),
            GPU,
            "device.driver == 'gpu.example.com'",
            "binary",
        )
    }
    assert queue.groups[0].flavors[0].resources["gpu-memory"].nominal == 160 * 2**30


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"counter": None}, "spec.resourceGroups[0].flavors[0].resources[0].counter: required"),
        ({"capacity": "x"}, "resources[0].capacity: only allowed when kind is DeviceCapacity"),
        ({"deviceClassNames": []}, "resources[0].deviceClassNames: required when kind is"),
        ({"deviceSelector": {"cel": {"expression": "device.("}}}, "deviceSelector.cel.expression"),
        ({"kind": "DeviceClass"}, "resources[0].counter: only allowed when kind is DeviceCounter"),
    ],
    ids=["no-counter", "capacity-on-counter", "no-classes", "bad-cel", "counter-on-class"],
)
def test_malformed_source_is_a_problem_naming_the_field(
    change: dict[str, Any], problem: str
) -> None:
    entry = {k: v for k, v in {**MEMORY, **change}.items() if v is not None}
    queue = parse_cluster_queue(_queue(entry))
    assert any(problem in p for p in queue.problems), queue.problems


def test_unknown_kind_is_invalid() -> None:
    with pytest.raises(InvalidObject) as failure:
        parse_cluster_queue(_queue({**MEMORY, "kind": "DeviceMemory"}))
    assert failure.value.path.endswith("resources[0].kind")


def test_amounts_print_in_the_quota_unit() -> None:
    assert [unit_of(q) for q in ("160Gi", "100G", 8, "8")] == ["binary", "decimal", "", ""]
    assert format_amount("gpu-memory", 40 * 2**30, "binary") == "40Gi"
    assert format_amount("bandwidth", 13 * 10**9, "decimal") == "13G"
    assert format_amount("gpus", 1024) == "1024"


def test_unpublished_counter_is_a_warning_on_the_queue() -> None:
    catalog = device_catalog([A100], [device_class(GPU)])
    queue = parse_cluster_queue(_queue(MEMORY, {**MEMORY, "name": "cores", "counter": "cores"}))
    unpublished = unpublished_sources(catalog, queue.sources)
    assert unpublished == ["cores: no device of gpu.example.com publishes counter cores"]
    condition = sources_condition(unpublished)
    assert (condition["status"], condition["reason"]) == ("False", "Unpublished")
    assert "cores" in condition["message"]
    assert sources_condition([])["status"] == "True"
