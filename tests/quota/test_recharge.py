"""Recharging live pods (`quota.recharge`): what a running pod costs now, and whether a change
that makes it cost more still fits. A live pod keeps the queue and flavors of its admission
record (its nodes were chosen by them); what does not grow is always allowed.

Inputs are the cluster recorded from the real control plane (tests/recorded.py): `research/r-0`
runs on flavor `lab` (its nodeSelector is the flavor's node label) with one generated GPU claim.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from quota.charge import Charge
from quota.cluster import ClusterView
from quota.errors import DraquotaError
from quota.recharge import recheck_pod, recompute_charge
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Verdict
from tests.recorded import recorded_object, recorded_objects

RESEARCH = "research"


def _view(*changed: dict[str, Any], without: tuple[tuple[str, str], ...] = ()) -> ClusterView:
    objects = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in (*recorded_objects(), *changed)
    }
    kept = [o for key, o in objects.items() if (key[0], key[2]) not in without]
    return ClusterView.of(kept)


def _pod(name: str = "r-0") -> dict[str, Any]:
    return recorded_object("Pod", RESEARCH, name)


def _claim(pod_name: str, gpus: int) -> dict[str, Any]:
    """The pod's generated claim, asking for `gpus` GPUs (as a re-created claim would)."""
    name = _pod(pod_name)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = recorded_object("ResourceClaim", RESEARCH, name)
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = gpus
    return claim


def _nominal() -> int:
    queue = recorded_object("ClusterQueue", None, RESEARCH)
    return int(queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"])


def _with_spare_flavor(spare_first: bool = False) -> list[dict[str, Any]]:
    """Flavor `spare` (nodes labelled pool=spare) beside `lab` in research's group, with
    room for any pod here."""
    queue = recorded_object("ClusterQueue", None, RESEARCH)
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    extra = {**flavors[0], "name": "spare"}
    extra["resources"] = [
        {**{k: v for k, v in r.items() if k != "lendingLimit"}, "nominalQuota": 100}
        for r in flavors[0]["resources"]
    ]
    queue["spec"]["resourceGroups"][0]["flavors"] = (
        [extra, *flavors] if spare_first else [*flavors, extra]
    )
    flavor = recorded_object("ResourceFlavor", None, "lab")
    flavor["metadata"] = {"name": "spare"}
    flavor["spec"] = {"nodeLabels": {"e2e.draquota.io/pool": "spare"}}
    return [queue, flavor]


def _record(view: ClusterView, name: str = "r-0") -> Charge:
    charge = recompute_charge(_pod(name), view, Settings())
    assert charge is not None
    return charge


def _others(view: ClusterView, *names: str) -> Usage:
    """Usage held by the named research pods (the pod being checked is left out)."""
    usage = Usage()
    for name in names:
        usage.add(f"{RESEARCH}/{name}", _record(view, name))
    return usage


# -- recompute_charge ------------------------------------------------------------------


def test_a_running_pod_is_charged_its_generated_claims_not_its_template() -> None:
    view = _view(_claim("r-0", 3))
    assert _record(view).per_pod == {"gpus": 3}
    assert _record(_view()).per_pod == {"gpus": 1}


def test_a_pod_outside_every_local_queue_is_not_charged() -> None:
    view = _view(without=(("LocalQueue", "default"),))
    assert recompute_charge(_pod(), view, Settings()) is None


def test_the_recorded_queue_is_kept_when_the_local_queue_is_repointed() -> None:
    record = _record(_view())
    local = recorded_object("LocalQueue", RESEARCH, "default")
    local["spec"]["clusterQueue"] = "ml"
    view = _view(local)
    assert recompute_charge(_pod(), view, Settings(), record).cluster_queue == RESEARCH  # type: ignore[union-attr]
    assert recompute_charge(_pod(), view, Settings()).cluster_queue == "ml"  # type: ignore[union-attr]


def test_a_record_naming_a_deleted_cluster_queue_routes_by_the_local_queue() -> None:
    record = dataclasses.replace(_record(_view()), cluster_queue="gone")
    charge = recompute_charge(_pod(), _view(), Settings(), record)
    assert charge is not None and charge.cluster_queue == RESEARCH


@pytest.mark.parametrize("spare_first", [False, True])
def test_without_a_record_the_flavor_is_the_one_the_pods_nodes_are_pinned_to(
    spare_first: bool,
) -> None:
    charge = recompute_charge(_pod(), _view(*_with_spare_flavor(spare_first)), Settings())
    assert charge is not None and charge.flavors == {"gpus": "lab"}


def test_a_recorded_flavor_is_kept_while_it_is_valid() -> None:
    view = _view(*_with_spare_flavor())
    record = dataclasses.replace(_record(view), flavors={"gpus": "spare"})
    assert recompute_charge(_pod(), view, Settings(), record).flavors == {"gpus": "spare"}  # type: ignore[union-attr]
    invalid = dataclasses.replace(record, flavors={"gpus": "removed"})
    assert recompute_charge(_pod(), view, Settings(), invalid).flavors == {"gpus": "lab"}  # type: ignore[union-attr]


def _template(gpus: int) -> dict[str, Any]:
    template = recorded_object("ResourceClaimTemplate", RESEARCH, "gpu")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = gpus
    return template


def _generated_name() -> str:
    return str(_pod()["status"]["resourceClaimStatuses"][0]["resourceClaimName"])


def test_a_generated_claim_that_is_gone_is_charged_by_its_template() -> None:
    view = _view(_template(2), without=(("ResourceClaim", _generated_name()),))
    assert _record(view).per_pod == {"gpus": 2}


def test_claims_that_cannot_be_read_are_an_error_naming_the_template() -> None:
    gone = (("ResourceClaim", _generated_name()), ("ResourceClaimTemplate", "gpu"))
    with pytest.raises(DraquotaError, match="ResourceClaimTemplate research/gpu not found"):
        recompute_charge(_pod(), _view(without=gone), Settings())


# -- recheck_pod -----------------------------------------------------------------------


def test_a_pod_that_does_not_grow_is_allowed_with_its_record() -> None:
    view = _view()
    record = _record(view)
    full = _others(view, "r-1")
    full.add("elsewhere", dataclasses.replace(record, per_pod={"gpus": 10 * _nominal()}))
    decision = recheck_pod(_pod(), view, full, Settings(), record)
    assert decision.allowed and decision.charge == record


def test_a_pod_that_grows_within_the_quota_gets_the_larger_record() -> None:
    grown = _nominal() - 1  # r-1 holds one GPU
    view = _view(_claim("r-0", grown))
    record = _record(_view())
    decision = recheck_pod(_pod(), view, _others(view, "r-1"), Settings(), record)
    assert decision.verdict is Verdict.ADMITTED
    assert decision.charge is not None and decision.charge.per_pod == {"gpus": grown}
    assert decision.charge.flavors == record.flavors


def test_a_pod_that_grows_beyond_the_quota_is_denied_naming_the_queue() -> None:
    view = _view(_claim("r-0", _nominal()))  # r-1 holds one GPU: one too many
    decision = recheck_pod(_pod(), view, _others(view, "r-1"), Settings(), _record(_view()))
    assert not decision.allowed
    assert decision.reason == "QuotaExceeded"
    assert f'ClusterQueue "{RESEARCH}"' in decision.message


def test_growth_must_fit_in_the_recorded_flavor_not_in_another() -> None:
    view = _view(*_with_spare_flavor(), _claim("r-0", _nominal() + 1))  # fits only in spare
    record = _record(_view(*_with_spare_flavor()))
    assert record.flavors == {"gpus": "lab"}
    pinned = recheck_pod(_pod(), view, Usage(), Settings(), record)
    assert not pinned.allowed
    assert "the pod runs in flavor lab" in pinned.message


def test_a_pod_outside_every_local_queue_is_not_managed() -> None:
    view = _view(without=(("LocalQueue", "default"),))
    decision = recheck_pod(_pod(), view, Usage(), Settings(), None)
    assert decision.allowed and decision.reason == "NotManaged"


def test_a_claim_that_cannot_be_read_refuses_naming_it() -> None:
    gone = (("ResourceClaim", _generated_name()), ("ResourceClaimTemplate", "gpu"))
    decision = recheck_pod(_pod(), _view(without=gone), Usage(), Settings(), _record(_view()))
    assert (decision.allowed, decision.reason) == (False, "ClaimNotFound")
    assert "spec.resourceClaims[0]: ResourceClaimTemplate research/gpu not found" in (
        decision.message
    )
