"""Attacks on what placement believes is allocated: a user's pod must not leave other
teams' devices looking busy (their pods would be steered away or warned for nothing)."""

from __future__ import annotations

from quota.claims import expand_pod_claims
from quota.placement import make_placer
from tests.quota.test_placement_busy import _claim_of, busy_claim, state
from tests.robustness.hostile import pod


def test_naming_one_shared_claim_twice_leaves_no_device_counted_busy() -> None:
    # Placement takes a pod's own shared claims out of what is allocated; when the claim
    # was allocated after the pod's claims were read, a pod naming it twice once had its
    # devices counted twice, and they stayed busy after the claim was gone.
    s = state()
    mine = busy_claim("node-0000")
    mine["metadata"] = {"name": "mine", "namespace": "team-a"}
    s.upsert({**mine, "status": {}})
    placer = make_placer(s)
    twice = pod("p")
    twice["spec"]["resourceClaims"] = [
        {"name": "a", "resourceClaimName": "mine"},
        {"name": "b", "resourceClaimName": "mine"},
    ]
    claims = expand_pod_claims(twice, s, "Pod team-a/p")
    s.upsert(mine)  # the scheduler allocates it while the pod's claims are being placed
    for _ in range(3):
        placer(claims, None)
    s.remove("ResourceClaim", "team-a", "mine")  # its devices are free again
    one = [_claim_of(s, "one")]
    assert placer.place(one).node == make_placer(s).place(one).node == "node-0000"
