"""`serve --state DIR`: reloads of the directory, and the last good view kept on bad files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from quota.settings import Settings
from tests.webhook.builders import cluster_objects, pod
from webhook.ledger.memory import MemoryLedger
from webhook.store.statedir import StateDirBackend


def _write(path: Path, objects: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")


def test_state_dir_reloads_changed_files_and_fails_closed_on_bad_ones(tmp_path: Path) -> None:
    _write(tmp_path / "cluster.yaml", cluster_objects(gpus=1))
    backend = StateDirBackend(tmp_path)
    ledger = MemoryLedger(backend.state, Settings())
    assert backend.ready() == (True, "")
    assert not backend.poll()
    _write(tmp_path / "pods.yaml", [pod("live")])
    assert backend.poll()
    assert backend.state.get("Pod", "team-a", "live") is not None
    assert ledger.usage().holders() == {"team-a/live"}
    (tmp_path / "broken.yaml").write_text("kind: [", encoding="utf-8")
    assert backend.poll()
    ready, why = backend.ready()
    assert not ready and "broken.yaml" in why
    assert backend.state.get("Pod", "team-a", "live") is not None, "the last good view stays"
    (tmp_path / "broken.yaml").unlink()
    (tmp_path / "pods.yaml").unlink()
    assert backend.poll()
    assert backend.ready() == (True, "")
    assert ledger.usage().holders() == set()
    assert backend.relists() == {"state-dir": 2}
