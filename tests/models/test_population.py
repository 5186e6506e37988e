"""Tests of lse_energy.population (NEF population coding, transformations, dynamics, Bayesian decoding).

Oracles: numpy.linalg.lstsq on the augmented least-squares system and scikit-learn's Ridge
(alpha = M sigma^2, no intercept) for the decoders; scipy.integrate.solve_ivp of the ideal
linear ODE for the recurrent dynamics, with an a-posteriori error bound built from the
simulation's own decoding errors; scipy.stats.poisson pmf products normalised over the grid
for the Bayesian decoder; jax.grad and finite differences for the analytic gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.special import logsumexp
from scipy.stats import poisson
from sklearn.linear_model import Ridge

from lse_energy import lif, population
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def _population(d, n, seed):
    return population.init_params(d, n, key=jax.random.PRNGKey(seed))


def _grid_2d(m):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(m, 2))
    return jnp.asarray(x / np.maximum(1, np.linalg.norm(x, axis=1, keepdims=True)) * rng.uniform(0, 1, (m, 1)) ** 0.5)


@pytest.mark.parametrize("seed", SEEDS)
def test_decoders_match_lstsq_and_ridge(seed):
    params = _population(2, 40, seed)
    x = _grid_2d(150)
    h = population.activities(params, x, lif.rate)
    m, n = h.shape
    sigma = 0.1 * float(jnp.max(h))
    d = np.asarray(population.decoders(h, x, sigma))
    # lstsq on [H; sqrt(M) sigma I] D = [X; 0]
    aug = np.vstack([np.asarray(h), np.sqrt(m) * sigma * np.eye(n)])
    rhs = np.vstack([np.asarray(x), np.zeros((n, 2))])
    np.testing.assert_allclose(d, np.linalg.lstsq(aug, rhs, rcond=None)[0], rtol=1e-8, atol=1e-12)
    ridge = Ridge(alpha=m * sigma**2, fit_intercept=False, solver="cholesky").fit(np.asarray(h), np.asarray(x))
    np.testing.assert_allclose(d, ridge.coef_.T, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_decoding_loss_gradient_and_stationarity(seed):
    params = _population(1, 20, seed)
    x = jnp.linspace(-1, 1, 60)
    h = population.activities(params, x, lif.rate) / 100.0
    sigma = 0.05
    d0 = jax.random.normal(jax.random.PRNGKey(seed + 10), (20,))
    assert_gradient(
        lambda d: population.decoding_loss(d, h, x, sigma),
        lambda d: population.grad_decoding_loss_decoders(d, h, x, sigma),
        d0,
    )
    d_star = population.decoders(h, x, sigma)
    assert float(jnp.max(jnp.abs(population.grad_decoding_loss_decoders(d_star, h, x, sigma)))) < 1e-12


def test_transformation_through_weights_equals_decode_then_encode_and_tracks_square():
    pre, post = _population(1, 100, 0), _population(1, 100, 1)
    x = jnp.linspace(-1, 1, 201)
    h_pre = population.activities(pre, x, lif.rate)
    sigma = 0.05 * float(jnp.max(h_pre))
    d_sq = population.decoders(h_pre, x**2, sigma)
    w = population.connection_weights(d_sq, post)
    assert w.shape == (100, 100) and np.linalg.matrix_rank(np.asarray(w)) == 1
    h_post = population.feedforward(h_pre, w, post, lif.rate)
    y_hat_pre = population.decode(h_pre, d_sq)
    np.testing.assert_allclose(h_post, population.activities(post, y_hat_pre, lif.rate), rtol=1e-12, atol=1e-9)
    # B decodes its own input; the end-to-end error is at most the sum of the two stages' errors
    h_post_grid = population.activities(post, x, lif.rate)
    d_id = population.decoders(h_post_grid, x, 0.05 * float(jnp.max(h_post_grid)))
    y_hat = population.decode(h_post, d_id)
    rmse = float(jnp.sqrt(jnp.mean((y_hat - x**2) ** 2)))
    stage_a = float(jnp.sqrt(jnp.mean((y_hat_pre - x**2) ** 2)))
    stage_b = float(jnp.sqrt(jnp.mean((y_hat - y_hat_pre) ** 2)))
    assert rmse <= stage_a + stage_b + 1e-12


def test_noisy_decoding_mse_matches_distortion_plus_noise_term():
    """E||(H + eps) D - T||^2 / M = ||HD - T||^2 / M + sigma^2 ||D||^2; Monte Carlo within 4 standard errors."""
    params = _population(1, 50, 3)
    x = jnp.linspace(-1, 1, 100)
    h = np.asarray(population.activities(params, x, lif.rate))
    sigma = 0.1 * h.max()
    d = np.asarray(population.decoders(jnp.asarray(h), x**2, sigma))
    t = np.asarray(x) ** 2
    predicted = np.mean((h @ d - t) ** 2) + sigma**2 * np.sum(d**2)
    rng = np.random.default_rng(0)
    per_draw = np.array([np.mean(((h + sigma * rng.normal(size=h.shape)) @ d - t) ** 2) for _ in range(400)])
    assert abs(per_draw.mean() - predicted) < 4 * per_draw.std(ddof=1) / np.sqrt(len(per_draw))


def _simulate_and_bound(a, b, u_fn, y0, n, seed, t_end=1.0, dt=1e-3, tau=0.1):
    """Population trajectory, reference solution and the bound b_{k+1} = rho b_k + dt/tau |delta_k| + |l_k|."""
    d = a.shape[0]
    params = _population(d, n, seed)
    x = _grid_2d(400) if d == 2 else jnp.linspace(-1, 1, 201)[:, None]
    h = population.activities(params, x, lif.rate)
    dec = population.decoders(h, x, 0.1 * float(jnp.max(h)))
    a_p, b_p = population.nef_matrices(jnp.asarray(a), jnp.asarray(b), tau)
    n_steps = round(t_end / dt)
    t = np.arange(n_steps + 1) * dt
    u = np.stack([u_fn(tk) for tk in t[:-1]])
    traj = population.simulate(params, lif.rate, dec, a_p, b_p, jnp.asarray(u), jnp.asarray(y0), tau=tau, dt=dt)
    ref = solve_ivp(
        lambda tt, y: a @ y + b @ u_fn(tt), (0, t_end), y0, t_eval=t, rtol=1e-11, atol=1e-13, method="DOP853"
    ).y.T
    delta = (np.asarray(traj.decoded) - np.asarray(traj.y)) @ np.asarray(a_p).T
    local = ref[1:] - ref[:-1] - dt * (ref[:-1] @ a.T + u @ b.T)
    rho = np.linalg.norm(np.eye(d) + dt * a, 2)
    bound = np.zeros(n_steps + 1)
    for k in range(n_steps):
        bound[k + 1] = rho * bound[k] + dt / tau * np.linalg.norm(delta[k]) + np.linalg.norm(local[k]) + 1e-9
    err = np.linalg.norm(np.asarray(traj.y) - ref, axis=1)
    return err, bound


@pytest.mark.parametrize("seed", SEEDS)
def test_integrator_against_solve_ivp(seed):
    w = 2 * np.pi
    err, bound = _simulate_and_bound(
        np.zeros((1, 1)), np.ones((1, 1)), lambda t: np.array([0.7 * w * np.cos(w * t)]), np.zeros(1), 100, seed
    )
    assert np.all(err <= bound)
    assert err.max() < 0.1  # and the bound's own size: dt/tau * T * max|delta| with |delta| ~ 1e-2


@pytest.mark.parametrize("seed", SEEDS)
def test_oscillator_against_solve_ivp(seed):
    w = 2 * np.pi
    a = w * np.array([[0.0, -1.0], [1.0, 0.0]])
    err, bound = _simulate_and_bound(a, np.zeros((2, 1)), lambda t: np.zeros(1), np.array([0.7, 0.0]), 300, seed)
    assert np.all(err <= bound)


def test_simulate_with_membrane_time_constant_approaches_adiabatic_limit():
    params = _population(1, 50, 0)
    x = jnp.linspace(-1, 1, 101)[:, None]
    h = population.activities(params, x, lif.rate)
    dec = population.decoders(h, x, 0.1 * float(jnp.max(h)))
    a_p, b_p = population.nef_matrices(jnp.zeros((1, 1)), jnp.ones((1, 1)), 0.1)
    u = jnp.ones((500, 1))
    y0 = jnp.zeros(1)
    base = population.simulate(params, lif.rate, dec, a_p, b_p, u, y0, tau=0.1, dt=1e-4)
    gaps = [
        float(
            jnp.max(
                jnp.abs(
                    population.simulate(params, lif.rate, dec, a_p, b_p, u, y0, tau=0.1, dt=1e-4, tau_m=tm).y - base.y
                )
            )
        )
        for tm in (1e-2, 1e-3, 1e-4)
    ]
    assert gaps[0] > gaps[1] > gaps[2]


def _bayes_instance(seed, n=8, g=15, m=5):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.2, 6.0, (g, n))
    counts = rng.poisson(f[rng.integers(g, size=m)]).astype(float)
    return jnp.asarray(counts), jnp.asarray(f)


@pytest.mark.parametrize("seed", SEEDS)
def test_bayes_posterior_and_evidence_against_poisson_pmf(seed):
    counts, f = _bayes_instance(seed)
    n, fn = np.asarray(counts), np.asarray(f)
    joint = np.array([[np.prod(poisson.pmf(n[m], fn[j])) for j in range(fn.shape[0])] for m in range(n.shape[0])])
    np.testing.assert_allclose(population.posterior(counts, f), joint / joint.sum(1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(float(population.log_evidence(counts, f)), np.sum(np.log(joint.mean(1))), rtol=1e-12)
    log_joint = np.array([[np.sum(poisson.logpmf(n[m], fn[j])) for j in range(fn.shape[0])] for m in range(len(n))])
    e = -np.sum(logsumexp(log_joint, axis=1)) - np.sum([np.sum(np.log(np.arange(1, k + 1))) for k in n.ravel()])
    np.testing.assert_allclose(float(population.energy(counts, f)), e, rtol=1e-12)
    grid = jnp.linspace(-1, 1, f.shape[0])
    np.testing.assert_allclose(
        population.bayes_decode(counts, f, grid), (joint / joint.sum(1, keepdims=True)) @ np.asarray(grid), rtol=1e-10
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_bayes_energy_gradient(seed):
    counts, f = _bayes_instance(seed)
    assert_gradient(lambda n: population.energy(n, f), lambda n: population.grad_counts(n, f), counts + 0.3)


def test_simulate_float32():
    p = population.init_params(1, 10, key=jax.random.PRNGKey(0), dtype=jnp.float32)
    out = population.simulate(
        p,
        lif.rate,
        jnp.ones((10, 1), jnp.float32) * 1e-3,
        jnp.eye(1, dtype=jnp.float32),
        jnp.eye(1, dtype=jnp.float32),
        jnp.ones((5, 1), jnp.float32),
        jnp.zeros(1, jnp.float32),
        tau=0.1,
        dt=0.01,
    )
    assert out.y.dtype == jnp.float32 and out.decoded.dtype == jnp.float32


def _ridge_problem(seed, m=30):
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(m, m)))
    nu = 1.0 / np.arange(1, m + 1) ** 2
    return rng, u, nu, (u * nu) @ u.T, np.linspace(-1.0, 1.0, m)


@pytest.mark.parametrize("seed", range(5))
def test_ridge_plugin_is_exact_when_the_gram_matrix_equals_its_mean(seed):
    """With K = H H^T / N exactly, the plug-in formulas of population_runs.ridge_equivalent are the
    distortion and decoder norm of the actual ridge decoder (sklearn Ridge, an independent solve)."""
    from lse_energy.experiments.population_runs import ridge_equivalent

    rng, _, _, _, x = _ridge_problem(seed)
    n, lam = 40 + 10 * seed, 0.3
    h = rng.normal(size=(len(x), n)) * rng.uniform(0.1, 2.0, size=n)
    d = Ridge(alpha=lam, fit_intercept=False, solver="svd").fit(h, x).coef_
    p = ridge_equivalent(h @ h.T / n, x, lam, [n])
    np.testing.assert_allclose(p["plugin_distortion"][0], np.sqrt(np.mean((h @ d - x) ** 2)), rtol=1e-9)
    np.testing.assert_allclose(p["plugin_noise"][0], np.linalg.norm(d), rtol=1e-9)


def test_ridge_deterministic_equivalent_matches_monte_carlo_for_gaussian_neurons():
    """Chapter 20's derived prediction: for N i.i.d. neurons h = K^(1/2) z, the deterministic
    equivalent of ridge_equivalent gives E[dist^2] and E[|D|^2] of the actual ridge decoder
    (1000 Monte Carlo draws, standard error 0.3%) to within 3%, its error being O(1/N) (measured
    about 1% at N = 60); the plug-in, which ignores the Gram matrix's fluctuation, misses both by
    more than 10%."""
    from lse_energy.experiments.population_runs import ridge_equivalent

    rng, u, nu, k, x = _ridge_problem(0)
    n, lam = 60, 0.5
    root = (u * np.sqrt(nu)) @ u.T
    d2, n2 = [], []
    for _ in range(1000):
        h = root @ rng.normal(size=(len(x), n))
        d = Ridge(alpha=lam, fit_intercept=False, solver="cholesky").fit(h, x).coef_
        d2.append(np.mean((h @ d - x) ** 2))
        n2.append(np.sum(d**2))
    p = ridge_equivalent(k, x, lam, [n])
    for mc, de, plug in (
        (np.mean(d2), p["distortion"][0] ** 2, p["plugin_distortion"][0] ** 2),
        (np.mean(n2), p["noise"][0] ** 2, p["plugin_noise"][0] ** 2),
    ):
        assert abs(mc - de) < 0.03 * de
        assert abs(mc - plug) > 0.1 * mc
