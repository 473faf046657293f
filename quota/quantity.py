"""Kubernetes quantities, parsed in exactly one place.

Quota arithmetic works on integers from here on: CPU in millicores, every other
resource in its base unit (bytes, devices, ...), the way Kueue stores amounts.
Sums saturate at int64 so that no charge can wrap around.

Bounds are Kubernetes' own (`resource.ParseQuantity` and the Quantity docs): the
grammar `<sign><digits>[.<digits>]<suffix>` with a suffix of `n u m k M G T P E`,
`Ki Mi Gi Ti Pi Ei` or a decimal exponent `e<int64>`; at most nine decimal places,
a non-zero value smaller than `1n` rounding up to `1n`; no magnitude above 2^63-1.
A value past that bound is an `InvalidQuantity` that names the field. Parsing is one
pass over the string and never builds a number larger than the bound, so a hostile
`1e999999` or a megabyte of digits costs time linear in its length.

A live pod already stored with such a value is charged as much as possible, not
dropped: `saturating_amount` maps an out-of-range or unparseable value to the most
an amount can hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Context, Decimal, localcontext
from types import MappingProxyType

from quota.errors import InvalidQuantity

__all__ = [
    "INT64_MAX",
    "MAX_EXPONENT_DIGITS",
    "amount",
    "parse_quantity",
    "sat_add",
    "sat_mul",
    "saturating_amount",
    "whole_quantity",
]

INT64_MAX = 2**63 - 1
# ParseQuantity reads the exponent with strconv.ParseInt(..., 64): at most 19 digits.
MAX_EXPONENT_DIGITS = 19
_NANO_PLACES = 9
_MAX_INTEGER_DIGITS = len(str(INT64_MAX))  # 19

_DECIMAL_SUFFIXES: Mapping[str, int] = MappingProxyType(
    {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
)
_BINARY_SUFFIXES: Mapping[str, int] = MappingProxyType(
    {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
)
# Each piece is matched on its own from where the last one ended: no backtracking across
# pieces, so a megabyte of digits followed by a bad character is rejected in linear time.
_DIGITS = re.compile(r"[0-9]*")
_LETTERS = re.compile(r"[A-Za-z]*")
# Values below are at most 19 integer digits and 9 places, times at most 2^60 (19 digits).
# A prototype, never changed: localcontext() works on a copy of it.
_CONTEXT = Context(prec=60)
_BOUND = Decimal(INT64_MAX)
# Milli-units for CPU mirror Kueue's resource.Quantity.MilliValue for "cpu".
_MILLI_RESOURCES = frozenset({"cpu"})


class _OutOfRange(Exception):
    """The value parses but its magnitude is above 2^63-1 (`negative`: its sign)."""

    def __init__(self, negative: bool) -> None:
        self.negative = negative


def _show(value: object, limit: int = 48) -> str:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    return repr(value)


def _pieces(text: str) -> tuple[str, str, str, str, str]:
    """(sign, integer digits, fraction digits, suffix letters, rest) of a quantity string."""
    pos = 1 if text[:1] in ("+", "-") else 0
    sign = text[:pos]
    match = _DIGITS.match(text, pos)
    assert match is not None  # [0-9]* always matches
    whole, pos = match.group(), match.end()
    fraction = ""
    if text[pos : pos + 1] == ".":
        match = _DIGITS.match(text, pos + 1)
        assert match is not None
        fraction, pos = match.group(), match.end()
    match = _LETTERS.match(text, pos)
    assert match is not None
    return sign, whole, fraction, match.group(), text[match.end() :]


def _parse_text(text: str) -> Decimal:
    """The value of a quantity string; ValueError when it is no quantity, _OutOfRange."""
    sign, whole, fraction, letters, tail = _pieces(text)
    if not whole and not fraction:
        raise ValueError("no digits")
    exponent, binary = 0, 0
    if letters in ("e", "E") and tail:
        unsigned = tail[1:] if tail[0] in "+-" else tail
        digits = unsigned.lstrip("0")
        if not unsigned or _DIGITS.fullmatch(unsigned) is None:
            raise ValueError("bad exponent")
        if len(digits) > MAX_EXPONENT_DIGITS:
            raise ValueError("exponent out of int64")
        exponent = -int(digits or "0") if tail[0] == "-" else int(digits or "0")
    elif tail:
        raise ValueError("digits after the suffix")
    elif letters in _DECIMAL_SUFFIXES:
        exponent = _DECIMAL_SUFFIXES[letters]
    elif letters in _BINARY_SUFFIXES:
        binary = _BINARY_SUFFIXES[letters]
    else:
        raise ValueError("unknown suffix")
    negative = sign == "-"
    # value = int(significant) * 10**scale * 2**binary
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return Decimal(0)
    scale = exponent - len(fraction)
    integer_digits = len(digits) + scale
    if integer_digits > _MAX_INTEGER_DIGITS:
        raise _OutOfRange(negative)
    # Keep digits down to the nano place; anything below rounds the magnitude up (1n at least).
    keep = integer_digits + _NANO_PLACES
    if keep <= 0:
        kept, rest, scale = "1", "", -_NANO_PLACES
    elif keep < len(digits):
        kept, rest = digits[:keep], digits[keep:]
        scale = -_NANO_PLACES
    else:
        kept, rest = digits, ""
    coefficient = int(kept) + (1 if rest.strip("0") else 0)
    with localcontext(_CONTEXT):
        value: Decimal = Decimal(coefficient).scaleb(scale) * (2**binary)
        if value > _BOUND:
            raise _OutOfRange(negative)
        # A binary suffix can add places (1.000000001Ki): round up to the nano place too.
        last_place = value.as_tuple().exponent if binary else 0  # an int: the value is finite
        if isinstance(last_place, int) and last_place < -_NANO_PLACES:
            value = value.quantize(Decimal(1).scaleb(-_NANO_PLACES), rounding=ROUND_CEILING)
    return -value if negative else value


def _parse(value: object) -> Decimal:
    """The value, or ValueError for no quantity, _OutOfRange for a magnitude past 2^63-1."""
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, Decimal):
        # Already parsed (a sum of parsed amounts): callers clamp, so no range check here.
        if not value.is_finite():
            raise ValueError("not finite")
        return value
    if isinstance(value, int):
        if abs(value) > INT64_MAX:
            raise _OutOfRange(value < 0)
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("not finite")
        return _parse_text(repr(value).replace("e+", "e"))
    if not isinstance(value, str):
        raise ValueError("not a string")
    return _parse_text(value.strip())


def parse_quantity(value: object, obj: str = "", path: str = "") -> Decimal:
    """Parse a Kubernetes quantity (`500m`, `2Gi`, `1e3`, `4`) into a Decimal.

    The result has at most nine decimal places and a magnitude of at most 2^63-1;
    anything else raises InvalidQuantity (for `obj` at `path`).
    """
    try:
        return _parse(value)
    except _OutOfRange as exc:
        raise InvalidQuantity(
            obj,
            path,
            f"quantity {_show(value)} out of range: the magnitude must be at most "
            f"{INT64_MAX} (2^63-1)",
        ) from exc
    except (ValueError, ArithmeticError) as exc:
        raise InvalidQuantity(obj, path, f"invalid quantity {_show(value)}") from exc


def _clamp(number: Decimal) -> int:
    rounded = int(number.to_integral_value(rounding=ROUND_CEILING))
    return min(rounded, INT64_MAX)


def amount(resource: str, value: object, obj: str = "", path: str = "") -> int:
    """A non-negative quota amount: millicores for cpu, base units (rounded up) otherwise."""
    number = parse_quantity(value, obj, path)
    if number < 0:
        raise InvalidQuantity(obj, path, f"negative quantity {_show(value)}")
    if resource in _MILLI_RESOURCES:
        number *= 1000
    return _clamp(number)


def saturating_amount(resource: str, value: object) -> int:
    """`amount` for a value already stored in the cluster (a live pod's): never raises.

    An out-of-range positive value or one that does not parse at all is charged as
    `INT64_MAX` — as much as an amount can hold — so a pod is never dropped from
    usage because of it; a negative value is charged 0, as the API server would
    never have stored it as a request.
    """
    try:
        number = _parse(value)
    except _OutOfRange as exc:
        return 0 if exc.negative else INT64_MAX
    except (ValueError, ArithmeticError):
        return INT64_MAX
    if number < 0:
        return 0
    if resource in _MILLI_RESOURCES:
        number *= 1000
    return _clamp(number)


def whole_quantity(value: object, obj: str = "", path: str = "") -> int:
    """A non-negative whole number of things (devices); a fraction is an error, not a rounding."""
    number = parse_quantity(value, obj, path)
    if number < 0:
        raise InvalidQuantity(obj, path, f"negative quantity {_show(value)}")
    if number != number.to_integral_value():
        raise InvalidQuantity(obj, path, f"must be a whole number of devices, got {_show(value)}")
    return min(int(number), INT64_MAX)


def sat_add(*values: int) -> int:
    """Sum of non-negative amounts, saturating at int64 instead of wrapping."""
    return min(sum(values), INT64_MAX)


def sat_mul(a: int, b: int) -> int:
    """Product of non-negative amounts, saturating at int64."""
    return min(a * b, INT64_MAX)
