"""Every count and every PRNG key of every public function goes through ``_validate`` (issue 48, point 3).

For every public function of every model module (``lse_energy.registry.MODELS``), this test passes
``True`` for each count-like integer parameter (``n_*``, ``*_size``, ``*_dim``, ``max_iter``, ``n``,
or any parameter annotated ``int`` or whose default is an ``int``), and ``key=0`` and ``key=None`` for each PRNG key,
with the other arguments valid, and expects the package's own ``ValueError`` naming the parameter
(``_validate.count``: "n_steps must be an integer >= 1; got True"; ``_validate.key``: "key must be a
JAX PRNG key, e.g. jax.random.key(0); got int"), not a JAX internal error nor a run with
``n_steps = 1``.

The valid arguments come from ``tests/contracts/test_validation.py``: each of its cases holds a
factory of valid keyword arguments for one public function (``test_valid_call_succeeds`` checks
that they work). A function with a count or a key that has no such factory is built in ``_extra``,
or listed in ``NOT_BUILT`` with the reason (kept short; ``test_every_function_is_covered``).
The control case is a scratch function whose hand-rolled check lets ``True`` through.
"""

from __future__ import annotations

import importlib
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy.registry import MODELS
from tests.contracts import test_validation as tv
from tests.contracts.test_names import _public_functions

COUNT = re.compile(r"^(n|max_iter|block|n_\w+|num_\w+|\w+_size|\w+_dim|\w+_per_\w+)$")
#: Parameters that match the pattern but are not counts: step sizes are positive reals.
NOT_COUNTS = {"step_size", "n_std"}
#: A key that may be ``None`` by design: ``None`` is then a valid value, so only ``key=0`` is tried.
OPTIONAL_KEYS = {
    "embedding.fit": "key is needed only with batch_size (pairs and negatives are sampled); full batch is exact",
    "adversarial.pgd": "key=None starts the attack at x (no random start), as the notes' PGD",
}
#: Functions with a count or a key whose other arguments are not built here, and why.
NOT_BUILT = {
    "gmm.m_step": "an unvalidated kernel for use inside jit (its docstring says so); sharding calls it",
}


def _extra():
    """Valid arguments of the functions that test_validation.py has no case for."""
    from lse_energy import _rows, core, diffusion, expanding, gan, gmm, hopfield, mixture_pc, rbm

    key = jax.random.key(0)
    x = tv._normal((12, 2))
    shift = jnp.mean(x, axis=0)
    stream = lambda: _rows.local_stream(_rows.RowChunks("x", np.asarray(x), 4), gmm._em._chunk_statistics)  # noqa: E731
    return {
        core.softmax_average: lambda: dict(q=x, k=x, v=x, beta=1.0, block=4),
        core.random_normal: lambda: dict(key=key, shape=(2,)),
        core.random_uniform: lambda: dict(key=key, shape=(2,)),
        core.prefix_stable: lambda: dict(key=key),
        gmm.em: lambda: dict(
            params=gmm.init_params(x, 2, key=key),
            statistics=gmm.sufficient_statistics,
            data=(x, shift),
            n=12,
            shift=shift,
            max_iter=2,
        ),
        gmm.streamed_fit: lambda: dict(stream=stream(), n_components=2, key=key, max_iter=2),
        mixture_pc.init_params: lambda: dict(latent_dim=1, hidden_dim=3, out_dim=2, key=key),
        hopfield.classical_retrieve: lambda: dict(weights=jnp.zeros((3, 3)), states=jnp.ones((1, 3)), n_steps=2),
        expanding.self_attention_ops: lambda: dict(n=4, d=2, d_v=2),
        rbm.binary_states: lambda: dict(n=2),
        diffusion.linear_schedule: lambda: dict(n_steps=10),
        gan.ring_centers: lambda: dict(n_modes=4),
    }


def _is_count(name, param) -> bool:
    if name in NOT_COUNTS:
        return False
    default, annotation = param.default, param.annotation
    return bool(COUNT.match(name)) or type(default) is int or annotation in (int, "int")


def _targets():
    """(qualified name, function, [(parameter, bad value)]) for every function with a count or a key."""
    out = []
    for m in MODELS:
        module = importlib.import_module(f"lse_energy.{m.name}")
        for fname, f in sorted(_public_functions(module).items()):
            params = inspect.signature(f).parameters
            qual = f"{m.name}.{fname}"
            bad = [(p, True) for p, v in params.items() if _is_count(p, v)]
            for p in params:
                if p == "key" or p.endswith("_key"):
                    bad.append((p, 0))
                    if qual not in OPTIONAL_KEYS:
                        bad.append((p, None))
            if bad:
                out.append((qual, f, bad))
    return out


def _valid_factories():
    """Function -> a factory of valid keyword arguments, from test_validation's cases."""
    out = {}
    for case in tv.CASES:
        if case.kind != "diverge":
            out.setdefault(case.fn, case.valid)
    return out


VALID = {**_valid_factories(), **_extra()}
TARGETS = _targets()


def _cases():
    for qual, f, bad in TARGETS:
        if qual in NOT_BUILT:
            continue
        for p, value in bad:
            yield pytest.param(qual, f, p, value, id=f"{qual}-{p}={value!r}")


def _message(p, value) -> str:
    """The start of the package's message: ``_validate.count``'s or ``_validate.key``'s."""
    if value is True:
        return rf"{p} must be an integer (>= -?\d+|in \[-?\d+, [^]]+\]); got True"
    return rf"{p} must be a JAX PRNG key, e\.g\. jax\.random\.key\(0\); got {'int' if value == 0 else 'None'}$"


def _call_bad(f, p, value):
    kwargs = dict(VALID[f]())
    kwargs[p] = value
    return f(**kwargs)


@pytest.mark.parametrize(("qual", "f", "p", "value"), list(_cases()))
def test_bad_count_or_key_gives_the_package_message(qual, f, p, value):
    assert f in VALID, f"{qual}: no valid arguments (add a case to test_validation.py or list it in NOT_BUILT)"
    with pytest.raises((ValueError, TypeError)) as info:
        _call_bad(f, p, value)
    assert re.match(_message(p, value), str(info.value)), f"{qual}({p}={value!r}) raised {info.value!r}"


def test_every_function_is_covered():
    quals = {qual for qual, _, _ in TARGETS}
    assert set(NOT_BUILT) <= quals, set(NOT_BUILT) - quals
    assert set(OPTIONAL_KEYS) <= quals, set(OPTIONAL_KEYS) - quals


def _hand_rolled(x, n_steps):
    """A scratch function that checks its count by hand and lets True through."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be positive; got {n_steps}")
    return x * n_steps


def _hand_rolled_key(x, *, key):
    return x + jax.random.normal(key, x.shape)


@pytest.mark.parametrize(("f", "p", "value"), [(_hand_rolled, "n_steps", True), (_hand_rolled_key, "key", 0)])
def test_a_function_that_bypasses_validate_is_caught(f, p, value, monkeypatch):
    """The control: the test above, on scratch functions that skip ``_validate``, fails."""
    monkeypatch.setitem(VALID, f, lambda: {"x": jnp.ones(2), "n_steps": 2} if p == "n_steps" else {"x": jnp.ones(2)})
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        test_bad_count_or_key_gives_the_package_message(f"scratch.{f.__name__}", f, p, value)
