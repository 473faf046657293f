"""CEL selectors: the Kubernetes library functions, unknown domains, cost limits, caching."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quota.allocator.cel import MAX_BINDS, compile_selector
from quota.allocator.devices import cel_input
from quota.allocator.errors import AllocationError

DEVICE = cel_input(
    "gpu.example.com",
    {
        "gpu.example.com/model": ("string", "a100"),
        "gpu.example.com/index": ("int", 3),
        "gpu.example.com/fast": ("bool", True),
        "gpu.example.com/driverVersion": ("version", "1.10.0-rc.1"),
        "resource.kubernetes.io/pcieRoot": ("string", "pci0000:00"),
    },
    {"gpu.example.com/memory": Decimal(80 * 2**30)},
    False,
)

D = 'device.attributes["gpu.example.com"]'
C = 'device.capacity["gpu.example.com"]'

TRUE_OR_FALSE = [
    ('device.driver == "gpu.example.com"', True),
    (f'{D}.model == "a100"', True),
    (f"{D}.index > 2 && {D}.fast", True),
    ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', True),
    ("device.allowMultipleAllocations", False),
    (f'{C}.memory.compareTo(quantity("80Gi")) == 0', True),
    (f'{C}.memory == quantity("81920Mi")', True),
    (f'{C}.memory.isGreaterThan(quantity("40Gi"))', True),
    (f'{C}.memory.isLessThan(quantity("1Ti"))', True),
    (f'{C}.memory.sub(quantity("79Gi")).asInteger() == 1073741824', True),
    (f"{C}.memory.add(1).isInteger()", True),
    ('quantity("1.5").asApproximateFloat() == 1.5', True),
    ('isQuantity("12Mi") && !isQuantity("12 apples")', True),
    ('semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2', True),
    ('semver("1.2.3").patch() == 3', True),
    (f'{D}.driverVersion.isGreaterThan(semver("1.9.0"))', True),
    (f'{D}.driverVersion.isLessThan(semver("1.10.0"))', True),
    (f'{D}.driverVersion.compareTo(semver("1.10.0-rc.1")) == 0', True),
    ('isSemver("1.0.0") && !isSemver("1.0")', True),
    ('semver("v1.2", true) == semver("1.2.0")', True),
    ('!("x" in device.attributes["other.example.com"])', True),
    ('device.attributes["other.example.com"].size() == 0', True),
    (f'cel.bind(m, {D}.model, m == "a100")', True),
    (f'{D}.?missing.orValue("none") == "none"', True),
    (f'{D}.model.startsWith("h")', False),
]


@pytest.mark.parametrize(("expression", "expected"), TRUE_OR_FALSE, ids=lambda v: str(v)[:60])
def test_selector_result(expression: str, expected: bool) -> None:
    assert compile_selector(expression).matches(DEVICE) is expected


ERRORS = [
    ("device.nosuchfield == 1", "CEL runtime error"),
    (f"{D}.missing == 1", "CEL runtime error"),
    ('quantity("a lot") == quantity("1")', "invalid quantity"),
    ("nosuchvar == 1", "undeclared reference"),
    ("device.driver", "must evaluate to bool"),
    ('1 + "a" == 2', "CEL compile error"),
    (f'{C}.memory.compareTo(semver("1.0.0")) == 0', "cannot compare"),
]


@pytest.mark.parametrize(("expression", "text"), ERRORS, ids=lambda v: str(v)[:60])
def test_invalid_selector_is_an_allocation_error(expression: str, text: str) -> None:
    with pytest.raises(AllocationError) as info:
        compile_selector(expression).matches(DEVICE)
    assert text in str(info.value)


def test_expensive_comprehension_is_stopped_with_a_clear_error() -> None:
    items = ",".join(str(i) for i in range(200))
    expression = f"[{items}].all(a, [{items}].all(b, [{items}].all(c, a + b + c >= 0)))"
    with pytest.raises(AllocationError) as info:
        compile_selector(expression).matches(DEVICE)
    assert "exceeds the cost limit" in str(info.value)


def test_value_doubling_with_bind_is_refused_before_it_runs() -> None:
    expression = '"xxxxxxxxxxxxxxxx"'
    for i in range(MAX_BINDS + 1):
        expression = f"cel.bind(v{i}, {expression}, v{i} + v{i})"
    with pytest.raises(AllocationError) as info:
        compile_selector(f"size({expression}) > 0")
    assert "cost limit" in str(info.value)


def test_over_long_expression_is_refused() -> None:
    with pytest.raises(AllocationError, match="characters long"):
        compile_selector("true && " * 2000 + "true")


def test_compiled_selectors_are_cached() -> None:
    assert compile_selector('device.driver == "x"') is compile_selector('device.driver == "x"')
