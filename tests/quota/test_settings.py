"""The webhook config file as the decisions read it."""

from __future__ import annotations

from typing import Any

import pytest

from quota.errors import InvalidObject
from quota.settings import DeviceClassMapping, Settings

MAPPINGS = [{"name": "example.com/gpu", "deviceClassNames": ["b.example.com", "a.example.com"]}]


def test_defaults_are_the_safe_ones() -> None:
    assert Settings.from_mapping(None) == Settings()
    settings = Settings.from_mapping({})
    assert settings.unmapped_device_class == "Deny" and settings.placement == "Enforce"
    assert settings.reservation_ttl_seconds == 60 and settings.device_class_mappings == ()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"deviceClassMappings": MAPPINGS}, id="top-level"),
        pytest.param({"resources": {"deviceClassMappings": MAPPINGS}}, id="kueue-config-shape"),
    ],
)
def test_device_class_mappings(data: dict[str, Any]) -> None:
    settings = Settings.from_mapping(data)
    assert settings.device_class_mappings == (
        DeviceClassMapping("example.com/gpu", ("a.example.com", "b.example.com")),
    )
    assert settings.class_resources() == {
        "a.example.com": "example.com/gpu",
        "b.example.com": "example.com/gpu",
    }


def test_modes_and_ttl() -> None:
    settings = Settings.from_mapping(
        {
            "unmappedDeviceClass": "Ignore",
            "placement": "Warn",
            "reservationTTLSeconds": 5,
        }
    )
    assert (settings.unmapped_device_class, settings.placement) == ("Ignore", "Warn")
    assert settings.reservation_ttl_seconds == 5


@pytest.mark.parametrize(
    ("data", "path"),
    [
        pytest.param({"placement": "Sometimes"}, "placement", id="placement"),
        pytest.param({"unmappedDeviceClass": "Allow"}, "unmappedDeviceClass", id="unmapped"),
        pytest.param({"reservationTTLSeconds": 0}, "reservationTTLSeconds", id="ttl-zero"),
        pytest.param({"reservationTTLSeconds": True}, "reservationTTLSeconds", id="ttl-bool"),
        pytest.param(
            {"deviceClassMappings": {"name": "x"}}, "deviceClassMappings", id="not-a-list"
        ),
        pytest.param(
            {"deviceClassMappings": [{"deviceClassNames": ["a"]}]},
            "deviceClassMappings[0].name",
            id="no-name",
        ),
        pytest.param(
            {"deviceClassMappings": [{"name": "x"}]},
            "deviceClassMappings[0].deviceClassNames",
            id="no-classes",
        ),
        pytest.param(
            {
                "deviceClassMappings": [
                    {"name": "x", "deviceClassNames": ["a"]},
                    {"name": "y", "deviceClassNames": ["a"]},
                ]
            },
            "deviceClassMappings[1].deviceClassNames[0]",
            id="class-in-two-resources",
        ),
        pytest.param(
            {
                "deviceClassMappings": [
                    {"name": "x", "deviceClassNames": ["a"]},
                    {"name": "x", "deviceClassNames": ["b"]},
                ]
            },
            "deviceClassMappings[1].name",
            id="duplicate-resource",
        ),
    ],
)
def test_bad_config_names_the_field(data: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidObject) as err:
        Settings.from_mapping(data)
    assert (err.value.obj, err.value.path) == ("config", path)


def test_not_a_mapping() -> None:
    with pytest.raises(InvalidObject):
        Settings.from_mapping(["placement"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "path", "hint"),
    [
        pytest.param({"unmappedDeviceClas": "Ignore"}, "unmappedDeviceClas", "unmappedDeviceClass"),
        pytest.param(
            {"deviceClassMappings": [{"name": "gpus", "deviceClassName": ["g"]}]},
            "deviceClassMappings[0].deviceClassName",
            "deviceClassNames",
        ),
        pytest.param(
            {"resources": {"excludeResourcePrefixes": []}},
            "resources.excludeResourcePrefixes",
            None,
        ),
    ],
)
def test_unknown_config_fields_are_errors_naming_the_path(
    data: dict, path: str, hint: str | None
) -> None:
    with pytest.raises(InvalidObject) as info:
        Settings.from_mapping(data)
    assert info.value.path == path
    assert info.value.reason.startswith("unknown field")
    if hint:
        assert f'did you mean "{hint}"' in info.value.reason


def test_admission_deadline_and_workers() -> None:
    default = Settings.from_mapping({})
    assert default.admission_deadline_seconds < 3  # under the mutating webhook's timeout
    parsed = Settings.from_mapping({"admissionDeadlineSeconds": 1.5, "admissionWorkers": 4})
    assert (parsed.admission_deadline_seconds, parsed.admission_workers) == (1.5, 4)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"admissionDeadlineSeconds": 0}, "admissionDeadlineSeconds"),
        ({"admissionDeadlineSeconds": 31}, "admissionDeadlineSeconds"),
        ({"admissionDeadlineSeconds": "2s"}, "admissionDeadlineSeconds"),
        ({"admissionWorkers": 0}, "admissionWorkers"),
        ({"admissionWorkers": True}, "admissionWorkers"),
    ],
)
def test_bad_admission_settings_name_the_field(data: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidObject) as err:
        Settings.from_mapping(data)
    assert err.value.path == path
