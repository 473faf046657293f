"""Errors raised by the quota core.

Bad input raises; "does not fit" and "cannot be placed" are ordinary results
and never raise. Every error carries the object and field path it is about, so
a refusal carries a message a user can act on (`quota.verdict.refusal`), and tests
can match on fields instead of text.

    DraquotaError
    ├── InvalidObject         malformed object or unsupported field value (Verdict.INVALID)
    │   ├── InvalidQuantity   a quantity that does not parse or is not allowed
    │   └── UnsupportedValue  a field value outside the supported ones, kept as `value`
    └── NotFound              a referenced object does not exist (Verdict.DENIED); it names
                              the first one met and lists in `missing` all found absent
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "DraquotaError",
    "InvalidObject",
    "InvalidQuantity",
    "NotFound",
    "ObjectRef",
    "UnsupportedValue",
    "object_ref",
]


def object_ref(kind: str, namespace: str | None, name: str | None) -> str:
    """`Kind ns/name` (or `Kind name` for cluster-scoped objects)."""
    name = name or "<unnamed>"
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


class ObjectRef(NamedTuple):
    """One cluster object, by what the API server looks it up with."""

    kind: str
    namespace: str | None  # None for cluster-scoped objects
    name: str


class DraquotaError(Exception):
    """Base of every error the quota core raises on purpose."""


class InvalidObject(DraquotaError):
    """An object is malformed: `obj` names it, `path` is the offending field."""

    def __init__(self, obj: str, path: str, reason: str) -> None:
        self.obj = obj
        self.path = path
        self.reason = reason
        where = f"{obj}: {path}" if path else obj
        super().__init__(f"{where}: {reason}")


class InvalidQuantity(InvalidObject):
    """A quantity does not parse, is negative, or is fractional where integers are required."""


class UnsupportedValue(InvalidObject):
    """A field holds a value draquota does not support; `value` is that value, as read."""

    def __init__(self, obj: str, path: str, value: str, reason: str) -> None:
        super().__init__(obj, path, reason)
        self.value = value


class NotFound(DraquotaError):
    """A referenced object is missing from the cluster view.

    The message names the first one met; `missing` lists every object the same lookup
    found absent (this one included, in a stable order), so that a caller that can fetch
    them fetches all at once."""

    def __init__(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        referrer: str = "",
        missing: tuple[ObjectRef, ...] = (),
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.referrer = referrer
        self.missing = missing if self.ref in missing else (self.ref, *missing)
        message = f"{object_ref(kind, namespace, name)} not found"
        super().__init__(f"{referrer}: {message}" if referrer else message)

    @property
    def ref(self) -> ObjectRef:
        """The object the message names."""
        return ObjectRef(self.kind, self.namespace, self.name)
