"""quota/ keeps no state between calls: no module-level mutable values (issue 15).

Caches belong to the cluster view: what is derived from it is kept in its
`quota.derived.DerivedCache`, which the shell's store makes. Constant tables are read-only
(`types.MappingProxyType`, tuples, frozensets), so nothing at module level can
carry one call's data into the next. Classes defined in quota/ are checked the
same way: a class attribute is module-level state too.
"""

from __future__ import annotations

import collections
import decimal
import functools
import importlib
import pkgutil
import threading
import types
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import quota

MUTABLE_TYPES: tuple[type, ...] = (
    dict,  # and its subclasses: defaultdict, OrderedDict, Counter
    list,
    set,
    bytearray,
    collections.deque,
    weakref.WeakKeyDictionary,
    weakref.WeakValueDictionary,
    weakref.WeakSet,
    decimal.Context,
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Condition,
    threading.Semaphore,
    threading.Event,
)

# Qualified name -> why it may stay. Keep it tiny: a new entry needs a reason of this kind.
ALLOWED = {
    "quota.allocator.cel._env": (
        "the CEL environment, built once on first use (lru_cache(maxsize=1)): a constant, "
        "made lazily so that importing quota does not build it"
    ),
    "quota.allocator.cel.compile_selector": (
        "a bounded memo of a pure function of its argument (expression text in, frozen "
        "Selector out; errors are not cached): it changes how fast, never what is answered"
    ),
    "quota.allocator.cel._shape_cost": (
        "a bounded memo of a pure function of immutable arguments (bytes, int, int) -> int"
    ),
    "quota.quantity._CONTEXT": (
        "a decimal prototype: localcontext() works on a copy, nothing ever changes it"
    ),
}

# Attributes Python itself keeps on classes (NamedTuple, Enum, Protocol, ABC).
_CLASS_MACHINERY = frozenset({"_field_defaults", "_abc_impl"})


def _quota_modules() -> list[types.ModuleType]:
    modules = [quota]
    for info in pkgutil.walk_packages(quota.__path__, prefix="quota."):
        modules.append(importlib.import_module(info.name))
    return modules


def _is_memo(value: Any) -> bool:
    """A function wrapped by functools.lru_cache or functools.cache."""
    return callable(value) and hasattr(value, "cache_info") and hasattr(value, "cache_clear")


def _mutable_parts(value: Any, where: str, seen: set[int]) -> Iterator[str]:
    """`where` (or a path inside it) for each mutable value reachable through constants."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, MUTABLE_TYPES) or _is_memo(value):
        yield f"{where} ({type(value).__name__})"
    elif isinstance(value, types.MappingProxyType):
        for key, item in value.items():
            yield from _mutable_parts(key, f"{where}[{key!r}] (key)", seen)
            yield from _mutable_parts(item, f"{where}[{key!r}]", seen)
    elif isinstance(value, tuple | frozenset):
        for i, item in enumerate(value):
            yield from _mutable_parts(item, f"{where}[{i}]", seen)


def _class_attributes(cls: type) -> Iterator[tuple[str, Any]]:
    for name, value in vars(cls).items():
        dunder = name.startswith("__") and name.endswith("__")
        sunder = name.startswith("_") and name.endswith("_") and not dunder  # Enum's own
        if not (dunder or sunder or name in _CLASS_MACHINERY):
            yield name, value


def _state_of(module: types.ModuleType) -> Iterator[tuple[str, Any, list[str]]]:
    """(qualified name, value, mutable parts) of each module global and class attribute that
    is or holds a mutable value."""
    for name, value in vars(module).items():
        if name.startswith("__") and name.endswith("__"):
            continue  # __all__, __path__, __spec__, ...: Python's, not state of ours
        candidates = [(f"{module.__name__}.{name}", value)]
        if isinstance(value, type) and value.__module__ == module.__name__:
            candidates += [
                (f"{module.__name__}.{name}.{attribute}", item)
                for attribute, item in _class_attributes(value)
            ]
        for qualified, item in candidates:
            parts = list(_mutable_parts(item, qualified, set()))
            if parts:
                yield qualified, item, parts


def module_state() -> dict[str, list[str]]:
    """Every mutable module-level value of quota/, by the qualified names it is known under
    (a value imported into another module is reported once, under all its names)."""
    names: dict[int, list[str]] = {}
    found: dict[int, list[str]] = {}
    for module in _quota_modules():
        for qualified, value, parts in _state_of(module):
            names.setdefault(id(value), []).append(qualified)
            found.setdefault(id(value), parts)
    return {" = ".join(sorted(names[key])): parts for key, parts in found.items()}


def test_quota_modules_hold_no_mutable_state() -> None:
    state = {
        where: parts
        for where, parts in module_state().items()
        if not set(where.split(" = ")) & set(ALLOWED)
    }
    assert state == {}, (
        "module-level mutable state in quota/: keep caches with the view "
        "(ClusterView.derived, quota.derived) and make constant tables read-only "
        "(types.MappingProxyType, tuple, frozenset)"
    )


def test_every_allowed_entry_exists_and_is_still_needed() -> None:
    known = {name for where in module_state() for name in where.split(" = ")}
    assert set(ALLOWED) <= known


def test_the_check_finds_each_kind_of_state() -> None:
    probe = types.ModuleType("probe")

    class Memo:
        __module__ = "probe"
        seen: ClassVar[dict[str, int]] = {}
        limit = 4

    @functools.lru_cache
    def parse(text: str) -> str:
        return text

    probe.__dict__.update(
        cache={},
        lock=threading.Lock(),
        table=types.MappingProxyType({"k": [1]}),
        constants=(frozenset({1}), types.MappingProxyType({"k": (1,)}), "text", 3),
        Memo=Memo,
        parse=parse,
    )
    found = [part for _, _, parts in _state_of(probe) for part in parts]
    assert found == [
        "probe.cache (dict)",
        "probe.lock (lock)",
        "probe.table['k'] (list)",
        "probe.Memo.seen (dict)",
        "probe.parse (_lru_cache_wrapper)",
    ]
