"""Propositions of chapter 06 (modern Hopfield networks), checked independently.

Each test checks one proposition on at least 100 random instances (float64, numpy
``default_rng`` with a fixed seed) against a computation that does not share the
package's formula: ``jax.grad`` / ``jax.hessian`` of the energy written here from its
definition, scipy's ``logsumexp`` and ``softmax``, and explicit loops over memories.
Where a proposition needs a condition, the same test shows the statement failing without it.
The proposition's proof in ``book/06_hopfield.ipynb`` names its test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from scipy import special

from lse_energy import hopfield

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
TOL = 1e-12  # float64, exact algebra
K, N, D = 6, 4, 5


def _energy(X, M, beta):
    """E_beta = -(1/beta) sum_i log sum_mu exp(beta x_i.m_mu), from its definition."""
    return -jnp.sum(logsumexp(beta * X @ M.T, axis=1)) / beta


def _energies_np(X, M, beta, weight=1.0):
    """Per-query -(1/beta) lse(beta x.m) + weight |x|^2 / 2, with scipy."""
    return -special.logsumexp(beta * X @ M.T, axis=1) / beta + 0.5 * weight * np.sum(X**2, axis=1)


def _xi(X, M, beta):
    """xi_i = sum_mu softmax_mu(beta x_i.m_mu) m_mu, by an explicit loop over memories."""
    w = special.softmax(beta * X @ M.T, axis=1)
    out = np.zeros_like(X)
    for mu in range(M.shape[0]):
        out += w[:, mu : mu + 1] * M[mu]
    return out, w


def _instance(rng, beta_range=(0.05, 20.0)):
    beta = float(np.exp(rng.uniform(*np.log(beta_range))))
    M = rng.normal(size=(K, D)) * rng.uniform(0.3, 2.0)
    X = rng.normal(size=(N, D)) * rng.uniform(0.3, 3.0)
    return M, X, beta


_grads = jax.jit(jax.grad(_energy, argnums=(0, 1)))
_grad_reg = jax.jit(jax.grad(lambda X, M, beta: _energy(X, M, beta) + 0.5 * jnp.sum(X**2)))


def _close(a, b, scale, tol=TOL):
    return float(np.linalg.norm(np.asarray(a, float) - np.asarray(b, float))) <= tol * float(scale)


def test_hopfield_gradients():
    """hop-gradients: -dE/dx_i = sum_mu w_imu m_mu, -dE/dm_mu = sum_i w_imu x_i,
    dE^reg/dx_i = x_i - sum_mu w_imu m_mu, at beta log-uniform in [0.05, 20].

    Right-hand sides by explicit loops, against jax.grad of the energy written here."""
    rng = np.random.default_rng(60)
    for _ in range(N_INSTANCES):
        M, X, beta = _instance(rng)
        xi, w = _xi(X, M, beta)
        mg_m = np.zeros_like(M)
        for mu in range(K):
            for i in range(N):
                mg_m[mu] += w[i, mu] * X[i]
        sx = np.linalg.norm(M) * np.sqrt(N)  # size of the terms summed
        sm = np.linalg.norm(X) * np.sqrt(K)
        gx, gm = _grads(X, M, beta)
        assert _close(-xi, gx, sx) and _close(-mg_m, gm, sm)
        assert _close(X - xi, _grad_reg(X, M, beta), sx + np.linalg.norm(X))
        assert _close(hopfield.grad_queries(M, X, beta=beta), gx, sx)
        assert _close(hopfield.grad_memories(M, X, beta=beta), gm, sm)
        assert _close(hopfield.grad_regularised_energy_queries(M, X, beta=beta), X - xi, sx + np.linalg.norm(X))


_hess_one = jax.jit(jax.hessian(lambda x, M, beta: -logsumexp(beta * M @ x) / beta))


def test_bare_energy_unbounded_regularised_bounded():
    """hop-bounded. (a) E_beta is concave in each query (largest Hessian eigenvalue <= 0 by
    jax.hessian) and E_beta(t m_mu) <= -t |m_mu|^2 for t > 0 (scipy logsumexp); (b) every
    query's -(1/beta) lse + |x|^2/2 >= -(1/beta) ln K - R^2/2 at random points of many scales.

    Without the quadratic node potential (b) fails: the bare energy goes below the bound along
    x = t m_mu. Without m_mu != 0 (all memories zero) E_beta is constant: no divergence."""
    rng = np.random.default_rng(61)
    for _ in range(N_INSTANCES):
        M, X, beta = _instance(rng)
        R = np.max(np.linalg.norm(M, axis=1))
        # (a) concavity, at a near and a far point
        for x in (X[0], 10.0 * X[1]):
            h = np.asarray(_hess_one(x, M, beta))
            assert np.linalg.eigvalsh(0.5 * (h + h.T)).max() <= TOL * beta * R**2
        mu = int(rng.integers(K))
        norm2 = float(M[mu] @ M[mu])
        for t in np.exp(rng.uniform(np.log(1e-2), np.log(1e3), size=5)):
            e = _energies_np(t * M[mu][None], M, beta, weight=0.0)[0]
            assert e <= -t * norm2 * (1.0 - TOL)
            assert abs(float(hopfield.energy(M, t * M[mu][None], beta=beta)) - e) <= TOL * abs(e)
        # (b) the lower bound of the regularised energy, per query, from near 0 to far away
        bound = -np.log(K) / beta - 0.5 * R**2
        Z = rng.normal(size=(200, D)) * np.exp(rng.uniform(np.log(1e-3), np.log(1e2), size=(200, 1)))
        e_reg = _energies_np(Z, M, beta)
        assert np.all(e_reg >= bound)
        assert np.all(np.asarray(hopfield.regularised_energies(M, Z, beta=beta)) >= bound)
        assert float(hopfield.regularised_energy(M, Z, beta=beta)) >= len(Z) * bound
        # ... and fails without the quadratic term: along t m_mu* with |m_mu*| = R
        top = M[np.argmax(np.linalg.norm(M, axis=1))]
        t = 2.0 * (1.0 + np.log(K) / (beta * R**2))
        assert _energies_np(t * top[None], M, beta, weight=0.0)[0] < bound
    # with every memory zero the bare energy is -(1/beta) ln K for every query
    Z = rng.normal(size=(50, D)) * 100.0
    assert np.allclose(_energies_np(Z, np.zeros((K, D)), 2.0, weight=0.0), -np.log(K) / 2.0, rtol=TOL)


def _surrogate(X, Xbar, M, beta, xi_bar):
    """S(X; Xbar) = |X|^2/2 + E_beta(Xbar) - <xi(Xbar), X - Xbar>, written from the statement."""
    return 0.5 * np.sum(X**2) + float(_energy(Xbar, M, beta)) - np.sum(xi_bar * (X - Xbar))


def test_retrieval_step_is_cccp_step():
    """hop-cccp: S(.; Xbar) majorises E^reg with equality at Xbar, S(X) = S(xi) + |X - xi|^2/2 (so
    xi is its unique minimiser; jax.grad of S vanishes there), and
    E^reg(Xbar) - E^reg(xi) >= |xi - Xbar|^2 / 2, at beta log-uniform in [0.01, 1000].

    xi by an explicit loop over memories, the energies with scipy; also the package's update
    and cccp_surrogate. Without the quadratic term (the bare eq. (9)), the same update raises the
    energy on at least one instance in five: the convex part is what CCCP minimises."""
    rng = np.random.default_rng(62)
    grad_S = jax.jit(
        jax.grad(lambda X, Xbar, M, beta, xi: 0.5 * jnp.sum(X**2) + _energy(Xbar, M, beta) - jnp.sum(xi * (X - Xbar)))
    )
    bare_rises = 0
    for _ in range(N_INSTANCES):
        M, Xbar, beta = _instance(rng, beta_range=(0.01, 1e3))
        xi, _ = _xi(Xbar, M, beta)
        scale = 1.0 + np.sum(Xbar**2) + np.sum(xi**2) + N * np.max(np.abs(_energies_np(Xbar, M, beta)))
        assert _close(hopfield.update(M, Xbar, beta=beta), xi, np.linalg.norm(M) * np.sqrt(N))
        e_bar = float(np.sum(_energies_np(Xbar, M, beta)))
        s_bar = _surrogate(Xbar, Xbar, M, beta, xi)
        assert abs(s_bar - e_bar) <= TOL * scale
        s_min = _surrogate(xi, Xbar, M, beta, xi)
        for r in (0.1, 1.0, 10.0):
            X = Xbar + r * rng.normal(size=Xbar.shape)
            s = _surrogate(X, Xbar, M, beta, xi)
            sc = scale + np.sum(X**2)
            assert s >= float(np.sum(_energies_np(X, M, beta))) - TOL * sc  # majorises
            assert abs(s - s_min - 0.5 * np.sum((X - xi) ** 2)) <= TOL * sc  # completing the square
            assert abs(float(hopfield.cccp_surrogate(M, X, Xbar, beta=beta)) - s) <= TOL * sc
        assert float(np.max(np.abs(grad_S(xi, Xbar, M, beta, xi)))) <= TOL * np.sqrt(scale)
        e_new = float(np.sum(_energies_np(xi, M, beta)))
        assert e_bar - e_new >= 0.5 * np.sum((xi - Xbar) ** 2) - TOL * scale
        # the condition: drop the quadratic node potential
        bare_old = _energies_np(Xbar, M, beta, weight=0.0)
        bare_new = _energies_np(xi, M, beta, weight=0.0)
        bare_rises += bool(np.any(bare_new > bare_old + 1e-9 * (1.0 + np.abs(bare_old))))
    assert bare_rises >= 20  # at least one instance in five
