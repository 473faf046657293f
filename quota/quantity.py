"""Kubernetes quantities, parsed in exactly one place.

Quota arithmetic works on integers from here on: CPU in millicores, every other
resource in its base unit (bytes, devices, ...), the way Kueue stores amounts.
Sums saturate at int64 so that no charge can wrap around.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from quota.errors import InvalidQuantity

__all__ = ["INT64_MAX", "amount", "parse_quantity", "sat_add", "sat_mul", "whole_quantity"]

INT64_MAX = 2**63 - 1

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)
# Milli-units for CPU mirror Kueue's resource.Quantity.MilliValue for "cpu".
_MILLI_RESOURCES = frozenset({"cpu"})


def parse_quantity(value: object, obj: str = "", path: str = "") -> Decimal:
    """Parse a Kubernetes quantity (`500m`, `2Gi`, `1e3`, `4`) into a Decimal."""
    if isinstance(value, bool):
        raise InvalidQuantity(obj, path, f"invalid quantity {value!r}")
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidQuantity(obj, path, f"invalid quantity {value!r}")
        return Decimal(str(value))
    if not isinstance(value, str):
        raise InvalidQuantity(obj, path, f"invalid quantity {value!r}")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise InvalidQuantity(obj, path, f"invalid quantity {value!r}")
    try:
        number = Decimal(match["num"])
        if match["exp"]:
            return number * (Decimal(10) ** int(match["exp"][1:]))
        return number * _SUFFIXES[match["suffix"] or ""]
    except (InvalidOperation, OverflowError) as exc:
        raise InvalidQuantity(obj, path, f"invalid quantity {value!r}") from exc


def _clamp(number: Decimal) -> int:
    rounded = int(number.to_integral_value(rounding=ROUND_CEILING))
    return min(rounded, INT64_MAX)


def amount(resource: str, value: object, obj: str = "", path: str = "") -> int:
    """A non-negative quota amount: millicores for cpu, base units (rounded up) otherwise."""
    number = parse_quantity(value, obj, path)
    if number < 0:
        raise InvalidQuantity(obj, path, f"negative quantity {value!r}")
    if resource in _MILLI_RESOURCES:
        number *= 1000
    return _clamp(number)


def whole_quantity(value: object, obj: str = "", path: str = "") -> int:
    """A non-negative whole number of things (devices); a fraction is an error, not a rounding."""
    number = parse_quantity(value, obj, path)
    if number < 0:
        raise InvalidQuantity(obj, path, f"negative quantity {value!r}")
    if number != number.to_integral_value():
        raise InvalidQuantity(obj, path, f"must be a whole number of devices, got {value!r}")
    return min(int(number), INT64_MAX)


def sat_add(*values: int) -> int:
    """Sum of non-negative amounts, saturating at int64 instead of wrapping."""
    return min(sum(values), INT64_MAX)


def sat_mul(a: int, b: int) -> int:
    """Product of non-negative amounts, saturating at int64."""
    return min(a * b, INT64_MAX)
