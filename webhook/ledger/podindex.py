"""`PodIndex`: the cached pods of a cluster view, and which of them read what.

A pod's charge reads its claims and templates (named or generated) and, through its
LocalQueue and Namespace, its namespace. `PodUsage` recharges the pods a changed object is
read by; this index answers which, and by which key a UID is cached. It holds objects and
keys only: charges are `PodUsage`'s. Not thread-safe, as `PodUsage`.

Invariants: every cached pod is in the map of its namespace and of every claim it reads,
and nothing else is (empty sets are dropped); `_uids` maps a UID to the key of the cached
pod with it.
"""

from __future__ import annotations

from collections.abc import KeysView, Mapping
from typing import Any

from quota.claims import ClaimRef, claim_references
from quota.cluster import Obj
from quota.livepods import pod_uid

__all__ = ["PodIndex"]


def _metadata(obj: Obj) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _same_pod(old: Obj | None, new: Obj) -> bool:
    """The same object, or the same version of it (the API server's resourceVersion changes
    with every write, so equal versions of one UID are equal pods)."""
    if old is None:
        return False
    if old is new:
        return True
    version = _metadata(new).get("resourceVersion")
    return (
        bool(version)
        and version == _metadata(old).get("resourceVersion")
        and pod_uid(old) == pod_uid(new)
    )


def _discard(index: dict[Any, set[str]], at: Any, key: str) -> None:
    keys = index.get(at)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[at]


class PodIndex:
    """Pods by `ns/name`, their keys by UID, by namespace and by the claims they read."""

    def __init__(self) -> None:
        self._pods: dict[str, Obj] = {}
        self._uids: dict[str, str] = {}  # uid -> key, for every cached pod with a UID
        self._readers: dict[ClaimRef, set[str]] = {}  # claim or template -> keys of pods reading it
        self._by_namespace: dict[str, set[str]] = {}  # namespace -> keys of its cached pods

    # -- queries ---------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        return self._pods.get(key)

    def key_of(self, uid: str) -> str | None:
        """The key of the cached pod with this UID."""
        return self._uids.get(uid)

    def keys(self) -> KeysView[str]:
        return self._pods.keys()

    def readers(self, ref: ClaimRef) -> list[str]:
        """Keys of the cached pods reading this claim or template, sorted."""
        return sorted(self._readers.get(ref, ()))

    def refs(self, kind: str) -> list[ClaimRef]:
        """Every claim or template of `kind` a cached pod reads."""
        return [ref for ref in self._readers if ref[0] == kind]

    def in_namespace(self, namespace: str) -> list[str]:
        """Keys of the cached pods of a namespace, sorted."""
        return sorted(self._by_namespace.get(namespace, ()))

    def count_in(self, namespace: str) -> int:
        return len(self._by_namespace.get(namespace, ()))

    def departed_from(self, current: Mapping[str, Obj]) -> list[str]:
        """UIDs of the cached pods that `current` (every pod by `ns/name`) no longer has."""
        return [
            uid
            for key, old in self._pods.items()
            if (uid := pod_uid(old)) and (key not in current or pod_uid(current[key]) != uid)
        ]

    # -- updates ---------------------------------------------------------------------

    def refresh(self, key: str, pod: Obj) -> bool:
        """Keep `pod` in place of the cached pod at `key` if it is the same version of it (a
        relist's copy: nothing it reads changed); False when it is not."""
        if not _same_pod(self._pods.get(key), pod):
            return False
        self._pods[key] = pod
        return True

    def add(self, key: str, pod: Obj) -> None:
        """Cache a pod at a key no pod is cached at (`remove` the one there first)."""
        self._pods[key] = pod
        self._by_namespace.setdefault(key.split("/", 1)[0], set()).add(key)
        if uid := pod_uid(pod):
            self._uids[uid] = key
        for ref in claim_references(pod, generated=True):
            self._readers.setdefault(ref, set()).add(key)

    def remove(self, key: str, still: str = "") -> tuple[Obj | None, str]:
        """Drop the pod at `key`: the pod, and its UID if that left the index with it (not when
        it is `still`, the UID of the pod that replaces it at once)."""
        old = self._pods.pop(key, None)
        if old is None:
            return None, ""
        _discard(self._by_namespace, key.split("/", 1)[0], key)
        for ref in claim_references(old, generated=True):
            _discard(self._readers, ref, key)
        uid = pod_uid(old)
        if uid and uid != still and self._uids.get(uid) == key:
            del self._uids[uid]
            return old, uid
        return old, ""
