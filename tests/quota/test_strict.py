"""Strict decoding of draquota.io objects: an unknown field is an error with its path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.errors import InvalidObject
from quota.queues import (
    CLUSTER_QUEUE_FIELDS,
    LOCAL_QUEUE_FIELDS,
    RESOURCE_FLAVOR_FIELDS,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
)
from quota.queuetable import queue_table
from quota.settings import Settings
from tests.quota.test_queues import _with
from webhook.store.clusterstate import ClusterState

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "crds"


@pytest.mark.parametrize(
    ("path", "field", "hint"),
    [
        pytest.param("spec.cohrot", "spec.cohrot", "cohort", id="typo-in-spec"),
        pytest.param(
            "spec.resourceGroups.0.flavors.0.resources.1.nominalQouta",
            "spec.resourceGroups[0].flavors[0].resources[1].nominalQouta",
            "nominalQuota",
            id="typo-deep-in-a-list",
        ),
        pytest.param("spec.fairSharing", "spec.fairSharing", None, id="kueue-field-not-supported"),
        pytest.param("specs", "specs", "spec", id="top-level"),
    ],
)
def test_unknown_cluster_queue_field_is_an_error_with_its_path(
    path: str, field: str, hint: str | None
) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_cluster_queue(_with(path, "research"))
    assert (info.value.obj, info.value.path) == ("ClusterQueue a", field)
    assert info.value.reason.startswith("unknown field")
    assert (f'did you mean "{hint}"' in info.value.reason) == bool(hint)


def test_queue_with_an_unknown_field_is_invalid_and_admits_nothing() -> None:
    state = ClusterState()
    state.upsert(_with("spec.cohrot", "research"))
    table = queue_table(state, Settings())
    assert "a" not in table.queues
    assert "spec.cohrot: unknown field" in table.invalid["a"]


def test_unknown_fields_of_local_queue_and_flavor() -> None:
    local = {
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "team-a"},
        "spec": {"clusterQueue": "a", "clusterQeueu": "b"},
    }
    flavor = {"kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {"nodeLabel": {}}}
    with pytest.raises(InvalidObject, match=r"spec.clusterQeueu: unknown field"):
        parse_local_queue(local)
    with pytest.raises(
        InvalidObject, match=r'spec.nodeLabel: unknown field \(did you mean "nodeLabels"'
    ):
        parse_resource_flavor(flavor)


def _crd_fields(schema: dict[str, Any]) -> Any:
    if schema.get("type") == "array" and schema["items"].get("type") == "object":
        return (_crd_fields(schema["items"]),)
    properties = schema.get("properties")
    if not properties:
        return None
    return {name: _crd_fields(sub) for name, sub in properties.items()}


@pytest.mark.parametrize(
    ("crd", "fields"),
    [
        ("clusterqueues.yaml", CLUSTER_QUEUE_FIELDS),
        ("localqueues.yaml", LOCAL_QUEUE_FIELDS),
        ("resourceflavors.yaml", RESOURCE_FLAVOR_FIELDS),
    ],
)
def test_strict_fields_are_the_crd_schema(crd: str, fields: Any) -> None:
    doc = yaml.safe_load((CRDS / crd).read_text())
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    expected = _crd_fields(schema)
    expected["status"] = None  # written by draquota itself, not decoded
    assert dict(fields) == expected
