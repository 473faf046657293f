"""Contract tests of the webhook app (SPEC §6) over httpx's ASGI transport."""

from __future__ import annotations

import base64
import io
import itertools
import logging
from typing import Any

import jsonpatch
import orjson
import pytest

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge, FlavorResource
from quota.decision import decide
from quota.placement import Placement
from quota.settings import Settings
from quota.usage import Usage
from tests.webhook.builders import (
    GPU_CLASS,
    NAMESPACE,
    AppClient,
    FakeBackend,
    cluster_state,
    pod,
    review,
)
from webhook.admission.mutation import pod_patch
from webhook.edge.app import MAX_BODY_BYTES, create_app
from webhook.edge.logs import JsonFormatter
from webhook.edge.runner import offload_if_inline
from webhook.ledger.memory import MemoryLedger

_uids = itertools.count(1)


class Harness:
    def __init__(self, gpus: int = 2, placer: Any = None, **backend: Any) -> None:
        self.backend = FakeBackend(cluster_state(gpus), **backend)
        self.ledger = MemoryLedger(self.backend.state, Settings())
        self.certs = True
        self.app = create_app(
            self.backend, self.ledger, Settings(), placer, certs_ready=lambda: self.certs
        )
        self.client = AppClient(self.app)

    def call(self, endpoint: str, document: dict[str, Any]) -> dict[str, Any]:
        answer = self.client.post(f"/{endpoint}", content=orjson.dumps(document))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["apiVersion"] == "admission.k8s.io/v1"
        assert body["kind"] == "AdmissionReview"
        assert body["response"]["uid"] == document["request"]["uid"]
        if endpoint == "validate":
            assert "patch" not in body["response"] and "patchType" not in body["response"]
        assert ("patch" in body["response"]) == ("patchType" in body["response"])
        if not body["response"]["allowed"]:
            assert body["response"]["status"]["code"] >= 400
            assert body["response"]["status"]["message"]
        return body["response"]

    def admit(self, obj: dict[str, Any], dry_run: bool = False) -> tuple[dict, dict, dict]:
        """Mutate, apply the patch, validate: what the API server does for a create."""
        mutated = self.call("mutate", review(obj, dry_run=dry_run))
        if "patch" in mutated:
            obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
        obj = with_uid(obj)  # the API server names the pod before it validates
        return mutated, self.call("validate", review(obj, dry_run=dry_run)), obj


def with_uid(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server validates a create: with a new uid of its own."""
    return {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{next(_uids)}"}}


def stamped_pod(state: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as /mutate leaves it, with a uid: what /validate sees from the API server."""
    decision = decide(obj, state, Usage(), Settings())
    assert decision.charge is not None
    return with_uid(jsonpatch.apply_patch(obj, pod_patch(obj, decision)))


def _gpu_pod(name: str, gpus: int = 1, **kwargs: Any) -> dict[str, Any]:
    return pod(name, templates=("one-gpu",) * gpus, **kwargs)


def test_admitted_pod_is_labelled_stamped_and_reserved() -> None:
    h = Harness()
    mutated, validated, final = h.admit(_gpu_pod("train-0", gpus=2))
    assert mutated["allowed"] and validated["allowed"]
    assert final["metadata"]["labels"][QUEUE_LABEL] == "default"
    charge = Charge.from_annotation(final["metadata"]["annotations"][CHARGE_ANNOTATION], "p")
    assert charge.per_pod == {"gpu": 2}
    assert set(h.ledger.reservations()) == {final["metadata"]["uid"]}


def test_copies_of_an_admitted_pod_do_not_share_its_reservation() -> None:
    h = Harness(gpus=2)
    _, _, admitted = h.admit(_gpu_pod("train-0"))
    answers = []
    for i in range(3):  # `kubectl get pod -o yaml`, renamed, created again
        copy = {**admitted, "metadata": {**admitted["metadata"], "name": f"copy-{i}"}}
        answers.append(h.admit(copy)[1]["allowed"])
    assert answers == [True, False, False]
    assert h.ledger.usage().of("team-a") == {FlavorResource("a100", "gpu"): 2}


def test_quota_is_enforced_across_admissions_with_the_quota_message() -> None:
    h = Harness(gpus=2)
    answers = [h.admit(_gpu_pod(f"p-{i}"))[1] for i in range(3)]
    assert [a["allowed"] for a in answers] == [True, True, False]
    status = answers[2]["status"]
    assert status["code"] == 403 and status["reason"] == "QuotaExceeded"
    assert 'exceeds quota of ClusterQueue "team-a"' in status["message"]
    assert "1 more needed" in status["message"]


def test_dry_run_gets_the_same_decision_and_reserves_nothing() -> None:
    h = Harness(gpus=1)
    _, dry, _ = h.admit(_gpu_pod("p-0"), dry_run=True)
    assert dry["allowed"] and h.ledger.reservations() == {}
    _, real, _ = h.admit(_gpu_pod("p-0"))
    assert real["allowed"]
    _, dry_over, _ = h.admit(_gpu_pod("p-1"), dry_run=True)
    assert not dry_over["allowed"] and dry_over["status"]["reason"] == "QuotaExceeded"
    assert len(h.ledger.reservations()) == 1


def test_mutating_endpoint_does_not_reserve() -> None:
    h = Harness(gpus=1)
    for i in range(3):
        assert h.call("mutate", review(_gpu_pod(f"p-{i}")))["allowed"]
    assert h.ledger.reservations() == {}


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[]", orjson.dumps({"kind": "AdmissionReview"}), orjson.dumps(pod())],
    ids=["empty", "not-json", "array", "no-api-version", "a-bare-pod"],
)
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_body_that_is_not_an_admission_review_gets_http_400_json(
    endpoint: str, body: bytes
) -> None:
    answer = Harness().client.post(f"/{endpoint}", content=body)
    assert answer.status_code == 400
    assert "AdmissionReview" in answer.json()["error"]


def test_body_over_3_mib_is_refused() -> None:
    big = review(pod(annotations={"filler": "x" * MAX_BODY_BYTES}))
    answer = Harness().client.post("/validate", content=orjson.dumps(big))
    assert answer.status_code == 413
    assert "larger than" in answer.json()["error"]


def test_not_ready_backend_denies_with_the_reason() -> None:
    h = Harness()
    h.backend.readiness = (False, "ResourceSlice cache not synced")
    response = h.call("validate", review(_gpu_pod("p")))
    assert not response["allowed"]
    assert "ResourceSlice cache not synced" in response["status"]["message"]
    assert h.client.get("/readyz").status_code == 503


def test_unexpected_error_in_decision_is_a_denial_not_a_500() -> None:
    def broken_placer(*_: Any) -> Any:
        raise RuntimeError("boom")

    response = Harness(placer=broken_placer).call("validate", review(_gpu_pod("p")))
    assert not response["allowed"]
    assert response["status"]["reason"] == "InternalError"
    assert "boom" in response["status"]["message"]


def _template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]
                }
            }
        },
    }


def test_claim_template_missing_from_cache_is_fetched_once_then_decided_again() -> None:
    h = Harness(fetchable=[_template("late")])
    mutated, validated, _ = h.admit(pod("p", templates=("late",)))
    assert mutated["allowed"] and validated["allowed"]
    assert h.backend.fetched == [("ResourceClaimTemplate", NAMESPACE, "late")]


def test_claim_template_missing_everywhere_is_denied_naming_it() -> None:
    h = Harness()
    response = h.call("validate", review(pod("p", templates=("ghost",))))
    assert not response["allowed"]
    assert (response["status"]["code"], response["status"]["reason"]) == (403, "ClaimNotFound")
    assert "ResourceClaimTemplate team-a/ghost not found" in response["status"]["message"]
    assert h.backend.fetched == [("ResourceClaimTemplate", NAMESPACE, "ghost")]


@pytest.mark.parametrize(
    "document",
    [
        review(None, operation="DELETE", old=pod()),
        review(pod(), operation="CONNECT"),
        review(pod(), operation="UPDATE", old=pod(), sub_resource="status"),
        review(
            {"kind": "ConfigMap", "metadata": {"name": "c"}},
            kind="ConfigMap",
            resource="configmaps",
        ),
    ],
    ids=["delete", "connect", "status-subresource", "unmanaged-kind"],
)
def test_requests_without_quota_meaning_are_allowed_even_when_not_ready(
    document: dict[str, Any],
) -> None:
    h = Harness()
    h.backend.readiness = (False, "cache not synced")
    assert h.call("validate", document)["allowed"]


def test_pod_update_passes_while_not_ready_so_finalizers_can_be_removed() -> None:
    h = Harness()
    _, _, admitted = h.admit(_gpu_pod("p"))
    h.backend.readiness = (False, "Pod cache stale for 45s")
    metadata = {**admitted["metadata"], "finalizers": []}
    document = review({**admitted, "metadata": metadata}, operation="UPDATE", old=admitted)
    assert h.call("validate", document)["allowed"]


def test_pod_update_keeping_label_and_charge_is_allowed() -> None:
    h = Harness(gpus=1)
    _, _, admitted = h.admit(_gpu_pod("p"))
    h.admit(_gpu_pod("q"))  # quota now full; updates of existing pods still pass
    changed = {
        **admitted,
        "metadata": {
            **admitted["metadata"],
            "annotations": {**admitted["metadata"]["annotations"], "note": "x"},
        },
    }
    assert h.call("validate", review(changed, operation="UPDATE", old=admitted))["allowed"]


@pytest.mark.parametrize("field", ["annotation", "label"])
def test_pod_update_forging_charge_or_queue_is_denied(field: str) -> None:
    h = Harness()
    _, _, admitted = h.admit(_gpu_pod("p"))
    metadata = dict(admitted["metadata"])
    if field == "annotation":
        metadata["annotations"] = {
            CHARGE_ANNOTATION: Charge("team-a", "team-a/default").to_annotation()
        }
    else:
        metadata["labels"] = {QUEUE_LABEL: "user-queue"}
    forged = {**admitted, "metadata": metadata}
    for endpoint in ("mutate", "validate"):
        response = h.call(endpoint, review(forged, operation="UPDATE", old=admitted))
        assert not response["allowed"] and response["status"]["code"] == 403


def test_validate_denies_when_stamped_charge_no_longer_matches() -> None:
    h = Harness()
    stale = Charge("team-a", "team-a/default", {"gpu": "a100"}, {"gpu": 5}, reservation="old")
    response = h.call(
        "validate", review(_gpu_pod("p", annotations={CHARGE_ANNOTATION: stale.to_annotation()}))
    )
    assert not response["allowed"] and response["status"]["reason"] == "ChargeMismatch"
    assert h.ledger.reservations() == {}


def test_object_without_namespace_is_decided_in_the_request_namespace() -> None:
    h = Harness(gpus=1)
    obj = _gpu_pod("p", gpus=2)
    del obj["metadata"]["namespace"]
    document = review(obj)
    document["request"]["namespace"] = NAMESPACE
    response = h.call("validate", document)
    assert not response["allowed"] and response["status"]["reason"] == "QuotaExceeded"


def test_workload_gets_no_patch_and_is_checked_against_capacity() -> None:
    h = Harness(gpus=2)

    def job(parallelism: int) -> dict[str, Any]:
        template = _gpu_pod("ignored")
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"job-{parallelism}", "namespace": NAMESPACE},
            "spec": {
                "parallelism": parallelism,
                "template": {"metadata": {}, "spec": template["spec"]},
            },
        }

    fits = h.call("mutate", review(job(2), kind="Job", resource="jobs", group="batch"))
    assert fits["allowed"] and "patch" not in fits
    too_wide = h.call("validate", review(job(3), kind="Job", resource="jobs", group="batch"))
    assert not too_wide["allowed"] and too_wide["status"]["reason"] == "QuotaExceeded"


def test_invalid_object_is_a_400_denial() -> None:
    bad = pod()
    bad["spec"]["resourceClaims"] = [{"name": "c0"}]
    response = Harness().call("validate", review(bad))
    assert not response["allowed"] and response["status"]["code"] == 400


def test_health_readiness_and_metrics() -> None:
    h = Harness()
    assert h.client.get("/healthz").json() == {"status": "ok"}
    assert h.client.get("/readyz").json() == {"ready": True, "reason": ""}
    h.certs = False
    assert h.client.get("/readyz").status_code == 503
    h.admit(_gpu_pod("p"))
    h.call("validate", review(_gpu_pod("q", gpus=3)))
    text = h.client.get("/metrics").text
    assert 'draquota_admission_duration_seconds_bucket{endpoint="validate",le="0.0001"}' in text
    assert (
        'draquota_admission_decisions_total{allowed="False",endpoint="validate",'
        'queue="team-a/default",reason="QuotaExceeded",resource="pods"} 1.0'
    ) in text
    assert 'draquota_queue_usage{cluster_queue="team-a",flavor="a100",resource="gpu"} 1.0' in text
    assert "draquota_cache_synced 1.0" in text


def test_metrics_registries_are_per_app() -> None:
    first, second = Harness(), Harness()
    first.admit(_gpu_pod("p"))
    assert "draquota_admission_decisions_total{" not in second.client.get("/metrics").text


def test_denials_are_logged_as_json_carrying_the_admission_uid() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("draquota.admission")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        h = Harness(gpus=1)
        document = review(_gpu_pod("p", gpus=2), uid="uid-logged")
        assert not h.call("validate", document)["allowed"]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    entries = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    denial = next(e for e in entries if e.get("uid") == "uid-logged")
    assert denial["level"] == "info" and denial["reason"] == "QuotaExceeded"
    assert denial["object"] == "Pod team-a/p" and denial["allowed"] is False


def test_placement_denial_names_the_reason() -> None:
    def nowhere(claims: Any, labels: Any) -> Any:
        return Placement(ok=False, reason="no node has 2 free gpu.example.com devices")

    response = Harness(placer=nowhere).call("validate", review(_gpu_pod("p")))
    assert not response["allowed"] and response["status"]["reason"] == "Unplaceable"
    assert "no node has 2 free gpu.example.com devices" in response["status"]["message"]


class NetworkLedger(MemoryLedger):
    """A ledger whose writes go over the network, guarded as ClusterLedger guards them."""

    blocking_io = True

    def admit(self, uid: str, evaluate: Any, dry_run: bool, *args: Any, **kwargs: Any) -> Any:
        if not dry_run:
            offload_if_inline("a QuotaLedger write")
        return super().admit(uid, evaluate, dry_run, *args, **kwargs)


def test_a_ledger_writing_over_the_network_decides_off_the_event_loop_with_the_same_answers() -> (
    None
):
    backend = FakeBackend(cluster_state(1))
    app = create_app(backend, NetworkLedger(backend.state, Settings()), Settings())
    client = AppClient(app)
    answers = []
    for i in range(2):
        stamped = stamped_pod(backend.state, _gpu_pod(f"p-{i}"))
        answers.append(client.post("/validate", content=orjson.dumps(review(stamped))).json())
    assert [a["response"]["allowed"] for a in answers] == [True, False]
    # tried on the event loop, as on any live cluster, and moved to a worker by the write
    assert (app.state.runner.inline, app.state.runner.offloaded) == (0, 2)


class FailingLedger(MemoryLedger):
    def admit(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("API server unreachable")


def test_ledger_failure_fails_closed() -> None:
    backend = FakeBackend(cluster_state(1))
    app = create_app(backend, FailingLedger(backend.state, Settings()), Settings())
    answer = AppClient(app).post("/validate", content=orjson.dumps(review(_gpu_pod("p"))))
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert (
        response["allowed"] is False and "API server unreachable" in response["status"]["message"]
    )
