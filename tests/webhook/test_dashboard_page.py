"""The dashboard's HTML (webhook.dashboard.page): what a person reads, and nothing a name or
message can inject."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import pytest

from tests.webhook.dashboard_lab import admin_view, lab_objects
from tests.webhook.test_dashboard_model import listed
from webhook.dashboard.model import preempted, routes
from webhook.dashboard.page import bar, body, document

# What the page's markup may contain; anything else came from a name or a message.
ELEMENTS = {
    *("html", "head", "meta", "title", "link", "script", "body", "header", "main"),
    *("h1", "h2", "p", "section", "span", "table", "tr", "th", "td", "svg", "rect", "line"),
}
HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>" onmouseover="alert(3)'


class _Markup(HTMLParser):
    """Elements, attributes and text of a page, as a browser's parser would see them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(tag)
        self.attributes += attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def _model() -> dict[str, Any]:
    cards, rows = admin_view(lab_objects())
    return {"scope": "Every ClusterQueue", "queues": cards, "waiting": rows, "generated": "now"}


def test_the_page_says_who_lent_what_to_whom_and_why_each_workload_waits() -> None:
    words = _Markup(body(_model())).words()
    assert "ClusterQueue research" in words and "ClusterQueue ml" in words
    assert "2 of 4 in use · lent 2 to ml · can lend 0 · borrowing: no limit" in words
    assert "2 of 0 in use · borrowed 2 from research · can lend 0 · may borrow up to 2" in words
    assert "LocalQueue research/default (1 admitted, 2 pending)" in words
    assert "Waiting (2)" in words
    assert "1 of 2 Pod research/wait-0 research waiting for quota: insufficient" in words
    assert "2 of 2 Job research/train research waiting for quota:" in words


def test_names_and_messages_are_text_never_markup() -> None:
    model = _model()
    hostile = copy.deepcopy(model)
    hostile["scope"] = HOSTILE
    hostile["problems"] = [HOSTILE]
    card = hostile["queues"][1]
    card["name"] = card["cohort"] = card["whenFull"] = HOSTILE
    card["localQueues"][0]["key"] = HOSTILE
    card["flavors"][0]["name"] = HOSTILE
    card["flavors"][0]["resources"][0]["lentTo"][0]["clusterQueue"] = HOSTILE
    for row in hostile["waiting"]:
        row.update(key=HOSTILE, reason=HOSTILE, clusterQueue=HOSTILE, group=HOSTILE)
    markup = _Markup(document(hostile))
    assert set(markup.elements) <= ELEMENTS, set(markup.elements) - ELEMENTS
    assert markup.elements.count("script") == 1  # the page's own, from /dashboard.js
    assert not [name for name, _ in markup.attributes if name.startswith("on")]
    assert markup.words().count(" ".join(HOSTILE.split())) >= 10  # shown, as text
    assert set(_Markup(document(model)).elements) <= ELEMENTS


def test_the_page_has_no_inline_script_or_style() -> None:
    markup = _Markup(document(_model()))
    assert ("src", "/dashboard.js") in markup.attributes
    assert not [name for name, _ in markup.attributes if name == "style"]
    assert "style" not in markup.elements
    # the one script element is empty: its code comes from /dashboard.js
    assert '<script src="/dashboard.js" defer></script>' in document(_model())


def test_a_page_still_loading_and_a_failed_refresh_say_so() -> None:
    assert (
        "Loading: cache pods not synced yet"
        in _Markup(body({"loading": "cache pods not synced yet"})).words()
    )
    failed = {**_model(), "error": "not updated: 503: the server is shutting down"}
    assert "not updated: 503: the server is shutting down" in _Markup(body(failed)).words()
    assert "No queues to show." in _Markup(body({"scope": "", "queues": [], "waiting": []})).words()


@dataclass(frozen=True)
class Case:
    id: str
    row: dict[str, str]
    in_cohort: bool
    segments: tuple[tuple[str, float], ...]
    nominal_at: float


def _row(nominal: str, used: str, lent: str = "0", **extra: str) -> dict[str, str]:
    return {"name": "gpus", "nominal": nominal, "inUse": used, "lent": lent, **extra}


CASES = [
    Case("half-used", _row("4", "2"), False, (("used", 50.0), ("free", 50.0)), 100.0),
    Case("lent-the-rest", _row("4", "2", "2"), True, (("used", 50.0), ("lent", 50.0)), 100.0),
    Case(
        "borrowed-up-to-its-limit",
        _row("0", "2", borrowingLimit="2"),
        True,
        (("borrowed", 100.0),),
        0.0,
    ),
    Case(
        "borrowing-headroom-left",
        _row("2", "3", borrowingLimit="3"),
        True,
        (("used", 40.0), ("borrowed", 20.0), ("headroom", 40.0)),
        40.0,
    ),
    Case(
        "no-headroom-outside-a-cohort",
        _row("2", "1", borrowingLimit="4"),
        False,
        (("used", 50.0), ("free", 50.0)),
        100.0,
    ),
    Case(
        "cpu-in-millicores",
        {**_row("2", "500m"), "name": "cpu"},
        False,
        (("used", 25.0), ("free", 75.0)),
        100.0,
    ),
    Case("empty-queue", _row("0", "0"), False, (), 0.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_bar_is_usage_against_quota_on_one_scale(case: Case) -> None:
    drawn = bar(case.row, case.in_cohort)
    assert drawn.segments == case.segments
    assert drawn.nominal_at == case.nominal_at
    assert sum(width for _, width in drawn.segments) <= 100.0


def _preempting_model() -> dict[str, Any]:
    """ml's page while draquota preempts its pod and Job for research (recorded,
    tests/webhook/kube/record_preemption.py)."""
    pods, jobs = listed("ml", "pods"), listed("ml", "jobs")
    rows = preempted(pods, jobs, (), routes(listed("ml", "localqueues")))
    return {"scope": "Namespace ml", "queues": [], "waiting": [], "preempted": rows}


def test_the_page_says_which_workloads_are_preempted_and_for_whom() -> None:
    words = _Markup(body(_preempting_model())).words()
    assert "Being preempted (2)" in words
    reclaimed = "due to reclamation within the cohort by ClusterQueue research; preemptor: pod"
    assert "Job ml/tune ml Preempted to accommodate a workload (UID: " in words
    assert words.count(reclaimed) == 2
    assert "Being preempted" not in _Markup(body(_model())).words()  # none: no section


def test_a_preempted_workloads_name_and_message_are_text_never_markup() -> None:
    hostile = _preempting_model()
    for row in hostile["preempted"]:
        row.update(key=HOSTILE, clusterQueue=HOSTILE, group=HOSTILE, message=HOSTILE)
    markup = _Markup(document(hostile))
    assert set(markup.elements) <= ELEMENTS, set(markup.elements) - ELEMENTS
    assert markup.elements.count("script") == 1
    assert not [name for name, _ in markup.attributes if name.startswith("on")]
    assert markup.words().count(" ".join(HOSTILE.split())) >= 6
