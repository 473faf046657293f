"""Resource pools as seen from one node (KEP-4381 pool semantics).

Slices group into pools by (driver, pool name). Only the highest generation of a
pool counts; a pool is complete once `resourceSliceCount` slices of that generation
exist. Pools are ordered by driver then pool name and their slices by name, the
order the scheduler's incubating allocator searches in, so both pick the same
devices. Pools with invalid content are kept (marked) rather than raised, because
they only matter when no other pool can satisfy the claims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from quota.allocator.devices import Slice
from quota.allocator.nodes import node_matches

__all__ = ["Pool", "gather_pools", "slice_targets_node"]


@dataclass(frozen=True)
class Pool:
    """A pool relevant for a node; `slices` hold devices usable there, `other_slices` the rest."""

    driver: str
    name: str
    incomplete: bool = False
    invalid: str = ""
    slices: tuple[Slice, ...] = ()
    other_slices: tuple[Slice, ...] = ()
    counter_sets: Mapping[str, Mapping[str, Decimal]] | None = None

    @property
    def ref(self) -> str:
        return f"{self.driver}/{self.name}"


def slice_targets_node(s: Slice, node: Mapping[str, Any] | None) -> bool:
    """Whether a slice provides something for the node (counter slices always do)."""
    if s.shared_counters:
        return True
    if s.node_name or s.all_nodes or s.node_selector is not None:
        return node_matches(node, s.node_name, s.all_nodes, s.node_selector)
    if s.per_device_node_selection:
        return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in s.devices)
    return False  # a future node-selection field: unknown, so not usable


def _invalid_reason(slices: Iterable[Slice], others: Iterable[Slice]) -> tuple[str, dict[str, Any]]:
    device_slices = [s for s in slices if not s.shared_counters]
    names: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in names:
                return f"duplicate device name {d.name}", {}
            names.add(d.name)
    counter_sets: dict[str, Mapping[str, Decimal]] = {}
    for s in slices:
        for name, counters in s.shared_counters:
            if name in counter_sets:
                return f"duplicate counter set name {name}", {}
            counter_sets[name] = counters
    for s in (*device_slices, *others):
        for d in s.devices:
            for set_name, counters in d.consumes_counters:
                if set_name not in counter_sets:
                    return f"counter set {set_name} not found", {}
                for counter in counters:
                    if counter not in counter_sets[set_name]:
                        return f"counter {counter} not found in counter set {set_name}", {}
    return "", counter_sets


def _build(driver: str, name: str, targeting: list[Slice], all_slices: list[Slice] | None) -> Pool:
    targeting.sort(key=lambda s: s.name)
    names = {s.name for s in targeting}
    others = sorted((s for s in all_slices or () if s.name not in names), key=lambda s: s.name)
    reason, counter_sets = _invalid_reason(targeting, others)
    if reason:
        return Pool(driver, name, invalid=reason)
    device_slices = tuple(s for s in targeting if not s.shared_counters)
    return Pool(
        driver, name, slices=device_slices, other_slices=tuple(others), counter_sets=counter_sets
    )


def gather_pools(
    slices: Iterable[Slice],
    node: Mapping[str, Any] | None,
    by_pool: Mapping[tuple[str, str], list[Slice]] | None = None,
) -> list[Pool]:
    """The pools with devices reachable from `node`, sorted by (driver, pool name).

    `by_pool` (every slice grouped by pool) may be passed by callers that keep it
    cached; otherwise it is computed when an incomplete-looking pool needs it.
    """
    all_slices = list(slices)
    relevant: dict[tuple[str, str], list[Slice]] = {}
    for s in all_slices:
        if not slice_targets_node(s, node):
            continue
        key = (s.driver, s.pool)
        current = relevant.get(key)
        if current is None or s.generation > current[0].generation:
            relevant[key] = [s]
        elif s.generation == current[0].generation:
            current.append(s)
    pools = []
    for (driver, name), targeting in sorted(relevant.items()):
        generation, count = targeting[0].generation, targeting[0].slice_count
        if len(targeting) == count:
            pools.append(_build(driver, name, targeting, None))
            continue
        if by_pool is None:
            by_pool = {}
            for s in all_slices:
                by_pool.setdefault((s.driver, s.pool), []).append(s)
        members = by_pool.get((driver, name), [])
        if any(s.generation > generation for s in members):
            continue  # obsolete: the driver is publishing a newer generation
        current = [s for s in members if s.generation == generation]
        if len(current) != count:
            pools.append(Pool(driver, name, incomplete=True))
            continue
        pools.append(_build(driver, name, targeting, current))
    return pools
