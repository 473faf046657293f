"""How an object is named: its namespace, and its key `namespace/name`.

The API server puts an object that names no namespace into "default", so an object read
from a file or a request without `metadata.namespace` is named as the server would name
it. Every key of a namespaced object (a pod's usage holder, a LocalQueue, a Job, a
journal's changed key) is built here, so two modules never disagree about an object's
name. An absent, empty or malformed `metadata` counts as no namespace; the name is
formatted as found (`ns/None` for an object without one), as callers report it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_NAMESPACE",
    "namespace_of",
    "namespace_or_default",
    "object_key",
    "object_key_of",
]

DEFAULT_NAMESPACE = "default"


def namespace_or_default(namespace: object) -> str:
    """`namespace` as the API server would place it: "default" when absent or empty."""
    return str(namespace) if namespace else DEFAULT_NAMESPACE


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def namespace_of(obj: Mapping[str, Any]) -> str:
    """The namespace `obj` lives in: its `metadata.namespace`, else "default"."""
    return namespace_or_default(_metadata(obj).get("namespace"))


def object_key_of(namespace: object, name: object) -> str:
    """`namespace/name`, the namespace defaulted as `namespace_or_default` does."""
    return f"{namespace_or_default(namespace)}/{name}"


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name` of `obj` from its metadata."""
    return object_key_of(namespace_of(obj), _metadata(obj).get("name"))
