"""Chapter 03 (switching linear dynamics): its propositions, checked independently.

Each test checks one proposition on at least 100 random instances (numpy
``default_rng`` with fixed seeds) against a computation that does not share
its formula: derivatives of an energy written here from eq. (17) with
``np.linalg.solve`` and ``np.linalg.det``, taken by the complex-step method
:math:`\\partial_j f(x) = \\mathrm{Im}\\, f(x + i h e_j) / h` (exact to float64
round-off), Hessians by ``jax.hessian`` of a separately written jax energy,
and minimality by perturbation. Where a proposition needs a condition, the
test also shows it failing without it. The chapter's proofs name these tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import slds
from tests.support import complex_step_grad, relative_error

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100


# (K, d, T) of the random instances. A few fixed shapes, so that the package's jitted
# functions compile once per shape; the values are drawn afresh for every instance.
SHAPES = [(1, 2, 4), (2, 1, 6), (3, 2, 5), (2, 3, 7)]


def _instance(rng, *, shapes=SHAPES):
    """Random modes ``(pi, A, b, Sigma)`` and a trajectory ``x`` of a shape drawn from ``shapes``."""
    K, d, T = shapes[int(rng.integers(len(shapes)))]
    pi = rng.dirichlet(2.0 * np.ones(K))
    A = rng.normal(size=(K, d, d)) / np.sqrt(d)
    b = rng.normal(size=(K, d))
    M = rng.normal(size=(K, d, d))
    Sigma = np.einsum("kij,klj->kil", M, M) / d + 0.3 * np.eye(d)
    x = rng.normal(size=(T, d))
    return pi, A, b, Sigma, x


def _params(pi, A, b, Sigma):
    return slds.Params(*(jnp.asarray(v) for v in (pi, A, b, Sigma)))


def _sim_one(xt, xn, pi_k, A_k, b_k, S_k, normalised=True):
    """sim of one transition x_t -> x_{t+1} under one mode, from its definition."""
    r = xn - A_k @ xt - b_k
    s = np.log(pi_k) - 0.5 * r @ np.linalg.solve(S_k, r)
    if normalised:
        s = s - 0.5 * np.log(np.linalg.det(2 * np.pi * S_k))
    return s


def _term_energy(xt, xn, pi, A, b, Sigma, normalised=True):
    """-ln sum_k exp sim_{t,k} for one transition (eq. 17, one term)."""
    s = np.array([_sim_one(xt, xn, pi[k], A[k], b[k], Sigma[k], normalised) for k in range(len(pi))])
    m = np.max(s.real)  # a constant shift: exact under the complex step
    return -(m + np.log(np.sum(np.exp(s - m))))


def _energy(pi, A, b, Sigma, x, normalised=True):
    """Eq. (17) as a loop over transitions."""
    return sum(_term_energy(x[t], x[t + 1], pi, A, b, Sigma, normalised) for t in range(len(x) - 1))


def _alpha(pi, A, b, Sigma, xt, xn, normalised=True):
    s = np.array([_sim_one(xt, xn, pi[k], A[k], b[k], Sigma[k], normalised) for k in range(len(pi))])
    e = np.exp(s - s.max())
    return e / e.sum()


# ---------------------------------------------------------------------------
# slds-sim-derivatives
# ---------------------------------------------------------------------------


def test_similarity_derivatives():
    """ch03, slds-sim-derivatives: the four sim-derivatives, against the complex step.

    One random transition and mode per instance (d = 1..4). Condition: the
    proof uses that Sigma_k is symmetric; for a non-symmetric (invertible)
    Sigma in the same quadratic form, the x_{t+1} formula fails.
    """
    rng = np.random.default_rng(301)
    worst = 0.0
    asym_fails = 0
    for _ in range(N_INSTANCES):
        d = int(rng.integers(1, 5))
        pi_k, A, b = rng.uniform(0.1, 1.0), rng.normal(size=(d, d)), rng.normal(size=d)
        M = rng.normal(size=(d, d))
        S = M @ M.T / d + 0.3 * np.eye(d)
        xt, xn = rng.normal(size=d), rng.normal(size=d)
        r = xn - A @ xt - b
        u = np.linalg.solve(S, r)
        formula = {"next": -u, "prev": A.T @ u, "A": np.outer(u, xt), "b": u}
        cs = {
            "next": complex_step_grad(lambda v: _sim_one(xt, v, pi_k, A, b, S), xn),
            "prev": complex_step_grad(lambda v: _sim_one(v, xn, pi_k, A, b, S), xt),
            "A": complex_step_grad(lambda v: _sim_one(xt, xn, pi_k, v, b, S), A),
            "b": complex_step_grad(lambda v: _sim_one(xt, xn, pi_k, A, v, S), b),
        }
        worst = max(worst, *(relative_error(formula[k], cs[k]) for k in formula))
        if d > 1:
            skew = rng.normal(size=(d, d))
            S_asym = S + 0.5 * (skew - skew.T)
            cs_asym = complex_step_grad(lambda v: _sim_one(xt, v, pi_k, A, b, S_asym, normalised=False), xn)
            asym_fails += relative_error(-np.linalg.solve(S_asym, xn - A @ xt - b), cs_asym) > 1e-3
        else:
            asym_fails += 1  # a 1x1 matrix is symmetric: nothing to break
    assert worst < 1e-12, worst
    assert asym_fails == N_INSTANCES, asym_fails


# ---------------------------------------------------------------------------
# slds-gradients
# ---------------------------------------------------------------------------


def test_energy_gradients_and_seed_signs():
    """ch03, slds-gradients: per-term, trajectory, A_k and b_k gradients, against the complex step.

    Both forms of the energy (with and without the normaliser). The formulas
    are evaluated from the proposition with explicit loops (alpha from the
    definition) and compared with the complex-step derivatives of eq. (17)
    written as a loop, as are the package's ``grad_next``, ``grad_prev``,
    ``grad_x``, ``grad_A`` and ``grad_b``. The seed's printed
    -dE/dx_{t+1} and -dE/dx_t are the exact negatives, and a small step along
    them raises the energy.
    """
    rng = np.random.default_rng(302)
    worst = 0.0
    for n in range(N_INSTANCES):
        normalised = bool(n % 2)
        pi, A, b, Sigma, x = _instance(rng)
        T, d = x.shape
        K = len(pi)
        P = np.linalg.inv(Sigma)
        # the proposition's formulas, term by term
        g_next, g_prev = np.zeros((T - 1, d)), np.zeros((T - 1, d))
        g_A, g_b = np.zeros((K, d, d)), np.zeros((K, d))
        for t in range(T - 1):
            al = _alpha(pi, A, b, Sigma, x[t], x[t + 1], normalised)
            for k in range(K):
                u = P[k] @ (x[t + 1] - A[k] @ x[t] - b[k])
                g_next[t] += al[k] * u  # dE/dx_{t+1} = +sum alpha Sigma^-1 r
                g_prev[t] -= al[k] * A[k].T @ u  # dE/dx_t = -sum alpha A^T Sigma^-1 r
                g_A[k] -= al[k] * np.outer(u, x[t])
                g_b[k] -= al[k] * u
        g_traj = np.zeros((T, d))
        g_traj[1:] += g_next  # child of x_{t-1}
        g_traj[:-1] += g_prev  # parent of x_{t+1}
        # independent: complex-step derivatives of eq. (17)
        cs_next = np.stack(
            [
                complex_step_grad(lambda v, t=t: _term_energy(x[t], v, pi, A, b, Sigma, normalised), x[t + 1])
                for t in range(T - 1)
            ]
        )
        cs_prev = np.stack(
            [
                complex_step_grad(lambda v, t=t: _term_energy(v, x[t + 1], pi, A, b, Sigma, normalised), x[t])
                for t in range(T - 1)
            ]
        )
        cs_traj = complex_step_grad(lambda v: _energy(pi, A, b, Sigma, v, normalised), x)
        cs_A = complex_step_grad(lambda v: _energy(pi, v, b, Sigma, x, normalised), A)
        cs_b = complex_step_grad(lambda v: _energy(pi, A, v, Sigma, x, normalised), b)
        p, xj = _params(pi, A, b, Sigma), jnp.asarray(x)
        pairs = [
            (g_next, cs_next),
            (g_prev, cs_prev),
            (g_traj, cs_traj),
            (g_A, cs_A),
            (g_b, cs_b),
            (slds.grad_next(p, xj, normalised=normalised), cs_next),
            (slds.grad_prev(p, xj, normalised=normalised), cs_prev),
            (slds.grad_x(p, xj, normalised=normalised), cs_traj),
            (slds.grad_A(p, xj, normalised=normalised), cs_A),
            (slds.grad_b(p, xj, normalised=normalised), cs_b),
        ]
        worst = max(worst, *(relative_error(a, c) for a, c in pairs))
        # The seed prints -dE/dx_{t+1} = +sum alpha Sigma^-1 r and -dE/dx_t = -sum alpha A^T Sigma^-1 r:
        # those are g_next and g_prev themselves, i.e. +dE/dx. A step along them raises E.
        t = int(rng.integers(T - 1))
        seed_dir = np.zeros_like(x)
        seed_dir[t], seed_dir[t + 1] = g_prev[t], g_next[t]
        E0 = _term_energy(x[t], x[t + 1], pi, A, b, Sigma, normalised)
        eta = 1e-4 / max(np.max(np.abs(seed_dir)), 1e-300)
        E1 = _term_energy(x[t] + eta * seed_dir[t], x[t + 1] + eta * seed_dir[t + 1], pi, A, b, Sigma, normalised)
        assert E1 > E0
    assert worst < 1e-10, worst


# ---------------------------------------------------------------------------
# slds-m-step
# ---------------------------------------------------------------------------


def _Q(alpha, x, pi, W, Sigma, lam):
    """The expected energy plus the precision prior, from the proposition's definition."""
    T1, K = alpha.shape
    Z = np.concatenate([x[:-1], np.ones((T1, 1))], axis=1)
    total = 0.0
    for k in range(K):
        logdet = np.log(np.linalg.det(2 * np.pi * Sigma[k]))
        for t in range(T1):
            r = x[t + 1] - W[k] @ Z[t]
            total = total + alpha[t, k] * (0.5 * logdet + 0.5 * r @ np.linalg.solve(Sigma[k], r) - np.log(pi[k]))
        total = total + 0.5 * lam * np.trace(np.linalg.inv(Sigma[k]))
    return total


def _closed_form(alpha, x, lam):
    """The proposition's M-step, by explicit loops."""
    T1, K = alpha.shape
    d = x.shape[1]
    Z = np.concatenate([x[:-1], np.ones((T1, 1))], axis=1)
    W = np.zeros((K, d, d + 1))
    Sigma = np.zeros((K, d, d))
    Nk = alpha.sum(axis=0)
    for k in range(K):
        XZ = sum(alpha[t, k] * np.outer(x[t + 1], Z[t]) for t in range(T1))
        ZZ = sum(alpha[t, k] * np.outer(Z[t], Z[t]) for t in range(T1))
        W[k] = XZ @ np.linalg.inv(ZZ)
        S = sum(alpha[t, k] * np.outer(x[t + 1] - W[k] @ Z[t], x[t + 1] - W[k] @ Z[t]) for t in range(T1))
        Sigma[k] = (S + lam * np.eye(d)) / Nk[k]
    return Nk / Nk.sum(), W, Sigma


def test_m_step_minimises_expected_energy():
    """ch03, slds-m-step: the closed form minimises Q under sum_k pi_k = 1.

    Random trajectories (T = 8..25, d = 1..3, K = 1..3), random soft
    responsibilities and lambda in {0, 1e-3, 0.5}. At the closed form (and the
    package's ``m_step``, which must agree) the complex-step gradient of Q
    vanishes in W_k, in every entry of Sigma_k and in the logits of pi; and
    10 random feasible perturbations of each instance raise Q.
    """
    rng = np.random.default_rng(303)
    worst_pkg = worst_stat = 0.0
    for _ in range(N_INSTANCES):
        K, d, T = [(1, 2, 8), (2, 1, 12), (3, 2, 20), (2, 3, 25)][int(rng.integers(4))]
        x = rng.normal(size=(T, d))
        alpha = rng.dirichlet(np.ones(K), size=T - 1)
        lam = float(rng.choice([0.0, 1e-3, 0.5]))
        pi, W, Sigma = _closed_form(alpha, x, lam)
        pkg = slds.m_step(jnp.asarray(x), jnp.asarray(alpha), reg_covar=lam)
        worst_pkg = max(
            worst_pkg,
            relative_error(pkg.weights, pi),
            relative_error(pkg.A, W[:, :, :d]),
            relative_error(pkg.b, W[:, :, d]),
            relative_error(pkg.covariances, Sigma),
        )
        eta = np.log(pi)
        grads = [
            complex_step_grad(lambda v: _Q(alpha, x, pi, v, Sigma, lam), W),
            complex_step_grad(lambda v: _Q(alpha, x, pi, W, v, lam), Sigma),
            complex_step_grad(lambda e: _Q(alpha, x, np.exp(e) / np.sum(np.exp(e)), W, Sigma, lam), eta),
        ]
        scale = (T - 1) * max(1.0, np.max(np.abs(np.linalg.inv(Sigma)))) * max(1.0, np.max(np.abs(x)) ** 2)
        worst_stat = max(worst_stat, max(np.max(np.abs(g)) for g in grads) / scale)
        Q0 = _Q(alpha, x, pi, W, Sigma, lam).real
        for size in np.geomspace(1e-3, 1.0, 10):
            B = 0.5 * size * rng.normal(size=(K, d, d))
            B = B + np.swapaxes(B, 1, 2)
            E = np.stack([np.linalg.matrix_power(np.eye(d) + B[k] / 64, 64) for k in range(K)])
            S2 = np.einsum("kab,kbc,kdc->kad", E, Sigma, E)
            W2 = W + size * rng.normal(size=W.shape)
            e2 = eta + size * rng.normal(size=K)
            assert _Q(alpha, x, np.exp(e2) / np.exp(e2).sum(), W2, S2, lam).real > Q0
    assert worst_pkg < 1e-9, worst_pkg
    assert worst_stat < 1e-10, worst_stat


def test_m_step_conditions():
    """ch03, slds-m-step, conditions: invertible sum alpha z z^T, and lambda > 0 or nonsingular scatter.

    (a) A mode whose weight sits on d + 1 transitions only (others 0), with
    lambda = 0: least squares fits them exactly, the scatter is 0 and Q falls
    without bound along Sigma_k = eps I as eps -> 0; with lambda > 0 the same
    data have a minimiser, Sigma_k = lambda I / N_k. (b) If every x_t of the
    mode is the same point, sum alpha z z^T is singular and Q is constant
    along a direction of W_k: the minimiser is not unique.
    """
    rng = np.random.default_rng(304)
    for _ in range(N_INSTANCES):
        d = int(rng.integers(1, 4))
        T = 3 * (d + 1) + 1
        x = rng.normal(size=(T, d))
        alpha = np.zeros((T - 1, 2))
        alpha[: d + 1, 0] = 1.0  # mode 0: exactly d + 1 transitions
        alpha[d + 1 :, 1] = 1.0
        pi, W, _ = _closed_form(alpha, x, 0.0)
        Qs = []
        for eps in (1e-2, 1e-4, 1e-6):
            Sigma = np.stack([eps * np.eye(d), np.eye(d)])
            Qs.append(_Q(alpha, x, pi, W, Sigma, 0.0).real)
        steps = -np.diff(Qs)
        assert np.all(steps > 0.9 * (d + 1) * d / 2 * np.log(100.0)), steps  # (N_k d / 2) ln 100
        lam = float(rng.uniform(0.01, 1.0))
        pi_l, W_l, S_l = _closed_form(alpha, x, lam)
        assert np.allclose(S_l[0], lam / (d + 1) * np.eye(d), rtol=1e-8, atol=1e-10 * lam)
        Q_l = _Q(alpha, x, pi_l, W_l, S_l, lam).real
        for eps in (1e-2, 1e-4, 1e-6):
            assert _Q(alpha, x, pi_l, W_l, np.stack([eps * np.eye(d), S_l[1]]), lam).real > Q_l
        # (b) all x_t of mode 0 equal: z_t z_t^T has rank 1 < d + 1
        xs = x.copy()
        xs[: d + 1] = xs[0]
        ZZ = sum(np.outer(np.r_[xs[t], 1.0], np.r_[xs[t], 1.0]) for t in range(d + 1))
        assert np.linalg.matrix_rank(ZZ) == 1
        null = np.linalg.svd(ZZ)[2][-1]  # ZZ null @ ... = 0
        Wk = rng.normal(size=(2, d, d + 1))
        Sigma = np.stack([np.eye(d), np.eye(d)])
        shifted = Wk.copy()
        shifted[0] += np.outer(rng.normal(size=d), null)
        q1, q2 = _Q(alpha, xs, pi, Wk, Sigma, 0.0).real, _Q(alpha, xs, pi, shifted, Sigma, 0.0).real
        assert abs(q1 - q2) < 1e-10 * abs(q1)


# ---------------------------------------------------------------------------
# slds-impute-step
# ---------------------------------------------------------------------------


def _energy_jax(pi, A, b, Sigma, x):
    """Eq. (17) written again in jax, from the Gaussian density (inv and slogdet)."""
    d = x.shape[1]
    P = jnp.linalg.inv(Sigma)
    logdet = jnp.linalg.slogdet(Sigma)[1]
    r = x[1:, None, :] - jnp.einsum("kij,tj->tki", A, x[:-1]) - b[None]
    logp = jnp.log(pi) - 0.5 * (d * jnp.log(2 * jnp.pi) + logdet) - 0.5 * jnp.einsum("tki,kij,tkj->tk", r, P, r)
    return -jnp.sum(jax.nn.logsumexp(logp, axis=1))


@jax.jit
def _hessian(pi, A, b, Sigma, x):
    """Hessian of E in all states, ``(T, d, T, d)``, by jax.hessian of the jax energy."""
    return jax.hessian(lambda v: _energy_jax(pi, A, b, Sigma, v))(x)


def test_impute_step_is_safe():
    """ch03, slds-impute-step: in one state x_t, nabla^2 E <= L I with L = lambda_* (1 + a^2); step 1/L descends.

    Per instance (T = 6, d = 1..3, K = 1..3, A_k of random norm) the Hessian
    in x_t (t = 0..5, endpoints included) is taken by ``jax.hessian`` of eq.
    (17) written separately, at the data and at 3 random points, and its
    largest eigenvalue is compared with L from numpy's eigenvalues and
    singular values; 20 steps of size 1/L on x_t never raise E (numpy energy).
    Condition (one state at a time): for two adjacent free states the joint
    Hessian exceeds L on some instances, and stays below 2 L (the package's
    ``smoothness_bound(adjacent=True)``).
    """
    rng = np.random.default_rng(305)
    exceeded = 0
    worst_ratio = worst_pair_ratio = 0.0
    for _ in range(N_INSTANCES):
        pi, A, b, Sigma, x = _instance(rng, shapes=[(1, 2, 6), (2, 1, 6), (3, 2, 6), (2, 3, 6)])
        T, d = x.shape
        A = A * rng.uniform(0.2, 2.0)
        lam_star = max(np.max(1.0 / np.linalg.eigvalsh(S)) for S in Sigma)
        a = max(np.linalg.svd(Ak, compute_uv=False)[0] for Ak in A)
        L = lam_star * (1 + a**2)
        p = _params(pi, A, b, Sigma)
        assert abs(float(slds.smoothness_bound(p)) - L) <= 1e-12 * L
        assert abs(float(slds.smoothness_bound(p, adjacent=True)) - 2 * L) <= 1e-12 * L
        args = tuple(jnp.asarray(v) for v in (pi, A, b, Sigma))
        t = int(rng.integers(T))
        for _ in range(4):
            xj = jnp.asarray(x)
            Hs = np.asarray(_hessian(*args, xj))[t, :, t, :]
            worst_ratio = max(worst_ratio, np.max(np.linalg.eigvalsh(Hs)) / L)
            x = x.copy()
            x[t] = x[t] + 2.0 * rng.normal(size=d)
        # gradient descent on x_t with step 1/L
        xs = x.copy()
        E_prev = _energy(pi, A, b, Sigma, xs)
        for _ in range(20):
            g = complex_step_grad(
                lambda v: _energy(pi, A, b, Sigma, np.concatenate([xs[:t], v[None], xs[t + 1 :]])), xs[t]
            )
            xs[t] = xs[t] - g / L
            E_new = _energy(pi, A, b, Sigma, xs)
            assert E_new <= E_prev + 1e-12 * abs(E_prev)
            E_prev = E_new
        # two adjacent free states
        s = int(rng.integers(T - 1))
        H_pair = np.asarray(_hessian(*args, jnp.asarray(x)))[s : s + 2, :, s : s + 2, :].reshape(2 * d, 2 * d)
        lam_pair = np.max(np.linalg.eigvalsh(H_pair))
        exceeded += lam_pair > L * (1 + 1e-9)
        worst_pair_ratio = max(worst_pair_ratio, lam_pair / (2 * L))
    assert worst_ratio <= 1 + 1e-10, worst_ratio
    assert worst_pair_ratio <= 1 + 1e-10, worst_pair_ratio
    assert exceeded >= 5, exceeded  # 12 of the 100 instances
