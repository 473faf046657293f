"""Hot reload of a live server's certificate: `ssl.SSLContext.load_cert_chain` on change.

New handshakes use the new certificate; connections already open keep theirs. Changes are
detected by content, not mtime, because a mounted Secret is swapped through a symlink
(`..data`) that keeps file times. A pair that does not load (a half-written rotation, a key
that does not match) leaves the previous certificate in place and is retried next time.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import threading
from pathlib import Path

from certs.material import TLS_CRT, TLS_KEY
from certs.periodic import Periodic

__all__ = ["CertReloader"]

log = logging.getLogger("draquota.certs")


class CertReloader:
    """Watches `cert_dir/tls.crt` and `cert_dir/tls.key` and reloads them into `context`."""

    def __init__(self, context: ssl.SSLContext, cert_dir: Path, interval: float = 2.0) -> None:
        self.context = context
        self.cert_dir = Path(cert_dir)
        self.interval = interval
        self.reloads = 0
        self.last_error = ""
        self._digest = b""
        self._lock = threading.Lock()
        self._periodic = Periodic("draquota-cert-reloader", interval, self.check)

    @property
    def loaded(self) -> bool:
        """A certificate has been loaded (readiness waits for this)."""
        return bool(self._digest)

    def _paths(self) -> tuple[Path, Path]:
        return self.cert_dir / TLS_CRT, self.cert_dir / TLS_KEY

    def _current_digest(self) -> bytes:
        crt, key = self._paths()
        digest = hashlib.sha256()
        for path in (crt, key):
            digest.update(path.read_bytes())
            digest.update(b"\0")
        return digest.digest()

    def check(self) -> bool:
        """Reload if the files changed; True when a new certificate was loaded."""
        with self._lock:
            try:
                digest = self._current_digest()
                if digest == self._digest:
                    return False
                crt, key = self._paths()
                self.context.load_cert_chain(certfile=str(crt), keyfile=str(key))
            except (OSError, ssl.SSLError) as exc:
                self.last_error = f"{self.cert_dir}: {exc}"
                log.warning("certificate reload failed, keeping the current one: %s", exc)
                return False
            self._digest = digest
            self.reloads += 1
            self.last_error = ""
            return True

    def load(self) -> None:
        """Initial load; raises when the files are missing or do not load."""
        if not self.check() and not self.loaded:
            raise ssl.SSLError(self.last_error or f"{self.cert_dir}: no certificate loaded")

    async def watch(self) -> None:
        """Poll on the event loop that serves the context (preferred for uvicorn: the reload
        then never races a handshake being set up on the same context); cancel to stop."""
        while True:
            await asyncio.sleep(self.interval)
            self.check()

    def start(self) -> None:
        """Poll from a background thread instead (for servers without an event loop)."""
        self._periodic.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._periodic.stop(timeout)
