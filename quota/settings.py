"""The webhook's configuration file, as far as decisions read it.

```yaml
deviceClassMappings:             # Kueue's configuration shape; also accepted under `resources:`
- name: example.com/gpus         # a quota resource name
  deviceClassNames: [gpu.example.com]
unmappedDeviceClass: Deny        # Deny | Ignore: a class no resource of the queue covers
placement: Enforce               # Enforce | Warn | Off
reservationTTLSeconds: 60
admissionDeadlineSeconds: 2      # answer (a denial) before the API server's timeoutSeconds
admissionWorkers: 8              # admissions decided at once, off the event loop
```

Decoding is strict, like kubectl's field validation: an unknown key (a typo such as
`unmappedDeviceClas`) is an error naming its path, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quota.errors import InvalidObject
from quota.fields import FieldReader
from quota.strict import Schema, frozen_schema, reject_unknown_fields

__all__ = [
    "CONFIG_FIELDS",
    "MAX_DEADLINE_SECONDS",
    "PLACEMENT_MODES",
    "UNMAPPED_MODES",
    "DeviceClassMapping",
    "Settings",
]

UNMAPPED_MODES = ("Deny", "Ignore")
PLACEMENT_MODES = ("Enforce", "Warn", "Off")
_REF = "config"
_MAPPINGS = (frozen_schema({"name": None, "deviceClassNames": None}),)
CONFIG_FIELDS: Schema = frozen_schema(
    {
        "deviceClassMappings": _MAPPINGS,
        "resources": {"deviceClassMappings": _MAPPINGS},
        "unmappedDeviceClass": None,
        "placement": None,
        "reservationTTLSeconds": None,
        "admissionDeadlineSeconds": None,
        "admissionWorkers": None,
    }
)
# The API server's largest webhook timeoutSeconds: a deadline past it would never be seen.
MAX_DEADLINE_SECONDS = 30


@dataclass(frozen=True)
class DeviceClassMapping:
    """A quota resource name charged with the devices of these DeviceClasses (for every queue)."""

    name: str
    device_class_names: tuple[str, ...]


def _mappings(reader: FieldReader, raw: Any, path: str) -> tuple[DeviceClassMapping, ...]:
    out = []
    owner: dict[str, str] = {}
    names: set[str] = set()
    for i, entry in enumerate(reader.items(raw, path)):
        here = f"{path}[{i}]"
        entry = reader.mapping(entry, here)
        name = reader.string(entry.get("name"), f"{here}.name", True)
        classes = reader.strings(entry.get("deviceClassNames"), f"{here}.deviceClassNames")
        if not classes:
            raise reader.fail(f"{here}.deviceClassNames", "must list at least one DeviceClass")
        if name in names:
            raise reader.fail(f"{here}.name", f'duplicate resource "{name}"')
        names.add(name)
        for j, device_class in enumerate(classes):
            if device_class in owner and owner[device_class] != name:
                raise reader.fail(
                    f"{here}.deviceClassNames[{j}]",
                    f'DeviceClass {device_class} is already mapped to "{owner[device_class]}"',
                )
            owner[device_class] = name
        out.append(DeviceClassMapping(name, tuple(sorted(set(classes)))))
    return tuple(out)


def _choice(
    reader: FieldReader, raw: Any, path: str, choices: tuple[str, ...], default: str
) -> str:
    value = reader.string(raw, path) or default
    if value not in choices:
        raise reader.fail(
            path, f"unsupported value {value!r}: expected one of {', '.join(choices)}"
        )
    return value


@dataclass(frozen=True)
class Settings:
    """Decision settings; the defaults are the safe ones (deny what cannot be charged)."""

    device_class_mappings: tuple[DeviceClassMapping, ...] = ()
    unmapped_device_class: str = "Deny"
    placement: str = "Enforce"
    reservation_ttl_seconds: int = 60
    # Under the manifests' webhook timeoutSeconds (3 s mutating, 5 s validating), with room
    # for the network and TLS: past it draquota answers a denial itself.
    admission_deadline_seconds: float = 2.0
    admission_workers: int = 8

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> Settings:
        """Settings from the parsed config file; InvalidObject naming the field on bad input."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise InvalidObject(_REF, "", "must be a mapping")
        reject_unknown_fields(_REF, data, CONFIG_FIELDS)
        reader = FieldReader(_REF)
        raw_mappings = data.get("deviceClassMappings")
        path = "deviceClassMappings"
        resources = reader.mapping(data.get("resources"), "resources")
        if raw_mappings is None and "deviceClassMappings" in resources:
            raw_mappings, path = resources["deviceClassMappings"], "resources.deviceClassMappings"
        ttl = data.get("reservationTTLSeconds", 60)
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise reader.fail("reservationTTLSeconds", f"must be a positive integer, got {ttl!r}")
        deadline = data.get("admissionDeadlineSeconds", 2.0)
        if (
            isinstance(deadline, bool)
            or not isinstance(deadline, int | float)
            or not 0 < deadline <= MAX_DEADLINE_SECONDS
        ):
            raise reader.fail(
                "admissionDeadlineSeconds",
                f"must be a number of seconds in (0, {MAX_DEADLINE_SECONDS}], got {deadline!r}",
            )
        workers = data.get("admissionWorkers", 8)
        if isinstance(workers, bool) or not isinstance(workers, int) or not 0 < workers <= 256:
            raise reader.fail(
                "admissionWorkers", f"must be an integer in [1, 256], got {workers!r}"
            )
        return cls(
            device_class_mappings=_mappings(reader, raw_mappings, path),
            unmapped_device_class=_choice(
                reader,
                data.get("unmappedDeviceClass"),
                "unmappedDeviceClass",
                UNMAPPED_MODES,
                "Deny",
            ),
            placement=_choice(
                reader, data.get("placement"), "placement", PLACEMENT_MODES, "Enforce"
            ),
            reservation_ttl_seconds=ttl,
            admission_deadline_seconds=float(deadline),
            admission_workers=workers,
        )

    def class_resources(self) -> dict[str, str]:
        """DeviceClass -> quota resource name, from the global mappings."""
        return {
            device_class: mapping.name
            for mapping in self.device_class_mappings
            for device_class in mapping.device_class_names
        }
