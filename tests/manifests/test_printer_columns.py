"""`kubectl get clusterqueues` columns: every printer column names a field of the schema."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "crds"
FILTER = re.compile(r"\[[^\]]*\]")


def _resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node = schema
    for part in FILTER.sub("", json_path).strip(".").split("."):
        while node.get("type") == "array":
            node = node["items"]
        if part == "metadata" and node is schema:
            return {"type": "object"}
        node = (node.get("properties") or {}).get(part)
        if node is None:
            return None
    return node


@pytest.mark.parametrize("crd", sorted(p.name for p in CRDS.glob("*.yaml")))
def test_printer_columns_name_schema_fields(crd: str) -> None:
    doc = yaml.safe_load((CRDS / crd).read_text())
    for version in doc["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        for column in version.get("additionalPrinterColumns") or ():
            assert _resolve(schema, column["jsonPath"]) is not None, column


def test_cluster_queue_columns_show_validity_and_usage() -> None:
    doc = yaml.safe_load((CRDS / "clusterqueues.yaml").read_text())
    columns = {c["name"]: c for c in doc["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Active"]["jsonPath"].endswith('[?(@.type=="Active")].status')
    assert columns["Reason"]["jsonPath"].endswith('[?(@.type=="Active")].reason')
    assert columns["Usage"]["jsonPath"] == ".status.flavorsUsage"
