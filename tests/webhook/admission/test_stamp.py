"""Reading the charge annotation /mutate stamped: parsed once per text, long texts never kept."""

from __future__ import annotations

from quota.charge import CHARGE_ANNOTATION, Charge
from tests.webhook.builders import pod
from webhook.admission.stamp import KNOWN_STAMP_BYTES, Stamp, stamp_of
from webhook.edge.review import AdmissionRequest

REQUEST = AdmissionRequest("uid", "CREATE", "", "v1", "Pod", "pods", namespace="team-a")


def test_a_stamp_is_parsed_once_per_text_and_long_texts_are_not_kept() -> None:
    short = Charge("team-a", "team-a/default", {"gpu": "a100"}, {"gpu": 1}).to_annotation()
    long = Charge("team-a", "team-a/default", {"x" * KNOWN_STAMP_BYTES: "a100"}).to_annotation()
    broken = "{" * 10
    known: dict[str, Stamp] = {}
    for text in (short, long, broken):
        first = stamp_of(REQUEST, pod("a", annotations={CHARGE_ANNOTATION: text}), known)
        again = stamp_of(REQUEST, pod("b", annotations={CHARGE_ANNOTATION: text}), known)
        assert first == again and first is not None
    assert set(known) == {short, broken}
    assert known[short].charge is not None and known[short].charge.per_pod == {"gpu": 1}
    assert known[broken] == Stamp(None)
    assert stamp_of(REQUEST, pod("c"), known) is None
