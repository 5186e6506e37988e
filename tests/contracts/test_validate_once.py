"""Validate once, at the public boundary (issue 35, point 3).

Every public fit of the package (``test_registry._fits``) is called with valid arguments while every
rule of :mod:`lse_energy._validate` is watched. Within the fit call (not while its arguments are
built), a rule may run on a concrete value at most once per argument label: the fit checks ``x``,
``params``, ``max_iter`` ... once, and the functions it calls trust it. A rule that runs under a
trace (inside a jitted loop) is not counted: it runs once per compilation and checks only shapes and
dtypes, never values.

The control cases are scratch fits that check an argument twice, or call a checking public function
on what they already checked; the watcher must report each.

The watcher sees only the rules of ``_validate``: a check written out by hand in a model module is
found by ``tests/contracts/test_hand_rolled.py`` (a scan of the modules' source), and a count or a
key that no rule checks by ``tests/contracts/test_bad_counts_and_keys.py``.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import inspect

import jax
import jax.numpy as jnp
import optax
import pytest

from lse_energy import _validate
from tests.contracts.test_registry import _fits

jax.config.update("jax_enable_x64", True)

#: The rules watched: every public function of ``_validate`` that checks an argument.
RULES = sorted(
    name
    for name, fn in vars(_validate).items()
    if inspect.isfunction(fn)
    and fn.__module__ == _validate.__name__
    and not name.startswith("_")
    and name not in ("is_concrete", "all_finite", "require_finite")
)

#: (fit, rule, label) repeats that are accepted, each with its reason.
ACCEPTED = {
    # sharded_fit composes two public gmm functions, init_params and em, each of which takes and
    # checks reg_covar (a float compared with 0, no host sync); gmm's private trusted entry points are
    # not importable from another module (tests/contracts/test_architecture.py).
    ("sharding.sharded_fit", "nonnegative", "reg_covar"): "two public gmm calls, each checking its own scalar",
}


def _label(fn, args, kwargs):
    """The argument's name where the rule takes one (``name``, default included), else the value's identity."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    if "name" in bound.arguments:
        return bound.arguments["name"]
    return f"<{type(args[0]).__name__} at {id(args[0]):#x}>"


def _traced(args, kwargs) -> bool:
    return any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves((args, kwargs)))


@contextlib.contextmanager
def watching(target_module, target_name):
    """Count the concrete rule calls made while ``target_module.target_name`` runs; yields the Counter."""
    counts, active = collections.Counter(), [0]
    originals = {name: getattr(_validate, name) for name in RULES}
    fit = getattr(target_module, target_name)

    def spy(rule, fn):
        def wrapped(*args, **kwargs):
            if active[0] and not _traced(args, kwargs):
                counts[(rule, _label(fn, args, kwargs))] += 1
            return fn(*args, **kwargs)

        return wrapped

    def entered(*args, **kwargs):
        active[0] += 1
        try:
            return fit(*args, **kwargs)
        finally:
            active[0] -= 1

    try:
        for name, fn in originals.items():
            setattr(_validate, name, spy(name, fn))
        setattr(target_module, target_name, entered)
        yield counts
    finally:
        setattr(target_module, target_name, fit)
        for name, fn in originals.items():
            setattr(_validate, name, fn)


def repeats(module, name, call) -> dict:
    """The (rule, label) pairs checked more than once on concrete values during ``call()``."""
    with watching(module, name) as counts:
        call()
    return {key: n for key, n in counts.items() if n > 1}


def _module(fit_name):
    module, fn = fit_name.split(".")
    pkg = "lse_energy.experiments" if module == "diffusion_mlp" else "lse_energy"
    return importlib.import_module(f"{pkg}.{module}"), fn


@pytest.mark.parametrize("fit_name", sorted(_fits()))
def test_every_fit_checks_each_argument_once(fit_name):
    module, fn = _module(fit_name)
    found = repeats(module, fn, _fits()[fit_name])
    unexplained = {k: n for k, n in found.items() if (fit_name, *k) not in ACCEPTED}
    assert unexplained == {}, f"{fit_name} checks these (rule, label) more than once: {unexplained}"


def test_accepted_repeats_still_happen():
    """Each accepted repeat is still observed (otherwise its entry is stale and must go)."""
    for fit_name, rule, label in ACCEPTED:
        module, fn = _module(fit_name)
        assert (rule, label) in repeats(module, fn, _fits()[fit_name])


# --- controls: the watcher catches a fit that checks twice ---------------------------------------


class _Scratch:
    """A scratch module with fits that break the rule."""

    @staticmethod
    def twice(x):
        x = _validate.points("x", x)
        return _validate.points("x", x)

    @staticmethod
    def via_public(x, n_steps):
        n_steps = _validate.count("n_steps", n_steps, 1)
        x = _validate.points("x", x)
        return _Scratch.inner_public(x, n_steps)

    @staticmethod
    def inner_public(x, n_steps):
        _validate.count("n_steps", n_steps, 1)
        return jnp.sum(x) * n_steps

    @staticmethod
    def same_optimizer(opt):
        _validate.optimizer(opt)
        _validate.optimizer(opt)

    @staticmethod
    def once_then_jit(x):
        x = _validate.points("x", x)
        return jax.jit(lambda y: jnp.sum(_validate.points("x", y)))(x)


_OPT = optax.sgd(0.1)
CONTROLS = {
    "the same array twice": (
        "twice",
        lambda: _Scratch.twice(jnp.ones((3, 2))),
        {("points", "x"), ("float_array", "x")},
    ),
    "a public inner function": ("via_public", lambda: _Scratch.via_public(jnp.ones((3, 2)), 2), {("count", "n_steps")}),
    "an unnamed rule on one object": ("same_optimizer", lambda: _Scratch.same_optimizer(_OPT), {("optimizer", None)}),
}


@pytest.mark.parametrize("case", sorted(CONTROLS))
def test_the_watcher_catches_a_repeat(case):
    name, call, expected = CONTROLS[case]
    found = repeats(_Scratch, name, call)
    for rule, label in expected:  # label None: a rule without a name argument, labelled by identity
        assert any(r == rule and (label is None or lab == label) for r, lab in found), (rule, label, found)


def test_a_rule_under_a_trace_is_not_counted():
    assert repeats(_Scratch, "once_then_jit", lambda: _Scratch.once_then_jit(jnp.ones((3, 2)))) == {}
