"""The embedded default: a directory of YAML/JSON manifests standing in for a cluster."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from quota.cluster import ClusterState
from quota.errors import InvalidObject

__all__ = ["MANIFEST_SUFFIXES", "load_documents", "load_state"]

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _documents_of(path: Path) -> Iterator[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            yield orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InvalidObject(str(path), "", f"invalid JSON: {exc}") from exc
        return
    try:
        yield from yaml.safe_load_all(text)
    except yaml.YAMLError as exc:
        raise InvalidObject(str(path), "", f"invalid YAML: {exc}") from exc


def _flatten(doc: Any, source: str) -> Iterator[Mapping[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        raise InvalidObject(source, "", "not a Kubernetes object (expected a mapping)")
    if isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and "items" in doc:
        for i, item in enumerate(doc.get("items") or []):
            yield from _flatten(item, f"{source} items[{i}]")
        return
    if not isinstance(doc.get("kind"), str) or not isinstance(doc.get("metadata"), Mapping):
        raise InvalidObject(source, "", "not a Kubernetes object (kind and metadata are required)")
    yield doc


def load_documents(path: Path) -> list[Mapping[str, Any]]:
    """Every Kubernetes object in one file (multi-document YAML, JSON, `*List` kinds)."""
    objects: list[Mapping[str, Any]] = []
    for index, doc in enumerate(_documents_of(path)):
        objects.extend(_flatten(doc, f"{path} (document {index + 1})"))
    return objects


def _manifest_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


def load_state(*roots: Path) -> ClusterState:
    """A ClusterState holding every object found under the given files or directories."""
    state = ClusterState()
    for root in roots:
        if not root.exists():
            raise InvalidObject(str(root), "", "no such file or directory")
        for path in _manifest_files(root):
            for obj in load_documents(path):
                state.upsert(obj)
    return state
