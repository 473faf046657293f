"""The cohort of tests/webhook/preemption_builders.py in Reject mode, behind a replica whose
admission may reclaim (it has an Evictor, as a live replica has the queue controller's).

research: nominal 4, lends 2, reclaims Any (unless told otherwise); ml: nominal 0, borrows;
other: nominal 2, outside the cohort.
"""

from __future__ import annotations

import re
from typing import Any

from tests.security.cluster import Cluster
from tests.webhook.builders import AppClient
from tests.webhook.preemption_builders import ClusterEvictor, cluster_queue, lab
from webhook.edge.app import create_app
from webhook.edge.metrics import Metrics

__all__ = ["Replica", "preempted", "reject", "reject_lab"]


def reject(queue: dict[str, Any]) -> dict[str, Any]:
    """The ClusterQueue with `whenFull: Reject` (the default): pods that do not fit are denied."""
    queue["spec"]["whenFull"] = "Reject"
    queue["spec"].pop("queueingStrategy", None)
    return queue


class Replica:
    """The stand-in API server, and the replica's evictor and metrics."""

    def __init__(self, cluster: Cluster, evictor: bool = True) -> None:
        self.cluster = cluster
        self.evictor = ClusterEvictor(cluster)
        self.metrics = Metrics()
        app = create_app(
            cluster.backend,
            cluster.ledger,
            cluster.settings,
            metrics=self.metrics,
            evictor=self.evictor if evictor else None,
        )
        cluster.client = AppClient(app)


def reject_lab(evictor: bool = True, **research_preemption: Any) -> Replica:
    policy = research_preemption or {"reclaimWithinCohort": "Any"}
    return Replica(
        lab(
            reject(cluster_queue("research", 4, lending=2, **policy)),
            reject(cluster_queue("ml", 0)),
            reject(cluster_queue("other", 2, cohort=None)),
        ),
        evictor,
    )


def preempted(replica: Replica, queue: str, reason: str) -> float:
    """draquota_preempted_workloads_total{cluster_queue=queue, reason=reason}, as scraped."""
    text = replica.metrics.render().decode()
    pattern = (
        rf'^draquota_preempted_workloads_total\{{[^}}]*cluster_queue="{queue}"'
        rf'[^}}]*reason="{reason}"[^}}]*\}} (\S+)$'
    )
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0
