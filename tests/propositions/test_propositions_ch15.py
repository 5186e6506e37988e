"""Propositions of chapter 15 (GRU and minGRU), checked independently.

Each test checks one proposition on at least 100 random instances (float64, NumPy
generators with fixed seeds) against a computation that does not share the package's
formula: step-by-step NumPy loops, mpmath at 50 digits (direct products, no logarithms
of sums), and ``jax.jacobian`` of the plain (linear-space) recurrence. Where a
proposition needs a condition, the test also shows it failing without it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np

from lse_energy import gru

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
mpmath.mp.dps = 50

scan_parallel, scan_log, scan_log_signed = (
    jax.jit(gru.scan_parallel),
    jax.jit(gru.scan_log),
    jax.jit(gru.scan_log_signed),
)


def np_scan(a, b, h0):
    h, out = np.array(h0, float), []
    for an, bn in zip(a, b):
        h = an * h + bn
        out.append(h)
    return np.array(out)


def test_affine_composition_is_associative_and_scan_is_sequential():
    """Proposition 15.1: composition of affine maps is associative; the prefix scan gives h_n."""
    rng = np.random.default_rng(151)
    for i in range(N_INSTANCES):
        m = [(rng.uniform(0, 1, 3), rng.normal(size=3)) for _ in range(3)]
        left = gru.combine(gru.combine(m[0], m[1]), m[2])
        right = gru.combine(m[0], gru.combine(m[1], m[2]))
        np.testing.assert_allclose(left, right, rtol=1e-13, atol=1e-15)
        h = rng.normal(size=3)  # the composed map applied to h = the three maps applied in turn
        np.testing.assert_allclose(
            left[0] * h + left[1],
            m[2][0] * (m[1][0] * (m[0][0] * h + m[0][1]) + m[1][1]) + m[2][1],
            rtol=1e-12,
            atol=1e-14,
        )
        N = [1, 2, 7, 33][i % 4]
        a, b, h0 = rng.uniform(0, 1, (N, 2)), rng.normal(size=(N, 2)), rng.normal(size=2)
        ref = np_scan(a, b, h0)
        np.testing.assert_allclose(scan_parallel(a, b, h0), ref, rtol=1e-12, atol=1e-14 * np.max(np.abs(ref)))
    # the order matters: composing in the reverse order is a different map (not commutative)
    m1, m2 = (np.array(0.5), np.array(1.0)), (np.array(0.25), np.array(-2.0))
    assert not np.allclose(gru.combine(m1, m2), gru.combine(m2, m1))


def _mp_direct(a, b, h0):
    """ln h_n for every n by direct products and sums in mpmath (no log-sum-exp)."""
    out = []
    for n in range(1, len(a) + 1):
        total = mpmath.mpf(h0) * mpmath.fprod(mpmath.mpf(x) for x in a[:n])
        for k in range(n):
            total += mpmath.mpf(b[k]) * mpmath.fprod(mpmath.mpf(x) for x in a[k + 1 : n])
        out.append(total)
    return out


def test_log_space_scan_identity():
    """Proposition 15.2: ln h_n = LSE_k (ln b_k + sum_{j>k} ln a_j) for positive terms; needs b, h0 >= 0."""
    rng = np.random.default_rng(152)
    for i in range(N_INSTANCES):
        N = [1, 3, 8, 20][i % 4]
        # a spans tiny decays (products far below float64's range) to near 1
        a = np.exp(-rng.uniform(0, 80, N)) if i % 2 else rng.uniform(0.01, 1.0, N)
        b, h0 = rng.uniform(0.01, 2, N), rng.uniform(0, 2)
        got = np.asarray(scan_log(np.log(a), np.log(b), np.log(h0)))
        ref = _mp_direct(a, b, h0)
        for g, r in zip(got, ref):
            assert abs(g - float(mpmath.log(r))) <= 1e-13 * max(1.0, abs(float(mpmath.log(r))))
    # without the condition (a negative term) the logarithm of the terms does not exist ...
    a, b, h0 = np.array([0.5, 0.5]), np.array([1.0, -3.0]), 1.0
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.log(b)).any()
    assert float(_mp_direct(a, b, h0)[1]) < 0  # ... and h_2 = 0.25 + 0.5 - 3 < 0 has no real log
    # the sign split restores it for real terms: h = h+ - h-, each a positive log-space scan
    for i in range(N_INSTANCES):
        N = 1 + i % 17
        a, b, h0 = rng.uniform(0.01, 1, (N, 2)), rng.normal(size=(N, 2)), rng.normal(size=2)
        ref = np.array([[float(v) for v in _mp_direct(a[:, j], b[:, j], h0[j])] for j in range(2)]).T
        got = np.asarray(scan_log_signed(np.log(a), b, h0))
        assert np.max(np.abs(got - ref)) <= 1e-13 * np.max(np.abs(ref))


def test_sigmoid_is_two_way_softmax():
    """Proposition 15.3: sigma(a) = softmax([a, 0])_0 and ln sigma(a) = a - LSE(a, 0)."""
    rng = np.random.default_rng(153)
    a = np.concatenate([rng.normal(scale=5, size=N_INSTANCES), [-700.0, -40.0, 0.0, 40.0, 700.0]])
    sig, logsig = np.asarray(gru.sigmoid(a)), np.asarray(gru.log_sigmoid(a))
    for x, s, ls in zip(a, sig, logsig):
        ea = mpmath.exp(mpmath.mpf(x))
        p_first = ea / (ea + mpmath.exp(0))  # two states with scores a and 0
        assert abs(s - float(p_first)) <= 1e-15 * float(p_first)
        assert abs(ls - float(mpmath.log(p_first))) <= 1e-15 * max(1.0, abs(float(mpmath.log(p_first))))
        # the other state's probability is 1 - sigma(a) = sigma(-a)
        assert abs(float(gru.sigmoid(-x)) - float(1 / (ea + 1))) <= 1e-15 * float(1 / (ea + 1))


def test_log_scan_gradient_is_softmax():
    """Proposition 15.4: d ln h_n / d ln b_k = w_nk (a softmax over k <= n), d / d ln a_j = sum_{k<j} w_nk."""
    rng = np.random.default_rng(154)

    def log_states(la, lb, lh0):  # linear-space recurrence, then log: no LSE anywhere
        def step(h, ab):
            h = jnp.exp(ab[0]) * h + jnp.exp(ab[1])
            return h, h

        return jnp.log(jax.lax.scan(step, jnp.exp(lh0), (la, lb))[1])

    jac = jax.jit(jax.jacobian(log_states, argnums=(0, 1, 2)))
    grad = jax.jit(gru.grad_scan_log)
    for i in range(N_INSTANCES):
        N = [1, 2, 5, 11][i % 4]
        la, lb, lh0 = rng.normal(size=(N, 1)) - 0.5, rng.normal(size=(N, 1)), rng.normal(size=1)
        lam = rng.normal(size=(N, 1))
        Ja, Jb, Jh = (np.asarray(J) for J in jac(la, lb, lh0))
        ref = (np.einsum("ni,nimj->mj", lam, Ja), np.einsum("ni,nimj->mj", lam, Jb), np.einsum("ni,nij->j", lam, Jh))
        for g, r in zip(grad(la, lb, lh0, lam), ref):
            np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-13)
        # the weights w_n. form a distribution over k = 0..n: unit cotangent at n gives sum_k w_nk = 1
        n = N - 1
        e = np.zeros((N, 1))
        e[n] = 1.0
        _, gb, gh = grad(la, lb, lh0, e)
        np.testing.assert_allclose(float(np.sum(gb)) + float(gh[0]), 1.0, rtol=1e-13)
        assert np.all(np.asarray(gb) >= 0) and float(gh[0]) >= 0
