"""Tests for lse_energy.mixture_pc, predictive coding with one layer of causes (§8 and Appendix B of Tschantz 2025)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy import _progress
from lse_energy import mixture_pc as mpc
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def _problem(seed, N=7, K=3, m=2, H=5, d=3):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    params = mpc.init_params(m, H, d, key=k1, input_scale=1.3, output_scale=1.7, bias_scale=0.5)
    x = 1.5 * jax.random.normal(k2, (N, d))
    mu = jax.random.normal(k3, (K, m))
    return params, x, mu


# --- energy -----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_matches_numpy_oracle(seed):
    params, x, mu = _problem(seed)
    W1, b1, W2, b2 = (np.asarray(a) for a in params)
    pred = np.tanh(np.asarray(mu) @ W1.T + b1) @ W2.T + b2
    sim = -0.5 * ((np.asarray(x)[:, None, :] - pred[None]) ** 2).sum(-1)
    top = sim.max(1, keepdims=True)
    expected = -np.sum(np.log(np.exp(sim - top).sum(1)) + top[:, 0])
    np.testing.assert_allclose(float(mpc.energy(params, x, mu)), expected, rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_bounded_below_and_responsibilities(seed):
    params, x, mu = _problem(seed)
    N, K = x.shape[0], mu.shape[0]
    assert float(mpc.energy(params, x, mu)) >= -N * np.log(K)
    alpha = mpc.responsibilities(params, x, mu)
    np.testing.assert_allclose(np.asarray(alpha.sum(1)), 1.0, rtol=1e-13)
    # -dE/dsim = alpha: the responsibilities are the gradient of -E w.r.t. the sim matrix.
    sim = mpc.sim(params, x, mu)
    from lse_energy import core

    g = jax.grad(lambda s: -core.energy(s))(sim)
    np.testing.assert_allclose(np.asarray(alpha), np.asarray(g), rtol=1e-12)


# --- gradients ---------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_x(seed):
    params, x, mu = _problem(seed)
    assert_gradient(lambda v: mpc.energy(params, v, mu), lambda v: mpc.grad_x(params, v, mu), x)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_x_seed_sign_is_wrong(seed):
    """§8 prints -dE/dx_i = sum_k alpha_ik (x_i - f(mu_k)); that is +dE/dx_i."""
    params, x, mu = _problem(seed)
    alpha = mpc.responsibilities(params, x, mu)
    printed_minus_grad = jnp.einsum("nk,nkd->nd", alpha, x[:, None] - mpc.predict(params, mu)[None])
    true_minus_grad = -jax.grad(mpc.energy, argnums=1)(params, x, mu)
    np.testing.assert_allclose(np.asarray(printed_minus_grad), -np.asarray(true_minus_grad), rtol=1e-10)
    assert not np.allclose(np.asarray(printed_minus_grad), np.asarray(true_minus_grad))


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_mu(seed):
    params, x, mu = _problem(seed)
    assert_gradient(lambda v: mpc.energy(params, x, v), lambda v: mpc.grad_mu(params, x, v), mu)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_mu_needs_jacobian_transpose(seed):
    """With a square, non-symmetric Jacobian the untransposed product of §8 is wrong."""
    params, x, mu = _problem(seed, m=3, d=3)
    alpha = mpc.responsibilities(params, x, mu)
    s = jnp.einsum("nk,nkd->kd", alpha, x[:, None] - mpc.predict(params, mu)[None])
    J = jax.vmap(jax.jacobian(lambda v: mpc.predict(params, v)))(mu)  # (K, d, m)
    transposed = -jnp.einsum("kdm,kd->km", J, s)
    untransposed = -jnp.einsum("kdm,km->kd", J, s)
    auto = jax.grad(mpc.energy, argnums=2)(params, x, mu)
    np.testing.assert_allclose(np.asarray(transposed), np.asarray(auto), rtol=1e-10, atol=0)
    assert np.max(np.abs(np.asarray(untransposed - auto))) > 1e-3 * np.max(np.abs(np.asarray(auto)))


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_params(seed):
    params, x, mu = _problem(seed)
    assert_gradient(lambda p: mpc.energy(p, x, mu), lambda p: mpc.grad_params(p, x, mu), params, n_coords=None)


@pytest.mark.parametrize("seed", SEEDS)
def test_lipschitz_bounds_hessian(seed):
    """The step-size bound L dominates the largest Hessian eigenvalue at random points."""
    params, x, _ = _problem(seed)
    L = float(mpc.mu_lipschitz(params, x))
    for j in range(5):
        mu = 3.0 * jax.random.normal(jax.random.key(100 + j), (3, 2))
        h = jax.hessian(lambda v: mpc.energy(params, x, v))(mu).reshape(6, 6)
        assert float(jnp.linalg.eigvalsh(h).max()) <= L


# --- dynamics -----------------------------------------------------------------


def _roundoff(trace):
    # Each energy is a sum of N terms, each exact to a few ulps; 1e-12 relative is far above that
    # and far below the guaranteed decrease away from a stationary point.
    return 1e-12 * (1.0 + float(jnp.max(jnp.abs(trace))))


@pytest.mark.parametrize("seed", SEEDS)
def test_inference_monotone_with_certified_step(seed):
    params, x, mu = _problem(seed)
    res = mpc.infer(params, x, mu, n_steps=300)
    L = float(mpc.mu_lipschitz(params, x))
    np.testing.assert_allclose(float(res.step_size), 1.0 / L, rtol=1e-14)
    assert res.energy.shape == (301,)
    assert float(jnp.max(jnp.diff(res.energy))) <= _roundoff(res.energy)
    assert float(res.energy[-1]) < float(res.energy[0])
    # The trace is the energy of the returned latents.
    np.testing.assert_allclose(float(res.energy[-1]), float(mpc.energy(params, x, res.mu)), rtol=1e-12)


def test_inference_step_matches_manual_step():
    params, x, mu = _problem(0)
    res = mpc.infer(params, x, mu, n_steps=1, step_size=1e-3)
    expected = mu - 1e-3 * mpc.grad_mu(params, x, mu)
    np.testing.assert_allclose(np.asarray(res.mu), np.asarray(expected), rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_fit_decreases_energy_and_inference_phases_monotone(seed):
    optax = pytest.importorskip("optax")
    params, x, mu = _problem(seed)
    fit = mpc.fit(params, x, mu, optimizer=optax.sgd(1e-3), n_steps=5, n_infer_steps=10, n_learn_steps=10)
    tr = fit.extras
    assert tr.infer_energy.shape == (5, 10) and tr.learn_energy.shape == (5, 10)
    assert fit.energies.shape == (6,) and fit.n_iter == 5 and fit.converged is None
    np.testing.assert_array_equal(fit.energies[1:], tr.learn_energy[:, -1])
    np.testing.assert_allclose(float(fit.energies[0]), float(mpc.energy(params, x, mu)), rtol=1e-12)
    assert float(fit.energies[-1]) < float(fit.energies[0])
    # Inference phases use the certified step 1/L(phi), so they never increase E.
    full = jnp.concatenate([tr.learn_energy[:-1, -1:], tr.infer_energy[1:]], axis=1)
    first = jnp.concatenate([fit.energies[:1], tr.infer_energy[0]])
    assert float(jnp.max(jnp.diff(first))) <= _roundoff(first)
    assert float(jnp.max(jnp.diff(full, axis=1))) <= _roundoff(full)
    np.testing.assert_allclose(float(fit.energies[-1]), float(mpc.energy(fit.params, x, tr.mu)), rtol=1e-12)


def test_fit_learning_step_matches_manual_sgd():
    optax = pytest.importorskip("optax")
    params, x, mu = _problem(1)
    fit = mpc.fit(params, x, mu, optimizer=optax.sgd(1e-2), n_steps=1, n_infer_steps=1, n_learn_steps=1, step_size=1e-3)
    mu1 = mu - 1e-3 * mpc.grad_mu(params, x, mu)
    g = mpc.grad_params(params, x, mu1)
    expected = jax.tree.map(lambda p, gp: p - 1e-2 * gp, params, g)
    np.testing.assert_allclose(np.asarray(fit.extras.mu), np.asarray(mu1), rtol=1e-13)
    for a, b in zip(fit.params, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13)


def test_same_key_same_result():
    t1 = mpc.init_params(1, 8, 2, key=jax.random.key(3), bias_scale=1.0)
    t2 = mpc.init_params(1, 8, 2, key=jax.random.key(3), bias_scale=1.0)
    t3 = mpc.init_params(1, 8, 2, key=jax.random.key(4), bias_scale=1.0)
    for a, b in zip(t1, t2):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(t1.W1), np.asarray(t3.W1))
    d1 = mpc.sample(t1, 3, 4, key=jax.random.key(5))
    d2 = mpc.sample(t2, 3, 4, key=jax.random.key(5))
    for a, b in zip(d1, d2):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    r1 = mpc.infer(t1, d1.x, d1.latent_centres, n_steps=5)
    r2 = mpc.infer(t2, d2.x, d2.latent_centres, n_steps=5)
    np.testing.assert_array_equal(np.asarray(r1.energy), np.asarray(r2.energy))


def test_sample_follows_teacher():
    teacher = mpc.init_params(2, 6, 3, key=jax.random.key(0))
    data = mpc.sample(teacher, 4, 5, key=jax.random.key(1), obs_noise=0.0, latent_noise=0.0)
    assert data.x.shape == (20, 3) and data.labels.shape == (20,)
    np.testing.assert_allclose(
        np.asarray(data.x), np.asarray(mpc.predict(teacher, data.latent_centres)[data.labels]), rtol=1e-14
    )


# --- validation -----------------------------------------------------------------


def test_validation_errors():
    params, x, mu = _problem(0)
    with pytest.raises(ValueError, match=r"x must have shape \(n, d"):
        mpc.grad_x(params, x[0], mu)
    with pytest.raises(ValueError, match="optimizer"):
        mpc.fit(params, x, mu, optimizer=None, n_steps=1, n_infer_steps=1, n_learn_steps=1)
    with pytest.raises(ValueError, match="hidden_dim"):
        mpc.init_params(1, 0, 2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="output_scale"):
        mpc.init_params(1, 3, 2, key=jax.random.key(0), output_scale=0.0)
    with pytest.raises(ValueError, match="num_clusters"):
        mpc.sample(params, 0, 3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="latent_centres must have num_clusters = 2 rows"):
        mpc.sample(params, 2, 3, key=jax.random.key(0), latent_centres=jnp.zeros((3, 2)))
    with pytest.raises(TypeError):
        mpc.init_params(1, 3, 2, jax.random.key(0))  # key is keyword-only


def test_fit_progress_bar_reaches_total_and_leaves_results_unchanged():
    optax = pytest.importorskip("optax")
    params, x, mu = _problem(1)
    kw = dict(optimizer=optax.sgd(1e-3), n_steps=6, n_infer_steps=3, n_learn_steps=2)
    a = mpc.fit(params, x, mu, **kw)
    b = mpc.fit(params, x, mu, progress=True, **kw)
    assert _progress.last == (6, 6) and _progress._bar is None
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="progress must be a bool"):
        mpc.fit(params, x, mu, progress="no", **kw)
