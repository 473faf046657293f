"""A cluster state with one object added or replaced, as it would be once a request is stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quota.cluster import ClusterState, meta_of

__all__ = ["WithObject"]


class WithObject(ClusterState):
    """A read-only view of a cluster state with one object added or replaced."""

    def __init__(self, base: ClusterState, obj: Mapping[str, Any]) -> None:
        super().__init__()
        self._base = base
        self._extra = meta_of(obj)
        self._obj = obj

    def get(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        if (kind, namespace, name) == self._extra:
            return self._obj
        return self._base.get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return self._base.list(kind, namespace)

    def revision(self, *kinds: str) -> tuple[int, ...]:
        return self._base.revision(*kinds)
