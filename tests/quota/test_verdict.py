"""A decision's verdict: refusals of bad input, denials, and what counts as allowed."""

from __future__ import annotations

import pytest

from quota.errors import InvalidObject, InvalidQuantity, NotFound, ObjectRef
from quota.verdict import Decision, Verdict, deny, refusal


@pytest.mark.parametrize(
    ("decision", "verdict", "reason"),
    [
        pytest.param(
            refusal(InvalidObject("Pod team-a/p", "spec.containers", "required")),
            Verdict.INVALID,
            "InvalidObject",
            id="invalid-object",
        ),
        pytest.param(
            refusal(InvalidQuantity("Pod team-a/p", "requests[cpu]", "out of range")),
            Verdict.INVALID,
            "InvalidObject",
            id="invalid-quantity",
        ),
        pytest.param(
            refusal(NotFound("ResourceClaimTemplate", "team-a", "ghost", "Pod team-a/p")),
            Verdict.DENIED,
            "ClaimNotFound",
            id="claim-not-found",
        ),
        pytest.param(
            refusal(NotFound("LocalQueue", "team-a", "missing")),
            Verdict.DENIED,
            "NotFound",
            id="not-found",
        ),
        pytest.param(
            deny("QuotaExceeded", "pod team-a/p exceeds quota", queue="default"),
            Verdict.DENIED,
            "QuotaExceeded",
            id="deny",
        ),
        pytest.param(
            deny("InvalidObject", "pod team-a/p: claims", invalid=True),
            Verdict.INVALID,
            "InvalidObject",
            id="deny-invalid",
        ),
        pytest.param(
            Decision(Verdict.ADMITTED, "NotManaged", "no LocalQueue: not managed by draquota"),
            Verdict.ADMITTED,
            "NotManaged",
            id="admitted",
        ),
    ],
)
def test_verdict_and_reason(decision: Decision, verdict: Verdict, reason: str) -> None:
    assert (decision.verdict, decision.reason) == (verdict, reason)
    assert decision.allowed is (verdict is Verdict.ADMITTED)


def test_a_denial_names_its_queue_and_reads_like_a_kubernetes_error() -> None:
    decision = refusal(NotFound("ResourceClaim", "team-a", "c0", "Pod team-a/p"))
    assert decision.message == "pod team-a/p: ResourceClaim team-a/c0 not found"
    assert deny("QuotaExceeded", "over", queue="default").local_queue_name == "default"


def test_a_refusal_for_a_missing_object_lists_what_is_missing_as_references() -> None:
    gone = ObjectRef("ResourceClaim", "team-a", "gone")
    late = ObjectRef("ResourceClaimTemplate", "team-a", "late")
    error = NotFound("ResourceClaimTemplate", "team-a", "late", "Pod team-a/p", (gone, late))
    assert refusal(error).missing == (gone, late)
    # the object the message names is always listed, even when the raiser listed no other
    assert refusal(NotFound("ResourceClaim", "team-a", "c0")).missing == (
        ObjectRef("ResourceClaim", "team-a", "c0"),
    )


def test_a_refusal_of_a_malformed_object_lists_nothing_missing() -> None:
    decision = refusal(InvalidObject("Pod team-a/p", "spec.containers", "required"))
    assert decision.missing == ()
