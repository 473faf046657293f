"""Re-checks of existing pods that may cost more now: a resize, or a ResourceClaim created under
a name that admitted pods reference. Each is checked and recorded like an admission (the
ledger leaves the pod's own record and live charge out of the usage it decides on), so a
pod never grows past its queue's quota after it was admitted. A pod still waiting in its
queue (gated, without a record) is not re-checked: only the queue controller records it,
in queue order, charged by what exists then.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from quota.cluster import ClusterView
from quota.livepods import is_gated, is_live_pod, pod_key, pod_uid
from quota.objectkeys import namespace_or_default
from quota.recharge import recheck_pod
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from webhook.edge.review import AdmissionRequest, Outcome, outcome_of
from webhook.ledger import Ledger, valid_reservation_id
from webhook.store.backend import Backend

__all__ = ["Recheck"]


def _deny(code: int, reason: str, message: str) -> Outcome:
    return Outcome(False, code=code, reason=reason, message=message)


class Recheck:
    """Re-checks existing pods against current usage; synchronous, called per request."""

    def __init__(self, backend: Backend, ledger: Ledger, settings: Settings) -> None:
        self.backend = backend
        self.ledger = ledger
        self.settings = settings

    def pod(
        self, req: AdmissionRequest, pod: Mapping[str, Any] | None, state: ClusterView
    ) -> tuple[Outcome, Decision | None]:
        """An existing pod that may cost more now: checked and recorded like an admission."""
        if not isinstance(pod, Mapping):
            return Outcome(True), None
        ready, why = self.backend.ready()
        if not ready:
            return _deny(403, "NotReady", f"draquota cannot decide now: {why}"), None
        uid = pod_uid(pod)
        if not valid_reservation_id(uid):
            return _deny(400, "InvalidObject", f"{req.ref}: metadata.uid: required"), None
        recorded = self.ledger.record(uid)
        if recorded is None and is_gated(pod):
            # It waits in its queue and holds nothing: only the queue admits it, in order,
            # charged by what exists then. A record here would let it jump the queue.
            return Outcome(True), None

        def evaluate(usage: Usage) -> Decision:
            return recheck_pod(pod, state, usage, self.settings, recorded)

        decision = self.ledger.admit(uid, evaluate, req.dry_run, pod_key(pod), existing=True)
        return outcome_of(decision), decision

    def claim_created(self, req: AdmissionRequest) -> tuple[Outcome, Decision | None]:
        """A ResourceClaim created under a name live admitted pods reference: each such pod is
        re-checked as if it held the new claim."""
        claim = req.object
        metadata = claim.get("metadata") if isinstance(claim, Mapping) else None
        name = (metadata or {}).get("name") or req.name
        namespace = namespace_or_default((metadata or {}).get("namespace") or req.namespace)
        if not isinstance(claim, Mapping) or not isinstance(name, str) or not name:
            return Outcome(True), None
        now = time.time()
        users = [
            pod
            for pod in self.ledger.users("ResourceClaim", namespace, name)
            if is_live_pod(pod, now)
        ]
        if not users:
            return Outcome(True), None
        created = {**claim, "kind": "ResourceClaim"}
        created["metadata"] = {**(metadata or {}), "name": name, "namespace": namespace}
        state = self.backend.state.snapshot().with_object(created)
        decision: Decision | None = None
        for pod in users:
            outcome, decision = self.pod(req, pod, state)
            if not outcome.allowed:
                return outcome, decision
        return Outcome(True), decision
