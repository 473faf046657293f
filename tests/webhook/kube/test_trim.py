"""The trimmed pod cache keeps every field a decision reads: both forms charge alike."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.claims import claim_references
from quota.livepods import is_live_pod, live_pod_charge, pod_key, pod_uid, released_at
from quota.queuetable import queue_table
from quota.settings import Settings
from quota.waiting import ADMISSION_GATE, GROUP_LABEL, GROUP_TOTAL_ANNOTATION, waiting_workloads
from quota.workloads import as_workload
from webhook.kube.trim import trimmed_job, trimmed_pod
from webhook.queueing.admittedworkloads import PREEMPTED_ANNOTATION, is_marked
from webhook.store.manifests import load_state

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
NOW = 1_800_000_000.0


def _as_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A workload's pod as its controller would create it."""
    pod = copy.deepcopy(dict(as_workload(obj).pod))
    pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
    return pod


def _example_pods() -> list[dict[str, Any]]:
    pods = []
    for path in sorted((EXAMPLES / "workloads").glob("*.yaml")):
        pods += [_as_pod(doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    cluster = yaml.safe_load_all((EXAMPLES / "cluster" / "pods.yaml").read_text())
    return pods + [doc for doc in cluster if doc and doc.get("kind") == "Pod"]


def _busy(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as a real API server serves it: managed fields, status, probes, volumes..."""
    busy = copy.deepcopy(pod)
    meta = busy["metadata"]
    meta.setdefault("labels", {})["app"] = "x"
    meta["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 200}
    meta["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    meta["ownerReferences"] = [{"kind": "Job", "name": "j", "controller": True, "uid": "u"}]
    meta["deletionTimestamp"] = "2027-01-15T07:59:00Z"
    meta["deletionGracePeriodSeconds"] = 30 if len(meta["name"]) % 2 else 86400
    spec = busy["spec"]
    spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    spec["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    spec["affinity"] = {
        "podAntiAffinity": {"x": 1},
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]
            }
        },
    }
    spec["overhead"] = {"cpu": "250m"}
    for container in spec.get("containers") or []:
        container["env"] = [{"name": "A", "value": "b"}] * 20
        container["livenessProbe"] = {"exec": {"command": ["true"]}}
    spec.setdefault("initContainers", []).append(
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    )
    busy["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}] * 5,
        "containerStatuses": [{"name": "main", "ready": True}],
        "resourceClaimStatuses": [
            {"name": e["name"], "resourceClaimName": f"{meta['name']}-{e['name']}"}
            for e in spec.get("resourceClaims") or []
            if "resourceClaimTemplateName" in e
        ],
    }
    return busy


PODS = [_busy(p) for p in _example_pods()] + _example_pods()


@pytest.mark.parametrize(
    "pod", PODS, ids=[f"{i}-{p['metadata']['name']}" for i, p in enumerate(PODS)]
)
def test_a_trimmed_pod_is_charged_like_the_full_one(pod: dict[str, Any]) -> None:
    state = load_state(EXAMPLES / "cluster")
    trimmed = trimmed_pod(copy.deepcopy(pod))
    assert (pod_key(trimmed), pod_uid(trimmed)) == (pod_key(pod), pod_uid(pod))
    assert claim_references(trimmed, generated=True) == claim_references(pod, generated=True)
    assert released_at(trimmed) == released_at(pod)
    assert is_live_pod(trimmed, NOW) == is_live_pod(pod, NOW)
    charges = []
    for form in (pod, trimmed):
        try:
            charges.append(live_pod_charge(form, state, Settings(), NOW - 10**6))
        except Exception as exc:  # the same error either way
            charges.append(repr(exc))
    assert charges[0] == charges[1]


def test_the_table_covers_charged_pods() -> None:
    state = load_state(EXAMPLES / "cluster")
    charged = 0
    for pod in PODS:
        try:
            charged += live_pod_charge(pod, state, Settings(), NOW - 10**6) is not None
        except Exception:
            continue
    assert charged >= 10


def test_the_cache_keeps_a_fraction_of_a_real_pod() -> None:
    busy = _busy(_example_pods()[0])
    assert len(yaml.safe_dump(trimmed_pod(busy))) * 2 < len(yaml.safe_dump(busy))


def test_a_trimmed_pod_waits_in_its_queue_like_the_full_one() -> None:
    objects = list(load_state(EXAMPLES / "cluster").list("ClusterQueue"))
    state = load_state(EXAMPLES / "cluster")
    for queue in objects:
        state.upsert({**queue, "spec": {**queue["spec"], "whenFull": "Queue"}})
    table = queue_table(state, Settings())
    pods = []
    for i, pod in enumerate(_example_pods()):
        busy = _busy(pod)
        busy["metadata"]["creationTimestamp"] = f"2026-11-24T20:00:{i:02d}Z"
        busy["metadata"].setdefault("labels", {})[GROUP_LABEL] = f"group-{i % 3}"
        busy["metadata"].setdefault("annotations", {})[GROUP_TOTAL_ANNOTATION] = "2"
        busy["spec"]["priority"] = i % 2
        busy["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
        pods.append(busy)
    full = waiting_workloads(pods, table)
    trimmed = waiting_workloads([trimmed_pod(p) for p in pods], table)
    assert full and {q: [w.order() for w in ws] for q, ws in full.items()} == {
        q: [w.order() for w in ws] for q, ws in trimmed.items()
    }
    assert {q: [w.total for w in ws] for q, ws in full.items()} == {
        q: [w.total for w in ws] for q, ws in trimmed.items()
    }


def test_pods_share_their_repeated_strings_and_keep_their_values() -> None:
    pods = _example_pods()
    # decoded apart, as the informer decodes each event: equal strings, distinct objects
    first, second = (trimmed_pod(json.loads(json.dumps(_busy(p)))) for p in pods[:2])
    assert first["metadata"]["namespace"] == second["metadata"]["namespace"]
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["apiVersion"] is second["apiVersion"]
    for pod in pods:
        copied = copy.deepcopy(pod)
        assert trimmed_pod(copied) == trimmed_pod(pod)


PREEMPTION = Path(__file__).parent.parent / "fixtures" / "preemption" / "admin"


def _recorded(kind: str) -> list[dict[str, Any]]:
    """Objects recorded from the real control plane mid-preemption
    (tests/webhook/kube/record_preemption.py)."""
    text = (PREEMPTION / f"{kind}.yaml").read_text(encoding="utf-8")
    return [d for d in yaml.safe_load_all(text) if d]


def test_the_cache_keeps_what_preemption_reads() -> None:
    marked = [p for p in _recorded("pods") if is_marked(p)]
    assert marked, "the recording has a pod draquota marked for eviction"
    for pod in marked:
        assert is_marked(trimmed_pod(pod))
    admitted = [p for p in _recorded("pods") if _admitted_at(p) is not None]
    assert admitted and all(_admitted_at(trimmed_pod(p)) == _admitted_at(p) for p in admitted)
    jobs = [
        j for j in _recorded("jobs") if PREEMPTED_ANNOTATION in j["metadata"].get("annotations", {})
    ]
    assert jobs, "the recording has a Job draquota suspended for a preemptor"
    for job in jobs:
        kept = trimmed_job(job)
        assert kept["metadata"]["annotations"][PREEMPTED_ANNOTATION]
        assert kept.get("status", {}).get("startTime") == job["status"].get("startTime")


def _admitted_at(pod: dict[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions", []):
        if condition.get("type") == "QuotaReserved" and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime"))
    return None
