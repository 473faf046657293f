"""Fill a real control plane (../shared/k8s) with the scale benchmark's cluster.

Through the API server, as a cluster would get there: CRDs, classes, queues, namespaces,
nodes (status Ready) and their ResourceSlices, then the pods, bound to their nodes
(`spec.nodeName`). kube-controller-manager's resourceclaim controller generates each GPU
pod's claim from its template and records it in `status.resourceClaimStatuses`; with the
pod already bound the scheduler does not run, so this script writes the allocation it
would have written (`status.allocation`, `status.reservedFor`). Last, the QuotaLedger
shards with one record per pod, keyed by the UID the API server gave it.

    KUBECONFIG=$(../shared/k8s/up.sh /tmp/scale-k8s)
    .venv/bin/python bench/scale_populate.py --kubeconfig $KUBECONFIG --size 500x10000
    .venv/bin/python bench/scale_bench.py --kubeconfig $KUBECONFIG --size 500x10000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale_cluster import (  # noqa: E402
    Charger,
    Size,
    cohort_of,
    config_objects,
    ledger_shards,
    nodes,
    pod,
)

from webhook.kube.client import ApiError, KubeClient  # noqa: E402
from webhook.ledger.reservations import Reservation  # noqa: E402

Obj = dict[str, Any]
WORKERS = 8

_PLURALS = {
    "Namespace": ("", "namespaces"),
    "Node": ("", "nodes"),
    "Pod": ("", "pods"),
    "DeviceClass": ("resource.k8s.io/v1", "deviceclasses"),
    "ResourceSlice": ("resource.k8s.io/v1", "resourceslices"),
    "ResourceClaim": ("resource.k8s.io/v1", "resourceclaims"),
    "ResourceClaimTemplate": ("resource.k8s.io/v1", "resourceclaimtemplates"),
    "ClusterQueue": ("draquota.io/v1beta1", "clusterqueues"),
    "LocalQueue": ("draquota.io/v1beta1", "localqueues"),
    "ResourceFlavor": ("draquota.io/v1beta1", "resourceflavors"),
    "QuotaLedger": ("draquota.io/v1beta1", "quotaledgers"),
}


def path_of(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    group, plural = _PLURALS[kind]
    base = f"/apis/{group}" if group else "/api/v1"
    where = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    return f"{where}/{name}" if name else where


def create(client: KubeClient, obj: Obj) -> Obj:
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    try:
        return client.request("POST", path_of(obj["kind"], namespace), body=obj)
    except ApiError as exc:
        if exc.code != 409:
            raise
        return client.request("GET", path_of(obj["kind"], namespace, meta["name"]))


def put_status(client: KubeClient, obj: Obj, status: Obj) -> None:
    """PUT the status subresource, reading again on a conflict."""
    meta = obj["metadata"]
    path = path_of(obj["kind"], meta.get("namespace"), meta["name"]) + "/status"
    for _ in range(10):
        try:
            client.request("PUT", path, body={**obj, "status": status})
            return
        except ApiError as exc:
            if exc.code != 409:
                raise
            obj = client.request("GET", path)


def parallel(work: Callable[[Obj], Any], items: Iterable[Obj], label: str) -> list[Any]:
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(work, items))
    print(f"  {label}: {len(results)} in {time.monotonic() - started:.1f}s", flush=True)
    return results


def _node(client: KubeClient, obj: Obj) -> None:
    if obj["kind"] != "Node":
        create(client, obj)
        return
    status = obj.pop("status")
    put_status(client, create(client, obj), status)


def _allocate(client: KubeClient, claim: Obj, pods: dict[tuple[str, str], Obj]) -> None:
    """What the scheduler writes for a claim of a bound pod: allocation on the pod's node."""
    owner = (claim["metadata"].get("ownerReferences") or [{}])[0]
    bound = pods.get((claim["metadata"]["namespace"], owner.get("name", "")))
    if bound is None or (claim.get("status") or {}).get("allocation"):
        return
    node = bound["spec"]["nodeName"]
    index = int(bound["metadata"]["name"].split("-")[1])
    result = {"request": "gpu", "driver": "gpu.example.com", "pool": node,
              "device": f"gpu-{index % 8}"}  # fmt: skip
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}  # fmt: skip
    status = {
        "allocation": {"devices": {"results": [result]}, "nodeSelector": selector},
        "reservedFor": [
            {"resource": "pods", "name": bound["metadata"]["name"], "uid": bound["metadata"]["uid"]}
        ],
    }
    claim.setdefault("kind", "ResourceClaim")
    claim.setdefault("apiVersion", "resource.k8s.io/v1")
    put_status(client, claim, status)


def _submitted(obj: Obj) -> Obj:
    """The pod as a client creates it: no uid, status or managed fields."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "managedFields")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _claims(client: KubeClient) -> list[Obj]:
    items: list[Obj] = []
    token = ""
    while True:
        query: list[tuple[str, Any]] = [("limit", 500)] + ([("continue", token)] if token else [])
        page = client.request("GET", path_of("ResourceClaim"), query)
        items.extend(page.get("items") or ())
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def populate(kubeconfig: Path, size: Size) -> None:
    subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "-f",
            str(ROOT / "manifests/base/crds"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "wait", "--for=condition=Established",
         "crd", "--all", "--timeout=60s"],
        check=True, capture_output=True, timeout=90,
    )  # fmt: skip
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    started = time.monotonic()
    config = config_objects(size)
    for kind in ("Namespace", "DeviceClass", "ResourceFlavor", "ClusterQueue"):
        parallel(lambda o: create(client, o), [o for o in config if o["kind"] == kind], kind)
    rest = [o for o in config if o["kind"] in ("LocalQueue", "ResourceClaimTemplate")]
    parallel(lambda o: create(client, o), rest, "LocalQueues and templates")
    parallel(lambda o: _node(client, o), list(nodes(size)), "Nodes and ResourceSlices")
    generated = [pod(i, size) for i in range(size.pods)]
    created = parallel(lambda o: create(client, _submitted(o)), [p for p, _ in generated], "Pods")
    by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in created}
    gpu_pods = sum(1 for _, claim in generated if claim is not None)
    deadline = time.monotonic() + 900
    while len(claims := _claims(client)) < gpu_pods and time.monotonic() < deadline:
        print(f"  waiting for the resourceclaim controller: {len(claims)}/{gpu_pods}", flush=True)
        time.sleep(5)
    parallel(lambda c: _allocate(client, c, by_key), claims, "claim allocations")
    charger = Charger(size)
    records = []
    for (obj, claim), real in zip(generated, created, strict=True):
        charge = charger.charge(obj, claim)
        meta = real["metadata"]
        entry = Reservation(
            meta["uid"], charge.cluster_queue, f"{meta['namespace']}/{meta['name']}",
            charge.to_annotation(), time.time(),
        )  # fmt: skip
        records.append((f"cohort-{cohort_of(int(charge.cluster_queue.split('-')[1]))}", entry))
    parallel(lambda o: create(client, o), ledger_shards(records), "QuotaLedger shards")
    print(f"populated in {time.monotonic() - started:.0f}s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--size", default="500x10000", help="NODESxPODS")
    args = parser.parse_args(argv)
    nodes_text, pods_text = args.size.lower().split("x")
    populate(args.kubeconfig, Size(int(nodes_text), int(pods_text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
