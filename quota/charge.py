"""The charge of an admitted pod, recorded on the pod as the `draquota.io/charge` annotation.

The record tells which ClusterQueue and flavors the pod was admitted to, so
usage can be rebuilt from the cluster alone. The amounts in it are informative:
usage is always recomputed from the pod and the cluster view (`quota.usage`),
because a user can write any annotation.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from quota.errors import InvalidObject
from quota.quantity import INT64_MAX, sat_mul

__all__ = [
    "CHARGE_ANNOTATION",
    "MAX_JOB_PODS",
    "QUEUE_LABEL",
    "Charge",
    "FlavorResource",
    "at_least",
    "share",
    "times",
    "within",
]

CHARGE_ANNOTATION = "draquota.io/charge"
QUEUE_LABEL = "draquota.io/queue-name"


class FlavorResource(NamedTuple):
    """Key of quota and usage, as in Kueue: a resource in one flavor."""

    flavor: str
    resource: str


# A Job runs at most this many pods at once (the API server's limit on parallelism and
# completions for an indexed Job is 100,000; a record for more is not one draquota wrote).
MAX_JOB_PODS = 1_000_000

# Kubernetes' limit on all annotations of an object together (TotalAnnotationSizeLimitB).
MAX_ANNOTATION_BYTES = 256 * 1024
# The record is an object of objects of objects (sharedClaims -> claim -> amounts).
MAX_ANNOTATION_DEPTH = 4
_TOO_DEEP = f"nested deeper than {MAX_ANNOTATION_DEPTH} levels of JSON arrays/objects"
# A JSON string (skipped whole) or one bracket; scanning stops once too deep.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _too_deep(text: str, limit: int) -> bool:
    """Whether JSON arrays/objects nest deeper than `limit` in `text`; linear, no recursion,
    and it stops at the first bracket past the limit."""
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests arrays/objects deeper than `limit`; iterative."""
    pending = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                pending.append((child, depth + 1))
    return False


def _or_empty(value: Any) -> Any:
    return {} if value is None else value


def _amounts(value: Any, ref: str, path: str) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise InvalidObject(ref, path, "must be an object")
    out: dict[str, int] = {}
    for key, number in value.items():
        if not isinstance(key, str) or not key:
            raise InvalidObject(ref, path, f"invalid key {key!r}")
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= INT64_MAX:
            raise InvalidObject(
                ref, f"{path}.{key}", f"must be an integer from 0 to 2^63-1, got {number!r}"
            )
        out[key] = number
    return dict(sorted(out.items()))


def _strings(value: Any, ref: str, path: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidObject(ref, path, "must be an object")
    for key, text in value.items():
        if not isinstance(key, str) or not isinstance(text, str) or not key or not text:
            raise InvalidObject(ref, f"{path}.{key}", "must map names to non-empty strings")
    return dict(sorted(value.items()))


@dataclass(frozen=True)
class Charge:
    """What one pod holds in its ClusterQueue.

    `per_pod` is what the pod itself holds (resource -> amount, cpu in millicores;
    "usage" in the annotation);
    `shared_claims` ("ns/claim" -> resource -> amount) is charged once per queue
    however many of its pods use the claim; `flavors` maps each charged resource
    to the flavor it was assigned. `pods` is 0 for one pod's own record; a Job admitted
    as a whole is recorded for `pods` pods alike (`times`), and that record covers at most
    that many of its pods, each at most `share(record)`.
    """

    cluster_queue: str
    local_queue: str
    flavors: Mapping[str, str] = field(default_factory=dict)
    per_pod: Mapping[str, int] = field(default_factory=dict)
    device_classes: Mapping[str, int] = field(default_factory=dict)
    shared_claims: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    reservation: str = ""
    pods: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of the annotation (camelCase keys)."""
        out: dict[str, Any] = {
            "clusterQueue": self.cluster_queue,
            "localQueue": self.local_queue,
            "flavors": dict(sorted(self.flavors.items())),
            "usage": dict(sorted(self.per_pod.items())),
            "deviceClasses": dict(sorted(self.device_classes.items())),
            "sharedClaims": {
                claim: dict(sorted(amounts.items()))
                for claim, amounts in sorted(self.shared_claims.items())
            },
        }
        if self.reservation:
            out["reservation"] = self.reservation
        if self.pods:
            out["pods"] = self.pods
        return out

    def to_annotation(self) -> str:
        """Compact JSON with sorted keys, so equal charges give equal annotations."""
        return self._annotation

    @cached_property
    def _annotation(self) -> str:
        # Kept: one charge object serves every pod of a workload (`Prepared.charged_to`).
        document = self.to_dict()
        try:
            text = orjson.dumps(document, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # an amount beyond 64 bits: json writes any integer
            text = ""
        if text.isascii() and text:
            return text
        # The same text as ever outside ASCII too: json escapes such names, orjson does not.
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str, ref: str) -> Charge:
        """Parse an annotation value; InvalidObject naming `ref` and the field if malformed."""
        path = f"metadata.annotations[{CHARGE_ANNOTATION}]"
        if not isinstance(text, str):
            raise InvalidObject(ref, path, "must be a JSON object")
        if len(text) > MAX_ANNOTATION_BYTES:
            raise InvalidObject(
                ref, path, f"{len(text)} characters long, at most {MAX_ANNOTATION_BYTES}"
            )
        try:
            # orjson: C, no recursion into Python, and a depth limit of its own.
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            # Rare; the exact scan only tells which of the two messages fits.
            reason = _TOO_DEEP if _too_deep(text, MAX_ANNOTATION_DEPTH) else f"invalid JSON: {exc}"
            raise InvalidObject(ref, path, reason) from exc
        if isinstance(data, dict | list) and _deeper_than(data, MAX_ANNOTATION_DEPTH):
            raise InvalidObject(ref, path, _TOO_DEEP)
        if not isinstance(data, Mapping):
            raise InvalidObject(ref, path, "must be a JSON object")
        cluster_queue = data.get("clusterQueue")
        local_queue = data.get("localQueue")
        if not isinstance(cluster_queue, str) or not cluster_queue:
            raise InvalidObject(ref, f"{path}.clusterQueue", "required")
        if not isinstance(local_queue, str) or local_queue.count("/") != 1:
            raise InvalidObject(ref, f"{path}.localQueue", 'must be "namespace/name"')
        shared_raw = _or_empty(data.get("sharedClaims"))
        if not isinstance(shared_raw, Mapping):
            raise InvalidObject(ref, f"{path}.sharedClaims", "must be an object")
        reservation = data.get("reservation") or ""
        if not isinstance(reservation, str):
            raise InvalidObject(ref, f"{path}.reservation", "must be a string")
        pods = data.get("pods") or 0
        if isinstance(pods, bool) or not isinstance(pods, int) or not 0 <= pods <= MAX_JOB_PODS:
            raise InvalidObject(ref, f"{path}.pods", f"must be an integer from 0 to {MAX_JOB_PODS}")
        return cls(
            cluster_queue=cluster_queue,
            local_queue=local_queue,
            flavors=_strings(_or_empty(data.get("flavors")), ref, f"{path}.flavors"),
            per_pod=_amounts(_or_empty(data.get("usage")), ref, f"{path}.usage"),
            device_classes=_amounts(
                _or_empty(data.get("deviceClasses")), ref, f"{path}.deviceClasses"
            ),
            shared_claims={
                str(claim): _amounts(amounts, ref, f"{path}.sharedClaims.{claim}")
                for claim, amounts in sorted(shared_raw.items())
            },
            reservation=reservation,
            pods=pods,
        )

    def flavor_usage(self) -> Mapping[FlavorResource, int]:
        """The per-pod usage keyed by (flavor, resource); shared claims are not included."""
        return self._flavor_usage

    def shared_flavor_usage(self) -> Mapping[str, Mapping[FlavorResource, int]]:
        """Per shared claim, its amounts keyed by (flavor, resource)."""
        return self._shared_flavor_usage

    # Kept per charge (its fields never change): usage indexes read them on every add and
    # remove, and one charge object serves every pod of a workload.
    @cached_property
    def _flavor_usage(self) -> Mapping[FlavorResource, int]:
        out: dict[FlavorResource, int] = {}
        for resource, value in sorted(self.per_pod.items()):
            flavor = self.flavors.get(resource)
            if flavor is not None and value:
                out[FlavorResource(flavor, resource)] = value
        return MappingProxyType(out)

    @cached_property
    def _shared_flavor_usage(self) -> Mapping[str, Mapping[FlavorResource, int]]:
        return MappingProxyType(
            {
                claim: MappingProxyType(
                    {
                        FlavorResource(self.flavors[resource], resource): value
                        for resource, value in sorted(amounts.items())
                        if value and resource in self.flavors
                    }
                )
                for claim, amounts in sorted(self.shared_claims.items())
            }
        )


def at_least(admitted: Charge, current: Charge) -> Charge:
    """The larger of two charges of one pod, resource by resource.

    Flavors of the admitted record win: the pod was pinned to their nodes.
    """
    per_pod = dict(current.per_pod)
    for resource, value in admitted.per_pod.items():
        per_pod[resource] = max(per_pod.get(resource, 0), value)
    classes = dict(current.device_classes)
    for name, value in admitted.device_classes.items():
        classes[name] = max(classes.get(name, 0), value)
    shared: dict[str, dict[str, int]] = {c: dict(a) for c, a in current.shared_claims.items()}
    for claim, amounts in admitted.shared_claims.items():
        merged = shared.setdefault(claim, {})
        for resource, value in amounts.items():
            merged[resource] = max(merged.get(resource, 0), value)
    return Charge(
        cluster_queue=admitted.cluster_queue,
        local_queue=admitted.local_queue,
        flavors={**current.flavors, **admitted.flavors},
        per_pod=dict(sorted(per_pod.items())),
        device_classes=dict(sorted(classes.items())),
        shared_claims=dict(sorted(shared.items())),
    )


def times(charge: Charge, pods: int) -> Charge:
    """The charge of `pods` pods alike (a Job admitted whole): per-pod amounts multiplied,
    shared claims once."""
    return dataclasses.replace(
        charge,
        per_pod={r: sat_mul(v, pods) for r, v in charge.per_pod.items()},
        device_classes={c: sat_mul(v, pods) for c, v in charge.device_classes.items()},
        pods=pods,
    )


def share(record: Charge, pods: int) -> Charge:
    """What one of the `pods` pods a Job's record covers may hold: the per-pod amounts
    divided back (rounded down, so a share never exceeds what `times` multiplied; a
    saturated amount stays large), shared claims as recorded."""
    pods = max(pods, 1)
    return dataclasses.replace(
        record,
        per_pod={r: v // pods for r, v in record.per_pod.items()},
        device_classes={c: v // pods for c, v in record.device_classes.items()},
        pods=0,
    )


def within(charge: Charge, limit: Charge) -> bool:
    """No amount of `charge` exceeds `limit`'s, and it uses no shared claim `limit` does not
    (flavors are not compared: a pod covered by a record runs on the record's flavors)."""
    if any(v > limit.per_pod.get(r, 0) for r, v in charge.per_pod.items() if v):
        return False
    if any(v > limit.device_classes.get(c, 0) for c, v in charge.device_classes.items() if v):
        return False
    for claim, amounts in charge.shared_claims.items():
        allowed = limit.shared_claims.get(claim, {})
        if any(v > allowed.get(r, 0) for r, v in amounts.items() if v):
            return False
    return True
