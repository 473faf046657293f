"""A static cost estimate for a compiled CEL selector, before it ever runs.

cel-expr-python has no cost tracker, so draquota estimates like the API server's
CEL cost estimator does: walk the checked AST (decoded from the program's
serialized `cel.expr.CheckedExpr`) and bound, for every sub-expression, the
work to evaluate it and the size of its value. Sizes: `size` is the number of
elements of a list or map, `weight` the number of scalar leaves a deep
comparison or copy may visit. The device input is bounded by the
ResourceSlice API (at most 32 attributes and capacities per device, strings of
at most 64 characters).

The estimate is an upper bound in cost units of about one operation each:
list equality under nested `cel.bind`, which builds a value with 10^8 leaves from
400 characters, estimates at 10^8 and is never run. Comprehensions multiply by
the size of their range, as the API server does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quota import protowire

__all__ = ["DEVICE_SIZE", "DEVICE_WEIGHT", "Cost", "device_shape", "estimate_cost"]

# A device: at most 32 attributes and capacities (plus driver and flags), strings of at
# most 64 characters (a string weighs one leaf per 8 characters).
DEVICE_SIZE = 32 + 2
DEVICE_WEIGHT = 32 * 8 + 2
_MAX = 2**62

# Creating a list or map (cel-go: 10 and 30), and copying one leaf of an element into it.
LIST_COST = 10
MAP_COST = 30
ELEMENT_COST = 3
# One comparison of two values, at least one of them read from the device (dynamically
# typed): measured at 15-25 times a step of arithmetic, so priced like that many units.
COMPARE_COST = 16
# `matches` compiles its pattern each time: about as long as 250 steps of arithmetic.
REGEX_COST = 250

# Function names whose cost is linear in the weight of their operands.
_MEMBERSHIP = frozenset({"@in", "_in_"})
_DEEP = frozenset({"_==_", "_!=_", "contains", "startsWith", "endsWith", "matches"})
_COMPARISON = frozenset({"_<_", "_<=_", "_>_", "_>=_"})
_CONCAT = frozenset({"_+_"})


@dataclass(frozen=True)
class Cost:
    """Work to evaluate an expression and the size of its value (all upper bounds)."""

    cost: int
    size: int = 1
    weight: int = 1


def _cap(value: int) -> int:
    return min(value, _MAX)


# -- protobuf wire format (`quota.protowire`), just enough for cel.expr.CheckedExpr -----------


def _fields(data: bytes) -> list[tuple[int, Any]]:
    """(field number, value) pairs, typed Any: the walk knows each field's type from
    cel.expr's schema (an int for a varint, bytes for a message or string)."""
    return protowire.fields(data)


def _first(fields: list[tuple[int, Any]], number: int) -> Any:
    return next((v for n, v in fields if n == number), None)


# Expr fields (cel.expr.Expr).
_CONST, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 3, 4, 5, 6, 7, 8, 9


@dataclass
class _Estimator:
    """Walks an Expr; `scope` maps bound variable names to the sizes of their values."""

    device_size: int = DEVICE_SIZE
    device_weight: int = DEVICE_WEIGHT
    scope: dict[str, Cost] = field(default_factory=dict)

    def expr(self, data: bytes, depth: int = 0) -> Cost:
        if depth > 250:  # the checker refuses deeper ASTs; never recurse further than it does
            return Cost(_MAX, _MAX, _MAX)
        fields = _fields(data)
        for number, value in fields:
            if number == _CONST:
                return self._const(value)
            if number == _IDENT:
                name = _first(_fields(value), 1) or b""
                return self._ident(name.decode())
            if number == _SELECT:
                return self._select(value, depth)
            if number == _CALL:
                return self._call(value, depth)
            if number == _LIST:
                return self._list(value, depth)
            if number == _STRUCT:
                return self._struct(value, depth)
            if number == _COMPREHENSION:
                return self._comprehension(value, depth)
        return Cost(1)

    def _const(self, value: bytes) -> Cost:
        fields = _fields(value)
        for number, raw in fields:
            if number in (6, 7) and isinstance(raw, bytes):  # string, bytes
                return Cost(1, 1, max(1, len(raw) // 8))
        return Cost(1)

    def _ident(self, name: str) -> Cost:
        if name in self.scope:
            bound = self.scope[name]
            return Cost(1, bound.size, bound.weight)
        return Cost(1, self.device_size, self.device_weight)  # `device`, or a field of it

    def _select(self, value: bytes, depth: int) -> Cost:
        operand = _first(_fields(value), 1)
        inner = self.expr(operand, depth + 1) if operand else Cost(1)
        return Cost(_cap(inner.cost + 1), inner.size, inner.weight)

    def _call(self, value: bytes, depth: int) -> Cost:
        fields = _fields(value)
        function = (_first(fields, 2) or b"").decode()
        operands = [self.expr(v, depth + 1) for n, v in fields if n in (1, 3)]
        cost = _cap(1 + sum(o.cost for o in operands))
        size = max((o.size for o in operands), default=1)
        weight = max((o.weight for o in operands), default=1)
        if function in _MEMBERSHIP and len(operands) == 2:
            # `x in list` compares x with every element (cel-go prices it by the list size);
            # each comparison of a device value is a dynamic equality, ~COMPARE_COST units.
            container = operands[1]
            compared = _cap(container.size * (COMPARE_COST + operands[0].weight))
            return Cost(_cap(cost + compared), 1, 1)
        if function == "matches":
            cost = _cap(cost + REGEX_COST)  # the pattern is compiled on every evaluation
        if function in _DEEP and operands:
            # Deep equality walks the smaller operand; matching and searching the larger.
            walked = min(o.weight for o in operands) if function[1:3] in ("==", "!=") else weight
            return Cost(_cap(cost + COMPARE_COST + walked), 1, 1)
        if function in _COMPARISON:
            return Cost(_cap(cost + COMPARE_COST), 1, 1)
        if function in _CONCAT:
            size = _cap(sum(o.size for o in operands))
            weight = _cap(sum(o.weight for o in operands))
            return Cost(_cap(cost + weight), size, weight)
        return Cost(cost, size, weight)

    def _list(self, value: bytes, depth: int) -> Cost:
        # Built anew on every evaluation: cel-go's 10 per list plus every element's copy.
        elements = [self.expr(v, depth + 1) for n, v in _fields(value) if n == 1]
        built = sum(e.cost + ELEMENT_COST * e.weight for e in elements)
        return Cost(
            _cap(LIST_COST + built),
            len(elements),
            _cap(1 + sum(e.weight for e in elements)),
        )

    def _struct(self, value: bytes, depth: int) -> Cost:
        parts: list[Cost] = []
        for number, entry in _fields(value):
            if number != 2:
                continue
            for inner_number, inner in _fields(entry):
                if inner_number in (3, 4):
                    parts.append(self.expr(inner, depth + 1))
        built = sum(p.cost + ELEMENT_COST * p.weight for p in parts)
        return Cost(
            _cap(MAP_COST + built),
            max(1, len(parts) // 2),
            _cap(1 + sum(p.weight for p in parts)),
        )

    def _comprehension(self, value: bytes, depth: int) -> Cost:
        fields = _fields(value)

        def sub(number: int) -> bytes | None:
            found = _first(fields, number)
            return found if isinstance(found, bytes) else None

        def name(number: int) -> str:
            found = _first(fields, number)
            return found.decode() if isinstance(found, bytes) else ""

        iter_range = sub(2)
        ranged = self.expr(iter_range, depth + 1) if iter_range else Cost(1, 0, 0)
        init_expr = sub(4)
        init = self.expr(init_expr, depth + 1) if init_expr else Cost(1)
        iterations = ranged.size
        saved = dict(self.scope)
        accu, var, var2 = name(3), name(1), name(8)
        # An element is at most the whole range; the accumulator starts as its init.
        element = Cost(1, ranged.size, ranged.weight)
        self.scope.update({v: element for v in (var, var2) if v})
        self.scope[accu] = init
        condition_expr, step_expr = sub(5), sub(6)
        condition = self.expr(condition_expr, depth + 1) if condition_expr else Cost(1)
        step = self.expr(step_expr, depth + 1) if step_expr else Cost(1)
        # Each step may grow the accumulator (map, filter): bound it after every iteration.
        grown = Cost(
            init.cost,
            _cap(init.size + iterations * step.size),
            _cap(init.weight + iterations * step.weight),
        )
        self.scope[accu] = grown if iterations else init
        result_expr = sub(7)
        result = self.expr(result_expr, depth + 1) if result_expr else Cost(1)
        self.scope = saved
        loop = _cap(iterations * (condition.cost + step.cost))
        return Cost(_cap(ranged.cost + init.cost + loop + result.cost), result.size, result.weight)


def device_shape(device: Mapping[str, Any]) -> tuple[int, int]:
    """(size, weight) of one device input, for the estimate of an evaluation on it."""
    size, weight = 2, 2
    for key in ("attributes", "capacity"):
        for values in (device.get(key) or {}).values():
            size += len(values)
            for value in values.values():
                weight += max(1, len(value) // 8) if isinstance(value, str) else 1
    return size, weight


def estimate_cost(
    serialized: bytes, device_size: int = DEVICE_SIZE, device_weight: int = DEVICE_WEIGHT
) -> Cost:
    """The cost bound of a program from `Expression.serialize()` (a `CheckedExpr` in an Any),
    for any device (default) or for devices of the given shape (`device_shape`).

    A program this module cannot read is priced at the maximum, so it is never run.
    """
    try:
        wrapper = _fields(serialized)
        checked = _first(wrapper, 2)
        if not isinstance(checked, bytes):
            return Cost(_MAX, _MAX, _MAX)
        expr = _first(_fields(checked), 4)
        if not isinstance(expr, bytes):
            return Cost(_MAX, _MAX, _MAX)
        return _Estimator(device_size, device_weight).expr(expr)
    except (ValueError, IndexError, UnicodeDecodeError):
        return Cost(_MAX, _MAX, _MAX)
