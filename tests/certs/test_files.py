"""Certificate files: keys readable by the owner only, replaced atomically, read back intact."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from certs.files import DirectoryStore, write_atomic, write_material
from certs.material import TlsMaterial


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_written_0600_and_certificates_0644(tmp_path: Path, material: TlsMaterial) -> None:
    write_material(tmp_path, material)
    modes = {p.name: _mode(p) for p in tmp_path.iterdir()}
    assert modes == {"tls.key": 0o600, "ca.key": 0o600, "tls.crt": 0o644, "ca.crt": 0o644}


def test_directory_store_round_trips(tmp_path: Path, material: TlsMaterial) -> None:
    store = DirectoryStore(tmp_path)
    assert store.load() is None
    store.save(material)
    assert store.load() == material


def test_replacing_a_file_keeps_the_old_one_until_the_new_one_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "tls.key"
    write_atomic(target, b"old", 0o600)

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new", 0o600)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["tls.key"]  # no temporary file left


@pytest.mark.parametrize(
    "broken, message",
    [
        ("tls.crt", "tls.crt"),
        ("tls.key", "tls.key"),
        ("ca.crt", "ca.crt"),
        ("ca.key", "ca.key"),
    ],
)
def test_unusable_file_is_named(
    tmp_path: Path, material: TlsMaterial, broken: str, message: str
) -> None:
    write_material(tmp_path, material)
    (tmp_path / broken).write_bytes(b"garbage")
    with pytest.raises(ValueError, match=re.escape(message)):
        DirectoryStore(tmp_path).load()


def test_key_of_another_certificate_is_refused(tmp_path: Path, material: TlsMaterial) -> None:
    write_material(tmp_path, material)
    (tmp_path / "tls.key").write_bytes(material.ca.key.reveal())
    with pytest.raises(ValueError, match=re.escape("tls.key: does not belong to tls.crt")):
        DirectoryStore(tmp_path).load()
    (tmp_path / "tls.key").write_bytes(material.serving.key.reveal())
    (tmp_path / "ca.key").write_bytes(material.serving.key.reveal())
    with pytest.raises(ValueError, match=re.escape("ca.key belongs to no certificate of ca.crt")):
        DirectoryStore(tmp_path).load()
