"""Strict decoding: unknown fields are errors, as with kubectl's strict field validation.

A schema is a nested mapping of the fields an object may have: a field maps to the
schema of its value (a mapping for an object, a one-element list or tuple for a list
of objects) or to None when its value is free-form (labels, metadata, quantities).
Schemas kept as module constants are `frozen_schema`s: read-only all the way down.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from quota.errors import InvalidObject

__all__ = ["Schema", "frozen_schema", "reject_unknown_fields", "unknown_fields"]

Schema = Mapping[str, Any]


def frozen_schema(schema: Schema) -> Schema:
    """The same schema with every mapping read-only and every list a tuple."""
    return MappingProxyType({key: _frozen(value) for key, value in schema.items()})


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return frozen_schema(value)
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    return value


def unknown_fields(value: Any, schema: Any, path: str = "") -> list[tuple[str, str | None]]:
    """(field path, closest known name or None) for every field `schema` does not list."""
    found: list[tuple[str, str | None]] = []
    if isinstance(schema, list | tuple) and isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(unknown_fields(item, schema[0], f"{path}[{i}]"))
    elif isinstance(schema, Mapping) and isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if key not in schema:
                close = difflib.get_close_matches(str(key), list(schema), n=1, cutoff=0.75)
                found.append((here, close[0] if close else None))
            elif schema[key] is not None:
                found.extend(unknown_fields(item, schema[key], here))
    return found


def reject_unknown_fields(ref: str, value: Any, schema: Schema, prefix: str = "") -> None:
    """InvalidObject for the first unknown field, with its path (and the likely intended name)."""
    found = unknown_fields(value, schema, prefix)
    if not found:
        return
    path, close = found[0]
    hint = f' (did you mean "{close}"?)' if close else ""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise InvalidObject(ref, path, f"unknown field{hint}{more}")
