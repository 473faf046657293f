"""Which cluster and namespace a command reads, found the way kubectl finds them.

The kubeconfig is `--kubeconfig FILE`, else the first file of `$KUBECONFIG`, else
`~/.kube/config` when it exists (`~` is expanded in all three). The namespace of
namespace-less objects is `-n/--namespace`, else the namespace of the kubeconfig's
current context, else `default`. `--state DIR` (a directory standing in for a cluster)
always wins: a kubeconfig is looked for only when no `--state` is given.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from quota.errors import DraquotaError
from quota.objectkeys import namespace_or_default

__all__ = [
    "KubeConfig",
    "KubeconfigError",
    "add_kubeconfig_arguments",
    "command_namespace",
    "find_kubeconfig",
    "load_kubeconfig",
]


class KubeconfigError(DraquotaError):
    """The kubeconfig cannot be used: missing, not YAML, or its current context is unusable."""


@dataclass(frozen=True)
class KubeConfig:
    """A kubeconfig file and the namespace of its current context ("" when it names none)."""

    path: Path
    namespace: str = ""
    origin: str = "--kubeconfig"  # where the path came from, for error messages


def add_kubeconfig_arguments(parser: argparse.ArgumentParser, all_namespaces: bool = False) -> None:
    """--kubeconfig FILE, -n/--namespace NS and, where a command lists, -A/--all-namespaces."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="a live cluster, read only (default: $KUBECONFIG, else ~/.kube/config if it exists)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="namespace (default: the kubeconfig context's, else default)",
    )
    if all_namespaces:
        parser.add_argument(
            "-A", "--all-namespaces", action="store_true", help="every namespace (admins)"
        )


def find_kubeconfig(
    given: str | None, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> tuple[Path, str] | None:
    """The kubeconfig to read and where its path came from, or None when there is none."""
    environ = os.environ if environ is None else environ
    if given is not None:
        return _expand(given, environ), "--kubeconfig"
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return _expand(listed[0], environ), "$KUBECONFIG"
    default = (home if home is not None else _home(environ)) / ".kube" / "config"
    return (default, "~/.kube/config") if default.is_file() else None


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ["HOME"]) if environ.get("HOME") else Path.home()


def _expand(path: str, environ: Mapping[str, str]) -> Path:
    if path == "~" or path.startswith("~/"):
        return _home(environ) / path[2:]
    return Path(path).expanduser()


def load_kubeconfig(path: Path, origin: str = "--kubeconfig") -> KubeConfig:
    """The file and its current context's namespace; KubeconfigError naming the file."""
    where = f"kubeconfig {path}" + ("" if origin == "--kubeconfig" else f" (from {origin})")
    if not path.is_file():
        raise KubeconfigError(f"{where}: no such file")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        problem = str(exc).split("\n", 1)[0]
        raise KubeconfigError(f"{where}: not a YAML kubeconfig: {problem}") from None
    except OSError as exc:
        raise KubeconfigError(f"{where}: {exc.strerror or exc}") from None
    if not isinstance(document, Mapping):
        raise KubeconfigError(f"{where}: not a kubeconfig (expected a YAML mapping)")
    return KubeConfig(path, _context_namespace(document, where), origin)


def _context_namespace(document: Mapping[str, Any], where: str) -> str:
    current = document.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError(f"{where}: current-context: not set")
    contexts = document.get("contexts")
    for entry in contexts if isinstance(contexts, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == current:
            context = entry.get("context")
            namespace = context.get("namespace") if isinstance(context, Mapping) else None
            if namespace is not None and not isinstance(namespace, str):
                raise KubeconfigError(f'{where}: context "{current}": namespace: must be a string')
            return namespace or ""
    raise KubeconfigError(f'{where}: current-context: context "{current}" not found in contexts')


def command_namespace(args: argparse.Namespace, config: KubeConfig | None) -> str:
    """-n, else the context's namespace, else `default`."""
    given = getattr(args, "namespace", None)
    if given:
        return str(given)
    return namespace_or_default(config.namespace if config is not None else None)
