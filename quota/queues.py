"""ClusterQueues, LocalQueues and ResourceFlavors of `draquota.io/v1beta1` (SPEC §4):
their specs and how they are parsed.

Field names follow Kueue v1beta1 so spec blocks can be copied. Parsing raises
InvalidObject for a malformed object (wrong types, bad quantities); the rules the
CRD checks with CEL (lendingLimit <= nominalQuota, borrowingLimit only with a
cohort, flavors listing exactly the covered resources, kind DeviceClass needs
deviceClassNames, Kueue's preemption rule) are collected as *problems*: a queue with
problems admits nothing. The rules across objects are `quota.queuetable`'s; the fields
each kind may have are `quota.queueschema`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quota.charge import FlavorResource
from quota.cluster import Obj
from quota.errors import object_ref
from quota.fields import FieldReader
from quota.objectkeys import namespace_of
from quota.preemptionpolicy import Preemption, parse_preemption
from quota.quantity import amount, parse_quantity
from quota.queueschema import CLUSTER_QUEUE_FIELDS, LOCAL_QUEUE_FIELDS, RESOURCE_FLAVOR_FIELDS
from quota.selectors import LABEL_OPERATORS
from quota.sources import DeviceSource, keep_source, parse_resource_kind
from quota.strict import reject_unknown_fields

__all__ = [
    "API_GROUP",
    "CLUSTER_QUEUE_FIELDS",
    "LOCAL_QUEUE_FIELDS",
    "QUEUE_KINDS",
    "RESOURCE_FLAVOR_FIELDS",
    "ClusterQueue",
    "LocalQueue",
    "ResourceFlavor",
    "ResourceGroup",
    "ResourceQuota",
    "parse_cluster_queue",
    "parse_local_queue",
    "parse_resource_flavor",
]

API_GROUP = "draquota.io"
API_VERSION = "draquota.io/v1beta1"
QUEUE_KINDS = ("ClusterQueue", "LocalQueue", "ResourceFlavor")
BORROW = "Borrow"
TRY_NEXT_FLAVOR = "TryNextFlavor"
REJECT = "Reject"
QUEUE = "Queue"
STRICT_FIFO = "StrictFIFO"
BEST_EFFORT_FIFO = "BestEffortFIFO"


@dataclass(frozen=True)
class ResourceQuota:
    """Quota of one resource in one flavor (amounts in quota units: cpu in millicores)."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class FlavorQuotas:
    """One flavor of a resource group, with the quota of each covered resource."""

    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True)
class ResourceGroup:
    """Resources that always get the same flavor, and the flavors to try in order."""

    covered: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True)
class ClusterQueue:
    """A parsed ClusterQueue; `problems` non-empty means it must not admit anything.

    `namespace_selector` is None when no namespace is selected (Kueue: a null selector).
    `resource_classes` maps each resource of kind DeviceClass to its classes, `sources` each
    resource of kind DeviceCounter or DeviceCapacity to what it charges (`quota.sources`).
    `when_full` is Reject (a pod that does not fit is denied at submit) or Queue (pods wait,
    gated, and the queueing controller admits them in `queueing_strategy` order).
    `preemption` is what its pending pods may evict to fit (`quota.preemptionpolicy`).
    """

    name: str
    cohort: str | None = None
    namespace_selector: Mapping[str, Any] | None = None
    when_can_borrow: str = BORROW
    when_full: str = REJECT
    queueing_strategy: str = BEST_EFFORT_FIFO
    groups: tuple[ResourceGroup, ...] = ()
    resource_classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sources: Mapping[str, DeviceSource] = field(default_factory=dict)
    preemption: Preemption = field(default_factory=Preemption)
    problems: tuple[str, ...] = ()

    @property
    def queues(self) -> bool:
        """Pods that do not fit wait in this queue instead of being denied."""
        return self.when_full == QUEUE

    def group_of(self, resource: str) -> ResourceGroup | None:
        """The resource group covering `resource`, if any."""
        for group in self.groups:
            if resource in group.covered:
                return group
        return None

    def quota(self, key: FlavorResource) -> ResourceQuota | None:
        """The quota of a resource in a flavor, None when the queue does not have it."""
        for group in self.groups:
            for flavor in group.flavors:
                if flavor.name == key.flavor and key.resource in flavor.resources:
                    return flavor.resources[key.resource]
        return None

    def covered(self) -> tuple[str, ...]:
        """Every covered resource, sorted."""
        return tuple(sorted(r for group in self.groups for r in group.covered))

    def flavor_names(self) -> tuple[str, ...]:
        """Every flavor the queue names, sorted."""
        return tuple(sorted({f.name for group in self.groups for f in group.flavors}))


@dataclass(frozen=True)
class LocalQueue:
    """A namespaced queue pointing at a ClusterQueue."""

    namespace: str
    name: str
    cluster_queue: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ResourceFlavor:
    """A flavor and the node labels that pods admitted to it get as nodeSelector."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)


def _check_api_version(reader: FieldReader, obj: Obj) -> None:
    version = obj.get("apiVersion")
    if version not in (None, API_VERSION):
        raise reader.fail("apiVersion", f"unsupported value {version!r}: expected {API_VERSION}")


def _selector(reader: FieldReader, raw: Any, path: str) -> Mapping[str, Any]:
    selector = reader.mapping(raw, path)
    labels = reader.mapping(selector.get("matchLabels"), f"{path}.matchLabels")
    for key, value in labels.items():
        reader.string(value, f"{path}.matchLabels.{key}")
    for i, expr in enumerate(
        reader.items(selector.get("matchExpressions"), f"{path}.matchExpressions")
    ):
        here = f"{path}.matchExpressions[{i}]"
        expr = reader.mapping(expr, here)
        reader.string(expr.get("key"), f"{here}.key", True)
        operator = reader.string(expr.get("operator"), f"{here}.operator", True)
        values = reader.strings(expr.get("values"), f"{here}.values")
        if operator not in LABEL_OPERATORS:
            raise reader.fail(f"{here}.operator", f"unsupported value {operator!r}")
        if operator in ("In", "NotIn") and not values:
            raise reader.fail(f"{here}.values", f"must be non-empty for operator {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise reader.fail(f"{here}.values", f"must be empty for operator {operator}")
    return selector


def _limit(
    reader: FieldReader, raw: Mapping[str, Any], key: str, resource: str, path: str
) -> int | None:
    value = raw.get(key)
    return None if value is None else amount(resource, value, reader.ref, f"{path}.{key}")


def _flavor(
    reader: FieldReader,
    raw: Any,
    path: str,
    covered: tuple[str, ...],
    cohort: str | None,
    classes: dict[str, tuple[str, ...]],
    sources: dict[str, DeviceSource],
    problems: list[str],
) -> FlavorQuotas:
    raw = reader.mapping(raw, path)
    name = reader.string(raw.get("name"), f"{path}.name", True)
    resources: dict[str, ResourceQuota] = {}
    for j, entry in enumerate(reader.items(raw.get("resources"), f"{path}.resources")):
        here = f"{path}.resources[{j}]"
        entry = reader.mapping(entry, here)
        resource = reader.string(entry.get("name"), f"{here}.name", True)
        if resource in resources:
            raise reader.fail(f"{here}.name", f'duplicate resource "{resource}"')
        if entry.get("nominalQuota") is None:
            raise reader.fail(f"{here}.nominalQuota", "required")
        quota = ResourceQuota(
            nominal=amount(resource, entry["nominalQuota"], reader.ref, f"{here}.nominalQuota"),
            borrowing_limit=_limit(reader, entry, "borrowingLimit", resource, here),
            lending_limit=_limit(reader, entry, "lendingLimit", resource, here),
        )
        if quota.lending_limit is not None and parse_quantity(
            entry["lendingLimit"]
        ) > parse_quantity(entry["nominalQuota"]):
            problems.append(f"{here}.lendingLimit: must be less than or equal to nominalQuota")
        if quota.borrowing_limit is not None and cohort is None:
            problems.append(f"{here}.borrowingLimit: must be nil when cohort is empty")
        names, source = parse_resource_kind(reader, entry, here, problems)
        if source is not None:
            keep_source(sources, resource, source, here, problems)
        elif resource in classes and classes[resource] != names:
            problems.append(
                f"{here}.deviceClassNames: resource {resource} maps to "
                f"[{', '.join(classes[resource])}] in another flavor"
            )
        if source is None:
            classes.setdefault(resource, names)
        resources[resource] = quota
    if tuple(resources) != covered:
        problems.append(
            f"{path}.resources: must list exactly the covered resources in the same order "
            f"[{', '.join(covered)}], got [{', '.join(resources)}]"
        )
    return FlavorQuotas(name, resources)


def _choice(
    reader: FieldReader, spec: Mapping[str, Any], key: str, allowed: tuple[str, ...]
) -> str:
    """An enum field of the spec; the first allowed value when it is absent."""
    value = reader.string(spec.get(key), f"spec.{key}") or allowed[0]
    if value not in allowed:
        raise reader.fail(
            f"spec.{key}", f"unsupported value {value!r}: expected {' or '.join(allowed)}"
        )
    return value


def parse_cluster_queue(obj: Obj) -> ClusterQueue:
    """Parse a ClusterQueue; InvalidObject when malformed, rule violations in `problems`."""
    metadata = obj.get("metadata") or {}
    ref = object_ref("ClusterQueue", None, metadata.get("name"))
    reader = FieldReader(ref)
    _check_api_version(reader, obj)
    reject_unknown_fields(ref, obj, CLUSTER_QUEUE_FIELDS)
    name = reader.string(metadata.get("name"), "metadata.name", True)
    spec = reader.mapping(obj.get("spec"), "spec")
    cohort = reader.string(spec.get("cohort"), "spec.cohort") or None
    selector = None
    if spec.get("namespaceSelector") is not None:
        selector = _selector(reader, spec["namespaceSelector"], "spec.namespaceSelector")
    fungibility = reader.mapping(spec.get("flavorFungibility"), "spec.flavorFungibility")
    when = reader.string(fungibility.get("whenCanBorrow"), "spec.flavorFungibility.whenCanBorrow")
    when = when or BORROW
    if when not in (BORROW, TRY_NEXT_FLAVOR):
        raise reader.fail(
            "spec.flavorFungibility.whenCanBorrow",
            f"unsupported value {when!r}: expected Borrow or TryNextFlavor",
        )
    when_full = _choice(reader, spec, "whenFull", (REJECT, QUEUE))
    strategy = _choice(reader, spec, "queueingStrategy", (BEST_EFFORT_FIFO, STRICT_FIFO))
    problems: list[str] = []
    preemption = parse_preemption(reader, spec.get("preemption"), "spec.preemption", problems)
    classes: dict[str, tuple[str, ...]] = {}
    sources: dict[str, DeviceSource] = {}
    groups = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, raw in enumerate(reader.items(spec.get("resourceGroups"), "spec.resourceGroups")):
        path = f"spec.resourceGroups[{i}]"
        raw = reader.mapping(raw, path)
        covered = reader.strings(raw.get("coveredResources"), f"{path}.coveredResources")
        if not covered:
            problems.append(f"{path}.coveredResources: must list at least one resource")
        for resource in covered:
            if resource in seen_resources:
                problems.append(f"{path}.coveredResources: {resource} is covered by two groups")
            seen_resources.add(resource)
        flavors = tuple(
            _flavor(reader, f, f"{path}.flavors[{j}]", covered, cohort, classes, sources, problems)
            for j, f in enumerate(reader.items(raw.get("flavors"), f"{path}.flavors"))
        )
        if not flavors:
            problems.append(f"{path}.flavors: must list at least one flavor")
        for flavor in flavors:
            if flavor.name in seen_flavors:
                problems.append(f"{path}.flavors: flavor {flavor.name} is used twice")
            seen_flavors.add(flavor.name)
        groups.append(ResourceGroup(covered, flavors))
    resource_classes = {r: c for r, c in sorted(classes.items()) if c}
    owner: dict[str, str] = {}
    for resource, names in resource_classes.items():
        for device_class in names:
            if device_class in owner:
                problems.append(
                    f"DeviceClass {device_class} maps to two resources, "
                    f"{owner[device_class]} and {resource}"
                )
            owner[device_class] = resource
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=selector,
        when_can_borrow=when,
        when_full=when_full,
        queueing_strategy=strategy,
        groups=tuple(groups),
        resource_classes=resource_classes,
        sources=dict(sorted(sources.items())),
        preemption=preemption,
        problems=tuple(sorted(set(problems))),
    )


def parse_local_queue(obj: Obj) -> LocalQueue:
    """Parse a LocalQueue; InvalidObject when malformed."""
    metadata = obj.get("metadata") or {}
    namespace = namespace_of(obj)
    ref = object_ref("LocalQueue", namespace, metadata.get("name"))
    reader = FieldReader(ref)
    _check_api_version(reader, obj)
    reject_unknown_fields(ref, obj, LOCAL_QUEUE_FIELDS)
    name = reader.string(metadata.get("name"), "metadata.name", True)
    spec = reader.mapping(obj.get("spec"), "spec")
    cluster_queue = reader.string(spec.get("clusterQueue"), "spec.clusterQueue", True)
    return LocalQueue(namespace, name, cluster_queue)


def parse_resource_flavor(obj: Obj) -> ResourceFlavor:
    """Parse a ResourceFlavor; InvalidObject when malformed."""
    metadata = obj.get("metadata") or {}
    ref = object_ref("ResourceFlavor", None, metadata.get("name"))
    reader = FieldReader(ref)
    _check_api_version(reader, obj)
    reject_unknown_fields(ref, obj, RESOURCE_FLAVOR_FIELDS)
    name = reader.string(metadata.get("name"), "metadata.name", True)
    spec = reader.mapping(obj.get("spec"), "spec")
    labels = reader.mapping(spec.get("nodeLabels"), "spec.nodeLabels")
    for key, value in labels.items():
        reader.string(value, f"spec.nodeLabels.{key}")
    return ResourceFlavor(name, dict(sorted(labels.items())))
