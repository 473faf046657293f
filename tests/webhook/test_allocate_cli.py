"""`draquota allocate`: all claims given are placed together on one node (SPEC §7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import main

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")

GPU = "gpu.example.com"


def _slice(node: str, n: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": GPU,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(n)],
        },
    }


def _claim(name: str, count: int = 1, **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU, "count": count}}]
            }
        },
    }
    if status:
        obj["status"] = status
    return obj


@pytest.fixture
def state(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    root.mkdir()
    busy = _claim(
        "busy",
        allocation={
            "devices": {
                "results": [{"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-0"}]
            }
        },
    )
    objects = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
        },
        {"kind": "Node", "metadata": {"name": "node-1"}},
        {"kind": "Node", "metadata": {"name": "node-2"}},
        _slice("node-1", 2),
        _slice("node-2", 4),
        busy,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two", "namespace": "team-a"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 2}}
                        ]
                    }
                }
            },
        },
    ]
    (root / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    return root


def _write(tmp_path: Path, *objects: dict[str, Any]) -> Path:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(["allocate", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv and code == 0 else out


def test_claims_are_placed_together_honouring_allocated_devices(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _claim("a"), _claim("b"))
    code, doc = _run(capsys, str(path), "--state", str(state), "--json")
    assert code == 0
    items = doc["items"]
    assert [(i["name"], i["ok"], i["node"]) for i in items] == [
        ("a", True, "node-2"),
        ("b", True, "node-2"),
    ]
    assert [i["allocation"]["devices"]["results"][0]["device"] for i in items] == [
        "gpu-0",
        "gpu-1",
    ]


def test_node_option_pins_the_node(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _claim("a"))
    code, doc = _run(capsys, str(path), "--state", str(state), "--node", "node-1", "--json")
    assert code == 0
    (item,) = doc["items"]
    assert item["node"] == "node-1"
    assert item["allocation"]["devices"]["results"][0]["device"] == "gpu-1"


def test_unplaceable_claims_are_reported_not_failed(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _claim("huge", count=5))
    code, doc = _run(capsys, str(path), "--state", str(state), "--json")
    assert code == 0
    (item,) = doc["items"]
    assert item["ok"] is False and item["allocation"] is None and item["node"] is None
    assert (
        "needs 5 devices of class gpu.example.com; the most any node offers is 4"
        in (item["reason"])
    )


def test_pod_template_claims_are_placed(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [
                {"name": "first", "resourceClaimTemplateName": "two"},
                {"name": "second", "resourceClaimTemplateName": "two"},
            ],
        },
    }
    code, doc = _run(capsys, str(_write(tmp_path, pod)), "--state", str(state), "--json")
    assert code == 0
    assert [(i["name"], i["node"]) for i in doc["items"]] == [
        ("train-first", "node-2"),
        ("train-second", "node-2"),
    ]


def test_text_output(tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, str(_write(tmp_path, _claim("a"))), "--state", str(state))
    assert code == 0
    assert "node-1" in out and "gpu=gpu.example.com/node-1/gpu-1" in out


@pytest.mark.parametrize(
    ("claim", "argv", "message"),
    [
        (
            {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": GPU,
                                    "selectors": [{"cel": {"expression": "nope == 1"}}],
                                },
                            }
                        ]
                    }
                }
            },
            [],
            "undeclared reference",
        ),
        (
            {
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}
                }
            },
            [],
            "could not retrieve device class x",
        ),
        ({}, ["--node", "node-9"], "Node node-9 not found"),
    ],
    ids=["invalid-cel", "unknown-class", "unknown-node"],
)
def test_bad_input_exits_2(
    tmp_path: Path,
    state: Path,
    capsys: pytest.CaptureFixture[str],
    claim: dict[str, Any],
    argv: list[str],
    message: str,
) -> None:
    obj = _claim("bad") | claim
    code = main(["allocate", str(_write(tmp_path, obj)), "--state", str(state), *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def _realistic_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Issue 27's claim pair: a firstAvailable list and partitions of one GPU's 9 devices
    sharing counters, on an 8-GPU node where some partitions are taken."""
    from tests.quota.allocator import realistic

    (case,) = [c for c in realistic.cases() if c.id == "realistic-27-113"]
    root = tmp_path / "gpus"
    root.mkdir()
    held = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"held-{i}", "namespace": "team-b"},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "r", "driver": GPU, "pool": "node-1", "device": name}
                        ]
                    }
                }
            },
        }
        for i, name in enumerate(case.allocated)
    ]
    objects = [*realistic.classes(), realistic.node(), *realistic.slices(), *held]
    (root / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    claims = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"c{i}", "namespace": "team-a"},
            "spec": spec,
        }
        for i, spec in enumerate(case.claims)
    ]
    return root, _write(tmp_path, *claims)


def test_realistic_claim_pair_is_placed_within_the_default_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, path = _realistic_pair(tmp_path)
    code, bounded = _run(capsys, str(path), "--state", str(state), "--json")
    assert code == 0
    assert [i["ok"] for i in bounded["items"]] == [True, True]
    code, unbounded = _run(capsys, str(path), "--state", str(state), "--json", "--max-steps", "0")
    assert code == 0
    assert unbounded["items"] == bounded["items"]


def test_max_steps_bounds_the_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state, path = _realistic_pair(tmp_path)
    code, doc = _run(capsys, str(path), "--state", str(state), "--json", "--max-steps", "50")
    assert code == 0
    assert all(not i["ok"] for i in doc["items"])
    assert doc["items"][0]["reason"].startswith("too complex to check: the device search took")


def test_max_steps_must_not_be_negative(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _claim("a"))
    with pytest.raises(SystemExit) as exited:
        main(["allocate", str(path), "--state", str(state), "--max-steps", "-1"])
    assert exited.value.code == 2
    assert "must be 0 (no bound) or more, not -1" in capsys.readouterr().err
