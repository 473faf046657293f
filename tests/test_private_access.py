"""No class of quota/, webhook/ or certs/ touches another's private attributes.

A leading underscore says "mine": `x._name` with `x` anything but the object itself makes
the owner's internals a contract it never signed (issue 28: `_CaughtUp` reaching into the
ledger's `_view_lock`). Read from the AST, an access `x._name` (one leading underscore, or
a mangled `__name`; dunders are public protocol) is allowed only when `x` is provably the
enclosing class or an instance of it:

- `self`, `cls`, `super()`, `type(self)`, `self.__class__`, or the class's own name;
- a parameter annotated with the enclosing class (`other: Money`), or a name checked with
  `isinstance(other, Money)` (as `__eq__` does);
- a local assigned from a call of the enclosing class, `type(self)`, `cls`,
  `self.__class__` or `object.__new__(...)`, or annotated with the enclosing class;
- `self._x._y` when `__init__` annotates `self._x` with the enclosing class (a parameter
  or attribute annotation).

Anything else either gets a public read on the owner or, for a third-party API with no
public way, a line in ALLOWED naming the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.shipped import ROOT, modules

# Private names that are public API of the standard library (namedtuple documents its
# methods with a leading underscore so they cannot clash with field names).
PUBLIC_BY_CONTRACT = frozenset({"_asdict", "_fields", "_field_defaults", "_make", "_replace"})

# (path, expression) -> why no public way exists. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {
    ("webhook/commands/completion.py", "parser._actions"): (
        "argparse lists a parser's arguments only in _actions; completion reads the real parser"
    ),
}

_SELF_NAMES = frozenset({"self", "cls"})
_MAKERS = frozenset({"type", "cls"})


@dataclass(frozen=True)
class Access:
    path: str
    line: int
    expression: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.expression}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _names_class(annotation: ast.expr | None, cls: str) -> bool:
    """Whether an annotation is the class, a string of it, or a union/Optional holding it."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.Name):
        return annotation.id == cls
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _names_class(annotation.left, cls) or _names_class(annotation.right, cls)
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name):
        return annotation.value.id == "Optional" and _names_class(annotation.slice, cls)
    return False


def _is_own_class(node: ast.expr, cls: str) -> bool:
    """`self.__class__`, `type(self)`, `cls`, `super()` or the class's name."""
    if isinstance(node, ast.Name):
        return node.id in _SELF_NAMES or node.id == cls
    if isinstance(node, ast.Attribute):
        return node.attr == "__class__" and _is_own_class(node.value, cls)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("type", "super")
    return False


def _makes_instance(value: ast.expr, cls: str) -> bool:
    """A call of the enclosing class, `type(self)(...)`, `cls(...)`, `self.__class__(...)`,
    or `object.__new__(...)`."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr == "__new__":
        return True
    if isinstance(func, ast.Name):
        return func.id == cls or func.id in _MAKERS
    return _is_own_class(func, cls)


def _narrows_to(node: ast.AST, cls: str) -> bool:
    """`isinstance(name, Cls)`: past such a check `name` is an instance of the class."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Name)
        and _names_class(node.args[1], cls)
    )


def _own_instances(function: ast.FunctionDef | ast.AsyncFunctionDef, cls: str) -> set[str]:
    """Names in `function` (and functions nested in it) that hold the enclosing class."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            names |= {a.arg for a in every if _names_class(a.annotation, cls)}
        elif _narrows_to(node, cls):
            assert isinstance(node, ast.Call) and isinstance(node.args[0], ast.Name)
            names.add(node.args[0].id)
        elif isinstance(node, ast.Assign) and _makes_instance(node.value, cls):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            made = node.value is not None and _makes_instance(node.value, cls)
            names |= {node.target.id} if made or _names_class(node.annotation, cls) else set()
    return names


def _own_fields(klass: ast.ClassDef) -> set[str]:
    """`self._x` attributes `__init__` annotates with the class itself."""
    init = next(
        (n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )
    if init is None:
        return set()
    params = {a.arg for a in init.args.args if _names_class(a.annotation, klass.name)}
    fields = set()
    for node in ast.walk(init):
        target, value, annotation = None, None, None
        if isinstance(node, ast.AnnAssign):
            target, value, annotation = node.target, node.value, node.annotation
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
            continue
        if target.value.id != "self":
            continue
        from_param = isinstance(value, ast.Name) and value.id in params
        if _names_class(annotation, klass.name) or from_param:
            fields.add(target.attr)
    return fields


def _receiver_is_own(receiver: ast.expr, cls: str | None, own: set[str], fields: set[str]) -> bool:
    if cls is None:
        return isinstance(receiver, ast.Name) and receiver.id in _SELF_NAMES
    if _is_own_class(receiver, cls):
        return True
    if isinstance(receiver, ast.Name):
        return receiver.id in own
    return (
        isinstance(receiver, ast.Attribute)
        and isinstance(receiver.value, ast.Name)
        and receiver.value.id == "self"
        and receiver.attr in fields
    )


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[Access] = []
        self._class: ast.ClassDef | None = None
        self._fields: set[str] = set()
        self._own: set[str] = set()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        saved = self._class, self._fields, self._own
        self._class, self._fields, self._own = node, _own_fields(node), set()
        self.generic_visit(node)
        self._class, self._fields, self._own = saved

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = self._own
        if self._class is not None:
            self._own = self._own | _own_instances(node, self._class.name)
        self.generic_visit(node)
        self._own = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _is_private(node.attr) and node.attr not in PUBLIC_BY_CONTRACT:
            cls = self._class.name if self._class is not None else None
            if not _receiver_is_own(node.value, cls, self._own, self._fields):
                self.found.append(Access(self.path, node.lineno, ast.unparse(node)))
        self.generic_visit(node)


def scan(source: str, path: str = "<test>") -> list[Access]:
    """Every access to another object's private attribute in `source`."""
    scanner = _Scanner(path)
    scanner.visit(ast.parse(source))
    return scanner.found


def _violations() -> Iterator[Access]:
    for module in modules():
        relative = str(module.relative_to(ROOT))
        for access in scan(module.read_text(encoding="utf-8"), relative):
            if (access.path, access.expression) not in ALLOWED:
                yield access


def test_no_class_touches_another_private_attribute() -> None:
    found = [str(access) for access in _violations()]
    assert not found, "private attributes touched from outside their class:\n" + "\n".join(found)


def test_allowed_entries_still_match_and_say_why() -> None:
    seen = {
        (access.path, access.expression)
        for module in modules()
        for access in scan(module.read_text(encoding="utf-8"), str(module.relative_to(ROOT)))
    }
    for key, reason in ALLOWED.items():
        assert reason.strip(), f"{key}: allowed without a reason"
        assert key in seen, f"{key}: no longer found, drop it from ALLOWED"


SAME_CLASS = """
class Money:
    def __init__(self, cents: int, parent: "Money | None" = None) -> None:
        self._cents = cents
        self._parent: Money | None = parent
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and self._cents == other._cents
    def plus(self, other: Money) -> "Money":
        made = Money(0)
        made._cents = self._cents + other._cents
        twin = type(self)(0)
        twin._cents = made._cents
        raw = object.__new__(Money)
        raw._cents = 0
        return self._parent._cents and made or twin
    @classmethod
    def zero(cls) -> "Money":
        return cls._make_zero()
"""

FOREIGN = """
class Ledger:
    def __init__(self, store: Store) -> None:
        self._store = store
    def peek(self, other: Store) -> int:
        return self._store._lock + other._view
def helper(ledger):
    return ledger._behind
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(SAME_CLASS, [], id="same-class-instances-are-allowed"),
        pytest.param(
            SAME_CLASS.replace("other: Money", "other: Euro"),
            ["<test>:10: other._cents"],
            id="a-parameter-of-another-class-is-flagged",
        ),
        pytest.param(
            FOREIGN,
            ["<test>:6: self._store._lock", "<test>:6: other._view", "<test>:8: ledger._behind"],
            id="another-class-attributes-are-flagged",
        ),
        pytest.param("p = point._replace(x=1)\n", [], id="namedtuple-api-is-public"),
        pytest.param("class A:\n    def f(self):\n        return self.__dict__\n", [], id="dunder"),
    ],
)
def test_scan_tells_own_from_foreign(source: str, expected: list[str]) -> None:
    assert [str(access) for access in scan(source)] == expected
