"""Device taints versus request tolerations (KEP-5055)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BLOCKING_EFFECTS", "taint_blocks", "tolerates"]

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (empty effect/key match anything)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def taint_blocks(
    taints: Iterable[Mapping[str, Any]], tolerations: Iterable[Mapping[str, Any]]
) -> bool:
    """True when some NoSchedule/NoExecute taint is not tolerated; other effects never block."""
    tolerations = tuple(tolerations)
    return any(
        taint.get("effect") in BLOCKING_EFFECTS
        and not any(tolerates(t, taint) for t in tolerations)
        for taint in taints
    )
