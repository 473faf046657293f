"""Everything one pod is charged: devices per class, shared claims, ordinary requests."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from quota.claims import PodClaim, expand_pod_claims
from quota.cluster import ClusterView
from quota.devicecharge import DeviceCatalog, device_catalog
from quota.deviceclasses import extended_resource_classes, parse_device_class
from quota.devices import add_devices
from quota.errors import DraquotaError
from quota.podresources import pod_resources
from quota.workloads import Workload

__all__ = ["PodDemand", "catalog_of", "existing_pod_demand", "extended_names", "pod_demand"]


@dataclass(frozen=True)
class PodDemand:
    """What one pod of a workload asks for.

    - `devices`: per DeviceClass, from template claims and DRA extended resources,
      charged for every pod;
    - `shared_claims`: per shared claim (`ns/name`), its devices per class, charged
      once per ClusterQueue however many pods use it;
    - `resources`: ordinary effective requests as quota amounts (cpu in millicores);
    - `catalog`: the cluster's devices, built on first call, for the resources charged by
      counters and capacity (`quota.devicecharge`); `lenient`: a live pod, charged what it
      holds rather than refused.
    """

    claims: tuple[PodClaim, ...]
    devices: Mapping[str, int]
    shared_claims: Mapping[str, Mapping[str, int]]
    resources: Mapping[str, int]
    extended_devices: Mapping[str, int]
    catalog: Callable[[], DeviceCatalog] | None = field(default=None, compare=False, repr=False)
    lenient: bool = False

    def all_devices(self) -> dict[str, int]:
        """Devices per class including each shared claim once."""
        total = dict(self.devices)
        for devices in self.shared_claims.values():
            add_devices(total, dict(devices))
        return dict(sorted(total.items()))


def extended_names(state: ClusterView) -> dict[str, str]:
    """Explicit extended-resource name -> DeviceClass, for the classes in the cluster view.

    Kept with the view (`ClusterView.derived`) until a DeviceClass changes: admission asks
    for it on every pod.
    """
    view = state.snapshot()  # key and names read from one view, even when handed the store

    def build() -> dict[str, str]:
        return extended_resource_classes(parse_device_class(o) for o in view.list("DeviceClass"))

    return view.derived.latest("extended_names", view.revision("DeviceClass"), build)


def catalog_of(state: ClusterView) -> Callable[[], DeviceCatalog]:
    """The device catalog of the view, parsed on the first call only and kept with the view
    (`ClusterView.derived`) until a ResourceSlice or DeviceClass changes: most pods never
    need it."""
    view = state.snapshot()

    def build() -> DeviceCatalog:
        return device_catalog(view.list("ResourceSlice"), view.list("DeviceClass"))

    key = view.revision("ResourceSlice", "DeviceClass")
    return lambda: view.derived.latest("device_catalog", key, build)


def pod_demand(
    workload: Workload,
    state: ClusterView,
    generated: bool = False,
    saturate: bool = False,
) -> PodDemand:
    """The demand of one pod of `workload`, with claims looked up in `state` (`generated`:
    a live pod, charged for the claims generated for it; see `expand_pod_claims`).

    Errors name the original object and the field path inside it (for a Job,
    under `spec.template`). With `saturate` (a live pod, already stored), a request
    quantity that is out of range or does not parse is charged as much as possible
    instead of raising (`quota.podresources.pod_resources`). What is derived from the
    cluster view is kept with it (`ClusterView.derived`).
    """
    base = workload.template_path
    claims = expand_pod_claims(workload.pod, state, workload.ref, generated, base=base)
    entries = {claim.entry for claim in claims}
    resources = pod_resources(
        workload.pod,
        workload.ref,
        extended_names(state),
        entries,
        saturate=saturate,
        base=base,
    )
    devices: dict[str, int] = {}
    shared: dict[str, Mapping[str, int]] = {}
    for claim in claims:
        if claim.shared:
            shared[claim.key] = claim.devices
        else:
            add_devices(devices, dict(claim.devices))
    add_devices(devices, dict(resources.extended_devices))
    return PodDemand(
        claims=claims,
        devices=dict(sorted(devices.items())),
        shared_claims=shared,
        resources=resources.requests,
        extended_devices=resources.extended_devices,
        catalog=catalog_of(state),
        lenient=saturate,
    )


def existing_pod_demand(workload: Workload, state: ClusterView) -> PodDemand:
    """The demand of a pod that exists (one waiting in its queue): the larger, per
    DeviceClass, of its templates now and the claims the control plane already generated
    for it, with the generated claims placed (they are what the scheduler allocates). A
    template deleted since its claim was generated leaves the generated claims."""
    made = pod_demand(workload, state, generated=True)
    try:
        templates = pod_demand(workload, state)
    except DraquotaError:
        return made
    devices = dict(made.devices)
    for device_class, count in templates.devices.items():
        devices[device_class] = max(devices.get(device_class, 0), count)
    return dataclasses.replace(made, devices=dict(sorted(devices.items())))
