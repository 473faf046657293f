"""CEL selectors over devices: compiled once, cached, evaluated under a cost bound.

The device is the variable `device` with `driver`, `allowMultipleAllocations`,
`attributes[domain][name]` and `capacity[domain][name]` (see `devices.cel_input`).
An unknown domain reads as an empty map: every string literal of an expression is a
domain it may ask for, so the input gets an empty map for each literal domain the
device lacks. An unknown attribute inside a known domain is an evaluation error.

Cost bound: every selector gets a static cost estimate when it is compiled
(`celcost.estimate_cost`, for the largest device the API allows) and, per device
shape, a runtime estimate; `matches` spends the runtime estimate from the caller's
`Budget` before it evaluates, and refuses to run an expression whose static
estimate exceeds the per-evaluation limit (the API server's 1,000,000). Running out
raises `BudgetExceeded`, never an invalid-input error. cel-expr-python also stops
any evaluation after 10,000 comprehension iterations; `cel.bind` is limited to
`MAX_BINDS` uses and the length is capped like the API server caps selector
expressions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional

from quota.allocator.budget import Budget
from quota.allocator.celcost import DEVICE_SIZE, DEVICE_WEIGHT, device_shape, estimate_cost
from quota.allocator.celtypes import (
    SEMVER_KEY,
    LibraryError,
    compare_values,
    parse_semver,
    quantity_value,
    semver_value,
    to_decimal,
)
from quota.allocator.errors import AllocationError

__all__ = [
    "EVALUATION_BASE_COST",
    "MAX_BINDS",
    "MAX_EXPRESSION_LENGTH",
    "Selector",
    "compile_selector",
]

MAX_EXPRESSION_LENGTH = 10 * 1024
MAX_BINDS = 8
CACHE_SIZE = 1024
# What one evaluation costs beyond the expression: building the device input for CEL and
# calling into it take as long as about 150 units of expression work, so that many cheap
# evaluations are priced too and the per-question budget bounds time (bench/cel_budget.py).
EVALUATION_BASE_COST = 150

_T = cel.Type
_M = _T.Map(_T.STRING, _T.DYN)
_STRING_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')
_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(")


def _is_quantity(text: str) -> bool:
    try:
        quantity_value(text)
    except LibraryError:
        return False
    return True


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize)
    except LibraryError:
        return False
    return True


def _as_integer(q: Mapping[str, Any]) -> int:
    number = to_decimal(q)
    if number != number.to_integral_value() or not -(2**63) <= number <= 2**63 - 1:
        raise LibraryError("cannot convert quantity to an int64")
    return int(number)


def _is_integer(q: Mapping[str, Any]) -> bool:
    number = to_decimal(q)
    return number == number.to_integral_value() and -(2**63) <= number <= 2**63 - 1


def _plus(a: Any, b: Any, sign: int) -> dict[str, str]:
    return quantity_value(str(to_decimal(a) + sign * to_decimal(b)))


def _semver_part(index: int) -> Callable[[Mapping[str, Any]], int]:
    def part(value: Mapping[str, Any]) -> int:
        if SEMVER_KEY not in value:
            raise LibraryError("not a semver")
        major, minor, patch, _ = parse_semver(value[SEMVER_KEY])
        return (major, minor, patch)[index]

    return part


def _overload(
    name: str, result: Any, params: list[Any], impl: Callable[..., Any], member: bool = False
) -> Any:
    return cel.Overload(name, result, params, is_member=member, impl=impl)


def _functions() -> list[Any]:
    s, b, i, d = _T.STRING, _T.BOOL, _T.INT, _T.DOUBLE
    return [
        cel.FunctionDecl("quantity", [_overload("quantity_string", _M, [s], quantity_value)]),
        cel.FunctionDecl("isQuantity", [_overload("is_quantity_string", b, [s], _is_quantity)]),
        cel.FunctionDecl(
            "semver",
            [
                _overload("semver_string", _M, [s], semver_value),
                _overload("semver_string_bool", _M, [s, b], semver_value),
            ],
        ),
        cel.FunctionDecl(
            "isSemver",
            [
                _overload("is_semver_string", b, [s], _is_semver),
                _overload("is_semver_string_bool", b, [s, b], _is_semver),
            ],
        ),
        cel.FunctionDecl(
            "compareTo", [_overload("value_compare_to", i, [_M, _M], compare_values, True)]
        ),
        cel.FunctionDecl(
            "isGreaterThan",
            [_overload("value_greater", b, [_M, _M], lambda x, y: compare_values(x, y) > 0, True)],
        ),
        cel.FunctionDecl(
            "isLessThan",
            [_overload("value_less", b, [_M, _M], lambda x, y: compare_values(x, y) < 0, True)],
        ),
        cel.FunctionDecl(
            "add",
            [
                _overload("quantity_add", _M, [_M, _M], lambda x, y: _plus(x, y, 1), True),
                _overload("quantity_add_int", _M, [_M, i], lambda x, y: _plus(x, y, 1), True),
            ],
        ),
        cel.FunctionDecl(
            "sub",
            [
                _overload("quantity_sub", _M, [_M, _M], lambda x, y: _plus(x, y, -1), True),
                _overload("quantity_sub_int", _M, [_M, i], lambda x, y: _plus(x, y, -1), True),
            ],
        ),
        cel.FunctionDecl("asInteger", [_overload("quantity_as_int", i, [_M], _as_integer, True)]),
        cel.FunctionDecl("isInteger", [_overload("quantity_is_int", b, [_M], _is_integer, True)]),
        cel.FunctionDecl(
            "asApproximateFloat",
            [_overload("quantity_as_float", d, [_M], lambda q: float(to_decimal(q)), True)],
        ),
        cel.FunctionDecl(
            "sign",
            [
                _overload(
                    "quantity_sign",
                    i,
                    [_M],
                    lambda q: (to_decimal(q) > 0) - (to_decimal(q) < 0),
                    True,
                )
            ],
        ),
        cel.FunctionDecl("major", [_overload("semver_major", i, [_M], _semver_part(0), True)]),
        cel.FunctionDecl("minor", [_overload("semver_minor", i, [_M], _semver_part(1), True)]),
        cel.FunctionDecl("patch", [_overload("semver_patch", i, [_M], _semver_part(2), True)]),
    ]


@lru_cache(maxsize=1)
def _env() -> Any:
    return cel.NewEnv(
        variables={"device": _T.DYN},
        extensions=[ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
        functions=_functions(),
    )


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


@dataclass(frozen=True)
class Selector:
    """A compiled CEL selector; `matches(device_input)` is True, False, or raises."""

    expression: str
    program: Any
    domains: frozenset[str]
    serialized: bytes = b""
    static_cost: int = 0

    def cost(self, device: Mapping[str, Any]) -> int:
        """Estimated cost of one evaluation on this device (bounded by `static_cost`)."""
        size, weight = device_shape(device)
        if size >= DEVICE_SIZE and weight >= DEVICE_WEIGHT:
            return self.static_cost
        return min(self.static_cost, _shape_cost(self.serialized, size, weight))

    def matches(self, device: Mapping[str, Any], budget: Budget | None = None) -> bool:
        """Evaluate against a device input map; an evaluation error raises AllocationError.

        With a `budget`, the estimated cost is spent first: BudgetExceeded when the
        expression is too expensive to run at all, or the budget is used up.
        """
        if budget is not None:
            budget.evaluate(
                self.static_cost, EVALUATION_BASE_COST + self.cost(device), self.expression
            )
        data = _with_default_domains(device, self.domains)
        try:
            value = self.program.eval(data={"device": data})
        except RuntimeError as exc:
            raise AllocationError(self._failure(str(exc))) from exc
        if value.type() == _T.ERROR:
            raise AllocationError(self._failure(str(value.value())))
        result = value.value()
        if not isinstance(result, bool):
            raise AllocationError(
                f"CEL expression {self.expression!r} must evaluate to bool, got {result!r}"
            )
        return result

    def _failure(self, detail: str) -> str:
        if "budget exceeded" in detail:
            return (
                f"CEL expression {self.expression!r}: evaluation stopped, "
                f"it exceeds the cost limit ({detail})"
            )
        return f"CEL runtime error in {self.expression!r} for device: {detail}"


def _with_default_domains(device: Mapping[str, Any], domains: frozenset[str]) -> dict[str, Any]:
    data = dict(device)
    for key in ("attributes", "capacity"):
        present = data.get(key) or {}
        missing = [d for d in domains if d not in present]
        if missing:
            present = dict(present)
            for domain in missing:
                present[domain] = {}
        data[key] = present
    return data


@lru_cache(maxsize=CACHE_SIZE)
def compile_selector(expression: str) -> Selector:
    """Compile (once, LRU-cached) a selector expression; invalid CEL raises AllocationError."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise AllocationError(
            f"CEL expression is {len(expression)} characters long, at most {MAX_EXPRESSION_LENGTH}"
        )
    binds = len(_BIND.findall(expression))
    if binds > MAX_BINDS:
        raise AllocationError(
            f"CEL expression uses cel.bind {binds} times, at most {MAX_BINDS} (cost limit)"
        )
    try:
        program = _env().compile(expression)
    except RuntimeError as exc:
        raise AllocationError(f"CEL compile error in {expression!r}: {exc}") from exc
    return_type = program.return_type()
    if return_type != _T.BOOL and return_type != _T.DYN:
        raise AllocationError(
            f"CEL expression {expression!r} must return bool, not {return_type.name()}"
        )
    domains = frozenset(
        _unquote(a or b) for a, b in _STRING_LITERAL.findall(expression) if (a or b)
    )
    serialized = program.serialize()
    return Selector(expression, program, domains, serialized, estimate_cost(serialized).cost)


@lru_cache(maxsize=CACHE_SIZE * 4)
def _shape_cost(serialized: bytes, size: int, weight: int) -> int:
    return estimate_cost(serialized, size, weight).cost
