"""The embedded `--state DIR`: every YAML/JSON manifest under a directory (SPEC §7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quota.errors import InvalidObject
from webhook.store.manifests import load_state


def test_loads_multi_document_yaml_json_lists_and_subdirectories(tmp_path: Path) -> None:
    (tmp_path / "nodes").mkdir()
    (tmp_path / "a.yaml").write_text(
        "kind: Namespace\nmetadata: {name: team-a}\n---\n---\n"
        "kind: Pod\nmetadata: {name: p, namespace: team-a}\n"
    )
    (tmp_path / "nodes" / "n.json").write_text(
        json.dumps(
            {
                "kind": "NodeList",
                "items": [
                    {"kind": "Node", "metadata": {"name": "n1"}},
                    {"kind": "Node", "metadata": {"name": "n2"}},
                ],
            }
        )
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    state = load_state(tmp_path)
    assert state.kinds() == ["Namespace", "Node", "Pod"]
    assert [n["metadata"]["name"] for n in state.list("Node")] == ["n1", "n2"]
    assert state.get("Pod", "team-a", "p") is not None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("- a\n- b\n", "not a Kubernetes object"),
        ("kind: Pod\n", "not a Kubernetes object"),
        ("kind: Pod\nmetadata: {name: [\n", "invalid YAML"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, text: str, reason: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(InvalidObject) as info:
        load_state(tmp_path)
    assert "bad.yaml" in str(info.value)
    assert reason in str(info.value)


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidObject, match="no such file"):
        load_state(tmp_path / "nope")
