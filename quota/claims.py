"""From a Pod to the ResourceClaims it will use (SPEC §3.3).

Each `spec.resourceClaims[]` entry is one claim whatever number of containers
reference it: a template entry becomes a new claim per pod, a named entry is a
shared, pre-created claim that quota charges once per ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quota.claimspec import ClaimSpec, api_version_of, parse_claim_spec
from quota.cluster import ClusterView, Obj
from quota.devices import claim_devices
from quota.errors import InvalidObject, NotFound, ObjectRef, object_ref
from quota.fields import FieldReader
from quota.objectkeys import namespace_of

__all__ = [
    "CLAIM_KINDS",
    "ClaimRef",
    "PodClaim",
    "claim_references",
    "claim_spec_of",
    "expand_pod_claims",
]


@dataclass(frozen=True)
class PodClaim:
    """One claim of a pod: from a template (per pod) or a shared, named claim."""

    entry: str
    namespace: str
    spec: ClaimSpec
    devices: Mapping[str, int]
    template: str | None = None
    claim: str | None = None
    allocation: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def shared(self) -> bool:
        """True for a pre-created claim named by `resourceClaimName`."""
        return self.claim is not None

    @property
    def key(self) -> str:
        """`namespace/name` of the template or claim this entry points at."""
        return f"{self.namespace}/{self.claim or self.template}"


ClaimRef = tuple[str, str, str]
_REF_FIELDS = (
    ("resourceClaimName", "ResourceClaim"),
    ("resourceClaimTemplateName", "ResourceClaimTemplate"),
)
# The kinds a pod's claim entries name.
CLAIM_KINDS = tuple(kind for _, kind in _REF_FIELDS)


def claim_references(pod: Obj, generated: bool = False) -> set[ClaimRef]:
    """(kind, namespace, name) of the claims and templates a pod names; malformed entries skipped.

    With `generated`, also the claims the control plane created for the pod's
    template entries (`status.resourceClaimStatuses`).
    """
    namespace = namespace_of(pod)
    spec, status = pod.get("spec"), pod.get("status")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    entries = list(entries) if isinstance(entries, list) else []
    if generated and isinstance(status, Mapping):
        statuses = status.get("resourceClaimStatuses")
        entries += statuses if isinstance(statuses, list) else []
    refs: set[ClaimRef] = set()
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        for key, kind in _REF_FIELDS:
            name = entry.get(key)
            if isinstance(name, str) and name:
                refs.add((kind, namespace, name))
    return refs


def _absent(pod: Obj, state: ClusterView) -> tuple[ObjectRef, ...]:
    """The claims and templates `pod` names that `state` lacks, sorted."""
    return tuple(
        ObjectRef(kind, namespace, name)
        for kind, namespace, name in sorted(claim_references(pod))
        if state.get(kind, namespace, name) is None
    )


def claim_spec_of(obj: Obj) -> ClaimSpec:
    """The normalised spec of a ResourceClaim or ResourceClaimTemplate object."""
    kind = obj.get("kind", "")
    metadata = obj.get("metadata") or {}
    ref = object_ref(kind, namespace_of(obj), metadata.get("name"))
    version = api_version_of(obj, ref)
    spec = FieldReader(ref).mapping(obj.get("spec"), "spec")
    if kind == "ResourceClaimTemplate":
        return parse_claim_spec(spec.get("spec"), version, ref, "spec.spec")
    if kind == "ResourceClaim":
        return parse_claim_spec(spec, version, ref, "spec")
    raise InvalidObject(
        ref, "kind", f'expected ResourceClaim or ResourceClaimTemplate, got "{kind}"'
    )


def _parsed(obj: Obj) -> tuple[ClaimSpec, Mapping[str, int]]:
    spec = claim_spec_of(obj)
    return spec, claim_devices(spec)


def _generated_names(pod: Obj) -> dict[str, str]:
    """Entry name -> the ResourceClaim the control plane generated for it (pod status)."""
    status = pod.get("status")
    statuses = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    out: dict[str, str] = {}
    for item in statuses if isinstance(statuses, list) else ():
        if isinstance(item, Mapping):
            entry, claim = item.get("name"), item.get("resourceClaimName")
            if isinstance(entry, str) and isinstance(claim, str) and entry and claim:
                out[entry] = claim
    return out


def _entry_claim(
    entry: Any,
    path: str,
    namespace: str,
    state: ClusterView,
    reader: FieldReader,
    generated: Mapping[str, str],
) -> PodClaim:
    entry = reader.mapping(entry, path)
    name = reader.string(entry.get("name"), f"{path}.name", True)
    template = reader.string(
        entry.get("resourceClaimTemplateName"), f"{path}.resourceClaimTemplateName"
    )
    claim = reader.string(entry.get("resourceClaimName"), f"{path}.resourceClaimName")
    if bool(template) == bool(claim):
        raise reader.fail(
            path, "must set exactly one of resourceClaimName or resourceClaimTemplateName"
        )
    kind = "ResourceClaimTemplate" if template else "ResourceClaim"
    target = template or claim
    # What a pod really holds is the claim generated for it, whatever the template says now.
    made = state.get("ResourceClaim", namespace, generated[name]) if name in generated else None
    obj = made if template and made is not None else state.get(kind, namespace, target)
    if obj is None:
        raise NotFound(kind, namespace, target, referrer=f"{reader.ref}: {reader.at(path)}")
    # A cluster object is parsed once while it is unchanged (every replica of a workload
    # reads the same template), kept with the view per kind (templates and claims apart).
    spec, devices = state.derived.of_object("ResourceClaim" if obj is made else kind, obj, _parsed)
    allocation = (obj.get("status") or {}).get("allocation") if claim else None
    return PodClaim(
        entry=name,
        namespace=namespace,
        spec=spec,
        devices=devices,
        template=template or None,
        claim=claim or None,
        allocation=allocation,
    )


def expand_pod_claims(
    pod: Obj,
    state: ClusterView,
    ref: str | None = None,
    generated: bool = False,
    *,
    base: str = "",
) -> tuple[PodClaim, ...]:
    """The claims of a pod (or pod template) in entry order, looked up in its namespace.

    With `generated` (a pod that exists), a template entry whose claim the control
    plane already generated (`status.resourceClaimStatuses`) is read from that claim,
    not from the template, which its owner may have replaced since. Without it (an
    admission), status is ignored: the API server resets it on create.
    Raises NotFound naming the first template or claim missing (and listing, in
    `missing`, every one the pod names that `state` lacks), InvalidObject
    when an entry or the claim spec it points at is malformed. Parsed claim specs are kept
    with the view (`ClusterView.derived`); `base` is where the pod sits in the
    object `ref` names (`spec.template` for a Job), for the paths of errors.
    """
    metadata = pod.get("metadata") or {}
    namespace = namespace_of(pod)
    ref = ref or object_ref("Pod", namespace, metadata.get("name") or metadata.get("generateName"))
    reader = FieldReader(ref, base)
    spec = reader.mapping(pod.get("spec"), "spec")
    entries = reader.items(spec.get("resourceClaims"), "spec.resourceClaims")
    made = _generated_names(pod) if generated else {}
    try:
        claims = [
            _entry_claim(entry, f"spec.resourceClaims[{i}]", namespace, state, reader, made)
            for i, entry in enumerate(entries)
        ]
    except NotFound as exc:
        missing = _absent(pod, state)
        raise NotFound(exc.kind, exc.namespace, exc.name, exc.referrer, missing) from None
    names = [claim.entry for claim in claims]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise reader.fail(f"spec.resourceClaims[{i}].name", f'duplicate entry "{name}"')
    return tuple(claims)
