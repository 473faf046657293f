"""`WaitingIndex`: gated pods and suspended Jobs by LocalQueue, followed through the store's
journal (a rescan only on the first read and after a relist)."""

from __future__ import annotations

import copy
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.waiting import ADMISSION_GATE
from tests.webhook.builders import NAMESPACE, pod
from tests.webhook.queueing.test_controller import gpu_job
from webhook.queueing.waitingindex import WaitingIndex
from webhook.store.clusterstate import ClusterState

DEFAULT = f"{NAMESPACE}/default"
OTHER = f"{NAMESPACE}/other"


def _gated(name: str, queue: str = "") -> dict[str, Any]:
    obj = pod(name, labels={QUEUE_LABEL: queue} if queue else None)
    obj["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return obj


def _suspended(name: str, queue: str = "") -> dict[str, Any]:
    job = gpu_job(name, 1)
    job["spec"]["suspend"] = True
    if queue:
        job["spec"]["template"]["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return job


def _names(index: WaitingIndex, state: ClusterState, *queues: str) -> tuple[list[str], list[str]]:
    pods, jobs = index.waiting(state.snapshot(), queues)
    return sorted(p["metadata"]["name"] for p in pods), sorted(j["metadata"]["name"] for j in jobs)


def test_the_index_follows_gates_suspension_and_queue_labels() -> None:
    state = ClusterState([_gated("a"), _gated("b", "other"), pod("running"), _suspended("j")])
    index = WaitingIndex()
    assert _names(index, state, DEFAULT) == (["a"], ["j"])
    assert _names(index, state, OTHER) == (["b"], [])
    assert _names(index, state, DEFAULT, OTHER) == (["a", "b"], ["j"])
    ungated = copy.deepcopy(state.get("Pod", NAMESPACE, "a"))
    assert ungated is not None
    ungated["spec"]["schedulingGates"] = []
    state.upsert(ungated)
    started = _suspended("j")
    started["spec"]["suspend"] = False
    state.upsert(started)
    state.upsert(_suspended("k", "other"))
    state.remove("Pod", NAMESPACE, "b")
    assert _names(index, state, DEFAULT, OTHER) == ([], ["k"])
    assert index.rescans == 2  # pods and Jobs, once each: the rest came from the journal


def test_a_relist_is_read_again_whole() -> None:
    state = ClusterState([_gated("a")])
    index = WaitingIndex()
    assert _names(index, state, DEFAULT) == (["a"], [])
    state.replace_kind("Pod", [_gated("b"), _gated("c")])
    assert _names(index, state, DEFAULT) == (["b", "c"], [])
    assert index.rescans == 3


def test_an_older_view_is_answered_as_it_was() -> None:
    state = ClusterState([_gated("a")])
    index = WaitingIndex()
    older = state.snapshot()
    state.upsert(_gated("b"))
    assert _names(index, state, DEFAULT) == (["a", "b"], [])
    pods, _ = index.waiting(older, [DEFAULT])
    assert [p["metadata"]["name"] for p in pods] == ["a"]


def test_a_view_of_another_store_is_read_afresh() -> None:
    state = ClusterState([_gated("a"), _suspended("j")])
    other = ClusterState([_gated("b")])  # its revisions say nothing of the first store
    index = WaitingIndex()
    assert _names(index, state, DEFAULT) == (["a"], ["j"])
    assert _names(index, other, DEFAULT) == (["b"], [])
    assert _names(index, state, DEFAULT) == (["a"], ["j"])
    assert index.rescans == 6  # each kind of each view, once per move between the stores
