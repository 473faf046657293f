"""The placement index is built once the caches are ready, and readiness waits for it."""

from __future__ import annotations

import threading

from webhook.kube.warmup import PlacementWarmUp


class Backend:
    def __init__(self) -> None:
        self.synced = False

    def caches_ready(self) -> tuple[bool, str]:
        return (self.synced, "" if self.synced else "syncing")


def test_the_index_is_built_once_after_the_caches_are_ready() -> None:
    backend, built = Backend(), threading.Event()
    calls: list[bool] = []

    def build() -> None:
        calls.append(backend.synced)
        built.set()

    warm = PlacementWarmUp(backend, build)
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

    warm = PlacementWarmUp(backend, build)
    warm.start()
    warm._thread.join(5)  # type: ignore[union-attr]
    assert warm.warming() == ""
    warm.stop()
