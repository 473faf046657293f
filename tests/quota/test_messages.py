"""How amounts, lending and lists read in messages (quota.messages)."""

from __future__ import annotations

from quota.messages import borrowed_text, format_amount, lent_text, listed


def _gpus(value: int) -> str:
    return format_amount("gpus", value)


def _memory(value: int) -> str:
    return format_amount("memory", value)


def test_lent_names_each_borrower_largest_first() -> None:
    assert lent_text({"ml": 2}, _gpus) == "2 lent to ClusterQueue ml"
    assert lent_text({"a": 1, "b": 3, "idle": 0}, _gpus) == (
        "3 lent to ClusterQueue b, 1 lent to ClusterQueue a"
    )
    assert lent_text({}, _gpus) == ""


def test_borrowed_names_each_lender_and_what_no_member_covers() -> None:
    assert borrowed_text(2, {"research": 2}, _gpus) == "2 borrowed from ClusterQueue research"
    assert borrowed_text(3, {"a": 1}, _gpus) == (
        "1 borrowed from ClusterQueue a, 2 borrowed beyond the cohort's quota"
    )
    assert borrowed_text(0, {}, _gpus) == ""
    assert borrowed_text(2**31, {"a": 2**31}, _memory) == "2Gi borrowed from ClusterQueue a"


def test_a_large_cohort_stays_a_short_message() -> None:
    lenders = {f"q{i:02d}": 1 for i in range(40)}
    text = borrowed_text(40, lenders, _gpus)
    assert text.endswith("35 borrowed from 35 more ClusterQueues")
    assert text.count("ClusterQueue q") == 5


def test_listed() -> None:
    assert listed(["a", "b"]) == "a, b"
    assert listed([str(i) for i in range(7)], 3) == "0, 1, 2 and 4 more"
