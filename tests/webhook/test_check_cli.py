"""`draquota check`: decisions in order over the example cluster, JSON and human output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from webhook.cli import main

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")

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
        "(requested 6, in use 6 of nominal 4, 2 borrowed from ClusterQueue team-b; "
        "cohort research can lend 1)"
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
    # the queueing controller's own message, as it would write it on the pod
    assert by_name["queue-3"]["message"].endswith("2 more needed (requested 2, in use 4 of "
        "nominal 4); position 1 of 3 in ClusterQueue batch-queue")  # fmt: skip
    assert by_name["queue-job"]["message"].endswith("4 more needed (requested 4, in use 4 of "
        "nominal 4); position 3 of 3 in ClusterQueue batch-queue")  # fmt: skip
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


def test_gpu_memory_charges_print_in_the_quotas_unit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES / "gpu-memory"), "--state", str(STATE)]) == 0
    rows = {
        line.split()[2]: line for line in capsys.readouterr().out.splitlines() if line[:4] == "Pod "
    }
    assert rows["notebook-1"].endswith("gpu-memory=5Gi, gpus=1")
    assert " DENIED " in rows["notebook-9"] and " DENIED " in rows["train-0"]


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
        "(requested 1, in use 7 of nominal 5, 2 borrowed from ClusterQueue a; cohort c can lend 0)"
    )


# -- what the queueing controller would do with a pod created now ------------------------

# Recorded from the real control plane by tests/webhook/kube/record_user_view.py: in cohort
# lab, research (4 GPUs, lendingLimit 2, whenFull Queue) runs 2 pods and has lent 2 GPUs to
# ml (2 GPUs, whenFull Reject), which runs 4; waiting in research, in this order: pod eval-0,
# pod group pair (2 pods), Job sweep.
LAB = Path(__file__).parent / "fixtures" / "user-view" / "admin"


def _gpu_pod(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "x", "resources": {"claims": [{"name": "g"}]}}
            ],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpu"}],
            **spec,
        },
    }


def _inputs(tmp_path: Path, *objects: object) -> str:
    path = tmp_path / "inputs.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_a_new_pod_queues_behind_the_pods_and_jobs_already_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = _inputs(tmp_path, _gpu_pod("late"))
    (item,) = _check_json(capsys, inputs, "--state", str(LAB), "-n", "research")
    assert (item["namespace"], item["allowed"], item["waits"]) == ("research", True, True)
    assert item["message"].endswith("position 4 of 4 in ClusterQueue research")


def test_a_higher_priority_pod_goes_ahead_of_those_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urgent = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "urgent"},
        "value": 1000,
    }
    inputs = _inputs(tmp_path, urgent, _gpu_pod("late", priorityClassName="urgent"))
    (item,) = _check_json(capsys, inputs, "--state", str(LAB), "-n", "research")
    assert item["message"].endswith("position 1 of 4 in ClusterQueue research")


def test_pods_created_in_the_same_second_start_in_name_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The API server keeps creation times in whole seconds; the controller orders ties by name.
    inputs = _inputs(tmp_path, _gpu_pod("b-late"), _gpu_pod("a-late"))
    items = _check_json(capsys, inputs, "--state", str(LAB), "-n", "research")
    positions = {i["name"]: i["message"].rsplit("; ", 1)[1] for i in items}
    assert positions == {
        "b-late": "position 5 of 5 in ClusterQueue research",
        "a-late": "position 4 of 5 in ClusterQueue research",
    }


def test_a_job_in_a_full_rejecting_queue_is_denied_as_its_pods_would_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "more"},
        "spec": {"template": {"spec": {**_gpu_pod("x")["spec"], "restartPolicy": "Never"}}},
    }
    job_item, pod_item = _check_json(
        capsys, _inputs(tmp_path, job, _gpu_pod("more")), "--state", str(LAB), "-n", "ml"
    )
    assert (job_item["allowed"], job_item["reason"]) == (False, "QuotaExceeded")
    assert (pod_item["allowed"], pod_item["reason"]) == (False, "QuotaExceeded")
    assert job_item["message"].startswith("job ml/more exceeds quota")
    assert (
        job_item["message"].partition(" exceeds ")[2]
        == pod_item["message"].partition(" exceeds ")[2]
    )


def test_objects_without_a_namespace_go_to_the_namespace_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = _inputs(tmp_path, _gpu_pod("late"))
    (item,) = _check_json(capsys, inputs, "--state", str(LAB))
    assert (item["namespace"], item["reason"]) == ("default", "NotManaged")
    (item,) = _check_json(capsys, inputs, "--state", str(LAB), "--namespace", "research")
    assert (item["namespace"], item["reason"]) == ("research", "Queued")
