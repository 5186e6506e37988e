"""Propositions of chapter 20 (population coding, transformations, dynamics, LIF), checked independently.

Each test checks one proposition on at least 100 random instances (float64, NumPy generators
with fixed seeds) against a computation that does not share the package's formula: exact
enumeration over Rademacher noise, numpy.linalg.lstsq, scipy.integrate.solve_ivp (with
event detection for the LIF threshold), scipy.stats.poisson pmf products, complex-step
derivatives, and a plain-Python Euler loop. Where a proposition needs a condition, the test
also shows it failing without it.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp
from scipy.stats import poisson

from lse_energy import lif, population
from tests.support import complex_step

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
decoders = jax.jit(population.decoders)
posterior, energy, grad_energy = population.posterior, jax.jit(population.energy), jax.jit(population.grad_counts)


def test_noise_averaged_loss_is_ridge_objective():
    """E_eps ||(H + eps) D - T||_F^2 = ||HD - T||_F^2 + M sigma^2 ||D||_F^2 for independent zero-mean noise."""
    rng = np.random.default_rng(0)
    m, n, k = 3, 3, 2
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=m * n))).reshape(-1, m, n)
    failures = 0
    for _ in range(N_INSTANCES):
        h, d, t = rng.normal(size=(m, n)), rng.normal(size=(n, k)), rng.normal(size=(m, k))
        sigma = rng.uniform(0.1, 2.0)
        # Rademacher noise +-sigma: zero mean, independent entries of variance sigma^2; average over all 2^(MN)
        exact = np.mean([np.sum(((h + sigma * s) @ d - t) ** 2) for s in signs])
        formula = float(population.decoding_loss(jnp.asarray(d), jnp.asarray(h), jnp.asarray(t), sigma)) * 2 * m
        assert abs(exact - formula) <= 1e-10 * max(1.0, abs(exact))
        # without independence (one shared sign for the whole matrix) the identity fails
        shared = 0.5 * (np.sum(((h + sigma) @ d - t) ** 2) + np.sum(((h - sigma) @ d - t) ** 2))
        failures += abs(shared - formula) > 1e-6
    assert failures >= 0.95 * N_INSTANCES


def test_regularised_decoder_is_the_minimiser():
    """(H^T H + M sigma^2 I)^{-1} H^T T solves the augmented least-squares problem [H; sqrt(M) sigma I] D = [T; 0]."""
    rng = np.random.default_rng(1)
    for i in range(N_INSTANCES):
        m, n = (30, 8) if i % 2 else (12, 20)  # more neurons than samples too: then sigma > 0 is needed
        h, t = rng.uniform(0, 5, (m, n)), rng.normal(size=(m, 2))
        sigma = rng.uniform(0.05, 1.0)
        aug = np.vstack([h, math.sqrt(m) * sigma * np.eye(n)])
        ref = np.linalg.lstsq(aug, np.vstack([t, np.zeros((n, 2))]), rcond=None)[0]
        np.testing.assert_allclose(decoders(jnp.asarray(h), jnp.asarray(t), sigma), ref, rtol=1e-8, atol=1e-10)
    # the condition sigma > 0: with N > M the unregularised normal equations are singular
    h = rng.uniform(0, 5, (12, 20))
    assert np.linalg.matrix_rank(h.T @ h) < 20


def test_transformation_weights_factor_through_decoded_value():
    """H_A (D_f E_B) = (H_A D_f) E_B, a matrix of rank <= d_B: B sees only the decoded value."""
    rng = np.random.default_rng(2)
    for _ in range(N_INSTANCES):
        na, nb, db = [(5, 4, 1), (9, 7, 2)][_ % 2]
        d_f, h = rng.normal(size=(na, db)), rng.uniform(0, 3, (7, na))
        post = population.Params(jnp.asarray(rng.normal(size=(db, nb))), jnp.ones(nb), jnp.zeros(nb))
        w = np.asarray(population.connection_weights(jnp.asarray(d_f), post))
        decoded_then_encoded = np.einsum("mi,ik->mk", h, d_f) @ np.asarray(post.encoders)
        np.testing.assert_allclose(h @ w, decoded_then_encoded, rtol=1e-12, atol=1e-12)
        s = np.linalg.svd(w, compute_uv=False)
        assert np.sum(s > 1e-10 * s[0]) <= db


def _linear(t, y, a, b, tau, leak):
    """(-leak y + a y + b u(t)) / tau with u(t) = sin(3 t)."""
    return (-leak * y + a @ y + b @ np.array([np.sin(3 * t)])) / tau


def _hit(t, v, j, tau_rc):
    return v[0] - 1.0


_hit.terminal = True


def test_nef_mapping_turns_synaptic_filter_into_target_dynamics():
    """tau y' = -y + A' y + B' u with A' = tau A + I, B' = tau B has the trajectories of y' = A y + B u."""
    rng = np.random.default_rng(3)
    naive_fails = 0
    for _ in range(N_INSTANCES):
        d = rng.integers(1, 4)
        a, b = rng.normal(size=(d, d)), rng.normal(size=(d, 1))
        tau, y0 = rng.uniform(0.01, 0.5), rng.normal(size=d)
        a_p, b_p = (np.asarray(z) for z in population.nef_matrices(jnp.asarray(a), jnp.asarray(b), tau))
        opts = {"t_eval": np.linspace(0, 1, 11), "rtol": 1e-10, "atol": 1e-12}
        target = solve_ivp(_linear, (0, 1), y0, args=(a, b, 1.0, 0.0), **opts).y
        filtered = solve_ivp(_linear, (0, 1), y0, args=(a_p, b_p, tau, 1.0), **opts).y
        np.testing.assert_allclose(filtered, target, rtol=1e-6, atol=1e-7)
        naive = solve_ivp(_linear, (0, 1), y0, args=(a, b, tau, 1.0), **opts).y
        naive_fails += np.max(np.abs(naive - target)) > 1e-4
    assert naive_fails >= 0.95 * N_INSTANCES


SHAPES = [(2, 3, 1), (4, 6, 2), (6, 8, 3)]  # (N neurons, G grid points, M responses); values fresh every instance


def _instance(rng, i):
    n, g, m = SHAPES[i % len(SHAPES)]
    f = rng.uniform(0.1, 8.0, (g, n))
    counts = rng.poisson(f[rng.integers(g, size=m)]).astype(float)
    return counts, f


def test_posterior_is_softmax_of_poisson_similarity():
    """p(s_j | n) = softmax_j(n . ln F_j - sum F_j) under a uniform prior; E = -ln p(n) - sum ln n! - M ln G."""
    rng = np.random.default_rng(4)
    prior_fails = 0
    for i in range(N_INSTANCES):
        counts, f = _instance(rng, i)
        lik = np.array([[np.prod(poisson.pmf(c, fj)) for fj in f] for c in counts])
        np.testing.assert_allclose(
            posterior(jnp.asarray(counts), jnp.asarray(f)), lik / lik.sum(1, keepdims=True), rtol=1e-9, atol=1e-300
        )
        log_fact = sum(math.lgamma(c + 1) for c in counts.ravel())
        e = -np.sum(np.log(lik.mean(1))) - log_fact - len(counts) * math.log(len(f))
        assert abs(float(energy(jnp.asarray(counts), jnp.asarray(f))) - e) <= 1e-9 * max(1.0, abs(e))
        # the condition: with a non-uniform prior the plain softmax is not the posterior
        prior = rng.dirichlet(np.ones(len(f)))
        post = lik * prior / (lik * prior).sum(1, keepdims=True)
        prior_fails += np.max(np.abs(post - lik / lik.sum(1, keepdims=True))) > 1e-6
    assert prior_fails >= 0.9 * N_INSTANCES


def test_energy_gradient_is_posterior_weighted_log_rates():
    """dE/dn = -sum_j p(s_j | n) ln F_j, against complex-step derivatives of the LSE written in NumPy."""
    rng = np.random.default_rng(5)
    for i in range(N_INSTANCES):
        counts, f = _instance(rng, i)
        counts = counts + rng.uniform(0, 1, counts.shape)  # real-valued counts: the continuous relaxation

        def e(n, f=f):
            s = n @ np.log(f).T - f.sum(1)
            return -np.sum(np.log(np.sum(np.exp(s), axis=1)))

        ref = complex_step(e, (counts,), 0)
        np.testing.assert_allclose(grad_energy(jnp.asarray(counts), jnp.asarray(f)), ref, rtol=1e-9, atol=1e-12)


def test_lif_first_passage_and_rate():
    """For J > 1 the voltage from rest reaches 1 at t* = -tau_rc ln(1 - 1/J); below threshold never."""
    rng = np.random.default_rng(6)
    for i in range(N_INSTANCES):
        tau_rc, tau_ref = rng.uniform(0.005, 0.05), rng.uniform(0.0, 0.005)
        j = rng.uniform(1.02, 20.0) if i % 4 else rng.uniform(0.0, 1.0)
        sol = solve_ivp(
            lambda t, v, j, tau_rc: (j - v) / tau_rc,
            (0, 50 * tau_rc),
            [0.0],
            args=(j, tau_rc),
            events=_hit,
            rtol=1e-12,
            atol=1e-14,
        )
        r = float(lif.rate(jnp.asarray(j), tau_rc=tau_rc, tau_ref=tau_ref))
        if j > 1:
            t_star = sol.t_events[0][0]
            assert abs(r - 1 / (tau_ref + t_star)) <= 1e-7 * r
        else:
            assert len(sol.t_events[0]) == 0 and r == 0.0


def test_euler_interval_and_its_dt_bound():
    """The Euler ISI is (n_ref + k_E) dt, k_E = ceil(ln(1 - 1/J)/ln(1 - h)), within max(dt, t* h/(2(1-h))) of exact."""
    rng = np.random.default_rng(7)
    for _ in range(N_INSTANCES):
        tau_rc, dt = 0.02, float(rng.choice([1e-4, 2e-4, 5e-4]))
        tau_ref = dt * rng.integers(0, 30)
        j = rng.uniform(1.05, 15.0)
        v, k = 0.0, 0  # plain-Python Euler from rest
        while v < 1.0:
            v += dt / tau_rc * (j - v)
            k += 1
        isi_euler = (round(tau_ref / dt) + k) * dt
        r_e = float(lif.euler_rate(jnp.asarray(j), dt=dt, tau_rc=tau_rc, tau_ref=tau_ref))
        assert abs(r_e - 1 / isi_euler) <= 1e-9 * r_e
        h = dt / tau_rc
        t_star = -tau_rc * math.log1p(-1 / j)
        assert abs(isi_euler - (tau_ref + t_star)) <= max(dt, t_star * h / (2 * (1 - h))) + 1e-15
