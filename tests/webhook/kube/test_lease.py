"""LeaseElector against the fake API server: one leader at a time, decided on local clocks."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client import ApiClient

from tests.fakeapi import FakeApiServer
from tests.webhook.kube.test_backend import eventually
from webhook.kube.client import KubeClient, Obj, Timeout, TransportError
from webhook.kube.lease import LeaseElector, micro_time

pytestmark = pytest.mark.integration

NAMESPACE = "draquota-system"
NAME = "draquota-queueing"
DURATION = 15.0
HOUR = 3600.0
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


class Hooked(KubeClient):
    """A second client on the same connection pool that can run a step of another replica
    just before one of its own requests, or fail every request (a cut-off replica)."""

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client.api_client)
        self.before: dict[str, Callable[[], object]] = {}
        self.cut = False

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Mapping[str, Any] | None = None,
        timeout: Timeout | None = None,
    ) -> Obj:
        if self.cut:
            raise TransportError(f"{method} {path}: connection refused")
        step = self.before.pop(method, None)
        if step is not None:
            step()
        return super().request(method, path, query, body, timeout)


def replica(client: KubeClient, identity: str, clock: Clock, **options: Any) -> LeaseElector:
    return LeaseElector(client, NAMESPACE, NAME, identity, DURATION, clock=clock, **options)


def stored(api: FakeApiServer) -> Obj:
    return api.store.get(api.resource("Lease"), NAMESPACE, NAME)


def spec(api: FakeApiServer) -> Obj:
    result: Obj = stored(api)["spec"]
    return result


@pytest.fixture
def hooked(client: KubeClient) -> Iterator[Hooked]:
    yield Hooked(client)


def test_first_replica_creates_and_holds_the_lease(api: FakeApiServer, client: KubeClient) -> None:
    a = replica(client, "a", Clock())

    assert a.try_acquire_or_renew()

    assert a.leading() and a.holder() == "a"
    lease = stored(api)
    assert lease["apiVersion"] == "coordination.k8s.io/v1" and lease["kind"] == "Lease"
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["leaseTransitions"] == 0
    assert MICRO_TIME.match(lease["spec"]["acquireTime"])
    assert lease["spec"]["renewTime"] == lease["spec"]["acquireTime"]


def test_holder_renews_and_keeps_its_acquire_time(api: FakeApiServer, client: KubeClient) -> None:
    clock = Clock()
    a = replica(client, "a", clock, wall=lambda: clock.now)
    a.try_acquire_or_renew()
    first = spec(api)

    clock.now += 2
    assert a.try_acquire_or_renew()

    assert spec(api)["renewTime"] == micro_time(clock.now) != first["renewTime"]
    assert spec(api)["acquireTime"] == first["acquireTime"]
    assert spec(api)["leaseTransitions"] == 0


def test_second_replica_sees_the_lease_held_and_does_not_lead(client: KubeClient) -> None:
    a, b = replica(client, "a", Clock()), replica(client, "b", Clock())
    a.try_acquire_or_renew()

    assert not b.try_acquire_or_renew()

    assert not b.leading() and b.holder() == "a"
    assert a.leading()


def test_takeover_only_after_the_record_is_unchanged_for_the_duration(
    api: FakeApiServer, client: KubeClient
) -> None:
    a, b_clock = replica(client, "a", Clock()), Clock()
    b = replica(client, "b", b_clock)
    a.try_acquire_or_renew()  # and then a falls silent
    assert not b.try_acquire_or_renew()  # b starts counting from here

    b_clock.now += DURATION - 0.1
    assert not b.try_acquire_or_renew()
    b_clock.now += 0.1
    assert b.try_acquire_or_renew()

    assert b.leading() and b.holder() == "b"
    assert spec(api)["holderIdentity"] == "b"
    assert spec(api)["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew() and a.holder() == "b"


def test_a_renewing_holder_is_never_taken_over(api: FakeApiServer, client: KubeClient) -> None:
    a_clock, b_clock = Clock(), Clock()
    a, b = replica(client, "a", a_clock), replica(client, "b", b_clock)
    a.try_acquire_or_renew()

    for _ in range(12):  # three lease durations, renewed every 4 s
        a_clock.now += 4
        b_clock.now += 4
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()

    assert spec(api)["holderIdentity"] == "a" and spec(api)["leaseTransitions"] == 0


def test_the_holder_advertising_a_longer_lease_is_waited_for(client: KubeClient) -> None:
    a = LeaseElector(client, NAMESPACE, NAME, "a", duration=30.0, clock=Clock())
    b_clock = Clock()
    b = replica(client, "b", b_clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()

    b_clock.now += DURATION + 1
    assert not b.try_acquire_or_renew()
    b_clock.now += 30.0 - DURATION
    assert b.try_acquire_or_renew()


def test_stop_releases_so_another_replica_takes_over_at_once(
    api: FakeApiServer, client: KubeClient
) -> None:
    a, b = replica(client, "a", Clock()), replica(client, "b", Clock())
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()

    a.stop()

    assert not a.leading()
    assert spec(api)["holderIdentity"] == ""
    assert b.try_acquire_or_renew()  # no clock has moved
    assert spec(api)["holderIdentity"] == "b" and spec(api)["leaseTransitions"] == 1


def test_stop_of_a_replica_that_does_not_lead_leaves_the_lease_alone(
    api: FakeApiServer, client: KubeClient
) -> None:
    a, b = replica(client, "a", Clock()), replica(client, "b", Clock())
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    version = stored(api)["metadata"]["resourceVersion"]

    b.stop()

    assert stored(api)["metadata"]["resourceVersion"] == version
    assert a.try_acquire_or_renew()


def test_start_renews_in_the_background_and_stop_releases(
    api: FakeApiServer, client: KubeClient
) -> None:
    a = LeaseElector(client, NAMESPACE, NAME, "a", duration=1.0, renew_every=0.02)
    a.start()
    try:
        eventually(a.leading, timeout=1.0)
        renewed = spec(api)["renewTime"]
        eventually(lambda: spec(api)["renewTime"] != renewed, timeout=1.0)
    finally:
        a.stop()

    assert not a.leading() and spec(api)["holderIdentity"] == ""


def test_a_skewed_wall_clock_on_the_taker_does_not_shorten_the_lease(
    api: FakeApiServer, client: KubeClient
) -> None:
    # The holder's wall clock is an hour behind, the taker's an hour ahead: by wall time
    # the renewTime written is two hours old, yet b waits a full duration of its own.
    a = replica(client, "a", Clock(), wall=lambda: time.time() - HOUR)
    b_clock = Clock()
    b = replica(client, "b", b_clock, wall=lambda: time.time() + HOUR)
    a.try_acquire_or_renew()

    assert not b.try_acquire_or_renew()
    b_clock.now += DURATION - 1
    assert not b.try_acquire_or_renew()
    assert spec(api)["holderIdentity"] == "a"
    b_clock.now += 1
    assert b.try_acquire_or_renew()


def test_a_conflicting_takeover_leaves_exactly_one_leader(
    api: FakeApiServer, client: KubeClient, hooked: Hooked
) -> None:
    b_clock, c_clock = Clock(), Clock()
    b, c = replica(client, "b", b_clock), replica(hooked, "c", c_clock)
    replica(client, "a", Clock()).try_acquire_or_renew()
    b.try_acquire_or_renew()
    c.try_acquire_or_renew()
    b_clock.now += DURATION
    c_clock.now += DURATION
    hooked.before["PUT"] = b.try_acquire_or_renew  # b writes between c's read and write

    assert not c.try_acquire_or_renew()

    assert b.leading() and not c.leading()
    assert spec(api)["holderIdentity"] == "b" and spec(api)["leaseTransitions"] == 1


def test_a_conflicting_create_leaves_exactly_one_leader(
    api: FakeApiServer, client: KubeClient, hooked: Hooked
) -> None:
    b, c = replica(client, "b", Clock()), replica(hooked, "c", Clock())
    hooked.before["POST"] = b.try_acquire_or_renew  # both read 404, b creates first

    assert not c.try_acquire_or_renew()

    assert b.leading() and not c.leading()
    assert spec(api)["holderIdentity"] == "b"


def test_an_api_outage_ends_leadership_once_the_lease_would_expire(
    api: FakeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    a = replica(client, "a", clock)
    a.try_acquire_or_renew()
    api.unreachable("reset")

    clock.now += 5
    with caplog.at_level(logging.WARNING, logger="draquota.lease"):
        assert a.try_acquire_or_renew()  # still within the lease it last wrote
    assert any(r.levelno == logging.WARNING for r in caplog.records)
    clock.now = 1_000.0 + DURATION - a.margin - 0.01
    assert a.leading()
    clock.now += 0.02
    assert not a.leading()
    assert not a.try_acquire_or_renew()

    api.reachable()  # nobody took it meanwhile: the record still names a
    assert a.try_acquire_or_renew()
    assert spec(api)["leaseTransitions"] == 0


def test_no_two_leaders_while_the_holder_is_cut_off(client: KubeClient, hooked: Hooked) -> None:
    clock = Clock()  # one rate of time for both replicas, as on one machine
    a, b = replica(hooked, "a", clock), replica(client, "b", clock)
    a.try_acquire_or_renew()
    leaders = []
    for step in range(40):
        clock.now += 1
        hooked.cut = step >= 5  # a loses the API server after 5 s
        a.try_acquire_or_renew()
        b.try_acquire_or_renew()
        assert not (a.leading() and b.leading())
        leaders.append("a" if a.leading() else "b" if b.leading() else "")

    assert leaders[0] == "a" and leaders[-1] == "b"
    assert "" in leaders  # a stopped before b started


def test_leadership_changes_are_counted_and_reported(client: KubeClient) -> None:
    changes: list[bool] = []
    clock = Clock()
    a = replica(client, "a", clock, on_change=changes.append)
    b_clock = Clock()
    b = replica(client, "b", b_clock)

    a.try_acquire_or_renew()
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    b_clock.now += DURATION
    b.try_acquire_or_renew()
    a.try_acquire_or_renew()

    assert changes == [True, False]
    assert a.transitions == 2 and b.transitions == 1
    assert a.holder() == b.holder() == "b"


@pytest.mark.parametrize("renew_every", [0.0, DURATION, DURATION * 0.95])
def test_a_renewal_period_that_cannot_keep_the_lease_is_refused(renew_every: float) -> None:
    unused = KubeClient(ApiClient())
    with pytest.raises(ValueError, match="renew_every"):
        LeaseElector(unused, NAMESPACE, NAME, "a", DURATION, renew_every)
