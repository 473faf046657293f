"""Pod-template workloads: one pod of each, and how many run at once (SPEC §3.5)."""

from __future__ import annotations

from typing import Any

import pytest

from quota.errors import InvalidObject
from quota.workloads import as_workload

TEMPLATE = {
    "metadata": {"labels": {"draquota.io/queue-name": "q"}},
    "spec": {"containers": [{"name": "a", "image": "x"}]},
}


def _obj(kind: str, spec: dict[str, Any], api: str = "apps/v1") -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("obj", "pods", "path"),
    [
        pytest.param(
            _obj("Deployment", {"replicas": 5, "template": TEMPLATE}),
            1,
            "spec.template",
            id="deployment",
        ),
        pytest.param(
            _obj("StatefulSet", {"template": TEMPLATE}), 1, "spec.template", id="statefulset"
        ),
        pytest.param(_obj("DaemonSet", {"template": TEMPLATE}), 1, "spec.template", id="daemonset"),
        pytest.param(
            _obj("ReplicaSet", {"template": TEMPLATE}), 1, "spec.template", id="replicaset"
        ),
        pytest.param(
            _obj("Job", {"template": TEMPLATE}, "batch/v1"), 1, "spec.template", id="job-defaults"
        ),
        pytest.param(
            _obj("Job", {"parallelism": 4, "completions": 10, "template": TEMPLATE}, "batch/v1"),
            4,
            "spec.template",
            id="job-parallelism-bound",
        ),
        pytest.param(
            _obj("Job", {"parallelism": 4, "completions": 2, "template": TEMPLATE}, "batch/v1"),
            2,
            "spec.template",
            id="job-completions-bound",
        ),
        pytest.param(
            _obj("Job", {"parallelism": 3, "template": TEMPLATE}, "batch/v1"),
            3,
            "spec.template",
            id="job-work-queue",
        ),
        pytest.param(
            _obj("Job", {"completions": 5, "template": TEMPLATE}, "batch/v1"),
            1,
            "spec.template",
            id="job-completions-default-parallelism",
        ),
        pytest.param(
            _obj(
                "CronJob",
                {"jobTemplate": {"spec": {"parallelism": 2, "template": TEMPLATE}}},
                "batch/v1",
            ),
            2,
            "spec.jobTemplate.spec.template",
            id="cronjob",
        ),
    ],
)
def test_workload_pod_template(obj: dict[str, Any], pods: int, path: str) -> None:
    workload = as_workload(obj)
    assert workload.pods == pods
    assert workload.template_path == path
    assert workload.pod["kind"] == "Pod"
    assert workload.pod["metadata"]["namespace"] == "team-a"
    assert workload.pod["metadata"]["labels"]["draquota.io/queue-name"] == "q"
    assert workload.pod["spec"] is TEMPLATE["spec"]


def test_pod_is_its_own_workload() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    workload = as_workload(pod)
    assert (workload.ref, workload.namespace, workload.pods) == ("Pod default/p", "default", 1)


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({"kind": "ConfigMap", "metadata": {"name": "x"}}, "kind"),
        ({"metadata": {"name": "x"}}, "kind"),
        ({"kind": "Job", "metadata": {"name": "x"}, "spec": {}}, "spec.template.spec"),
        (
            {
                "kind": "Job",
                "metadata": {"name": "x"},
                "spec": {"parallelism": -1, "template": TEMPLATE},
            },
            "spec.parallelism",
        ),
        (
            {"kind": "Deployment", "metadata": {"name": "x"}, "spec": {"template": "nope"}},
            "spec.template",
        ),
    ],
)
def test_bad_workloads_are_errors(obj: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidObject) as info:
        as_workload(obj)
    assert info.value.path == path
