"""Devices per DeviceClass of one claim spec, in every resource.k8s.io version (SPEC §3.2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.claims import claim_spec_of
from quota.devices import claim_devices
from quota.errors import InvalidObject
from tests.quota.builders import VERSIONS, claim, claim_template, v1beta1_path

CASES = yaml.safe_load((Path(__file__).parent / "fixtures/counting/claims.yaml").read_text())


def _devices(case: dict[str, Any]) -> dict[str, Any]:
    if "requests_repeat" in case:
        repeat = case["requests_repeat"]
        requests = [{"name": f"req-{i}", **repeat["request"]} for i in range(repeat["count"])]
    else:
        requests = case["requests"]
    devices: dict[str, Any] = {"requests": requests}
    for key in ("constraints", "config"):
        if key in case:
            devices[key] = case[key]
    return devices


def _params() -> list[Any]:
    return [
        pytest.param(case, version, kind, id=f"{case['id']}-{version}-{kind}")
        for case in CASES
        for version in VERSIONS
        for kind in ("ResourceClaim", "ResourceClaimTemplate")
    ]


@pytest.mark.parametrize(("case", "version", "kind"), _params())
def test_claim_devices_table(case: dict[str, Any], version: str, kind: str) -> None:
    build = claim if kind == "ResourceClaim" else claim_template
    obj = build("gpu-claim", _devices(case), version=version)
    before = copy.deepcopy(obj)
    if "error" in case:
        with pytest.raises(InvalidObject) as info:
            claim_devices(claim_spec_of(obj))
        path = case["error"]["path"]
        if version == "v1beta1":
            path = v1beta1_path(path)
        if kind == "ResourceClaimTemplate":
            path = "spec." + path
        assert info.value.obj == f"{kind} team-a/gpu-claim"
        assert info.value.path == path
        assert case["error"]["contains"] in info.value.reason
    else:
        assert claim_devices(claim_spec_of(obj)) == case["expect"]
    assert obj == before, "counting must not mutate its input"


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_request_with_neither_exactly_nor_first_available_is_an_error(version: str) -> None:
    obj = claim("c", {"requests": [{"name": "gpu"}]}, version=version)
    with pytest.raises(InvalidObject) as info:
        claim_spec_of(obj)
    assert info.value.path == "spec.devices.requests[0]"
    assert "one of exactly or firstAvailable" in info.value.reason


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_v1beta1_shape_under_v1_names_the_mismatch(version: str) -> None:
    obj = claim("c", {"requests": [{"name": "gpu", "deviceClassName": "gpu"}]}, version=version)
    with pytest.raises(InvalidObject, match="v1beta1 shape"):
        claim_spec_of(obj)


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_exactly_and_first_available_together_is_an_error(version: str) -> None:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": "gpu"},
        "firstAvailable": [{"name": "a", "deviceClassName": "gpu"}],
    }
    with pytest.raises(InvalidObject, match="mutually exclusive"):
        claim_spec_of(claim("c", {"requests": [request]}, version=version))


def test_v1beta1_request_without_device_class_is_an_error() -> None:
    obj = claim("c", {"requests": [{"name": "gpu", "count": 2}]}, version="v1beta1")
    with pytest.raises(InvalidObject) as info:
        claim_spec_of(obj)
    assert info.value.path == "spec.devices.requests[0].deviceClassName"


def test_v1beta1_first_available_with_device_class_is_an_error() -> None:
    request = {
        "name": "gpu",
        "deviceClassName": "gpu",
        "firstAvailable": [{"name": "a", "deviceClassName": "gpu"}],
    }
    with pytest.raises(InvalidObject) as info:
        claim_spec_of(claim("c", {"requests": [request]}, version="v1beta1"))
    assert info.value.path == "spec.devices.requests[0].deviceClassName"


@pytest.mark.parametrize(
    "api_version", ["resource.k8s.io/v1alpha2", "resource.k8s.io/v1alpha3", "example.com/v1"]
)
def test_unsupported_api_version_is_an_error(api_version: str) -> None:
    obj = claim("c", {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]})
    obj["apiVersion"] = api_version
    with pytest.raises(InvalidObject) as info:
        claim_spec_of(obj)
    assert info.value.path == "apiVersion"


@pytest.mark.parametrize("devices", [None, "x", {"requests": "x"}, {"requests": ["x"]}])
def test_malformed_structure_is_an_error_not_a_crash(devices: Any) -> None:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {"devices": devices},
    }
    if devices is None:
        assert claim_devices(claim_spec_of(obj)) == {}
    else:
        with pytest.raises(InvalidObject):
            claim_spec_of(obj)
