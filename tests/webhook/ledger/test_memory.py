"""The embedded backend and ledger: no over-admission under concurrency, reservations, index."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quota.charge import Charge, FlavorResource
from quota.decision import decide
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from tests.webhook.builders import QUEUE, TEMPLATE, cluster_objects, cluster_state, pod
from webhook.ledger import podusage as podusage_module
from webhook.ledger import valid_reservation_id
from webhook.ledger.memory import MemoryLedger
from webhook.ledger.usageindex import IndexedUsage
from webhook.store.clusterstate import JOURNAL_LENGTH

GPU = FlavorResource("a100", "gpu")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _admit(
    ledger: MemoryLedger, state: Any, obj: dict[str, Any], rid: str, dry: bool = False
) -> Decision:
    key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
    return ledger.admit(rid, lambda usage: decide(obj, state, usage, Settings()), dry, key)


def test_concurrent_admissions_never_over_admit() -> None:
    state = cluster_state(gpus=10)
    ledger = MemoryLedger(state, Settings())
    results: list[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(index: int) -> None:
        barrier.wait()
        for j in range(10):
            decision = _admit(ledger, state, pod(f"p-{index}-{j}"), f"r-{index}-{j}")
            with lock:
                results.append(decision.allowed)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 80
    assert results.count(True) == 10
    assert ledger.usage().of(QUEUE) == {GPU: 10}


def test_dry_run_reserves_nothing() -> None:
    state = cluster_state(gpus=1)
    ledger = MemoryLedger(state, Settings())
    assert _admit(ledger, state, pod("a"), "r-a", dry=True).allowed
    assert ledger.reservations() == {}
    assert _admit(ledger, state, pod("b"), "r-b").allowed


def test_retried_reservation_does_not_count_against_itself() -> None:
    state = cluster_state(gpus=1)
    ledger = MemoryLedger(state, Settings())
    assert _admit(ledger, state, pod("a"), "r-a").allowed
    assert _admit(ledger, state, pod("a"), "r-a").allowed
    assert ledger.usage().of(QUEUE) == {GPU: 1}


def _created(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """The pod as the API server stores it, with the uid it had when it was admitted."""
    metadata = {**obj["metadata"], "uid": uid}
    return {**obj, "metadata": metadata, "status": {"phase": "Pending"}}


def test_pod_with_the_admitted_uid_takes_over_its_reservation_and_counts_once() -> None:
    state = cluster_state(gpus=2)
    ledger = MemoryLedger(state, Settings())
    obj = pod("a")
    assert _admit(ledger, state, obj, "uid-1").allowed
    copy = {**obj, "metadata": {**obj["metadata"], "name": "copy"}}
    state.upsert(_created(copy, "uid-other"))  # another pod: confirms nothing
    assert set(ledger.reservations()) == {"uid-1"}
    state.upsert(_created(obj, "uid-1"))
    assert ledger.reservations() == {}
    assert set(ledger.records()) == {"uid-1"}
    usage = ledger.usage()
    assert usage.holders() == {"team-a/a", "team-a/copy"}
    assert usage.of(QUEUE) == {GPU: 2}
    state.remove("Pod", "team-a", "a")
    assert ledger.usage().of(QUEUE) == {GPU: 1}
    assert ledger.records() == {}


def test_reservation_expires_after_the_ttl() -> None:
    state = cluster_state(gpus=1)
    clock = Clock()
    ledger = MemoryLedger(state, Settings(reservation_ttl_seconds=60), clock=clock)
    assert _admit(ledger, state, pod("a"), "r-a").allowed
    clock.now += 59
    assert not _admit(ledger, state, pod("b"), "r-b").allowed
    clock.now += 2
    assert ledger.reservations() == {}
    assert _admit(ledger, state, pod("b"), "r-b").allowed


def test_queue_change_rebuilds_usage() -> None:
    state = cluster_state(gpus=1)
    obj = pod("a")
    state.upsert(_created(obj, "uid-a"))
    ledger = MemoryLedger(state, Settings())
    assert ledger.usage().of(QUEUE) == {GPU: 1}
    template = next(o for o in cluster_objects() if o["kind"] == "ResourceClaimTemplate")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    state.upsert(template)
    assert ledger.usage().of(QUEUE) == {GPU: 2}


@pytest.mark.parametrize("value", ["", "team-a/pod", "x" * 200, "a\nb"])
def test_reservation_ids_never_look_like_pod_holders(value: str) -> None:
    assert not valid_reservation_id(value)
    with pytest.raises(ValueError):
        MemoryLedger(cluster_state(), Settings()).admit(value, lambda u: None, False)  # type: ignore[arg-type,return-value]


_charges = st.builds(
    Charge,
    cluster_queue=st.sampled_from(["q1", "q2"]),
    local_queue=st.just("ns/lq"),
    flavors=st.just({"gpu": "f1", "cpu": "f2"}),
    per_pod=st.dictionaries(st.sampled_from(["gpu", "cpu"]), st.integers(0, 5)),
    shared_claims=st.dictionaries(
        st.sampled_from(["ns/c1", "ns/c2"]),
        st.dictionaries(st.sampled_from(["gpu", "cpu"]), st.integers(0, 5)),
        max_size=2,
    ),
)
_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]), st.sampled_from(["h1", "h2", "h3", "h4"]), _charges
    ),
    max_size=25,
)


def _replay(usage: Usage, ops: list[tuple[str, str, Charge]]) -> None:
    for op, holder, charge in ops:
        if op == "add":
            usage.add(holder, charge)
        else:
            usage.remove(holder)


@settings(max_examples=150, deadline=None)
@given(base_ops=_ops, overlay_ops=_ops)
def test_indexed_usage_and_its_overlay_agree_with_plain_usage(
    base_ops: list[tuple[str, str, Charge]], overlay_ops: list[tuple[str, str, Charge]]
) -> None:
    plain, indexed = Usage(), IndexedUsage()
    _replay(plain, base_ops)
    _replay(indexed, base_ops)
    for queue in ("q1", "q2"):
        assert indexed.of(queue) == plain.of(queue)
        assert indexed.shared_claims(queue) == plain.shared_claims(queue)
    before = {q: indexed.of(q) for q in ("q1", "q2")}
    plain_copy, overlay = plain.copy(), indexed.copy()
    for op in [None, *overlay_ops]:  # read between changes: what the overlay keeps must follow
        if op is not None:
            _replay(plain_copy, [op])
            _replay(overlay, [op])
        for queue in ("q1", "q2"):
            assert overlay.of(queue) == plain_copy.of(queue)
            assert overlay.shared_claims(queue) == plain_copy.shared_claims(queue)
            assert indexed.of(queue) == before[queue], "the overlay must not change its base"
    assert overlay.holders() == plain_copy.holders()


@settings(max_examples=150, deadline=None)
@given(base_ops=_ops, later_ops=_ops)
def test_indexed_usage_snapshot_agrees_and_is_independent(
    base_ops: list[tuple[str, str, Charge]], later_ops: list[tuple[str, str, Charge]]
) -> None:
    plain, indexed = Usage(), IndexedUsage()
    _replay(plain, base_ops)
    _replay(indexed, base_ops)
    snapshot = indexed.snapshot()
    frozen = {q: plain.of(q) for q in ("q1", "q2")}
    counts = {q: _holder_count(plain, q) for q in ("q1", "q2")}
    _replay(indexed, later_ops)  # the base moves on; the snapshot must not
    for queue in ("q1", "q2"):
        assert snapshot.of(queue) == frozen[queue]
        assert snapshot.shared_claims(queue) == plain.shared_claims(queue)
        assert snapshot.holder_count(queue) == counts[queue]
    assert snapshot.holders() == plain.holders()
    _replay(snapshot, later_ops)  # and the snapshot, changed, indexes like a fresh one
    _replay(plain, later_ops)
    for queue in ("q1", "q2"):
        assert snapshot.of(queue) == plain.of(queue) == indexed.of(queue)
        assert snapshot.holder_count(queue) == _holder_count(plain, queue)
        assert indexed.holder_count(queue) == _holder_count(plain, queue)


def _holder_count(usage: Usage, queue: str) -> int:
    return sum(1 for h in usage.holders() if (c := usage.charge_of(h)) and c.cluster_queue == queue)


def test_pod_changes_are_charged_per_changed_pod_not_by_rescanning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = cluster_state(gpus=1000)
    for i in range(300):
        state.upsert(pod(f"live-{i}"))
    ledger = MemoryLedger(state, Settings())
    assert ledger.usage().of(QUEUE) == {GPU: 300}
    charged: list[str] = []
    real = podusage_module.live_pod_charge

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        charged.append(obj["metadata"]["name"])
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(podusage_module, "live_pod_charge", counting)
    state.upsert(pod("new"))
    state.remove("Pod", "team-a", "live-0")
    assert ledger.usage().of(QUEUE) == {GPU: 300}
    assert charged == ["new"]


def test_more_pod_changes_than_the_journal_holds_fall_back_to_a_full_comparison() -> None:
    state = cluster_state(gpus=100_000)
    ledger = MemoryLedger(state, Settings())
    gpus_of: dict[str, int] = {}
    for i in range(JOURNAL_LENGTH + 10):
        name, gpus = f"p-{i % 50}", 1 + i % 3
        state.upsert(pod(name, templates=("one-gpu",) * gpus))
        gpus_of[name] = gpus
    expected = sum(gpus_of.values())
    assert ledger.usage().of(QUEUE) == {GPU: expected}
    state.replace_kind("Pod", [pod("only")])
    assert ledger.usage().of(QUEUE) == {GPU: 1}


def test_claim_changes_recharge_only_the_pods_using_them(monkeypatch: pytest.MonkeyPatch) -> None:
    state = cluster_state(gpus=1000)
    for template in ("other-a", "other-b"):
        copy = next(o for o in cluster_objects() if o["kind"] == "ResourceClaimTemplate")
        state.upsert({**copy, "metadata": {"name": template, "namespace": "team-a"}})
    for i in range(100):
        state.upsert(pod(f"p-{i}", templates=("one-gpu",) if i else ("other-a",)))
    ledger = MemoryLedger(state, Settings())
    assert ledger.usage().of(QUEUE) == {GPU: 100}
    charged: list[str] = []
    real = podusage_module.live_pod_charge

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        charged.append(obj["metadata"]["name"])
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(podusage_module, "live_pod_charge", counting)
    template = state.get("ResourceClaimTemplate", "team-a", "other-a")
    assert template is not None
    state.upsert({**template, "metadata": {**template["metadata"], "labels": {"x": "y"}}})
    state.upsert({**template, "metadata": {"name": "unused", "namespace": "team-a"}})
    assert ledger.usage().of(QUEUE) == {GPU: 100}
    assert charged == ["p-0"]


def test_namespace_and_local_queue_changes_recharge_only_that_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = cluster_state(gpus=1000)
    state.upsert({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    queue = next(o for o in cluster_objects() if o["kind"] == "LocalQueue")
    other = {**queue, "metadata": {**queue["metadata"], "namespace": "team-b"}}
    state.upsert(other)
    template = next(o for o in cluster_objects() if o["kind"] == "ResourceClaimTemplate")
    state.upsert({**template, "metadata": {**template["metadata"], "namespace": "team-b"}})
    for i in range(20):
        state.upsert(pod(f"a-{i}"))
        state.upsert(pod(f"b-{i}", namespace="team-b"))
    ledger = MemoryLedger(state, Settings())
    assert ledger.usage().of(QUEUE) == {GPU: 40}
    charged: list[str] = []
    real = podusage_module.live_pod_charge

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        charged.append(obj["metadata"]["name"])
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(podusage_module, "live_pod_charge", counting)
    state.upsert({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b",
                  "labels": {"tier": "batch"}}})  # fmt: skip
    assert ledger.usage().of(QUEUE) == {GPU: 40}
    assert sorted(charged) == sorted(f"b-{i}" for i in range(20))
    charged.clear()
    state.remove("LocalQueue", "team-b", other["metadata"]["name"])  # team-b's pods: unmanaged
    assert ledger.usage().of(QUEUE) == {GPU: 20}
    assert sorted(charged) == sorted(f"b-{i}" for i in range(20))


def test_a_relist_recharges_only_pods_whose_version_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def versioned(name: str, version: str, gpus: int = 1) -> dict[str, Any]:
        obj = pod(name, templates=(TEMPLATE,) * gpus)
        obj["metadata"].update(uid=f"uid-{name}", resourceVersion=version)
        return obj

    state = cluster_state(gpus=1000)
    state.replace_kind("Pod", [versioned(f"p-{i}", "1") for i in range(50)])
    ledger = MemoryLedger(state, Settings())
    assert ledger.usage().of(QUEUE) == {GPU: 50}
    charged: list[str] = []
    real = podusage_module.live_pod_charge

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        charged.append(obj["metadata"]["name"])
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(podusage_module, "live_pod_charge", counting)
    relisted = [versioned(f"p-{i}", "1") for i in range(50)]
    relisted[7] = versioned("p-7", "2", gpus=2)  # p-7 changed: two GPUs now
    state.replace_kind("Pod", relisted)  # new objects, as after a 410 Gone
    assert ledger.usage().of(QUEUE) == {GPU: 51}
    assert charged == ["p-7"]


def test_records_survive_a_recharge_of_every_pod() -> None:
    state = cluster_state(gpus=2)
    ledger = MemoryLedger(state, Settings())
    obj = pod("a", templates=("one-gpu", "one-gpu"))
    assert _admit(ledger, state, obj, "uid-a").allowed
    state.upsert(_created(obj, "uid-a"))
    queue = next(o for o in cluster_objects(gpus=4) if o["kind"] == "ClusterQueue")
    state.upsert(queue)  # a queue change charges every pod again
    template = next(o for o in cluster_objects() if o["kind"] == "ResourceClaimTemplate")
    state.upsert({**template, "metadata": {**template["metadata"], "labels": {"x": "y"}}})
    assert set(ledger.records()) == {"uid-a"}
    assert ledger.usage().of(QUEUE) == {GPU: 2}


def test_pods_without_an_admission_record_are_charged_and_counted() -> None:
    state = cluster_state(gpus=4)
    state.upsert(_created(pod("before-install"), "uid-old"))  # never admitted by draquota
    ledger = MemoryLedger(state, Settings())
    assert ledger.usage().of(QUEUE) == {GPU: 1}
    assert ledger.unrecorded_pods() == 1
    obj = pod("admitted")
    assert _admit(ledger, state, obj, "uid-new").allowed
    state.upsert(_created(obj, "uid-new"))
    assert ledger.usage().of(QUEUE) == {GPU: 2}
    assert ledger.unrecorded_pods() == 1


def test_gone_pods_are_remembered_for_a_while_then_forgotten_oldest_first() -> None:
    clock = Clock()
    state = cluster_state(gpus=10)
    for name in ("old", "new"):
        obj = pod(name)
        obj["metadata"]["uid"] = f"uid-{name}"
        state.upsert(obj)
    usage = podusage_module.PodUsage(state, Settings(), wall=clock)
    state.remove("Pod", "team-a", "old")
    usage.sync()
    clock.now += podusage_module.GONE_MEMORY_SECONDS / 2
    state.remove("Pod", "team-a", "new")
    usage.sync()
    assert usage.gone("uid-old") and usage.gone("uid-new")
    clock.now += podusage_module.GONE_MEMORY_SECONDS / 2 + 1
    usage.sync()
    assert (usage.gone("uid-old"), usage.gone("uid-new")) == (False, True)


def test_pods_charged_alike_share_one_charge_object() -> None:
    state = cluster_state(gpus=100)
    for i in range(10):
        state.upsert(pod(f"p-{i}"))
    usage = podusage_module.PodUsage(state, Settings())
    charges = [usage.usage.charge_of(f"team-a/p-{i}") for i in range(10)]
    assert charges[0] is not None
    assert all(charge is charges[0] for charge in charges)


def test_the_charge_cache_parses_a_record_once_and_forgets_charges_nobody_holds() -> None:
    cache = podusage_module.ChargeCache()
    text = Charge("q1", "ns/lq", {"gpu": "f1"}, {"gpu": 1}).to_annotation()
    parses: list[str] = []

    def parse() -> Charge:
        parses.append(text)
        return Charge.from_annotation(text, "test")

    held = cache.parsed(text, parse)
    assert cache.parsed(text, parse) is held
    assert cache.shared(Charge.from_annotation(text, "test")) is held
    assert len(parses) == 1
    del held
    gc.collect()
    cache.parsed(text, parse)
    assert len(parses) == 2
