"""From a Pod to its claims (SPEC §3.3)."""

from __future__ import annotations

import pytest

from quota.claims import claim_references, expand_pod_claims
from quota.cluster import ClusterView
from quota.demand import pod_demand
from quota.errors import InvalidObject, InvalidQuantity, NotFound, ObjectRef
from quota.workloads import as_workload
from tests.quota.builders import VERSIONS, claim, claim_template, container, device_class, pod
from webhook.store.clusterstate import ClusterState

GPU2 = {
    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}]
}
NIC1 = {"requests": [{"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}}]}


def _state(version: str = "v1") -> ClusterState:
    return ClusterState(
        [
            claim_template("gpu-tmpl", GPU2, version=version),
            claim_template("nic-tmpl", NIC1, version=version),
            claim("shared-gpus", GPU2, version=version),
        ]
    )


def _devices(p: dict, state: ClusterState) -> dict[str, int]:
    return pod_demand(as_workload(p), state).all_devices()


@pytest.mark.parametrize("version", VERSIONS)
def test_template_entry_is_one_claim_per_pod(version: str) -> None:
    p = pod(claims=({"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},))
    claims = expand_pod_claims(p, _state(version))
    assert [(c.entry, c.template, c.shared) for c in claims] == [("gpu", "gpu-tmpl", False)]
    assert _devices(p, _state(version)) == {"gpu.example.com": 2}


def test_two_entries_naming_the_same_template_are_two_claims() -> None:
    p = pod(
        claims=(
            {"name": "a", "resourceClaimTemplateName": "gpu-tmpl"},
            {"name": "b", "resourceClaimTemplateName": "gpu-tmpl"},
        )
    )
    assert _devices(p, _state()) == {"gpu.example.com": 4}


def test_two_containers_sharing_one_claim_are_charged_once() -> None:
    p = pod(
        claims=({"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},),
        containers=(container("a", claims=("gpu",)), container("b", claims=("gpu",))),
    )
    assert _devices(p, _state()) == {"gpu.example.com": 2}


def test_init_and_regular_container_sharing_one_template_are_charged_once() -> None:
    p = pod(
        claims=({"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},),
        init=(container("init", claims=("gpu",)),),
        containers=(container("main", claims=("gpu",)),),
    )
    assert _devices(p, _state()) == {"gpu.example.com": 2}


def test_shared_claim_is_identified_for_once_per_queue_charging() -> None:
    p = pod(
        claims=(
            {"name": "gpu", "resourceClaimName": "shared-gpus"},
            {"name": "nic", "resourceClaimTemplateName": "nic-tmpl"},
        )
    )
    demand = pod_demand(as_workload(p), _state())
    assert demand.devices == {"nic.example.com": 1}
    assert demand.shared_claims == {"team-a/shared-gpus": {"gpu.example.com": 2}}
    assert demand.all_devices() == {"gpu.example.com": 2, "nic.example.com": 1}


def test_missing_template_names_it_exactly() -> None:
    p = pod(claims=({"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},))
    with pytest.raises(NotFound) as info:
        expand_pod_claims(p, ClusterState())
    assert (info.value.kind, info.value.namespace, info.value.name) == (
        "ResourceClaimTemplate",
        "team-a",
        "gpu-tmpl",
    )
    assert "ResourceClaimTemplate team-a/gpu-tmpl not found" in str(info.value)
    assert "spec.resourceClaims[0]" in str(info.value)


def test_missing_shared_claim_names_it_exactly() -> None:
    p = pod(claims=({"name": "gpu", "resourceClaimName": "gone"},))
    with pytest.raises(NotFound, match="ResourceClaim team-a/gone not found"):
        expand_pod_claims(p, ClusterState())


def test_template_is_looked_up_in_the_pods_namespace() -> None:
    p = pod(namespace="team-b", claims=({"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},))
    with pytest.raises(NotFound, match="ResourceClaimTemplate team-b/gpu-tmpl not found"):
        expand_pod_claims(p, _state())


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "gpu"},
        {"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
    ],
)
def test_entry_must_name_exactly_one_source(entry: dict) -> None:
    with pytest.raises(InvalidObject) as info:
        expand_pod_claims(pod(claims=(entry,)), _state())
    assert info.value.path == "spec.resourceClaims[0]"


def test_duplicate_entry_names_are_an_error() -> None:
    p = pod(
        claims=(
            {"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},
            {"name": "gpu", "resourceClaimTemplateName": "nic-tmpl"},
        )
    )
    with pytest.raises(InvalidObject) as info:
        expand_pod_claims(p, _state())
    assert info.value.path == "spec.resourceClaims[1].name"


def test_job_template_errors_name_the_path_inside_the_job() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {
            "template": {"spec": {"containers": [container()], "resourceClaims": [{"name": "gpu"}]}}
        },
    }
    with pytest.raises(InvalidObject) as info:
        pod_demand(as_workload(job), _state())
    assert info.value.obj == "Job team-a/j"
    assert info.value.path == "spec.template.spec.resourceClaims[0]"


def test_job_template_missing_template_names_the_path_inside_the_job() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [container()],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "nope"}],
                }
            }
        },
    }
    with pytest.raises(NotFound) as info:
        pod_demand(as_workload(job), _state())
    assert "spec.template.spec.resourceClaims[0]" in str(info.value)
    assert "ResourceClaimTemplate team-a/nope not found" in str(info.value)


def test_a_changed_template_or_device_class_is_counted_afresh() -> None:
    state = _state()
    p = pod(
        claims=({"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},),
        containers=({"name": "main", "resources": {"requests": {"example.com/gpu": "1"}}},),
    )
    before = pod_demand(as_workload(p), state.snapshot())
    assert before.all_devices() == {"gpu.example.com": 2}
    assert before.resources == {"example.com/gpu": 1}
    # An unchanged template is parsed once for every view of the store.
    assert pod_demand(as_workload(p), state.snapshot()).claims[0].spec is before.claims[0].spec
    state.upsert(claim_template("gpu-tmpl", NIC1))
    state.upsert(device_class("gpu", "example.com/gpu"))
    fresh = ClusterView.of(o for kind in state.kinds() for o in state.list(kind))
    assert pod_demand(as_workload(p), fresh) == pod_demand(as_workload(p), state.snapshot())
    after = pod_demand(as_workload(p), state.snapshot())
    assert after.all_devices() == {"gpu": 1, "nic.example.com": 1}
    assert after.resources == {}


def test_claim_references_name_entries_and_generated_claims_leniently() -> None:
    p = pod(
        claims=(
            {"name": "a", "resourceClaimTemplateName": "gpu-tmpl"},
            {"name": "b", "resourceClaimName": "shared-gpus"},
            "garbage",
        )
    )
    p["status"] = {"resourceClaimStatuses": [{"name": "a", "resourceClaimName": "train-0-a-x1"}]}
    assert claim_references(p) == {
        ("ResourceClaimTemplate", "team-a", "gpu-tmpl"),
        ("ResourceClaim", "team-a", "shared-gpus"),
    }
    assert ("ResourceClaim", "team-a", "train-0-a-x1") in claim_references(p, generated=True)


def _workload(kind: str, pod_spec: dict) -> dict:
    """A `kind` whose pod template has `pod_spec`."""
    template = {"spec": pod_spec}
    spec: dict = {"template": template}
    if kind == "CronJob":
        spec = {"jobTemplate": {"spec": spec}}
    return {
        "apiVersion": "batch/v1",
        "kind": kind,
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": spec,
    }


GPU_ENTRY = {"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"}


@pytest.mark.parametrize(
    ("pod_spec", "path"),
    [
        ({"containers": [container(cpu="lots")]}, "spec.containers[0].resources.requests[cpu]"),
        ({"containers": [container(cpu="-1")]}, "spec.containers[0].resources.requests[cpu]"),
        (
            {"containers": [container()], "overhead": {"memory": "x"}},
            "spec.overhead[memory]",
        ),
        (
            {"containers": [container(claims=("typo",))], "resourceClaims": [GPU_ENTRY]},
            "spec.containers[0].resources.claims[0].name",
        ),
        (
            {"containers": [container()], "resourceClaims": [GPU_ENTRY, GPU_ENTRY]},
            "spec.resourceClaims[1].name",
        ),
        ({"containers": [container()], "resourceClaims": "gpu"}, "spec.resourceClaims"),
    ],
)
@pytest.mark.parametrize(
    ("kind", "base"),
    [("Pod", ""), ("Job", "spec.template."), ("CronJob", "spec.jobTemplate.spec.template.")],
)
def test_a_field_error_names_the_field_in_the_object_submitted(
    pod_spec: dict, path: str, kind: str, base: str
) -> None:
    obj = pod() if kind == "Pod" else _workload(kind, pod_spec)
    if kind == "Pod":
        obj["spec"] = pod_spec
    with pytest.raises(InvalidObject) as info:
        pod_demand(as_workload(obj), _state())
    assert info.value.obj == f"{kind} team-a/{obj['metadata']['name']}"
    assert info.value.path == base + path
    assert f": {base + path}: " in str(info.value)


def test_a_missing_template_names_the_entry_that_points_at_it() -> None:
    spec = {
        "containers": [container()],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "nope"}],
    }
    with pytest.raises(NotFound) as info:
        pod_demand(as_workload(_workload("CronJob", spec)), _state())
    assert (
        info.value.referrer
        == "CronJob team-a/w: spec.jobTemplate.spec.template.spec.resourceClaims[0]"
    )
    assert (info.value.kind, info.value.name) == ("ResourceClaimTemplate", "nope")


@pytest.mark.parametrize("kind", ["Job", "CronJob"])
def test_a_bad_quantity_in_a_template_stays_a_quantity_error(kind: str) -> None:
    obj = _workload(kind, {"containers": [container(cpu="lots")]})
    with pytest.raises(InvalidQuantity):
        pod_demand(as_workload(obj), _state())


def test_a_missing_claim_lists_every_claim_and_template_the_pod_lacks() -> None:
    p = pod(
        claims=(
            {"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},  # in the view
            {"name": "late", "resourceClaimTemplateName": "late-tmpl"},
            {"name": "gone", "resourceClaimName": "gone"},
            {"name": "shared", "resourceClaimName": "shared-gpus"},  # in the view
        )
    )
    with pytest.raises(NotFound) as info:
        expand_pod_claims(p, _state())
    assert info.value.ref == ObjectRef("ResourceClaimTemplate", "team-a", "late-tmpl")
    assert info.value.missing == (
        ObjectRef("ResourceClaim", "team-a", "gone"),
        ObjectRef("ResourceClaimTemplate", "team-a", "late-tmpl"),
    )
    assert "ResourceClaimTemplate team-a/late-tmpl not found" in str(info.value)
