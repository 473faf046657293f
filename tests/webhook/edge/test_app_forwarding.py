"""The app's edge rules for forwarding: who decides /validate, and that nothing loops.

Reviews are ones the real API server sent (`forwarding_lab`); the forwarding itself (TLS,
failures) is tested in test_forwarding.py, here a forwarder that only notes its calls.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest

from quota.settings import Settings
from tests.webhook.builders import AppClient, FakeBackend, cluster_objects
from tests.webhook.forwarding_lab import POD_REF, Election, recorded_review, uid_of
from webhook.edge.app import create_app
from webhook.edge.forwarding import FORWARDED_HEADER, UNAVAILABLE, Forwarded, Forwarder, denial
from webhook.edge.metrics import Metrics
from webhook.edge.review import AdmissionRequest
from webhook.ledger.elected import HeldElsewhere
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState

# What the elected replica answered, as it wrote it (spacing and all): passed on unchanged.
ELECTED_ANSWER = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": '


class NotingForwarder(Forwarder):
    """A forwarder whose elected replica answers `allowed` at once, noting every body."""

    def __init__(self, election: Election) -> None:
        super().__init__(election, Path("/nonexistent"), 2.0, "replica-1")
        self.bodies: list[bytes] = []
        self.reachable = True

    async def forward(self, req: AdmissionRequest, body: bytes) -> Forwarded:
        if not self.reachable:
            return Forwarded(denial(req, "the admitting replica is unreachable"), "unavailable")
        self.bodies.append(body)
        answer = b'%s{"uid": "%s", "allowed": true}}' % (ELECTED_ANSWER, uid_of(body).encode())
        return Forwarded((200, answer), "forwarded")


class ElectedLedger(MemoryLedger):
    """MemoryLedger that holds quota only while elected, as ClusterLedger with an elector:
    elsewhere a decision that would hold quota raises HeldElsewhere (webhook.ledger.elected)."""

    def __init__(self, state: ClusterState, election: Election) -> None:
        super().__init__(state, Settings())
        self.election = election

    def admit(self, uid: str, evaluate: Any, dry_run: bool, *args: Any, **kwargs: Any) -> Any:
        if dry_run or self.election.leading():
            return super().admit(uid, evaluate, dry_run, *args, **kwargs)
        decision = super().admit(uid, evaluate, True, *args, **kwargs)
        if decision.allowed and decision.charge is not None:
            raise HeldElsewhere(decision.charge.cluster_queue)
        return decision


class Replica:
    """One replica's app over the recorded cluster's names (template team-a/gpu)."""

    def __init__(self, lead: bool | None, require_client_cert: bool = False) -> None:
        objects = cluster_objects(2)
        template = next(o for o in objects if o["kind"] == "ResourceClaimTemplate")
        renamed = copy.deepcopy(template)
        renamed["metadata"]["name"] = "gpu"  # as the recorded pod names it
        self.backend = FakeBackend(ClusterState([*objects, renamed]))
        election = Election(lead=bool(lead))
        self.ledger: MemoryLedger = (
            MemoryLedger(self.backend.state, Settings())
            if lead is None
            else ElectedLedger(self.backend.state, election)
        )
        self.metrics = Metrics()
        self.forwarder = None if lead is None else NotingForwarder(election)
        self.client = AppClient(
            create_app(
                self.backend,
                self.ledger,
                Settings(),
                metrics=self.metrics,
                require_client_cert=require_client_cert,
                forwarder=self.forwarder,
            )
        )

    def post(self, endpoint: str, body: bytes, forwarded: bool = False) -> Any:
        headers = {FORWARDED_HEADER: "replica-0"} if forwarded else {}
        return self.client.post(f"/{endpoint}", content=body, headers=headers)

    def mutated(self, body: bytes) -> bytes:
        """`body` as the API server validates it after this replica's /mutate patch."""
        review = orjson.loads(body)
        patch = self.post("mutate", body).json()["response"]["patch"]
        ops = orjson.loads(base64.b64decode(patch))
        review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], ops)
        return orjson.dumps(review)

    def forwarded(self, outcome: str) -> float:
        text = self.metrics.render().decode()
        line = f'draquota_forwarded_requests_total{{outcome="{outcome}"}} '
        return next((float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)), 0)


def test_a_replica_not_elected_answers_validate_with_the_elected_replicas_answer() -> None:
    replica = Replica(lead=False)
    body = recorded_review()
    answer = replica.post("validate", body)
    assert answer.status_code == 200
    assert answer.content.startswith(ELECTED_ANSWER)  # as the elected replica wrote it
    assert answer.json()["response"] == {"uid": uid_of(body), "allowed": True}
    assert replica.forwarder is not None and replica.forwarder.bodies == [body]
    assert replica.ledger.reservations() == {}  # it decided nothing itself
    assert replica.forwarded("forwarded") == 1


def test_a_forwarded_request_at_a_replica_no_longer_elected_is_denied_not_forwarded_again() -> None:
    replica = Replica(lead=False)
    body = replica.mutated(recorded_review())  # it would hold quota
    answer = replica.post("validate", body, forwarded=True)
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["uid"] == uid_of(body) and response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == UNAVAILABLE
    message = response["status"]["message"]
    assert message.startswith(f"{POD_REF}: ") and message.endswith("submit again")
    assert replica.forwarder is not None and replica.forwarder.bodies == []
    assert replica.forwarded("moved") == 1
    assert replica.ledger.reservations() == {}


@pytest.mark.parametrize(
    "fixture",
    [
        "pod-update-kubectl-label",
        "pod-update-job-controller-removes-finalizer",
        "pod-update-scheduling-gate-removed",
        "resourceclaim-create-by-resourceclaim-controller",
        "job-update-suspend",
    ],
)
def test_what_holds_no_quota_is_answered_by_any_replica_itself(fixture: str) -> None:
    """Never fail closed on what draquota does not enforce: an update, a claim, a Job is
    answered where it arrives, as one replica would, even while the elected replica cannot
    be reached."""
    replica, alone = Replica(lead=False), Replica(lead=None)
    replica.forwarder.reachable = False  # type: ignore[union-attr]
    body = recorded_review(fixture)
    answer = replica.post("validate", body).json()["response"]
    assert answer == alone.post("validate", body).json()["response"]  # as one replica says
    assert answer["uid"] == uid_of(body)
    assert replica.forwarder is not None and replica.forwarder.bodies == []
    assert replica.forwarded("unavailable") == 0


def test_a_pod_create_the_elected_replica_cannot_take_is_decided_here_but_holds_nothing() -> None:
    replica = Replica(lead=False)
    assert replica.forwarder is not None
    replica.forwarder.reachable = False
    denied = replica.post("validate", recorded_review()).json()["response"]  # no /mutate stamp
    assert denied["allowed"] is False and denied["status"]["reason"] == "ChargeMismatch"
    would_hold = replica.post("validate", replica.mutated(recorded_review())).json()["response"]
    assert would_hold["allowed"] is False
    assert would_hold["status"]["reason"] == UNAVAILABLE
    assert "submit again" in would_hold["status"]["message"]
    assert replica.ledger.reservations() == {}
    assert replica.forwarded("unavailable") == 2 and replica.forwarded("forwarded") == 0


@pytest.mark.parametrize("forwarded", [False, True], ids=["direct", "forwarded"])
def test_the_elected_replica_decides_a_forwarded_request_as_a_direct_one(
    forwarded: bool,
) -> None:
    replica = Replica(lead=True)
    body = replica.mutated(recorded_review())
    response = replica.post("validate", body, forwarded=forwarded).json()["response"]
    assert response["uid"] == uid_of(body) and response["allowed"] is True
    assert set(replica.ledger.reservations()) == {
        orjson.loads(body)["request"]["object"]["metadata"]["uid"]
    }
    assert replica.forwarder is not None and replica.forwarder.bodies == []


def test_without_a_forwarder_the_header_changes_nothing() -> None:
    direct_replica, marked_replica = Replica(lead=None), Replica(lead=None)
    body = direct_replica.mutated(recorded_review())
    direct = direct_replica.post("validate", body).json()
    marked = marked_replica.post("validate", body, forwarded=True).json()
    assert direct == marked and direct["response"]["allowed"] is True


def test_mutate_is_decided_by_every_replica_itself() -> None:
    replica = Replica(lead=False)
    body = recorded_review()
    response = replica.post("mutate", body).json()["response"]
    assert response["uid"] == uid_of(body) and response["allowed"] is True
    assert "patch" in response  # the queue label and charge annotation: its own decision
    assert replica.forwarder is not None and replica.forwarder.bodies == []


def test_a_client_certificate_is_required_before_anything_is_forwarded() -> None:
    replica = Replica(lead=False, require_client_cert=True)
    answer = replica.post("validate", recorded_review())
    assert answer.status_code == 403
    assert replica.forwarder is not None and replica.forwarder.bodies == []
    assert replica.forwarded("forwarded") == 0


def test_a_replica_is_ready_once_it_has_read_the_lease_whoever_holds_it() -> None:
    replica = Replica(lead=False)
    assert replica.forwarder is not None
    election = replica.forwarder.elected
    assert isinstance(election, Election)
    election.seen = False  # starting: the Lease not read yet
    answer = replica.client.get("/readyz")
    assert answer.status_code == 503 and "Lease" in answer.json()["reason"]
    election.seen = True  # read: ready, also while nobody holds it (it answers what it can)
    assert replica.client.get("/readyz").status_code == 200
    election.seen, election.lead = False, True
    assert replica.client.get("/readyz").status_code == 200
