"""The protobuf wire format, just enough to read messages without generated code.

Two readers need it: the CEL cost estimate (`quota.allocator.celcost`, a program's
serialized `cel.expr.CheckedExpr`) and bench/pprof_top.py (a Go CPU profile). Both read
bytes a program produced, so a malformed varint or wire type raises ValueError rather
than reading on.
"""

from __future__ import annotations

__all__ = ["fields", "varint"]


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The base-128 varint at `pos`, and the position after it."""
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """A message's (field number, value) pairs in order: an int for a varint, the raw bytes
    of a length-delimited, 64-bit or 32-bit field."""
    out: list[tuple[int, int | bytes]] = []
    pos, end = 0, len(data)
    value: int | bytes
    while pos < end:
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 2:
            length, pos = varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, value))
    return out
