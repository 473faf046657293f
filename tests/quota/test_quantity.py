"""Quantities are parsed in one place; amounts are integers that saturate (SPEC §3.2, §3.4)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quota.errors import InvalidQuantity
from quota.quantity import (
    INT64_MAX,
    amount,
    parse_quantity,
    sat_add,
    saturating_amount,
    whole_quantity,
)


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
        ("memory", "7Ei", 7 * 2**60),
        ("cpu", "9223372036854775807", INT64_MAX),
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


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.5n", Decimal("2e-9")),  # Kubernetes rounds up to the nano place
        ("0.0000000001", Decimal("1e-9")),  # a non-zero value is at least 1n
        ("-0.0000000001", Decimal("-1e-9")),
        ("1e-999999", Decimal("1e-9")),
        ("1.G", Decimal("1e9")),  # ParseQuantity allows an empty fraction
        ("9223372036854775807", Decimal(INT64_MAX)),
        ("1e0000000000000000000018", Decimal("1e18")),  # leading zeros do not count
        ("1.1Ki", Decimal("1126.4")),
    ],
)
def test_kubernetes_rounding_and_bounds(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "1e999999",
        "0.000000001e999999",
        "1e300000",
        "9223372036854775808",
        "-9223372036854775808",
        "8Ei",
        "1e30",
        "1" * 100_000,
        10**30,
        1e30,
    ],
)
def test_out_of_range_quantities_name_the_field(text: object) -> None:
    with pytest.raises(InvalidQuantity) as caught:
        parse_quantity(text, "Pod a/b", "spec.containers[0].resources.requests.cpu")
    assert caught.value.obj == "Pod a/b"
    assert caught.value.path == "spec.containers[0].resources.requests.cpu"
    assert "out of range" in caught.value.reason
    assert len(caught.value.reason) < 200  # a megabyte of digits is not echoed back


@pytest.mark.parametrize(
    "text",
    [
        "1e" + "9" * 20,
        "1e1.5",
        "1e",
        "1e+",
        "1k1",
        "0x10",
        "1_000",
        ".",
        # A parser that backtracks across pieces takes hours on these (quadratic).
        "1" * 1_000_000 + "!",
        "1" * 1_000_000 + "e!",
        "1" * 1_000_000 + ".Ki!",
    ],
)
def test_malformed_exponents_and_digits_are_errors(text: str) -> None:
    with pytest.raises(InvalidQuantity) as caught:
        parse_quantity(text, "Pod a/b", "spec.x")
    assert caught.value.reason.startswith("invalid quantity")


def test_huge_inputs_never_build_huge_numbers() -> None:
    # Kept digits are bounded by the 2^63-1 magnitude and the nano place, whatever the input.
    tiny = parse_quantity("0." + "0" * 1_000_000 + "1")
    assert tiny == Decimal("1e-9")
    long = parse_quantity("1." + "3" * 1_000_000)
    assert long == Decimal("1.333333334")
    assert len(long.as_tuple().digits) == 10


@pytest.mark.parametrize(
    ("resource", "value", "charged"),
    [
        ("cpu", "1e999999", INT64_MAX),
        ("cpu", "0.000000001e999999", INT64_MAX),
        ("memory", "not a quantity", INT64_MAX),
        ("memory", "-1e999999", 0),
        ("cpu", "250m", 250),
        ("memory", "1Ki", 1024),
    ],
)
def test_saturating_amount_charges_bad_live_values_as_much_as_possible(
    resource: str, value: str, charged: int
) -> None:
    assert saturating_amount(resource, value) == charged
