"""The Admission use case as a table for Jobs, CronJobs, apps workloads and ResourceClaims.

Same rows and runner as test_admission_table (pods), whose docstring says how each request
comes from the recordings of the real API server. A Job is never charged itself: its pods
are, when they are created; in a queueing ClusterQueue the queue unsuspends it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.webhook.admission.test_admit_table import (
    BOTH,
    MUTATE,
    VALIDATE,
    Request,
    Row,
    check,
    holder,
    not_ready,
    queueing,
)

JOB = "job-create"


def claims_gpu(parallelism: int) -> Callable[[Request], None]:
    """The Job's pod template claims a GPU from template `gpu`, `parallelism` pods at once."""

    def change(request: Request) -> None:
        spec = request["object"]["spec"]
        spec["parallelism"] = parallelism
        pod = spec["template"]["spec"]
        pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
        pod["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]

    return change


def count(devices: int) -> Callable[[Request], None]:
    """The claim asks for `devices` GPUs (every API version: v1beta1 has no `exactly`)."""

    def change(request: Request) -> None:
        for entry in request["object"]["spec"]["devices"]["requests"]:
            entry.get("exactly", entry)["count"] = devices

    return change


# A running pod of the queue names claim gpu-v1 (the one being created) directly.
referenced_by_running_pod = holder(
    phase="Running", spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-v1"}]}
)


WORKLOAD_ROWS = (
    # Jobs: a queueing ClusterQueue creates them suspended and starts them itself
    Row(JOB, BOTH, True),
    Row(f"{JOB}@queueing", MUTATE, True, patched=True, situation=queueing),
    Row(f"{JOB}@queueing", BOTH, True, patched=True, situation=queueing),
    Row(f"{JOB}@queueing", VALIDATE, False, "ChargeMismatch", situation=queueing),
    Row(f"{JOB}+claims-gpu", BOTH, True, change=claims_gpu(1)),
    Row(
        f"{JOB}+claims-gpu@queueing",
        BOTH,
        True,
        patched=True,
        change=claims_gpu(1),
        situation=queueing,
    ),
    Row(f"{JOB}+claims-gpu-parallelism-2", MUTATE, False, "QuotaExceeded", change=claims_gpu(2)),
    Row(
        f"{JOB}+claims-gpu@not-ready",
        MUTATE,
        False,
        "NotReady",
        change=claims_gpu(1),
        situation=not_ready,
    ),
    Row("job-update-suspend", BOTH, True),
    Row("job-update-resume", BOTH, True),
    Row("job-update-resume@queueing", VALIDATE, False, "WaitingForQuota", situation=queueing),
    Row("job-update-annotation-only", BOTH, True),
    Row("cronjob-create", BOTH, True),
    Row("cronjob-update-schedule", BOTH, True),
    # apps workloads: the queue label is carried into the pod template
    Row("deployment-create", BOTH, True),
    Row("deployment-update-queue-label", BOTH, True, patched=True),
    Row("deployment-update-image", BOTH, True, patched=True),  # labelled gpus by then
    Row("deployment-update-replicas", BOTH, True),
    Row("deployment-update-replicas-dry-run", BOTH, True),
    Row("replicaset-create-by-deployment-controller", BOTH, True),
    Row("replicaset-update-replicas-by-deployment-controller", BOTH, True),
    Row("statefulset-create", BOTH, True),
    Row("statefulset-update-replicas", BOTH, True),
    Row("daemonset-create", BOTH, True),
    Row("daemonset-update-image", BOTH, True),
    # ResourceClaims: only /validate is called; a claim nobody references is answered at once
    Row("resourceclaim-create-v1", VALIDATE, True),
    Row("resourceclaim-create-v1beta2", VALIDATE, True),
    Row("resourceclaim-create-v1beta1", VALIDATE, True),
    Row("resourceclaim-create-by-resourceclaim-controller", VALIDATE, True),
    Row("resourceclaim-create-v1beta1+count-2", VALIDATE, True, change=count(2)),
    # re-created under the name a running pod references: checked against the pod's queue
    Row(
        "resourceclaim-create-v1@referenced",
        VALIDATE,
        True,
        recorded=True,  # the pod's charge recorded again, with the claim it names now
        charged=1,
        situation=referenced_by_running_pod,
    ),
    Row(
        "resourceclaim-create-v1+count-2@referenced",
        VALIDATE,
        False,
        "QuotaExceeded",
        change=count(2),
        situation=referenced_by_running_pod,
    ),
)


@pytest.mark.parametrize("row", WORKLOAD_ROWS, ids=lambda r: f"{r.id}-{r.via}")
def test_workload_and_claim_requests(row: Row) -> None:
    check(row)
