"""`GoneUids`, the UIDs of pods and Jobs that left the view (webhook/ledger/goneuids.py).

What a user notices: an admission retried for a pod already gone is not counted again for
`GONE_MEMORY_SECONDS` (tests/webhook/ledger/test_podusage.py), and the memory is bounded by time.
"""

from __future__ import annotations

from webhook.ledger.goneuids import GONE_MEMORY_SECONDS, GoneUids

NOW = 1_800_000_000.0


def test_a_uid_is_remembered_for_the_memory_then_forgotten_oldest_first() -> None:
    gone = GoneUids()
    gone.left("uid-old", NOW)
    gone.left("uid-new", NOW + 10)
    gone.forget_before(NOW + GONE_MEMORY_SECONDS)
    assert "uid-old" in gone and "uid-new" in gone
    gone.forget_before(NOW + GONE_MEMORY_SECONDS + 1)
    assert "uid-old" not in gone and "uid-new" in gone
    gone.forget_before(NOW + GONE_MEMORY_SECONDS + 11)
    assert "uid-new" not in gone


def test_leaving_again_restarts_the_memory() -> None:
    gone = GoneUids()
    gone.left("uid-a", NOW)
    gone.left("uid-b", NOW + 1)
    gone.left("uid-a", NOW + 100)  # seen again, and gone again
    gone.forget_before(NOW + GONE_MEMORY_SECONDS + 2)
    assert "uid-a" in gone and "uid-b" not in gone


def test_a_uid_back_in_the_view_is_not_gone() -> None:
    gone = GoneUids()
    gone.left("uid-a", NOW)
    gone.back("uid-a")
    gone.back("uid-never")
    assert "uid-a" not in gone and "uid-never" not in gone
