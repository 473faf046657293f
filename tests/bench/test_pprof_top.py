"""bench/pprof_top.py reads a CPU profile the real kube-apiserver (v1.36.2 of ../shared/k8s,
`--profiling=true`) gave during bench/throughput.py's phase C: 3 s of 660 pod creates through
the allow-all webhook pair."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
PROFILE = Path(__file__).resolve().parent / "fixtures" / "kube-apiserver-allow-all.pprof"
CREATE = "k8s.io/apiserver/pkg/endpoints/handlers.CreateResource.createHandler.func1.2"
WEBHOOKS = "k8s.io/apiserver/pkg/admission/plugin/webhook/generic.(*Webhook).Dispatch"


def _module():  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("pprof_top")


def test_a_real_profile_reads_into_stacks_whose_time_adds_up() -> None:
    profile = _module().read_profile(PROFILE.read_bytes())
    assert 2e9 < profile.total < 6e9  # 3 s of CPU time on 2 cores, in nanoseconds
    assert sum(profile.flat().values()) == profile.total  # each sample has one innermost frame
    cumulative = profile.cumulative()
    assert max(cumulative.values()) <= profile.total
    # the webhook calls happen inside the create handler
    assert 0 < cumulative[WEBHOOKS] < cumulative[CREATE] < profile.total


def test_the_report_gives_shares_or_milliseconds_per_unit_of_work() -> None:
    module = _module()
    profile = module.read_profile(PROFILE.read_bytes())
    shares = module.report(profile, 5, "webhook", None)
    assert shares.splitlines()[0].startswith("total 2.")
    rows = [line for line in shares.splitlines()[1:] if not line.startswith("--")]
    assert rows and all("webhook" in row and row.split()[1] == "%" for row in rows)
    per_create = module.report(profile, 50, "generic.(*Webhook).Dispatch", 660)
    line = next(x for x in per_create.split("-- cumulative")[1].splitlines() if WEBHOOKS in x)
    assert line.strip().startswith(f"{profile.cumulative()[WEBHOOKS] / 1e6 / 660:.3f} ms")
