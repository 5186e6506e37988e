"""Propositions of chapter 17 (vector embeddings), checked independently.

Each test checks one proposition on at least 100 random instances (float64, NumPy
generators with fixed seeds) against a computation that does not share the
package's formula: explicit exp / sum normalisation written here, complex-step
derivatives of those brute-force sums (exact to round-off, no autodiff), scipy's
numerical minimisers, and enumeration of every tuple of negative samples. Where
a proposition needs a condition, the test also shows it failing without it.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
from scipy.optimize import minimize, minimize_scalar

from lse_energy import core
from lse_energy import embedding as emb
from tests.support import complex_step

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
SHAPES = [(3, 2), (4, 3), (5, 2), (6, 4)]  # (n_vocab, dim)


def _instance(rng, n, d, zeros=False):
    U, V = 0.8 * rng.normal(size=(n, d)), 0.8 * rng.normal(size=(n, d))
    counts = rng.integers(0 if zeros else 1, 6, size=(n, n)).astype(float)
    return U, V, counts


def softmax_loss_brute(U, V, counts):
    """sum_{c,o} N_co [-ln (exp s_co / sum_w exp s_cw)], normalised explicitly (complex-safe)."""
    S = U @ V.T
    P = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    return -np.sum(counts * np.log(P))


def energy_brute(U, V, counts):
    S = U @ V.T
    return -np.sum(counts.sum(axis=1) * np.log(np.exp(S).sum(axis=1)))


grad_softmax_loss, grad_energy = jax.jit(emb.grad_softmax_loss_params), jax.jit(emb.grad_params)
grad_ns = jax.jit(emb.grad_negative_sampling_loss_params, static_argnums=3)


def _instances(seed):
    """N_INSTANCES random (U, V, counts with zeros) over SHAPES."""
    rng = np.random.default_rng(seed)
    for i in range(N_INSTANCES):
        yield _instance(rng, *SHAPES[i % len(SHAPES)], zeros=True)


def _assert_complex_step(grad, brute, U, V, N):
    """The package's gradient in (U, V) equals complex-step derivatives of the brute-force sum."""
    g = grad(emb.Params(jnp.asarray(U), jnp.asarray(V)), jnp.asarray(N))
    np.testing.assert_allclose(np.asarray(g.U), complex_step(brute, (U, V, N), 0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(g.V), complex_step(brute, (U, V, N), 1), rtol=1e-10, atol=1e-12)


def test_softmax_loss_gradient_form():
    """dL/dU_c = sum_w (N_c p_cw - N_cw) V_w, dL/dV_w = sum_c (N_c p_cw - N_cw) U_c; and L = -sum N s - E."""
    for U, V, N in _instances(170):
        _assert_complex_step(grad_softmax_loss, softmax_loss_brute, U, V, N)
        # the sign: L = -sum N_co s_co - E with E the book's (descended) LSE energy
        np.testing.assert_allclose(
            softmax_loss_brute(U, V, N), -np.sum(N * (U @ V.T)) - energy_brute(U, V, N), rtol=1e-12
        )


def test_energy_gradient_is_softmax_weighted():
    """dE/dU_c = -N_c sum_w p_cw V_w: eq. (4)'s softmax-weighted sum of sim-gradients dsim/dU_c = V_w."""
    for U, V, N in _instances(171):
        _assert_complex_step(grad_energy, energy_brute, U, V, N)


def test_softmax_optimum_is_empirical_conditional():
    """Over unconstrained scores S, L_sm is minimised where softmax_w(s_cw) = N_cw / N_c, with value
    -sum N_co ln(N_co/N_c); without positive counts the infimum is not attained at any finite S."""
    rng = np.random.default_rng(172)
    for i in range(N_INSTANCES):
        n = 3 + i % 3
        N = rng.integers(1, 8, size=(n, n)).astype(float)
        res = minimize(
            lambda s, n=n, N=N: softmax_loss_brute(np.eye(n), s.reshape(n, n).T, N),
            np.zeros(n * n),
            method="BFGS",
            options={"gtol": 1e-10},
        )
        S = res.x.reshape(n, n)
        P = np.exp(S) / np.exp(S).sum(1, keepdims=True)
        np.testing.assert_allclose(P, N / N.sum(1, keepdims=True), atol=1e-6)
        bound = -np.sum(N * np.log(N / N.sum(1, keepdims=True)))
        np.testing.assert_allclose(res.fun, bound, rtol=1e-9)
        # the package's gradient vanishes at the closed-form optimum S* = ln(N/N_c) (U = I, V = S*^T)
        Sstar = np.log(N / N.sum(1, keepdims=True))
        g = grad_softmax_loss(emb.Params(jnp.eye(n), jnp.asarray(Sstar.T)), jnp.asarray(N))
        assert np.max(np.abs(np.asarray(g.V))) < 1e-12
        if i < 10:  # without the condition: one zero count -> loss > bound at every finite S
            N0 = N.copy()
            N0[0, 1] = 0.0
            bound0 = -np.sum(N0[N0 > 0] * np.log((N0 / N0.sum(1, keepdims=True))[N0 > 0]))
            for scale in (1.0, 10.0, 30.0):
                S0 = np.log(np.where(N0 > 0, N0, np.exp(-scale)))
                assert softmax_loss_brute(np.eye(n), S0.T, N0) > bound0
            g0 = grad_softmax_loss(emb.Params(jnp.eye(n), jnp.asarray(S0.T)), jnp.asarray(N0))
            assert np.asarray(g0.V)[1, 0] > 0  # still pushing s_01 down: no stationary point


def _ns_cell(x, n_co, n_c, q_o, k):
    return n_co * np.log1p(np.exp(-x)) + k * n_c * q_o * np.log1p(np.exp(x))


def test_negative_sampling_optimum_is_shifted_pmi():
    """Levy & Goldberg (2014): over unconstrained scores, L_ns is minimised at s_co = ln(N_co / (k N_c q_o)),
    = PMI(c, o) - ln k when q is the unigram of contexts; needs N_co > 0, and the PMI form needs unigram q."""
    rng = np.random.default_rng(173)
    for i in range(N_INSTANCES):
        n, k = 3 + i % 3, 1 + i % 5
        N = rng.integers(1, 9, size=(n, n)).astype(float)
        q1 = np.asarray(emb.noise_distribution(jnp.asarray(N), power=1.0))
        Nc = N.sum(1)
        X = np.array(
            [
                [
                    minimize_scalar(_ns_cell, args=(N[c, o], Nc[c], q1[o], k), bracket=(-5, 5), tol=1e-12).x
                    for o in range(n)
                ]
                for c in range(n)
            ]
        )
        with np.errstate(divide="ignore"):
            pmi_np = np.log(N * N.sum() / np.outer(Nc, N.sum(0)))
        np.testing.assert_allclose(X, pmi_np - np.log(k), atol=1e-5)
        np.testing.assert_allclose(np.asarray(emb.pmi(jnp.asarray(N))) - np.log(k), X, atol=1e-5)
        # the package's analytic gradient vanishes there (U = I, V = S*^T)
        g = grad_ns(emb.Params(jnp.eye(n), jnp.asarray((pmi_np - np.log(k)).T)), jnp.asarray(N), jnp.asarray(q1), k)
        assert np.max(np.abs(np.asarray(g.V))) < 1e-12
        if i < 20:  # without unigram noise (word2vec's 3/4 power) the optimum is not PMI - ln k
            q34 = np.asarray(emb.noise_distribution(jnp.asarray(N), power=0.75))
            X34 = np.log(N / (k * Nc[:, None] * q34[None, :]))
            g34 = grad_ns(emb.Params(jnp.eye(n), jnp.asarray(X34.T)), jnp.asarray(N), jnp.asarray(q34), k)
            assert np.max(np.abs(np.asarray(g34.V))) < 1e-12
            if not np.allclose(q34, q1, atol=1e-9):
                assert np.max(np.abs(X34 - (pmi_np - np.log(k)))) > 1e-6
        if i < 10:  # without N_co > 0: positive, falls towards its infimum 0 as s_co -> -inf, never reaches it
            xs = (-1.0, -10.0, -30.0)
            vals = [_ns_cell(x, 0.0, Nc[0], q1[0], k) for x in xs]
            assert vals[0] > vals[1] > vals[2] > 0
            assert vals[2] < 1e-12 * k * Nc[0] * q1[0]  # softplus(-30) ~ 1e-13: the infimum is 0
            # the package's L_ns with N_01 = 0 and every other score at its optimum: above the infimum (the
            # other cells' minima, summed by scalar minimisation) by that cell's term, with a gradient > 0
            N0 = N.copy()
            N0[0, 1] = 0.0
            q0 = np.asarray(emb.noise_distribution(jnp.asarray(N0), power=1.0))
            Nc0 = N0.sum(1)
            cells = [(c, o) for c in range(n) for o in range(n) if (c, o) != (0, 1)]
            inf = sum(
                minimize_scalar(_ns_cell, args=(N0[c, o], Nc0[c], q0[o], k), bracket=(-5, 5), tol=1e-12).fun
                for c, o in cells
            )
            with np.errstate(divide="ignore"):
                S0 = np.log(N0 / (k * Nc0[:, None] * q0[None, :]))
            above = []
            for x in xs:
                S0[0, 1] = x
                p0 = emb.Params(jnp.eye(n), jnp.asarray(S0.T))
                above.append(float(emb.negative_sampling_loss(p0, jnp.asarray(N0), jnp.asarray(q0), k)) - inf)
                assert float(grad_ns(p0, jnp.asarray(N0), jnp.asarray(q0), k).V[1, 0]) > 0  # still pushing down
            np.testing.assert_allclose(above, [_ns_cell(x, 0.0, Nc0[0], q0[1], k) for x in xs], atol=1e-9)
            assert above[0] > above[1] > 1e-9


def test_negative_sampling_is_expected_sampled_loss():
    """L_ns(counts, q, k) = E over k i.i.d. negatives n_ij ~ q of the sampled loss, summed over all pairs
    (enumerating every tuple of negatives)."""
    rng = np.random.default_rng(174)
    for i in range(N_INSTANCES):
        n, k = (3, 1 + i % 2) if i % 2 else (4, 1)
        d = 2
        U, V = rng.normal(size=(n, d)), rng.normal(size=(n, d))
        N = rng.integers(0, 3, size=(n, n)).astype(float)
        N[0, 0] += 1
        q = rng.random(n) + 0.05
        q /= q.sum()
        params = emb.Params(jnp.asarray(U), jnp.asarray(V))
        cs, os = np.nonzero(N)
        expected = 0.0
        for c, o in zip(cs, os):
            for neg in itertools.product(range(n), repeat=k):
                weight = np.prod(q[list(neg)])
                loss = np.log1p(np.exp(-U[c] @ V[o])) + sum(np.log1p(np.exp(U[c] @ V[j])) for j in neg)
                expected += N[c, o] * weight * loss
        got = emb.negative_sampling_loss(params, jnp.asarray(N), jnp.asarray(q), k)
        np.testing.assert_allclose(float(got), expected, rtol=1e-11)
        if i < 5:  # the sampled loss on one draw agrees with the loop (not with the expectation)
            neg = rng.integers(0, n, size=(len(cs), k))
            one = emb.sampled_negative_sampling_loss(params, jnp.asarray(cs), jnp.asarray(os), jnp.asarray(neg))
            ref = sum(
                np.log1p(np.exp(-U[c] @ V[o])) + sum(np.log1p(np.exp(U[c] @ V[j])) for j in row)
                for c, o, row in zip(cs, os, neg)
            )
            np.testing.assert_allclose(float(one), ref, rtol=1e-12)


def test_softplus_is_two_term_lse():
    """softplus(x) = ln(e^0 + e^x) (a two-term LSE) and its derivative sigma(x) is that LSE's softmax weight."""
    rng = np.random.default_rng(175)
    mpmath.mp.dps = 40
    xs = np.concatenate([rng.normal(scale=5.0, size=N_INSTANCES), [-40.0, 40.0]])
    lse2 = np.asarray(core.logsumexp(jnp.stack([jnp.zeros_like(xs), jnp.asarray(xs)], -1)[:, None, :]))[:, 0]
    w2 = np.asarray(core.weights(jnp.stack([jnp.zeros_like(xs), jnp.asarray(xs)], -1)[:, None, :]))[:, 0, 1]
    for x, a, w in zip(xs, lse2, w2):
        ref = mpmath.log(1 + mpmath.exp(mpmath.mpf(float(x))))
        assert abs(a - float(ref)) <= 1e-14 * max(1.0, float(ref))
        assert abs(w - float(1 / (1 + mpmath.exp(-mpmath.mpf(float(x)))))) < 1e-15


def test_nce_correction_recovers_self_normalised_softmax():
    """NCE: shifting every score by -ln(k q_w) inside the negative-sampling loss moves its optimum from
    ln(N_co/(k N_c q_o)) to ln(N_co/N_c) = ln p(o|c): the full softmax's optimum with log-partition 0."""
    rng = np.random.default_rng(176)
    for i in range(N_INSTANCES):
        n, k = 3 + i % 3, 1 + i % 4
        N = rng.integers(1, 9, size=(n, n)).astype(float)
        q = rng.random(n) + 0.05
        q /= q.sum()
        Nc = N.sum(1)
        shift = np.log(k * q)  # NCE's correction: the score enters as s - ln(k q_o)
        X = np.array(
            [
                [
                    minimize_scalar(
                        lambda x, a=N[c, o], b=Nc[c], qo=q[o], sh=shift[o], kk=k: _ns_cell(x - sh, a, b, qo, kk),
                        bracket=(-5, 5),
                        tol=1e-12,
                    ).x
                    for o in range(n)
                ]
                for c in range(n)
            ]
        )
        np.testing.assert_allclose(X, np.log(N / Nc[:, None]), atol=1e-5)
        lse = np.log(np.exp(X).sum(1))
        assert np.max(np.abs(lse)) < 1e-4  # self-normalised: the log-partition is 0 at the optimum
