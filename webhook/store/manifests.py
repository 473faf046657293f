"""The embedded default: a directory of YAML/JSON manifests standing in for a cluster.

YAML goes through libyaml (PyYAML's C loader) when PyYAML was built with it, else
through the pure-Python loader; JSON through orjson. A file that is not UTF-8 text
(a binary, a Latin-1 file) is bad input naming the file, like malformed YAML.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml

from quota.errors import InvalidObject
from webhook.store.clusterstate import ClusterState

__all__ = [
    "MANIFEST_SUFFIXES",
    "STDIN",
    "YAML_LOADER",
    "ReadProgress",
    "decode_text",
    "load_documents",
    "load_inputs",
    "load_state",
    "parse_yaml",
]

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = Path("-")

# libyaml when available (about 8x faster on large files); the benchmark swaps in the
# pure-Python loader as its baseline.
YAML_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ReadProgress(Protocol):
    """Told how far reading has got: documents parsed so far in a file, a file finished."""

    def reading(self, path: Path, documents: int) -> None: ...

    def file_read(self, path: Path, objects: int) -> None: ...


def decode_text(data: bytes, source: str) -> str:
    """`data` as UTF-8 text (a BOM is dropped); InvalidObject naming `source` when it is not."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidObject(
            source,
            "",
            f"not a UTF-8 text file (byte 0x{data[exc.start]:02x} at offset {exc.start})",
        ) from None


def parse_yaml(text: str, source: str, tick: Callable[[int], None] | None = None) -> list[Any]:
    """Every document of a YAML stream; InvalidObject naming `source` when it does not parse.

    `tick(n)` is called after every 1000th document (progress of a large file).
    """
    documents: list[Any] = []
    try:
        for document in yaml.load_all(text, Loader=YAML_LOADER):
            documents.append(document)
            if tick is not None and len(documents) % 1000 == 0:
                tick(len(documents))
        return documents
    except yaml.YAMLError as exc:
        raise InvalidObject(source, "", f"invalid YAML: {exc}") from None
    except RecursionError:
        raise InvalidObject(source, "", "invalid YAML: nested too deeply") from None


def _read(path: Path) -> bytes:
    if path == STDIN:
        return sys.stdin.buffer.read()
    return path.read_bytes()


def _documents_of(path: Path, tick: Callable[[int], None] | None) -> list[Any]:
    source = "standard input" if path == STDIN else str(path)
    data = _read(path)
    if path.suffix == ".json" or (path == STDIN and data.lstrip()[:1] in (b"{", b"[")):
        decode_text(data, source)
        try:
            return [orjson.loads(data)]
        except orjson.JSONDecodeError as exc:
            raise InvalidObject(source, "", f"invalid JSON: {exc}") from None
    return parse_yaml(decode_text(data, source), source, tick)


def _flatten(doc: Any, source: str) -> Iterator[Mapping[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        raise InvalidObject(source, "", "not a Kubernetes object (expected a mapping)")
    if isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and "items" in doc:
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise InvalidObject(source, "items", "must be a list")
        for i, item in enumerate(items):
            yield from _flatten(item, f"{source} items[{i}]")
        return
    if not isinstance(doc.get("kind"), str) or not isinstance(doc.get("metadata"), Mapping):
        raise InvalidObject(source, "", "not a Kubernetes object (kind and metadata are required)")
    yield doc


def load_documents(
    path: Path, tick: Callable[[int], None] | None = None
) -> list[Mapping[str, Any]]:
    """Every Kubernetes object in one file (multi-document YAML, JSON, `*List` kinds).

    `-` reads standard input; `tick(n)` reports progress through a large YAML stream.
    """
    name = "standard input" if path == STDIN else str(path)
    objects: list[Mapping[str, Any]] = []
    for index, doc in enumerate(_documents_of(path, tick)):
        objects.extend(_flatten(doc, f"{name} (document {index + 1})"))
    return objects


def _manifest_files(root: Path, recursive: bool = True) -> list[Path]:
    """`root` itself when it is a file, else the manifests in it (and below, if `recursive`)."""
    if root == STDIN or root.is_file():
        return [root]
    if not root.exists():
        raise InvalidObject(str(root), "", "no such file or directory")
    found = root.rglob("*") if recursive else root.glob("*")
    return sorted(p for p in found if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


def load_inputs(
    roots: Sequence[Path], recursive: bool = False, progress: ReadProgress | None = None
) -> list[tuple[Path, list[Mapping[str, Any]]]]:
    """(file, its objects) for every FILE argument: files, `-` and directories, like `kubectl -f`.

    A file or directory that holds no object is an error: it is almost always a wrong path.
    """
    out: list[tuple[Path, list[Mapping[str, Any]]]] = []
    for root in roots:
        files = _manifest_files(root, recursive)
        found = 0
        for path in files:
            tick = None
            if progress is not None:
                tick = functools.partial(progress.reading, path)
            objects = load_documents(path, tick)
            if root == path and not objects:
                raise InvalidObject(_name(path), "", "no objects found (the file is empty)")
            found += len(objects)
            out.append((path, objects))
            if progress is not None:
                progress.file_read(path, len(objects))
        if not found:
            suffixes = ", ".join(MANIFEST_SUFFIXES)
            raise InvalidObject(_name(root), "", f"no objects found in {suffixes} files")
    return out


def _name(path: Path) -> str:
    return "standard input" if path == STDIN else str(path)


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
