"""The core reads a placement's outcome from its typed fields, never by probing for them.

Every placer answers a `quota.placement.Placement`. A `getattr(placement, "now", True)`
would keep working when a placer answers something else and silently read the default
(a busy cluster judged free, a too-complex question judged unplaceable): so no module
of quota/ probes an object for a field of `Placement` with getattr or hasattr.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from quota.placement import Placement

QUOTA = Path(__file__).resolve().parents[2] / "quota"
FIELDS = frozenset(field.name for field in dataclasses.fields(Placement))
PROBES = ("getattr", "hasattr")


def _probes(source: str) -> list[str]:
    """`getattr(x, "field"...)` / `hasattr(x, "field")` calls naming a field of Placement."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in PROBES or len(node.args) < 2:
            continue
        name = node.args[1]
        if isinstance(name, ast.Constant) and name.value in FIELDS:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize(
    "path", sorted(QUOTA.rglob("*.py")), ids=lambda p: str(p.relative_to(QUOTA))
)
def test_no_module_of_the_core_probes_a_placement(path: Path) -> None:
    assert _probes(path.read_text(encoding="utf-8")) == []


def test_the_probe_finder_finds_probes_of_placement_fields_only() -> None:
    source = (
        'if getattr(placement, "now", True): pass\n'
        'if hasattr(placement, "too_complex"): pass\n'
        'bind = getattr(placer, "on", None)\n'
        "if placement.invalid: pass\n"
    )
    assert _probes(source) == [
        "line 1: getattr(placement, 'now', True)",
        "line 2: hasattr(placement, 'too_complex')",
    ]
