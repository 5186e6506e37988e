"""Propositions of chapter 04 (predictive coding as a mixture), checked independently.

Each test checks one proposition on at least 100 random instances (float64, numpy
``default_rng`` with a fixed seed) against a computation that does not share the
package's formula: ``jax.grad`` / ``jax.hessian`` of an energy written here from
eq. (18), the network's Jacobian written out by hand, and ``numpy`` linear algebra.
The proposition's proof in ``book/04_mixture_predictive_coding.ipynb`` names its test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from lse_energy import mixture_pc as mpc
from tests.support import relative_error_l2

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
C_TANH2 = 4.0 / (3.0 * np.sqrt(3.0))  # max_z |tanh''(z)|


def _instance(rng, *, m=2, H=5, d=3, N=6, K=4):
    """A random network, data and latents of fixed shapes (one compilation per shape)."""
    W1 = rng.normal(size=(H, m)) * rng.uniform(0.3, 2.0)
    b1 = rng.normal(size=H) * rng.uniform(0.0, 1.0)
    W2 = rng.normal(size=(d, H)) * rng.uniform(0.3, 2.0)
    b2 = rng.normal(size=d)
    x = 2.0 * rng.normal(size=(N, d))
    mu = 1.5 * rng.normal(size=(K, m))
    return (W1, b1, W2, b2), x, mu


def _params(p):
    return mpc.Params(*(jnp.asarray(a) for a in p))


def _f(p, mu):
    """The generative network written out: W2 tanh(W1 mu + b1) + b2, row-wise."""
    W1, b1, W2, b2 = p
    return jnp.tanh(mu @ W1.T + b1) @ W2.T + b2


def _energy(p, x, mu):
    """Eq. (18) from its definition: -sum_i log sum_k exp(-|x_i - f(mu_k)|^2 / 2)."""
    diff = x[:, None, :] - _f(p, mu)[None, :, :]
    return -jnp.sum(logsumexp(-0.5 * jnp.sum(diff**2, axis=-1), axis=1))


def _alpha_and_errors(p, x, mu):
    """Responsibilities and prediction errors in numpy (softmax by hand)."""
    W1, b1, W2, b2 = p
    pred = np.tanh(mu @ W1.T + b1) @ W2.T + b2
    e = x[:, None, :] - pred[None, :, :]  # (N, K, d)
    s = -0.5 * np.sum(e**2, axis=-1)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True), e


def _close(a, b, scale, tol=1e-10):
    """|a - b| <= tol * scale, with scale the size of the terms summed (not of their sum, which
    can cancel to nearly zero when tanh saturates)."""
    return float(np.linalg.norm(np.asarray(a, float) - np.asarray(b, float))) <= tol * scale


_grad_x = jax.jit(jax.grad(_energy, argnums=1))
_grad_mu = jax.jit(jax.grad(_energy, argnums=2))
_hess_mu = jax.jit(jax.hessian(_energy, argnums=2))
_energy_jit = jax.jit(_energy)


def test_data_gradient_pc_grad_x():
    """pc-grad-x: dsim/dx_i = -(x_i - f(mu_k)) and dE/dx_i = +sum_k alpha_ik (x_i - f(mu_k)).

    Against jax.grad of eq. (18) written here; the seed's printed sign (the same expression
    claimed to be -dE/dx) is off by exactly a factor -1 (relative error 2) on every instance."""
    rng = np.random.default_rng(40)
    dsim = jax.jit(jax.grad(lambda xi, p, mu_k: -0.5 * jnp.sum((xi - _f(p, mu_k)) ** 2)))
    for _ in range(N_INSTANCES):
        p, x, mu = _instance(rng)
        alpha, e = _alpha_and_errors(p, x, mu)
        formula = np.einsum("nk,nkd->nd", alpha, e)
        scale = float(np.linalg.norm(np.einsum("nk,nk->n", alpha, np.linalg.norm(e, axis=-1))))
        auto = np.asarray(_grad_x(p, x, mu))
        assert _close(formula, auto, scale)
        assert _close(mpc.grad_x(_params(p), x, mu), auto, scale)
        i, k = int(rng.integers(x.shape[0])), int(rng.integers(mu.shape[0]))
        assert _close(dsim(x[i], p, mu[k]), -e[i, k], np.linalg.norm(e[i, k]))  # the sim-derivative
        assert abs(relative_error_l2(-formula, auto) - 2.0) < 1e-8  # the seed's printed sign: wrong by a factor -1


def _jacobian(p, mu_k):
    """J = df/dmu at mu_k, written out: W2 diag(1 - tanh^2(W1 mu + b1)) W1, shape (d, m)."""
    W1, b1, W2, _ = p
    return W2 @ np.diag(1.0 - np.tanh(W1 @ mu_k + b1) ** 2) @ W1


def test_latent_gradient_pc_grad_mu():
    """pc-grad-mu: -dE/dmu_k = J_k^T sum_i alpha_ik (x_i - f(mu_k)), J_k = df/dmu in R^{d x m}.

    J_k is written out by hand (numerator layout: row j is the gradient of output j) and the
    product checked against jax.grad of eq. (18); the untransposed J_k s_k (the seed as
    printed) is wrong on square (m = d) instances."""
    rng = np.random.default_rng(41)
    wrong = []
    for j in range(N_INSTANCES):
        sq = j % 2 == 0
        p, x, mu = _instance(rng, m=3 if sq else 2, d=3)
        alpha, e = _alpha_and_errors(p, x, mu)
        s = np.einsum("nk,nkd->kd", alpha, e)  # (K, d)
        Js = [_jacobian(p, mu[k]) for k in range(mu.shape[0])]
        assert all(J.shape == (x.shape[1], mu.shape[1]) for J in Js)
        formula = np.stack([J.T @ s[k] for k, J in enumerate(Js)])
        W1, _, W2, _ = p
        scale = (
            np.linalg.norm(W1, 2)
            * np.linalg.norm(W2, 2)
            * float(np.linalg.norm(np.einsum("nk,nk->k", alpha, np.linalg.norm(e, axis=-1))))
        )
        auto = -np.asarray(_grad_mu(p, x, mu))
        assert _close(formula, auto, scale)
        assert _close(-np.asarray(mpc.grad_mu(_params(p), x, mu)), auto, scale)
        if sq:
            wrong.append(relative_error_l2(np.stack([J @ s[k] for k, J in enumerate(Js)]), auto))
    # J s agrees with J^T s only where J^T s = J s, e.g. a symmetric J: not for random networks
    assert len(wrong) == N_INSTANCES // 2 and min(wrong) > 1e-3


def _lipschitz(p, x):
    """L of pc-step from its statement, spectral norms by numpy's SVD."""
    W1, _, W2, b2 = p
    n1, n2 = np.linalg.svd(W1, compute_uv=False)[0], np.linalg.svd(W2, compute_uv=False)[0]
    H = W1.shape[0]
    return sum(n1**2 * n2**2 + C_TANH2 * n1**2 * n2 * (np.linalg.norm(xi - b2) + np.sqrt(H) * n2) for xi in x)


def test_safe_step_size_pc_step():
    """pc-step: Hess_mu E <= L I everywhere, and a gradient step with eta in (0, 2/L] lowers E
    by at least eta (1 - L eta / 2) |g|^2 (at eta = 1/L: |g|^2 / (2L)).

    L from the statement (numpy SVD), the largest eigenvalue of jax.hessian of eq. (18)
    written here at three latents per instance (near and far), and the energy after the step."""
    rng = np.random.default_rng(42)
    z = np.linspace(-4.0, 4.0, 200001)
    assert abs(C_TANH2 - np.max(np.abs(np.gradient(np.gradient(np.tanh(z), z), z)))) < 1e-6  # c, numerically
    for _ in range(N_INSTANCES):
        p, x, mu = _instance(rng)
        L = _lipschitz(p, x)
        assert abs(float(mpc.mu_lipschitz(_params(p), x)) - L) <= 1e-12 * L
        for scale in (0.3, 1.5, 5.0):
            v = scale * rng.normal(size=mu.shape)
            h = np.asarray(_hess_mu(p, x, v)).reshape(v.size, v.size)
            assert np.linalg.eigvalsh(0.5 * (h + h.T)).max() <= L
        g = np.asarray(_grad_mu(p, x, mu))
        e0 = float(_energy_jit(p, x, mu))
        tol = 1e-12 * (1.0 + abs(e0))  # round-off of an N-term sum, far below the guaranteed decrease
        for eta in (1.0 / L, 2.0 / L, rng.uniform(0.0, 2.0 / L)):
            e1 = float(_energy_jit(p, x, mu - eta * g))
            assert e1 <= e0 - eta * (1.0 - L * eta / 2.0) * np.sum(g**2) + tol


def test_safe_step_size_fails_without_the_step_condition():
    """pc-step without eta <= 2/L: a step above the curvature can raise E.

    With eta = 4 / lambda_max(Hess E(mu)) (above 2/L, since lambda_max <= L), the energy rises on
    at least one in five of 100 random instances; with eta = 1/L it never rises on the same
    instances."""
    rng = np.random.default_rng(43)
    rises, rises_safe, n = 0, 0, 0
    for _ in range(N_INSTANCES):
        p, x, mu = _instance(rng)
        L = _lipschitz(p, x)
        lam = np.linalg.eigvalsh(np.asarray(_hess_mu(p, x, mu)).reshape(mu.size, mu.size)).max()
        if lam <= 0:
            continue
        n += 1
        e0 = float(_energy_jit(p, x, mu))
        g = np.asarray(_grad_mu(p, x, mu))
        eta = 4.0 / lam
        assert eta > 2.0 / L
        rises += float(_energy_jit(p, x, mu - eta * g)) > e0 + 1e-9 * (1.0 + abs(e0))
        rises_safe += float(_energy_jit(p, x, mu - g / L)) > e0 + 1e-12 * (1.0 + abs(e0))
    assert n >= 50 and rises >= 20  # at least one instance in five
    assert rises_safe == 0
