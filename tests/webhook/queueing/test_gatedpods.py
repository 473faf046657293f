"""GatedPods follows the cluster view's journal: it answers like a full scan, without one."""

from __future__ import annotations

from typing import Any

from quota.livepods import ADMISSION_GATE, is_gated
from webhook.queueing.gatedpods import GatedPods
from webhook.store.clusterstate import JOURNAL_LENGTH, ClusterState


def _pod(name: str, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": []}
    if gated:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


def _scan(state: ClusterState) -> list[str]:
    return _names([p for p in state.list("Pod") if is_gated(p)])


def test_it_follows_creates_ungating_and_deletes_without_rescanning() -> None:
    state = ClusterState([_pod("a", True), _pod("b", False)])
    gated = GatedPods(state)
    assert _names(gated.pods()) == ["a"] and gated.rescans == 1
    state.upsert(_pod("c", True))
    state.upsert(_pod("a", False))  # ungated
    assert _names(gated.pods()) == ["c"] == _scan(state)
    state.remove("Pod", "ns", "c")
    state.upsert(_pod("d", True))
    assert _names(gated.pods()) == ["d"] == _scan(state)
    assert gated.rescans == 1


def test_a_journal_that_no_longer_reaches_back_means_one_rescan() -> None:
    state = ClusterState([_pod("a", True)])
    gated = GatedPods(state)
    gated.pods()
    for i in range(JOURNAL_LENGTH + 10):
        state.upsert(_pod(f"p{i}", i % 2 == 0))
    state.remove("Pod", "ns", "a")
    assert _names(gated.pods()) == _scan(state)
    assert gated.rescans == 2
