"""Certificate files on disk: tls.crt, tls.key, ca.crt, ca.key; keys 0600, atomic replace."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from certs.material import CA_CRT, CA_KEY, KEY_NAMES, TLS_CRT, TLS_KEY, TlsMaterial

__all__ = ["SECRET_FILES", "DirectoryStore", "read_files", "write_atomic", "write_material"]

SECRET_FILES = frozenset({TLS_KEY, CA_KEY})
PUBLIC_MODE = 0o644
SECRET_MODE = 0o600


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write `data` to a temporary file in the same directory with `mode`, then rename over
    `path`: a reader sees the old or the new file, never a partial one, and a key is never
    readable by others even for a moment."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_material(directory: Path, material: TlsMaterial) -> None:
    """Write the four files. The bundle goes first so that a client reading ca.crt already trusts
    the CA of the serving certificate that follows; the key precedes its certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    files = material.to_files()
    for name in (CA_CRT, CA_KEY, TLS_KEY, TLS_CRT):
        mode = SECRET_MODE if name in SECRET_FILES else PUBLIC_MODE
        write_atomic(directory / name, files[name], mode)


def read_files(directory: Path) -> dict[str, bytes]:
    """The files present among the four names."""
    found = {}
    for name in KEY_NAMES:
        path = directory / name
        if path.is_file():
            found[name] = path.read_bytes()
    return found


class DirectoryStore:
    """CertStore over a directory (for `draquota certs` and for serving outside a cluster)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def load(self) -> TlsMaterial | None:
        files = read_files(self.directory)
        if not files:
            return None
        return TlsMaterial.from_files(files)

    def save(self, material: TlsMaterial) -> None:
        write_material(self.directory, material)
