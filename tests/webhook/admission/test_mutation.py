"""The mutating patch: queue label default, charge annotation, flavor nodeSelector, idempotence."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from quota.decision import decide
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from tests.webhook.builders import FLAVOR_LABELS, QUEUE, cluster_state, pod
from webhook.admission.mutation import escape_pointer, pod_patch


def _decide(obj: dict[str, Any]) -> Decision:
    return decide(obj, cluster_state(4), Usage(), Settings())


def _mutate(obj: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    before = copy.deepcopy(obj)
    ops = pod_patch(obj, _decide(obj))
    assert obj == before, "the patch builder must not modify its input"
    return ops, jsonpatch.apply_patch(obj, ops)


@pytest.mark.parametrize(
    "obj",
    [
        pod(),
        pod(labels={"app": "x"}, annotations={"note": "n"}, node_selector={"zone": "z1"}),
        pod(labels={QUEUE_LABEL: "user-queue"}),
        pod(annotations={CHARGE_ANNOTATION: '{"forged": true}'}),
        pod(node_selector={"gpu.example.com/model": "h100"}),
    ],
    ids=["bare", "other-metadata", "explicit-queue", "forged-charge", "conflicting-selector"],
)
def test_second_mutation_of_its_own_output_adds_nothing(obj: dict[str, Any]) -> None:
    _, mutated = _mutate(obj)
    ops, again = _mutate(mutated)
    assert ops == []
    assert again == mutated


def test_default_queue_label_added_when_pod_resolved_through_default_local_queue() -> None:
    _, mutated = _mutate(pod())
    assert mutated["metadata"]["labels"] == {QUEUE_LABEL: "default"}


def test_explicit_queue_label_is_left_alone() -> None:
    _, mutated = _mutate(pod(labels={QUEUE_LABEL: "user-queue"}))
    assert mutated["metadata"]["labels"] == {QUEUE_LABEL: "user-queue"}


def test_charge_annotation_records_the_recomputed_charge_for_people_to_read() -> None:
    _, mutated = _mutate(pod(templates=("one-gpu", "one-gpu")))
    charge = Charge.from_annotation(mutated["metadata"]["annotations"][CHARGE_ANNOTATION], "pod")
    # no reservation id: the record is kept by pod UID where users cannot write
    assert (charge.cluster_queue, charge.per_pod, charge.reservation) == (QUEUE, {"gpu": 2}, "")


def test_forged_charge_annotation_is_replaced() -> None:
    forged = Charge(QUEUE, "team-a/default", {"gpu": "a100"}, {"gpu": 0}).to_annotation()
    _, mutated = _mutate(pod(annotations={CHARGE_ANNOTATION: forged}))
    charge = Charge.from_annotation(mutated["metadata"]["annotations"][CHARGE_ANNOTATION], "pod")
    assert charge.per_pod == {"gpu": 1}


def test_flavor_node_labels_become_the_node_selector() -> None:
    _, mutated = _mutate(pod(node_selector={"zone": "z1"}))
    assert mutated["spec"]["nodeSelector"] == {"zone": "z1", **FLAVOR_LABELS}


def test_keys_with_slashes_are_escaped_in_json_pointers() -> None:
    ops, _ = _mutate(pod(labels={"app": "x"}, node_selector={}))
    paths = {op["path"] for op in ops}
    assert "/metadata/labels/draquota.io~1queue-name" in paths
    assert "/spec/nodeSelector/gpu.example.com~1model" in paths
    assert escape_pointer("a~b/c") == "a~0b~1c"


def test_denied_or_unmanaged_pod_gets_no_patch() -> None:
    over = pod(templates=("one-gpu",) * 5)
    assert not _decide(over).allowed
    assert pod_patch(over, _decide(over)) == []
    unmanaged = pod(namespace="elsewhere")
    assert _decide(unmanaged).allowed
    assert pod_patch(unmanaged, _decide(unmanaged)) == []
