"""Tests for lse_energy.pcn, hierarchical predictive coding networks (lecture notes §29)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import core, pcn
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, relative_error, relative_error_l2

SIZES = (4, 5, 3, 2)


def _params(seed, sizes=SIZES, scale=1.5):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    p = pcn.init_params(sizes, key=k1, weight_scale=scale)
    biases = tuple(0.3 * jax.random.normal(jax.random.fold_in(k2, i), b.shape) for i, b in enumerate(p.biases))
    return p._replace(biases=biases, prior_mean=0.5 * jax.random.normal(k3, (sizes[0],)))


def _problem(seed, batch=3, sizes=SIZES):
    p = _params(seed, sizes)
    key = jax.random.key(100 + seed)
    xs = tuple(jax.random.normal(jax.random.fold_in(key, l), (batch, n)) for l, n in enumerate(sizes))
    prec = jnp.asarray([0.3, 1.0, 2.0, 0.5])[: len(sizes)]
    return p, xs, prec


def _numpy_energy(p, xs, prec):
    xs = [np.asarray(x) for x in xs]
    total = 0.5 * prec[0] * np.sum((xs[0] - np.asarray(p.prior_mean)) ** 2)
    for l, (W, b) in enumerate(zip(p.weights, p.biases)):
        mu = np.tanh(xs[l]) @ np.asarray(W).T + np.asarray(b)
        total += 0.5 * prec[l + 1] * np.sum((xs[l + 1] - mu) ** 2)
    return total


# --- energy -----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_matches_numpy_and_single_parent_lse(seed):
    p, xs, prec = _problem(seed)
    F = float(pcn.energy(p, xs, prec))
    np.testing.assert_allclose(F, _numpy_energy(p, xs, np.asarray(prec)), rtol=1e-12)
    assert F >= 0.0
    # K = 1: the log-sum-exp energy of the (..., L, 1) similarity is minus the summed similarity.
    sim = pcn.sim(p, xs, prec)
    assert sim.shape == (3, len(SIZES))
    np.testing.assert_allclose(float(core.energy(sim[..., None])), -float(jnp.sum(sim)), rtol=1e-14)
    assert np.all(np.asarray(core.weights(sim[..., None])) == 1.0)
    # F = sum_l ||eps^l||^2 / (2 pi_l) with eps^l = pi_l (x^l - mu^l).
    eps = pcn.errors(p, xs, prec)
    alt = sum(0.5 * float(jnp.sum(e**2)) / float(pi) for e, pi in zip(eps, prec))
    np.testing.assert_allclose(F, alt, rtol=1e-12)


def test_default_precisions_and_unbatched():
    p, xs, _ = _problem(0)
    one = tuple(x[0] for x in xs)
    prec = jnp.asarray([0.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(float(pcn.energy(p, one)), float(pcn.energy(p, one, prec)), rtol=0)
    np.testing.assert_allclose(float(pcn.energy(p, one)), _numpy_energy(p, one, np.asarray(prec)), rtol=1e-12)


# --- gradients ---------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_x(seed):
    p, xs, prec = _problem(seed)
    assert_gradient(lambda v: pcn.energy(p, v, prec), lambda v: pcn.grad_x(p, v, prec), xs, n_coords=None)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_params(seed):
    p, xs, prec = _problem(seed)
    assert_gradient(lambda q: pcn.energy(q, xs, prec), lambda q: pcn.grad_params(q, xs, prec), p, n_coords=None)


@pytest.mark.parametrize("seed", SEEDS)
def test_hebbian_form_of_weight_gradient(seed):
    p, xs, prec = _problem(seed)
    eps = pcn.errors(p, xs, prec)
    g = pcn.grad_params(p, xs, prec)
    for l, gW in enumerate(g.weights):
        outer = sum(np.outer(np.asarray(eps[l + 1][n]), np.tanh(np.asarray(xs[l][n]))) for n in range(3))
        np.testing.assert_allclose(np.asarray(-gW), outer, rtol=1e-12)


def test_feedback_without_the_transpose_is_not_the_gradient():
    # Square layers, so that W eps (no transpose) has the shape of the gradient and can be compared.
    p, xs, prec = _problem(0, sizes=(3, 3, 3))
    eps = pcn.errors(p, xs, prec)
    swapped_g1 = eps[1] - (1 - jnp.tanh(xs[1]) ** 2) * (eps[2] @ p.weights[1].T)  # W instead of W^T
    true_g1 = jax.grad(pcn.energy, argnums=1)(p, xs, prec)[1]
    assert relative_error(pcn.grad_x(p, xs, prec)[1], true_g1) < 1e-12
    assert relative_error(swapped_g1, true_g1) > 1e-2


# --- inference -----------------------------------------------------------------


CLAMPS = {
    "train": (True, False, False, True),
    "generate": (False, False, False, True),
    "classify": (True, False, False, False),
}


@pytest.mark.parametrize("mode", list(CLAMPS))
@pytest.mark.parametrize("seed", SEEDS)
def test_energy_non_increasing_and_clamps_hold(seed, mode):
    p, xs, prec = _problem(seed)
    res = pcn.infer(p, xs, prec, clamp=CLAMPS[mode], n_steps=200, step_size=0.05)
    F = np.asarray(res.energy)
    assert F.shape == (201,)
    np.testing.assert_allclose(F[0], float(pcn.energy(p, xs, prec)), rtol=1e-12)
    np.testing.assert_allclose(F[-1], float(pcn.energy(p, res.xs, prec)), rtol=1e-12)
    assert np.all(np.diff(F) <= 1e-12 * F[0])
    assert F[-1] < F[0]
    for x0, x1, c in zip(xs, res.xs, CLAMPS[mode]):
        if c:
            assert np.array_equal(np.asarray(x0), np.asarray(x1))
        else:
            assert not np.array_equal(np.asarray(x0), np.asarray(x1))


def test_batched_inference_equals_per_example():
    p, xs, prec = _problem(0)
    clamp = CLAMPS["train"]
    batch = pcn.infer(p, xs, prec, clamp=clamp, n_steps=30, step_size=0.1)
    for n in range(3):
        one = pcn.infer(p, tuple(x[n] for x in xs), prec, clamp=clamp, n_steps=30, step_size=0.1)
        for a, b in zip(batch.xs, one.xs):
            np.testing.assert_allclose(np.asarray(a[n]), np.asarray(b), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_free_output_equilibrium_is_feedforward_pass(seed):
    p, xs, prec = _problem(seed)
    labels, res = pcn.classify(p, xs[0], prec, n_steps=3000, step_size=0.2)
    ff = pcn.forward(p, xs[0])
    for a, b in zip(res.xs, ff):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-10)
    for e in pcn.errors(p, res.xs, prec)[1:]:
        assert float(jnp.max(jnp.abs(e))) < 1e-10
    assert np.array_equal(np.asarray(labels), np.argmax(np.asarray(ff[-1]), axis=-1))
    # ... and the feed-forward pass is a fixed point: zero gradient in the free layers.
    g = pcn.grad_x(p, ff, prec)
    assert max(float(jnp.max(jnp.abs(gl))) for gl in g[1:]) < 1e-14


def _pc_vs_bp(seed, gamma, sizes=(6, 8, 5, 3)):
    p = _params(seed, sizes)
    x = jax.random.normal(jax.random.key(50 + seed), (sizes[0],))
    y = jnp.zeros(sizes[-1]).at[seed % sizes[-1]].set(1.0)
    bp = jax.grad(lambda q: 0.5 * jnp.sum((y - pcn.forward(q, x)[-1]) ** 2))(p)
    prec = jnp.asarray([0.0, 1.0, 1.0, gamma])
    ff = pcn.forward(p, x)
    res = pcn.infer(p, ff[:-1] + (y,), prec, clamp=(True, False, False, True), n_steps=3000, step_size=0.1)
    grad_x = pcn.grad_x(p, res.xs, prec)
    assert max(float(jnp.max(jnp.abs(g))) for g in grad_x[1:-1]) < 1e-12  # at equilibrium
    dW = [-g / gamma for g in pcn.grad_params(p, res.xs, prec).weights]  # PC update per unit gamma
    target = [-g for g in bp.weights]  # -dL/dW of the feed-forward net
    cos = [float(jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))) for a, b in zip(dW, target)]
    rel = [relative_error_l2(a, b) for a, b in zip(dW, target)]
    return np.asarray(cos), np.asarray(rel)


@pytest.mark.parametrize("seed", SEEDS)
def test_pc_approximates_backprop_in_weak_clamping_limit(seed):
    gammas = [1.0, 0.1, 0.01, 0.001]
    results = [_pc_vs_bp(seed, g) for g in gammas]
    cos, rel = results[-1]
    assert np.all(cos > 0.9999)
    rels = np.stack([r for _, r in results])
    assert np.all(np.diff(rels, axis=0) < 0)  # agreement improves as the clamping weakens
    # ... at first order in gamma: the error shrinks tenfold per decade as gamma -> 0.
    ratio = rels[-1] / rels[-2]
    assert np.all((ratio > 0.09) & (ratio < 0.11))


# --- training and generation -------------------------------------------------------


def _toy_data(seed, n=24, sizes=SIZES):
    k1, k2 = jax.random.split(jax.random.key(200 + seed))
    x = jax.random.normal(k1, (n, sizes[0]))
    y = jax.nn.one_hot(jax.random.randint(k2, (n,), 0, sizes[-1]), sizes[-1])
    return x, y


def test_one_sgd_step_is_the_hebbian_rule():
    p, _, prec = _problem(0)
    x, y = _toy_data(0)
    lr, steps, eta = 0.05, 7, 0.1
    out = pcn.fit(
        p,
        x,
        y,
        prec,
        key=jax.random.key(0),
        optimizer=optax.sgd(lr),
        n_epochs=1,
        batch_size=x.shape[0],
        n_infer_steps=steps,
        step_size=eta,
    )
    # Same thing by hand (a full batch is a permutation of the data; sums do not care up to round-off).
    ff = pcn.forward(p, x)
    xs = pcn.infer(p, ff[:-1] + (y,), prec, clamp=CLAMPS["train"], n_steps=steps, step_size=eta).xs
    eps = pcn.errors(p, xs, prec)
    for l, W in enumerate(out.params.weights):
        expected = p.weights[l] + lr * (eps[l + 1].T @ jnp.tanh(xs[l])) / x.shape[0]
        np.testing.assert_allclose(np.asarray(W), np.asarray(expected), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(
        np.asarray(out.params.prior_mean), np.asarray(p.prior_mean + lr * jnp.mean(eps[0], axis=0)), rtol=1e-10
    )
    np.testing.assert_allclose(
        float(out.extras.loss[0, 0]), 0.5 * float(jnp.mean(jnp.sum((y - ff[-1]) ** 2, -1))), rtol=1e-12
    )
    # The recorded energy is F at the relaxed state under the weights *before* the step
    # (the equilibrium energy), per example.
    np.testing.assert_allclose(
        float(out.extras.batch_energies[0, 0]), float(pcn.energy(p, xs, prec)) / x.shape[0], rtol=1e-10
    )
    assert abs(float(out.extras.batch_energies[0, 0]) - float(pcn.energy(out.params, xs, prec)) / x.shape[0]) > 1e-8


def test_training_reduces_loss_and_same_key_same_result():
    p, _, prec = _problem(1)
    x, y = _toy_data(1)
    kw = dict(optimizer=optax.adam(1e-2), n_epochs=40, batch_size=8, n_infer_steps=10)
    a = pcn.fit(p, x, y, prec, key=jax.random.key(3), **kw)
    b = pcn.fit(p, x, y, prec, key=jax.random.key(3), **kw)
    c = pcn.fit(p, x, y, prec, key=jax.random.key(4), **kw)
    for u, v in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        assert np.array_equal(np.asarray(u), np.asarray(v))
    assert not np.array_equal(np.asarray(a.params.weights[0]), np.asarray(c.params.weights[0]))
    assert a.extras.loss.shape == (40, 3) and a.extras.batch_energies.shape == (40, 3) and a.energies.shape == (40,)
    assert a.n_iter == 40
    assert float(a.extras.loss[-1].mean()) < 0.5 * float(a.extras.loss[0].mean())


@pytest.mark.parametrize("seed", SEEDS)
def test_generation_clamps_top_and_descends(seed):
    p, _, prec = _problem(seed)
    y = jnp.eye(SIZES[-1])
    res = pcn.generate(p, y, prec, n_steps=300, step_size=0.05)
    assert np.array_equal(np.asarray(res.xs[-1]), np.asarray(y))
    assert np.all(np.diff(np.asarray(res.energy)) <= 1e-12 * float(res.energy[0]))
    # With a root prior (pi_1 > 0), a long run reaches a stationary point of F in the free layers.
    long = pcn.generate(p, y, prec, n_steps=20000, step_size=0.05)
    g = pcn.grad_x(p, long.xs, prec)
    assert max(float(jnp.max(jnp.abs(gl))) for gl in g[:-1]) < 1e-8


# --- validation ------------------------------------------------------------------------


def test_validation_errors():
    p, xs, prec = _problem(0)
    x, y = _toy_data(0)
    with pytest.raises(ValueError, match="weight_scale"):
        pcn.init_params((4, 2), key=jax.random.key(0), weight_scale=-1.0)
    with pytest.raises(ValueError, match=r"params must be pcn\.Params"):
        pcn.energy(tuple(p), xs, prec)
    bad = p._replace(weights=(p.weights[0].T,) + p.weights[1:])
    with pytest.raises(ValueError, match=r"params\.layers\[0\]\.weights must have shape \(n_2, n_1\) with n_1 = 4"):
        pcn.energy(bad, xs, prec)
    with pytest.raises(ValueError, match="params.prior_mean"):
        pcn.energy(p._replace(prior_mean=jnp.full(4, jnp.nan)), xs, prec)
    with pytest.raises(ValueError, match="clamp"):
        pcn.infer(p, xs, prec, clamp=(True, False), n_steps=3)
    with pytest.raises(ValueError, match="step_size"):
        pcn.infer(p, xs, prec, clamp=CLAMPS["train"], n_steps=3, step_size=0.0)
    with pytest.raises(ValueError, match="same number of rows"):
        pcn.fit(
            p,
            x,
            y[:-1],
            prec,
            key=jax.random.key(0),
            optimizer=optax.sgd(0.1),
            n_epochs=1,
            batch_size=4,
            n_infer_steps=2,
        )
    with pytest.raises(ValueError, match="batch_size"):
        pcn.fit(
            p, x, y, prec, key=jax.random.key(0), optimizer=optax.sgd(0.1), n_epochs=1, batch_size=100, n_infer_steps=2
        )
    with pytest.raises(ValueError, match="optimizer"):
        pcn.fit(p, x, y, prec, key=jax.random.key(0), optimizer=None, n_epochs=1, batch_size=4, n_infer_steps=2)
    with pytest.raises(ValueError, match="y must have 2 columns"):
        pcn.generate(p, jnp.eye(3), prec, n_steps=3)
    with pytest.raises(ValueError, match="x must have 4 columns"):
        pcn.classify(p, jnp.ones((2, 3)), prec, n_steps=3)
