"""The `kubernetes.io/tls` Secret holding the webhook's certificates (and the CA key)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from certs.material import KEY_NAMES, TlsMaterial
from certs.store import StoreConflict

__all__ = ["SECRET_NAME", "SecretStore", "material_from_secret", "tls_secret"]

SECRET_NAME = "draquota-tls"


def tls_secret(
    material: TlsMaterial, name: str = SECRET_NAME, namespace: str = "draquota-system"
) -> dict[str, Any]:
    """The Secret manifest: tls.crt, tls.key (the type's required keys), ca.crt and ca.key, so the
    in-cluster rotator can renew with the same CA. Mounted at --cert-dir, it is a certificate
    directory as is."""
    files = material.to_files()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "draquota"},
        },
        "data": {key: base64.b64encode(files[key]).decode() for key in KEY_NAMES},
    }


def material_from_secret(secret: Mapping[str, Any]) -> TlsMaterial | None:
    """The material of a Secret; None when its data is empty; ValueError when it is unusable."""
    data = secret.get("data") or {}
    if not any(data.get(key) for key in KEY_NAMES):
        return None
    try:
        files = {key: base64.b64decode(value, validate=True) for key, value in data.items()}
    except ValueError as exc:
        raise ValueError(f"Secret data: not base64: {exc}") from None
    return TlsMaterial.from_files(files)


class SecretStore:
    """CertStore over one Secret, written with its resourceVersion so replicas never overwrite
    each other's renewal (a 409 becomes StoreConflict)."""

    def __init__(self, core_v1: Any, namespace: str, name: str = SECRET_NAME) -> None:
        from kubernetes.client.exceptions import ApiException

        self.core_v1 = core_v1
        self.namespace = namespace
        self.name = name
        self._exception = ApiException
        self._resource_version: str | None = None

    def load(self) -> TlsMaterial | None:
        try:
            secret = self.core_v1.read_namespaced_secret(self.name, self.namespace)
        except self._exception as exc:
            if exc.status == 404:
                self._resource_version = None
                return None
            raise
        self._resource_version = secret.metadata.resource_version
        return material_from_secret({"data": secret.data or {}})

    def save(self, material: TlsMaterial) -> None:
        body = tls_secret(material, self.name, self.namespace)
        try:
            if self._resource_version is None:
                # Needs `create` on secrets, which RBAC cannot limit by name: the in-cluster
                # role lacks it, so the Secret is created at install time by an admin.
                self.core_v1.create_namespaced_secret(self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = self._resource_version
                self.core_v1.replace_namespaced_secret(self.name, self.namespace, body)
        except self._exception as exc:
            if exc.status == 409:
                raise StoreConflict(f"Secret {self.namespace}/{self.name}: {exc.reason}") from None
            raise
