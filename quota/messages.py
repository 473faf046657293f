"""Formatting of quota amounts and reasons for messages a user reads.

Kubernetes message style: lowercase start, no trailing period, location first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["format_amount", "format_amounts", "join_reasons"]

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_BYTE_RESOURCES = ("memory", "ephemeral-storage")


def format_amount(resource: str, value: int) -> str:
    """An amount the way Kubernetes prints it: cpu from millicores, bytes with binary suffixes."""
    if resource == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if (resource in _BYTE_RESOURCES or resource.startswith("hugepages-")) and value:
        for suffix, size in _BINARY:
            if value % size == 0:
                return f"{value // size}{suffix}"
    return str(value)


def format_amounts(amounts: Mapping[str, int]) -> str:
    """`a=1, b=2Gi` in key order, or `-` when empty."""
    return ", ".join(f"{k}={format_amount(k, v)}" for k, v in sorted(amounts.items())) or "-"


def join_reasons(reasons: Iterable[str]) -> str:
    """Distinct reasons, sorted so that messages are deterministic."""
    return "; ".join(sorted(set(reasons)))
