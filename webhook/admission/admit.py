"""The Admission use case: one AdmissionRequest in, one Outcome (and its decision) out.

Pods are recorded by their UID: the API server sets `metadata.uid` (and the final
name of a generateName pod) before it calls the validating webhook, and no user can
choose it. /mutate only stamps (the queue label, the charge annotation for people to
read, the flavor's nodeSelector); /validate decides again on the object it is given,
checks the stamp is there, and records the charge. Resizes, and claims re-created
under a name an admitted pod references, are checked like admissions (`webhook.admission.recheck`).
A pod or Job that /validate lets into a queueing ClusterQueue to wait is told where it will
stand, in a warning (`webhook.admission.submitwait`). A pod denied for quota its cohort borrowed may
reclaim it (`webhook.queueing.reclaim`). Synchronous: the app runs it off the event loop.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from quota.cluster import ClusterView
from quota.decision import Prepared, conclude, prepare
from quota.errors import ObjectRef
from quota.flavorfilter import Placer
from quota.livepods import is_gated, job_owner, pod_key, pod_uid
from quota.queuedemand import node_selector_of
from quota.queuetable import queue_table
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from quota.waiting import ADMISSION_GATE
from quota.workloads import WORKLOAD_KINDS
from webhook.admission import mutation
from webhook.admission import stamp as stamping
from webhook.admission.jobpods import JobPods
from webhook.admission.preparedcache import PreparedCache
from webhook.admission.recheck import Recheck
from webhook.admission.stamp import Stamp
from webhook.admission.submitwait import SubmitWait
from webhook.admission.updates import grown, resources_of, resumed, suspended, ungated
from webhook.edge.review import AdmissionRequest, Outcome, outcome_of
from webhook.ledger import Ledger
from webhook.queueing.reclaim import Reclaim
from webhook.store.backend import Backend

__all__ = ["JOB_CONTROLLERS", "Admission"]

# Who creates the pods of a Job: the Job controller's ServiceAccount (kube-controller-manager
# with --use-service-account-credentials), else kube-controller-manager itself.
JOB_CONTROLLERS = frozenset(
    {"system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager"}
)

# What the API server sets itself on create: a pod's request never exempts it through these.
_SERVER_SET = ("deletionTimestamp", "deletionGracePeriodSeconds")


def _as_created(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object as it will be stored: the request namespace fills a missing
    metadata.namespace; status and deletion fields, which the API server resets on
    create, are dropped."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return obj
    metadata = {k: v for k, v in metadata.items() if k not in _SERVER_SET}
    if namespace and not metadata.get("namespace"):
        metadata["namespace"] = namespace
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


def _deny(code: int, reason: str, message: str, warnings: tuple[str, ...] = ()) -> Outcome:
    return Outcome(False, code=code, reason=reason, message=message, warnings=warnings)


class Admission:
    """Turns one AdmissionRequest into an Outcome; synchronous, called per request (see the
    module docstring)."""

    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        settings: Settings,
        placer: Placer | None = None,
        reclaim: Reclaim | None = None,
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.settings = settings
        self.placer = placer
        self.prepared = PreparedCache(backend.state)  # shared by pods that ask for the same
        self.stamps: dict[str, Stamp] = {}  # charge annotations read, by their text
        self.rechecks = Recheck(backend, ledger, settings)
        self.waits = SubmitWait(ledger, lambda obj, view: self._prepare(obj, "CREATE", view))
        self.jobs = JobPods(backend, ledger, settings)
        self.reclaim = reclaim  # Reject-mode reclaim; None: none (no Evictor, no cluster)

    def review(self, req: AdmissionRequest, mutating: bool) -> tuple[Outcome, Decision | None]:
        """The answer to a request, and the decision behind it (None when none was needed)."""
        if req.operation in ("DELETE", "CONNECT"):
            return Outcome(True), None
        if req.kind == "Pod" and req.sub_resource == "resize" and not mutating:
            return self.rechecks.pod(req, req.object, self.backend.state.snapshot())
        if req.sub_resource:
            return Outcome(True), None
        if req.kind == "ResourceClaim" and req.operation == "CREATE" and not mutating:
            return self.rechecks.claim_created(req)
        if req.kind not in WORKLOAD_KINDS or req.object is None:
            return Outcome(True), None
        if req.kind == "Pod" and req.operation == "UPDATE":
            return self._pod_update(req, mutating)
        obj = _as_created(req.object, req.namespace) if req.operation == "CREATE" else req.object
        ready, why = self.backend.ready()
        if not ready:
            return _deny(403, "NotReady", f"draquota cannot decide now: {why}"), None
        if req.kind == "Job" and req.operation == "UPDATE" and not mutating:
            if resumed(req):
                return self._resume(req, obj), None
            if grown(req) and self.ledger.record(pod_uid(obj)) is not None:
                return _deny(
                    403,
                    "QuotaExceeded",
                    f"{req.ref}: spec.parallelism: a Job its ClusterQueue admitted as a whole "
                    "cannot run more pods at once than it was admitted for; create a new Job",
                ), None
        if req.kind == "Pod" and (found := self.jobs.job_of(obj)) is not None:
            covered = self._covered_pod(req, obj, found, mutating)
            if covered is not None:
                return covered, None
        if mutating:
            return self._mutate(req, obj)
        if req.kind != "Pod":
            decision = self._decide(obj, req, "", dry_run=True)
            if decision.queued and not suspended(obj):
                return _deny(
                    403,
                    "ChargeMismatch",
                    f"{req.ref}: spec.suspend: must be true (the Job's ClusterQueue queues "
                    "Jobs and starts them): the Job did not pass draquota's mutating webhook; "
                    "submit it again",
                ), decision
            decision = self._placed(req, obj, decision)
            return outcome_of(decision), decision
        return self._admit_pod(req, obj)

    def _placed(
        self, req: AdmissionRequest, obj: Mapping[str, Any], decision: Decision
    ) -> Decision:
        """A workload created to wait in its queue, with where it will stand as a warning."""
        if not decision.queued or req.operation != "CREATE":
            return decision
        view = self.backend.state.snapshot()
        prepared = self._prepare(obj, "CREATE", view)
        if isinstance(prepared, Decision) or not (wait := self.waits.warning(obj, prepared, view)):
            return decision
        return dataclasses.replace(decision, warnings=(*decision.warnings, wait))

    def _covered_pod(
        self,
        req: AdmissionRequest,
        pod: Mapping[str, Any],
        found: tuple[Mapping[str, Any], Charge],
        mutating: bool,
    ) -> Outcome | None:
        """A pod of an admitted Job is charged by the Job's record, if the Job controller made
        it (anyone else naming the Job as owner would run on the Job's quota) and the record
        has room for it; None: a pod beyond the record, admitted as a pod of its own."""
        if req.user not in JOB_CONTROLLERS:
            return _deny(
                403,
                "NotJobController",
                f"{req.ref}: metadata.ownerReferences: the pods of a Job its ClusterQueue "
                "admitted as a whole are created by the Job controller only",
            )
        job, record = found
        if is_gated(pod) or self.jobs.beyond(pod, job, record):
            return None
        wanted = self._node_selector_of(record)
        if mutating:
            return Outcome(True, patch=tuple(mutation.covered_pod_patch(pod, wanted)))
        outcome = _on_flavor_nodes(req, pod, wanted, "its Job is")
        if outcome.allowed and not req.dry_run:
            self.ledger.ensure_elected()  # the slots of a record are counted in one place
            self.jobs.covered(pod, job)
        return outcome

    def _resume(self, req: AdmissionRequest, job: Mapping[str, Any]) -> Outcome:
        """Only the queue unsuspends a Job of a queueing ClusterQueue, once it recorded it."""
        if self.ledger.record(pod_uid(job)) is not None:
            return Outcome(True)
        prepared = prepare(job, self.backend.state, self.settings, None, "UPDATE")
        if isinstance(prepared, Decision) or not prepared.route.queue.queues:
            return Outcome(True)
        return _deny(
            403,
            "WaitingForQuota",
            f"{req.ref}: spec.suspend: draquota sets it to false when ClusterQueue "
            f'"{prepared.route.queue.name}" admits the Job; the Job is still waiting for quota',
        )

    def _mutate(self, req: AdmissionRequest, obj: dict[str, Any]) -> tuple[Outcome, Decision]:
        decision = self._decide(obj, req, "", dry_run=True)
        if not decision.allowed:
            return outcome_of(decision), decision
        if req.kind == "Pod" and decision.queued:
            patch = mutation.queued_pod_patch(req.object or {}, decision)
        elif req.kind == "Pod":
            patch = mutation.pod_patch(req.object or {}, decision)
        elif req.kind == "Job" and req.operation == "UPDATE":
            patch = []  # a Job's pod template is immutable once created
        else:
            patch = mutation.workload_patch(req.object or {}, req.kind)
            if decision.queued:
                patch += mutation.suspend_patch(req.object or {})
        return Outcome(True, warnings=decision.warnings, patch=tuple(patch)), decision

    def _admit_pod(
        self, req: AdmissionRequest, pod: dict[str, Any]
    ) -> tuple[Outcome, Decision | None]:
        """Validate a pod create: decide, check the stamp of /mutate, and record by UID."""
        uid = pod_uid(pod) or _digest_id(req.uid)
        key = pod_key(pod)
        holder = self.backend.state.get("Pod", *key.split("/", 1))
        if holder is not None and pod_uid(holder) != uid:
            message = (
                f"{req.ref}: a pod of this name already exists (uid {pod_uid(holder) or 'unknown'})"
                "; delete it first, or wait until its deletion is complete"
            )
            return _deny(409, "AlreadyExists", message), None
        stamp = stamping.stamp_of(req, pod, self.stamps)

        def checked(decision: Decision) -> Decision:
            mismatch = stamping.stamp_mismatch(req, pod, stamp, decision)
            if not mismatch:
                return decision
            return dataclasses.replace(
                decision,
                verdict=Verdict.DENIED,
                reason="ChargeMismatch",
                message=mismatch,
                charge=None,
            )

        decision = self._decide(pod, req, uid, req.dry_run, key, check=checked)
        decision = self._placed(req, pod, decision)
        return outcome_of(decision), decision

    def _decide(
        self,
        obj: Mapping[str, Any],
        req: AdmissionRequest,
        uid: str,
        dry_run: bool,
        key: str = "",
        check: Callable[[Decision], Decision] = lambda d: d,
    ) -> Decision:
        """Counting and placement first, outside the ledger's lock; under it, only the quota
        arithmetic against current usage (again after a conflict) and the record's write."""
        prepared = self._prepare(obj, req.operation, self.backend.state.snapshot())
        # Claims and templates the informers may not have yet: fetched once, decided again.
        missing = prepared.missing if isinstance(prepared, Decision) else ()
        if missing and self._fetch_missing(missing):
            prepared = self._prepare(obj, req.operation, self.backend.state.snapshot())
        if isinstance(prepared, Decision):
            return prepared

        def evaluate(usage: Usage) -> Decision:
            decision = conclude(prepared, usage)
            return check(decision) if decision.allowed else decision

        queue, uid = prepared.route.queue.name, uid or _digest_id(req.uid)

        def record(judge: Callable[[Usage], Decision]) -> Decision:
            # a pod created is visible by itself: its record may follow the answer
            return self.ledger.admit(uid, judge, dry_run, key, cluster_queue=queue, behind=True)

        decision = record(evaluate)
        if self.reclaim is None or not Reclaim.applies(prepared, decision):
            return decision
        return self.reclaim.admit(prepared, obj, evaluate, record, dry_run, decision, req)

    def _prepare(
        self, obj: Mapping[str, Any], operation: str, view: ClusterView
    ) -> Prepared | Decision:
        """Routing, counting and placement, all read from `view`: one snapshot per decision."""
        settings, placer = self.settings, self.placer
        return self.prepared.prepare(
            obj,
            operation,
            lambda: prepare(obj, view, settings, placer, operation),
            view,
        )

    def _fetch_missing(self, missing: Sequence[ObjectRef]) -> bool:
        """One GET per object of `missing` the cache still does not hold; True if any was
        found (the backend, the store's one writer, has stored it)."""
        found = False
        for kind, namespace, name in missing:
            if self.backend.state.get(kind, namespace, name) is not None:
                continue
            found = self.backend.fetch(kind, namespace, name) is not None or found
        return found

    def _pod_update(self, req: AdmissionRequest, mutating: bool) -> tuple[Outcome, None]:
        """A pod keeps its charge: its queue label and charge record cannot change, and new
        resources are checked like a resize."""
        new_label, new_charge = stamping.queue_label_and_charge(req.object)
        old_label, old_charge = stamping.queue_label_and_charge(req.old_object)
        if new_label != old_label:
            return _deny(
                403,
                "QueueLabelImmutable",
                f"{req.ref}: metadata.labels[{QUEUE_LABEL}]: cannot be changed on an existing pod",
            ), None
        if new_charge != old_charge:
            return _deny(
                403,
                "ChargeAnnotationImmutable",
                f"{req.ref}: metadata.annotations[{CHARGE_ANNOTATION}]: is set by draquota at "
                "creation and cannot be changed",
            ), None
        if not mutating and ungated(req):
            return self._ungate(req), None
        if not mutating and self._released_from_job(req):
            outcome, _ = self.rechecks.pod(req, req.object, self.backend.state.snapshot())
            return outcome, None
        if not mutating and self._adopted_without_right(req):
            return _deny(
                403,
                "NotJobController",
                f"{req.ref}: metadata.ownerReferences: only the Job controller makes a pod "
                "one of a Job its ClusterQueue admitted as a whole",
            ), None
        if not mutating and resources_of(req.object) != resources_of(req.old_object):
            outcome, _ = self.rechecks.pod(req, req.object, self.backend.state.snapshot())
            return outcome, None
        return Outcome(True), None

    def _released_from_job(self, req: AdmissionRequest) -> bool:
        """A pod its Job's record covers stops being the Job's (its owner reference removed,
        as the Job controller does when its labels no longer match): from then on it is
        charged on its own, so it must fit on its own, like an admission."""
        old, new = req.old_object or {}, req.object or {}
        owner = job_owner(old)
        if not owner or job_owner(new) == owner or is_gated(old):
            return False
        return self.ledger.record(pod_uid(old)) is None and self.jobs.job_of(old) is not None

    def _adopted_without_right(self, req: AdmissionRequest) -> bool:
        """Someone other than the Job controller makes the pod one of an admitted Job's, whose
        record would then charge it."""
        adopted = job_owner(req.object or {})
        if not adopted or adopted == job_owner(req.old_object or {}):
            return False
        return req.user not in JOB_CONTROLLERS and self.ledger.record(adopted) is not None

    def _ungate(self, req: AdmissionRequest) -> Outcome:
        """Only the queue removes draquota's gate: the pod must hold an admission record (only
        draquota writes those) and select the nodes of the flavors it was charged to."""
        pod = req.object or {}
        recorded = self.ledger.record(pod_uid(pod))
        if recorded is None and (found := self.jobs.job_of(pod)) is not None:
            job, record = found
            if not self.jobs.beyond(pod, job, record):  # a slot of its Job's record freed
                return _on_flavor_nodes(req, pod, self._node_selector_of(record), "its Job is")
        if recorded is None:
            return _deny(
                403,
                "WaitingForQuota",
                f"{req.ref}: spec.schedulingGates: {ADMISSION_GATE} is removed by draquota when "
                "the pod's ClusterQueue admits it; the pod is still waiting for quota",
            )
        return _on_flavor_nodes(req, pod, self._node_selector_of(recorded), "the pod is")

    def _node_selector_of(self, charge: Charge) -> dict[str, str]:
        """The node labels of the flavors a recorded charge names."""
        table = queue_table(self.backend.state.snapshot(), self.settings)
        return node_selector_of(table, charge)


def _on_flavor_nodes(
    req: AdmissionRequest, pod: Mapping[str, Any], wanted: Mapping[str, str], whose: str
) -> Outcome:
    mismatch = stamping.off_flavor_nodes(req, pod, wanted, whose)
    return _deny(403, "ChargeMismatch", mismatch) if mismatch else Outcome(True)


def _digest_id(text: str) -> str:
    return "uid-" + hashlib.sha256(text.encode()).hexdigest()[:32]
