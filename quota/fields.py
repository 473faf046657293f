"""Reading fields of a Kubernetes object as parsed JSON: typed, and every error names the
object and the whole path of the field (`InvalidObject`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quota.errors import InvalidObject

__all__ = ["FieldReader"]


class FieldReader:
    """Typed field access that names the object and path in every error. `base` is where
    the part read sits in the object (`spec.template` for a Job's pod): paths given to the
    reader are relative to it, paths in its errors are whole."""

    def __init__(self, ref: str, base: str = "") -> None:
        self.ref = ref
        self.base = base

    def at(self, path: str) -> str:
        """The whole path of `path`."""
        return f"{self.base}.{path}" if self.base else path

    def fail(self, path: str, reason: str) -> InvalidObject:
        return InvalidObject(self.ref, self.at(path), reason)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, "must be an object")
        return value

    def items(self, value: Any, path: str) -> Sequence[Any]:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise self.fail(path, "must be a list")
        return value

    def string(self, value: Any, path: str, required: bool = False) -> str:
        if value is None or value == "":
            if required:
                raise self.fail(path, "required")
            return ""
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {value!r}")
        return value

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        return tuple(
            self.string(v, f"{path}[{i}]", True) for i, v in enumerate(self.items(value, path))
        )

    def cel_selectors(self, value: Any, path: str) -> tuple[str | None, ...]:
        """CEL expressions of `selectors`; None marks a selector of no known type."""
        out = []
        for i, selector in enumerate(self.items(value, path)):
            cel = self.mapping(
                self.mapping(selector, f"{path}[{i}]").get("cel"), f"{path}[{i}].cel"
            )
            out.append(self.string(cel.get("expression"), f"{path}[{i}].cel.expression") or None)
        return tuple(out)

    def boolean(self, value: Any, path: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(path, f"must be a boolean, got {value!r}")
        return value
