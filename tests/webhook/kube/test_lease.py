"""The Lease elector against the fake API server, with clocks the tests move."""

from __future__ import annotations

from tests.fakeapi import FakeApiServer
from webhook.kube.client import KubeClient
from webhook.kube.lease import LeaseElector

NAMESPACE, NAME = "draquota-system", "draquota-queueing"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def elector(
    client: KubeClient, identity: str, clock: Clock, wall: Clock | None = None
) -> LeaseElector:
    return LeaseElector(
        client, NAMESPACE, NAME, identity, duration=15.0, clock=clock, wall=wall or clock
    )


def holder(api: FakeApiServer) -> str:
    leases = api.objects("Lease", NAMESPACE)
    return str(leases[0]["spec"].get("holderIdentity")) if leases else ""


def test_the_first_replica_takes_the_lease_and_the_second_waits(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    a, b = elector(client, "a", clock), elector(client, "b", clock)
    assert a.try_acquire_or_renew() and a.leading()
    assert not b.try_acquire_or_renew() and not b.leading()
    assert holder(api) == "a"


def test_a_renewing_holder_keeps_the_lease_however_long_the_other_watches(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    a, b = elector(client, "a", clock), elector(client, "b", clock)
    a.try_acquire_or_renew()
    for _ in range(20):
        clock.now += 5
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert holder(api) == "a"


def test_a_silent_holder_is_taken_over_once_seen_unchanged_for_the_duration(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(client, "a", clock_a), elector(client, "b", clock_b)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # first sight of the record
    clock_b.now += 14
    assert not b.try_acquire_or_renew()
    clock_a.now += 14
    assert not a.leading()  # a stops leading before b may take over
    clock_b.now += 2
    assert b.try_acquire_or_renew() and b.leading()
    assert holder(api) == "b"
    assert api.objects("Lease", NAMESPACE)[0]["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # the old holder finds it taken


def test_a_taker_with_a_wall_clock_far_ahead_does_not_shorten_the_lease(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    a = elector(client, "a", clock)
    b = elector(client, "b", clock, wall=Clock(clock.now + 3600))
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.now += 5
    assert not b.try_acquire_or_renew()
    assert holder(api) == "a"


def test_stop_releases_the_lease_so_another_takes_it_at_once(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    a, b = elector(client, "a", clock), elector(client, "b", clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.stop()
    assert not a.leading()
    assert b.try_acquire_or_renew()
    assert holder(api) == "b"


def test_two_takers_racing_for_an_expired_lease_leave_one_leader(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    a, b, c = (elector(client, name, clock) for name in "abc")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew(), c.try_acquire_or_renew()
    clock.now += 16
    stale = client.request("GET", b.path)
    assert b.try_acquire_or_renew()
    # c read the same record before b wrote: its write carries the old resourceVersion
    c._observed = (stale["spec"]["holderIdentity"], stale["spec"]["renewTime"],
                   stale["metadata"]["resourceVersion"])  # fmt: skip
    assert not c._write("PUT", c._body(stale), clock.now)
    assert b.leading() and not c.leading()
    assert holder(api) == "b"


def test_an_api_outage_ends_leadership_when_the_lease_could_have_expired(
    api: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    a = elector(client, "a", clock)
    a.try_acquire_or_renew()
    api.unreachable()
    try:
        clock.now += 5
        assert a.try_acquire_or_renew()  # still within its lease
        clock.now += 9
        assert not a.try_acquire_or_renew()
        assert not a.leading()
    finally:
        api.reachable()
