"""`Backend`: the cluster view behind one interface.

A backend keeps a `ClusterState` current from some source: the directory backend is
`webhook.store.statedir`, the live cluster's is `webhook.kube.backend`. The ledger that
turns decisions into admission records is the other interface (`webhook.ledger.Ledger`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from webhook.store.clusterstate import ClusterState

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """A cluster view kept current from some source."""

    state: ClusterState
    blocking_io: bool  # fetch() may wait on the network

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def ready(self) -> tuple[bool, str]:
        """(True, "") when caches are synced and fresh, else (False, why)."""
        ...

    def fetch(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """One GET on a cache miss (a claim or template created a moment ago); None if absent.
        What it finds the backend puts in its store itself, as its informer would: the
        store has one writer, never the admission that asked."""
        ...
