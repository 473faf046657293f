"""Placements remembered between admissions, and read without expanding a pod.

A placement depends on the claims and the cluster's devices, never on quota usage,
so every replica of a workload shares one answer per revision of what placement
reads. `knows` tells the app, before it decides anything, whether a pod's answer is
at hand: then its decision may run on the event loop (`webhook.edge.runner`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from quota.claims import PodClaim
from quota.cluster import ClusterView
from quota.flavorfilter import Placer, placer_on
from quota.placement import Placement
from quota.placement.index import INDEX_KINDS
from webhook.admission.revisioncache import RevisionCache
from webhook.edge.runner import offload_if_inline
from webhook.store.clusterstate import ClusterState

__all__ = ["PLACEMENT_KINDS", "CachedPlacer"]

# Everything a placement reads: what the placement index is built from, and the templates
# the claims of a pod are stamped from.
PLACEMENT_KINDS = (*INDEX_KINDS, "ResourceClaimTemplate")


class CachedPlacer:
    """Remembers placements until an object placement reads changes.

    A placement depends on the claims and the cluster's devices, never on quota
    usage (admitted pods hold quota, not devices), so pods stamped from the same
    templates — every replica of a Job or Deployment — share one answer per
    revision of PLACEMENT_KINDS, whatever they name their claim entries. The cache
    is dropped whole on a new revision and bounded in size.
    """

    def __init__(self, placer: Placer, state: ClusterState, size: int = 4096) -> None:
        self.placer = placer
        self.state = state
        self.kept: RevisionCache[Any, Placement] = RevisionCache(state, PLACEMENT_KINDS, size)

    def __call__(
        self,
        claims: Sequence[PodClaim],
        node_labels: Mapping[str, str] | None,
        view: ClusterView | None = None,
    ) -> Placement:
        """The placement on `view` (default: the store now)."""
        # Keyed by what the claims are (their template or claim), not by the pod's entry
        # names: pods cannot vary a key (and evict others) without new cluster objects.
        key = _key(tuple((c.namespace, c.template, c.claim) for c in claims), node_labels)
        view = view if view is not None else self.state.snapshot()
        found, entries = self.kept.lookup(key, view)
        if found is not None:
            return found
        offload_if_inline("placement search")
        placement = placer_on(self.placer, view)(claims, node_labels)
        self.kept.keep(entries, key, placement)
        return placement

    def on(self, view: ClusterView) -> Placer:
        """This placer, answering on `view`."""
        return functools.partial(self, view=view)

    def knows(self, obj: Mapping[str, Any] | None) -> bool:
        """Whether the placement of this Pod's claims is cached now (True when it needs
        none), read from its spec without expanding it; False for any other kind."""
        if obj is None:
            return True
        spec = obj.get("spec")
        if obj.get("kind") != "Pod" or not isinstance(spec, Mapping):
            return False
        entries = spec.get("resourceClaims")
        if not entries:
            return True
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            return False
        metadata = obj.get("metadata")
        namespace = (metadata.get("namespace") if isinstance(metadata, Mapping) else None) or (
            "default"
        )
        refs = tuple(
            (
                namespace,
                e.get("resourceClaimTemplateName") or None,
                e.get("resourceClaimName") or None,
            )
            for e in entries
        )
        return _key(refs, None) in self.kept


def _key(
    refs: tuple[tuple[str, str | None, str | None], ...], labels: Mapping[str, str] | None
) -> Any:
    return refs, tuple(sorted(labels.items())) if labels is not None else None
