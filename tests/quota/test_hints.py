"""Did-you-mean hints for mistyped names, and the warning for Kueue's queue label."""

from __future__ import annotations

import pytest

from quota.charge import QUEUE_LABEL
from quota.hints import KUEUE_QUEUE_LABEL, class_hint, closest, foreign_label_warning, queue_hint

CLASSES = ["gpu.example.com", "nic.example.com"]


@pytest.mark.parametrize(
    ("name", "candidates", "expected"),
    [
        pytest.param("gpu.exmaple.com", CLASSES, "gpu.example.com", id="letters-swapped"),
        pytest.param("gpuu.example.com", CLASSES, "gpu.example.com", id="letter-doubled"),
        pytest.param("defualt", ["default", "gpu"], "default", id="local-queue"),
        pytest.param("Default", ["default"], "default", id="capital"),
        # the device part differs: alike domains do not make a typo
        pytest.param("fpga.example.com", CLASSES, "", id="another-device"),
        pytest.param("nope", ["default"], "", id="nothing-close"),
        pytest.param("default", ["default"], "", id="exists"),
        pytest.param("x", [], "", id="no-candidates"),
    ],
)
def test_closest(name: str, candidates: list[str], expected: str) -> None:
    assert closest(name, candidates) == expected


def test_queue_hint_names_the_closest_and_the_namespace_queues_only() -> None:
    keys = ["research/default", "research/gpu", "ml/defaults"]
    assert queue_hint("research", "defualt", keys) == (
        ": did you mean default? (LocalQueues in research: default, gpu)"
    )
    assert queue_hint("research", "zzz", keys) == "; LocalQueues in research: default, gpu"
    assert queue_hint("sandbox", "default", keys) == "; namespace sandbox has no LocalQueue"


def test_queue_hint_lists_a_bounded_number() -> None:
    keys = [f"research/q{i:03d}" for i in range(1000)]
    hint = queue_hint("research", "zzz", keys)
    assert hint == "; LocalQueues in research: q000, q001, q002, q003, q004 and 995 more"


def test_class_hint() -> None:
    assert class_hint(["gpu.exmaple.com"], CLASSES, []) == (
        ": did you mean gpu.example.com? (the ClusterQueue maps gpu.example.com, nic.example.com)"
    )
    # a DeviceClass of the cluster is not taken for a typo: the queue simply does not map it
    assert class_hint(["gpu.exmaple.com"], CLASSES, ["gpu.exmaple.com"]) == (
        "; the ClusterQueue maps gpu.example.com, nic.example.com"
    )
    assert class_hint(["gpu.exmaple.com", "nic.exmple.com"], CLASSES, []) == (
        ": did you mean gpu.example.com (for gpu.exmaple.com), nic.example.com (for "
        "nic.exmple.com)? (the ClusterQueue maps gpu.example.com, nic.example.com)"
    )
    assert class_hint(["tpu.example.org"], [], []) == "; the ClusterQueue maps none"


def test_kueue_label_without_draquotas_is_warned_about() -> None:
    warning = foreign_label_warning({KUEUE_QUEUE_LABEL: "gpu"})
    assert (
        warning == "kueue.x-k8s.io/queue-name is not read by draquota; use draquota.io/queue-name"
    )
    assert foreign_label_warning({KUEUE_QUEUE_LABEL: "gpu", QUEUE_LABEL: "gpu"}) == ""
    assert foreign_label_warning({}) == ""
    assert foreign_label_warning(5) == ""  # not labels at all: not this check's business
