"""The composition root: `create_app(backend, ledger, settings, placer)` builds the ASGI app.

Nothing is built at import time. Every path that cannot decide fails closed:
a body that is not an AdmissionReview gets HTTP 400, an unready cluster view or
an unexpected error inside the decision gets a denial, never `allowed: true`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

from quota.flavorfilter import Placer
from quota.objectkeys import object_key_of
from quota.settings import Settings
from quota.verdict import Decision
from webhook.admission.admit import Admission
from webhook.admission.placementcache import CachedPlacer
from webhook.edge.asgi import Answer, BadBody, Receive, Scope, WebhookApp, json_answer, read_body
from webhook.edge.forwarding import FORWARDED_HEADER, Forwarded, Forwarder, denial
from webhook.edge.metrics import Metrics, queue_label, reason_label, resource_label
from webhook.edge.review import AdmissionRequest, BadReview, Outcome, parse_review, review_response
from webhook.edge.runner import AdmissionRunner, QueueFull
from webhook.kube.metricsauth import Verdict
from webhook.ledger import Ledger
from webhook.ledger.elected import HeldElsewhere
from webhook.queueing.preempting import Evictor
from webhook.queueing.reclaim import Reclaim
from webhook.store.backend import Backend

__all__ = ["MAX_BODY_BYTES", "QUICK_BODY_BYTES", "create_app"]

MAX_BODY_BYTES = 3 * 1024 * 1024
# Bodies up to this size may be decided on the event loop (see `AdmissionRunner`): an
# ordinary pod is a few KiB, and the work of a decision grows with its containers and claims.
QUICK_BODY_BYTES = 64 * 1024
# What a namespace refused for having too many admissions waiting is told to wait before it
# submits again; the API server passes it on as Retry-After, which client-go obeys.
RETRY_AFTER_SECONDS = 1

log = logging.getLogger("draquota.admission")


def _deny(code: int, reason: str, message: str) -> Outcome:
    return Outcome(False, code=code, reason=reason, message=message)


def _client_cert(scope: Scope) -> bool:
    tls = scope.get("extensions", {}).get("tls") or {}
    return tls.get("client_cert_name") is not None


_FORWARDED = FORWARDED_HEADER.lower().encode("latin-1")


def _forwarded(scope: Scope) -> bool:
    return any(name == _FORWARDED for name, _ in scope["headers"])


def _json(status: int, document: Any) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


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
    metrics_auth: Callable[[str | None], Verdict] | None = None,
    evictor: Evictor | None = None,
    forwarder: Forwarder | None = None,
) -> WebhookApp:
    """The webhook app over this cluster view and ledger (SPEC §6).

    With `require_client_cert`, /mutate and /validate answer only TLS peers that
    presented a verified client certificate (the API server's, see
    docs/operations.md): nobody else can make draquota hold quota.

    With `metrics_auth`, /metrics answers only when it says so for the request's
    Authorization header (`webhook.kube.metricsauth`); without, it is open (embedded mode).

    With `evictor` (the queue controller's, in a live cluster), a pod of a Reject-mode
    ClusterQueue may reclaim the quota its cohort borrowed (`webhook.queueing.reclaim`).

    With `forwarder` (several replicas on a live cluster), only the elected replica holds
    quota: the others forward it pod creates, and whatever they find would hold quota
    (`HeldElsewhere`); they answer the rest themselves (`webhook.edge.forwarding`). The header
    that marks a forwarded request grants nothing a direct call does not have: at the
    elected replica it is decided as any other; anywhere else what would hold quota is
    refused, never forwarded again (so two replicas that disagree about the holder cannot
    loop).
    """
    metrics = metrics or Metrics()
    metrics.watch(backend, ledger, settings)
    reclaim = Reclaim(backend, ledger, evictor, metrics) if evictor is not None else None
    admission = Admission(backend, ledger, settings, placer, reclaim)
    # Every decision runs off the event loop, at most admission_workers at once, and is
    # answered by its deadline: the loop stays free for handshakes, probes and scrapes.
    runner = AdmissionRunner(settings.admission_workers, settings.admission_deadline_seconds)
    # A decision is tried on the event loop when its placement is cached, on a live
    # cluster too: every step that could wait (an object fetched from the API server, a
    # placement search, a QuotaLedger write, the ledger's view in use or far behind) raises
    # Offload before it starts, and the decision runs on a worker. Deciding inline on a
    # live cluster raised one replica's create throughput (bench/throughput.py).
    cached = placer if isinstance(placer, CachedPlacer) else None
    may_inline = placer is None or cached is not None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        backend.start()
        try:
            yield
        finally:
            backend.stop()
            runner.shutdown()
            if forwarder is not None:
                await forwarder.aclose()

    app = WebhookApp(
        title="draquota", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None
    )
    app.state.admission = admission
    app.state.metrics = metrics
    app.state.runner = runner

    async def forward(req: AdmissionRequest, body: bytes) -> Forwarded:
        assert forwarder is not None  # HeldElsewhere is raised only by an elected ledger
        sent = await forwarder.forward(req, body)
        metrics.forwarded(sent.outcome)
        return sent

    async def handle(scope: Scope, receive: Receive, endpoint: str) -> Answer:
        started = time.perf_counter()
        deadline_start = runner.clock()
        if require_client_cert and not _client_cert(scope):
            metrics.bad_requests.labels(endpoint, "403").inc()
            message = "a client certificate signed by the configured CA is required"
            return json_answer(403, {"error": message, "code": 403})
        try:
            body = await read_body(scope, receive, max_body_bytes)
        except BadBody as exc:
            metrics.bad_requests.labels(endpoint, str(exc.answer[0])).inc()
            return exc.answer
        try:
            req = parse_review(body)
        except Exception as exc:  # BadReview, or anything a hostile body provokes: never a 500
            if not isinstance(exc, BadReview):
                log.warning("unparseable body", extra={"endpoint": endpoint, "error": repr(exc)})
            metrics.bad_requests.labels(endpoint, "400").inc()
            message = f"not an admission.k8s.io/v1 AdmissionReview: {exc}"
            return json_answer(400, {"error": message, "code": 400})
        mutating = endpoint == "mutate"
        forwarded, tried = _forwarded(scope), None
        if forwarder is not None and not mutating and forwarder.sends(req, forwarded):
            # A pod create goes straight to the elected replica. Only if that one cannot be
            # reached is it decided here, where what would hold quota is refused.
            tried = await forward(req, body)
            if tried.outcome == "forwarded":
                return tried.answer
        decision: Decision | None = None
        try:
            quick = (
                may_inline
                and len(body) <= QUICK_BODY_BYTES
                and (cached is None or cached.knows(req.object))
            )
            answered, result = await runner.run(
                deadline_start, admission.review, req, mutating, quick=quick, flow=req.namespace
            )
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
        except HeldElsewhere:  # it would hold quota, and another replica is elected
            if forwarded:  # the holder moved on the way: never forwarded twice, no loops
                metrics.forwarded("moved")
                return denial(req, "the replica that admits changed while this was forwarded")
            return (tried or await forward(req, body)).answer
        except QueueFull as full:
            log.info("admission refused: queue full", extra={"uid": req.uid, "flow": full.flow})
            outcome = _too_many(req, full)
        except Exception as exc:
            log.exception("admission failed", extra={"uid": req.uid, "endpoint": endpoint})
            outcome = _deny(403, "InternalError", f"{req.ref}: draquota failed to decide: {exc}")
        document = review_response(req.uid, outcome, mutating)
        if outcome.code == 429:
            document["response"]["status"]["details"] = {"retryAfterSeconds": RETRY_AFTER_SECONDS}
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
        return json_answer(200, document)

    async def mutate(scope: Scope, receive: Receive) -> Answer:
        return await handle(scope, receive, "mutate")

    async def validate(scope: Scope, receive: Receive) -> Answer:
        return await handle(scope, receive, "validate")

    # Answered at the ASGI level, under none of FastAPI's layers (see webhook/edge/asgi.py).
    app.endpoints.update({"/mutate": mutate, "/validate": validate})

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
        if ready and forwarder is not None:
            ready, why = forwarder.ready()
        if ready:
            wedged, reason = runner.wedged()
            ready, why = (False, reason) if wedged else (ready, why)
        return _json(200 if ready else 503, {"ready": ready, "reason": why})

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        if metrics_auth is not None:
            # A cache miss asks the API server (blocking): off the loop, as the render.
            answer = await runner.side(metrics_auth, request.headers.get("authorization"))
            if not answer.allowed:
                return _refused(answer)
        # Rendering reads usage under the ledger's lock: never on the event loop.
        return Response(await runner.side(metrics.render), media_type=metrics.content_type)

    return app


def _too_many(req: AdmissionRequest, full: QueueFull) -> Outcome:
    # As the API server answers a request its Priority and Fairness rejects: 429, retry later.
    where = f"namespace {full.flow}" if full.flow else "cluster-scoped objects"
    return _deny(
        429,
        "TooManyRequests",
        f"{req.ref}: too many admissions of {where} waiting ({full.waiting} waiting, "
        f"{full.held} being decided): submit again in {RETRY_AFTER_SECONDS}s",
    )


def _refused(answer: Verdict) -> Response:
    response = _json(answer.code, {"error": answer.reason, "code": answer.code})
    if answer.code == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="draquota"'
    return response


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
    elif decision is not None and decision.local_queue_name:
        queue = object_key_of(req.namespace, decision.local_queue_name)
    reason = outcome.reason or (decision.reason if decision else "") or "Allowed"
    metrics.observe_latency(endpoint, elapsed)
    metrics.decided(
        endpoint,
        queue_label(queue, queue_exists),
        resource_label(req.resource),
        reason_label(reason),
        str(outcome.allowed),
    )
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
