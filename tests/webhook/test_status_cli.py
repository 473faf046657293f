"""`draquota status` as an admin sees it: every ClusterQueue with its cohort lending, and
with -A every LocalQueue and workload (issue 25)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from webhook.cli import main

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")

# Recorded from the real control plane by tests/webhook/kube/record_user_view.py: in cohort
# lab, research (4 GPUs, lendingLimit 2) runs 2 pods and has lent 2 GPUs to ml (2 GPUs),
# which runs 4; pod eval-0, pod group pair and Job sweep wait in research.
LAB = Path(__file__).parent / "fixtures" / "user-view" / "admin"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(block: str) -> list[dict[str, str]]:
    header, *rows = [re.split(r" {3,}", line.strip()) for line in block.splitlines()]
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_status_lendable_is_what_is_left_after_lending_and_names_the_borrower(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "status", "--state", str(LAB), "-o", "wide")
    assert (code, err) == (0, "")
    rows = {row["CLUSTERQUEUE"]: row for row in _rows(out)}
    research, ml = rows["research"], rows["ml"]
    assert (research["IN USE"], research["LENDABLE"]) == ("2", "0")  # ml borrowed the 2
    assert (research["LENT"], research["LENT TO"], research["BORROWED FROM"]) == ("2", "ml:2", "-")
    assert (ml["IN USE"], ml["BORROWED"], ml["BORROWED FROM"]) == ("4", "2", "research:2")
    code, out, _ = _run(capsys, "status", "--state", str(LAB), "-o", "json")
    items = {item["name"]: item for item in json.loads(out)["items"]}
    (gpus,) = items["research"]["flavors"][0]["resources"]
    assert {k: gpus[k] for k in ("borrowed", "lendable", "lent", "lentTo")} == {
        "borrowed": "0",
        "lendable": "0",
        "lent": "2",
        "lentTo": [{"clusterQueue": "ml", "amount": "2"}],
    }


def test_status_of_all_namespaces_lists_queues_local_queues_and_workloads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "status", "--state", str(LAB), "-A")
    assert code == 0
    queues, local_queues, workloads, notes = out.split("\n\n")
    assert [r["CLUSTERQUEUE"] for r in _rows(queues)] == ["ml", "research"]
    assert [(r["NAMESPACE"], r["LOCALQUEUE"]) for r in _rows(local_queues)] == [
        ("ml", "default"),
        ("research", "default"),
    ]
    listed = [(r["NAMESPACE"], r["WORKLOAD"], r["STATUS"], r["POSITION"]) for r in _rows(workloads)]
    assert listed == [
        *(("ml", f"tune-{i}", "Admitted", "-") for i in range(4)),
        ("research", "train-0", "Admitted", "-"),
        ("research", "train-1", "Admitted", "-"),
        ("research", "eval-0", "Waiting", "1 of 3"),
        ("research", "pair", "Waiting", "2 of 3"),
        ("research", "sweep", "Waiting", "3 of 3"),
    ]
    assert notes.splitlines()[0].startswith("pod research/eval-0: waiting for quota: ")
