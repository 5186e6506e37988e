"""Every public function of a model module shows how it is called: a doctested ``Examples:`` section.

The modules are those of ``lse_energy.registry.MODELS`` (``core`` among them), ``sharding`` and
``drivers`` (what a reader calls to fit a model of their own); a public function is one in the
module's ``__all__`` (or, without one, a name not starting with ``_``) that the module defines,
a jitted function included. Its docstring must have an
``Examples:`` section with at least one ``>>>`` line; ``nox -s tests`` runs those lines with
``--doctest-modules``, and the API pages (``book/api/``, autodoc with napoleon) render them.
``test_a_function_without_examples_is_caught`` runs the rule on a scratch module.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types

import pytest

from lse_energy.registry import MODELS

# "Examples:" on a line of its own, then (in that section or after it) a doctest prompt.
_SECTION = re.compile(r"^\s*Examples:\s*$(?P<body>.*)", re.M | re.S)


def _modules() -> dict[str, types.ModuleType]:
    names = sorted({m.name for m in MODELS} | {"core", "sharding", "drivers"})
    return {n: importlib.import_module(f"lse_energy.{n}") for n in names}


def public_functions(module) -> dict[str, object]:
    """The functions ``module`` defines and makes public (jitted ones included), by name."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    out = {}
    for n in names:
        obj = getattr(module, n)
        if inspect.isclass(obj) or not callable(obj):
            continue
        f = inspect.unwrap(obj)
        if (getattr(f, "__module__", None) or "").startswith(module.__name__):
            out[n] = obj
    return out


def missing_examples(module) -> list[str]:
    """The public functions of ``module`` whose docstring has no ``Examples:`` section with a ``>>>`` line."""
    out = []
    for name, f in public_functions(module).items():
        m = _SECTION.search(inspect.getdoc(f) or "")
        if m is None or ">>>" not in m.group("body"):
            out.append(name)
    return out


MODULES = _modules()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_public_function_has_an_example(name):
    assert missing_examples(MODULES[name]) == []


def _scratch(source: str) -> types.ModuleType:
    module = types.ModuleType("lse_energy.scratch")
    exec(source, module.__dict__)
    for v in vars(module).values():
        if inspect.isfunction(v):
            v.__module__ = module.__name__
    return module


def test_a_function_without_examples_is_caught():
    scratch = _scratch(
        "import functools\n\n"
        'def shown(x):\n    """Double.\n\n    Examples:\n      >>> shown(1)\n      2\n    """\n\n'
        'def untold(x):\n    """Double, with no example."""\n\n'
        'def prose_only(x):\n    """Double.\n\n    Examples:\n      Call it on one.\n    """\n\n'
        '@functools.wraps(shown)\ndef wrapped(x):\n    return shown(x)\n\n'
        "def _private(x):\n    pass\n"
    )
    assert sorted(public_functions(scratch)) == ["prose_only", "shown", "untold", "wrapped"]
    assert missing_examples(scratch) == ["untold", "prose_only"]
