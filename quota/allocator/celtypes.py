"""The Kubernetes CEL library functions that DRA selectors use: quantities and semver.

cel-expr-python cannot return opaque values from Python functions, so a quantity is
carried through CEL as the map `{"__quantity__": "<canonical decimal>"}` and a
semantic version as `{"__semver__": "<version>"}`. Canonical forms make CEL's own
`==` agree with the Kubernetes semantics (`quantity("1Gi") == quantity("1024Mi")`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from quota.errors import InvalidQuantity
from quota.quantity import parse_quantity

__all__ = [
    "QUANTITY_KEY",
    "SEMVER_KEY",
    "LibraryError",
    "compare_values",
    "parse_semver",
    "quantity_value",
    "semver_value",
    "to_decimal",
]

QUANTITY_KEY = "__quantity__"
SEMVER_KEY = "__semver__"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


class LibraryError(ValueError):
    """A library function was called with a value it cannot handle (a CEL evaluation error)."""


def _canonical(number: Decimal) -> str:
    if number == 0:
        return "0"
    return format(number.normalize(), "f")


def quantity_value(text: Any) -> dict[str, str]:
    """`quantity(string)`: the CEL representation of a Kubernetes quantity."""
    try:
        return {QUANTITY_KEY: _canonical(parse_quantity(text))}
    except InvalidQuantity as exc:
        raise LibraryError(f"invalid quantity {text!r}") from exc


def to_decimal(value: Any) -> Decimal:
    """The number behind a quantity map, or an int operand."""
    if isinstance(value, Mapping) and QUANTITY_KEY in value:
        return Decimal(value[QUANTITY_KEY])
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise LibraryError(f"not a quantity: {value!r}")


def parse_semver(text: str, normalize: bool = False) -> tuple[int, int, int, tuple[Any, ...]]:
    """(major, minor, patch, prerelease identifiers) of a semantic version, or raise."""
    if normalize:
        text = text.removeprefix("v")
        parts = text.split("-", 1)[0].split("+", 1)[0].split(".")
        if 0 < len(parts) < 3:
            rest = text[len(".".join(parts)) :]
            parts = [str(int(p)) if p.isdigit() else p for p in parts]
            text = ".".join(parts + ["0"] * (3 - len(parts))) + rest
    match = _SEMVER.match(text)
    if not match:
        raise LibraryError(f"invalid semver {text!r}")
    pre = tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p) for p in (match[4] or "").split(".") if p
    )
    return int(match[1]), int(match[2]), int(match[3]), pre


def semver_value(text: Any, normalize: bool = False) -> dict[str, str]:
    """`semver(string)`: the CEL representation of a semantic version."""
    if not isinstance(text, str):
        raise LibraryError(f"invalid semver {text!r}")
    major, minor, patch, _ = parse_semver(text, normalize)
    canonical = text if not normalize else f"{major}.{minor}.{patch}" + _suffix(text)
    return {SEMVER_KEY: canonical}


def _suffix(text: str) -> str:
    match = re.search(r"[-+].*$", text)
    return match.group(0) if match else ""


def _semver_key(value: Mapping[str, Any]) -> tuple[Any, ...]:
    major, minor, patch, pre = parse_semver(value[SEMVER_KEY])
    # A release sorts after its pre-releases; identifiers compare numerically or lexically.
    return (major, minor, patch, 1 if not pre else 0, pre)


def compare_values(a: Any, b: Any) -> int:
    """`compareTo` of two quantities or two semvers: -1, 0 or 1."""
    if isinstance(a, Mapping) and SEMVER_KEY in a:
        if not (isinstance(b, Mapping) and SEMVER_KEY in b):
            raise LibraryError("compareTo: cannot compare a semver with a non-semver")
        sa, sb = _semver_key(a), _semver_key(b)
        return (sa > sb) - (sa < sb)
    if isinstance(b, Mapping) and SEMVER_KEY in b:
        raise LibraryError("compareTo: cannot compare a quantity with a semver")
    da, db = to_decimal(a), to_decimal(b)
    return (da > db) - (da < db)
