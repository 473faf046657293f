"""What a namespace user sees of their queues, on the real control plane.

A user with the built-in `edit` role in their namespace (a ServiceAccount with its own
token) reads its LocalQueues through draquota-localqueue-viewer, which the API server
aggregates into `edit`: the ADMITTED and PENDING columns, and in the status the
ClusterQueue's quota, use and cohort lending, as draquota's replicas write them. The
ClusterQueues themselves stay Forbidden until an admin binds draquota-batch-user.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import (
    GPU_CLASS,
    POOL_LABEL,
    SCENARIO_LABEL,
    Flavor,
    Scenario,
    gpu_pod,
    remove_pods_later,
    scenario,
)

pytestmark = pytest.mark.e2e

STATUS_TIMEOUT = 60  # the status writer's pass is every 10 s; the informers add their lag


def _as(s: Scenario, user: Path, *args: str) -> Any:
    """kubectl as `user`, in the scenario's namespace."""
    return s.cluster.kubectl(*args, "-n", s.namespace, kubeconfig=user, check=False)


def _create_pods(s: Scenario, user: Path, *names: str) -> None:
    for name in names:
        created = s.cluster.kubectl(
            "create", "-n", s.namespace, "-f", "-", kubeconfig=user, check=False,
            stdin=yaml.safe_dump(gpu_pod(name, 1)),
        )  # fmt: skip
        assert created.returncode == 0, created.stderr


def _bound_gpus(s: Scenario) -> int:
    """GPUs of the scenario's pods the scheduler bound: the usage the status must show."""
    return sum(
        len(p["spec"].get("resourceClaims", []))
        for p in s.pods()
        if p["spec"].get("nodeName") and "deletionTimestamp" not in p["metadata"]
    )


def _local_queue(s: Scenario, user: Path) -> dict[str, Any]:
    out = _as(s, user, "get", "localqueue", "default", "-o", "yaml")
    assert out.returncode == 0, out.stderr
    return dict(yaml.safe_load(out.stdout))


def _resource(status: dict[str, Any], resource: str = "gpus") -> dict[str, Any]:
    (flavor,) = status["clusterQueue"]["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == resource)


def _columns(s: Scenario, user: Path) -> dict[str, str]:
    """`kubectl get localqueues` as the user: the row of `default`, by column header."""
    out = _as(s, user, "get", "localqueues")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    names = header.split()
    row = next(r.split() for r in rows if r.split()[0] == "default")
    return dict(zip(names, row, strict=True))


@pytest.fixture(scope="module")
def team(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-vis", Flavor("main", 4, {"e2e-vis-1": 8}))


@pytest.fixture(scope="module")
def bob(team: Scenario) -> Path:
    return team.user("bob", "edit")


def test_an_edit_user_reads_their_local_queue_with_the_real_counts(
    team: Scenario, bob: Path
) -> None:
    _create_pods(team, bob, "train-0", "train-1")
    eventually(lambda: _bound_gpus(team) == 2, timeout=60)

    def shown() -> dict[str, Any]:
        columns = _columns(team, bob)
        assert (columns["ADMITTED"], columns["PENDING"]) == ("2", "0"), columns
        return dict(_local_queue(team, bob)["status"])

    status = eventually(shown, timeout=STATUS_TIMEOUT)
    assert status["admittedWorkloads"] == 2
    assert status["clusterQueue"]["name"] == team.name
    assert "cohort" not in status["clusterQueue"]
    assert _resource(status) == {
        "name": "gpus", "nominal": "4", "inUse": str(_bound_gpus(team)), "borrowed": "0",
        "lent": "0", "lendable": "0",
    }  # fmt: skip
    (flavor,) = status["flavorsUsage"]
    assert {"name": "gpus", "total": "2"} in flavor["resources"]
    (active,) = status["conditions"]
    assert (active["type"], active["status"]) == ("Active", "True")


def test_an_edit_user_may_read_but_not_change_local_queues(team: Scenario, bob: Path) -> None:
    def can(verb: str, resource: str, *extra: str) -> str:
        out = _as(team, bob, "auth", "can-i", verb, resource, *extra)
        return str(out.stdout.strip())

    assert can("watch", "localqueues.draquota.io") == "yes"
    assert can("update", "localqueues.draquota.io") == "no"
    assert can("update", "localqueues.draquota.io", "--subresource=status") == "no"
    assert can("get", "quotaledgers.draquota.io") == "no"


@pytest.fixture
def batch_user_binding(team: Scenario) -> Iterator[str]:
    name = f"{team.name}-bob-batch-user"
    yield name
    team.cluster.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")


def test_cluster_queues_are_forbidden_to_an_edit_user_until_bound_to_batch_user(
    team: Scenario, bob: Path, batch_user_binding: str
) -> None:
    denied = _as(team, bob, "get", "clusterqueues")
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr and "clusterqueues" in denied.stderr, denied.stderr
    team.cluster.kubectl(
        "create", "clusterrolebinding", batch_user_binding, "--clusterrole=draquota-batch-user",
        f"--serviceaccount={team.namespace}:bob",
    )  # fmt: skip

    def listed() -> list[str]:
        out = _as(team, bob, "get", "clusterqueues", "-o", "name")
        assert out.returncode == 0, out.stderr
        return list(out.stdout.split())

    assert f"clusterqueue.draquota.io/{team.name}" in eventually(listed, timeout=30)
    assert _as(team, bob, "get", "resourceflavors").returncode == 0
    # reading is all it gives
    edit = _as(team, bob, "patch", "clusterqueue", team.name, "--type=merge",
               "-p", json.dumps({"spec": {"cohort": "mine"}}))  # fmt: skip
    assert edit.returncode != 0 and "Forbidden" in edit.stderr, edit.stderr
    assert _as(team, bob, "get", "quotaledgers").returncode != 0


# --- a cohort: research lends 2 of its 4 GPUs, ml has none and borrows them ---------------

LAB = "e2e-lab"


def _lab_objects() -> list[dict[str, Any]]:
    flavor = {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": LAB},
        "spec": {"nodeLabels": {POOL_LABEL: LAB}},
    }
    objects: list[dict[str, Any]] = [flavor]
    for team, gpus in (("research", {"nominalQuota": 4, "lendingLimit": 2}),
                       ("ml", {"nominalQuota": 0})):  # fmt: skip
        name = f"{LAB}-{team}"
        resources = [
            {"name": "cpu", "nominalQuota": 1000},
            {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS], **gpus},
        ]
        spec = {
            "cohort": LAB,
            "namespaceSelector": {"matchLabels": {SCENARIO_LABEL: name}},
            "resourceGroups": [
                {"coveredResources": ["cpu", "gpus"],
                 "flavors": [{"name": LAB, "resources": resources}]}
            ],
        }  # fmt: skip
        request = {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}
        template = {"devices": {"requests": [request]}}
        objects += [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": name, "labels": {SCENARIO_LABEL: name}}},
            {"apiVersion": "draquota.io/v1beta1", "kind": "ClusterQueue",
             "metadata": {"name": name}, "spec": spec},
            {"apiVersion": "draquota.io/v1beta1", "kind": "LocalQueue",
             "metadata": {"name": "default", "namespace": name}, "spec": {"clusterQueue": name}},
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "gpu", "namespace": name}, "spec": {"spec": template}},
        ]  # fmt: skip
    return objects


@pytest.fixture(scope="module")
def lab(draquota_cluster: Draquota) -> tuple[Scenario, Scenario]:
    """The two teams, each a Scenario for its namespace and user (built here, not by
    `scenario()`: the two ClusterQueues share one flavor and a cohort)."""
    cluster = draquota_cluster.cluster
    cluster.fake_node(f"{LAB}-1", 8, {POOL_LABEL: LAB})
    cluster.apply(yaml.safe_dump_all(_lab_objects()))
    teams = tuple(Scenario(draquota_cluster, f"{LAB}-{t}", ()) for t in ("research", "ml"))
    for team in teams:
        remove_pods_later(team.namespace)
        eventually(team.queue_active, timeout=30)
    research, ml = teams
    return research, ml


def test_a_lender_and_a_borrower_read_who_lent_what_to_whom(lab: tuple[Scenario, Scenario]) -> None:
    research, ml = lab
    alice, carol = research.user("alice", "edit"), ml.user("carol", "edit")
    _create_pods(research, alice, "r-0", "r-1")
    _create_pods(ml, carol, "m-0", "m-1")  # nothing of its own: both borrowed from research
    eventually(lambda: (_bound_gpus(research), _bound_gpus(ml)) == (2, 2), timeout=60)

    def lent() -> dict[str, Any]:
        gpus = _resource(_local_queue(research, alice)["status"])
        assert gpus["lent"] == "2", gpus
        return gpus

    assert eventually(lent, timeout=STATUS_TIMEOUT) == {
        "name": "gpus", "nominal": "4", "inUse": "2", "borrowed": "0", "lent": "2",
        "lendable": "0", "lendingLimit": "2", "lentTo": [{"clusterQueue": ml.name, "amount": "2"}],
    }  # fmt: skip

    def borrowed() -> dict[str, Any]:
        status = dict(_local_queue(ml, carol)["status"])
        assert _resource(status)["borrowed"] == "2", status
        return status

    status = eventually(borrowed, timeout=STATUS_TIMEOUT)
    assert status["clusterQueue"]["cohort"] == LAB
    assert _resource(status) == {
        "name": "gpus", "nominal": "0", "inUse": "2", "borrowed": "2", "lent": "0",
        "lendable": "0", "borrowedFrom": [{"clusterQueue": research.name, "amount": "2"}],
    }  # fmt: skip
    assert _columns(ml, carol)["ADMITTED"] == "2"
