"""Builders for queue scenarios: a compact YAML shorthand expanded into real objects.

A scenario (see fixtures/queues/*.yaml):

    flavors: [default, {name: spot, nodeLabels: {pool: spot}}]
    namespaces: {team-a: {team: a}}
    queues:
    - name: a
      cohort: research                 # optional
      whenCanBorrow: TryNextFlavor     # optional
      namespaceSelector: {}            # default {}; `null` selects nothing
      classes: {gpus: [gpu.example.com]}   # resources of kind DeviceClass
      groups:
      - default: {gpus: 5}             # flavor -> resource -> nominal, or
        spot: {gpus: {nominal: 5, borrowingLimit: 1, lendingLimit: 2}}
    localQueues: {team-a/default: a}
    claims: {team-a/shared: {gpu.example.com: 2}}      # shared ResourceClaims
    running: [<submission>...]         # live pods in the state (may carry phase, charge)
    submit: [<submission>...]          # decided in order, each with `expect`

A submission: {name, ns (team-a), kind (Pod), queue (label), devices: {class: n},
shared: [claim], requests: {cpu: 1}, parallelism, completions, template (name),
nodeSelector, affinity}.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL

__all__ = ["cluster_queue", "scenario_objects", "submission_object"]

GROUP = "draquota.io/v1beta1"


def _quota(resource: str, value: Any, classes: Mapping[str, list[str]]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": resource}
    if resource in classes:
        entry["kind"] = "DeviceClass"
        entry["deviceClassNames"] = list(classes[resource])
    if isinstance(value, Mapping):
        entry["nominalQuota"] = value["nominal"]
        for key in ("borrowingLimit", "lendingLimit"):
            if key in value:
                entry[key] = value[key]
    else:
        entry["nominalQuota"] = value
    return entry


def cluster_queue(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ClusterQueue object from the shorthand."""
    classes = spec.get("classes") or {}
    groups = []
    for group in spec.get("groups") or []:
        flavors = []
        covered: list[str] = []
        for flavor, resources in group.items():
            if not covered:
                covered = list(resources)
            flavors.append(
                {
                    "name": flavor,
                    "resources": [_quota(r, v, classes) for r, v in resources.items()],
                }
            )
        groups.append({"coveredResources": covered, "flavors": flavors})
    body: dict[str, Any] = {
        "namespaceSelector": spec.get("namespaceSelector", {}),
        "resourceGroups": groups,
    }
    if spec.get("cohort"):
        body["cohort"] = spec["cohort"]
    if spec.get("whenCanBorrow"):
        body["flavorFungibility"] = {"whenCanBorrow": spec["whenCanBorrow"]}
    return {
        "apiVersion": GROUP,
        "kind": "ClusterQueue",
        "metadata": {"name": spec["name"]},
        "spec": body,
    }


def _template(namespace: str, name: str, devices: Mapping[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": _requests(devices)}}},
    }


def _requests(devices: Mapping[str, int]) -> list[dict[str, Any]]:
    return [
        {"name": f"r{i}", "exactly": {"deviceClassName": c, "count": n}}
        for i, (c, n) in enumerate(sorted(devices.items()))
    ]


def submission_object(sub: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Pod or workload of a submission, and the templates it needs."""
    namespace = sub.get("ns", "team-a")
    name = sub["name"]
    extra: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    if sub.get("devices"):
        template = sub.get("template") or f"{name}-tmpl"
        extra.append(_template(namespace, template, sub["devices"]))
        claims.append({"name": "devices", "resourceClaimTemplateName": template})
    elif sub.get("template"):
        claims.append({"name": "devices", "resourceClaimTemplateName": sub["template"]})
    for i, shared in enumerate(sub.get("shared") or []):
        claims.append({"name": f"shared-{i}", "resourceClaimName": shared})
    container: dict[str, Any] = {"name": "main", "image": "example.com/app:1"}
    if sub.get("requests"):
        container["resources"] = {"requests": dict(sub["requests"])}
    pod_spec: dict[str, Any] = {"containers": [container]}
    for key in ("nodeSelector", "affinity"):
        if key in sub:
            pod_spec[key] = copy.deepcopy(sub[key])
    if claims:
        pod_spec["resourceClaims"] = claims
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if sub.get("queue"):
        metadata["labels"] = {QUEUE_LABEL: sub["queue"]}
    if sub.get("charge") is not None:
        charge = sub["charge"]
        text = charge if isinstance(charge, str) else json.dumps(charge)
        metadata["annotations"] = {CHARGE_ANNOTATION: text}
    if sub.get("deleting"):  # deleted long ago with a 30 s grace period: no longer held
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        metadata["deletionGracePeriodSeconds"] = 30
    if sub.get("terminating"):  # deleted, but inside a day-long grace period: still held
        metadata["deletionTimestamp"] = "2999-01-01T00:00:00Z"
        metadata["deletionGracePeriodSeconds"] = 86400
    kind = sub.get("kind", "Pod")
    if kind == "Pod":
        obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": pod_spec,
        }
        if sub.get("phase"):
            obj["status"] = {"phase": sub["phase"]}
        return obj, extra
    template = {"metadata": {"labels": metadata.pop("labels", {})}, "spec": pod_spec}
    spec: dict[str, Any] = {"template": template}
    for key in ("parallelism", "completions", "replicas", "suspend"):
        if key in sub:
            spec[key] = sub[key]
    api = "batch/v1" if kind == "Job" else "apps/v1"
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}, extra


def scenario_objects(scenario: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every object of a scenario's cluster view (without the submissions)."""
    objects: list[dict[str, Any]] = []
    for flavor in scenario.get("flavors", ["default"]):
        flavor = {"name": flavor} if isinstance(flavor, str) else flavor
        spec = {"nodeLabels": dict(flavor["nodeLabels"])} if flavor.get("nodeLabels") else {}
        objects.append(
            {
                "apiVersion": GROUP,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor["name"]},
                "spec": spec,
            }
        )
    namespaces = dict(scenario.get("namespaces") or {"team-a": {}, "team-b": {}})
    for name, labels in namespaces.items():
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": dict(labels or {})},
            }
        )
    for spec in scenario.get("queues") or []:
        objects.append(spec["raw"] if "raw" in spec else cluster_queue(spec))
    for key, target in (scenario.get("localQueues") or {}).items():
        namespace, name = key.split("/")
        objects.append(
            {
                "apiVersion": GROUP,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": target},
            }
        )
    for key, devices in (scenario.get("claims") or {}).items():
        namespace, name = key.split("/")
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"devices": {"requests": _requests(devices)}},
            }
        )
    for sub in scenario.get("running") or []:
        obj, extra = submission_object(sub)
        objects.extend(extra)
        objects.append(obj)
    for sub in scenario.get("submit") or []:
        objects.extend(submission_object(sub)[1])
    objects.extend(copy.deepcopy(list(scenario.get("objects") or [])))
    return objects
