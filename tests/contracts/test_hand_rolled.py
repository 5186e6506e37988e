"""No hand-rolled argument check outside ``_validate`` (issue 48, point 3).

``test_validate_once.py`` watches the rules of :mod:`lse_energy._validate`; a check written by hand
in a model module is invisible to it, and drifts from the rule it copies (``True`` accepted as a
count, a tolerance that float32 cannot meet, another wording). This test reads the source of every
model module (``lse_energy.registry.MODELS``, with the private submodules of a model package) and
finds each ``if ...: raise ValueError/TypeError(...)`` whose test is one of the kinds a rule owns:

* ``isinstance(v, int / float / bool / np.integer ...)``: a count, a flag or a scalar
  (``_validate.count``, ``flag``, ``positive``, ``nonnegative``, ``open_unit``);
* ``v < 1``, ``v <= 0``, ``0 < v < 1``, ``not v > 0``: an argument (a parameter of the function,
  or a loop variable over them) against a number, outside a call (``count``, ``positive``,
  ``nonnegative``, ``open_unit``; ``np.any(q < 0)`` checks an array's values, and a local such as
  the number of classes is a branch, not a check: neither is flagged);
* ``v not in OPTIONS``: a choice (``_validate.choice``);
* ``issubdtype(dtype, ...)`` on a ``dtype`` argument (``_validate.float_dtype``);
* ``a.ndim < 1 or a.shape[-1] != n``: a feature axis (``_validate.last_axis``).

A check of another kind (a relation between two arguments, a model's own domain) is not flagged.
``ALLOWED`` lists the few that stay, each with its reason. The control cases are scratch sources
with one check of each kind, which the scan must find, and the same checks through ``_validate``,
which it must not.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from lse_energy.registry import MODELS

#: Scalar types whose isinstance test copies a count, flag or scalar rule.
SCALAR_TYPES = {"int", "float", "bool", "integer", "floating", "bool_", "number", "Integral", "Real"}
NUMERIC = (int, float)

#: (file, function, kind) of a hand-rolled check that stays, and why.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("attention.py", "_check_encoding", "number bound"): "base > 1 (a logarithm's base): no rule has another "
    "lower bound than 0, and one caller does not make one",
}


def _model_files() -> list[pathlib.Path]:
    files = set()
    for m in MODELS:
        module = importlib.import_module(f"lse_energy.{m.name}")
        path = pathlib.Path(module.__file__)
        files |= set(path.parent.glob("*.py")) if path.name == "__init__.py" else {path}
    return sorted(files)


def _is_number(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in NUMERIC


def _type_names(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr


def _kinds(test, arguments) -> set[str]:
    """The kinds of rule-owned check that the ``if`` test ``test`` makes by hand (``arguments``: the
    names that hold an argument of the enclosing function, its parameters and loop variables)."""
    kinds = set()
    ndim_lt_1 = last_axis = False
    # a comparison inside a call (np.any(q < 0), bool(...)) is a check of an array's values, not of a scalar
    in_call = {
        id(sub) for node in ast.walk(test) if isinstance(node, ast.Call) for sub in ast.walk(node) if sub is not node
    }
    # in ``if a > 1 and b != 1: raise``, each condition is a guard of the other, not a check on its own
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        in_call |= {id(v) for v in test.values}
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn == "isinstance" and len(node.args) == 2 and SCALAR_TYPES & set(_type_names(node.args[1])):
                kinds.add("scalar type")
            if fn == "issubdtype" and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "dtype":
                kinds.add("dtype")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            ops = node.ops
            if len(ops) == 1 and isinstance(ops[0], ast.NotIn) and isinstance(node.left, ast.Name):
                kinds.add("choice")
            order = all(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in ops)
            names = [o for o in operands if isinstance(o, ast.Name) and o.id in arguments]
            if (
                order
                and id(node) not in in_call
                and len(names) == 1
                and all(_is_number(o) for o in operands if o is not names[0])
            ):
                kinds.add("number bound")
            if (
                isinstance(node.left, ast.Attribute)
                and node.left.attr == "ndim"
                and isinstance(ops[0], ast.Lt)
                and _is_number(node.comparators[0])
                and node.comparators[0].value == 1
            ):
                ndim_lt_1 = True
            if (
                isinstance(node.left, ast.Subscript)
                and isinstance(node.left.value, ast.Attribute)
                and node.left.value.attr == "shape"
                and ast.unparse(node.left.slice) == "-1"
                and isinstance(ops[0], ast.NotEq)
            ):
                last_axis = True
    if ndim_lt_1 and last_axis:
        kinds.add("last axis")
    return kinds


def _raises_value_or_type_error(body) -> bool:
    for stmt in body:
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if getattr(exc, "id", None) in ("ValueError", "TypeError"):
                return True
    return False


def _arguments(fn) -> set[str]:
    """A function's parameters and the targets of its ``for`` loops (``for name, v in ((..., arg), ...)``)."""
    a = fn.args
    names = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if p is not None}
    for node in ast.walk(fn):
        if isinstance(node, (ast.For, ast.comprehension)):
            names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return names


def hand_rolled_checks(source: str, label: str) -> list[tuple[str, str, str]]:
    """``(label, function, kind)`` for every hand-rolled check in ``source`` (a module's text)."""
    found = []

    def visit(node, function, arguments):
        for child in ast.iter_child_nodes(node):
            name, names = function, arguments
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name, names = child.name, _arguments(child)
            if isinstance(child, ast.If) and _raises_value_or_type_error(child.body):
                found.extend((label, name, kind) for kind in sorted(_kinds(child.test, names)))
            visit(child, name, names)

    visit(ast.parse(source), "<module>", set())
    return found


def _label(path: pathlib.Path) -> str:
    return path.relative_to(pathlib.Path(importlib.import_module("lse_energy").__file__).parent).as_posix()


def test_no_hand_rolled_check_outside_validate():
    found = [c for p in _model_files() for c in hand_rolled_checks(p.read_text(), _label(p))]
    unexplained = [c for c in found if c not in ALLOWED]
    assert unexplained == [], "use the _validate rule instead:\n" + "\n".join(map(str, unexplained))


def test_the_allowed_checks_are_still_there():
    found = {c for p in _model_files() for c in hand_rolled_checks(p.read_text(), _label(p))}
    assert set(ALLOWED) <= found, set(ALLOWED) - found


CONTROLS = {
    "scalar type": (
        "def f(n_steps):\n    if isinstance(n_steps, bool) or not isinstance(n_steps, int):\n"
        "        raise ValueError('n_steps')\n",
        "_validate.count('n_steps', n_steps)",
    ),
    "number bound": (
        "def f(lam):\n    if not lam > 0:\n        raise ValueError('lam')\n",
        "_validate.positive('lam', lam)",
    ),
    "choice": (
        "def f(method):\n    if method not in ('a', 'b'):\n        raise TypeError('method')\n",
        "_validate.choice('method', method, ('a', 'b'))",
    ),
    "dtype": (
        "def f(dtype):\n    if not jnp.issubdtype(dtype, jnp.floating):\n        raise ValueError('dtype')\n",
        "dtype = _validate.float_dtype(\"dtype\", dtype)",
    ),
    "last axis": (
        "def f(x, n):\n    if x.ndim < 1 or x.shape[-1] != n:\n        raise ValueError('x')\n",
        "x = _validate.last_axis('x', x, n, 'n')",
    ),
}


@pytest.mark.parametrize("kind", sorted(CONTROLS))
def test_the_scan_finds_each_kind(kind):
    source, _ = CONTROLS[kind]
    assert hand_rolled_checks(source, "scratch") == [("scratch", "f", kind)]


@pytest.mark.parametrize("kind", sorted(CONTROLS))
def test_the_same_check_through_validate_passes(kind):
    source, rule = CONTROLS[kind]
    assert hand_rolled_checks(source.split("\n")[0] + f"\n    {rule}\n", "scratch") == []


def test_a_relation_between_arguments_is_not_flagged():
    source = "def f(dt, tau):\n    if dt >= tau:\n        raise ValueError('dt must be < tau')\n"
    assert hand_rolled_checks(source, "scratch") == []
