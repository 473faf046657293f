"""No module of quota/, webhook/ or certs/ is longer than 400 lines.

A module over the limit holds a second concept that wants its own module (STYLE.md:
"split when a second concept moves in"). There is no waiver sentence: a module may
only be longer if it is listed in ACCEPTED with a reason a reviewer accepted, and
STYLE.md lists none, so the list is empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shipped import ROOT, modules

LIMIT = 400

# path relative to the repository root -> the reason a reviewer accepted (none today)
ACCEPTED: dict[str, str] = {}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _too_long(path: Path) -> bool:
    return _lines(path) > LIMIT


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_within_limit(path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    if relative in ACCEPTED:
        return
    assert not _too_long(path), f"{relative}: {_lines(path)} lines, over the limit of {LIMIT}"


def test_accepted_reasons_name_existing_long_modules() -> None:
    for relative, reason in ACCEPTED.items():
        assert reason.strip(), f"{relative}: accepted without a reason"
        assert _too_long(ROOT / relative), (
            f"{relative}: within {LIMIT} lines, drop it from ACCEPTED"
        )


def test_a_module_one_line_over_fails(tmp_path: Path) -> None:
    at_limit = tmp_path / "at_limit.py"
    at_limit.write_text("x = 1\n" * LIMIT)
    over = tmp_path / "over.py"
    over.write_text('"""Longer than 400 lines because it says so."""\n' + "x = 1\n" * LIMIT)
    assert not _too_long(at_limit)
    assert _too_long(over)
