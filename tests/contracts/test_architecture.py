"""The package's layers, read from its source.

Layers only point down:

1. ``_validate`` (argument rules) imports nothing from the package; ``core``,
   ``_progress`` and ``_rows`` import at most ``_validate``; ``_descent`` (the fit
   drivers, which return ``core.FitResult`` and drive ``_progress`` bars) imports at
   most those three.
2. Model modules (``lse_energy.registry.MODELS``) import only layer 1: no model
   imports another model, ``sharding``, ``experiments`` or the registry. A model
   may be a package (``gmm``, ``adversarial``): its private submodules import
   each other, private names included, and nothing outside the package imports
   them.
3. ``sharding``, ``experiments.*`` and ``registry`` import models and layer 1.

And everywhere: no module imports another module's private (``_``-prefixed)
name, by ``from ... import _x`` or by ``module._x``; no module is over 800 lines.
Each rule is also run on scratch sources that break it
(``test_the_checker_sees_a_violation``).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from lse_energy.registry import MODELS

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "lse_energy"
BOTTOM = {"_validate", "_progress", "_rows", "_descent", "core"}
MODEL_NAMES = {m.name for m in MODELS}
# gmm (EM drivers apart from the energy) and adversarial (TRADES apart from the attacks) became
# packages to come under it (issue 35).
MAX_LINES = 800


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def _imports(tree):
    """``(imported package modules, aliases bound to package modules, private names imported)``."""
    modules, aliases, private = set(), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("lse_energy."):
                    mod = a.name.removeprefix("lse_energy.")
                    modules.add(mod)
                    if a.asname:
                        aliases[a.asname] = mod
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lse_energy":
            base = node.module.removeprefix("lse_energy").lstrip(".")
            for a in node.names:
                target = f"{base}.{a.name}".strip(".")
                if (PACKAGE / f"{target.replace('.', '/')}.py").exists() or (
                    PACKAGE / target.replace(".", "/")
                ).is_dir():
                    modules.add(target)
                    aliases[a.asname or a.name] = target
                else:
                    modules.add(base)
                    if a.name.startswith("_"):
                        private.append(f"from lse_energy.{base} import {a.name}")
    return modules, aliases, private


def _private_attributes(tree, aliases):
    bad = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            bad.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    return bad


def _root(module: str) -> str:
    return module.split(".")[0]


def _is_private_path(module: str) -> bool:
    """``gmm._em``: a private submodule (any part after the first starts with ``_``)."""
    return any(part.startswith("_") for part in module.split(".")[1:])


def violations(name: str, source: str) -> list[str]:
    """Every rule of the module docstring that the module ``lse_energy.<name>`` with this source breaks."""
    tree = ast.parse(source)
    modules, aliases, private = _imports(tree)
    modules.discard(name)
    root = _root(name)
    own = {m for m in modules if _root(m) == root and root in MODEL_NAMES}
    out = [
        f"imports the private name {p}"
        for p in private
        if not (root in MODEL_NAMES and _root(p.split()[1].removeprefix("lse_energy.")) == root)
    ]
    out += [
        f"uses the private name {b}"
        for b in _private_attributes(tree, aliases)
        if not (root in MODEL_NAMES and _root(aliases[b.split(".")[0]]) == root)
    ]
    out += [f"imports the private submodule {m}" for m in sorted(modules - own) if _is_private_path(m)]
    others = modules - own
    if name == "_validate":
        out += [f"_validate imports {m}" for m in sorted(modules)]
    elif name in {"core", "_progress", "_rows"}:
        out += [f"{name} imports {m} (only _validate allowed)" for m in sorted(others - {"_validate"})]
    elif name == "_descent":
        allowed = {"_validate", "core", "_progress"}
        out += [f"{name} imports {m} (only {sorted(allowed)} allowed)" for m in sorted(others - allowed)]
    elif root in MODEL_NAMES:
        out += [f"model {name} imports {m} (only {sorted(BOTTOM)})" for m in sorted(others - BOTTOM)]
    return out


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_layers_point_down_and_no_private_name_crosses_a_module(path):
    assert violations(_name(path), path.read_text()) == []


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_no_module_is_over_the_limit(path):
    _check_lines(path)


def _example_lines(source: str) -> int:
    """The lines of the docstrings' ``Examples:`` sections in ``source``.

    Every public function of a model carries one (``test_examples.py``); the cap measures the
    model's code and prose, so these lines are not counted. A section runs from the blank line
    that sets it apart and its ``Examples:`` line to the next line indented no deeper than it
    (the next section, or the closing quotes).
    """
    lines = source.splitlines()
    n = 0
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
            continue
        if not isinstance(first.value.value, str):
            continue
        doc = lines[first.lineno - 1 : first.end_lineno]
        start = next((i for i, line in enumerate(doc) if line.strip() == "Examples:"), None)
        if start is None:
            continue
        indent = len(doc[start]) - len(doc[start].lstrip())
        end = start + 1
        while end < len(doc) and (not doc[end].strip() or len(doc[end]) - len(doc[end].lstrip()) > indent):
            end += 1
        n += end - start + (start > 0 and not doc[start - 1].strip())
    return n


def _check_lines(path):
    source = path.read_text()
    n = len(source.splitlines()) - _example_lines(source)
    assert n <= MAX_LINES, f"{path.name} has {n} lines besides its examples (limit {MAX_LINES})"


CONTROLS = {
    # (module name, scratch source) -> the violation the checker must report
    "model imports a model": ("hopfield", "from lse_energy import gmm\n", "model hopfield imports gmm"),
    "model imports sharding": ("rbm", "import lse_energy.sharding\n", "model rbm imports sharding"),
    "core imports a model": ("core", "from lse_energy import gmm\n", "core imports gmm"),
    "private name": ("sharding", "from lse_energy.attention import _sim\n", "private name from lse_energy.attention"),
    "private attribute": ("registry", "from lse_energy import gmm\nx = gmm._m_step\n", "private name gmm._m_step"),
    "private submodule": ("sharding", "from lse_energy.gmm._em import fit\n", "private submodule gmm._em"),
    "another model's private part": ("vae", "from lse_energy.gmm._model import sim\n", "vae imports gmm._model"),
}


@pytest.mark.parametrize("case", sorted(CONTROLS))
def test_the_checker_sees_a_violation(case):
    name, source, expected = CONTROLS[case]
    found = violations(name, source)
    assert any(expected in v for v in found), found


def test_a_model_package_may_share_its_own_private_parts():
    ok = "from lse_energy import _validate, core\nfrom lse_energy.gmm._model import _sim, Params\n"
    assert violations("gmm._em", ok) == []


@pytest.mark.parametrize("n", [MAX_LINES, MAX_LINES + 1])
def test_the_line_cap_is_enforced(n, tmp_path):
    path = tmp_path / "scratch.py"
    path.write_text("x = 1\n" * n)
    if n > MAX_LINES:
        with pytest.raises(AssertionError, match=f"{n} lines"):
            _check_lines(path)
    else:
        _check_lines(path)


_EXAMPLE = 'def f(x):\n    """Double.\n\n    Examples:\n      >>> f(1)\n      2\n    """\n    return 2 * x\n'


@pytest.mark.parametrize("n", [MAX_LINES - 4, MAX_LINES - 3])
def test_examples_are_not_counted_and_the_rest_is(n, tmp_path):
    # f has 8 lines, 4 of them its Examples: section and the blank line before it: n + 4 count
    path = tmp_path / "scratch.py"
    path.write_text("x = 1\n" * n + _EXAMPLE)
    assert _example_lines(path.read_text()) == 4
    if n + 4 > MAX_LINES:
        with pytest.raises(AssertionError, match=f"{n + 4} lines"):
            _check_lines(path)
    else:
        _check_lines(path)
