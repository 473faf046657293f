"""docs/operations.md says exactly what the webhooks intercept: its table against the manifests."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.manifests.loader import ROOT
from tests.manifests.test_lint import _webhooks

DOC = ROOT / "docs" / "operations.md"
SECTION = "## What it intercepts"
COLUMNS = ["webhook", "API group", "versions", "resources", "operations", "UPDATE sent when"]

Row = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _names(cell: str) -> tuple[str, ...]:
    """`` `a`, `b` `` -> ("a", "b"); the core API group is written `core`."""
    names = (name.strip().strip("`") for name in cell.split(","))
    return tuple("" if name == "core" else name for name in names)


def _documented() -> list[Row]:
    lines = [line for line in _section().splitlines() if line.startswith("|")]
    assert _cells(lines[0]) == COLUMNS
    rows = []
    for line in lines[2:]:
        webhook, group, versions, resources, operations, _ = _cells(line)
        rows.append(
            (webhook.strip("`"), _names(group), _names(versions), _names(resources),
             _names(operations))
        )  # fmt: skip
    return rows


def _configured() -> list[Row]:
    return [
        (
            hook["name"],
            tuple(rule["apiGroups"]),
            tuple(rule["apiVersions"]),
            tuple(rule["resources"]),
            tuple(rule["operations"]),
        )
        for _, hook in _webhooks()
        for rule in hook["rules"]
    ]


def test_intercepts_table_has_one_row_per_webhook_rule_and_no_other() -> None:
    documented, configured = Counter(_documented()), Counter(_configured())
    assert documented - configured == Counter(), "rows the manifests do not have"
    assert configured - documented == Counter(), "rules the table does not show"


def test_intercepts_section_states_scope_and_match_policy_of_every_webhook() -> None:
    hooks: list[dict[str, Any]] = [hook for _, hook in _webhooks()]
    assert {hook["matchPolicy"] for hook in hooks} == {"Equivalent"}
    assert {rule["scope"] for hook in hooks for rule in hook["rules"]} == {"Namespaced"}
    assert "all `scope: Namespaced`" in _section()
    assert "`matchPolicy: Equivalent`" in _section()
