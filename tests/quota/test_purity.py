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
