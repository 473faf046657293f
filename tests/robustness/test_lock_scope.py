"""Issue 10: the ledger's lock covers the quota arithmetic only.

Counting and placement (the slow, input-driven part of a decision) run before the
ledger is asked, so one hostile pod's placement never holds up the admissions of
others, which only wait for the arithmetic.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from quota.placement import make_placer
from quota.settings import Settings
from tests.webhook.builders import (
    AppClient,
    FakeBackend,
    cluster_objects,
    node_objects,
    pod,
    submit,
)
from webhook.edge.app import create_app
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState


def test_placement_runs_while_the_ledger_lock_is_free() -> None:
    state = ClusterState([*cluster_objects(gpus=4), *node_objects(2)])
    ledger = MemoryLedger(state, Settings())
    real = make_placer(state)
    free_during_placement: list[bool] = []

    def watching(claims: Any, labels: Any) -> Any:
        got: list[bool] = []

        def try_lock() -> None:  # from another thread: would block if this one held it
            acquired = ledger.view.lock.acquire(timeout=1)
            got.append(acquired)
            if acquired:
                ledger.view.lock.release()

        thread = threading.Thread(target=try_lock)
        thread.start()
        thread.join()
        free_during_placement.append(got[0])
        return real(claims, labels)

    client = AppClient(create_app(FakeBackend(state), ledger, Settings(), watching))

    def post(path: str, document: dict[str, Any]) -> dict[str, Any]:
        return client.post(path, content=orjson.dumps(document)).json()["response"]

    assert submit(post, pod("p", templates=("one-gpu", "one-gpu")))["allowed"]
    assert free_during_placement and all(free_during_placement)
