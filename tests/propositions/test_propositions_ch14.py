"""Chapter 14 (performance): the sufficient-statistics proposition checked on 100 random
Gaussian mixtures against independent computations (CONTRIBUTING, "Claims: the rules that
keep them true"):

* responsibilities from scipy's multivariate normal density (Bayes' rule);
* the direct M-step, written from its definition sum_i r_ik (x_i - mu_k')(x_i - mu_k')^T / N_k;
* the gradient in the means by jax.grad of an energy written here with jax.scipy.

Instances are drawn from numpy's default_rng with fixed seeds; everything is float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import jax.scipy.stats as jst
import numpy as np
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from lse_energy import gmm
from tests.support import mixed_error

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
SHAPES = [(40, 1, 2), (60, 3, 3)]  # (N, d, K): a few shapes, so that jitted code compiles a few times only


def _instance(rng):
    N, d, K = SHAPES[rng.integers(len(SHAPES))]
    offset = rng.normal(size=d) * rng.choice([0.0, 20.0])  # half the instances far from the origin
    x = offset + 2.0 * rng.normal(size=(N, d))
    weights = rng.dirichlet(np.ones(K))
    means = x[rng.choice(N, K, replace=False)] + 0.5 * rng.normal(size=(K, d))
    B = rng.normal(size=(K, d, d))
    cov = B @ np.swapaxes(B, 1, 2) / d + 0.3 * np.eye(d)
    return weights, means, cov, x


def _responsibilities(weights, means, cov, x):
    """r_ik by Bayes' rule with scipy's densities."""
    lp = np.stack([np.log(w) + multivariate_normal.logpdf(x, m, c) for w, m, c in zip(weights, means, cov)], 1)
    return np.exp(lp - logsumexp(lp, axis=1, keepdims=True))


def _direct_m_step(r, x):
    """The M-step from its definition (no expanded second moments)."""
    Nk = r.sum(0)
    mu = (r.T @ x) / Nk[:, None]
    cov = np.stack([(r[:, k, None] * (x - mu[k])).T @ (x - mu[k]) / Nk[k] for k in range(r.shape[1])])
    return Nk / x.shape[0], mu, cov


def _features(x):
    """f(x) = (1, x_1..x_d, x_a x_b for a <= b), written from the chapter."""
    d = x.shape[1]
    rows, cols = np.triu_indices(d)
    return np.concatenate([np.ones((x.shape[0], 1)), x, x[:, rows] * x[:, cols]], 1)


def _update_from_statistics(R, N, d):
    """The proposition: pi' = N_k/N, mu' = S_k/N_k, Sigma' = T_k/N_k - mu' mu'^T, from R = r^T f(X)."""
    Nk, S = R[:, 0], R[:, 1 : 1 + d]
    rows, cols = np.triu_indices(d)
    T = np.zeros((R.shape[0], d, d))
    T[:, rows, cols] = R[:, 1 + d :]
    T[:, cols, rows] = R[:, 1 + d :]
    mu = S / Nk[:, None]
    return Nk / N, mu, T / Nk[:, None, None] - mu[:, :, None] * mu[:, None, :]


def _grad_from_statistics(R, means, cov, d):
    """The proposition: dE/dmu_k = -P_k (S_k - N_k mu_k)."""
    Nk, S = R[:, 0], R[:, 1 : 1 + d]
    return -np.einsum("kab,kb->ka", np.linalg.inv(cov), S - Nk[:, None] * means)


def _energy(means, weights, cov, x):
    """E = -sum_i ln sum_k pi_k N(x_i | mu_k, Sigma_k), written with jax.scipy."""
    comps = jnp.stack(
        [jnp.log(weights[k]) + jst.multivariate_normal.logpdf(x, means[k], cov[k]) for k in range(weights.shape[0])], 1
    )
    return -jnp.sum(jsp.logsumexp(comps, axis=1))


grad_energy = jax.jit(jax.grad(_energy))
stats_then_m_step = jax.jit(lambda p, x, s: gmm.m_step(gmm.sufficient_statistics(p, x, s)[1], x.shape[0], s, 0.0))


def test_em_and_gradient_need_only_the_statistics():
    """ch14, prop-suff-stats, on 100 random mixtures: the update and the gradient computed from R = r^T f(X)
    equal the direct M-step and jax.grad of an independently written energy; the package's em_step and
    its sufficient_statistics + m_step at a random shift equal the direct M-step; and the update and gradient
    are unchanged (the new means shift by s) when x and mu are shifted together."""
    rng = np.random.default_rng(1401)
    worst = {"update": 0.0, "grad": 0.0, "em_step": 0.0, "shifted_stats": 0.0, "shift": 0.0}
    for _ in range(N_INSTANCES):
        weights, means, cov, x = _instance(rng)
        N, d = x.shape
        r = _responsibilities(weights, means, cov, x)
        direct = _direct_m_step(r, x)
        R = r.T @ _features(x)
        worst["update"] = max(
            worst["update"], *(mixed_error(a, b) for a, b in zip(_update_from_statistics(R, N, d), direct))
        )
        g_ref = np.asarray(grad_energy(jnp.asarray(means), jnp.asarray(weights), jnp.asarray(cov), jnp.asarray(x)))
        g = _grad_from_statistics(R, means, cov, d)
        worst["grad"] = max(worst["grad"], mixed_error(g, g_ref))
        params = gmm.Params(jnp.asarray(weights), jnp.asarray(means), jnp.asarray(cov))
        worst["em_step"] = max(
            worst["em_step"], *(mixed_error(a, b) for a, b in zip(gmm.em_step(params, jnp.asarray(x)), direct))
        )
        s = rng.normal(size=d) * 5.0
        pkg = stats_then_m_step(params, jnp.asarray(x), jnp.asarray(s))
        worst["shifted_stats"] = max(worst["shifted_stats"], *(mixed_error(a, b) for a, b in zip(pkg, direct)))
        # common shift: the statistics change, the update (up to mu' -> mu' - s) and the gradient do not
        xs, ms = x - s, means - s
        Rs = _responsibilities(weights, ms, cov, xs).T @ _features(xs)
        assert mixed_error(Rs[:, 1:], R[:, 1:]) > 1e-3  # S_k and T_k are not shift invariant
        pi_s, mu_s, cov_s = _update_from_statistics(Rs, N, d)
        worst["shift"] = max(
            worst["shift"],
            mixed_error(pi_s, direct[0]),
            mixed_error(mu_s + s, direct[1]),
            mixed_error(cov_s, direct[2]),
            mixed_error(_grad_from_statistics(Rs, ms, cov, d), g_ref),
        )
    assert max(worst.values()) < 1e-9, worst


def test_shift_invariance_needs_a_common_shift():
    """prop-suff-stats: shifting the data but not the means changes the gradient (by P_k N_k s) on every instance."""
    rng = np.random.default_rng(1402)
    for _ in range(N_INSTANCES):
        weights, means, cov, x = _instance(rng)
        d = x.shape[1]
        g = np.asarray(grad_energy(jnp.asarray(means), jnp.asarray(weights), jnp.asarray(cov), jnp.asarray(x)))
        s = rng.normal(size=d) * 5.0
        g_only_x = np.asarray(
            grad_energy(jnp.asarray(means), jnp.asarray(weights), jnp.asarray(cov), jnp.asarray(x - s))
        )
        assert mixed_error(g_only_x, g) > 1e-3


def test_similarity_is_linear_in_the_features():
    """The chapter's Energy section: sim(x, k) = ln pi_k + ln N(x | mu_k, Sigma_k) = f(x)^T A_{:k}, with A built
    from the chapter's formulas, against scipy's density on 100 random mixtures."""
    rng = np.random.default_rng(1403)
    worst = 0.0
    for _ in range(N_INSTANCES):
        weights, means, cov, x = _instance(rng)
        x = x - x.mean(0)  # the expansion is used on centred data (the chapter's shift)
        means = means - means.mean(0)
        K, d = means.shape
        P = np.linalg.inv(cov)
        rows, cols = np.triu_indices(d)
        A = np.empty((1 + d + rows.size, K))
        for k in range(K):
            A[0, k] = (
                np.log(weights[k]) - 0.5 * np.linalg.slogdet(2 * np.pi * cov[k])[1] - 0.5 * means[k] @ P[k] @ means[k]
            )
            A[1 : 1 + d, k] = P[k] @ means[k]
            A[1 + d :, k] = -(1 - 0.5 * (rows == cols)) * P[k][rows, cols]
        ref = np.stack([np.log(w) + multivariate_normal.logpdf(x, m, c) for w, m, c in zip(weights, means, cov)], 1)
        worst = max(worst, mixed_error(_features(x) @ A, ref))
    assert worst < 1e-10, worst
