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
    assert columns["Usage"]["jsonPath"] == ".status.usageSummary"


def test_cluster_queue_wide_columns_show_the_preemption_policy() -> None:
    # `kubectl get cq -o wide` (priority 1); the CRD defaults both fields to Never.
    doc = yaml.safe_load((CRDS / "clusterqueues.yaml").read_text())
    columns = {c["name"]: c for c in doc["spec"]["versions"][0]["additionalPrinterColumns"]}
    shown = {
        name: (columns[name]["jsonPath"], columns[name].get("priority"))
        for name in ("Reclaim", "Within CQ")
    }
    assert shown == {
        "Reclaim": (".spec.preemption.reclaimWithinCohort", 1),
        "Within CQ": (".spec.preemption.withinClusterQueue", 1),
    }


def _parts(json_path: str) -> list[tuple[str, bool]]:
    """`.a.b[?(@.x=="y")].c` -> [("a", False), ("b", True), ("c", False)]: name, filtered."""
    parts = []
    for part in FILTER.sub("[?]", json_path).strip(".").split("."):
        name, _, rest = part.partition("[")
        parts.append((name, rest.startswith("?")))
    return parts


# ResourceFlavor's Node Labels column (a map) is left to its own CRD's owner.
@pytest.mark.parametrize("crd", ["clusterqueues.yaml", "localqueues.yaml"])
def test_printer_columns_show_one_value_not_json(crd: str) -> None:
    # The API server prints a list or an object as raw JSON, and of `[*]` only the first item.
    doc = yaml.safe_load((CRDS / crd).read_text())
    for version in doc["spec"]["versions"]:
        for column in version.get("additionalPrinterColumns") or ():
            if column["jsonPath"].startswith(".metadata."):
                continue
            node = version["schema"]["openAPIV3Schema"]
            for name, filtered in _parts(column["jsonPath"]):
                node = node["properties"][name]
                if node.get("type") == "array":
                    assert filtered, f"{crd} {column['name']}: {column['jsonPath']} is a list"
                    node = node["items"]
            assert node.get("type") not in ("array", "object"), f"{crd} {column['name']}"
            assert node.get("type") == column["type"], f"{crd} {column['name']}"


def test_local_queue_columns_show_the_counts_and_the_cohort() -> None:
    doc = yaml.safe_load((CRDS / "localqueues.yaml").read_text())
    columns = {c["name"]: c for c in doc["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert (columns["Admitted"]["jsonPath"], columns["Admitted"]["type"]) == (
        ".status.admittedWorkloads",
        "integer",
    )
    assert (columns["Pending"]["jsonPath"], columns["Pending"]["type"]) == (
        ".status.pendingWorkloads",
        "integer",
    )
    assert columns["Admitted"].get("priority", 0) == columns["Pending"].get("priority", 0) == 0
    assert columns["Cohort"]["jsonPath"] == ".status.clusterQueue.cohort"
