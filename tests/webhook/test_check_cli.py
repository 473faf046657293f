"""`draquota check`: decisions in order over the example cluster, JSON and human output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
WORKLOADS = sorted((EXAMPLES / "workloads").glob("*.yaml"))
STATE = EXAMPLES / "cluster"

EXPECTED = [
    ("Pod", "team-a", "train-0", True, "Admitted"),
    ("Pod", "team-a", "train-1", True, "Admitted"),
    ("Pod", "team-a", "train-2", False, "QuotaExceeded"),
    ("Pod", "team-b", "nic-test", False, "UnmappedDeviceClass"),
    ("Job", "team-a", "sweep", True, "Admitted"),
    ("Job", "team-b", "big-sweep", False, "QuotaExceeded"),
    ("Pod", "team-b", "infer-0", True, "Admitted"),
    ("Pod", "sandbox", "scratch", False, "LocalQueueNotFound"),
    ("Pod", "sandbox", "hello", True, "NotManaged"),
    ("Pod", "team-a", "allreduce-0", False, "Unplaceable"),
]


def _check_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(["check", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["items"]


def test_example_workloads_decided_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    items = _check_json(capsys, *map(str, WORKLOADS), "--state", str(STATE))
    got = [(i["kind"], i["namespace"], i["name"], i["allowed"], i["reason"]) for i in items]
    assert got == EXPECTED
    by_name = {item["name"]: item for item in items}
    assert by_name["train-0"]["charge"]["flavors"]["gpus"] == "on-demand"
    assert by_name["train-0"]["warnings"] == []
    assert by_name["train-1"]["warnings"] == [
        "pod team-a/train-1 borrows quota from cohort research"
    ]
    # 3 GPUs of the running pods (shared claim once, forged annotation recomputed) + 1 + 2
    assert by_name["train-2"]["message"].endswith(
        "insufficient unused quota for gpus (DeviceClass gpu.example.com) in flavor on-demand, "
        "5 more needed "
        "(requested 6, in use 6 of nominal 4, cohort research can lend 1)"
    )
    assert by_name["infer-0"]["charge"]["flavors"]["gpus"] == "spot"
    assert by_name["infer-0"]["nodeSelector"] == {"cloud.example.com/capacity": "spot"}
    assert by_name["sweep"]["charge"] is None
    assert by_name["allreduce-0"]["message"].endswith(
        "request gpu of claim five-gpus-one-root: needs 5 devices of class gpu.example.com "
        "with the same resource.kubernetes.io/pcieRoot; the most any node offers is 4"
    )
    for item in items:
        assert set(item) >= {
            "kind",
            "namespace",
            "name",
            "allowed",
            "message",
            "warnings",
            "charge",
        }


QUEUEING = [
    # (name, allowed, reason, waits): batch-reject denies when full, batch-queue lets pods wait
    ("reject-1", True, "Admitted", False),
    ("reject-2", True, "Admitted", False),
    ("reject-3", False, "QuotaExceeded", False),
    ("queue-1", True, "Admitted", False),
    ("queue-2", True, "Admitted", False),
    ("queue-3", True, "Queued", True),
    ("queue-4", True, "Queued", True),
    ("queue-5", False, "QuotaExceeded", False),
    ("queue-job", True, "Queued", True),
]


def test_a_queueing_queue_beside_a_rejecting_one(capsys: pytest.CaptureFixture[str]) -> None:
    items = _check_json(capsys, str(EXAMPLES / "queueing"), "--state", str(STATE))
    assert [(i["name"], i["allowed"], i["reason"], i["waits"]) for i in items] == QUEUEING
    by_name = {item["name"]: item for item in items}
    assert by_name["queue-3"]["message"].endswith("2 more needed (requested 2, in use 4 of "
                                                  "nominal 4); position 1 of 3")  # fmt: skip
    assert by_name["queue-job"]["message"].endswith("4 more needed (requested 4, in use 4 of "
                                                    "nominal 4); position 3 of 3")  # fmt: skip
    assert by_name["queue-5"]["message"].endswith("request > maximum capacity (6 > 4) (nominal 4)")


def test_admitted_pods_count_against_the_next(capsys: pytest.CaptureFixture[str]) -> None:
    one = str(EXAMPLES / "workloads" / "01-admit.yaml")
    alone = _check_json(
        capsys, str(EXAMPLES / "workloads" / "03-deny-over-quota.yaml"), "--state", str(STATE)
    )
    assert "(requested 6, in use 3 of nominal 4" in alone[0]["message"]
    items = _check_json(
        capsys, one, one.replace("01-admit", "03-deny-over-quota"), "--state", str(STATE)
    )
    assert "(requested 6, in use 4 of nominal 4" in items[1]["message"]


def test_human_output_is_a_table_with_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", *map(str, WORKLOADS), "--state", str(STATE)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == [
        "KIND",
        "NAMESPACE",
        "NAME",
        "DECISION",
        "REASON",
        "QUEUE",
        "FLAVOR",
        "CHARGE",
    ]
    assert "DENIED" in out and "admitted" in out
    assert "team-b/nic-test: pod team-b/nic-test: device class nic.example.com not mapped" in out


def test_malformed_object_is_a_denial_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: broken, namespace: team-a}\n"
        "spec: {resourceClaims: [{name: x}]}\n"
        "---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: fine, namespace: sandbox}\n"
        "spec: {containers: [{name: c, image: i}]}\n"
    )
    items = _check_json(capsys, str(bad), "--state", str(STATE))
    assert [(i["name"], i["allowed"]) for i in items] == [("broken", False), ("fine", True)]
    assert items[0]["reason"] == "InvalidObject"
    assert "pod team-a/broken: spec.resourceClaims[0]" in items[0]["message"]


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: [\n")
    assert main(["check", str(bad), "--state", str(STATE)]) == 2
    assert "invalid YAML" in capsys.readouterr().err


def test_config_file_settings_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("unmappedDeviceClass: Ignore\n")
    nic = str(EXAMPLES / "workloads" / "04-deny-unmapped-class.yaml")
    items = _check_json(capsys, nic, "--state", str(STATE), "--config", str(config))
    assert items[0]["allowed"] is True
    assert items[0]["charge"]["deviceClasses"] == {"gpu.example.com": 1, "nic.example.com": 1}
    config.write_text("placement: Sometimes\n")
    assert main(["check", nic, "--state", str(STATE), "--config", str(config)]) == 2


def test_quota_only_state_decides_by_quota_with_lending_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"b{i}", "namespace": "ns-b"},
            "spec": {
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one"}],
            },
        }
        for i in range(9)
    ]
    inputs = tmp_path / "pods.yaml"
    inputs.write_text(yaml.safe_dump_all(pods))
    state = Path(__file__).parent / "fixtures" / "quota-only"
    items = _check_json(capsys, str(inputs), "--state", str(state))
    assert [i["allowed"] for i in items] == [True] * 7 + [False] * 2
    assert [bool(i["warnings"]) for i in items[:7]] == [False] * 5 + [True] * 2
    assert items[7]["message"] == (
        'pod ns-b/b7 exceeds quota of ClusterQueue "b" (LocalQueue ns-b/default): '
        "insufficient unused quota for gpus (DeviceClass gpu) in flavor default, 1 more needed "
        "(requested 1, in use 7 of nominal 5, cohort c can lend 0)"
    )
