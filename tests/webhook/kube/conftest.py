"""Fixtures: a fake API server on 127.0.0.1 and kubeconfig-built clients pointing at it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakeapi import FakeApiServer
from webhook.kube.client import KubeClient
from webhook.kube.informer import Informer, InformerOptions

FAST = InformerOptions(
    page_size=2, watch_timeout=5, read_timeout=1.0, backoff_initial=0.02, backoff_max=0.2
)


def write_kubeconfig(path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@dataclass
class InformersHeld:
    """Informers are being made (API versions discovered) until `release` is set."""

    entered: threading.Event
    release: threading.Event


@pytest.fixture
def informers_held(monkeypatch: pytest.MonkeyPatch) -> Iterator[InformersHeld]:
    """Holds the creation of every Informer until the test sets `release` (set at teardown)."""
    held = InformersHeld(threading.Event(), threading.Event())
    create = Informer.__init__

    def slowly(self: Informer, *args: Any, **kwargs: Any) -> None:
        held.entered.set()
        held.release.wait(10)
        create(self, *args, **kwargs)

    monkeypatch.setattr(Informer, "__init__", slowly)
    yield held
    held.release.set()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(resource_versions=("v1",), bookmark_interval=0.1).start()
    yield server
    server.stop()


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", api.url)


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[KubeClient]:
    kube = KubeClient.from_kubeconfig(str(kubeconfig))
    yield kube
    kube.api_client.close()
