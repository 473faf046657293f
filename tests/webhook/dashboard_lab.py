"""The recorded cluster the dashboard tests read, and what the admin's page model makes of it.

tests/webhook/fixtures/dashboard/lab.yaml is recorded by `python -m
tests.webhook.record_dashboard`: cohort `lab`, research (4 GPUs, lendingLimit 2) lending 2
to ml, research full, its pod wait-0 and Job train waiting, positions 1 and 2.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from quota.queuetable import queue_table
from quota.settings import Settings
from webhook.commands._cluster import memory_usage
from webhook.dashboard.model import cluster_cards, waiting
from webhook.store.clusterstate import ClusterState

__all__ = ["LAB", "admin_view", "lab_objects", "of"]

LAB = Path(__file__).parent / "fixtures" / "dashboard" / "lab.yaml"


def lab_objects() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(LAB.read_text(encoding="utf-8")) if doc]


def of(objects: list[dict[str, Any]], kind: str, namespace: str | None = None) -> list[Any]:
    """The objects of `kind` (in `namespace` when given)."""
    return [
        o
        for o in objects
        if o["kind"] == kind and namespace in (None, o["metadata"].get("namespace"))
    ]


def admin_view(objects: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """What the admin's page shows: every ClusterQueue's card, and the waiting rows."""
    state = ClusterState(copy.deepcopy(objects))
    table = queue_table(state.snapshot(), Settings())
    usage = memory_usage(state, Settings())
    rows = waiting(of(objects, "Pod"), of(objects, "Job"), of(objects, "Event"), {})
    return cluster_cards(table, usage, of(objects, "LocalQueue"), rows), rows
