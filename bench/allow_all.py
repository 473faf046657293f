"""An allow-all webhook pair registered like draquota's: the floor of what any admission
webhook costs pod creation (issue 30, phase C of bench/throughput.py).

The app is bench/webhook_bench.py's allow-all (FastAPI, parses each AdmissionReview and
allows it) served by draquota's own uvicorn + TLS stack, in its own process. Its two
configurations are draquota's as `manifests/overlays/local` renders them (rules,
matchConditions, failure policy, timeouts, reinvocation), renamed and pointed at it, so the
API server calls it for exactly the requests it would call draquota for.

With `stamps`, its /mutate also patches each pod with the fields draquota's /mutate stamps
(`stamp_patch`: the queue label, the charge annotation, a nodeSelector): the floor of any
webhook that must stamp pods as the specification says (phase S of bench/throughput.py).
"""

from __future__ import annotations

import base64
import copy
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import yaml

__all__ = ["ALLOW_ALL", "allow_all_server", "allow_all_webhooks", "stamp_patch"]

ALLOW_ALL = "bench-allow-all"
APP = Path(__file__).resolve().parent / "webhook_bench.py"
KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")


def allow_all_webhooks(rendered: str, port: int, ca: bytes) -> list[dict[str, Any]]:
    """draquota's two webhook configurations from the rendered overlay, named `ALLOW_ALL`,
    their webhooks `*.allow-all.bench`, calling https://127.0.0.1:`port` with CA `ca`."""
    configs = []
    for doc in yaml.safe_load_all(rendered):
        if not doc or not doc["kind"].endswith("WebhookConfiguration"):
            continue
        config = copy.deepcopy(doc)
        config["metadata"] = {"name": ALLOW_ALL}
        for hook in config["webhooks"]:
            where = hook["clientConfig"]
            path = (where.get("url") or where["service"]["path"]).rsplit("/", 1)[1]
            hook["name"] = hook["name"].replace("draquota.io", "allow-all.bench")
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}/{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
        configs.append(config)
    if len(configs) != 2:
        raise ValueError(f"the overlay renders {len(configs)} webhook configurations, not 2")
    return configs


def _wait_healthy(url: str, ca: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"allow-all app exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", verify=context).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"allow-all app not healthy within 60s: {log.read_text()[-2000:]}")


def _stamped_fields(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return {
        "metadata": {k: metadata[k] for k in ("labels", "annotations") if k in metadata},
        "spec": {k: spec[k] for k in ("nodeSelector", "schedulingGates") if k in spec},
    }


def stamp_patch(submitted: Mapping[str, Any], stored: Mapping[str, Any]) -> list[Any]:
    """The JSON patch from the pod a client submitted to the pod the API server stored, in
    the fields draquota's /mutate stamps (labels, annotations, nodeSelector, gates)."""
    patch = jsonpatch.make_patch(_stamped_fields(submitted), _stamped_fields(stored))
    return list(patch.patch)


@contextmanager
def allow_all_server(
    cluster: Any,
    workdir: Path,
    pids: MutableMapping[str, int],
    stamps: Mapping[str, list[Any]] | None = None,
) -> Iterator[None]:
    """The app running and registered in `cluster` (a tests.e2e ControlPlane) while inside;
    its pid is in `pids["allow-all"]` meanwhile. Both are gone afterwards. `stamps`: the
    patch its /mutate answers a "cpu" and a "gpu" pod with (none: it patches nothing)."""
    from tests.e2e.cluster import free_port, render_overlay, run_draquota

    workdir.mkdir(parents=True, exist_ok=True)
    certs = workdir / "allow-all-tls"
    run_draquota("certs", "generate", "--out", str(certs), "--ip", "127.0.0.1")
    port = free_port()
    command = [sys.executable, str(APP), "--allow-all-server"]
    command += ["--port", str(port), "--cert-dir", str(certs)]
    if stamps is not None:
        (workdir / "allow-all-stamps.json").write_bytes(orjson.dumps(stamps))
        command += ["--stamps", str(workdir / "allow-all-stamps.json")]
    log = workdir / "allow-all.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    pids["allow-all"] = process.pid
    try:
        _wait_healthy(f"https://127.0.0.1:{port}", certs / "ca.crt", process, log)
        configs = allow_all_webhooks(
            render_overlay(cluster, port), port, (certs / "ca.crt").read_bytes()
        )
        cluster.apply(yaml.safe_dump_all(configs))
        yield
    finally:
        for kind in KINDS:
            cluster.kubectl("delete", kind, ALLOW_ALL, "--ignore-not-found", check=False)
        pids.pop("allow-all", None)
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
