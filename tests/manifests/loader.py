"""The kustomize base as data: every document of every resource file, with where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "base"  # the kustomize base; overlays/ and examples/ sit beside it
NAMESPACE = "draquota-system"
CRD_FILES = (
    "crds/clusterqueues.yaml",
    "crds/localqueues.yaml",
    "crds/resourceflavors.yaml",
    "crds/quotaledgers.yaml",
)


@dataclass(frozen=True)
class Doc:
    file: str
    index: int
    obj: dict[str, Any]

    @property
    def id(self) -> str:
        name = self.obj.get("metadata", {}).get("name", "?")
        return f"{self.file}#{self.index}:{self.obj.get('kind')}/{name}"


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))


def resource_files() -> list[str]:
    return list(kustomization()["resources"])


def load_docs(files: list[str] | None = None) -> list[Doc]:
    """Documents of the listed files that exist (CRD files are written by other helpers)."""
    docs = []
    for file in files if files is not None else resource_files():
        path = MANIFESTS / file
        if not path.is_file():
            continue
        for index, obj in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if obj is not None:
                docs.append(Doc(file, index, obj))
    return docs


def only(kind: str, name: str | None = None) -> dict[str, Any]:
    """The single document of `kind` (and `name`) in the base."""
    found = [
        d.obj
        for d in load_docs()
        if d.obj["kind"] == kind and (name is None or d.obj["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
