"""Who lent what to whom in a cohort: the attribution users read in messages and status.

Kueue's flat cohort pools the lendable part of each member's nominal quota
(`nominal - guaranteed`, see `quota.assignment`); a borrower takes from the pool, not
from a named member. People still ask "who has my quota?", so draquota attributes
what is borrowed to the members whose pooled quota is unused, deterministically:

- a member *borrows* what it uses beyond its nominal quota;
- a member *can lend* the unused part of what it put in the pool,
  `pooled - max(0, used - guaranteed)`;
- the borrowed total is covered by the members that can lend, in name order, each up
  to what it can lend; borrowers are served in name order too, so every unit borrowed
  is paired with one lender (`lent_to` / `borrowed_from`);
- what a member can *still* lend (`lendable`) is what it can lend less what it has lent.

Invariants: `Σ lent == Σ borrowed` over the cohort while usage is within the cohort's
quota (a cohort over quota, after an admin lowered a nominal, attributes what it can);
`lendable >= 0`; a member never both lends and borrows the same flavor-resource.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from quota.charge import FlavorResource
from quota.queues import ClusterQueue
from quota.queuetable import QueueTable

__all__ = ["Lending", "lending"]


@dataclass(frozen=True)
class Lending:
    """One queue's side of a cohort's lending, for one flavor-resource."""

    borrowed: int = 0
    lent: int = 0
    lendable: int = 0
    borrowed_from: Mapping[str, int] = field(default_factory=dict)  # lender -> amount
    lent_to: Mapping[str, int] = field(default_factory=dict)  # borrower -> amount


def _spare(queue: ClusterQueue, key: FlavorResource, used: int) -> int:
    """What `queue` put in the pool and does not use itself."""
    quota = queue.quota(key)
    if quota is None:
        return 0
    pooled = (
        quota.nominal if quota.lending_limit is None else min(quota.lending_limit, quota.nominal)
    )
    guaranteed = quota.nominal - pooled
    return max(0, pooled - max(0, used - guaranteed))


def _over(queue: ClusterQueue, key: FlavorResource, used: int) -> int:
    quota = queue.quota(key)
    return max(0, used - (quota.nominal if quota else 0))


def lending(
    table: QueueTable,
    queue: ClusterQueue,
    key: FlavorResource,
    usage_of: Callable[[str], Mapping[FlavorResource, int]],
) -> Lending:
    """`queue`'s borrowing and lending of `key` within its cohort (nothing without one)."""
    if queue.cohort is None:
        return Lending()
    members = sorted(table.members(queue), key=lambda m: m.name)
    used = {m.name: usage_of(m.name).get(key, 0) for m in members}
    spare = {m.name: _spare(m, key, used[m.name]) for m in members}
    wanted = {m.name: _over(m, key, used[m.name]) for m in members}
    pairs = _pair(spare, wanted)
    lent_to = {b: n for (lender, b), n in pairs.items() if lender == queue.name}
    borrowed_from = {lender: n for (lender, b), n in pairs.items() if b == queue.name}
    lent = sum(lent_to.values())
    return Lending(
        borrowed=wanted[queue.name],
        lent=lent,
        lendable=max(0, spare[queue.name] - lent),
        borrowed_from=borrowed_from,
        lent_to=lent_to,
    )


def _pair(spare: Mapping[str, int], wanted: Mapping[str, int]) -> dict[tuple[str, str], int]:
    """(lender, borrower) -> amount: borrowers in name order take from lenders in name
    order, each lender up to its spare quota."""
    left = dict(spare)
    pairs: dict[tuple[str, str], int] = {}
    for borrower, need in wanted.items():
        for lender in left:
            if need <= 0:
                break
            if lender == borrower or left[lender] <= 0:
                continue
            take = min(need, left[lender])
            pairs[(lender, borrower)] = take
            left[lender] -= take
            need -= take
    return pairs
