"""Formatting of quota amounts and reasons for messages a user reads.

Kubernetes message style: lowercase start, no trailing period, location first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "MAX_LISTED",
    "borrowed_text",
    "format_amount",
    "format_amounts",
    "join_reasons",
    "lent_text",
    "listed",
]

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))
_BYTE_RESOURCES = ("memory", "ephemeral-storage")
MAX_LISTED = 5  # names a message lists before it says how many more there are


def format_amount(resource: str, value: int, unit: str = "") -> str:
    """An amount the way Kubernetes prints it: cpu from millicores, bytes with binary suffixes.

    `unit` is the style of a resource charged by device counters or capacity
    (`quota.sources.unit_of` of its nominalQuota): "binary" prints `40Gi`, "decimal" `100G`,
    with the largest suffix that divides the amount exactly (else the plain number).
    """
    if resource == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    binary = resource in _BYTE_RESOURCES or resource.startswith("hugepages-")
    suffixes = _BINARY if binary or unit == "binary" else _DECIMAL if unit == "decimal" else ()
    if value:
        for suffix, size in suffixes:
            if value % size == 0:
                return f"{value // size}{suffix}"
    return str(value)


def format_amounts(amounts: Mapping[str, int]) -> str:
    """`a=1, b=2Gi` in key order, or `-` when empty."""
    return ", ".join(f"{k}={format_amount(k, v)}" for k, v in sorted(amounts.items())) or "-"


def join_reasons(reasons: Iterable[str]) -> str:
    """Distinct reasons, sorted so that messages are deterministic."""
    return "; ".join(sorted(set(reasons)))


def listed(names: Sequence[str], limit: int = MAX_LISTED) -> str:
    """`a, b, c` or, past `limit` names, `a, b, c and 4 more`: a message stays short whatever
    the cluster holds."""
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown


def _pairs(amounts: Mapping[str, int], verb: str, fmt: Callable[[int], str]) -> list[str]:
    """`2 lent to ClusterQueue ml`, the largest amounts first, at most MAX_LISTED of them."""
    ranked = sorted(amounts.items(), key=lambda item: (-item[1], item[0]))
    parts = [f"{fmt(n)} {verb} ClusterQueue {queue}" for queue, n in ranked[:MAX_LISTED]]
    if len(ranked) > MAX_LISTED:
        rest = sum(n for _, n in ranked[MAX_LISTED:])
        parts.append(f"{fmt(rest)} {verb} {len(ranked) - MAX_LISTED} more ClusterQueues")
    return parts


def borrowed_text(
    borrowed: int, borrowed_from: Mapping[str, int], fmt: Callable[[int], str]
) -> str:
    """What a queue holds beyond its nominal quota and whose quota that is ("" when nothing):
    `2 borrowed from ClusterQueue research`; a part no member's unused quota covers (a cohort
    over quota after an admin lowered a nominal) is `1 borrowed beyond the cohort's quota`."""
    if borrowed <= 0:
        return ""
    parts = _pairs(borrowed_from, "borrowed from", fmt)
    beyond = borrowed - sum(borrowed_from.values())
    if beyond > 0:
        parts.append(f"{fmt(beyond)} borrowed beyond the cohort's quota")
    return ", ".join(parts)


def lent_text(lent_to: Mapping[str, int], fmt: Callable[[int], str]) -> str:
    """What other queues of the cohort use of this queue's nominal quota ("" when nothing):
    `2 lent to ClusterQueue ml`."""
    return ", ".join(_pairs({q: n for q, n in lent_to.items() if n > 0}, "lent to", fmt))
