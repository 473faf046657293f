"""`draquota count` prints devices per DeviceClass (SPEC §7), and what counter and capacity
resources charge (issue 27)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from quota.quantity import parse_quantity
from tests.webhook import gpu_memory
from tests.webhook.gpu_memory import write_state
from webhook.cli import main

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")

RECORDED = gpu_memory.RECORDED.parent  # ResourceSlices and claims from the real API server

GPU_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1beta2",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "gpu-tmpl", "namespace": "team-a"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}
                ]
            }
        }
    },
}
SHARED = {
    "apiVersion": "resource.k8s.io/v1beta1",
    "kind": "ResourceClaim",
    "metadata": {"name": "shared", "namespace": "team-a"},
    "spec": {"devices": {"requests": [{"name": "nic", "deviceClassName": "nic.example.com"}]}},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train-0", "namespace": "team-a"},
    "spec": {
        "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"},
            {"name": "nic", "resourceClaimName": "shared"},
        ],
        "containers": [{"name": "main", "image": "x"}],
    },
}
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"parallelism": 4, "template": {"spec": POD["spec"]}},
}


def _write(path: Path, *docs: dict) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_count_json_for_claims_templates_pods_and_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    _write(state / "claims.yaml", GPU_TEMPLATE, SHARED)
    inputs = _write(tmp_path / "in.yaml", POD, JOB, SHARED)
    code, out, _ = _run("count", str(inputs), "--state", str(state), "--json", capsys=capsys)
    assert code == 0
    assert json.loads(out) == {
        "items": [
            {
                "kind": "Pod",
                "namespace": "team-a",
                "name": "train-0",
                "devices": {"gpu.example.com": 2, "nic.example.com": 1},
            },
            {
                "kind": "Job",
                "namespace": "team-a",
                "name": "train",
                "devices": {"gpu.example.com": 2, "nic.example.com": 1},
            },
            {
                "kind": "ResourceClaim",
                "namespace": "team-a",
                "name": "shared",
                "devices": {"nic.example.com": 1},
            },
        ]
    }


def test_count_table_is_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = _write(tmp_path / "in.yaml", GPU_TEMPLATE, SHARED, POD)
    code, out, _ = _run("count", str(inputs), capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["KIND", "NAMESPACE", "NAME", "DEVICES"]
    assert lines[3].split() == [
        "Pod",
        "team-a",
        "train-0",
        "gpu.example.com=2,",
        "nic.example.com=1",
    ]


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        pytest.param(
            [POD], "ResourceClaimTemplate team-a/gpu-tmpl not found", id="missing-template"
        ),
        pytest.param(
            [
                {
                    **SHARED,
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "nic", "deviceClassName": "nic", "allocationMode": "Foo"}
                            ]
                        }
                    },
                }
            ],
            "ResourceClaim team-a/shared: spec.devices.requests[0].allocationMode: "
            'unsupported value "Foo"',
            id="unknown-mode",
        ),
        pytest.param(["just a string"], "not a Kubernetes object", id="not-an-object"),
        pytest.param(
            [{"apiVersion": "v1", "kind": "Pod"}], "not a Kubernetes object", id="no-metadata"
        ),
    ],
)
def test_bad_input_exits_2_with_the_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list, message: str
) -> None:
    inputs = _write(tmp_path / "in.yaml", *docs)
    code, out, err = _run("count", str(inputs), "--json", capsys=capsys)
    assert code == 2
    assert out == ""
    assert message in err


def test_invalid_yaml_and_missing_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed")
    assert _run("count", str(bad), capsys=capsys)[0] == 2
    assert _run("count", str(tmp_path / "nope.yaml"), capsys=capsys)[0] == 2


def test_console_script_runs(tmp_path: Path) -> None:
    inputs = _write(tmp_path / "in.yaml", GPU_TEMPLATE)
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "count", str(inputs), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["items"][0]["devices"] == {"gpu.example.com": 2}


def _queue(*resources: dict) -> dict:
    """A ClusterQueue with `resources` in one flavor (what `count` reads of it: the sources)."""
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "net"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [r["name"] for r in resources],
                    "flavors": [{"name": "default", "resources": list(resources)}],
                }
            ],
        },
    }


def test_count_shows_the_gpu_memory_recorded_claims_and_a_pod_are_charged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = write_state(tmp_path / "state", gpu_memory.objects())
    notebook = next(
        doc
        for doc in yaml.safe_load_all((gpu_memory.EXAMPLE / "01-slices.yaml").read_text())
        if doc and doc["kind"] == "Pod"
    )
    # the claims kube-scheduler allocated on the real control plane, and a notebook pod
    inputs = _write(tmp_path / "in.yaml", *gpu_memory.recorded("ResourceClaim"), notebook)
    code, out, err = _run("count", str(inputs), "--state", str(state), capsys=capsys)
    assert (code, err) == (0, "")
    header, *rows = [line.split() for line in out.splitlines()]
    assert header == ["KIND", "NAMESPACE", "NAME", "DEVICES", "CHARGES"]
    assert rows == [
        ["ResourceClaim", "default", "mig-slice", "mig-1g.5gb.gpu.example.com=1", "gpu-memory=5Gi"],
        ["ResourceClaim", "default", "whole-a100", "a100.gpu.example.com=1", "gpu-memory=40Gi"],
        ["Pod", "vision", "notebook-1", "mig-1g.5gb.gpu.example.com=1", "gpu-memory=5Gi"],
    ]


def test_count_charges_capacity_as_the_scheduler_consumed_it_in_decimal_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = json.loads((RECORDED / "consumable.json").read_text())["items"]
    claims = [obj for obj in recording if obj["kind"] == "ResourceClaim"]
    bandwidth = {
        "name": "nic-bandwidth",
        "kind": "DeviceCapacity",
        "deviceClassNames": ["range.net.example.com", "steps.net.example.com"],
        "capacity": "bandwidth",
        "nominalQuota": "100G",
    }
    devices = [obj for obj in recording if obj["kind"] in ("DeviceClass", "ResourceSlice")]
    state = write_state(tmp_path / "state", [*devices, _queue(bandwidth)])
    inputs = _write(tmp_path / "in.yaml", *claims)
    code, out, err = _run("count", str(inputs), "--state", str(state), "--json", capsys=capsys)
    assert (code, err) == (0, "")
    charged = {item["name"]: item["charges"]["nic-bandwidth"] for item in json.loads(out)["items"]}
    consumed = {
        claim["metadata"]["name"]: result["consumedCapacity"]["bandwidth"]
        for claim in claims
        for result in claim["status"]["allocation"]["devices"]["results"]
    }
    assert set(charged) == set(consumed) and len(consumed) == 6
    for name, text in charged.items():
        # what quota charged is what the scheduler took (rounded up to the device's policy)
        assert parse_quantity(text) == parse_quantity(consumed[name]), name
        assert text.endswith("G"), f"{name}: {text} is not in the unit of nominalQuota 100G"
