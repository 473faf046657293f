"""Every package quota/, webhook/ and certs/ import is one `pip install .` installs.

The image is built with `pip install .` (Dockerfile): only `[project] dependencies`, no
test extras. A module imported at run time from a package only the tests install (httpx
for forwarding, until stop 36) made `draquota serve` fail at start with
ModuleNotFoundError in the image while every test, run with the extras, passed. A package
that arrives only under another (starlette under fastapi) is declared too: what we import
is ours to pin, not our dependencies' to drop.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import Requirement

from tests.shipped import PACKAGES, ROOT, modules


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_normal(Requirement(line).name) for line in project["dependencies"]}


def _imports(path: Path) -> Iterator[str]:
    """The top-level names `path` imports absolutely, at any depth of the module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.partition(".")[0]


def _third_party() -> dict[str, list[str]]:
    """Each third-party top-level module imported by the shipped packages -> the files."""
    ours = set(PACKAGES) | {"__future__"}
    found: dict[str, list[str]] = {}
    for path in modules():
        for name in set(_imports(path)):
            if name not in ours and name not in sys.stdlib_module_names:
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_package_the_shipped_code_imports_is_a_declared_dependency() -> None:
    providers = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared = {
        module: files
        for module, files in _third_party().items()
        if not {_normal(name) for name in providers.get(module, [module])} & declared
    }
    assert undeclared == {}, (
        "imported by the shipped packages but not in pyproject.toml [project] dependencies "
        f"(so missing from the image): {undeclared}"
    )


def test_the_scan_sees_the_imports_it_must_judge() -> None:
    """The check above is only as good as the scan: it must see an import inside a
    function (certs/kube.py imports urllib3 there) and the forwarding client."""
    found = _third_party()
    assert "certs/kube.py" in found["urllib3"]
    assert "webhook/edge/forwarding.py" in found["aiohttp"]
