"""Flavor assignment and Kueue's cohort arithmetic for flat cohorts.

For a queue `q` and a flavor-resource `fr` (Kueue `pkg/cache/resource_node.go`):

- `guaranteed(q) = nominal - lendingLimit` when a lendingLimit is set, else 0:
  that part of the nominal quota stays private to `q`;
- the cohort holds `Σ (nominal - guaranteed)` of its members and is used by
  `Σ max(0, usage - guaranteed)`;
- `available(q) = max(0, guaranteed - usage) + cohort_left`, where `cohort_left`
  is capped by the borrowingLimit: `nominal - guaranteed - max(0, usage - guaranteed)
  + borrowingLimit`; without a cohort `available = nominal - usage`;
- the most `q` could ever hold (`potential`) is `guaranteed + cohort quota`, capped at
  `nominal + borrowingLimit`; without a cohort it is `nominal`.

A reason a flavor does not fit gives the numbers, and within a cohort what the queue lent
to whom and borrowed from whom (`quota.lending`): `2 more needed (requested 2, in use 2 of
nominal 4; 2 lent to ClusterQueue ml; cohort lab can lend 0)`.

Flavors are tried in the order of the resource group and every resource of a
group gets the same flavor (Kueue `flavorassigner`). With `whenCanBorrow: Borrow`
the first flavor that fits is taken even if it borrows; with `TryNextFlavor` a
later flavor that fits without borrowing is preferred, and the first borrowing
fit is the fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from quota.charge import FlavorResource
from quota.lending import Lending, lending
from quota.messages import borrowed_text, format_amount, lent_text
from quota.quantity import sat_add, sat_mul
from quota.queues import TRY_NEXT_FLAVOR, ClusterQueue, ResourceGroup
from quota.queuetable import QueueTable
from quota.selectors import requirement_matches
from quota.sources import DeviceSource, unit_in

__all__ = [
    "Assignment",
    "PreferringFilter",
    "QuotaView",
    "assign_flavors",
    "flavor_matches_pod",
    "quota_view",
]

# A flavor filter returns why a flavor cannot be used, or None.
FlavorFilter = Callable[[str], str | None]


@dataclass(frozen=True)
class PreferringFilter:
    """A flavor filter that also ranks the flavors it allows: among flavors that fit quota
    equally (same borrowing), a `preferred` one wins over an earlier one that is not
    (placement: one whose nodes can host the pod now, SPEC §5)."""

    exclude: FlavorFilter
    preferred: Callable[[str], bool]

    def __call__(self, flavor: str) -> str | None:
        return self.exclude(flavor)


@dataclass(frozen=True)
class QuotaView:
    """The numbers of one flavor-resource of a queue, as a message needs them."""

    nominal: int
    used: int
    available: int
    potential: int
    cohort: str | None
    borrowing_limit: int | None

    @property
    def cohort_can_lend(self) -> int:
        """What the cohort adds on top of the queue's own unused nominal quota right now."""
        return max(0, self.available - max(0, self.nominal - self.used))

    def borrowing_with(self, value: int) -> bool:
        """Whether holding `value` more would go past nominal quota inside a cohort."""
        return self.cohort is not None and self.used + value > self.nominal


def _guaranteed(nominal: int, lending_limit: int | None) -> int:
    return max(0, nominal - lending_limit) if lending_limit is not None else 0


def quota_view(
    table: QueueTable,
    queue: ClusterQueue,
    key: FlavorResource,
    usage_of: Callable[[str], Mapping[FlavorResource, int]],
) -> QuotaView:
    """Nominal, usage, available and potential capacity of `key` for `queue`."""
    quota = queue.quota(key)
    nominal = quota.nominal if quota else 0
    borrowing = quota.borrowing_limit if quota else None
    used = usage_of(queue.name).get(key, 0)
    if queue.cohort is None:
        return QuotaView(nominal, used, nominal - used, nominal, None, None)
    guaranteed = _guaranteed(nominal, quota.lending_limit if quota else None)
    cohort_quota = cohort_used = 0
    for member in table.members(queue):
        member_quota = member.quota(key)
        if member_quota is None:
            member_used = usage_of(member.name).get(key, 0)
            cohort_used = sat_add(cohort_used, member_used)
            continue
        member_guaranteed = _guaranteed(member_quota.nominal, member_quota.lending_limit)
        cohort_quota = sat_add(cohort_quota, member_quota.nominal - member_guaranteed)
        member_used = usage_of(member.name).get(key, 0)
        cohort_used = sat_add(cohort_used, max(0, member_used - member_guaranteed))
    cohort_left = cohort_quota - cohort_used
    potential = guaranteed + cohort_quota
    if borrowing is not None:
        stored = nominal - guaranteed
        used_in_cohort = max(0, used - guaranteed)
        cohort_left = min(stored - used_in_cohort + borrowing, cohort_left)
        potential = min(nominal + borrowing, potential)
    available = max(0, guaranteed - used) + cohort_left
    return QuotaView(nominal, used, available, potential, queue.cohort, borrowing)


@dataclass(frozen=True)
class Assignment:
    """The outcome of flavor assignment: flavors per resource, or why none fits."""

    flavors: Mapping[str, str] = field(default_factory=dict)
    borrowing: bool = False
    reasons: tuple[str, ...] = ()
    ok: bool = True


def _capacity_text(view: QuotaView, fmt: Callable[[int], str]) -> str:
    """`nominal 40Gi + borrowing limit 8Gi`: where the maximum capacity comes from, in the
    resource's unit (`fmt`), like the amounts it explains."""
    nominal = f"nominal {fmt(view.nominal)}"
    if view.cohort is None:
        return nominal
    if view.borrowing_limit is not None and view.potential == view.nominal + view.borrowing_limit:
        return f"{nominal} + borrowing limit {fmt(view.borrowing_limit)}"
    most = view.potential - view.nominal
    return f"{nominal}, cohort {view.cohort} can lend at most {fmt(most)}"


@dataclass(frozen=True)
class _Demand:
    per_pod: Mapping[str, int]
    shared: Mapping[str, Mapping[str, int]]
    held: frozenset[tuple[str, FlavorResource]]
    pods: int
    asked: Mapping[str, Collection[str]] = field(default_factory=dict)
    sources: Mapping[str, DeviceSource] = field(default_factory=dict)

    def resource_text(self, resource: str) -> str:
        """`gpus (DeviceClass gpu.example.com)`: the quota resource and the classes that asked;
        `gpu-memory (counter memory of gpu.example.com)` for one charged by what devices hold."""
        if resource in self.sources:
            return f"{resource} ({self.sources[resource].describe()})"
        names = sorted(self.asked.get(resource) or ())
        if not names:
            return resource
        label = "DeviceClass" if len(names) == 1 else "DeviceClasses"
        return f"{resource} ({label} {', '.join(names)})"


def _amount(demand: _Demand, key: FlavorResource) -> tuple[int, int]:
    """(per-pod part x pods, shared claims not yet held in this flavor)."""
    per_pod = sat_mul(demand.per_pod.get(key.resource, 0), demand.pods)
    shared = 0
    for claim, amounts in demand.shared.items():  # a sum: the order does not matter
        if (claim, key) not in demand.held:
            shared = sat_add(shared, amounts.get(key.resource, 0))
    return per_pod, shared


def _usage_text(view: QuotaView, share: Lending, value: int, fmt: Callable[[int], str]) -> str:
    """`requested 2, in use 2 of nominal 4; 2 lent to ClusterQueue ml; cohort lab can lend 0`:
    what is asked, what the queue uses, what it borrowed and from whom, what others use of its
    quota, and what its cohort could still add."""
    held = f"requested {fmt(value)}, in use {fmt(view.used)} of nominal {fmt(view.nominal)}"
    parts = [
        ", ".join(p for p in (held, borrowed_text(share.borrowed, share.borrowed_from, fmt)) if p)
    ]
    if lent := lent_text(share.lent_to, fmt):
        parts.append(lent)
    if view.cohort is not None:
        parts.append(f"cohort {view.cohort} can lend {fmt(view.cohort_can_lend)}")
    return "; ".join(parts)


def _check(
    key: FlavorResource,
    view: QuotaView,
    demand: _Demand,
    amounts: tuple[int, int],
    capacity_only: bool,
    lending_of: Callable[[FlavorResource], Lending],
) -> tuple[bool, str | None]:
    per_pod, shared = amounts
    value = sat_add(per_pod, shared)
    if value <= view.potential and (capacity_only or value <= view.available):
        return True, None

    def fmt(amount: int) -> str:
        return format_amount(key.resource, amount, unit_in(demand.sources, key.resource))

    where = f"{demand.resource_text(key.resource)} in flavor {key.flavor}"
    if value > view.potential:
        if capacity_only and (demand.pods != 1 or shared):
            sum_text = f"{demand.pods} pods x {fmt(demand.per_pod.get(key.resource, 0))}"
            if shared:
                sum_text += f" + {fmt(shared)} shared"
            arithmetic = f"{sum_text} = {fmt(value)}"
            return False, (
                f"insufficient quota for {where}, {arithmetic} > maximum capacity "
                f"{fmt(view.potential)} ({_capacity_text(view, fmt)})"
            )
        return False, (
            f"insufficient quota for {where}, request > maximum capacity "
            f"({fmt(value)} > {fmt(view.potential)}) ({_capacity_text(view, fmt)})"
        )
    share = lending_of(key) if view.cohort is not None else Lending()
    return False, (
        f"insufficient unused quota for {where}, {fmt(value - view.available)} more needed "
        f"({_usage_text(view, share, value, fmt)})"
    )


def _assign_group(
    group: ResourceGroup,
    requested: list[str],
    view_of: Callable[[FlavorResource], QuotaView],
    demand: _Demand,
    fungibility: str,
    flavor_filter: FlavorFilter,
    capacity_only: bool,
    lending_of: Callable[[FlavorResource], Lending],
) -> tuple[str | None, bool, list[str]]:
    reasons: list[str] = []
    fallback: tuple[str, bool] | None = None
    first: tuple[str, bool] | None = None  # the first flavor quota accepts
    preferred = flavor_filter.preferred if isinstance(flavor_filter, PreferringFilter) else None
    for flavor in group.flavors:
        excluded = flavor_filter(flavor.name)
        if excluded:
            reasons.append(excluded)
            continue
        fits, borrows = True, False
        for resource in requested:
            key = FlavorResource(flavor.name, resource)
            view = view_of(key)
            amounts = _amount(demand, key)
            ok, reason = _check(key, view, demand, amounts, capacity_only, lending_of)
            if reason:
                reasons.append(reason)
            fits = fits and ok
            borrows = borrows or view.borrowing_with(sat_add(*amounts))
        if not fits:
            continue
        if not borrows or fungibility != TRY_NEXT_FLAVOR or capacity_only:
            wanted = preferred is None or preferred(flavor.name)
            if wanted and (first is None or first[1] == borrows):
                return flavor.name, borrows, reasons
            if first is None:
                first = (flavor.name, borrows)
            continue
        if fallback is None:
            fallback = (flavor.name, borrows)
    if first is not None:
        return first[0], first[1], reasons
    if fallback is not None:
        return fallback[0], fallback[1], reasons
    return None, False, reasons


def assign_flavors(
    table: QueueTable,
    queue: ClusterQueue,
    usage_of: Callable[[str], Mapping[FlavorResource, int]],
    per_pod: Mapping[str, int],
    shared: Mapping[str, Mapping[str, int]] | None = None,
    held: frozenset[tuple[str, FlavorResource]] = frozenset(),
    flavor_filter: FlavorFilter = lambda _flavor: None,
    pods: int = 1,
    capacity_only: bool = False,
    asked: Mapping[str, Collection[str]] | None = None,
) -> Assignment:
    """Assign a flavor to every resource group the demand touches.

    `per_pod` and `shared` hold amounts of covered resources only. `held` lists the
    (shared claim, flavor-resource) pairs the queue already pays for, which cost
    nothing more. With `capacity_only`, only the most the queue could ever hold is
    checked (for workloads at submit time), for `pods` pods at once. `asked` names,
    per resource, the DeviceClasses the pod asked for, for the denial reasons
    (default: every class the queue maps to the resource).
    """
    shared = shared or {}
    if asked is None:
        mapped: dict[str, list[str]] = {}
        for device_class, resource in table.class_resources.get(queue.name, {}).items():
            mapped.setdefault(resource, []).append(device_class)
        asked = mapped
    # asked and sources: read for denials only
    demand = _Demand(per_pod, shared, held, pods, asked, queue.sources)
    views: dict[FlavorResource, QuotaView] = {}
    usages: dict[str, Mapping[FlavorResource, int]] = {}

    def cached_usage(name: str) -> Mapping[FlavorResource, int]:
        if name not in usages:
            usages[name] = usage_of(name)
        return usages[name]

    def view_of(key: FlavorResource) -> QuotaView:
        if key not in views:
            views[key] = quota_view(table, queue, key, cached_usage)
        return views[key]

    def lending_of(key: FlavorResource) -> Lending:  # for a denial's message only
        return lending(table, queue, key, cached_usage)

    wanted = {r for r, v in per_pod.items() if v} | {
        r for amounts in shared.values() for r, v in amounts.items() if v
    }
    flavors: dict[str, str] = {}
    borrowing = False
    reasons: list[str] = []
    failed = False
    for group in queue.groups:
        requested = sorted(r for r in group.covered if r in wanted)
        if not requested:
            continue
        chosen, borrows, group_reasons = _assign_group(
            group,
            requested,
            view_of,
            demand,
            queue.when_can_borrow,
            flavor_filter,
            capacity_only,
            lending_of,
        )
        if chosen is None:
            failed = True
            reasons.extend(group_reasons)
            continue
        borrowing = borrowing or borrows
        flavors.update({resource: chosen for resource in requested})
    if failed:
        return Assignment({}, False, tuple(sorted(set(reasons))), ok=False)
    return Assignment(dict(sorted(flavors.items())), borrowing, (), ok=True)


def flavor_matches_pod(
    pod_spec: Mapping[str, Any], node_labels: Mapping[str, str], keys: frozenset[str]
) -> bool:
    """Whether a flavor's nodes can satisfy the pod's nodeSelector and required node affinity.

    As Kueue does, only label keys that some flavor of the resource group sets are
    considered (`keys`); the flavor stands for a node with its nodeLabels.
    """
    selector = pod_spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        return True
    for key, value in selector.items():
        if key in keys and node_labels.get(key) != value:
            return False
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        exprs = [e for e in (term.get("matchExpressions") or ()) if e.get("key") in keys]
        if not exprs:
            return True  # a term with no relevant requirement matches any flavor
        terms.append(exprs)
    if not terms:
        return True
    return any(all(requirement_matches(e, node_labels) for e in exprs) for exprs in terms)
