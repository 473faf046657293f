"""CertReloader: loads on change only, refuses to start without a certificate."""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

import pytest

from certs.files import write_material
from certs.material import TlsMaterial
from certs.reload import CertReloader
from certs.rotation import renew_serving
from tests.certs.conftest import NOW, SPEC


def _context() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)


def test_load_without_files_fails_and_is_not_ready(tmp_path: Path) -> None:
    reloader = CertReloader(_context(), tmp_path)
    with pytest.raises(ssl.SSLError, match=r"tls\.crt"):
        reloader.load()
    assert not reloader.loaded


def test_reload_happens_only_when_the_content_changes(
    tmp_path: Path, material: TlsMaterial
) -> None:
    write_material(tmp_path, material)
    reloader = CertReloader(_context(), tmp_path)
    reloader.load()
    assert reloader.loaded and reloader.reloads == 1
    write_material(tmp_path, material)  # same content, new files
    assert reloader.check() is False
    write_material(tmp_path, renew_serving(material, SPEC, NOW))
    assert reloader.check() is True
    assert reloader.reloads == 2


def test_background_thread_stops(tmp_path: Path, material: TlsMaterial) -> None:
    write_material(tmp_path, material)
    reloader = CertReloader(_context(), tmp_path, interval=0.01)
    reloader.load()
    reloader.start()
    reloader.stop()
    assert not any(t.name == "draquota-cert-reloader" for t in threading.enumerate())
