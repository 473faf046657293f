"""No module of quota/ or webhook/ is longer than 400 lines without saying why.

A module over the limit must state its reason in its module docstring, in a sentence
that starts with the marker below ("Longer than 400 lines because ..."); anything
else is a second concept that has moved in and wants its own module (STYLE.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("quota", "webhook")
LIMIT = 400
MARKER = "Longer than 400 lines because"


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _unexplained(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    if len(text.splitlines()) <= LIMIT:
        return False
    docstring = ast.get_docstring(ast.parse(text)) or ""
    return MARKER not in " ".join(docstring.split())


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_long_module_says_why(path: Path) -> None:
    assert not _unexplained(path), f"{path.relative_to(ROOT)}: over {LIMIT} lines, no {MARKER!r}"


def test_marker_is_required_of_long_modules(tmp_path: Path) -> None:
    long_body = "x = 1\n" * (LIMIT + 1)
    silent = tmp_path / "silent.py"
    silent.write_text('"""A module."""\n' + long_body)
    explained = tmp_path / "explained.py"
    explained.write_text(f'"""A module.\n\n{MARKER} it must.\n"""\n' + long_body)
    assert _unexplained(silent)
    assert not _unexplained(explained)
