"""caBundle injection into the webhook configurations (and CRD conversion webhooks).

The cluster is reached through `AdmissionClient`, a two-method interface, so the logic is
tested without a cluster; `KubeAdmissionClient` is the real one over the `kubernetes` client.
Writes are read-modify-replace with the object's resourceVersion, retried on conflict, and
skipped when the caBundle is already right (so a rotator may call it every minute).
"""

from __future__ import annotations

import base64
import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from certs.store import StoreConflict

__all__ = [
    "CRD",
    "DEFAULT_TARGETS",
    "MUTATING",
    "VALIDATING",
    "AdmissionClient",
    "InjectResult",
    "KubeAdmissionClient",
    "WebhookInjector",
    "inject",
    "inject_manifests",
    "with_ca_bundle",
]

MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
CRD = "CustomResourceDefinition"
DEFAULT_TARGETS: tuple[tuple[str, str], ...] = ((MUTATING, "draquota"), (VALIDATING, "draquota"))

log = logging.getLogger("draquota.certs")


class AdmissionClient(Protocol):
    def read(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object as a plain dict, None when it does not exist."""
        ...

    def replace(self, kind: str, name: str, body: dict[str, Any]) -> None:
        """PUT `body` (carrying metadata.resourceVersion); StoreConflict on HTTP 409."""
        ...


def _client_configs(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = obj.get("kind")
    if kind in (MUTATING, VALIDATING):
        return [hook.setdefault("clientConfig", {}) for hook in obj.get("webhooks") or []]
    if kind == CRD:
        conversion = (obj.get("spec") or {}).get("conversion") or {}
        if conversion.get("strategy") == "Webhook":
            webhook = conversion.setdefault("webhook", {})
            return [webhook.setdefault("clientConfig", {})]
    return []


def with_ca_bundle(obj: Mapping[str, Any], bundle_pem: bytes) -> dict[str, Any] | None:
    """A copy of `obj` with every clientConfig trusting `bundle_pem`; None if nothing changes."""
    encoded = base64.b64encode(bundle_pem).decode()
    updated = copy.deepcopy(dict(obj))
    changed = False
    for config in _client_configs(updated):
        if config.get("caBundle") != encoded:
            config["caBundle"] = encoded
            changed = True
    return updated if changed else None


@dataclass
class InjectResult:
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def inject(
    client: AdmissionClient,
    bundle_pem: bytes,
    targets: Sequence[tuple[str, str]] = DEFAULT_TARGETS,
    retries: int = 5,
) -> InjectResult:
    """Set caBundle on each (kind, name) target, retrying a conflicting write `retries` times."""
    result = InjectResult()
    for kind, name in targets:
        ref = f"{kind}/{name}"
        for attempt in range(retries + 1):
            current = client.read(kind, name)
            if current is None:
                result.missing.append(ref)
                break
            updated = with_ca_bundle(current, bundle_pem)
            if updated is None:
                result.unchanged.append(ref)
                break
            try:
                client.replace(kind, name, updated)
            except StoreConflict:
                if attempt == retries:
                    raise
                continue
            result.changed.append(ref)
            break
    return result


class WebhookInjector:
    """BundlePublisher for the rotator: keeps caBundle of the draquota configurations current."""

    def __init__(
        self, client: AdmissionClient, targets: Sequence[tuple[str, str]] = DEFAULT_TARGETS
    ) -> None:
        self.client = client
        self.targets = tuple(targets)

    def publish(self, bundle_pem: bytes) -> list[str]:
        result = inject(self.client, bundle_pem, self.targets)
        for ref in result.missing:
            log.warning("cannot publish caBundle: %s not found", ref)
        for ref in result.changed:
            log.info("caBundle published to %s", ref)
        return result.changed


def inject_manifests(directory: Path, bundle_pem: bytes) -> list[Path]:
    """Rewrite caBundle in the YAML files under `directory` that hold webhook configurations or
    CRDs with a conversion webhook; other files are left byte for byte. Comments in a
    rewritten file are not kept (YAML is re-serialised)."""
    rewritten = []
    for path in sorted(p for p in Path(directory).rglob("*") if p.suffix in (".yaml", ".yml")):
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        changed = False
        for index, doc in enumerate(docs):
            if isinstance(doc, dict):
                updated = with_ca_bundle(doc, bundle_pem)
                if updated is not None:
                    docs[index] = updated
                    changed = True
        if changed:
            path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
            rewritten.append(path)
    return rewritten


class KubeAdmissionClient:
    """AdmissionClient over the `kubernetes` client (admissionregistration/v1, apiextensions/v1)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._api_client = api_client
        self._admission = client.AdmissionregistrationV1Api(api_client)
        self._extensions = client.ApiextensionsV1Api(api_client)
        self._exception = client.exceptions.ApiException

    def _methods(self, kind: str) -> tuple[Any, Any]:
        if kind == MUTATING:
            api = self._admission
            return (
                api.read_mutating_webhook_configuration,
                api.replace_mutating_webhook_configuration,
            )
        if kind == VALIDATING:
            api = self._admission
            return (
                api.read_validating_webhook_configuration,
                api.replace_validating_webhook_configuration,
            )
        if kind == CRD:
            crds = self._extensions
            return crds.read_custom_resource_definition, crds.replace_custom_resource_definition
        raise ValueError(f"caBundle injection: unsupported kind {kind}")

    def read(self, kind: str, name: str) -> dict[str, Any] | None:
        read, _ = self._methods(kind)
        try:
            obj = read(name)
        except self._exception as exc:
            if exc.status == 404:
                return None
            raise
        data: dict[str, Any] = self._api_client.sanitize_for_serialization(obj)
        data.setdefault("kind", kind)
        return data

    def replace(self, kind: str, name: str, body: dict[str, Any]) -> None:
        _, replace = self._methods(kind)
        try:
            replace(name, body)
        except self._exception as exc:
            if exc.status == 409:
                raise StoreConflict(f"{kind}/{name}: {exc.reason}") from None
            raise
