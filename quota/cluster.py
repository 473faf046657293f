"""The cluster view: every object the decisions read, indexed by kind/namespace/name.

`ClusterView` is the cluster at one moment, frozen: what one decision reads, handed
to it whole, so that a decision never sees half of a change. The shell's store
(`webhook.store.clusterstate.ClusterState`, kept current from files or informers) hands
out its views in O(1): every kind is a persistent map (`immutables.Map`) that a
write copies only along one path. Each kind has a revision counter so that derived
indexes (pools, queue tables) can be kept and rebuilt only when their inputs changed:
what the core derives from a view is kept in the view's `derived` (`quota.derived`),
which every view of one store shares.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any, Protocol

import immutables

from quota.derived import DerivedCache
from quota.errors import InvalidObject

__all__ = [
    "CLUSTER_SCOPED",
    "ClusterView",
    "Journal",
    "Key",
    "Obj",
    "Objects",
    "ViewSource",
    "meta_of",
    "objects_of",
]

Obj = Mapping[str, Any]
Key = tuple[str | None, str]  # (namespace, name); namespace None for cluster-scoped kinds
Objects = immutables.Map[Key, Obj]
# (kind, after, upto) -> keys changed in that span of revisions, or None when unknown
Journal = Callable[[str, int, int], "set[Key] | None"]

_EMPTY: Objects = immutables.Map()

CLUSTER_SCOPED = frozenset(
    {
        "DeviceClass",
        "ResourceSlice",
        "Node",
        "Namespace",
        "ClusterQueue",
        "ResourceFlavor",
        "DeviceTaintRule",
        "QuotaLedger",
    }
)


def meta_of(obj: Obj) -> tuple[str, str | None, str]:
    """(kind, namespace, name) of an object; namespace None for cluster-scoped kinds."""
    if not isinstance(obj, Mapping):
        raise InvalidObject("object", "", "not a Kubernetes object (expected a mapping)")
    kind = obj.get("kind")
    metadata = obj.get("metadata")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject("object", "kind", "missing kind: not a Kubernetes object")
    if not isinstance(metadata, Mapping):
        raise InvalidObject(kind, "metadata", "missing metadata: not a Kubernetes object")
    name = metadata.get("name") or metadata.get("generateName")
    if not isinstance(name, str) or not name:
        raise InvalidObject(kind, "metadata.name", "required")
    if kind in CLUSTER_SCOPED:
        return kind, None, name
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise InvalidObject(kind, "metadata.namespace", "must be a string")
    return kind, namespace, name


class ClusterView:
    """The cluster at one revision of every kind, frozen: reads only, safe from any thread.

    `source` names the store the view was taken from. `derived` keeps what the core derives
    from the view (`quota.derived`): the store's views share one, keyed by revisions, so that
    successive views of an unchanged store share what was derived from them; a view made
    without one gets its own on first use. `generation` counts the store's writes: two views
    of one source with the same generation have the same revisions of every kind, so a
    caller that saw one need not read them again.
    """

    __slots__ = ("_derived", "_journal", "_objects", "_revisions", "generation", "source")

    def __init__(
        self,
        objects: Mapping[str, Objects],
        revisions: Mapping[str, int],
        source: object = None,
        journal: Journal | None = None,
        generation: int = 0,
        derived: DerivedCache | None = None,
    ) -> None:
        self._objects = objects
        self._revisions = revisions
        self.source = source if source is not None else object()
        self._journal = journal
        self.generation = generation
        self._derived = derived

    @property
    def derived(self) -> DerivedCache:
        """What the core derives from this view, kept with it (`quota.derived`)."""
        if self._derived is None:  # two threads may make one each: either is right
            self._derived = DerivedCache()
        return self._derived

    @classmethod
    def of(cls, objects: Iterable[Obj]) -> ClusterView:
        """A view of these objects alone (every kind at revision 1)."""
        by_kind: dict[str, dict[Key, Obj]] = {}
        for obj in objects:
            kind, namespace, name = meta_of(obj)
            by_kind.setdefault(kind, {})[(namespace, name)] = obj
        return cls(
            {kind: objects_of(found.items()) for kind, found in by_kind.items()},
            dict.fromkeys(by_kind, 1),
        )

    def snapshot(self) -> ClusterView:
        """This view: it is frozen already."""
        return self

    def with_object(self, obj: Obj) -> ClusterView:
        """This view with `obj` added or replaced, as it will be once stored. A view of its
        own (a new `source`): nothing derived from it is taken for the store's, but values
        derived per object are shared (`DerivedCache.variant`)."""
        kind, namespace, name = meta_of(obj)
        objects = self._objects.get(kind, _EMPTY).set((namespace, name), obj)
        variant = self.derived.variant()
        return ClusterView({**self._objects, kind: objects}, self._revisions, derived=variant)

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One object, or None."""
        return self._objects.get(kind, _EMPTY).get((namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> builtins.list[Obj]:
        """Objects of a kind (in one namespace if given), sorted by namespace and name."""
        items = sorted(self._objects.get(kind, _EMPTY).items(), key=_by_namespace_and_name)
        return [obj for (ns, _), obj in items if namespace is None or ns == namespace]

    def revision(self, *kinds: str) -> tuple[int, ...]:
        """A value that changes whenever an object of one of these kinds changes."""
        return tuple(map(self._revisions.get, kinds, repeat(0)))

    def changed_since(self, kind: str, revision: int) -> set[Key] | None:
        """(namespace, name) of the objects of `kind` that differ between `revision` (a value
        of `revision(kind)[0]` of a view of the same store) and this view: upserted or
        removed after it up to this view, or, when this view is the older one, after this
        view up to it. None when that is no longer known (a wholesale replace, or longer ago
        than the store's journal reaches): the caller then rescans the kind."""
        now = self._revisions.get(kind, 0)
        if revision == now:
            return set()
        if self._journal is None:
            return None
        return self._journal(kind, min(revision, now), max(revision, now))

    def kinds(self) -> builtins.list[str]:
        """Kinds present in the view."""
        return sorted(self._objects)


def objects_of(found: Iterable[tuple[Key, Obj]]) -> Objects:
    """The persistent map of these (key, object) pairs; the last of a key wins."""
    with _EMPTY.mutate() as building:  # built in place: no dict of them all on the way
        for key, obj in found:
            building[key] = obj
        built = building.finish()
    return built


class ViewSource(Protocol):
    """Whatever hands out views: the store (its view now), or a view (itself)."""

    def snapshot(self) -> ClusterView: ...


def _by_namespace_and_name(item: tuple[Key, Obj]) -> tuple[str, str]:
    return item[0][0] or "", item[0][1]
