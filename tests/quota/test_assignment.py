"""Kueue's cohort arithmetic (flat cohorts) and flavor assignment, with the numbers spelled out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quota.assignment import assign_flavors, quota_view
from quota.charge import FlavorResource
from quota.queuetable import queue_table
from quota.settings import Settings
from tests.quota.queue_builders import scenario_objects
from webhook.store.clusterstate import ClusterState

GPUS = FlavorResource("default", "gpus")


def _queue(name: str, quota: Any, cohort: str | None = "research") -> dict[str, Any]:
    return {"name": name, "cohort": cohort, "groups": [{"default": {"gpus": quota}}]}


@dataclass(frozen=True)
class Case:
    id: str
    queues: list[dict[str, Any]]
    used: Mapping[str, int]
    queue: str
    available: int
    potential: int
    lend: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)


CASES = [
    Case("no-cohort", [_queue("a", 5, None)], {"a": 3}, "a", available=2, potential=5),
    Case("cohort-empty", [_queue("a", 5), _queue("b", 5)], {}, "a", 10, 10, lend=5),
    Case("cohort-a-borrowed-two", [_queue("a", 5), _queue("b", 5)], {"a": 7}, "a", 3, 10, 3),
    Case("cohort-b-sees-what-is-left", [_queue("a", 5), _queue("b", 5)], {"a": 7}, "b", 3, 10),
    Case(
        "lending-limit-own-view",
        [_queue("a", {"nominal": 5, "lendingLimit": 2}), _queue("b", 5)],
        {},
        "a",
        available=10,
        potential=10,
        lend=5,
    ),
    Case(
        "lending-limit-others-view",
        [_queue("a", {"nominal": 5, "lendingLimit": 2}), _queue("b", 5)],
        {},
        "b",
        available=7,
        potential=7,
        lend=2,
    ),
    Case(
        "lending-limit-guaranteed-part-survives-borrowers",
        [_queue("a", {"nominal": 5, "lendingLimit": 2}), _queue("b", 5)],
        {"b": 7},
        "a",
        available=3,
        potential=10,
    ),
    Case(
        "borrowing-limit",
        [_queue("a", {"nominal": 5, "borrowingLimit": 1}), _queue("b", 5)],
        {},
        "a",
        available=6,
        potential=6,
        lend=1,
    ),
    Case(
        "borrowing-and-lending-limit",
        [_queue("a", {"nominal": 5, "borrowingLimit": 1, "lendingLimit": 2}), _queue("b", 5)],
        {"a": 4},
        "a",
        available=2,
        potential=6,
        lend=1,
    ),
    Case(
        "member-without-the-resource-lends-nothing",
        [_queue("a", 2), {"name": "b", "cohort": "research", "groups": [{"default": {"cpu": 4}}]}],
        {"b": 0},
        "a",
        available=2,
        potential=2,
    ),
    Case(
        "over-admitted-queue-has-nothing",
        [_queue("a", 2, None)],
        {"a": 5},
        "a",
        available=-3,
        potential=2,
    ),
]


def _table(queues: list[dict[str, Any]]) -> Any:
    state = ClusterState(scenario_objects({"queues": queues}))
    return queue_table(state, Settings())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_quota_view(case: Case) -> None:
    table = _table(case.queues)
    assert not table.invalid
    usage = {name: {GPUS: value} for name, value in case.used.items()}
    view = quota_view(table, table.queues[case.queue], GPUS, lambda q: usage.get(q, {}))
    assert (view.available, view.potential) == (case.available, case.potential)
    assert view.cohort_can_lend == case.lend


def test_capacity_only_multiplies_by_pods_and_adds_shared_once() -> None:
    table = _table([_queue("a", {"nominal": 4, "borrowingLimit": 2}), _queue("b", 4)])
    queue = table.queues["a"]
    fits = assign_flavors(table, queue, lambda q: {}, {"gpus": 2}, pods=3, capacity_only=True)
    assert fits.ok and fits.flavors == {"gpus": "default"}
    over = assign_flavors(
        table, queue, lambda q: {}, {"gpus": 2}, {"ns/c": {"gpus": 1}}, pods=3, capacity_only=True
    )
    assert not over.ok
    assert over.reasons == (
        "insufficient quota for gpus in flavor default, 3 pods x 2 + 1 shared = 7 > maximum "
        "capacity 6 (nominal 4 + borrowing limit 2)",
    )


def test_held_shared_claim_costs_nothing_more() -> None:
    table = _table([_queue("a", 1, None)])
    queue = table.queues["a"]
    usage = {"a": {GPUS: 1}}
    shared = {"ns/c": {"gpus": 1}}
    assert not assign_flavors(table, queue, usage.get, {}, shared).ok
    held = frozenset({("ns/c", GPUS)})
    assert assign_flavors(table, queue, usage.get, {}, shared, held=held).ok


def test_resources_with_zero_demand_need_no_flavor() -> None:
    table = _table([_queue("a", 0, None)])
    result = assign_flavors(table, table.queues["a"], lambda q: {}, {"gpus": 0})
    assert result.ok and result.flavors == {}


# --- property: the decision agrees with Kueue's quota rules stated as constraints --------

QUEUE_NAMES = ("a", "b", "c")
quotas = st.fixed_dictionaries(
    {
        "nominal": st.integers(0, 6),
        "borrowingLimit": st.none() | st.integers(0, 4),
        "lendingLimit": st.none() | st.integers(0, 6),
    }
)


def _feasible(
    spec: Mapping[str, Mapping[str, Any]], used: Mapping[str, int], queue: str, value: int
) -> bool:
    """Admitting `value` to `queue` keeps every rule: stated as constraints, not as `available`."""

    def guaranteed(name: str) -> int:
        limit = spec[name]["lendingLimit"]
        return 0 if limit is None else max(0, spec[name]["nominal"] - limit)

    after = {**used, queue: used.get(queue, 0) + value}
    quota = spec[queue]
    if (
        quota["borrowingLimit"] is not None
        and after[queue] > quota["nominal"] + quota["borrowingLimit"]
    ):
        return False
    # what the cohort holds (lendable parts) must cover what its members use past their private part
    lendable = sum(spec[n]["nominal"] - guaranteed(n) for n in spec)
    beyond = sum(max(0, after.get(n, 0) - guaranteed(n)) for n in spec)
    return beyond <= lendable


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(quotas, min_size=2, max_size=3),
    pods=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1, max_size=12),
)
def test_admission_matches_quota_constraints(
    specs: list[dict[str, Any]], pods: list[tuple[int, int]]
) -> None:
    spec = {QUEUE_NAMES[i]: quota for i, quota in enumerate(specs)}
    for quota in spec.values():
        if quota["lendingLimit"] is not None:
            quota["lendingLimit"] = min(quota["lendingLimit"], quota["nominal"])
    table = _table(
        [_queue(name, {k: v for k, v in q.items() if v is not None}) for name, q in spec.items()]
    )
    assert not table.invalid
    used: dict[str, int] = {}
    for index, value in pods:
        name = QUEUE_NAMES[index % len(spec)]
        usage = {n: {GPUS: used.get(n, 0)} for n in spec}
        result = assign_flavors(table, table.queues[name], usage.__getitem__, {"gpus": value})
        assert result.ok is _feasible(spec, used, name, value), (name, value, used)
        if result.ok:
            used[name] = used.get(name, 0) + value
