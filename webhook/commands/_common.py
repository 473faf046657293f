"""Helpers shared by the file-driven subcommands (count, check, allocate)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from quota.cluster import ClusterState
from quota.errors import InvalidObject
from quota.settings import Settings
from webhook.state import load_documents, load_state

__all__ = [
    "add_input_arguments",
    "inputs_and_state",
    "load_settings",
    "print_json",
    "print_table",
]


def add_input_arguments(parser: argparse.ArgumentParser, state_required: bool = False) -> None:
    """FILE... [--state DIR] [--json]."""
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="YAML/JSON manifests")
    parser.add_argument(
        "--state",
        type=Path,
        required=state_required,
        metavar="DIR",
        help="directory of manifests standing in for the cluster",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def inputs_and_state(
    files: Sequence[Path], state_dir: Path | None
) -> tuple[list[Mapping[str, Any]], ClusterState]:
    """The objects of FILE... in order, and a cluster view of --state plus those objects."""
    state = load_state(state_dir) if state_dir else ClusterState()
    inputs: list[Mapping[str, Any]] = []
    for path in files:
        inputs.extend(load_documents(path))
    for obj in inputs:
        state.upsert(obj)
    return inputs, state


def print_json(document: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain, aligned text table."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print(
            "  ".join(
                str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)
            ).rstrip()
        )


def load_settings(path: Path | None) -> Settings:
    """Settings from the webhook's YAML config file, or the defaults without one."""
    if path is None:
        return Settings()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InvalidObject(str(path), "", f"invalid YAML: {exc}") from exc
    return Settings.from_mapping(data)
