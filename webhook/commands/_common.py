"""Helpers shared by the subcommands: kubectl-style inputs (`-f`-like FILE..., `-`, `-R`),
output (`-o json|yaml|wide|name`), a progress line for slow inputs, the namespace of
namespace-less inputs, and the config file."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from quota.claims import CLAIM_KINDS
from quota.errors import InvalidObject
from quota.settings import Settings
from quota.workloads import WORKLOAD_KINDS
from webhook.store.manifests import decode_text, load_inputs, parse_yaml

__all__ = [
    "OUTPUTS",
    "Progress",
    "add_input_arguments",
    "add_output_argument",
    "emit",
    "in_namespace",
    "load_settings",
    "output_format",
    "print_json",
    "print_table",
    "read_inputs",
]

OUTPUTS = ("json", "yaml", "wide", "name")


def add_output_argument(parser: argparse.ArgumentParser, choices: Sequence[str] = OUTPUTS) -> None:
    """-o/--output FORMAT, and --json (the same as -o json)."""
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        metavar="FORMAT",
        help=f"output format: {'|'.join(choices)} (default: a table)",
    )
    parser.add_argument("--json", action="store_true", help="the same as -o json")


def add_input_arguments(parser: argparse.ArgumentParser, state_required: bool = False) -> None:
    """FILE... [-R] [--state DIR] [-o FORMAT] [--json]."""
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="YAML/JSON manifests, a directory of them, or - for standard input",
    )
    parser.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="read directories given as FILE recursively",
    )
    parser.add_argument(
        "--state",
        type=Path,
        required=state_required,
        metavar="DIR",
        help="directory of manifests standing in for the cluster",
    )
    add_output_argument(parser)


def output_format(args: argparse.Namespace) -> str | None:
    """The -o format (None for the default table); --json means -o json."""
    return "json" if getattr(args, "json", False) else getattr(args, "output", None)


class Progress:
    """A one-line progress report on stderr, shown only on a terminal and only once the
    work has taken longer than `after` seconds; the line is cleared when done."""

    def __init__(
        self,
        command: str,
        stream: TextIO | None = None,
        after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = command
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.after = after
        self.clock = clock
        self.start = clock()
        self.shown = False
        self.files = 0
        self.objects = 0

    def reading(self, path: Path, documents: int) -> None:
        self.update(f"reading {path}: {documents} documents")

    def file_read(self, path: Path, objects: int) -> None:
        self.files += 1
        self.objects += objects
        self.update(f"read {self.files} files, {self.objects} objects (last: {path})")

    def update(self, text: str) -> None:
        if not self.enabled or self.clock() - self.start < self.after:
            return
        self.stream.write(f"\r\033[Kdraquota {self.command}: {text}")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def read_inputs(
    args: argparse.Namespace, progress: Progress | None = None
) -> list[tuple[Path, list[Mapping[str, Any]]]]:
    """(file, objects) for FILE... (files, `-`, directories; -R to recurse)."""
    return load_inputs(args.files, getattr(args, "recursive", False), progress)


NAMESPACED_KINDS = frozenset({*WORKLOAD_KINDS, *CLAIM_KINDS, "LocalQueue"})


def in_namespace(obj: Mapping[str, Any], namespace: str) -> Mapping[str, Any]:
    """A namespaced object without a namespace, put in `namespace` (as kubectl does); any
    other object as it is."""
    metadata = obj.get("metadata")
    if obj.get("kind") not in NAMESPACED_KINDS or not isinstance(metadata, Mapping):
        return obj
    if metadata.get("namespace"):
        return obj
    return {**obj, "metadata": {**metadata, "namespace": namespace}}


def print_json(document: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A kubectl-style aligned text table (three spaces between columns)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print(
            "   ".join(
                str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)
            ).rstrip()
        )


def emit(
    fmt: str | None,
    items: list[dict[str, Any]],
    table: Callable[[bool], tuple[Sequence[str], Iterable[Sequence[Any]]]],
    name: Callable[[dict[str, Any]], str],
) -> None:
    """Print `items` as -o json|yaml (`{"items": [...]}`), -o name, or the (wide) table."""
    if fmt == "json":
        print_json({"items": items})
    elif fmt == "yaml":
        sys.stdout.write(yaml.safe_dump({"items": items}, sort_keys=False))
    elif fmt == "name":
        for item in items:
            print(name(item))
    else:
        header, rows = table(fmt == "wide")
        print_table(header, list(rows))


def load_settings(path: Path | None) -> Settings:
    """Settings from the webhook's YAML config file, or the defaults without one."""
    if path is None:
        return Settings()
    source = str(path)
    documents = parse_yaml(decode_text(path.read_bytes(), source), source)
    if len(documents) > 1:
        raise InvalidObject(source, "", "must hold one YAML document")
    try:
        return Settings.from_mapping(documents[0] if documents else None)
    except InvalidObject as exc:
        # The config file is one object: name the file, keep the field path.
        raise InvalidObject(source, exc.path, exc.reason) from None
