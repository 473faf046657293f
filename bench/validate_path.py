"""The path of one /validate through draquota's modules, traced.

Issue 28 asks how many modules an ordinary /validate enters and how often its call comes
back to a module it had already left. This tool serves one: the recorded AdmissionReview
`pod-create-with-claim-template` (a pod CREATE with one ResourceClaimTemplate of one GPU,
no queue label) in namespace team-a, whose LocalQueue `default` points at a ClusterQueue
with room, placed on fake nodes with a ResourceSlice of 8 GPUs each; `draquota serve --state`
wiring (the directory's view, an in-memory ledger, the cached placer) and the real ASGI app,
driven in process. As the API server does, each pod goes through /mutate (its patch applied,
then named with a uid) before its /validate; only the /validate is traced, with
`sys.setprofile` (and `threading.setprofile` for a decision handed to a worker thread).
"cold" is the first /validate of the process, "warm" the one after `--warmup` admissions.

Definitions (the counting is `summarize`, a pure function over what the tracer saw):
- A draquota frame is one whose code is in a file under ROOT/quota or ROOT/webhook; its
  module is that file's dotted name. Everything else (the stdlib, libraries, the code
  dataclasses generate) is transparent. Module bodies run by a lazy import are left out.
- After every call and return event of a draquota frame, the module stack is the modules
  of the draquota frames on that thread's stack, outermost first, consecutive repeats of
  one module merged. A coroutine suspending to the event loop and resuming is not a call
  or a return (its await chain would unwind and rewind); a generator's yield is.
- The path is the sequence of innermost modules of those stacks (empty stacks skipped),
  consecutive repeats merged: each step is a call edge or a return edge between modules.
- A return is a step into a module the path has already visited in this request; a
  recall is a return that is a call edge (the new stack is deeper than the one before),
  the rest are return edges, back to a caller.
- The sandwich is the deepest module stack seen, written down to its innermost module and
  back up (A -> B -> C -> B -> A); `reentered` lists the modules that stack holds twice.

    .venv/bin/python bench/validate_path.py [--root DIR] [--nodes 4] [--warmup 1] [--json]

`--root DIR` traces the checkout at DIR (put first on sys.path): the app factory and the
state-dir backend are found under either layout (`webhook.edge.app` or `webhook.app`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import dis
import importlib
import inspect
import itertools
import json
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import jsonpatch
from asgi_post import post_review

__all__ = ["ModulePath", "Tracer", "main", "report", "summarize", "trace_validate"]

HERE = Path(__file__).resolve().parent.parent
FIXTURE = HERE / "tests/manifests/fixtures/admission/pod-create-with-claim-template.json"
NAMESPACE, TEMPLATE, GPU_CLASS, FLAVOR_LABEL = "team-a", "gpu", "gpu.example.com", "pool"
PACKAGES = ("quota", "webhook")
_YIELD, _RESUME = dis.opmap["YIELD_VALUE"], dis.opmap["RESUME"]
_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE

Stack = tuple[str, ...]


@dataclass(frozen=True)
class ModulePath:
    """What one request's module stacks add up to (see the module docstring)."""

    modules: tuple[str, ...]  # in first-entry order
    steps: int  # call and return edges between modules
    returns: int  # steps into a module visited before
    recalls: int  # those of them that are calls (a deeper stack), not returns to a caller
    sandwich: tuple[str, ...]  # the deepest stack, down and back up
    reentered: tuple[str, ...]  # modules the deepest stack holds more than once


def summarize(stacks: Sequence[Stack]) -> ModulePath:
    """Count modules, steps and returns over the module stacks seen after each event."""
    path: list[Stack] = []  # the stacks at which the innermost module changed
    for stack in stacks:
        if stack and (not path or path[-1][-1] != stack[-1]):
            path.append(stack)
    order = list(dict.fromkeys(stack[-1] for stack in path))
    visited: set[str] = set()
    returns = recalls = 0
    for before, stack in itertools.pairwise([(), *path]):
        if stack[-1] in visited:
            returns += 1
            recalls += len(stack) > len(before)
        visited.add(stack[-1])
    deepest = max(stacks, key=len, default=())
    return ModulePath(
        modules=tuple(order),
        steps=max(0, len(path) - 1),
        returns=returns,
        recalls=recalls,
        sandwich=(*deepest, *reversed(deepest[:-1])),
        reentered=tuple(m for m in dict.fromkeys(deepest) if deepest.count(m) > 1),
    )


class Tracer:
    """A profile function recording the module stack after each draquota call and return
    while `active`. `tracing()` installs it on its own thread; a thread started later sees it
    only if it was also given to `threading.setprofile` (as `trace_validate` does before the
    app exists, so that its worker threads are traced)."""

    def __init__(self, root: Path) -> None:
        self.prefixes = tuple(f"{root / p}/" for p in PACKAGES)
        self.root = root
        self.active = False
        self.stacks: list[Stack] = []
        self.suspensions = 0
        self._names: dict[str, str] = {}

    def module(self, code: CodeType) -> str:
        """The dotted module of a code object, "" when it is not draquota's."""
        filename = code.co_filename
        name = self._names.get(filename)
        if name is None:
            name = ""
            if filename.startswith(self.prefixes) and filename.endswith(".py"):
                parts = Path(filename).relative_to(self.root).with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self._names[filename] = name
        return name

    def _stack(self, frame: FrameType | None) -> Stack | None:
        """Modules on the stack from `frame` outwards, outermost first; None in an import."""
        modules: list[str] = []
        while frame is not None:
            module = self.module(frame.f_code)
            if module:
                if frame.f_code.co_name == "<module>":
                    return None
                if not modules or modules[-1] != module:
                    modules.append(module)
            frame = frame.f_back
        return tuple(reversed(modules))

    @contextmanager
    def tracing(self) -> Iterator[None]:
        """Record until the block ends (on this thread, and on threads set up as above)."""
        self.stacks, self.suspensions = [], 0
        self.active = True
        sys.setprofile(self)
        try:
            yield
        finally:
            sys.setprofile(None)
            self.active = False

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.active or event not in ("call", "return"):
            return
        code = frame.f_code
        if not self.module(code):
            return
        if code.co_flags & _ASYNC and _suspends_or_resumes(frame, event):
            caller = frame.f_back  # one suspension per await chain: count its outermost frame
            self.suspensions += event == "return" and not (caller and self.module(caller.f_code))
            return
        stack = self._stack(frame if event == "call" else frame.f_back)
        if stack is not None:
            self.stacks.append(stack)


def _suspends_or_resumes(frame: FrameType, event: str) -> bool:
    code, at = frame.f_code.co_code, frame.f_lasti
    if event == "return":
        return code[at] == _YIELD
    return code[at] == _RESUME and code[at + 1] != 0  # RESUME 0: the start of the function


# -- the cluster and the app ------------------------------------------------------------------


def _cluster(nodes: int, gpus: int) -> list[dict[str, Any]]:
    """Namespace team-a, LocalQueue default -> ClusterQueue team-a (`gpus` GPUs), template gpu
    of one GPU, and `nodes` nodes with a ResourceSlice of 8 GPUs each."""
    v1, dq = "resource.k8s.io/v1", "draquota.io/v1beta1"
    resource = {"name": "gpu", "kind": "DeviceClass", "deviceClassNames": [GPU_CLASS],
                "nominalQuota": gpus}  # fmt: skip
    group = {"coveredResources": ["gpu"], "flavors": [{"name": "gpus", "resources": [resource]}]}
    request = {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": 1}}
    selector = {"cel": {"expression": f'device.driver == "{GPU_CLASS}"'}}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": v1, "kind": "DeviceClass", "metadata": {"name": GPU_CLASS},
         "spec": {"selectors": [selector]}},
        {"apiVersion": dq, "kind": "ResourceFlavor", "metadata": {"name": "gpus"},
         "spec": {"nodeLabels": {FLAVOR_LABEL: "gpu"}}},
        {"apiVersion": dq, "kind": "ClusterQueue", "metadata": {"name": NAMESPACE},
         "spec": {"namespaceSelector": {}, "resourceGroups": [group]}},
        {"apiVersion": dq, "kind": "LocalQueue",
         "metadata": {"name": "default", "namespace": NAMESPACE},
         "spec": {"clusterQueue": NAMESPACE}},
        {"apiVersion": v1, "kind": "ResourceClaimTemplate",
         "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
         "spec": {"spec": {"devices": {"requests": [request]}}}},
    ]  # fmt: skip
    for i in range(nodes):
        name = f"node-{i}"
        devices = [{"name": f"gpu-{d}", "attributes": {"index": {"int": d}}} for d in range(8)]
        pool = {"name": name, "generation": 1, "resourceSliceCount": 1}
        objects += [
            {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": name, "labels": {FLAVOR_LABEL: "gpu"}}},
            {"apiVersion": v1, "kind": "ResourceSlice", "metadata": {"name": name},
             "spec": {"driver": GPU_CLASS, "nodeName": name, "pool": pool, "devices": devices}},
        ]  # fmt: skip
    return objects


def _first(*candidates: str) -> Any:
    """`module:attribute` of the first candidate that imports (the layouts before and after
    webhook/ was grouped by role)."""
    errors = []
    for candidate in candidates:
        module, attribute = candidate.split(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except ImportError as exc:
            errors.append(f"{candidate}: {exc}")
    raise ImportError("; ".join(errors))


def _app(state: Path) -> Any:
    embedded = _first("webhook.bootstrap:embedded")
    backend = _first("webhook.store.statedir:StateDirBackend", "webhook.statedir:StateDirBackend")
    create_app = _first("webhook.edge.app:create_app", "webhook.app:create_app")
    settings = _first("quota.settings:Settings")()
    wiring = embedded(backend(state), settings)
    return create_app(wiring.backend, wiring.ledger, settings, wiring.placer)


async def _post(app: Any, path: str, request: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()  # fmt: skip
    return await post_review(app, path, body)


async def _admit(app: Any, i: int, traced: Callable[[], Any] | None) -> None:
    """Pod claimed-i through /mutate (patch applied, uid given), then /validate, traced
    between `traced()`'s enter and exit when given."""
    request = json.loads(FIXTURE.read_text(encoding="utf-8"))
    request["uid"] = f"review-{i}"
    request["name"] = request["object"]["metadata"]["name"] = f"claimed-{i}"
    mutate = copy.deepcopy(request)
    for key in ("uid", "creationTimestamp", "generation"):
        mutate["object"]["metadata"].pop(key, None)
    mutated = await _post(app, "/mutate", mutate)
    patch = json.loads(base64.b64decode(mutated.get("patch", "W10=")))  # "[]" without one
    request["object"] = jsonpatch.apply_patch(request["object"], patch)
    request["object"]["metadata"]["uid"] = f"pod-uid-{i}"
    if traced is None:
        answer = await _post(app, "/validate", request)
    else:
        with traced():
            answer = await _post(app, "/validate", request)
    if not answer["allowed"]:
        raise RuntimeError(f"/validate of claimed-{i} denied: {answer.get('status')}")


def _figures(tracer: Tracer) -> dict[str, Any]:
    return {**asdict(summarize(tracer.stacks)), "events": len(tracer.stacks),
            "suspensions": tracer.suspensions}  # fmt: skip


async def _serve(app: Any, tracer: Tracer, warmup: int) -> dict[str, dict[str, Any]]:
    """The first /validate (cold) traced, then the one after `warmup` admissions (warm)."""
    await _admit(app, 0, tracer.tracing)
    cold = _figures(tracer)
    for i in range(1, warmup):
        await _admit(app, i, None)
    await _admit(app, warmup, tracer.tracing)
    return {"cold": cold, "warm": _figures(tracer)}


def trace_validate(root: Path, nodes: int, warmup: int) -> dict[str, dict[str, Any]]:
    """The traced path of the cold and of the warm /validate of the checkout at `root`."""
    root = root.resolve()
    sys.path.insert(0, str(root))
    webhook = importlib.import_module("webhook")
    if not Path(webhook.__file__ or "").resolve().is_relative_to(root):
        raise RuntimeError(f"webhook imported from {webhook.__file__}, not from {root}")
    tracer = Tracer(root)
    threading.setprofile(tracer)  # a worker thread started by the request is traced too
    try:
        with tempfile.TemporaryDirectory(prefix="draquota-validate-path-") as work:
            state = Path(work)
            items = _cluster(nodes, gpus=warmup + 2)
            (state / "cluster.json").write_text(json.dumps({"kind": "List", "items": items}))
            return asyncio.run(_serve(_app(state), tracer, max(1, warmup)))
    finally:
        threading.setprofile(None)


def report(root: Path, traced: dict[str, dict[str, Any]]) -> str:
    lines = [f"one /validate (pod CREATE, 1-GPU ResourceClaimTemplate, admitted) in {root}", ""]
    lines.append(f"{'':<24}" + "".join(f"{label:>8}" for label in traced))
    for key in ("modules", "steps", "returns", "recalls", "events", "suspensions"):
        values = (len(v[key]) if key == "modules" else v[key] for v in traced.values())
        lines.append(f"{key:<24}" + "".join(f"{value:>8}" for value in values))
    for label, figures in traced.items():
        lines += ["", f"{label}: modules in first-entry order"]
        lines += [f"  {i:>2}. {m}" for i, m in enumerate(figures["modules"], 1)]
        lines.append(f"{label}: sandwich (deepest module stack, down and back up)")
        lines.append("  " + " -> ".join(figures["sandwich"]))
        lines.append(f"{label}: re-entered on it: {', '.join(figures['reentered']) or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout to trace")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="admissions before the warm one, the cold one included",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    traced = trace_validate(args.root, args.nodes, args.warmup)
    print(json.dumps(traced, indent=1) if args.json else report(args.root, traced))
    return 0


if __name__ == "__main__":
    sys.exit(main())
