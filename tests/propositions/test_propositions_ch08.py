"""Propositions of chapter 08 (attention as structural inference), checked independently.

Each test checks one proposition on at least 100 random instances (float64, values drawn
from NumPy generators with fixed seeds) against a computation that does not share the
package's formula: brute-force enumeration of every edge structure, complex-step
derivatives of a free energy written here in NumPy, and stationary points found by
scipy's BFGS. Where a proposition needs a condition, the test also shows it failing
without it. Sizes come from a few fixed shapes and the package's functions are called
through ``jax.jit`` (the same code, compiled once per shape); values are fresh for every
instance.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
from scipy.optimize import minimize

from lse_energy import attention as A
from lse_energy import structural
from tests.support import complex_step

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100

# the package's functions under test, jitted once per shape
attention_weights = jax.jit(lambda q, k, bias: A.attention_weights(q, k, beta=1.0, bias=bias))
attend = jax.jit(lambda q, k, v, bias: A.attend(q, k, v, beta=1.0, bias=bias))
cccp_step = jax.jit(structural.cccp_step, static_argnames="prior")
structural_energy = jax.jit(structural.energy, static_argnames="prior")


def softmax_np(z):
    e = np.exp(z - z.max())
    return e / e.sum()


# ---------------------------------------------------------------------------
# prop-si-expectation
# ---------------------------------------------------------------------------


def _enumerate(f, coupling=None):
    """Normalised p(phi | x) proportional to exp(sum_i f[i, phi_i] (+ coupling[phi_0, phi_1]))
    over every phi in {0..n-1}^m, with f of shape (m, n)."""
    m, n = f.shape
    structures = list(itertools.product(range(n), repeat=m))
    logp = np.array(
        [
            sum(f[i, phi[i]] for i in range(m)) + (0.0 if coupling is None else coupling[phi[0], phi[1]])
            for phi in structures
        ]
    )
    p = np.exp(logp - logp.max())
    return structures, p / p.sum()


def test_attention_is_the_posterior_expectation_by_enumeration():
    """prop-si-expectation: on 100 random instances (1-3 queries, 1-4 keys, uniform or
    Dirichlet prior) the posterior over all n^m structures, enumerated, is the product of
    per-query softmaxes; its marginals are ``attention_weights``; E[sum_i v_i] for
    arbitrary value tables v_i(phi_i) is sum_i E_{phi_i}[v_i]; and for cross-attention
    (f_i = q_i.k_j + ln pi_ij, v_i = W_V x_j) it is ``attend(q, k, x W_V^T, beta=1,
    bias=ln pi)``, row i."""
    rng = np.random.default_rng(800)
    shapes = [(1, 4), (2, 3), (3, 4), (3, 2)]  # (queries m, keys n)
    worst = 0.0
    for k, (m, n) in zip(range(N_INSTANCES), itertools.cycle(shapes)):
        d, dv = 2, 3
        q, keys = rng.normal(size=(m, d)), rng.normal(size=(n, d))
        x = rng.normal(size=(n, 4))
        w_v = rng.normal(size=(dv, 4))
        prior = np.full((m, n), 1.0 / n) if k % 2 == 0 else rng.dirichlet(np.ones(n), size=m)
        f = q @ keys.T + np.log(prior)  # f_i(phi_i = j)
        structures, post = _enumerate(f)
        product = np.array([np.prod([softmax_np(f[i])[phi[i]] for i in range(m)]) for phi in structures])
        worst = max(worst, np.max(np.abs(post - product)))
        marginal = np.zeros((m, n))
        tables = rng.normal(size=(m, n, dv))  # arbitrary v_i(phi_i)
        expect_tables = np.zeros(dv)
        expect_attention = np.zeros((m, dv))
        values = x @ w_v.T  # v_i(phi_i = j) = W_V x_j
        for p_phi, phi in zip(post, structures):
            for i in range(m):
                marginal[i, phi[i]] += p_phi
                expect_attention[i] += p_phi * values[phi[i]]
            expect_tables += p_phi * sum(tables[i, phi[i]] for i in range(m))
        sum_of_marginals = sum(softmax_np(f[i]) @ tables[i] for i in range(m))
        weights = np.asarray(attention_weights(q, keys, np.log(prior)))
        attended = np.asarray(attend(q, keys, values, np.log(prior)))
        worst = max(
            worst,
            np.max(np.abs(weights - marginal)),
            np.max(np.abs(attended - expect_attention)),
            np.max(np.abs(expect_tables - sum_of_marginals)),
        )
    assert worst < 1e-12, worst


def test_posterior_does_not_factorise_without_a_factorised_joint():
    """prop-si-expectation, the condition: add a coupling g(phi_1, phi_2) between two
    queries' edges (the joint no longer a product over queries) and the enumerated
    marginals leave the per-query softmax on every one of 100 instances. The potentials are
    f = q k^T, and the package's ``attention.attention_weights`` (beta = 1) is the per-query
    softmax: it equals the enumerated marginal without the coupling and leaves it with it."""
    rng = np.random.default_rng(801)
    gaps, gaps_pkg, worst_uncoupled = [], [], 0.0
    for _ in range(N_INSTANCES):
        m, n = 2 + int(rng.integers(0, 2)), 2 + int(rng.integers(0, 3))
        q, k = rng.normal(size=(m, 2)), rng.normal(size=(n, 2))
        f = q @ k.T
        g = rng.normal(size=(n, n))
        structures, post = _enumerate(f, g)
        marginal0 = np.zeros(n)
        for p_phi, phi in zip(post, structures):
            marginal0[phi[0]] += p_phi
        gaps.append(np.max(np.abs(marginal0 - softmax_np(f[0]))))
        pkg = np.asarray(attention_weights(q, k, None))[0]
        gaps_pkg.append(np.max(np.abs(marginal0 - pkg)))
        structures, post = _enumerate(f)  # the same potentials without the coupling
        uncoupled0 = np.zeros(n)
        for p_phi, phi in zip(post, structures):
            uncoupled0[phi[0]] += p_phi
        worst_uncoupled = max(worst_uncoupled, np.max(np.abs(uncoupled0 - pkg)))
    assert min(gaps) > 1e-6, min(gaps)
    assert worst_uncoupled < 1e-12 and min(gaps_pkg) > 1e-6, (worst_uncoupled, min(gaps_pkg))


# ---------------------------------------------------------------------------
# prop-si-cccp
# ---------------------------------------------------------------------------


def free_energy_np(mu, x, w, prior):
    """F = |mu|^2 / 2 - sum_factors ln sum_edges exp(mu_i . W x_j), by explicit loops."""
    wx = [w @ xj for xj in x]
    if prior == "hopfield":  # factor = latent i, edges = observations j
        factors = [[mu[i] @ wx[j] for j in range(len(x))] for i in range(len(mu))]
    else:  # factor = observation j, edges = latents i
        factors = [[mu[i] @ wx[j] for i in range(len(mu))] for j in range(len(x))]
    total = 0.5 * np.sum(mu * mu)
    for psi in factors:
        psi = np.array(psi)
        top = psi.real.max()
        total -= top + np.log(np.sum(np.exp(psi - top)))
    return total


def cccp_np(mu, x, w, prior):
    """Eq. (8): mu*_i = sum_factors sum_edges softmax_edges(psi) d psi_e / d mu_i, by loops."""
    out = np.zeros_like(mu)
    wx = [w @ xj for xj in x]
    if prior == "hopfield":
        for i in range(len(mu)):
            a = softmax_np(np.array([mu[i] @ wx[j] for j in range(len(x))]))
            out[i] = sum(a[j] * wx[j] for j in range(len(x)))
    else:
        for j in range(len(x)):
            a = softmax_np(np.array([mu[i] @ wx[j] for i in range(len(mu))]))
            for i in range(len(mu)):
                out[i] += a[i] * wx[j]
    return out


SHAPES = [(3, 5, 2, 3), (1, 4, 3, 2), (4, 2, 2, 2), (2, 7, 4, 3)]  # (m latents, n obs, d_mu, d_x)


def _instances(seed):
    rng = np.random.default_rng(seed)
    for k, (m, n, dmu, dx) in zip(range(N_INSTANCES), itertools.cycle(SHAPES)):
        prior = ("hopfield", "slot")[k % 2]
        mu = rng.normal(size=(m, dmu)) * rng.uniform(0.1, 5)
        x = rng.normal(size=(n, dx))
        w = rng.normal(size=(dmu, dx)) * rng.uniform(0.1, 3)
        yield rng, prior, mu, x, w


def test_cccp_step_descends_by_half_the_squared_move():
    """prop-si-cccp: on 100 random instances (both priors) eq. (8), written as loops over
    factors and edges, equals ``structural.cccp_step``; F (written here) falls by at least
    |mu* - mu|^2 / 2 at each of 5 steps; and grad F = mu - mu* by complex steps, so the
    decrease is positive wherever grad F != 0."""
    for _, prior, mu, x, w in _instances(802):
        for _ in range(5):
            new = cccp_np(mu, x, w, prior)
            pkg = np.asarray(cccp_step(mu, x, w, prior=prior))
            assert np.linalg.norm(pkg - new) <= 1e-12 * max(1.0, np.linalg.norm(new))
            grad = complex_step(free_energy_np, (mu, x, w, prior), 0)
            assert np.linalg.norm(grad - (mu - new)) <= 1e-10 * max(1.0, np.linalg.norm(grad))
            f0, f1 = free_energy_np(mu, x, w, prior), free_energy_np(new, x, w, prior)
            assert f0 - f1 >= 0.5 * np.sum((new - mu) ** 2) - 1e-12 * max(1.0, abs(f0))
            mu = new


def _flat_free_energy(flat, shape, x, w, prior):
    return free_energy_np(flat.reshape(shape), x, w, prior)


def _flat_gradient(flat, shape, x, w, prior):
    return complex_step(free_energy_np, (flat.reshape(shape), x, w, prior), 0).ravel()


def test_cccp_fixed_points_are_the_stationary_points():
    """prop-si-cccp, equality case: at a stationary point of F found by scipy's BFGS
    (complex-step gradient, from a random start; |grad F| < 1e-6), eq. (8) moves it by
    at most twice the optimiser's residual gradient and F does not change; one step away from it (a random
    perturbation) the step lowers F strictly. Each check is made twice, with eq. (8) and F
    written here and with the package's ``structural.cccp_step`` and ``structural.energy``."""
    for rng, prior, mu, x, w in _instances(803):
        shape = mu.shape

        extra = (shape, x, w, prior)
        res = minimize(
            _flat_free_energy,
            mu.ravel(),
            args=extra,
            jac=_flat_gradient,
            method="BFGS",
            options={"gtol": 1e-10, "maxiter": 2000},
        )
        star = res.x.reshape(shape)
        residual = np.linalg.norm(_flat_gradient(res.x, *extra))
        assert residual < 1e-6
        moved = star + 0.1 * rng.normal(size=shape)
        numpy_ = (lambda v: cccp_np(v, x, w, prior), lambda v: free_energy_np(v, x, w, prior))
        package = (
            lambda v: np.asarray(cccp_step(v, x, w, prior=prior)),
            lambda v: float(structural_energy(v, x, w, prior=prior)),
        )
        for update, free_energy in (numpy_, package):
            step = update(star)
            assert np.linalg.norm(step - star) <= 2 * residual + 1e-12
            assert abs(free_energy(step) - res.fun) < 1e-10 * max(1.0, abs(res.fun))
            after = update(moved)
            f_moved = free_energy(moved)
            drop, bound = f_moved - free_energy(after), 0.5 * np.sum((after - moved) ** 2)
            assert drop >= bound - 1e-12 * max(1.0, abs(f_moved)) and bound > 1e-8


def _gaussian_free_energy(z, gamma, y):
    psi = -0.5 * gamma * np.sum((z - y) ** 2, axis=1)
    return 0.5 * z @ z - (psi.max() + np.log(np.sum(np.exp(psi - psi.max()))))


def test_cccp_update_can_rise_when_the_potentials_are_not_linear_in_mu():
    """prop-si-cccp, the condition: with Gaussian edge potentials psi_j = -gamma |mu - y_j|^2 / 2
    (not linear in mu, so -ln sum exp psi is not concave) the same update
    mu* = sum_j softmax_j(psi) d psi_j / d mu raises F = |mu|^2 / 2 - ln sum_j exp psi_j
    on most of 100 random instances (gamma in [1.5, 3]).

    The package on the same instances: the Gaussian update is ``attention.attend`` with
    q = mu, keys gamma y_j, values gamma (y_j - mu) and log-prior -gamma |y_j|^2 / 2 (the
    softmax of psi up to its constant -gamma |mu|^2 / 2), equal to the NumPy update; with the
    potentials linear in mu (psi_j = mu . gamma y_j, W = gamma I, one latent) the package's
    ``structural.cccp_step`` is the same update written in NumPy and never raises
    ``structural.energy``, so the rise comes from the condition."""
    rng = np.random.default_rng(804)
    rises, worst_attend, worst_linear, worst_rise_linear = 0, 0.0, 0.0, -np.inf
    for _ in range(N_INSTANCES):
        gamma = rng.uniform(1.5, 3.0)
        y = rng.normal(size=(5, 2))
        mu = rng.normal(size=2) * 2

        psi = -0.5 * gamma * np.sum((mu - y) ** 2, axis=1)
        new = softmax_np(psi) @ (gamma * (y - mu))
        rises += _gaussian_free_energy(new, gamma, y) > _gaussian_free_energy(mu, gamma, y)
        bias = -0.5 * gamma * np.sum(y**2, axis=1)[None]
        pkg = np.asarray(attend(mu[None], gamma * y, gamma * (y - mu), bias))[0]
        worst_attend = max(worst_attend, np.max(np.abs(pkg - new)) / max(1.0, np.max(np.abs(new))))
        # linear potentials: eq. (8) by NumPy, the package's step and energy
        w = gamma * np.eye(2)
        lin = softmax_np(gamma * y @ mu) @ (gamma * y)
        pkg_lin = np.asarray(cccp_step(mu[None], y, w, prior="hopfield"))[0]
        worst_linear = max(worst_linear, np.max(np.abs(pkg_lin - lin)) / max(1.0, np.max(np.abs(lin))))
        f0 = float(structural_energy(mu[None], y, w, prior="hopfield"))
        f1 = float(structural_energy(pkg_lin[None], y, w, prior="hopfield"))
        worst_rise_linear = max(worst_rise_linear, (f1 - f0) / max(1.0, abs(f0)))
    assert rises >= N_INSTANCES // 2, rises
    assert worst_attend < 1e-12 and worst_linear < 1e-12, (worst_attend, worst_linear)
    assert worst_rise_linear <= 1e-12, worst_rise_linear
