"""Propositions of chapter 05 (attention), checked independently.

Each test checks one proposition on at least 100 random instances (float64, numpy
``default_rng`` with a fixed seed) against a computation that does not share the
package's formula: ``jax.grad`` of an energy written here from eqs. (6) and (15), explicit
loops over children and parents, and scipy's ``softmax``/``logsumexp``. Round-off is bounded
relative to the size of the terms summed (the same formula on absolute values), so a sum that
cancels does not loosen the tolerance. The proposition's proof in ``book/05_attention.ipynb``
names its test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from scipy import special

from lse_energy import attention as A
from tests.support import relative_error_l2

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
TOL = 1e-12  # float64, exact algebra


def _close(a, b, scale, tol=TOL):
    return float(np.linalg.norm(np.asarray(a, float) - np.asarray(b, float))) <= tol * float(scale)


def _softmax_rows(s, mask):
    """Row softmax in numpy, masked edges get weight 0."""
    s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _random_mask(rng, shape, kind):
    if kind == "none":
        return np.ones(shape, bool)
    if kind == "causal":
        return np.tril(np.ones(shape, bool))
    m = rng.random(shape) < 0.6
    m[np.arange(shape[0]), rng.integers(shape[1], size=shape[0])] = True  # no empty row
    return m


def _cross_energy_tokens(wq, wk, xq, xk, beta, mask):
    """Eq. (6) from its definition, on raw tokens: -sum_c log sum_{p allowed} exp(beta q_c.k_p)."""
    s = beta * (xq @ wq.T) @ (xk @ wk.T).T
    return -jnp.sum(logsumexp(jnp.where(mask, s, -jnp.inf), axis=1))


_cross_grads = jax.jit(jax.grad(_cross_energy_tokens, argnums=(0, 1, 2, 3)))
_cross_grads_qk = jax.jit(
    jax.grad(
        lambda q, k, beta, mask: -jnp.sum(logsumexp(jnp.where(mask, beta * q @ k.T, -jnp.inf), axis=1)), argnums=(0, 1)
    )
)


def test_cross_attention_gradients():
    """prop-att-cross-grad: -dE/dq_c = beta sum_p w_cp k_p, -dE/dk_p = beta sum_c w_cp q_c, and the
    chain rule through q = W^Q x^Q, k = W^K x^K (transposes, outer products).

    The right-hand sides are computed in numpy with explicit loops over c and p and compared
    with jax.grad of eq. (6) written here, with a temperature, with and without a mask, and
    with key tokens of their own width."""
    rng = np.random.default_rng(50)
    NQ, NK, DK, DIN, DINK = 4, 5, 3, 4, 2
    for j in range(N_INSTANCES):
        beta = rng.uniform(0.2, 2.0)
        wq, wk = rng.normal(size=(DK, DIN)), rng.normal(size=(DK, DINK))
        xq, xk = rng.normal(size=(NQ, DIN)), rng.normal(size=(NK, DINK))
        mask = _random_mask(rng, (NQ, NK), ["none", "random"][j % 2])
        q, k = xq @ wq.T, xk @ wk.T
        w = _softmax_rows(beta * q @ k.T, mask)
        mgq = np.zeros((NQ, DK))  # -dE/dq, explicit loop
        mgk = np.zeros((NK, DK))  # -dE/dk
        mag_q, mag_k = np.zeros(NQ), np.zeros(NK)  # the size of the terms summed
        for c in range(NQ):
            for p in range(NK):
                mgq[c] += beta * w[c, p] * k[p]
                mgk[p] += beta * w[c, p] * q[c]
                mag_q[c] += beta * w[c, p] * np.linalg.norm(k[p])
                mag_k[p] += beta * w[c, p] * np.linalg.norm(q[c])
        dq, dk = -mgq, -mgk
        auto_q, auto_k = _cross_grads_qk(q, k, beta, mask)
        assert _close(dq, auto_q, np.linalg.norm(mag_q)) and _close(dk, auto_k, np.linalg.norm(mag_k))
        g_wq, g_wk, g_xq, g_xk = _cross_grads(wq, wk, xq, xk, beta, mask)
        sq = np.linalg.norm(mag_q) * np.linalg.norm(wq, 2)
        sk = np.linalg.norm(mag_k) * np.linalg.norm(wk, 2)
        assert _close(dq @ wq, g_xq, sq) and _close(dk @ wk, g_xk, sk)  # dE/dx = W^T dE/dq, row-wise
        outer_q = sum(np.outer(dq[c], xq[c]) for c in range(NQ))
        outer_k = sum(np.outer(dk[p], xk[p]) for p in range(NK))
        assert _close(outer_q, g_wq, np.linalg.norm(mag_q) * np.linalg.norm(xq))
        assert _close(outer_k, g_wk, np.linalg.norm(mag_k) * np.linalg.norm(xk))
        # the package
        m_ = jnp.asarray(mask)
        assert _close(A.grad_q(q, k, beta=beta, mask=m_), auto_q, np.linalg.norm(mag_q))
        assert _close(A.grad_k(q, k, beta=beta, mask=m_), auto_k, np.linalg.norm(mag_k))
        params = A.Params(wq=jnp.asarray(wq), wk=jnp.asarray(wk))
        pxq, pxk = A.grad_tokens(params, xq, xk, beta=beta, mask=m_)
        assert _close(pxq, g_xq, sq) and _close(pxk, g_xk, sk)
        pw = A.grad_params(params, xq, xk, beta=beta, mask=m_)
        assert _close(pw.wq, g_wq, np.linalg.norm(mag_q) * np.linalg.norm(xq))
        assert _close(pw.wk, g_wk, np.linalg.norm(mag_k) * np.linalg.norm(xk))


def _self_energy(x, wq, wk, beta, mask):
    """Eq. (15) from its definition: every token is a child and a parent."""
    s = beta * (x @ wq.T) @ (x @ wk.T).T
    return -jnp.sum(logsumexp(jnp.where(mask, s, -jnp.inf), axis=1))


_self_grad_auto = jax.jit(jax.grad(_self_energy))


def test_self_attention_gradient():
    """prop-att-self-grad (eq. 16): -dE/dx_i = beta sum_p w_ip W^QT W^K x_p + beta sum_c w_ci W^KT W^Q x_c.

    Both terms by explicit loops in numpy, against jax.grad of eq. (15) written here, with no
    mask, a causal mask and random masks. The child term with the transposes swapped
    (W^KT W^Q x_p) fails on every instance."""
    rng = np.random.default_rng(51)
    N, DIN, DK = 5, 4, 3
    for j in range(N_INSTANCES):
        beta = rng.uniform(0.2, 2.0)
        wq, wk, x = rng.normal(size=(DK, DIN)), rng.normal(size=(DK, DIN)), rng.normal(size=(N, DIN))
        mask = _random_mask(rng, (N, N), ["none", "causal", "random"][j % 3])
        w = _softmax_rows(beta * (x @ wq.T) @ (x @ wk.T).T, mask)
        A_qk, A_kq = wq.T @ wk, wk.T @ wq
        child, parent, swapped = np.zeros((N, DIN)), np.zeros((N, DIN)), np.zeros((N, DIN))
        mag = np.zeros(N)
        for i in range(N):
            for p in range(N):
                child[i] += beta * w[i, p] * A_qk @ x[p]
                swapped[i] += beta * w[i, p] * A_kq @ x[p]
                mag[i] += beta * w[i, p] * np.linalg.norm(A_qk @ x[p])
            for c in range(N):
                parent[i] += beta * w[c, i] * A_kq @ x[c]
                mag[i] += beta * w[c, i] * np.linalg.norm(A_kq @ x[c])
        auto = np.asarray(_self_grad_auto(x, wq, wk, beta, mask))
        assert _close(-(child + parent), auto, np.linalg.norm(mag))
        got = A.grad_self(A.Params(wq=jnp.asarray(wq), wk=jnp.asarray(wk)), x, beta=beta, mask=jnp.asarray(mask))
        assert _close(got, auto, np.linalg.norm(mag))
        assert relative_error_l2(-(swapped + parent), auto) > 1e-3


def test_bias_is_log_prior():
    """prop-att-bias-prior: softmax_p(s + b) is Bayes' rule under pi = e^b / Z, and
    -sum_c ln sum_p e^{s+b} = -sum_c ln sum_p pi e^s - sum_c ln Z_c (so the gradients agree).

    Left-hand sides by scipy's softmax and logsumexp; right-hand sides by explicit loops
    (Bayes' rule with the normalised prior). Also the package's attention_weights,
    energy with a bias, edge_prior and prior_energy."""
    rng = np.random.default_rng(52)
    C, P, D = 4, 6, 3

    def prior_energy(q, k, beta, prior):  # -sum_c ln sum_p pi_cp exp(beta q_c.k_p), written out
        return -jnp.sum(jnp.log(jnp.sum(prior * jnp.exp(beta * q @ k.T), axis=1)))

    def bias_energy(q, k, beta, b):
        return -jnp.sum(logsumexp(beta * q @ k.T + b, axis=1))

    g_prior, g_bias = jax.jit(jax.grad(prior_energy)), jax.jit(jax.grad(bias_energy))
    for _ in range(N_INSTANCES):
        beta = rng.uniform(0.2, 2.0)
        q, k, b = rng.normal(size=(C, D)), rng.normal(size=(P, D)), 2.0 * rng.normal(size=(C, P))
        s = beta * q @ k.T
        post, e_rhs, log_z = np.zeros((C, P)), 0.0, 0.0
        for c in range(C):
            Z = sum(np.exp(b[c, p]) for p in range(P))
            pi = [np.exp(b[c, p]) / Z for p in range(P)]
            evidence = sum(pi[p] * np.exp(s[c, p]) for p in range(P))
            for p in range(P):
                post[c, p] = pi[p] * np.exp(s[c, p]) / evidence
            e_rhs -= np.log(evidence)
            log_z += np.log(Z)
        assert np.max(np.abs(special.softmax(s + b, axis=1) - post)) < TOL
        e_lhs = -np.sum(special.logsumexp(s + b, axis=1))
        assert abs(e_lhs - (e_rhs - log_z)) <= TOL * (abs(e_rhs) + abs(log_z))
        prior = np.exp(b) / np.exp(b).sum(axis=1, keepdims=True)
        ga, gb = g_prior(q, k, beta, prior), g_bias(q, k, beta, b)
        assert _close(ga, gb, np.linalg.norm(ga))
        # the package
        assert np.max(np.abs(np.asarray(A.attention_weights(q, k, beta=beta, bias=b)) - post)) < TOL
        assert np.max(np.abs(np.asarray(A.edge_prior(b)) - prior)) < TOL
        assert abs(float(A.energy(q, k, beta=beta, bias=b)) - e_lhs) <= TOL * abs(e_lhs)
        assert abs(float(A.prior_energy(s, prior)) - e_rhs) <= TOL * abs(e_rhs)


def _regularised_trace(q, k, beta, weight, n_steps=8):
    """E(q) + weight |q|^2 / 2 along q <- attend(q, k, k), evaluated in NumPy from the definition."""

    def objective(q_):
        s = beta * q_ @ k.T
        m = s.max(axis=1, keepdims=True)
        return float(-np.sum(np.log(np.sum(np.exp(s - m), axis=1)) + m[:, 0]) + 0.5 * weight * np.sum(q_**2))

    values = [objective(q)]
    for _ in range(n_steps):
        q = np.asarray(A.attend(jnp.asarray(q), jnp.asarray(k), jnp.asarray(k), beta=beta))
        values.append(objective(q))
    return np.array(values)


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_attention_update_descends_with_the_beta_half_regulariser(beta):
    """ch05, Experiment 1: q <- attend(q, k, k) never increases E + (beta/2)|q|^2 (CCCP).

    With the weight decay |q|^2 / (2 beta) instead, the same iteration rises on some of
    the same starts (the condition matters unless beta = 1)."""
    rng = np.random.default_rng(int(beta * 10))
    rises_right, rises_wrong = 0, 0
    for _ in range(N_INSTANCES):
        q, k = 2.0 * rng.normal(size=(4, 3)), rng.normal(size=(6, 3))
        right = _regularised_trace(q, k, beta, beta)
        wrong = _regularised_trace(q, k, beta, 1.0 / beta)
        rises_right += bool(np.any(np.diff(right) > 1e-10 * np.abs(right[:-1])))
        rises_wrong += bool(np.any(np.diff(wrong) > 1e-10 * np.abs(wrong[:-1])))
    assert rises_right == 0
    assert rises_wrong > 0
