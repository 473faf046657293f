"""Private keys never print."""

from __future__ import annotations

import traceback

from certs.material import TlsMaterial
from certs.pem import PrivateKeyPEM


def test_private_key_repr_and_str_are_redacted(material: TlsMaterial) -> None:
    key = material.serving.key
    secret = key.reveal().decode()
    assert "PRIVATE KEY" in secret
    for text in (repr(key), str(key), f"{key}", repr(material), repr(material.ca)):
        assert "PRIVATE KEY" not in text
        assert secret.splitlines()[1] not in text


def test_private_key_stays_out_of_tracebacks(material: TlsMaterial) -> None:
    def fail(key: PrivateKeyPEM) -> None:
        raise RuntimeError(f"cannot use {key}")

    try:
        fail(material.ca.key)
    except RuntimeError:
        text = traceback.format_exc()
    assert "**********" in text
    assert material.ca.key.reveal().decode().splitlines()[1] not in text


def test_private_key_round_trips_and_compares_by_content(material: TlsMaterial) -> None:
    key = material.serving.key
    assert PrivateKeyPEM(key.reveal()) == key
    assert PrivateKeyPEM.from_key(key.key()) == key
    assert key != material.ca.key
