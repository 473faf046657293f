"""Who lent what to whom in a flat cohort: the attribution users read (quota.lending)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from quota.charge import FlavorResource
from quota.lending import Lending, lending
from quota.queuetable import queue_table
from quota.settings import Settings
from tests.quota.queue_builders import scenario_objects
from webhook.store.clusterstate import ClusterState

GPUS = FlavorResource("default", "gpus")


def _queue(name: str, quota: Any, cohort: str | None = "lab") -> dict[str, Any]:
    return {"name": name, "cohort": cohort, "groups": [{"default": {"gpus": quota}}]}


@dataclass(frozen=True)
class Case:
    id: str
    queues: list[dict[str, Any]]
    used: Mapping[str, int]
    expected: Mapping[str, Lending] = field(default_factory=dict)


CASES = [
    Case("no-cohort", [_queue("a", 4, None)], {"a": 3}, {"a": Lending()}),
    Case(
        "idle-cohort-lends-nothing-yet",
        [_queue("a", 4), _queue("b", 4)],
        {},
        {"a": Lending(lendable=4), "b": Lending(lendable=4)},
    ),
    Case(
        # the scenario: research lends 2 of its 4, ml borrows both
        "lending-limit-lent-to-the-borrower",
        [_queue("research", {"nominal": 4, "lendingLimit": 2}), _queue("ml", 0)],
        {"research": 2, "ml": 2},
        {
            "research": Lending(lent=2, lendable=0, lent_to={"ml": 2}),
            "ml": Lending(borrowed=2, borrowed_from={"research": 2}),
        },
    ),
    Case(
        "lending-limit-caps-what-can-be-lent",
        [_queue("research", {"nominal": 4, "lendingLimit": 2}), _queue("ml", 0)],
        {"ml": 1},
        {
            "research": Lending(lent=1, lendable=1, lent_to={"ml": 1}),
            "ml": Lending(borrowed=1, borrowed_from={"research": 1}),
        },
    ),
    Case(
        "guaranteed-part-in-use-does-not-reduce-the-pool",
        [_queue("research", {"nominal": 4, "lendingLimit": 2}), _queue("ml", 0)],
        {"research": 1},
        {"research": Lending(lendable=2), "ml": Lending()},
    ),
    Case(
        "two-lenders-in-name-order",
        [_queue("a", 2), _queue("b", 2), _queue("c", 1)],
        {"c": 4},
        {
            "a": Lending(lent=2, lendable=0, lent_to={"c": 2}),
            "b": Lending(lent=1, lendable=1, lent_to={"c": 1}),
            "c": Lending(borrowed=3, borrowed_from={"a": 2, "b": 1}),
        },
    ),
    Case(
        "two-borrowers-in-name-order",
        [_queue("a", 1), _queue("b", 1), _queue("z", 4)],
        {"a": 2, "b": 3},
        {
            "a": Lending(borrowed=1, borrowed_from={"z": 1}),
            "b": Lending(borrowed=2, borrowed_from={"z": 2}),
            "z": Lending(lent=3, lendable=1, lent_to={"a": 1, "b": 2}),
        },
    ),
    Case(
        "a-member-without-the-resource-neither-lends-nor-borrows",
        [_queue("a", 2), {"name": "b", "cohort": "lab", "groups": [{"default": {"cpu": 4}}]}],
        {"a": 1},
        {"a": Lending(lendable=1), "b": Lending()},
    ),
    Case(
        # an admin lowered a nominal quota under usage: only what the pool holds is attributed
        "over-admitted-cohort-attributes-what-it-can",
        [_queue("a", 1), _queue("b", 1)],
        {"a": 3, "b": 1},
        {"a": Lending(borrowed=2), "b": Lending()},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lending(case: Case) -> None:
    state = ClusterState(scenario_objects({"queues": case.queues}))
    table = queue_table(state, Settings())
    assert not table.invalid
    usage = {name: {GPUS: value} for name, value in case.used.items()}
    got = {
        name: lending(table, table.queues[name], GPUS, lambda q: usage.get(q, {}))
        for name in case.expected
    }
    assert got == dict(case.expected)
    everyone = [lending(table, q, GPUS, lambda q: usage.get(q, {})) for q in table.queues.values()]
    lent_to = sum(sum(e.lent_to.values()) for e in everyone)
    assert lent_to == sum(sum(e.borrowed_from.values()) for e in everyone)
    assert all(not (e.lent and e.borrowed) for e in everyone)
