"""`draquota certs inject|rotate` against a cluster that cannot be used: one line, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from webhook.cli import main


@pytest.fixture
def certs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "tls"
    assert main(["certs", "generate", "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.rstrip("\n")


@pytest.mark.parametrize("action", ["inject", "rotate"])
def test_cluster_problems_are_one_line_and_exit_2(
    action: str,
    certs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    target = ["--ca-file", str(certs / "ca.crt")] if action == "inject" else ["--dir", str(certs)]
    prefix = f"draquota certs {action}: "
    garbage = tmp_path / "garbage"
    garbage.write_text("clusters: [\n")
    err = _one_line_error(capsys, ["certs", action, *target, "--kubeconfig", str(garbage)])
    assert err.startswith(f"{prefix}kubeconfig {garbage}: ")

    missing = tmp_path / "missing"
    err = _one_line_error(capsys, ["certs", action, *target, "--kubeconfig", str(missing)])
    assert err == f"{prefix}kubeconfig {missing}: no such file"

    err = _one_line_error(capsys, ["certs", action, *target, "--in-cluster"])
    assert err.startswith(f"{prefix}--in-cluster: not running in a pod with a service account")

    server = f"http://127.0.0.1:{_closed_port()}"
    refused = _kubeconfig(tmp_path / "refused", server)
    before = (certs / "tls.crt").read_bytes()
    err = _one_line_error(capsys, ["certs", action, *target, "--kubeconfig", str(refused)])
    assert err == f"{prefix}{server}: cannot reach the API server: connection refused"
    assert (certs / "tls.crt").read_bytes() == before  # nothing rotated when publishing failed


def test_rotate_says_what_it_did_and_prints_the_issuer_readably(
    certs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "rotate", "--dir", str(certs)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"renewed the serving certificate in {certs}\n")
    assert "requested" not in out
    assert "  issuer: CN=draquota-ca, serialNumber=" in out
    assert "2.5.4" not in out
    assert main(["certs", "rotate", "--dir", str(certs), "--ca"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"rotated the CA and renewed the serving certificate in {certs}\n")
