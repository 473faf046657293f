"""The functions a Go CPU profile spends its time in, without a Go toolchain.

Reads a `/debug/pprof/profile` answer (profile.proto, gzipped), as the API server gives it
when started with `--profiling=true` (`APISERVER_ARGS=--profiling=true` for ../shared/k8s),
and prints each function's share, flat (its own code) and cumulative (it and its callees),
or, with `--per N`, its milliseconds per unit of work (N creates in the profiled window):

    curl --cert ... "https://127.0.0.1:PORT/debug/pprof/profile?seconds=3" > cpu.pprof
    .venv/bin/python bench/pprof_top.py cpu.pprof [--top 30] [--match mutating] [--per 660]

Only the fields this needs are decoded (samples, locations, functions, strings), with the
wire-format reader the CEL cost estimate uses (`quota.protowire`): five of profile.proto's
messages, a page of code against a generated module and its runtime.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from quota.protowire import fields, varint

__all__ = ["Profile", "main", "read_profile"]

# profile.proto field numbers
_SAMPLE, _LOCATION, _FUNCTION, _STRING = 2, 4, 5, 6
_SAMPLE_LOCATIONS, _SAMPLE_VALUES = 1, 2
_LOCATION_ID, _LOCATION_LINE, _LINE_FUNCTION = 1, 4, 1
_FUNCTION_ID, _FUNCTION_NAME = 1, 2
_CPU_NANOSECONDS = 1  # values: [samples, cpu nanoseconds]


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field, one varint or packed (length-delimited)."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        item, i = varint(value, i)
        out.append(item)
    return out


@dataclass(frozen=True)
class Profile:
    """Each sample as (its stack of function names, innermost first; CPU nanoseconds)."""

    samples: list[tuple[list[str], int]]

    @property
    def total(self) -> int:
        return sum(ns for _, ns in self.samples)

    def flat(self) -> Counter[str]:
        return self._count(lambda stack: stack[:1])

    def cumulative(self) -> Counter[str]:
        return self._count(lambda stack: list(dict.fromkeys(stack)))

    def _count(self, names: Callable[[list[str]], list[str]]) -> Counter[str]:
        counts: Counter[str] = Counter()
        for stack, ns in self.samples:
            for name in names(stack):
                counts[name] += ns
        return counts


def read_profile(data: bytes) -> Profile:
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    strings: list[str] = []
    functions: dict[int, int] = {}  # id -> name's string index
    locations: dict[int, list[int]] = {}  # id -> function ids, innermost first
    raw: list[tuple[list[int], list[int]]] = []
    for field, value in fields(data):
        if field == _STRING and isinstance(value, bytes):
            strings.append(value.decode(errors="replace"))
        elif field == _FUNCTION and isinstance(value, bytes):
            parts = dict(fields(value))
            functions[int(parts.get(_FUNCTION_ID, 0))] = int(parts.get(_FUNCTION_NAME, 0))
        elif field == _LOCATION and isinstance(value, bytes):
            location, lines = 0, []
            for f, v in fields(value):
                if f == _LOCATION_ID:
                    location = int(v)  # type: ignore[arg-type]
                elif f == _LOCATION_LINE and isinstance(v, bytes):
                    line = dict(fields(v))
                    lines.append(int(line.get(_LINE_FUNCTION, 0)))
            locations[location] = lines
        elif field == _SAMPLE and isinstance(value, bytes):
            ids: list[int] = []
            values: list[int] = []
            for f, v in fields(value):
                if f == _SAMPLE_LOCATIONS:
                    ids += _ints(v)
                elif f == _SAMPLE_VALUES:
                    values += _ints(v)
            raw.append((ids, values))
    samples = []
    for ids, values in raw:
        stack = [strings[functions[f]] for loc in ids for f in locations.get(loc, [])]
        samples.append((stack, values[_CPU_NANOSECONDS] if len(values) > 1 else values[0]))
    return Profile(samples)


def report(profile: Profile, top: int, match: str, per: float | None) -> str:
    total = profile.total
    lines = [f"total {total / 1e9:.2f} s of CPU"]
    for title, counts in (("flat", profile.flat()), ("cumulative", profile.cumulative())):
        lines.append(f"-- {title}")
        shown = [(n, v) for n, v in counts.most_common() if match in n][:top]
        for name, ns in shown:
            figure = f"{ns / 1e6 / per:7.3f} ms" if per else f"{100 * ns / total:5.1f} %"
            lines.append(f"{figure}  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--match", default="", help="only functions whose name holds this")
    parser.add_argument("--per", type=float, help="units of work in the window: ms per unit")
    args = parser.parse_args(argv)
    profile = read_profile(args.profile.read_bytes())
    print(report(profile, args.top, args.match, args.per))
    return 0


if __name__ == "__main__":
    sys.exit(main())
