"""The queue table: every queue object of a cluster view, parsed and cross-checked.

The cross-object rules (a DeviceClass maps to one resource, a resource maps to the same
classes in every flavor and across a cohort, every flavor exists) are collected as
*problems* of the queues they concern: a queue with problems admits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quota.cluster import ClusterView
from quota.errors import InvalidObject
from quota.objectkeys import object_key
from quota.queues import (
    QUEUE_KINDS,
    ClusterQueue,
    LocalQueue,
    ResourceFlavor,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
)
from quota.settings import Settings

__all__ = ["QueueTable", "queue_table"]


@dataclass(frozen=True)
class QueueTable:
    """Every queue object of the cluster view, parsed and cross-checked.

    `invalid` maps a ClusterQueue name to why it cannot be used (unparseable or
    with problems); such a queue admits nothing. Valid-but-unparseable queues do
    not take part in their cohort; queues with problems still lend their quota so
    that usage already admitted to them is accounted for.
    """

    queues: Mapping[str, ClusterQueue]
    invalid: Mapping[str, str]
    local_queues: Mapping[str, LocalQueue | str]
    flavors: Mapping[str, ResourceFlavor]
    class_resources: Mapping[str, Mapping[str, str]]
    cohorts: Mapping[str, tuple[str, ...]]

    def members(self, queue: ClusterQueue) -> tuple[ClusterQueue, ...]:
        """The queues sharing quota with `queue` (itself included)."""
        if queue.cohort is None:
            return (queue,)
        return tuple(self.queues[name] for name in self.cohorts.get(queue.cohort, ()))


def _effective_classes(queue: ClusterQueue, settings: Settings) -> tuple[dict[str, str], list[str]]:
    """DeviceClass -> resource for one queue: its own mappings plus the global ones it covers."""
    mapping: dict[str, str] = {}
    problems: list[str] = []
    covered = set(queue.covered())
    for resource, names in queue.resource_classes.items():
        for device_class in names:
            mapping[device_class] = resource
    for device_class, resource in sorted(settings.class_resources().items()):
        if resource not in covered:
            continue
        if mapping.get(device_class, resource) != resource:
            problems.append(
                f"DeviceClass {device_class} maps to {mapping[device_class]} in the queue "
                f"but to {resource} in the global deviceClassMappings"
            )
            continue
        mapping[device_class] = resource
    return dict(sorted(mapping.items())), problems


def _cohort_problems(
    members: list[ClusterQueue], classes: Mapping[str, Mapping[str, str]]
) -> dict[str, list[str]]:
    """A resource must map to the same classes, and a class to the same resource, in a cohort.

    Both sides of a mismatch get the problem: neither queue can be trusted to charge right.
    """
    out: dict[str, list[str]] = {}

    def mismatch(first: str, second: str, what: str, here: str, there: str) -> None:
        cohort = f"cohort {queues[second].cohort}"
        out.setdefault(second, []).append(
            f'{what} maps to {here} here but to {there} in ClusterQueue "{first}" of {cohort}'
        )
        out.setdefault(first, []).append(
            f'{what} maps to {there} here but to {here} in ClusterQueue "{second}" of {cohort}'
        )

    queues = {queue.name: queue for queue in members}
    by_resource: dict[str, tuple[str, str]] = {}
    by_class: dict[str, tuple[str, str]] = {}
    for queue in members:
        mapping = classes[queue.name]
        grouped: dict[str, list[str]] = {}
        for device_class, resource in mapping.items():
            grouped.setdefault(resource, []).append(device_class)
            first = by_class.setdefault(device_class, (queue.name, resource))
            if first[1] != resource:
                mismatch(first[0], queue.name, f"DeviceClass {device_class}", resource, first[1])
        for resource, names in sorted(grouped.items()):
            listed = f"[{', '.join(sorted(names))}]"
            first = by_resource.setdefault(resource, (queue.name, listed))
            if first[1] != listed:
                mismatch(first[0], queue.name, f"resource {resource}", listed, first[1])
    return out


def _build(state: ClusterView, settings: Settings) -> QueueTable:
    flavors: dict[str, ResourceFlavor] = {}
    for obj in state.list("ResourceFlavor"):
        try:
            flavor = parse_resource_flavor(obj)
        except InvalidObject:
            continue  # a queue naming it reports the flavor as unusable
        flavors[flavor.name] = flavor
    parsed: dict[str, ClusterQueue] = {}
    invalid: dict[str, str] = {}
    for obj in state.list("ClusterQueue"):
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            parsed[name] = parse_cluster_queue(obj)
        except InvalidObject as exc:
            invalid[name] = str(exc)
    classes: dict[str, dict[str, str]] = {}
    extra: dict[str, list[str]] = {}
    for name, queue in parsed.items():
        classes[name], extra[name] = _effective_classes(queue, settings)
        for flavor_name in queue.flavor_names():
            if flavor_name not in flavors:
                extra[name].append(f"ResourceFlavor {flavor_name} not found")
    cohorts: dict[str, list[str]] = {}
    for name, queue in sorted(parsed.items()):
        if queue.cohort is not None:
            cohorts.setdefault(queue.cohort, []).append(name)
    for members in cohorts.values():
        for name, issues in _cohort_problems([parsed[n] for n in members], classes).items():
            extra[name].extend(issues)
    queues: dict[str, ClusterQueue] = {}
    for name, queue in parsed.items():
        problems = tuple(sorted(set(queue.problems) | set(extra[name])))
        queues[name] = ClusterQueue(**{**queue.__dict__, "problems": problems})
        if problems:
            invalid[name] = "; ".join(problems)
    local: dict[str, LocalQueue | str] = {}
    for obj in state.list("LocalQueue"):
        key = object_key(obj)
        try:
            local[key] = parse_local_queue(obj)
        except InvalidObject as exc:
            local[key] = str(exc)
    return QueueTable(
        queues=queues,
        invalid=dict(sorted(invalid.items())),
        local_queues=local,
        flavors=flavors,
        class_resources=classes,
        cohorts={c: tuple(sorted(m)) for c, m in sorted(cohorts.items())},
    )


def queue_table(state: ClusterView, settings: Settings) -> QueueTable:
    """The queue table of a cluster view, kept with it (`ClusterView.derived`): built once
    per revision of the queue kinds and settings for every view of one store."""
    view = state.snapshot()  # key and table read from one view, even when handed the store
    key = (view.revision(*QUEUE_KINDS), settings)
    return view.derived.latest("queue_table", key, lambda: _build(view, settings))
