"""`GatedPods`: the pods of a cluster view that carry draquota's scheduling gate.

The queueing controller, the status writer and the metrics read the waiting pods every
pass; looking at every cached pod each time would cost O(pods). This set follows the
store's change journal instead (`quota.journal.JournalCursor`): a read costs O(pods changed
since the last one), and a full rescan only on the first read, after a relist, or when the
journal no longer reaches back that far. Not thread-safe: each reader keeps its own.
"""

from __future__ import annotations

from quota.cluster import Obj
from quota.journal import JournalCursor
from quota.livepods import is_gated
from webhook.store.clusterstate import ClusterState

__all__ = ["GatedPods"]


class GatedPods:
    """The gated pods of `state`, brought up to date on each read."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._cursor = JournalCursor(state)
        self._pods: dict[tuple[str | None, str], Obj] = {}
        self.rescans = 0

    def pods(self) -> list[Obj]:
        changed = self._cursor.take("Pod")
        if changed is None:
            self._rescan()
        else:
            for namespace, name in changed:
                self._update(namespace, name, self._state.get("Pod", namespace, name))
        return list(self._pods.values())

    def _rescan(self) -> None:
        self.rescans += 1
        self._pods = {}
        for pod in self._state.list("Pod"):
            metadata = pod.get("metadata") or {}
            self._update(metadata.get("namespace"), str(metadata.get("name")), pod)

    def _update(self, namespace: str | None, name: str, pod: Obj | None) -> None:
        if pod is not None and is_gated(pod):
            self._pods[(namespace, name)] = pod
        else:
            self._pods.pop((namespace, name), None)
