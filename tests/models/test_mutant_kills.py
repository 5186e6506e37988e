"""Checks added because a hand-written mutant (``tools/mutants.py``, ``nox -s mutants``) survived every other test.

Each test checks the package against an independent oracle, not against the mutant: it is a
check that was missing, named for the module it tests (``nox -s mutants`` runs this file with
``-k <module>``, so every test name contains its module's name).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import core


def test_core_softmax_average_one_underflowing_row_in_a_block_of_good_rows():
    # Mutant core_underflow_guard_max: the blocked kernel falls back to the exact branch when any
    # row's sum underflows under the Cauchy-Schwarz shift. The existing loose-bound case has every
    # row underflow; here one row of each block does and the others do not, so a guard that read
    # the largest row sum instead of the smallest would keep the bounded result for that row.
    rng = np.random.default_rng(0)
    k = np.vstack([1e3 * np.eye(6)[1], rng.normal(size=(9, 6))])  # one long key
    v = rng.normal(size=(10, 3))
    q = 0.1 * rng.normal(size=(48, 6))
    q[:, 1] = 1.0  # near the long key: the bound |q| |k|max is nearly attained
    far = np.hstack([1e3, 0.0, 0.1 * rng.normal(size=4)])  # long, orthogonal to the long key
    q[::16] = far  # the first row of each 16-row block
    q, k, v = (jnp.asarray(a) for a in (q, k, v))
    # The premise: alone, the far row's bounded row sum underflows; a normal row's does not.
    k_norm = jnp.sqrt(jnp.max(jnp.sum(k * k, axis=-1)))
    floor = np.sqrt(np.finfo(np.float64).tiny)
    assert float(core._softmax_average_bounded(q[:1], k, v, k_norm)[1]) < floor
    assert float(core._softmax_average_bounded(q[1:2], k, v, k_norm)[1]) > floor
    # Oracle: a NumPy softmax with the row maximum subtracted.
    s = np.asarray(q) @ np.asarray(k).T
    w = np.exp(s - s.max(axis=1, keepdims=True))
    expected = (w / w.sum(axis=1, keepdims=True)) @ np.asarray(v)
    got = core.softmax_average(q, k, v, 1.0, block=16)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
    g = jax.grad(lambda q: jnp.sum(jnp.sin(core.softmax_average(q, k, v, 1.0, block=16))))(q)
    g_ref = jax.grad(lambda q: jnp.sum(jnp.sin(core.weights(q @ k.T) @ v)))(q)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)
