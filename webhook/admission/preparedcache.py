"""Prepared decisions remembered between admissions, keyed by what the object says.

`quota.decision.prepare` (routing, counting, every flavor judged with placement) depends
on the object and on the cluster view, never on quota usage. Pods that say the same
thing — every pod of a Job or Deployment, a pod sent again — share one `Prepared` per
revision of what prepare reads. The object's identity (its name, uid, owner) only names
it in messages, so it is left out of the key and each request gets the prepared
decision with its own workload: /validate still decides on the very object it was
given (which /mutate's stamps make a different content from the one /mutate saw), and
its messages name it. A pod's volumes are left out too: prepare never reads them, and
the token volume every pod gets has a name of its own. The quota arithmetic against usage
(`conclude`) is never kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from quota.claims import CLAIM_KINDS
from quota.cluster import ClusterView
from quota.decision import Prepared
from quota.errors import DraquotaError
from quota.queues import QUEUE_KINDS
from quota.verdict import Decision
from quota.workloads import as_workload
from webhook.admission.placementcache import PLACEMENT_KINDS
from webhook.admission.revisioncache import RevisionCache
from webhook.store.clusterstate import ClusterState

__all__ = [
    "IDENTITY_FIELDS",
    "PREPARE_KINDS",
    "UNREAD_CONTAINER_FIELDS",
    "UNREAD_POD_FIELDS",
    "PreparedCache",
]

# Everything `prepare` reads from the cluster view (tests/webhook/admission/test_preparedcache.py
# records the kinds it reads and fails if one is missing here).
PREPARE_KINDS = tuple(
    dict.fromkeys((*QUEUE_KINDS, "Namespace", "DeviceClass", *CLAIM_KINDS, *PLACEMENT_KINDS))
)

# metadata fields that tell pods apart without changing what they ask for: a decision
# reads them only to name the object in its messages.
IDENTITY_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "uid",
        "ownerReferences",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
    }
)

# A pod's volumes, which `prepare` never reads: the API server's ServiceAccount admission
# names every pod's token volume `kube-api-access-<random>` (and its mounts after it), so with
# them in the key no two pods of a real cluster would ever share a preparation.
UNREAD_POD_FIELDS = frozenset({"volumes"})
UNREAD_CONTAINER_FIELDS = frozenset({"volumeMounts"})
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

Prepare = Callable[[], "Prepared | Decision"]


def content_key(obj: Mapping[str, Any], operation: str) -> tuple[bytes, dict[str, Any]] | None:
    """The object without its identity and a pod's volumes, and that as bytes: the key (None:
    not an object this cache keeps)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    anonymous = {**obj, "metadata": {k: v for k, v in metadata.items() if k not in IDENTITY_FIELDS}}
    spec = obj.get("spec")
    if obj.get("kind") == "Pod" and isinstance(spec, Mapping):
        anonymous["spec"] = _without_volumes(spec)
    try:
        return orjson.dumps([operation, anonymous]), anonymous
    except TypeError:  # not plain JSON data: decided afresh, never cached
        return None


def _without_volumes(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k not in UNREAD_POD_FIELDS}
    for field in _CONTAINER_LISTS:
        containers = spec.get(field)
        if isinstance(containers, list):
            out[field] = [
                {k: v for k, v in c.items() if k not in UNREAD_CONTAINER_FIELDS}
                if isinstance(c, Mapping)
                else c
                for c in containers
            ]
    return out


class PreparedCache:
    """Prepared decisions by object content, dropped whole when what prepare reads changes.

    Only a prepared decision that names no object is kept: one with warnings (placement
    under `Warn`, unmapped classes under `Ignore`) names its pod in them and is prepared
    afresh. A settled decision (a denial, not managed) is never kept. Bounded in entries
    and in bytes of keys (an entry keeps its object without identity, about the key's
    size): a user who sends many different pods only makes their own admissions slower.
    """

    def __init__(self, state: ClusterState, size: int = 1024, budget: int = 16 << 20) -> None:
        self.kept: RevisionCache[bytes, Prepared] = RevisionCache(
            state, PREPARE_KINDS, size, budget
        )

    def prepare(
        self,
        obj: Mapping[str, Any],
        operation: str,
        build: Prepare,
        view: ClusterView | None = None,
    ) -> Prepared | Decision:
        """The prepared decision for `obj` on `view` (default: the store now): kept from an
        object saying the same, else `build()`, which must read that same view."""
        content = content_key(obj, operation)
        if content is None:
            return build()
        key, anonymous = content
        found, entries = self.kept.lookup(key, view)
        if found is not None:
            try:
                workload = as_workload(obj)
            except DraquotaError:
                return build()
            return found.of(workload)
        prepared = build()
        if isinstance(prepared, Prepared) and _names_nothing(prepared):
            # Kept without the identity of the pod it was built for: that is never read again.
            workload = prepared.workload
            if workload.pod is obj:
                workload = dataclasses.replace(workload, pod=anonymous)
            self.kept.keep(entries, key, prepared.of(workload), weight=len(key))
        return prepared


def _names_nothing(prepared: Prepared) -> bool:
    return not prepared.warnings and not any(prepared.notes.values())
