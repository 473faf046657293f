"""Which kubeconfig and namespace a command reads: kubectl's conventions (issue 25)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from webhook.cli import main
from webhook.commands._kubeconfig import (
    KubeConfig,
    KubeconfigError,
    command_namespace,
    find_kubeconfig,
    load_kubeconfig,
)

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")


def _config(path: Path, namespace: str | None = None, current: str = "work") -> Path:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "work", "context": context}],
                "current-context": current,
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("given", "environ", "expected"),
    [
        pytest.param("~/x.yaml", {}, ("home/x.yaml", "--kubeconfig"), id="tilde-expanded"),
        pytest.param("/etc/k.yaml", {"KUBECONFIG": "/a"}, ("/etc/k.yaml", "--kubeconfig"),
                     id="flag-wins-over-env"),
        pytest.param(None, {"KUBECONFIG": "~/a:/b"}, ("home/a", "$KUBECONFIG"),
                     id="env-first-file"),
        pytest.param(None, {"KUBECONFIG": ":/b"}, ("/b", "$KUBECONFIG"), id="env-empty-entry"),
        pytest.param(None, {}, ("home/.kube/config", "~/.kube/config"), id="home-default"),
    ],
)  # fmt: skip
def test_the_kubeconfig_is_found_as_kubectl_finds_it(
    tmp_path: Path, given: str | None, environ: dict[str, str], expected: tuple[str, str]
) -> None:
    home = tmp_path / "home"
    _config(home / ".kube" / "config")
    found = find_kubeconfig(given, {**environ, "HOME": str(home)})
    path, origin = expected
    assert found == (tmp_path / path if path.startswith("home") else Path(path), origin)


def test_no_kubeconfig_anywhere_is_none(tmp_path: Path) -> None:
    assert find_kubeconfig(None, {"HOME": str(tmp_path)}) is None


def test_the_current_contexts_namespace_is_read(tmp_path: Path) -> None:
    path = _config(tmp_path / "k", namespace="team-a")
    assert load_kubeconfig(path) == KubeConfig(path, "team-a", "--kubeconfig")
    assert load_kubeconfig(_config(tmp_path / "plain")).namespace == ""


@pytest.mark.parametrize(
    ("content", "origin", "problem"),
    [
        pytest.param(None, "--kubeconfig", "no such file", id="missing"),
        pytest.param(None, "$KUBECONFIG", "no such file", id="missing-from-env"),
        pytest.param("a: [", "--kubeconfig", "not a YAML kubeconfig: ", id="bad-yaml"),
        pytest.param("- 1", "--kubeconfig", "not a kubeconfig (expected a YAML mapping)",
                     id="not-a-mapping"),
        pytest.param("kind: Config", "--kubeconfig", "current-context: not set", id="no-context"),
        pytest.param("current-context: x\ncontexts: []", "--kubeconfig",
                     'current-context: context "x" not found in contexts', id="unknown-context"),
    ],
)  # fmt: skip
def test_a_bad_kubeconfig_is_named_with_what_is_wrong(
    tmp_path: Path, content: str | None, origin: str, problem: str
) -> None:
    path = tmp_path / "k"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KubeconfigError) as raised:
        load_kubeconfig(path, origin)
    where = f"kubeconfig {path}" + (" (from $KUBECONFIG)" if origin == "$KUBECONFIG" else "")
    assert str(raised.value).startswith(f"{where}: {problem}")


@pytest.mark.parametrize(
    ("flag", "context", "expected"),
    [("team-b", "team-a", "team-b"), (None, "team-a", "team-a"), (None, "", "default")],
)
def test_the_namespace_is_the_flag_else_the_contexts_else_default(
    flag: str | None, context: str, expected: str
) -> None:
    args = argparse.Namespace(namespace=flag)
    assert command_namespace(args, KubeConfig(Path("k"), context)) == expected
    assert command_namespace(argparse.Namespace(namespace=None), None) == "default"


def test_status_without_any_cluster_says_how_to_give_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status"]) == 2
    assert capsys.readouterr().err == (
        "draquota status: no cluster: give --state DIR or --kubeconfig FILE "
        "(no $KUBECONFIG, no ~/.kube/config)\n"
    )


def test_kubeconfig_from_the_environment_that_is_missing_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "gone"))
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"draquota status: kubeconfig {tmp_path / 'gone'} (from $KUBECONFIG): no such file\n"
    )


def test_state_and_kubeconfig_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = str(_config(tmp_path / "k"))
    assert main(["status", "--state", str(tmp_path), "--kubeconfig", kubeconfig]) == 2
    assert capsys.readouterr().err == (
        "draquota status: --kubeconfig: cannot be used with --state\n"
    )
