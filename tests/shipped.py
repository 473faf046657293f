"""The shipped packages, for tests that read their source: what `pip install .` installs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("quota", "webhook", "certs")


def modules() -> list[Path]:
    """Every module of the shipped packages, in path order."""
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
