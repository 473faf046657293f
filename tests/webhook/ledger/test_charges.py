"""`ChargeCache`, one `Charge` object per distinct charge (webhook/ledger/charges.py).

What a user notices: a replica holding many pods charged alike keeps one object per
distinct charge, parses each record's text once, and lets go of charges nobody holds.
(tests/webhook/ledger/test_memory.py checks that pods charged alike share one object.)
"""

from __future__ import annotations

import gc

from quota.charge import Charge
from webhook.ledger.charges import ChargeCache

ONE = Charge("q1", "ns/lq", {"gpu": "f1"}, {"gpu": 1})
TWO = Charge("q1", "ns/lq", {"gpu": "f1"}, {"gpu": 2})


def _counting(parses: list[str], text: str) -> Charge:
    parses.append(text)
    return Charge.from_annotation(text, "test")


def test_a_records_text_is_parsed_once_while_its_charge_is_held() -> None:
    cache = ChargeCache()
    text, parses = ONE.to_annotation(), []
    held = cache.parsed(text, lambda: _counting(parses, text))
    again = cache.parsed(text, lambda: _counting(parses, text))
    assert again is held and held == ONE
    assert parses == [text]


def test_a_text_that_parses_to_nothing_is_not_remembered() -> None:
    cache = ChargeCache()
    calls: list[None] = []

    def nothing() -> Charge | None:
        calls.append(None)
        return None

    assert cache.parsed("not a charge", nothing) is None
    assert cache.parsed("not a charge", nothing) is None
    assert len(calls) == 2


def test_equal_charges_share_the_object_held_and_distinct_ones_do_not() -> None:
    cache = ChargeCache()
    first = cache.shared(Charge.from_annotation(ONE.to_annotation(), "test"))
    assert cache.shared(Charge.from_annotation(ONE.to_annotation(), "test")) is first
    other = cache.shared(TWO)
    assert other is TWO and other is not first
    text = ONE.to_annotation()
    assert cache.parsed(text, lambda: Charge.from_annotation(text, "test")) is first


def test_a_charge_nobody_holds_is_parsed_again() -> None:
    cache = ChargeCache()
    text, parses = ONE.to_annotation(), []
    held = cache.parsed(text, lambda: _counting(parses, text))
    del held
    gc.collect()
    cache.parsed(text, lambda: _counting(parses, text))
    assert parses == [text, text]
