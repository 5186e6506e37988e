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


def test_rbm_gibbs_runs_every_sweep():
    # Mutant rbm_gibbs_sweeps_one_fewer: gibbs runs n_steps - 1 sweeps. Oracle: with W = 0 and
    # biases of +-50 every conditional is 0 or 1 in float64, so one sweep from any start sets
    # h = 1[c > 0] and v = 1[b > 0] exactly; a run that skipped a sweep returns the start at n_steps = 1.
    from lse_energy import rbm

    b = jnp.array([50.0, -50.0, 50.0, 50.0, -50.0])
    c = jnp.array([-50.0, 50.0, 50.0])
    params = rbm.Params(W=jnp.zeros((5, 3)), b=b, c=c)
    v0 = jnp.array([[0.0, 1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0, 0.0]])
    for n in (1, 2, 3):
        state = rbm.gibbs(params, v0, n, key=jax.random.key(n))
        np.testing.assert_array_equal(state.v, np.broadcast_to(np.asarray(b) > 0, v0.shape))
        np.testing.assert_array_equal(state.h, np.broadcast_to(np.asarray(c) > 0, (2, 3)))


def _hopfield_async_numpy(w, s, n_sweeps):
    # Asynchronous sweeps over units 0..d-1, a unit with zero field keeps its state.
    s = np.array(s, dtype=float)
    for _ in range(n_sweeps):
        for row in s:
            for j in range(len(row)):
                h = w[j] @ row
                row[j] = 1.0 if h > 0 else (-1.0 if h < 0 else row[j])
    return s


def test_hopfield_classical_retrieve_runs_every_sweep():
    # Mutant hopfield_sweeps_one_fewer: classical_retrieve runs n_steps - 1 sweeps. Oracle: a
    # NumPy loop of exactly n_steps asynchronous sweeps, on states that still change in the
    # second and third sweeps (checked, so the comparison can tell n from n - 1).
    from lse_energy import hopfield

    rng = np.random.default_rng(3)
    d = 12
    w = rng.normal(size=(d, d))
    w = w + w.T
    np.fill_diagonal(w, 0.0)
    s0 = rng.choice([-1.0, 1.0], size=(40, d))
    for n in (1, 2, 3):
        ref = _hopfield_async_numpy(w, s0, n)
        assert not np.array_equal(ref, _hopfield_async_numpy(w, s0, n - 1))
        got = hopfield.classical_retrieve(jnp.asarray(w), jnp.asarray(s0), n_steps=n)
        np.testing.assert_array_equal(np.asarray(got), ref)


def test_structural_cccp_runs_every_step():
    # Mutant structural_cccp_steps_one_fewer: cccp runs n_steps - 1 steps. Oracle: a Python loop
    # of exactly n_steps calls of the one-step map cccp_step, and the trace's documented length
    # n_steps + 1; the iterates still move between steps (checked, so n and n - 1 differ).
    from lse_energy import structural

    rng = np.random.default_rng(5)
    mu0, x, w = (jnp.asarray(rng.normal(size=s)) for s in ((3, 4), (7, 5), (4, 5)))
    for prior in ("hopfield", "slot"):
        ref = [mu0]
        for _ in range(3):
            ref.append(structural.cccp_step(ref[-1], x, w, prior=prior))
        for n in (1, 2, 3):
            assert float(jnp.max(jnp.abs(ref[n] - ref[n - 1]))) > 1e-6
            mu, trace = structural.cccp(mu0, x, w, prior=prior, n_steps=n)
            assert trace.shape == (n + 1,)
            np.testing.assert_allclose(np.asarray(mu), np.asarray(ref[n]), rtol=1e-12, atol=1e-12)


def test_anpc_infer_runs_every_step():
    # Mutant anpc_inference_one_fewer: inference ran n_steps - 1 steps. Oracle: a Python loop of
    # exactly n gradient steps on the free neurons, with the gradient from jax.grad of the energy.
    from lse_energy import anpc
    from tests.models.test_anpc import _problem

    p, x, k = _problem(0)[:3]
    n = x.shape[-1]
    clamp = jnp.arange(n) < 2
    eta, n_steps = 0.05, 4
    res = anpc.infer(p, x, k, clamp=clamp, n_steps=n_steps, step_size=eta)
    assert res.energy.shape == (n_steps + 1,)
    grad = jax.grad(lambda z: anpc.energy(p, z, k))
    ref = x
    for _ in range(n_steps):
        ref = jnp.where(clamp, ref, ref - eta * grad(ref))
    np.testing.assert_allclose(res.x, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.energy[-1], anpc.energy(p, ref, k), rtol=1e-10)


def test_adversarial_pgd_runs_every_step():
    # Mutant adversarial_attack_steps_one_fewer: PGD ran n_steps - 1 steps. Oracle: a Python loop
    # of exactly n projected sign-gradient steps, the gradient from jax.grad of the cross-entropy.
    from lse_energy import adversarial

    key = jax.random.key(0)
    params = adversarial.init_params(5, 7, 3, key=key)
    x = jax.random.normal(jax.random.fold_in(key, 1), (6, 5))
    y = jnp.arange(6) % 3
    eps, alpha, n_steps = 0.3, 0.05, 4
    res = adversarial.pgd(params, x, y, eps, step_size=alpha, n_steps=n_steps)
    assert res.losses.shape == (n_steps + 1, x.shape[0])

    def ce(xa):
        z = adversarial.logits(params, xa)
        return jnp.sum(jax.nn.logsumexp(z, axis=1) - z[jnp.arange(z.shape[0]), y])

    ref = x
    for _ in range(n_steps):
        ref = jnp.clip(ref + alpha * jnp.sign(jax.grad(ce)(ref)), x - eps, x + eps)
    np.testing.assert_allclose(res.x_adv, ref, rtol=1e-12, atol=1e-12)
