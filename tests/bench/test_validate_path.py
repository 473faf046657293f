"""The /validate path tracer counts what issue 28 asks about: modules entered, steps between
them and returns into a module left before, on call sequences made by hand and traced live."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module() -> Any:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("validate_path")


A, B, C = "webhook.a", "webhook.b", "quota.c"
ADMIT, LEDGER, CORE = "webhook.admit", "webhook.backend", "quota.decision"


@dataclass(frozen=True)
class Case:
    id: str
    stacks: tuple[tuple[str, ...], ...]  # the module stack after each event, outermost first
    modules: tuple[str, ...]
    steps: int
    returns: int
    recalls: int
    sandwich: tuple[str, ...]
    reentered: tuple[str, ...] = ()


CASES = (
    Case("nothing-traced", (), (), 0, 0, 0, ()),
    Case("one-module-no-step", ((A,), (A,), (A,)), (A,), 0, 0, 0, (A,)),
    Case("a-call-and-its-return", ((A,), (A, B), (A,)), (A, B), 2, 1, 0, (A, B, A)),
    Case(
        "down-and-back-up",
        ((A,), (A, B), (A, B, C), (A, B), (A,)),
        (A, B, C),
        4,
        2,
        0,
        (A, B, C, B, A),
    ),
    Case(
        "a-second-call-into-a-module-left-before",
        ((A,), (A, B), (A,), (A, B), (A,)),
        (A, B),
        4,
        3,
        1,
        (A, B, A),
    ),
    Case(
        "events-within-one-module-are-not-steps",
        ((A,), (A, B), (A, B), (A, B), (A,), (A,)),
        (A, B),
        2,
        1,
        0,
        (A, B, A),
    ),
    Case(
        "code-outside-draquota-is-transparent",
        ((A,), (), (A,), (A, B), (), (A, B), (A,)),
        (A, B),
        2,
        1,
        0,
        (A, B, A),
    ),
    Case(
        "the-callback-sandwich",
        (
            (ADMIT,),
            (ADMIT, LEDGER),
            (ADMIT, LEDGER, ADMIT),
            (ADMIT, LEDGER, ADMIT, CORE),
            (ADMIT, LEDGER, ADMIT),
            (ADMIT, LEDGER),
            (ADMIT,),
        ),
        (ADMIT, LEDGER, CORE),
        6,
        4,
        1,
        (ADMIT, LEDGER, ADMIT, CORE, ADMIT, LEDGER, ADMIT),
        (ADMIT,),
    ),
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_summarize_counts_modules_steps_and_returns(case: Case) -> None:
    path = _module().summarize(list(case.stacks))
    got = (path.modules, path.steps, path.returns, path.recalls, path.sandwich, path.reentered)
    assert got == (
        case.modules,
        case.steps,
        case.returns,
        case.recalls,
        case.sandwich,
        case.reentered,
    )


# -- the tracer over real frames: two modules of a checkout made for the test ---------------

ADMIT_PY = """
def admit(record):
    return record(evaluate)

def evaluate():
    return sum(x for x in range(3))

async def serve(pause):
    await pause()
    return 1
"""

LEDGER_PY = """
import asyncio

def record(evaluate):
    return evaluate()

async def pause():
    await asyncio.sleep(0)
"""


def _load(root: Path, relative: str, text: str) -> ModuleType:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    name = "validate_path_test_" + relative.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tracer_names_modules_by_file_and_sees_a_callback(tmp_path: Path) -> None:
    tool = _module()
    admit = _load(tmp_path, "webhook/admission/admit.py", ADMIT_PY)
    ledger = _load(tmp_path, "webhook/ledger/__init__.py", LEDGER_PY)
    tracer = tool.Tracer(tmp_path.resolve())
    with tracer.tracing():
        assert admit.admit(ledger.record) == 3
    path = tool.summarize(tracer.stacks)
    ad, le = "webhook.admission.admit", "webhook.ledger"
    assert path.modules == (ad, le)
    assert (path.steps, path.returns, path.recalls) == (4, 3, 1)  # ad -> le -> ad -> le -> ad
    assert path.sandwich == (ad, le, ad, le, ad) and path.reentered == (ad,)


def test_a_coroutine_suspending_to_the_event_loop_is_not_a_step(tmp_path: Path) -> None:
    tool = _module()
    admit = _load(tmp_path, "webhook/admission/admit.py", ADMIT_PY)
    ledger = _load(tmp_path, "webhook/ledger/__init__.py", LEDGER_PY)
    tracer = tool.Tracer(tmp_path.resolve())

    async def traced() -> int:
        with tracer.tracing():
            return int(await admit.serve(ledger.pause))

    assert asyncio.run(traced()) == 1
    path = tool.summarize(tracer.stacks)
    assert tracer.suspensions == 1  # asyncio.sleep(0) yields to the loop once
    assert (path.steps, path.returns, path.recalls) == (2, 1, 0)  # admit -> ledger -> admit
