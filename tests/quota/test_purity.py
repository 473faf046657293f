"""quota/ is the functional core: no network, no FastAPI, no kubernetes client."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

QUOTA = Path(__file__).resolve().parents[2] / "quota"
FORBIDDEN = (
    "webhook",
    "certs",
    "fastapi",
    "starlette",
    "uvicorn",
    "kubernetes",
    "httpx",
    "requests",
    "urllib3",
    "socket",
    "http",
    "asyncio",
    "subprocess",
)


def _imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


@pytest.mark.parametrize(
    "path", sorted(QUOTA.rglob("*.py")), ids=lambda p: str(p.relative_to(QUOTA))
)
def test_quota_module_imports_only_the_core(path: Path) -> None:
    assert not _imports(path) & set(FORBIDDEN)


def _module_name(path: Path) -> str:
    parts = path.relative_to(QUOTA.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _quota_imports(path: Path, known: set[str]) -> set[str]:
    """quota modules `path` imports, anywhere in it (a submodule named in `from p import m`
    counts as that submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module in known and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {node.module})
    return found


def _import_graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in QUOTA.rglob("*.py")}
    return {name: _quota_imports(path, set(paths)) for name, path in paths.items()}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_quota_modules_import_each_other_without_cycles() -> None:
    graph = _import_graph()
    cycles = sorted(
        f"{name} -> {other}"
        for name, imported in graph.items()
        for other in imported
        if name in _reachable(graph, other)
    )
    assert cycles == []


def test_usage_does_not_import_decision() -> None:
    """Issue 15's circle: usage is what decisions read, never the other way round."""
    graph = _import_graph()
    assert "quota.usage" in _reachable(graph, "quota.decision")
    assert "quota.decision" not in _reachable(graph, "quota.usage")
