"""`draquota certs generate | rotate | inject --manifests | secret | show`."""

from __future__ import annotations

import base64
import shutil
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from certs.files import DirectoryStore
from certs.serving import subject_alt_names
from tests.manifests.loader import MANIFESTS
from webhook.cli import main


def _generate(out: Path, *extra: str) -> int:
    return main(["certs", "generate", "--out", str(out), *extra])


def test_generate_writes_a_certificate_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tls"
    args = ("--service", "dq", "--namespace", "ops", "--dns", "dq.local", "--ip", "10.0.0.1")
    assert _generate(out, *args, "--days", "30") == 0
    material = DirectoryStore(out).load()
    assert material is not None
    dns, ips = subject_alt_names(material.serving.cert)
    assert dns == {"dq", "dq.ops", "dq.ops.svc", "dq.ops.svc.cluster.local", "dq.local"}
    assert [str(ip) for ip in ips] == ["10.0.0.1"]
    cert = material.serving.cert
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 30
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    assert "dq.ops.svc.cluster.local" in capsys.readouterr().out


def test_generate_refuses_to_replace_existing_certificates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(tmp_path) == 0
    before = (tmp_path / "ca.crt").read_bytes()
    assert _generate(tmp_path) == 2
    assert "certs rotate" in capsys.readouterr().err
    assert (tmp_path / "ca.crt").read_bytes() == before
    assert _generate(tmp_path, "--force") == 0
    assert (tmp_path / "ca.crt").read_bytes() != before


def test_rotate_keeps_names_and_ca_rotate_keeps_the_old_ca_trusted(tmp_path: Path) -> None:
    assert _generate(tmp_path, "--dns", "extra.example", "--ip", "127.0.0.1", "--days", "20") == 0
    first = DirectoryStore(tmp_path).load()
    assert main(["certs", "rotate", "--dir", str(tmp_path)]) == 0
    second = DirectoryStore(tmp_path).load()
    assert second.serving.cert != first.serving.cert
    assert second.ca == first.ca
    assert subject_alt_names(second.serving.cert) == subject_alt_names(first.serving.cert)
    cert = second.serving.cert
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 20
    assert main(["certs", "rotate", "--dir", str(tmp_path), "--ca"]) == 0
    third = DirectoryStore(tmp_path).load()
    assert third.ca != first.ca
    assert third.bundle == (third.ca.cert, first.ca.cert)


def test_rotate_without_certificates_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "rotate", "--dir", str(tmp_path)]) == 2
    assert "certs generate" in capsys.readouterr().err


def test_secret_prints_the_tls_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _generate(tmp_path) == 0
    capsys.readouterr()
    assert main(["certs", "secret", "--dir", str(tmp_path), "--namespace", "ops"]) == 0
    secret = yaml.safe_load(capsys.readouterr().out)
    assert (secret["type"], secret["metadata"]["namespace"]) == ("kubernetes.io/tls", "ops")
    assert base64.b64decode(secret["data"]["tls.key"]) == (tmp_path / "tls.key").read_bytes()


def test_show_never_prints_a_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _generate(tmp_path) == 0
    assert main(["certs", "show", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "expires" in out and "PRIVATE KEY" not in out


def test_inject_rewrites_manifests(tmp_path: Path) -> None:
    certs_dir, manifests = tmp_path / "tls", tmp_path / "manifests"
    assert _generate(certs_dir) == 0
    manifests.mkdir()
    shutil.copy(MANIFESTS / "webhooks.yaml", manifests / "webhooks.yaml")
    ca_file = certs_dir / "ca.crt"
    assert main(["certs", "inject", "--ca-file", str(ca_file), "--manifests", str(manifests)]) == 0
    for doc in yaml.safe_load_all((manifests / "webhooks.yaml").read_text(encoding="utf-8")):
        for hook in doc["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_file.read_bytes()


@pytest.mark.parametrize(
    "args",
    [
        ["--manifests", "."],  # the CA file is a key, not a certificate
        [],  # no target
    ],
    ids=["not-a-certificate", "no-target"],
)
def test_inject_bad_input(tmp_path: Path, args: list[str]) -> None:
    assert _generate(tmp_path) == 0
    ca_file = tmp_path / ("ca.key" if args else "ca.crt")
    assert main(["certs", "inject", "--ca-file", str(ca_file), *args]) == 2
    x509.load_pem_x509_certificates((tmp_path / "ca.crt").read_bytes())
