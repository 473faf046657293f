"""quota.protowire against the encoding guide's own examples
(protobuf.dev/programming-guides/encoding), and the malformed input it must refuse."""

from __future__ import annotations

import pytest

from quota.protowire import fields, varint


@pytest.mark.parametrize(
    ("data", "value", "after"),
    [
        (b"\x01", 1, 1),
        (b"\x96\x01", 150, 2),
        (b"\xac\x02\xff", 300, 2),  # stops after the varint
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 2**64 - 1, 10),
    ],
)
def test_varints_read_as_the_guide_encodes_them(data: bytes, value: int, after: int) -> None:
    assert varint(data, 0) == (value, after)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (bytes.fromhex("089601"), [(1, 150)]),  # the guide's Test1 { a: 150 }
        (bytes.fromhex("120774657374696e67"), [(2, b"testing")]),  # Test2 { b: "testing" }
        (bytes.fromhex("1a03089601"), [(3, bytes.fromhex("089601"))]),  # Test3 { c: Test1 }
        (bytes.fromhex("2206038e029ea705"), [(4, bytes.fromhex("038e029ea705"))]),  # packed
        (bytes.fromhex("09") + bytes(range(8)) + bytes.fromhex("15") + b"abcd",
         [(1, bytes(range(8))), (2, b"abcd")]),  # fixed64, fixed32
    ],
)  # fmt: skip
def test_a_message_reads_into_its_fields_in_order(data: bytes, expected: list[object]) -> None:
    assert fields(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("0b"),  # wire type 3, a group: not read
        b"\x08" + b"\xff" * 10 + b"\x01",  # a varint longer than 64 bits
    ],
)
def test_malformed_input_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        fields(data)
