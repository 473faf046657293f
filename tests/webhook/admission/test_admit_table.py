"""The Admission use case as a table, without HTTP: kind x operation x situation -> outcome.

Each row is one AdmissionReview request recorded from the real v1.36.2 API server
(tests/manifests/fixtures/admission, `tests.manifests.record_reviews`; index.json says what
produced each) and the cluster it meets. The outcome is what a user or the API server
notices: allowed or denied and the reason, whether /mutate returned a patch, and, read back
from the ledger afterwards, whether it holds an admission record and the GPUs the
ClusterQueue is charged.

The recordings are the /validate copies of requests sent to an allow-all webhook, so:
- `mutate` rows send the recorded request as /mutate sees it: before storage, a create has
  no `metadata.uid`, `creationTimestamp` or `generation` yet (`_as_mutate_sees`);
- `mutate+validate` rows run the request as the API server does: /mutate, its patch applied
  to the recorded object, then /validate; `validate` rows send the recording as it is (an object
  that never passed draquota's /mutate, as when its webhook is bypassed).
Where no recording exists for a row, its id says which recording it derives from and the
one change made (`fixture+change`); a change is a named function below.

Rows for the other kinds (Jobs, apps workloads, ResourceClaims): test_admission_table_workloads.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest

from quota.charge import FlavorResource
from quota.settings import Settings
from quota.waiting import ADMISSION_GATE
from tests.recorded import epoch
from tests.security.cluster import Clock
from tests.webhook.builders import FLAVOR, QUEUE, TEMPLATE, FakeBackend, cluster_objects
from webhook.admission.admit import Admission
from webhook.edge.review import Outcome, parse_review
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState

RECORDED = Path(__file__).parents[2] / "manifests" / "fixtures" / "admission"
MUTATE, VALIDATE, BOTH = "mutate", "validate", "mutate+validate"
GPU = FlavorResource(FLAVOR, "gpu")
# The recorded terminating pod: marked deleted with this timestamp and a 30 s grace period.
TERMINATING = "pod-update-finalizer-removed-while-terminating"

Request = dict[str, Any]


def recorded_request(fixture: str) -> Request:
    return dict(json.loads((RECORDED / f"{fixture}.json").read_text(encoding="utf-8")))


def _deletion() -> dict[str, Any]:
    metadata = recorded_request(TERMINATING)["oldObject"]["metadata"]
    return {k: metadata[k] for k in ("deletionTimestamp", "deletionGracePeriodSeconds")}


@dataclass
class World:
    """What a request meets: the names the recorded traffic uses (namespace team-a, template
    `gpu` of one GPU, LocalQueues `default` and `gpus`) over a ClusterQueue of one GPU, the
    clock at the recorded terminating pod's deletion timestamp."""

    state: ClusterState
    backend: FakeBackend
    ledger: MemoryLedger
    clock: Clock
    admission: Admission

    @classmethod
    def make(cls) -> World:
        objects = cluster_objects(gpus=1)
        template = copy.deepcopy(next(o for o in objects if o["metadata"]["name"] == TEMPLATE))
        template["metadata"]["name"] = "gpu"
        gpus = copy.deepcopy(next(o for o in objects if o["kind"] == "LocalQueue"))
        gpus["metadata"]["name"] = "gpus"
        state = ClusterState([*objects, template, gpus])
        clock = Clock(epoch(_deletion()["deletionTimestamp"]))
        settings = Settings(placement="Off")
        backend = FakeBackend(state)
        ledger = MemoryLedger(state, settings, clock=clock, wall=clock)
        return cls(state, backend, ledger, clock, Admission(backend, ledger, settings))

    def charged(self) -> int:
        return self.ledger.usage().of(QUEUE).get(GPU, 0)


# -- situations: what the cluster holds before the request -------------------------------------


def queueing(world: World) -> None:
    """The ClusterQueue has `whenFull: Queue`."""
    queue = copy.deepcopy(dict(world.state.get("ClusterQueue", None, QUEUE) or {}))
    queue["spec"]["whenFull"] = "Queue"
    world.state.upsert(queue)


def not_ready(world: World) -> None:
    world.backend.readiness = (False, "informers not synced")


def holder(**changes: Any) -> Callable[[World], None]:
    """A pod holding the queue's one GPU, or not: the recorded pod `claimed` (template gpu)
    under another name and UID, with `changes` (status phase, gates, deletion) applied."""

    metadata, spec = changes.pop("metadata", {}), changes.pop("spec", {})

    def situation(world: World) -> None:
        pod = copy.deepcopy(recorded_request("pod-create-with-claim-template")["object"])
        pod["metadata"].update(name="holder", uid="uid-holder", **metadata)
        pod["spec"].update(spec)
        pod["status"] = {**pod["status"], **changes}
        world.state.upsert(pod)

    return situation


def admitted(world: World) -> None:
    """Pod `gated` was created before, gated by its user, and its queue admitted it."""
    outcome, _ = run(world, Row("pod-create-scheduling-gate", BOTH, True))
    assert outcome.allowed


def past_grace(world: World) -> None:
    """The clock past the recorded pod's deletion timestamp and grace period."""
    holder(phase="Running", metadata=_deletion())(world)
    world.clock.now += _deletion()["deletionGracePeriodSeconds"] + 1


# -- changes: the smallest change that derives a request no recording has ----------------------


def dry_run(request: Request) -> None:
    request["dryRun"] = True


def in_namespace(namespace: str) -> Callable[[Request], None]:
    def change(request: Request) -> None:
        request["namespace"] = request["object"]["metadata"]["namespace"] = namespace

    return change


def status_subresource(request: Request) -> None:
    request["subResource"] = "status"


def delete(request: Request) -> None:
    request.update(operation="DELETE", object=None, options={"kind": "DeleteOptions"})


# -- the runner --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    id: str  # the fixture, `+change` when derived, `@situation` for what the cluster holds
    via: str  # MUTATE, VALIDATE or BOTH (/mutate, its patch applied, /validate)
    allowed: bool
    reason: str = ""
    patched: bool = False  # /mutate answered with a patch
    recorded: bool = False  # the ledger holds an admission record afterwards
    charged: int = 0  # GPUs the ClusterQueue holds afterwards
    situation: Callable[[World], None] = lambda world: None
    change: Callable[[Request], None] = lambda request: None

    @property
    def fixture(self) -> str:
        return self.id.split("+")[0].split("@")[0]


def _as_mutate_sees(request: Request) -> Request:
    request = copy.deepcopy(request)
    metadata = (request.get("object") or {}).get("metadata") or {}
    if request["operation"] == "CREATE":
        for key in ("uid", "creationTimestamp", "generation"):
            metadata.pop(key, None)
    return request


def _review(admission: Admission, request: Request, mutating: bool) -> Outcome:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    outcome, _ = admission.review(parse_review(orjson.dumps(body)), mutating)
    return outcome


def run(world: World, row: Row) -> tuple[Outcome, bool]:
    """The final outcome of the row's request, and whether /mutate returned a patch."""
    request = recorded_request(row.fixture)
    row.change(request)
    if row.via == VALIDATE:
        return _review(world.admission, request, mutating=False), False
    mutated = _review(world.admission, _as_mutate_sees(request), mutating=True)
    if row.via == MUTATE or not mutated.allowed:
        return mutated, bool(mutated.patch)
    request["object"] = jsonpatch.apply_patch(request["object"], list(mutated.patch))
    return _review(world.admission, request, mutating=False), bool(mutated.patch)


def check(row: Row) -> None:
    world = World.make()
    row.situation(world)
    outcome, patched = run(world, row)
    assert (outcome.allowed, outcome.reason) == (row.allowed, row.reason), outcome.message
    assert patched is row.patched
    assert (bool(world.ledger.records()), world.charged()) == (row.recorded, row.charged)


CLAIMED = "pod-create-with-claim-template"


def holding(name: str, situation: Callable[[World], None], holds: bool) -> Row:
    """Pod `claimed` created while another pod holds the queue's one GPU (denied, the GPU
    stays the holder's) or holds nothing (admitted, the GPU is the new pod's)."""
    if holds:
        return Row(
            f"{CLAIMED}@{name}", BOTH, False, "QuotaExceeded", charged=1, situation=situation
        )
    return Row(
        f"{CLAIMED}@{name}", BOTH, True, patched=True, recorded=True, charged=1, situation=situation
    )


POD_ROWS = (
    # creates: /mutate stamps, /validate records the charge (a pod without devices too)
    Row(CLAIMED, MUTATE, True, patched=True),
    Row(CLAIMED, BOTH, True, patched=True, recorded=True, charged=1),
    Row(CLAIMED, VALIDATE, False, "ChargeMismatch"),  # never passed /mutate
    Row(f"{CLAIMED}+dry-run", BOTH, True, patched=True, change=dry_run),
    Row("pod-create-dry-run", BOTH, True, patched=True),
    Row("pod-create-plain", BOTH, True, patched=True, recorded=True),
    Row(
        "pod-create-queue-label", BOTH, True, patched=True, recorded=True
    ),  # its forged charge replaced
    Row("pod-create-scheduling-gate", BOTH, True, patched=True, recorded=True),
    Row("pod-create-by-job-controller", BOTH, True, patched=True, recorded=True),
    Row("pod-create-by-replicaset-controller", BOTH, True, patched=True, recorded=True),
    Row(f"{CLAIMED}+namespace-sandbox", BOTH, True, change=in_namespace("sandbox")),
    # never sent (namespaceSelector); no LocalQueue there either: left alone
    Row(f"{CLAIMED}+namespace-kube-system", BOTH, True, change=in_namespace("kube-system")),
    Row(f"{CLAIMED}@not-ready", MUTATE, False, "NotReady", situation=not_ready),
    # the phase of a pod already in the queue: does it hold the one GPU?
    holding("holder-pending", holder(), holds=True),
    holding("holder-running", holder(phase="Running"), holds=True),
    holding("holder-succeeded", holder(phase="Succeeded"), holds=False),
    holding("holder-failed", holder(phase="Failed"), holds=False),
    holding("holder-terminating", holder(phase="Running", metadata=_deletion()), holds=True),
    holding("holder-terminating-past-grace", past_grace, holds=False),
    holding("holder-gated", holder(spec={"schedulingGates": [{"name": ADMISSION_GATE}]}), False),
    # a queueing ClusterQueue: /mutate gates the pod, which waits and holds nothing
    Row(f"{CLAIMED}@queueing", BOTH, True, patched=True, situation=queueing),
    Row(f"{CLAIMED}@queueing", VALIDATE, False, "ChargeMismatch", situation=queueing),
    Row("pod-create-scheduling-gate@queueing", BOTH, True, situation=queueing),  # gated by its user
    # updates
    Row("pod-update-queue-label-changed", VALIDATE, False, "QueueLabelImmutable"),
    Row("pod-update-queue-label-removed", VALIDATE, False, "QueueLabelImmutable"),
    Row("pod-update-charge-annotation-changed", VALIDATE, False, "ChargeAnnotationImmutable"),
    Row("pod-update-scheduling-gate-removed", VALIDATE, False, "WaitingForQuota"),
    Row(
        "pod-update-scheduling-gate-removed@admitted",
        VALIDATE,
        True,
        recorded=True,
        situation=admitted,
    ),
    Row("pod-update-kubectl-label", VALIDATE, True),
    Row("pod-update-kubectl-label-dry-run", VALIDATE, True),
    Row("pod-update-owner-reference-added", VALIDATE, True),
    Row("pod-update-owner-reference-removed", VALIDATE, True),
    Row("pod-update-job-controller-removes-finalizer", VALIDATE, True),  # a Succeeded pod
    Row(TERMINATING, VALIDATE, True),
    Row("pod-resize", VALIDATE, True, recorded=True),  # re-checked like an admission
    # not routed (pods/status, DELETE): allowed whatever they carry
    Row(
        "pod-update-queue-label-changed+status-subresource",
        VALIDATE,
        True,
        change=status_subresource,
    ),
    Row("pod-update-kubectl-label+delete", VALIDATE, True, change=delete),
)


@pytest.mark.parametrize("row", POD_ROWS, ids=lambda r: f"{r.id}-{r.via}")
def test_pod_requests(row: Row) -> None:
    check(row)
