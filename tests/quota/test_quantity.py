"""Quantities are parsed in one place; amounts are integers that saturate (SPEC §3.2, §3.4)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quota.errors import InvalidQuantity
from quota.quantity import INT64_MAX, amount, parse_quantity, sat_add, whole_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("2Gi", Decimal(2 * 2**30)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("+2", Decimal(2)),
        ("100n", Decimal("1e-7")),
        (3, Decimal(3)),
        ("1Ei", Decimal(2**60)),
    ],
)
def test_parse_quantity(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1Gb", "abc", "1.2.3", "--1", True, None, [1], "1 Gi", "Mi"])
def test_bad_quantities_are_errors(text: object) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(text, "Pod a/b", "spec.x")


@pytest.mark.parametrize(
    ("resource", "text", "value"),
    [
        ("cpu", "1", 1000),
        ("cpu", "250m", 250),
        ("cpu", "1n", 1),
        ("memory", "1Ki", 1024),
        ("memory", "1500m", 2),
        ("example.com/foo", "3", 3),
        ("memory", "1e30", INT64_MAX),
    ],
)
def test_amounts(resource: str, text: str, value: int) -> None:
    assert amount(resource, text) == value


def test_whole_quantity_rejects_fractions_and_negatives() -> None:
    assert whole_quantity("2") == 2
    assert whole_quantity("2000m") == 2
    with pytest.raises(InvalidQuantity, match="whole number"):
        whole_quantity("1500m")
    with pytest.raises(InvalidQuantity, match="negative"):
        whole_quantity("-1")


def test_sums_saturate_instead_of_wrapping() -> None:
    assert sat_add(INT64_MAX, 1) == INT64_MAX
    assert sat_add(1, 2, 3) == 6
