"""Tests for lse_energy.slds: switching linear dynamics (§7, Appendix B of Tschantz 2025)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.stats import multivariate_normal

from lse_energy import _progress, core, slds
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, relative_error


def random_params(seed, K=3, d=2):
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(K) * 2.0)
    A = 0.9 * rng.normal(size=(K, d, d)) / np.sqrt(d)
    b = rng.normal(size=(K, d))
    M = rng.normal(size=(K, d, d))
    S = np.einsum("kij,klj->kil", M, M) / d + 0.3 * np.eye(d)
    return slds.Params(*(jnp.asarray(v) for v in (w, A, b, S)))


def random_x(seed, T=9, d=2):
    return jnp.asarray(np.random.default_rng(100 + seed).normal(size=(T, d)))


def rot(theta):
    return np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])


def three_modes(noise=0.05):
    """Three contracting rotations (different speeds) about three centres."""
    thetas, rhos = [0.08, 0.3, -0.2], [0.97, 0.9, 0.95]
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    A = np.stack([r * rot(t) for r, t in zip(rhos, thetas)])
    b = np.stack([(np.eye(2) - A[k]) @ centres[k] for k in range(3)])
    S = np.stack([noise**2 * np.eye(2)] * 3)
    return slds.Params(jnp.full(3, 1 / 3), jnp.asarray(A), jnp.asarray(b), jnp.asarray(S))


# ---------------------------------------------------------------------------
# Energy
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_is_negative_log_likelihood(seed):
    """Normalised eq. (17) = -sum_t ln sum_k pi_k N(x_{t+1}; A_k x_t + b_k, Sigma_k) (scipy oracle)."""
    p, x = random_params(seed), random_x(seed)
    P = [np.asarray(v) for v in p]
    X = np.asarray(x)
    ll = 0.0
    for t in range(X.shape[0] - 1):
        ll += np.log(
            sum(P[0][k] * multivariate_normal(P[1][k] @ X[t] + P[2][k], P[3][k]).pdf(X[t + 1]) for k in range(3))
        )
    np.testing.assert_allclose(float(slds.energy(p, x)), -ll, rtol=1e-12)
    np.testing.assert_allclose(float(slds.energy(p, x)), float(core.energy(slds.sim(p, x))), rtol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_normaliser_free_energy_has_no_minimum_in_covariance(seed):
    """Seed form: sim <= ln pi_k, so E >= 0, and E decreases to 0 as Sigma -> infinity."""
    p, x = random_params(seed), random_x(seed)
    scales = [1.0, 10.0, 100.0, 1e4, 1e8]
    es = [float(slds.energy(p._replace(covariances=s * p.covariances), x, normalised=False)) for s in scales]
    assert all(e >= 0 for e in es)
    assert all(a > b for a, b in zip(es, es[1:]))
    assert es[-1] < 1e-6 * es[0]
    # With the normaliser the same blow-up is penalised: the energy eventually grows.
    en = [float(slds.energy(p._replace(covariances=s * p.covariances), x)) for s in scales]
    assert en[-1] > en[-2]


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_grad_trajectory(seed, normalised):
    p, x = random_params(seed), random_x(seed)
    assert_gradient(
        lambda v: slds.energy(p, v, normalised=normalised),
        lambda v: slds.grad_x(p, v, normalised=normalised),
        x,
    )


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_grad_next_and_prev_per_transition(seed, normalised):
    """Term t alone is the energy of the two-step trajectory (x_t, x_{t+1})."""
    p, x = random_params(seed), random_x(seed)
    for t in range(x.shape[0] - 1):
        pair = x[t : t + 2]
        assert_gradient(
            lambda v: slds.energy(p, v, normalised=normalised),
            lambda v: jnp.stack(
                [slds.grad_prev(p, v, normalised=normalised)[0], slds.grad_next(p, v, normalised=normalised)[0]]
            ),
            pair,
        )
    # and the trajectory gradient is their sum (eq. 4: child + parent)
    gn, gp = slds.grad_next(p, x, normalised=normalised), slds.grad_prev(p, x, normalised=normalised)
    total = jnp.zeros_like(x).at[1:].add(gn).at[:-1].add(gp)
    np.testing.assert_allclose(total, slds.grad_x(p, x, normalised=normalised), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_grad_A_and_b(seed, normalised):
    p, x = random_params(seed), random_x(seed)
    assert_gradient(
        lambda A: slds.energy(p._replace(A=A), x, normalised=normalised),
        lambda A: slds.grad_A(p._replace(A=A), x, normalised=normalised),
        p.A,
    )
    assert_gradient(
        lambda b: slds.energy(p._replace(b=b), x, normalised=normalised),
        lambda b: slds.grad_b(p._replace(b=b), x, normalised=normalised),
        p.b,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_state_gradients_have_wrong_sign(seed):
    """§7 prints -dE/dx_{t+1} = +sum alpha Sigma^{-1} r and -dE/dx_t = -sum alpha A^T Sigma^{-1} r."""
    p, x = random_params(seed), random_x(seed, T=2)
    alpha = slds.responsibilities(p, x)[0]
    r = slds.residuals(p, x)[0]
    u = jnp.linalg.solve(p.covariances, r[..., None])[..., 0]
    seed_next = jnp.einsum("k,ki->i", alpha, u)  # printed -dE/dx_{t+1}
    seed_prev = jnp.einsum("k,kji,kj->i", alpha, -p.A, u)  # printed -dE/dx_t
    true_neg = -jax.grad(lambda v: slds.energy(p, v))(x)  # true -dE/dx
    np.testing.assert_allclose(relative_error(seed_next, true_neg[1]), 2.0, rtol=1e-10)
    np.testing.assert_allclose(relative_error(seed_prev, true_neg[0]), 2.0, rtol=1e-10)
    np.testing.assert_allclose(seed_next, -true_neg[1], rtol=1e-10)
    np.testing.assert_allclose(seed_prev, -true_neg[0], rtol=1e-10)


# ---------------------------------------------------------------------------
# Cross-check: AR-HMM forward algorithm with every transition row equal to pi
# ---------------------------------------------------------------------------


def _gauss_pdf(y, mean, cov):
    diff = y - mean
    sol = np.linalg.solve(cov, diff)
    return np.exp(-0.5 * diff @ sol) / np.sqrt(np.linalg.det(2 * np.pi * cov))


def arhmm_loglik(x, pi0, trans, A, b, S):
    """Scaled forward algorithm for an autoregressive HMM, conditioned on x_1.

    z_1 ~ pi0, z_{t+1} | z_t ~ trans[z_t], x_{t+1} | x_t, z_t ~ N(A_z x_t + b_z, S_z).
    """
    T, K = x.shape[0], len(pi0)
    ll = 0.0
    pred = np.asarray(pi0, float)
    for t in range(T - 1):
        em = np.array([_gauss_pdf(x[t + 1], A[k] @ x[t] + b[k], S[k]) for k in range(K)])
        a = pred * em
        c = a.sum()
        ll += np.log(c)
        pred = (a / c) @ trans
    return ll


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_arhmm_with_iid_transitions(seed):
    p = random_params(seed)
    x, _ = slds.sample(p, jnp.zeros(2), 30, key=jax.random.key(seed))
    P = [np.asarray(v) for v in p]
    X = np.asarray(x)
    trans = np.tile(P[0], (3, 1))
    ll = arhmm_loglik(X, P[0], trans, P[1], P[2], P[3])
    np.testing.assert_allclose(-float(slds.energy(p, x)), ll, rtol=1e-10)
    # the oracle is sensitive to the transition matrix: a sticky chain gives another value
    sticky = 0.9 * np.eye(3) + 0.1 * trans
    assert abs(arhmm_loglik(X, P[0], sticky, P[1], P[2], P[3]) - ll) > 1e-3


# ---------------------------------------------------------------------------
# M-step and EM
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_m_step_is_weighted_least_squares(seed):
    p = random_params(seed)
    x, _ = slds.sample(p, jnp.zeros(2), 40, key=jax.random.key(seed))
    resp = jax.random.dirichlet(jax.random.key(seed + 7), jnp.ones(3), (40,))
    new = slds.m_step(x, resp)
    X = np.asarray(x)
    Z = np.concatenate([X[:-1], np.ones((40, 1))], axis=1)
    for k in range(3):
        sw = np.sqrt(np.asarray(resp[:, k]))[:, None]
        W, *_ = np.linalg.lstsq(sw * Z, sw * X[1:], rcond=None)  # (d+1, d)
        np.testing.assert_allclose(new.A[k], W[:2].T, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(new.b[k], W[2], rtol=1e-9, atol=1e-12)
        R = X[1:] - Z @ W
        cov = (np.asarray(resp[:, k])[:, None, None] * np.einsum("ti,tj->tij", R, R)).sum(0) / float(resp[:, k].sum())
        np.testing.assert_allclose(new.covariances[k], cov, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(new.weights, resp.sum(0) / 40, rtol=1e-12)

    # stationarity of the expected energy: dQ/dA = dQ/db = 0 at the M-step
    def Q(A, b):
        q = new._replace(A=A, b=b)
        s = slds.sim(q, x) - jnp.log(q.weights)
        return -jnp.sum(resp * s)

    gA, gb = jax.grad(Q, argnums=(0, 1))(new.A, new.b)
    assert float(jnp.max(jnp.abs(gA))) < 1e-8 and float(jnp.max(jnp.abs(gb))) < 1e-8


@pytest.mark.parametrize("reg_covar", [0.0, 1e-3])
@pytest.mark.parametrize("seed", SEEDS)
def test_em_never_increases_objective(seed, reg_covar):
    p = random_params(seed)
    x, _ = slds.sample(p, jnp.zeros(2), 200, key=jax.random.key(seed))
    fit = slds.fit(x, 3, key=jax.random.key(seed), max_iter=60, tol=0.0, n_init=2, reg_covar=reg_covar)
    tr = np.asarray(fit.energies)
    assert np.all(np.isfinite(tr)) and len(tr) > 2
    assert np.all(np.diff(tr) <= 1e-12 * np.abs(tr[1:]))
    assert tr[-1] < tr[0]
    np.testing.assert_allclose(tr[-1], float(slds.objective(fit.params, x, reg_covar=reg_covar)), rtol=1e-12)
    # the same through the public em_step, from an independent start
    q = slds.init_params(x, 3, key=jax.random.key(seed + 1), reg_covar=reg_covar)
    prev = float(slds.objective(q, x, reg_covar=reg_covar))
    for _ in range(15):
        q = slds.em_step(q, x, reg_covar=reg_covar)
        cur = float(slds.objective(q, x, reg_covar=reg_covar))
        assert cur <= prev + 1e-12 * abs(prev)
        prev = cur


def test_same_key_same_fit_and_sample():
    p = three_modes()
    x, _ = slds.sample(p, jnp.array([2.0, 0.5]), 150, key=jax.random.key(3))
    x2, _ = slds.sample(p, jnp.array([2.0, 0.5]), 150, key=jax.random.key(3))
    np.testing.assert_array_equal(x, x2)
    a = slds.fit(x, 3, key=jax.random.key(5), n_init=3)
    b = slds.fit(x, 3, key=jax.random.key(5), n_init=3)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(u, v)


def _accuracy(z, zhat, K):
    C = np.zeros((K, K))
    np.add.at(C, (np.asarray(z), np.asarray(zhat)), 1)
    r, c = linear_sum_assignment(-C)
    # brute force over all permutations agrees with the Hungarian assignment
    brute = max(sum(C[i, perm[i]] for i in range(K)) for perm in itertools.permutations(range(K)))
    assert C[r, c].sum() == brute
    return C[r, c].sum() / len(z)


def test_recovers_modes_from_iid_switching():
    p = three_modes()
    x, z = slds.sample(p, jnp.array([2.0, 0.5]), 400, key=jax.random.key(0))
    # the Bayes classifier with the true parameters, as the ceiling
    oracle = _accuracy(z, slds.predict(p, x), 3)
    fit = slds.fit(x, 3, key=jax.random.key(1))
    acc = _accuracy(z, slds.predict(fit.params, x), 3)
    assert oracle >= 0.95
    assert acc >= 0.95


# ---------------------------------------------------------------------------
# Imputation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_impute_descends_to_stationary_point(seed):
    p = three_modes()
    x, _ = slds.sample(p, jnp.array([2.0, 0.5]), 60, key=jax.random.key(seed))
    for missing in ([20], [20, 21, 22], [0], [60]):
        start = x.at[jnp.asarray(missing)].set(0.0)
        filled, es = slds.impute(p, start, missing, n_steps=400)
        es = np.asarray(es)
        assert np.all(np.diff(es) <= 1e-12 * np.abs(es[1:]))
        g = slds.grad_x(p, filled)[jnp.asarray(missing)]
        assert float(jnp.max(jnp.abs(g))) < 1e-6 * float(jnp.max(jnp.abs(slds.grad_x(p, start))))
        # observed states untouched
        keep = np.setdiff1d(np.arange(61), missing)
        np.testing.assert_array_equal(filled[keep], start[keep])


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def test_validation_errors():
    p, x = random_params(0), random_x(0)
    with pytest.raises(ValueError, match="params must be slds\\.Params"):
        slds.energy(tuple(p), x)
    with pytest.raises(ValueError, match="max_iter"):
        slds.fit(x, 2, key=jax.random.key(0), max_iter=0)
    with pytest.raises(ValueError, match="n_init"):
        slds.fit(x, 2, key=jax.random.key(0), n_init=0)
    with pytest.raises(ValueError, match="step_size"):
        slds.impute(p, x, [3], step_size=0.0)


def test_fit_progress_bar_stops_at_convergence_and_leaves_results_unchanged():
    p = random_params(0)
    x, _ = slds.sample(p, jnp.zeros(2), 120, key=jax.random.key(0))
    a = slds.fit(x, 3, key=jax.random.key(1), n_init=2, max_iter=300)
    b = slds.fit(x, 3, key=jax.random.key(1), n_init=2, max_iter=300, progress=True)
    steps, total = _progress.last
    assert total == 300 and _progress._bar is None
    # the bar stops at the last restart's convergence, at least as far as the chosen restart ran
    assert len(a.energies) - 1 <= steps <= 300
    np.testing.assert_allclose(np.asarray(b.energies), np.asarray(a.energies), rtol=1e-10)
    for u, v in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="progress must be a bool"):
        slds.fit(x, 3, key=jax.random.key(1), progress=None)
