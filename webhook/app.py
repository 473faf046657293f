"""The composition root: `create_app(backend, ledger, settings, placer)` builds the ASGI app.

Nothing is built at import time. Every path that cannot decide fails closed:
a body that is not an AdmissionReview gets HTTP 400, an unready cluster view or
an unexpected error inside the decision gets a denial, never `allowed: true`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from quota.claims import PodClaim, claim_references
from quota.cluster import ClusterState, meta_of
from quota.decision import Decision, PlacementLike, Placer, decide, recheck_pod
from quota.errors import DraquotaError
from quota.livepods import pod_key, pod_uid
from quota.settings import Settings
from quota.usage import Usage
from quota.workloads import WORKLOAD_KINDS, as_workload
from webhook.admission import AdmissionRequest, BadReview, Outcome, parse_review, review_response
from webhook.backend import Backend, Ledger, valid_reservation_id
from webhook.metrics import Metrics, queue_label, reason_label, resource_label
from webhook.mutation import pod_patch, workload_patch
from webhook.runner import AdmissionRunner

__all__ = ["MAX_BODY_BYTES", "PLACEMENT_KINDS", "Admission", "CachedPlacer", "create_app"]

MAX_BODY_BYTES = 3 * 1024 * 1024

log = logging.getLogger("draquota.admission")

# Everything a placement reads: published devices, classes, allocations, nodes, taints, templates.
PLACEMENT_KINDS = (
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "Node",
    "DeviceTaintRule",
)


class CachedPlacer:
    """Remembers placements until an object placement reads changes.

    A placement depends on the claims and the cluster's devices, never on quota
    usage (admitted pods hold quota, not devices), so pods stamped from the same
    templates — every replica of a Job or Deployment — share one answer per
    revision of PLACEMENT_KINDS, whatever they name their claim entries. The cache
    is dropped whole on a new revision and bounded in size.
    """

    def __init__(self, placer: Placer, state: ClusterState, size: int = 4096) -> None:
        self.placer = placer
        self.state = state
        self.size = size
        self.hits = 0
        self._revision: tuple[int, ...] = ()
        self._cache: dict[Any, PlacementLike] = {}

    def __call__(
        self, claims: Sequence[PodClaim], node_labels: Mapping[str, str] | None
    ) -> PlacementLike:
        revision = self.state.revision(*PLACEMENT_KINDS)
        # Keyed by what the claims are (their template or claim), not by the pod's entry
        # names: pods cannot vary a key (and evict others) without new cluster objects.
        key = (
            tuple(
                (c.namespace, c.template, c.claim) if c.template or c.claim else (c.entry,)
                for c in claims
            ),
            tuple(sorted(node_labels.items())) if node_labels is not None else None,
        )
        cache = self._cache
        if revision != self._revision:
            cache = self._cache = {}
            self._revision = revision
        found = cache.get(key)
        if found is not None:
            self.hits += 1
            return found
        placement = self.placer(claims, node_labels)
        if len(cache) >= self.size:
            cache.clear()
        cache[key] = placement
        return placement


def _labels_and_annotations(obj: Mapping[str, Any] | None) -> tuple[Any, Any]:
    metadata = (obj or {}).get("metadata")
    if not isinstance(metadata, Mapping):
        return None, None
    labels = metadata.get("labels")
    annotations = metadata.get("annotations")
    return (
        labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None,
        annotations.get(CHARGE_ANNOTATION) if isinstance(annotations, Mapping) else None,
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


def _resources(pod: Mapping[str, Any] | None) -> list[Any]:
    spec = (pod or {}).get("spec")
    if not isinstance(spec, Mapping):
        return []
    return [
        [c.get("resources") for c in spec.get(group) or () if isinstance(c, Mapping)]
        for group in ("containers", "initContainers")
    ] + [spec.get("overhead")]


def _deny(code: int, reason: str, message: str, warnings: tuple[str, ...] = ()) -> Outcome:
    return Outcome(False, code=code, reason=reason, message=message, warnings=warnings)


def _denial(decision: Decision) -> Outcome:
    code = decision.code if decision.code >= 400 else 403
    return _deny(code, decision.reason, decision.message, decision.warnings)


def _allowed(decision: Decision) -> Outcome:
    return Outcome(True, warnings=decision.warnings)


class Admission:
    """Turns one AdmissionRequest into an Outcome; synchronous, called per request.

    Pods are recorded by their UID: the API server sets `metadata.uid` (and the final
    name of a generateName pod) before it calls the validating webhook, and no user can
    choose it. The mutating webhook only stamps; the validating webhook records.
    """

    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        settings: Settings,
        placer: Placer | None = None,
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.settings = settings
        self.placer = placer

    def review(self, req: AdmissionRequest, mutating: bool) -> tuple[Outcome, Decision | None]:
        """The answer to a request, and the decision behind it (None when none was needed)."""
        if req.operation in ("DELETE", "CONNECT"):
            return Outcome(True), None
        if req.kind == "Pod" and req.sub_resource == "resize" and not mutating:
            return self._recheck(req, req.object, self.backend.state)
        if req.sub_resource:
            return Outcome(True), None
        if req.kind == "ResourceClaim" and req.operation == "CREATE" and not mutating:
            return self._claim_created(req)
        if req.kind not in WORKLOAD_KINDS or req.object is None:
            return Outcome(True), None
        if req.kind == "Pod" and req.operation == "UPDATE":
            return self._pod_update(req, mutating)
        obj = _as_created(req.object, req.namespace) if req.operation == "CREATE" else req.object
        ready, why = self.backend.ready()
        if not ready:
            return _deny(403, "NotReady", f"draquota cannot decide now: {why}"), None
        if mutating:
            return self._mutate(req, obj)
        if req.kind != "Pod":
            decision = self._decide(obj, req, "", dry_run=True)
            return (_allowed(decision) if decision.allowed else _denial(decision)), decision
        return self._admit_pod(req, obj)

    def _mutate(self, req: AdmissionRequest, obj: dict[str, Any]) -> tuple[Outcome, Decision]:
        decision = self._decide(obj, req, "", dry_run=True)
        if not decision.allowed:
            return _denial(decision), decision
        if req.kind == "Pod":
            patch = pod_patch(req.object or {}, decision)
        elif req.kind == "Job" and req.operation == "UPDATE":
            patch = []  # a Job's pod template is immutable once created
        else:
            patch = workload_patch(req.object or {}, req.kind)
        return Outcome(True, warnings=decision.warnings, patch=tuple(patch)), decision

    def _admit_pod(self, req: AdmissionRequest, pod: dict[str, Any]) -> tuple[Outcome, Decision]:
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
        stamp = _stamp(req, pod)

        def checked(decision: Decision) -> Decision:
            mismatch = _stamp_mismatch(req, pod, stamp, decision)
            if not mismatch:
                return decision
            return dataclasses.replace(
                decision,
                allowed=False,
                code=403,
                reason="ChargeMismatch",
                message=mismatch,
                charge=None,
            )

        decision = self._decide(pod, req, uid, req.dry_run, key, check=checked)
        return (_allowed(decision) if decision.allowed else _denial(decision)), decision

    def _decide(
        self,
        obj: Mapping[str, Any],
        req: AdmissionRequest,
        uid: str,
        dry_run: bool,
        key: str = "",
        check: Callable[[Decision], Decision] = lambda d: d,
    ) -> Decision:
        def evaluate(usage: Usage) -> Decision:
            decision = decide(
                obj, self.backend.state, usage, self.settings, self.placer, req.operation
            )
            return check(decision) if decision.allowed else decision

        uid = uid or _digest_id(req.uid)
        decision = self.ledger.admit(uid, evaluate, dry_run, key)
        if not decision.allowed and self._fetch_missing(obj):
            decision = self.ledger.admit(uid, evaluate, dry_run, key)
        return decision

    def _fetch_missing(self, obj: Mapping[str, Any]) -> bool:
        """One GET per claim or template the cache does not hold; True if any was found."""
        try:
            workload = as_workload(obj)
        except DraquotaError:
            return False
        found = False
        for kind, namespace, name in sorted(claim_references(workload.pod)):
            if self.backend.state.get(kind, namespace, name) is not None:
                continue
            fetched = self.backend.fetch(kind, namespace, name)
            if fetched is not None:
                self.backend.state.upsert(fetched)
                found = True
        return found

    def _pod_update(self, req: AdmissionRequest, mutating: bool) -> tuple[Outcome, None]:
        """A pod keeps its charge: its queue label and charge record cannot change, and new
        resources are checked like a resize."""
        new_label, new_charge = _labels_and_annotations(req.object)
        old_label, old_charge = _labels_and_annotations(req.old_object)
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
        if not mutating and _resources(req.object) != _resources(req.old_object):
            outcome, _ = self._recheck(req, req.object, self.backend.state)
            return outcome, None
        return Outcome(True), None

    def _recheck(
        self, req: AdmissionRequest, pod: Mapping[str, Any] | None, state: ClusterState
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

        def evaluate(usage: Usage) -> Decision:
            return recheck_pod(pod, state, usage, self.settings, recorded)

        decision = self.ledger.admit(uid, evaluate, req.dry_run, pod_key(pod), existing=True)
        return (_allowed(decision) if decision.allowed else _denial(decision)), decision

    def _claim_created(self, req: AdmissionRequest) -> tuple[Outcome, Decision | None]:
        """A ResourceClaim created under a name live admitted pods reference: each such pod is
        re-checked as if it held the new claim."""
        claim = req.object
        metadata = claim.get("metadata") if isinstance(claim, Mapping) else None
        name = (metadata or {}).get("name") or req.name
        namespace = (metadata or {}).get("namespace") or req.namespace or "default"
        if not isinstance(claim, Mapping) or not isinstance(name, str) or not name:
            return Outcome(True), None
        users = self.ledger.users("ResourceClaim", namespace, name)
        if not users:
            return Outcome(True), None
        created = {**claim, "kind": "ResourceClaim"}
        created["metadata"] = {**(metadata or {}), "name": name, "namespace": namespace}
        state = _WithObject(self.backend.state, created)
        decision: Decision | None = None
        for pod in users:
            outcome, decision = self._recheck(req, pod, state)
            if not outcome.allowed:
                return outcome, decision
        return Outcome(True), decision


class _WithObject(ClusterState):
    """A read-only view of a cluster state with one object added or replaced."""

    def __init__(self, base: ClusterState, obj: Mapping[str, Any]) -> None:
        super().__init__()
        self._base = base
        self._extra = meta_of(obj)
        self._obj = obj

    def get(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        if (kind, namespace, name) == self._extra:
            return self._obj
        return self._base.get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return self._base.list(kind, namespace)

    def revision(self, *kinds: str) -> tuple[int, ...]:
        return self._base.revision(*kinds)


@dataclass(frozen=True)
class _Stamp:
    """A charge annotation found on a pod under validation (charge None: unparseable)."""

    charge: Charge | None


def _stamp(req: AdmissionRequest, obj: Mapping[str, Any]) -> _Stamp | None:
    _, annotation = _labels_and_annotations(obj)
    if annotation is None:
        return None
    try:
        return _Stamp(Charge.from_annotation(annotation, req.ref))
    except (DraquotaError, TypeError, RecursionError):
        return _Stamp(None)


def _stamp_mismatch(
    req: AdmissionRequest, pod: Mapping[str, Any], stamp: _Stamp | None, decision: Decision
) -> str:
    """Why a pod does not carry what /mutate stamps for this decision ("" when it does)."""
    if decision.charge is None:
        return ""
    if stamp is None:
        return (
            f"{req.ref}: metadata.annotations[{CHARGE_ANNOTATION}]: missing: the pod did not pass "
            "draquota's mutating webhook; submit it again"
        )
    recorded = stamp.charge
    same = recorded is not None and recorded == dataclasses.replace(
        decision.charge, reservation=recorded.reservation
    )
    if not same:
        return (
            f"{req.ref}: metadata.annotations[{CHARGE_ANNOTATION}]: does not match the charge "
            "draquota computes now (the quota changed during admission, or the annotation was "
            "edited): submit the pod again"
        )
    spec = pod.get("spec")
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    selector = selector if isinstance(selector, Mapping) else {}
    missing = {k: v for k, v in decision.node_selector.items() if selector.get(k) != v}
    if missing:
        labels = ",".join(f"{k}={v}" for k, v in sorted(missing.items()))
        return (
            f"{req.ref}: spec.nodeSelector: must select the nodes of the flavor it is charged to "
            f"({labels}); submit it again"
        )
    return ""


def _digest_id(text: str) -> str:
    return "uid-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _client_cert(request: Request) -> bool:
    tls = request.scope.get("extensions", {}).get("tls") or {}
    return tls.get("client_cert_name") is not None


def _json(status: int, document: Any) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


async def _read_body(request: Request, limit: int) -> bytes | Response:
    declared = request.headers.get("content-length")
    too_large = _json(413, {"error": f"request body larger than {limit} bytes", "code": 413})
    if declared is not None:
        try:
            if int(declared) > limit:
                return too_large
        except ValueError:
            return _json(400, {"error": "invalid Content-Length header", "code": 400})
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return too_large
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    backend: Backend,
    ledger: Ledger,
    settings: Settings,
    placer: Placer | None = None,
    *,
    metrics: Metrics | None = None,
    certs_ready: Callable[[], bool] = lambda: True,
    max_body_bytes: int = MAX_BODY_BYTES,
    require_client_cert: bool = False,
) -> FastAPI:
    """The webhook app over this cluster view and ledger (SPEC §6).

    With `require_client_cert`, /mutate and /validate answer only TLS peers that
    presented a verified client certificate (the API server's, see
    docs/operations.md): nobody else can make draquota hold quota.
    """
    metrics = metrics or Metrics()
    metrics.watch(backend, ledger)
    admission = Admission(backend, ledger, settings, placer)
    # Every decision runs off the event loop, at most admission_workers at once, and is
    # answered by its deadline: the loop stays free for handshakes, probes and scrapes.
    runner = AdmissionRunner(settings.admission_workers, settings.admission_deadline_seconds)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        backend.start()
        try:
            yield
        finally:
            backend.stop()
            runner.shutdown()

    app = FastAPI(
        title="draquota", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None
    )
    app.state.admission = admission
    app.state.metrics = metrics
    app.state.runner = runner

    async def handle(request: Request, endpoint: str) -> Response:
        started = time.perf_counter()
        deadline_start = runner.clock()
        if require_client_cert and not _client_cert(request):
            metrics.bad_requests.labels(endpoint, "403").inc()
            return _json(
                403,
                {
                    "error": "a client certificate signed by the configured CA is required",
                    "code": 403,
                },
            )
        body = await _read_body(request, max_body_bytes)
        if isinstance(body, Response):
            metrics.bad_requests.labels(endpoint, str(body.status_code)).inc()
            return body
        try:
            req = parse_review(body)
        except Exception as exc:  # BadReview, or anything a hostile body provokes: never a 500
            if not isinstance(exc, BadReview):
                log.warning("unparseable body", extra={"endpoint": endpoint, "error": repr(exc)})
            metrics.bad_requests.labels(endpoint, "400").inc()
            return _json(
                400,
                {"error": f"not an admission.k8s.io/v1 AdmissionReview: {exc}", "code": 400},
            )
        mutating = endpoint == "mutate"
        decision: Decision | None = None
        try:
            answered, result = await runner.run(deadline_start, admission.review, req, mutating)
            if answered and result is not None:
                outcome, decision = result
            else:
                log.warning(
                    "admission deadline passed", extra={"uid": req.uid, "endpoint": endpoint}
                )
                outcome = _deny(
                    403,
                    "DeadlineExceeded",
                    f"{req.ref}: draquota could not decide within its deadline of "
                    f"{runner.deadline:g}s ({runner.busy()} of {runner.workers} workers busy): "
                    "submit again",
                )
        except Exception as exc:
            log.exception("admission failed", extra={"uid": req.uid, "endpoint": endpoint})
            outcome = _deny(403, "InternalError", f"{req.ref}: draquota failed to decide: {exc}")
        document = review_response(req.uid, outcome, mutating)
        try:
            _record(
                metrics,
                endpoint,
                req,
                outcome,
                decision,
                time.perf_counter() - started,
                lambda namespace, name: (
                    backend.state.get("LocalQueue", namespace, name) is not None
                ),
            )
        except Exception:
            log.exception("recording the admission failed", extra={"uid": req.uid})
        return Response(orjson.dumps(document), media_type="application/json")

    async def mutate(request: Request) -> Response:
        return await handle(request, "mutate")

    async def validate(request: Request) -> Response:
        return await handle(request, "validate")

    # Plain Starlette routes: the body is ours to read and validate, no dependency injection.
    app.add_route("/mutate", mutate, methods=["POST"])
    app.add_route("/validate", validate, methods=["POST"])

    @app.get("/healthz")
    async def healthz() -> Response:
        # Alive unless the admission path has been wedged for long: then a restart is the fix.
        stuck, why = runner.stuck()
        if stuck:
            return _json(503, {"status": "stuck", "reason": why})
        return _json(200, {"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        ready, why = backend.ready()
        if ready and not certs_ready():
            ready, why = False, "serving certificate not loaded"
        if ready:
            wedged, reason = runner.wedged()
            ready, why = (False, reason) if wedged else (ready, why)
        return _json(200 if ready else 503, {"ready": ready, "reason": why})

    @app.get("/metrics")
    async def prometheus() -> Response:
        # Rendering reads usage under the ledger's lock: never on the event loop.
        return Response(await runner.side(metrics.render), media_type=metrics.content_type)

    return app


def _record(
    metrics: Metrics,
    endpoint: str,
    req: AdmissionRequest,
    outcome: Outcome,
    decision: Decision | None,
    elapsed: float,
    queue_exists: Callable[[str, str], bool] = lambda _namespace, _name: False,
) -> None:
    queue = ""
    if decision is not None and decision.charge is not None:
        queue = decision.charge.local_queue
    elif decision is not None and decision.queue_name:
        queue = f"{req.namespace or 'default'}/{decision.queue_name}"
    reason = outcome.reason or (decision.reason if decision else "") or "Allowed"
    metrics.observe_latency(endpoint, elapsed)
    metrics.decisions.labels(
        endpoint,
        queue_label(queue, queue_exists),
        resource_label(req.resource),
        reason_label(reason),
        str(outcome.allowed),
    ).inc()
    level = logging.DEBUG if outcome.allowed else logging.INFO
    if log.isEnabledFor(level):
        log.log(
            level,
            "admission",
            extra={
                "uid": req.uid,
                "endpoint": endpoint,
                "operation": req.operation,
                "kind": req.kind,
                "object": req.ref,
                "dry_run": req.dry_run,
                "allowed": outcome.allowed,
                "code": outcome.code,
                "reason": reason,
                "denial": outcome.message,
                "patch_ops": len(outcome.patch),
                "duration_ms": round(elapsed * 1000, 3),
            },
        )
