"""`Prepared`: the part of an admission decision that does not depend on quota usage.

`quota.decision.prepare` builds it outside the ledger's lock (routing, counting, every flavor
judged with placement); `quota.decision.conclude` does the quota arithmetic against usage
under it. A prepared decision may serve several pods that ask for the same (`Prepared.of`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from quota.assignment import PreferringFilter
from quota.charge import Charge
from quota.demand import PodDemand
from quota.queuedemand import Charged, charge_record, node_labels
from quota.queuetable import QueueTable
from quota.routing import Route, subject_of
from quota.workloads import Workload

__all__ = ["Prepared"]


@dataclass(frozen=True)
class Prepared:
    """Everything a decision needs that does not depend on usage: the queue, the demand,
    and how every flavor of the queue answers for the pod (node affinity, placement).

    `prepare` builds it outside the ledger's lock; `conclude` is the quota arithmetic
    against usage, done under it (again after a conflict)."""

    workload: Workload
    table: QueueTable
    route: Route
    demand: PodDemand
    charged: Charged
    warnings: tuple[str, ...]
    answers: Mapping[str, str | None]  # flavor -> why it cannot take the pod (None: it can)
    notes: Mapping[str, tuple[str, ...]]  # flavor -> warnings that count if it is tried
    busy: Mapping[str, str]  # flavors whose nodes can host the claims only later, and why
    busy_everywhere: str  # why no node at all can host them right now ("" when some can)
    operation: str = "CREATE"
    # (flavors) -> (charge, nodeSelector): shared by every copy `of` makes, so the pods of a
    # workload hold one Charge object (and its annotation text) per flavor assignment.
    _charges: dict[tuple[tuple[str, str], ...], tuple[Charge, dict[str, str]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def subject(self) -> str:
        return subject_of(self.workload)

    def of(self, workload: Workload) -> Prepared:
        """The same preparation for another workload that asks for the same (its messages name
        `workload`); built field by field, since dataclasses.replace costs more than the rest."""
        return Prepared(
            workload,
            self.table,
            self.route,
            self.demand,
            self.charged,
            self.warnings,
            self.answers,
            self.notes,
            self.busy,
            self.busy_everywhere,
            self.operation,
            self._charges,
        )

    def charged_to(self, flavors: Mapping[str, str]) -> tuple[Charge, dict[str, str]]:
        """The pod's charge in `flavors` and the nodeSelector that pins it there."""
        key = tuple(flavors.items())
        found = self._charges.get(key)
        if found is None:
            charge = charge_record(self.route, self.demand, self.charged, flavors, "")
            found = self._charges[key] = (charge, node_labels(self.table, flavors))
        return found

    @property
    def where(self) -> str:
        return f'ClusterQueue "{self.route.queue.name}" (LocalQueue {self.route.local.key})'

    def flavor_filter(self, warnings: list[str]) -> PreferringFilter:
        """The flavor answers, adding a tried flavor's notes to `warnings`."""

        def check(flavor: str) -> str | None:
            warnings.extend(self.notes.get(flavor, ()))
            return self.answers.get(flavor, f"flavor {flavor} not found")

        return PreferringFilter(check, lambda flavor: flavor not in self.busy)

    def busy_warning(self, flavors: Collection[str] | None) -> str:
        """The warning that the pod waits for devices to be released ("" when it need not):
        no node can host the claims now, or none of the chosen flavor's nodes can."""
        if not self.busy_everywhere and not self.busy:
            return ""
        text = f"{self.subject}: claims cannot be placed on the devices free right now"
        if self.busy_everywhere:
            return (
                f"{text}, the pod waits until allocated devices are released: "
                f"{self.busy_everywhere}"
            )
        for flavor in sorted(flavors or ()):
            if flavor in self.busy:
                return (
                    f"{text} of flavor {flavor}, the pod waits until allocated devices are "
                    f"released: {self.busy[flavor]}"
                )
        return ""
