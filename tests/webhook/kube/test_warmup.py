"""The placement index is built once the caches are ready, and readiness waits for it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from webhook.kube.warmup import WarmUp


class Backend:
    def __init__(self) -> None:
        self.synced = False

    def caches_ready(self) -> tuple[bool, str]:
        return (self.synced, "" if self.synced else "syncing")


def _placement(backend: Backend, build: Callable[[], None]) -> WarmUp:
    return WarmUp(
        "placement-warm-up", backend, build, "building the placement index", ready_on_failure=True
    )


def test_the_index_is_built_once_after_the_caches_are_ready() -> None:
    backend, built = Backend(), threading.Event()
    calls: list[bool] = []

    def build() -> None:
        calls.append(backend.synced)
        built.set()

    warm = _placement(backend, build)
    warm.start()
    try:
        assert not built.wait(0.2)
        assert warm.warming() == "building the placement index"
        backend.synced = True
        assert built.wait(5)
        warm._thread.join(5)  # type: ignore[union-attr]
        assert calls == [True]
        assert warm.warming() == ""
    finally:
        warm.stop()


def test_a_failed_build_does_not_keep_the_replica_unready() -> None:
    backend = Backend()
    backend.synced = True

    def build() -> None:
        raise RuntimeError("malformed slice")

    warm = _placement(backend, build)
    warm.start()
    warm._thread.join(5)  # type: ignore[union-attr]
    assert warm.warming() == ""
    warm.stop()


def test_a_failed_load_the_replica_cannot_decide_without_keeps_it_unready() -> None:
    backend = Backend()
    backend.synced = True

    def load() -> None:
        raise RuntimeError("API server gone")

    warm = WarmUp("ledger-warm-up", backend, load, "loading", ready_on_failure=False)
    warm.start()
    warm._thread.join(5)  # type: ignore[union-attr]
    assert warm.warming() == "loading"
    warm.stop()
