"""Builders for hostile requests of issue 10, shared by the robustness tests and bench/."""

from __future__ import annotations

from typing import Any

GPU = "gpu.example.com"
NAMESPACE = "team-a"


def gpu_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
    }


def node_objects(nodes: int, devices: int = 8) -> list[dict[str, Any]]:
    """Nodes with one slice of `devices` GPUs each (attribute `index` = device number)."""
    out: list[dict[str, Any]] = [gpu_class()]
    for n in range(nodes):
        name = f"node-{n:04d}"
        out.append({"kind": "Node", "metadata": {"name": name, "labels": {"dra": "true"}}})
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": GPU,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                        for i in range(devices)
                    ],
                },
            }
        )
    return out


def _exact(selectors: tuple[str, ...] = ()) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU, "count": 1}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return exactly


def first_available_spec(
    requests: int = 3, alternatives: int = 8, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`requests` firstAvailable requests of `alternatives` one-device alternatives each,
    then the request `last` (a ClaimSpec `requests` entry) if given."""
    entries: list[dict[str, Any]] = [
        {
            "name": f"r{r}",
            "firstAvailable": [{"name": f"a{a}", **_exact()} for a in range(alternatives)],
        }
        for r in range(requests)
    ]
    if last is not None:
        entries.append(last)
    return {"devices": {"requests": entries}}


def nothing_matches_request() -> dict[str, Any]:
    """The issue's fourth request: a selector no device matches."""
    return {"name": "nope", "exactly": _exact(('device.driver == "nope"',))}


def unsatisfiable_constraint_spec(requests: int = 3, alternatives: int = 8) -> dict[str, Any]:
    """Every request matches devices and the node has enough of them, but the last request
    wants 5 devices sharing one `index` (every device has its own): no pre-check sees it,
    and an exhaustive search would try every pick of the firstAvailable requests first."""
    last = {"name": "last", "exactly": {**_exact(), "count": 5}}
    spec = first_available_spec(requests, alternatives, last)
    spec["devices"]["constraints"] = [{"matchAttribute": f"{GPU}/index", "requests": ["last"]}]
    return spec


def nested_bind_equality(levels: int = 8, width: int = 10) -> str:
    """List equality nested under `levels` cel.bind: a value of width**levels leaves."""
    items = ",".join(str(i) for i in range(1, width + 1))
    text = f"cel.bind(a0, [{items}], "
    for level in range(1, levels):
        text += f"cel.bind(a{level}, [{','.join([f'a{level - 1}'] * width)}], "
    return text + f'a{levels - 1} == a{levels - 1} && device.driver == "{GPU}"' + ")" * levels


def cel_spec(expression: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": _exact((expression,))}]}}


def template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": spec},
    }


def pod(
    name: str,
    templates: tuple[str, ...] = (),
    cpu: str = "100m",
    queue: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if queue is not None:
        metadata["labels"] = {"draquota.io/queue-name": queue}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": cpu},
                        "claims": [{"name": t} for t in templates],
                    },
                }
            ],
            "resourceClaims": [{"name": t, "resourceClaimTemplateName": t} for t in templates],
        },
    }
