"""`KubePodWriter` on the fake API: conditions and Events that end right despite conflicts.

fixtures/pod-gated.json and fixtures/pod-admitted.json are pods as the real API server
(../shared/k8s, v1.36.2) returned them, recorded with `kubectl get pod -o json` from a
`tests.e2e.cluster.ControlPlane` with one fake node of 8 GPUs: two pods created with the
`draquota.io/admission` gate and a one-GPU template claim (the resourceclaim controller
had written their `resourceClaimStatuses`); `train-0` was given a waiting `QuotaReserved`
condition through the status subresource, `train-1` a True one, then ungated with a
nodeSelector and bound by kube-scheduler.

Another writer changing the pod between the writer's read and its write (the
resourceclaim controller, the scheduler, a user, another leader) is played by a hook that
runs just before the writer's PUT reaches the fake API server.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quota.cluster import Obj
from quota.livepods import is_gated
from tests.fakeapi import FakeApiServer
from tests.security.cluster import Cluster
from tests.webhook.queueing.test_controller import ApiWriter, gpus, queueing_cluster, submit
from webhook.kube.client import KubeClient
from webhook.kube.podwriter import ATTEMPTS, KubePodWriter, event_name
from webhook.kube.trim import trimmed_job
from webhook.queueing.controller import QueueController

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent / "fixtures"
NAMESPACE = "team-a"
GATED = "train-0"
ADMITTED = "train-1"
WAITING_2 = (
    "waiting for quota: insufficient unused quota for gpu in flavor default, 1 more needed "
    "(requested 1, in use 4 of nominal 4); position 2 of 3 in ClusterQueue gpus"
)
WAITING_1 = WAITING_2.replace("position 2 of 3", "position 1 of 2")
ADMITTED_BY = "admitted by ClusterQueue gpus"
SELECTOR = {"pool": "default"}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def recorded(name: str) -> Obj:
    """A recorded pod, ready to be created in the fake API (which makes its resourceVersion)."""
    file = {GATED: "pod-gated.json", ADMITTED: "pod-admitted.json"}[name]
    pod: Obj = json.loads((FIXTURES / file).read_text(encoding="utf-8"))
    del pod["metadata"]["resourceVersion"]
    return pod


@pytest.fixture
def writer(client: KubeClient) -> KubePodWriter:
    return KubePodWriter(client, sleep=lambda _: None)


@pytest.fixture
def other(kubeconfig: Path) -> Iterator[KubeClient]:
    """A second client: another writer (another leader) that the hooks do not intercept."""
    kube = KubeClient.from_kubeconfig(str(kubeconfig))
    yield kube
    kube.api_client.close()


def created(api: FakeApiServer, name: str) -> Obj:
    return api.create(recorded(name))


def stored(api: FakeApiServer, name: str, kind: str = "Pod") -> Obj:
    return api.store.get(api.resource(kind), NAMESPACE, name)


def change(api: FakeApiServer, name: str, edit: Callable[[Obj], None], kind: str = "Pod") -> None:
    """Another writer's update of the stored object."""
    obj = stored(api, name, kind)
    edit(obj)
    api.update(obj)


def before_puts(
    monkeypatch: pytest.MonkeyPatch,
    client: KubeClient,
    meanwhile: Callable[[], None],
    times: int = 1,
    ending: str = "",
) -> list[str]:
    """Runs `meanwhile` before each of the next `times` PUTs whose path ends with `ending`;
    returns the paths of all PUTs."""
    request = client.request
    puts: list[str] = []
    left = [times]

    def racing(method: str, path: str, *args: Any, **kwargs: Any) -> Obj:
        if method == "PUT":
            puts.append(path)
            if path.endswith(ending) and left[0] > 0:
                left[0] -= 1
                meanwhile()
        return request(method, path, *args, **kwargs)

    monkeypatch.setattr(client, "request", racing)
    return puts


def quota_reserved(pod: Obj) -> Obj | None:
    conditions = pod.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "QuotaReserved"), None)


def events(api: FakeApiServer, name: str | None = None) -> dict[str, Obj]:
    """Events by reason (of one involved object when `name` is given)."""
    found = [
        e
        for e in api.objects("Event", NAMESPACE)
        if name is None or e["involvedObject"]["name"] == name
    ]
    by_reason = {e["reason"]: e for e in found}
    assert len(by_reason) == len(found), "one Event per object and reason"
    return by_reason


def set_claim_status(pod: Obj) -> None:
    """What the resourceclaim controller writes on a pod's status."""
    pod["status"]["resourceClaimStatuses"] = [{"name": "c0", "resourceClaimName": "train-c0-x"}]


# -- retry on conflict ----------------------------------------------------------------------


def test_a_waiting_message_lands_on_a_pod_changed_between_read_and_write(
    api: FakeApiServer, writer: KubePodWriter, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = created(api, GATED)
    before_puts(monkeypatch, client, lambda: change(api, GATED, set_claim_status))
    assert writer.wait(pod, WAITING_2)
    final = stored(api, GATED)
    condition = quota_reserved(final)
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Pending",
        WAITING_2,
    )
    assert final["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "train-c0-x"
    assert is_gated(final)


def test_an_admission_lands_on_a_pod_changed_before_each_of_its_writes(
    api: FakeApiServer, writer: KubePodWriter, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = created(api, GATED)

    def label(obj: Obj) -> None:
        obj["metadata"].setdefault("labels", {})["team"] = "vision"

    others = [set_claim_status, label]  # a status write and a metadata write, by others
    puts = before_puts(monkeypatch, client, lambda: change(api, GATED, others.pop(0)), times=2)
    assert writer.admit(pod, SELECTOR, ADMITTED_BY)
    final = stored(api, GATED)
    condition = quota_reserved(final)
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "QuotaReserved",
        ADMITTED_BY,
    )
    assert not is_gated(final)
    assert final["spec"]["nodeSelector"] == SELECTOR
    assert final["metadata"]["labels"]["team"] == "vision"  # nobody's change is lost
    assert final["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "train-c0-x"
    assert len(puts) == 4  # each write once more after its conflict


def test_conflicts_without_end_give_up_after_a_few_attempts(
    api: FakeApiServer, writer: KubePodWriter, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = created(api, GATED)
    puts = before_puts(
        monkeypatch, client, lambda: change(api, GATED, set_claim_status), times=1000
    )
    assert not writer.wait(pod, WAITING_2)
    assert len(puts) == ATTEMPTS
    condition = quota_reserved(stored(api, GATED))
    assert condition is not None and condition["message"] == WAITING_1  # as recorded
    assert events(api) == {}


# -- admitted always wins --------------------------------------------------------------------


def test_a_waiting_message_is_not_written_to_a_pod_already_admitted(
    api: FakeApiServer, writer: KubePodWriter, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = created(api, ADMITTED)
    stale = copy.deepcopy(pod)  # as a lagging cache still has it
    stale["spec"]["schedulingGates"] = [{"name": "draquota.io/admission"}]
    puts = before_puts(monkeypatch, client, lambda: None)
    assert not writer.wait(stale, WAITING_2)
    assert puts == []
    assert stored(api, ADMITTED) == pod
    assert events(api) == {}


@pytest.mark.parametrize("step", ["reserved", "reserved-and-ungated"])
def test_a_waiting_message_never_overwrites_an_admission_made_meanwhile(
    step: str,
    api: FakeApiServer,
    writer: KubePodWriter,
    client: KubeClient,
    other: KubeClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another leader admits the pod between this writer's read and write: after its first
    write (QuotaReserved True, still gated) or after both."""
    pod = created(api, GATED)
    leader = KubePodWriter(other, sleep=lambda _: None)

    def reserve(obj: Obj) -> None:
        (condition,) = [c for c in obj["status"]["conditions"] if c["type"] == "QuotaReserved"]
        condition.update(status="True", reason="QuotaReserved", message=ADMITTED_BY)

    def admit_meanwhile() -> None:
        if step == "reserved":  # the leader's first write landed, its second not yet
            change(api, GATED, reserve)
        else:
            assert leader.admit(pod, SELECTOR, ADMITTED_BY)

    puts = before_puts(monkeypatch, client, admit_meanwhile)
    assert not writer.wait(pod, WAITING_2)
    assert len(puts) == 1  # read again after the conflict, and not written
    final = stored(api, GATED)
    condition = quota_reserved(final)
    assert condition is not None
    assert (condition["status"], condition["message"]) == ("True", ADMITTED_BY)
    assert is_gated(final) == (step == "reserved")
    assert "Pending" not in events(api, GATED)


# -- a pod gone or replaced ------------------------------------------------------------------


@pytest.mark.parametrize("then", ["deleted", "replaced"])
@pytest.mark.parametrize("write", ["wait", "admit"])
def test_a_pod_deleted_or_replaced_meanwhile_stops_the_retry(
    then: str,
    write: str,
    api: FakeApiServer,
    writer: KubePodWriter,
    client: KubeClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = created(api, GATED)

    def meanwhile() -> None:
        api.delete("Pod", NAMESPACE, GATED)
        if then == "replaced":  # the same name, another pod (another UID), not ours to write
            fresh = recorded(GATED)
            del fresh["metadata"]["uid"], fresh["status"]
            api.create(fresh)

    puts = before_puts(monkeypatch, client, meanwhile)
    landed = writer.wait(pod, WAITING_2) if write == "wait" else writer.admit(pod, SELECTOR, "x")
    assert not landed
    assert len(puts) == 1
    if then == "replaced":
        replacement = stored(api, GATED)
        assert quota_reserved(replacement) is None
        assert is_gated(replacement)
    assert events(api) == {}


# -- Events ----------------------------------------------------------------------------------


def test_a_pods_changes_are_one_event_per_reason_updated_in_place(
    api: FakeApiServer, writer: KubePodWriter
) -> None:
    pod = created(api, GATED)
    assert writer.wait(pod, WAITING_2)
    (pending,) = events(api).values()
    assert pending["metadata"]["name"] == f"{GATED}.{pod['metadata']['uid'][:8]}.pending"
    assert (pending["type"], pending["reason"], pending["message"], pending["count"]) == (
        "Normal",
        "Pending",
        WAITING_2,
        1,
    )
    assert pending["source"] == {"component": "draquota"}
    assert pending["reportingComponent"] == "draquota"
    assert pending["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": GATED,
        "namespace": NAMESPACE,
        "uid": pod["metadata"]["uid"],
    }

    assert writer.wait(pod, WAITING_1)
    assert writer.wait(pod, WAITING_1)  # shown already: no change, no Event
    pending = events(api)["Pending"]
    assert (pending["message"], pending["count"]) == (WAITING_1, 2)

    assert writer.admit(pod, SELECTOR, ADMITTED_BY)
    after = events(api, GATED)
    assert sorted(after) == ["Pending", "QuotaReserved"]
    reserved = after["QuotaReserved"]
    assert reserved["message"].startswith(f"{ADMITTED_BY} after waiting ")
    assert (reserved["type"], reserved["count"]) == ("Normal", 1)
    assert after["Pending"] == pending  # the admission does not touch the waiting one


def test_an_event_deleted_meanwhile_is_made_again(
    api: FakeApiServer, writer: KubePodWriter
) -> None:
    pod = created(api, GATED)
    assert writer.wait(pod, WAITING_2)
    api.delete("Event", NAMESPACE, event_name(pod, "Pending"))  # the API server's event TTL
    assert writer.wait(pod, WAITING_1)
    pending = events(api)["Pending"]
    assert (pending["message"], pending["count"]) == (WAITING_1, 1)


def test_a_new_leader_continues_the_event_of_the_former(
    api: FakeApiServer, writer: KubePodWriter, other: KubeClient
) -> None:
    pod = created(api, GATED)
    assert writer.wait(pod, WAITING_2)
    leader = KubePodWriter(other, sleep=lambda _: None)  # knows no Event yet
    assert leader.wait(pod, WAITING_1)
    pending = events(api)["Pending"]
    assert (pending["message"], pending["count"]) == (WAITING_1, 2)
    assert writer.wait(pod, WAITING_2)  # the former leader, once more: its copy is stale
    assert events(api)["Pending"]["count"] == 3


def test_event_messages_are_cut_to_1024_and_names_are_dns_subdomains(
    api: FakeApiServer, writer: KubePodWriter
) -> None:
    pod = recorded(GATED)
    pod["metadata"]["name"] = "a" * 251 + "-b"  # the longest pod name there is
    pod = api.create(pod)
    long_message = WAITING_2 + "; " + "x" * 2000
    assert writer.wait(pod, long_message)
    (pending,) = events(api).values()
    assert pending["message"] == long_message[:1024]
    assert quota_reserved(stored(api, pod["metadata"]["name"]))["message"] == long_message  # type: ignore[index]
    name = pending["metadata"]["name"]
    assert len(name) <= 253 and DNS_SUBDOMAIN.match(name), name
    assert name.endswith(f".{pod['metadata']['uid'][:8]}.pending")


# -- Jobs ------------------------------------------------------------------------------------


def job(name: str = "train") -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "suspend": True,
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
    }


def test_a_job_waits_and_starts_with_its_events_despite_a_conflict(
    api: FakeApiServer, writer: KubePodWriter, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued = api.create(job())
    assert writer.wait(queued, WAITING_2)
    assert writer.wait(queued, WAITING_1)

    def label(obj: Obj) -> None:
        obj["metadata"]["labels"] = {"team": "vision"}

    before_puts(monkeypatch, client, lambda: change(api, "train", label, "Job"), ending="/train")
    assert writer.start(queued, SELECTOR, ADMITTED_BY)
    final = stored(api, "train", "Job")
    assert final["spec"]["suspend"] is False
    assert final["spec"]["template"]["spec"]["nodeSelector"] == SELECTOR
    assert final["metadata"]["labels"] == {"team": "vision"}
    by_reason = events(api, "train")
    assert (by_reason["Pending"]["message"], by_reason["Pending"]["count"]) == (WAITING_1, 2)
    assert by_reason["QuotaReserved"]["message"].startswith(ADMITTED_BY)
    assert by_reason["QuotaReserved"]["involvedObject"]["kind"] == "Job"
    assert not writer.wait(queued, WAITING_2)  # started: it waits no more
    assert events(api, "train")["Pending"]["message"] == WAITING_1


def test_a_job_decided_on_its_cached_copy_is_started(
    api: FakeApiServer, writer: KubePodWriter
) -> None:
    decided = trimmed_job(api.create(job()))  # the queue decides on the cache's copy
    assert writer.start(decided, SELECTOR, ADMITTED_BY)
    assert stored(api, "train", "Job")["spec"]["suspend"] is False


def test_a_job_changed_since_it_was_decided_is_not_started(
    api: FakeApiServer, writer: KubePodWriter, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    decided = api.create(job())

    def grow(obj: Obj) -> None:  # the user raises parallelism while the queue decides
        obj["spec"]["parallelism"] = 4

    before_puts(monkeypatch, client, lambda: change(api, "train", grow, "Job"), ending="/train")
    assert not writer.start(decided, SELECTOR, ADMITTED_BY)
    final = stored(api, "train", "Job")
    assert final["spec"]["suspend"] is True and final["spec"]["parallelism"] == 4
    assert "QuotaReserved" not in events(api, "train")


# -- the controller retries what did not land -------------------------------------------------


class FlakyWriter(ApiWriter):
    """The first `failures` waiting messages do not land (a conflict, the API server away)."""

    def __init__(self, cluster: Cluster, failures: int) -> None:
        super().__init__(cluster)
        self.failures = failures
        self.calls = 0

    def wait(self, obj: Obj, message: str) -> bool:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            return False
        return super().wait(obj, message)


def test_a_waiting_message_that_did_not_land_is_written_on_a_later_pass() -> None:
    cluster = queueing_cluster(gpus=4)
    submit(cluster, gpus("a", 2), gpus("b", 2), gpus("c", 1))
    writer = FlakyWriter(cluster, failures=1)
    queue = QueueController(
        cluster.backend, cluster.ledger, cluster.settings, None, writer, wall=cluster.clock
    )
    queue.run_once()
    assert "c" not in writer.waiting
    queue.run_once()
    assert writer.waiting["c"].startswith("waiting for quota: ")
    queue.run_once()
    assert writer.calls == 2  # shown: not written again
