"""A pod group decided in memory, as a whole, before any of its records is written.

The queueing controller records a group's pods one by one in the ledger, one write each,
and releases them again when one does not fit. Done blindly on every pass, a group that
does not fit yet is written and rolled back again and again, and while its records exist
they hold quota that other admissions are denied. So the whole group is first decided
here, exactly as the ledger would decide its pods one after another (`conclude`, each pod
without its own holders: its record and its charge by name, so a retry counts once; with
the charges of the pods before it), and only a group that fits is written. The ledger's
compare-and-swap still guards the writes against what changes meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from quota.decision import Prepared, conclude, conclude_group
from quota.usage import Usage
from quota.verdict import Decision

__all__ = ["Member", "conclude_in_turn"]


@dataclass(frozen=True)
class Member:
    """One pod of a workload: its UID (its record's key), its `ns/name` (its holder once
    it runs) and its prepared decision."""

    uid: str
    holder: str
    prepared: Prepared | Decision


def conclude_in_turn(members: Sequence[Member], usage: Usage, subject: str) -> Decision:
    """The members decided one after another on `usage`: the last one's decision when all
    fit, else a decision that does not fit whose `shortfall` says why the workload waits.

    `usage` must be the caller's own view (the ledger's `admit` hands each evaluation one):
    the charges of the members that fit are added to it. At least one member.

    The reason is the group's, in the group's numbers (`requested 3` for three one-GPU
    pods); for a group that could not fit even in an empty cluster (more than its queue
    could ever hold: an admin lowered the quota after its pods were created) it says so,
    instead of usage numbers that suggest it only waits its turn."""
    decision: Decision | None = None
    for member in members:
        usage.remove(member.uid)
        usage.remove(member.holder)
        decision = conclude(member.prepared, usage, enqueue=False)
        if not decision.allowed or decision.charge is None:
            why = _group_reason(members, usage, subject)
            return replace(decision, shortfall=why) if why else decision
        usage.add(member.uid, decision.charge)
    assert decision is not None, "a workload has at least one member"
    return decision


def _group_reason(members: Sequence[Member], usage: Usage, subject: str) -> str:
    """Why a group of two or more waits, as a whole ("" when that is not what stops it)."""
    pods = [m.prepared for m in members if isinstance(m.prepared, Prepared)]
    if len(members) < 2 or len(pods) < len(members):
        return ""
    ever = conclude_group(pods, Usage(), subject)  # empty: available is all it could hold
    if not ever.allowed:
        return f"{subject} can never fit: {ever.shortfall}"
    for member in members:
        usage.remove(member.uid)
        usage.remove(member.holder)
    return conclude_group(pods, usage, subject).shortfall
