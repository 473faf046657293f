"""Hints for names a user probably mistyped, and for a label draquota does not read.

A denial that says `LocalQueue research/defualt not found` leaves the user to find out
which names exist, which a namespace user often cannot list. The hint names the closest
existing name (`difflib.get_close_matches`, the same as Python's own "did you mean") and a
bounded list of what exists, so a message stays short whatever the cluster holds.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.messages import listed

__all__ = ["KUEUE_QUEUE_LABEL", "class_hint", "closest", "foreign_label_warning", "queue_hint"]

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# How alike a name and a suggestion must be (difflib's ratio): `defualt` and `default` are
# 0.86 alike, and so are `gpu.exmaple.com` and `gpu.example.com` (0.93); but so are
# `nic.example.com` and `gpu.example.com` (0.8), whose first labels, the part that names the
# device, have nothing in common: the first labels must be alike too.
_CUTOFF = 0.8
_FIRST_LABEL_CUTOFF = 0.6


def closest(name: str, candidates: Iterable[str]) -> str:
    """The candidate most like `name` ("" when none is close, or `name` is one of them)."""
    names = sorted(set(candidates))
    if name in names:
        return ""
    head = name.split(".", 1)[0]
    for found in difflib.get_close_matches(name, names, n=3, cutoff=_CUTOFF):
        other = found.split(".", 1)[0]
        if difflib.SequenceMatcher(None, head, other).ratio() >= _FIRST_LABEL_CUTOFF:
            return found
    return ""


def queue_hint(namespace: str, name: str, local_queues: Iterable[str]) -> str:
    """`: did you mean default? (LocalQueues in research: default, gpu)` for a LocalQueue
    `name` not found in `namespace`, or `; LocalQueues in research: gpu` when none is close;
    `local_queues` are the `ns/name` keys of every namespace."""
    prefix = f"{namespace}/"
    names = sorted(key[len(prefix) :] for key in local_queues if key.startswith(prefix))
    if not names:
        return f"; namespace {namespace} has no LocalQueue"
    guess = closest(name, names)
    if not guess:
        return f"; LocalQueues in {namespace}: {listed(names)}"
    return f": did you mean {guess}? (LocalQueues in {namespace}: {listed(names)})"


def class_hint(unmapped: Sequence[str], mapped: Iterable[str], existing: Iterable[str]) -> str:
    """`: did you mean gpu.example.com? (the ClusterQueue maps gpu.example.com, nic.example.com)`
    for DeviceClasses a queue does not map, or `; the ClusterQueue maps gpu.example.com` when
    none is close. Only a class that is no DeviceClass of the cluster
    (`existing`) is taken for a typo; an existing one is simply not in the queue's quota."""
    names = sorted(set(mapped))
    known = set(existing)
    guesses = {c: g for c in unmapped if c not in known and (g := closest(c, names))}
    if len(guesses) == 1 and len(unmapped) == 1:
        ask = f" did you mean {next(iter(guesses.values()))}?"
    elif guesses:
        ask = " did you mean " + ", ".join(f"{g} (for {c})" for c, g in guesses.items()) + "?"
    else:
        ask = ""
    maps = f"the ClusterQueue maps {listed(names)}" if names else "the ClusterQueue maps none"
    return f":{ask} ({maps})" if ask else f"; {maps}"


def foreign_label_warning(labels: Any) -> str:
    """The warning for Kueue's queue label without draquota's ("" otherwise, and for labels
    that are not a mapping): the user meant a queue, and draquota would silently route the
    pod to `default` or not manage it."""
    if not isinstance(labels, Mapping):
        return ""
    if KUEUE_QUEUE_LABEL in labels and QUEUE_LABEL not in labels:
        return f"{KUEUE_QUEUE_LABEL} is not read by draquota; use {QUEUE_LABEL}"
    return ""
