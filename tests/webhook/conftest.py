"""Fixtures of the webhook tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def no_machine_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No $KUBECONFIG and an empty home: a command that finds its cluster as kubectl does
    (`webhook.commands._kubeconfig`) never reads the kubeconfig of the machine running the
    tests, only what a test gives it."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
