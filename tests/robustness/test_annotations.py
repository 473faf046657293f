"""Malformed charge annotations of issue 10: an InvalidObject with a message, never a crash."""

from __future__ import annotations

import pytest

from quota.charge import CHARGE_ANNOTATION, MAX_ANNOTATION_BYTES, Charge
from quota.errors import InvalidObject
from quota.quantity import INT64_MAX

PATH = f"metadata.annotations[{CHARGE_ANNOTATION}]"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000, "nested deeper than"),
        ("{" * 100_000, "nested deeper than"),
        ('{"a":' * 50 + "1" + "}" * 50, "nested deeper than"),
        ('{"usage":{"gpu":' + "9" * 5000 + "}}", "invalid JSON"),
        ("x" * (MAX_ANNOTATION_BYTES + 1), "characters long"),
        ("{", "invalid JSON"),
        ("[]", "must be a JSON object"),
    ],
)
def test_malformed_annotation_is_invalid_object(text: str, reason: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        Charge.from_annotation(text, "Pod team-a/p")
    assert (caught.value.obj, caught.value.path) == ("Pod team-a/p", PATH)
    assert reason in caught.value.reason
    assert len(str(caught.value)) < 300


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = (
        '{"clusterQueue":"[[[[[[","localQueue":"a/b",'
        '"sharedClaims":{"a/c":{"gpu":1}},"usage":{"gpu":2}}'
    )
    charge = Charge.from_annotation(text, "Pod team-a/p")
    assert charge.cluster_queue == "[[[[[[" and charge.shared_claims == {"a/c": {"gpu": 1}}


@pytest.mark.parametrize("amount", ["9223372036854775808", "1" + "0" * 24, "-1", "1.5", "true"])
def test_an_amount_outside_int64_is_invalid_naming_its_field(amount: str) -> None:
    text = '{"clusterQueue":"q","localQueue":"a/b","usage":{"gpu":' + amount + "}}"
    with pytest.raises(InvalidObject) as caught:
        Charge.from_annotation(text, "Pod team-a/p")
    assert caught.value.path == f"{PATH}.usage.gpu"


def test_nesting_under_an_unknown_key_counts() -> None:
    text = '{"clusterQueue":"q","localQueue":"a/b","x":[[[[1]]]]}'
    with pytest.raises(InvalidObject) as caught:
        Charge.from_annotation(text, "Pod team-a/p")
    assert "nested deeper than" in caught.value.reason
    assert Charge.from_annotation(text.replace("[[[[1]]]]", "[[[1]]]"), "Pod team-a/p")


def test_the_largest_amounts_draquota_writes_are_read_back() -> None:
    """Amounts saturate at int64 (`quota.quantity`): a charge at the limit must parse again,
    or /validate would deny the pods /mutate stamped."""
    charge = Charge(
        cluster_queue="q",
        local_queue="a/b",
        flavors={"gpu": "f"},
        per_pod={"gpu": INT64_MAX, "memory": INT64_MAX},
        device_classes={"gpu.example.com": INT64_MAX},
        shared_claims={"a/c": {"gpu": INT64_MAX}},
    )
    assert Charge.from_annotation(charge.to_annotation(), "Pod a/p") == charge
