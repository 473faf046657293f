"""The cluster recorded from the real v1.36.2 control plane in tests/webhook/fixtures/preemption
(tests/webhook/kube/record_preemption.py): objects exactly as the API server served them.

At recording time two pods of namespace `ml` were being deleted (grace 30 s: `tune-0`, and
`tune-25mz2` of Job `tune`), `research/r-0` and `r-1` ran, `r-2` and `r-3` waited gated by
draquota; every pod's claim was generated from template `gpu` (one GPU).
"""

from __future__ import annotations

import copy
import datetime as dt
from functools import cache
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RECORDED", "epoch", "recorded", "recorded_object", "recorded_objects"]

RECORDED = Path(__file__).parent / "webhook" / "fixtures" / "preemption" / "admin"


@cache
def _documents() -> tuple[dict[str, Any], ...]:
    return tuple(
        doc
        for path in sorted(RECORDED.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc
    )


def recorded_objects() -> list[dict[str, Any]]:
    """Every recorded object (a fresh copy: tests may change them)."""
    return copy.deepcopy(list(_documents()))


def recorded(kind: str) -> list[dict[str, Any]]:
    """The recorded objects of one kind (fresh copies)."""
    return [obj for obj in recorded_objects() if obj.get("kind") == kind]


def recorded_object(kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    """One recorded object (a fresh copy)."""
    for obj in recorded(kind):
        metadata = obj["metadata"]
        if metadata["name"] == name and metadata.get("namespace") == namespace:
            return obj
    raise KeyError(f"no recorded {kind} {namespace}/{name}")


def epoch(timestamp: str) -> float:
    """An API server timestamp (RFC 3339, `Z`) in seconds since the epoch."""
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
