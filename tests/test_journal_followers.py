"""One follower of the store's journal: only `quota.journal.JournalCursor` asks what changed.

Following the journal by revision (the revision last read, the keys changed since, a relist
when the journal no longer reaches back, the backwards case of an older view) was written
by hand in five places, each with its own first-read and relist rule. Every reader now keeps
a `JournalCursor`; this scan of quota/ and webhook/ keeps it that way by finding each call
of `.changed_since(` outside the cursor and the journal's own definitions.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("quota", "webhook")
FOLLOWER = "quota/journal.py"
# The journal itself: the view answers from the store's journal, and the store from its view.
DEFINITIONS = {"quota/cluster.py", "webhook/store/clusterstate.py"}
METHOD = "changed_since"


def _calls(path: Path) -> list[tuple[int, bool]]:
    """(line, whether inside a definition of `changed_since`) of each `.changed_since(` call."""
    found: list[tuple[int, bool]] = []

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == METHOD:
            inside = True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == METHOD
        ):
            found.append((node.lineno, inside))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def _call_sites() -> dict[str, list[tuple[int, bool]]]:
    sites: dict[str, list[tuple[int, bool]]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            calls = _calls(path)
            if calls:
                sites[path.relative_to(ROOT).as_posix()] = calls
    return sites


def _source_line(module: str, line: int) -> str:
    return (ROOT / module).read_text(encoding="utf-8").splitlines()[line - 1].strip()


def test_only_the_journal_cursor_asks_the_journal_what_changed() -> None:
    sites = _call_sites()
    offending = [
        f"{module}:{line}: {_source_line(module, line)}"
        for module, calls in sorted(sites.items())
        if module != FOLLOWER
        for line, inside in calls
        if not (inside and module in DEFINITIONS)
    ]
    assert not offending, (
        "follow the journal with quota.journal.JournalCursor, not by hand; "
        "call sites of .changed_since( outside it:\n  " + "\n  ".join(offending)
    )


def test_the_cursor_is_the_follower() -> None:
    followers = {
        module
        for module, calls in _call_sites().items()
        if any(not (inside and module in DEFINITIONS) for _, inside in calls)
    }
    assert FOLLOWER in followers, f"{FOLLOWER} no longer reads the journal: update this test"
