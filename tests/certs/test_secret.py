"""The kubernetes.io/tls Secret: valid, complete, and read back as the same material."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from certs.material import TlsMaterial
from certs.secret import material_from_secret, tls_secret


@pytest.mark.parametrize("version", ["1.32", "1.33", "1.34"])
def test_secret_manifest_is_a_valid_tls_secret(material: TlsMaterial, version: str) -> None:
    secret = tls_secret(material)
    kubernetes_validate.validate(secret, version, strict=True)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "draquota-tls",
        "namespace": "draquota-system",
        "labels": {"app.kubernetes.io/name": "draquota"},
    }
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_secret_round_trips(material: TlsMaterial) -> None:
    assert material_from_secret(tls_secret(material)) == material


def test_empty_secret_means_no_material_yet() -> None:
    assert material_from_secret({"data": {}}) is None
    assert material_from_secret({}) is None


def test_corrupt_secret_is_an_error_naming_the_key(material: TlsMaterial) -> None:
    secret = tls_secret(material)
    secret["data"]["tls.crt"] = "bm90IGEgY2VydA=="
    with pytest.raises(ValueError, match=re.escape("tls.crt")):
        material_from_secret(secret)
    secret["data"]["tls.crt"] = "%%%"
    with pytest.raises(ValueError, match="not base64"):
        material_from_secret(secret)
