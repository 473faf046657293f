"""A stand-in for the API server in front of draquota, for playing a hostile namespace user.

`Cluster` does to each write what the real API server does before and after it asks
the webhooks (see tests/e2e for the same attacks against the real one): it runs
/mutate on the object as the user sent it and applies the patch, resets status and
deletion fields, gives a create its UID (and the final name of a generateName
pod), runs /validate, and stores the object only when both allowed it. Graceful
deletion sets `deletionTimestamp` and `deletionGracePeriodSeconds`, as the API
server does for a pod on a node.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import itertools
from typing import Any

import jsonpatch
import orjson

from quota.charge import FlavorResource
from quota.settings import Settings
from tests.webhook.builders import AppClient, FakeBackend, review
from webhook.edge.app import create_app
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState

__all__ = ["Clock", "Cluster"]

_uids = itertools.count(1)
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


class Clock:
    """Wall and monotonic time that a test moves forward."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def timestamp(self, offset: float = 0.0) -> str:
        at = dt.datetime.fromtimestamp(self.now + offset, dt.UTC)
        return at.isoformat(timespec="seconds").replace("+00:00", "Z")


class Cluster:
    """One draquota replica (in process, embedded ledger) behind a faithful API server."""

    def __init__(self, objects: list[dict[str, Any]], settings: Settings | None = None) -> None:
        self.clock = Clock()
        self.settings = settings or Settings(placement="Off")
        self.state = ClusterState(objects)
        self.backend = FakeBackend(self.state)
        self.ledger = MemoryLedger(self.state, self.settings, clock=self.clock, wall=self.clock)
        self.client = AppClient(create_app(self.backend, self.ledger, self.settings))

    # -- the webhook endpoints ---------------------------------------------------------

    def call(self, endpoint: str, document: dict[str, Any]) -> dict[str, Any]:
        answer = self.client.post(f"/{endpoint}", content=orjson.dumps(document))
        assert answer.status_code == 200, answer.text
        response: dict[str, Any] = answer.json()["response"]
        if endpoint == "validate":
            assert "patch" not in response
        return response

    # -- what the API server does --------------------------------------------------------

    def create(self, obj: dict[str, Any], dry_run: bool = False, **kwargs: Any) -> dict[str, Any]:
        """Create as the API server would; the final webhook response (with `object` added)."""
        sent = copy.deepcopy(obj)
        mutated = self.call("mutate", review(sent, dry_run=dry_run, **kwargs))
        if not mutated["allowed"]:
            return mutated
        stored = sent
        if "patch" in mutated:
            stored = jsonpatch.apply_patch(sent, orjson.loads(base64.b64decode(mutated["patch"])))
        metadata = stored["metadata"]
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "uid"):
            metadata.pop(field, None)
        stored.pop("status", None)
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = f"{metadata['generateName']}{next(_uids):05x}"
        metadata["uid"] = f"uid-{next(_uids)}"
        metadata["creationTimestamp"] = self.clock.timestamp()
        validated = self.call("validate", review(stored, dry_run=dry_run, **kwargs))
        if validated["allowed"] and not dry_run:
            if stored.get("kind") == "Pod":
                stored["status"] = {"phase": "Pending"}
            self.state.upsert(stored)
        return {**validated, "object": stored}

    def update(self, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Update an existing pod or Job as the API server would (draquota's mutating webhook
        makes no change to an update); the validating response, stored when allowed."""
        metadata = obj["metadata"]
        kind = obj.get("kind", "Pod")
        old = self.state.get(kind, metadata.get("namespace", "team-a"), metadata["name"])
        assert old is not None
        if kind == "Job":
            kwargs = {"kind": "Job", "resource": "jobs", "group": "batch", **kwargs}
        validated = self.call("validate", review(obj, "UPDATE", old=dict(old), **kwargs))
        if validated["allowed"]:
            self.state.upsert(obj)
        return validated

    def create_job(self, job: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.create(job, kind="Job", resource="jobs", group="batch", **kwargs)

    def update_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """A Job update; a Job unsuspended by it starts its pods, as the Job controller would."""
        answer = self.update(job)
        if answer["allowed"] and job["spec"].get("suspend") is not True:
            self.run_job(job)
        return answer

    def run_job(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """What the Job controller does for a running Job: its pods, made by the controller's
        identity, owned by the Job; the webhooks' answers."""
        spec = job["spec"]
        count = min(spec.get("parallelism", 1), spec.get("completions", spec.get("parallelism", 1)))
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                 "uid": job["metadata"]["uid"], "controller": True}  # fmt: skip
        answers = []
        for i in range(count):
            template = copy.deepcopy(spec["template"])
            pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"], "metadata": {
                **template.get("metadata", {}), "name": f"{job['metadata']['name']}-{i}",
                "namespace": job["metadata"].get("namespace", "team-a"),
                "ownerReferences": [owner]}}  # fmt: skip
            answers.append(self.create(pod, user=JOB_CONTROLLER))
        return answers

    def delete(self, name: str, grace: int, namespace: str = "team-a") -> None:
        """A graceful delete of a pod on a node: marked, not removed, until its grace ends."""
        pod = copy.deepcopy(self.state.get("Pod", namespace, name))
        assert pod is not None
        pod["metadata"]["deletionTimestamp"] = self.clock.timestamp(grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.state.upsert(pod)

    def pod(self, name: str, namespace: str = "team-a") -> dict[str, Any]:
        pod = self.state.get("Pod", namespace, name)
        assert pod is not None
        return copy.deepcopy(dict(pod))

    def usage(self, queue: str, flavor: str, resource: str) -> int:
        return self.ledger.usage().of(queue).get(FlavorResource(flavor, resource), 0)
