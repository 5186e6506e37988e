"""Propositions of chapter 07 (slot attention), checked against independent computations.

Each test checks one proposition on at least 100 random instances (float64, values drawn
from NumPy generators with fixed seeds) against a computation that does not share the
package's formula: complex-step derivatives of eq. (12) written here in NumPy (exact to
round-off, no autodiff), explicit loops over tokens and slots, least squares by
``numpy.linalg.lstsq``, singular values of the canonical-correlation matrix, brute force
over a grid of the orthogonal group. Where a proposition needs a condition, the test also
shows it failing without it.

Sizes come from a few fixed shapes and the package's functions are called through
``jax.jit`` (the same code, compiled once per shape; eager calls recompile every operation
for every new shape, which would dominate the run time); the values are fresh for every
instance.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import slot_attention as sa
from tests.support import complex_step, relative_error_l2

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100

# (N tokens, S slots, d_x, d_mu, h = rows of W_K and W_Q)
SHAPES = [
    (7, 4, 3, 2, 5),  # non-square maps, S > d_mu
    (5, 2, 3, 4, 3),  # S < d_mu: C_mumu singular; h < d_mu
    (1, 3, 2, 2, 2),  # a single token
    (6, 1, 4, 3, 4),  # a single slot
]
STIEFEL = [sh for sh in SHAPES if sh[4] >= sh[3]]  # W_Q can have orthonormal columns
MORE_TOKENS = [sh for sh in SHAPES if sh[0] > sh[2]]  # C_xx invertible

# the package's functions under test, jitted (scalars are traced, so varying them does not recompile)
grad_x, grad_mu, grad_w_k, grad_w_q = (jax.jit(f) for f in (sa.grad_x, sa.grad_mu, sa.grad_w_k, sa.grad_w_q))
m_step_w_q, m_step_w_k, cccp_step = jax.jit(sa.m_step_w_q), jax.jit(sa.m_step_w_k), jax.jit(sa.cccp_step)
gradient_step = jax.jit(lambda p, x, mu, step, lam: sa.gradient_step(p, x, mu, step=step, lam=lam))
procrustes_w_q = jax.jit(lambda p, x, mu, a, prox: sa.procrustes_w_q(p, x, mu, a, prox=prox))


# ---------------------------------------------------------------------------
# Independent references, written here from eq. (12) and the surrogate's definition
# ---------------------------------------------------------------------------


def sims(w_k, w_q, x, mu):
    """s_ji = (W_K x_j) . (W_Q mu_i), summed explicitly over the key dimension."""
    return np.einsum("ab,jb,ac,ic->ji", w_k, x, w_q, mu)


def energy_np(w_k, w_q, x, mu, lam=0.0):
    """Eq. (12) plus (lam/2) sum mu^2; works for complex arguments (complex step)."""
    s = sims(w_k, w_q, x, mu)
    m = s.real.max(axis=1, keepdims=True)
    return -np.sum(m[:, 0] + np.log(np.sum(np.exp(s - m), axis=1))) + 0.5 * lam * np.sum(mu * mu)


def attention_np(w_k, w_q, x, mu):
    """A_ji = exp(s_ji) / sum_i' exp(s_ji'), one token at a time."""
    s = sims(w_k, w_q, x, mu)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def surrogate_np(w_k, w_q, x, mu, a):
    """L = sum_ji A_ji |W_K x_j - W_Q mu_i|^2 by an explicit double loop (complex-safe)."""
    return sum(a[j, i] * np.sum((w_k @ x[j] - w_q @ mu[i]) ** 2) for j in range(len(x)) for i in range(len(mu)))


def random_instance(rng, shape):
    n, s, dx, dmu, h = shape
    scale = rng.uniform(0.3, 1.5)
    w_k = rng.normal(size=(h, dx)) * scale / np.sqrt(dx)
    w_q = rng.normal(size=(h, dmu)) * scale / np.sqrt(dmu)
    x = rng.normal(size=(n, dx))
    mu = rng.normal(size=(s, dmu)) * rng.uniform(0.3, 2.0)
    return w_k, w_q, x, mu


def instances(seed, shapes=SHAPES, n=N_INSTANCES):
    """n random instances cycling through the shapes, with their index."""
    rng = np.random.default_rng(seed)
    for k, shape in zip(range(n), itertools.cycle(shapes)):
        yield k, rng, shape, random_instance(rng, shape)


def params(w_k, w_q):
    return sa.Params(jnp.asarray(w_k), jnp.asarray(w_q))


def orthonormal_columns(rng, h, d):
    q, r = np.linalg.qr(rng.normal(size=(h, d)))
    return q * np.sign(np.diag(r))


# ---------------------------------------------------------------------------
# prop-slot-gradients
# ---------------------------------------------------------------------------


def test_slot_gradients_match_complex_step_derivatives():
    """prop-slot-gradients: eqs. (13), (14) and the map gradients, as printed (loops over
    j, i) and as implemented, equal complex-step derivatives of eq. (12) written in NumPy,
    on 100 random instances with non-square maps (relative error < 1e-10)."""
    worst = 0.0
    for _, _, _, (w_k, w_q, x, mu) in instances(700):
        args = (w_k, w_q, x, mu)
        auto = {
            "13": complex_step(energy_np, args, 2),
            "14": complex_step(energy_np, args, 3),
            "W_K": complex_step(energy_np, args, 0),
            "W_Q": complex_step(energy_np, args, 1),
        }
        a = attention_np(w_k, w_q, x, mu)
        pairs = list(itertools.product(range(len(x)), range(len(mu))))
        minus_gx = np.zeros_like(x)
        minus_gmu = np.zeros_like(mu)
        c_xmu = np.zeros((x.shape[1], mu.shape[1]))
        for j, i in pairs:
            minus_gx[j] += a[j, i] * w_k.T @ w_q @ mu[i]
            minus_gmu[i] += a[j, i] * w_q.T @ w_k @ x[j]
            c_xmu += a[j, i] * np.outer(x[j], mu[i])
        formula = {"13": -minus_gx, "14": -minus_gmu, "W_K": -w_q @ c_xmu.T, "W_Q": -w_k @ c_xmu}
        p = params(w_k, w_q)
        package = {
            "13": grad_x(p, x, mu),
            "14": grad_mu(p, x, mu),
            "W_K": grad_w_k(p, x, mu),
            "W_Q": grad_w_q(p, x, mu),
        }
        for name, derivative in auto.items():
            worst = max(
                worst, relative_error_l2(formula[name], derivative), relative_error_l2(package[name], derivative)
            )
    assert worst < 1e-10, worst


# ---------------------------------------------------------------------------
# prop-slot-estep
# ---------------------------------------------------------------------------


def _minus_grad_mu(w_k, w_q, x, mu):
    """Eq. (14), vectorised (checked against complex steps above)."""
    return attention_np(w_k, w_q, x, mu).T @ x @ w_k.T @ w_q


def test_slot_gradient_descent_on_eq12_tangent_bound_and_divergence():
    """prop-slot-estep (1): E(mu - eta g) <= E(mu) - eta |g|^2 for eta log-uniform on
    [1e-3, 1e2], g by complex steps; along 200 steps |g| never decreases (concavity), so
    E falls at least linearly and max_i |mu_i| passes
    (sum_t eta |g_t|^2 - E_0 - N ln S) / (|B| sum_j |x_j|): the slots grow without bound.
    The stated exception: from mu = 0 with tokens summing to zero, g_0 = 0 and the slots
    never move."""
    for _, rng, _, (w_k, w_q, x, mu) in instances(701):
        eta = float(10 ** rng.uniform(-3, 2))
        g = complex_step(energy_np, (w_k, w_q, x, mu), 3)
        e0, e1 = energy_np(w_k, w_q, x, mu), energy_np(w_k, w_q, x, mu - eta * g)
        assert e1 <= e0 - eta * float(np.sum(g**2)) + 1e-11 * max(1.0, abs(e0), abs(e1))
        assert relative_error_l2(gradient_step(params(w_k, w_q), x, mu, eta, 0.0), mu - eta * g) < 1e-10

        eta, n_steps, m = 0.05, 200, mu
        g_norms = []
        for _ in range(n_steps):
            g = -_minus_grad_mu(w_k, w_q, x, m)
            g_norms.append(np.linalg.norm(g))
            m = m - eta * g
        g_norms = np.array(g_norms)
        assert np.all(np.diff(g_norms) >= -1e-12 * g_norms[1:])
        e_end = energy_np(w_k, w_q, x, m)
        drop = eta * float(np.sum(g_norms**2))
        assert e_end <= e0 - drop + 1e-10 * max(1.0, abs(e_end))
        floor = (drop - e0 - len(x) * np.log(len(mu))) / (
            np.linalg.norm(w_k.T @ w_q, 2) * np.sum(np.linalg.norm(x, axis=1))
        )
        assert np.max(np.linalg.norm(m, axis=1)) >= floor * (1 - 1e-12)

        # the exception: g_0 = 0 (mu = 0, tokens summing to zero) is a maximum and never moves
        x0, m = x - x.mean(axis=0), np.zeros_like(mu)
        assert np.max(np.abs(complex_step(energy_np, (w_k, w_q, x0, m), 3))) < 1e-12
        for _ in range(n_steps):
            m = m + eta * _minus_grad_mu(w_k, w_q, x0, m)
        assert np.max(np.abs(m)) < 1e-12


def test_slot_free_energy_step_descends_iff_eta_at_most_two_over_lambda():
    """prop-slot-estep (2)-(3): for 0 < eta <= 2/lam (2/lam itself on every tenth
    instance) the step lowers F_lam by at least eta (1 - lam eta / 2) |grad F|^2, grad F by
    complex steps; at eta = 1/lam it is the CCCP formula of Singh & Buckley, written as a
    loop over slots and tokens. Without the condition (eta = 4/lam) the same step raises
    F_lam on most of the same instances."""
    rises_beyond = 0
    for k, rng, _, (w_k, w_q, x, mu) in instances(702):
        lam = float(10 ** rng.uniform(-1, 1))
        eta = 2.0 / lam if k % 10 == 0 else float(rng.uniform(0, 2.0 / lam))
        g_f = complex_step(energy_np, (w_k, w_q, x, mu, lam), 3)
        f0 = energy_np(w_k, w_q, x, mu, lam)
        f1 = energy_np(w_k, w_q, x, mu - eta * g_f, lam)
        assert f1 <= f0 - eta * (1 - lam * eta / 2) * float(np.sum(g_f**2)) + 1e-11 * max(1.0, abs(f0), abs(f1))
        p = params(w_k, w_q)
        assert relative_error_l2(gradient_step(p, x, mu, eta, lam), mu - eta * g_f) < 1e-10
        v = x @ w_k.T @ w_q  # rows W_Q^T W_K x_j
        cccp = np.zeros_like(mu)
        for i in range(len(mu)):
            for j in range(len(x)):
                logits = np.array([mu[i2] @ v[j] for i2 in range(len(mu))])
                cccp[i] += np.exp(logits[i] - logits.max()) / np.sum(np.exp(logits - logits.max())) * v[j]
        cccp /= lam
        assert relative_error_l2(mu - g_f / lam, cccp) < 1e-10
        assert relative_error_l2(cccp_step(p, x, mu, lam), cccp) < 1e-10
        rises_beyond += energy_np(w_k, w_q, x, mu - (4.0 / lam) * g_f, lam) > f0
    assert rises_beyond >= N_INSTANCES // 2, rises_beyond


# ---------------------------------------------------------------------------
# prop-slot-collapse
# ---------------------------------------------------------------------------


def _lstsq(design_rows, target_rows):
    return np.linalg.lstsq(np.array(design_rows), np.array(target_rows), rcond=None)[0].T


def test_slot_m_step_closed_forms_are_least_squares_minimisers():
    """prop-slot-collapse (1), (4): each closed form (pseudo-inverse) equals the
    minimum-norm least-squares solution from numpy.linalg.lstsq on the stacked rows
    sqrt(A_ji) mu_i -> sqrt(A_ji) W_K x_j, zeroes the complex-step gradient of the
    surrogate, and alternating them never increases L >= 0 = L(0, 0). Two of the four
    shapes have fewer slots than dimensions, where C_mumu (rank <= S) has no inverse."""
    singular = 0
    for _, _, (n, s, _dx, dmu, _h), (w_k, w_q, x, mu) in instances(703):
        a = attention_np(w_k, w_q, x, mu)
        c_mumu = mu.T @ np.diag(a.sum(0)) @ mu
        assert np.linalg.matrix_rank(c_mumu) <= s
        singular += np.linalg.matrix_rank(c_mumu) < dmu
        p = params(w_k, w_q)
        pairs = list(itertools.product(range(n), range(s)))
        new_q = np.asarray(m_step_w_q(p, x, mu, a))
        ref_q = _lstsq(
            [np.sqrt(a[j, i]) * mu[i] for j, i in pairs], [np.sqrt(a[j, i]) * (w_k @ x[j]) for j, i in pairs]
        )
        assert relative_error_l2(new_q, ref_q) < 1e-8
        g0 = np.linalg.norm(complex_step(surrogate_np, (w_k, w_q, x, mu, a), 1))
        g1 = np.linalg.norm(complex_step(surrogate_np, (w_k, new_q, x, mu, a), 1))
        assert g1 < 1e-9 * max(g0, 1.0)
        new_k = np.asarray(m_step_w_k(params(w_k, new_q), x, mu, a))
        ref_k = _lstsq(
            [np.sqrt(a[j, i]) * x[j] for j, i in pairs], [np.sqrt(a[j, i]) * (new_q @ mu[i]) for j, i in pairs]
        )
        assert relative_error_l2(new_k, ref_k) < 1e-8
        values = [
            surrogate_np(w_k, w_q, x, mu, a),
            surrogate_np(w_k, new_q, x, mu, a),
            surrogate_np(new_k, new_q, x, mu, a),
        ]
        assert np.all(np.diff(values) <= 1e-12 * values[0]) and min(values) >= 0
        assert surrogate_np(0 * w_k, 0 * w_q, x, mu, a) == 0.0
    assert singular >= N_INSTANCES // 2


def _sweep_matrix(x, mu, a):
    c_xmu = x.T @ a @ mu
    c_mumu = mu.T @ np.diag(a.sum(0)) @ mu
    c_xx = x.T @ np.diag(a.sum(1)) @ x
    return c_xmu @ np.linalg.pinv(c_mumu) @ c_xmu.T @ np.linalg.inv(c_xx), c_xmu, c_mumu, c_xx


def _canonical_correlations_squared(c_xmu, c_mumu, c_xx):
    """Squared singular values of C_xx^{-1/2} C_xmu (C_mumu^+)^{1/2}, by eigh and svd."""
    ex, vx = np.linalg.eigh(c_xx)
    em, vm = np.linalg.eigh(c_mumu)
    keep = em > 1e-10 * em.max()
    inv_sqrt_x = vx @ np.diag(ex**-0.5) @ vx.T
    pinv_sqrt_m = vm[:, keep] @ np.diag(em[keep] ** -0.5) @ vm[:, keep].T
    return np.linalg.svd(inv_sqrt_x @ c_xmu @ pinv_sqrt_m, compute_uv=False) ** 2


def test_slot_m_step_sweeps_contract_at_the_canonical_correlation_rate():
    """prop-slot-collapse (2): t sweeps of the package's closed forms map W_K to W_K T^t
    (t = 1..4); the eigenvalues of T are real, in [0, 1], and equal the squared singular
    values of the canonical-correlation matrix (a different algorithm); with random
    tokens (N > d_x) and slots every rho(T) < 1."""
    for _, _, _, (w_k, w_q, x, mu) in instances(704, MORE_TOKENS):
        a = attention_np(w_k, w_q, x, mu)
        t_mat, c_xmu, c_mumu, c_xx = _sweep_matrix(x, mu, a)
        p = params(w_k, w_q)
        for t in range(1, 5):
            p = p._replace(w_q=m_step_w_q(p, x, mu, a))
            p = p._replace(w_k=m_step_w_k(p, x, mu, a))
            expected = w_k @ np.linalg.matrix_power(t_mat, t)
            assert np.linalg.norm(np.asarray(p.w_k) - expected) <= 1e-9 * np.linalg.norm(w_k)
        eig = np.linalg.eigvals(t_mat)
        assert np.max(np.abs(eig.imag)) < 1e-9
        eig = np.sort(eig.real)[::-1]
        cc = np.sort(_canonical_correlations_squared(c_xmu, c_mumu, c_xx))[::-1]
        top = np.zeros(len(eig))
        top[: min(len(cc), len(eig))] = cc[: len(eig)]
        assert np.max(np.abs(eig - top)) < 1e-9
        assert eig.min() > -1e-10 and eig.max() < 1 - 1e-6


def test_slot_m_step_does_not_contract_when_tokens_and_slots_share_an_affine_constant():
    """prop-slot-collapse (2), the genericity condition: if u.x_j = 1 for every token (a
    constant feature) and v.mu_i = 1 for every slot (possible when S <= d_mu), the
    correlation is exactly 1, rho(T) = 1, and the maps stop shrinking: after 200 sweeps
    |W_K| no longer changes (ratio 1 to 1e-12) and keeps at least 5% of its start."""
    shapes = [sh for sh in MORE_TOKENS if sh[1] <= sh[3] and sh[2] >= 2]
    for _, _, _, (w_k, w_q, x, mu) in instances(705, shapes):
        x[:, -1] = 1.0
        a = attention_np(w_k, w_q, x, mu)
        t_mat, c_xmu, c_mumu, c_xx = _sweep_matrix(x, mu, a)
        assert abs(np.max(np.abs(np.linalg.eigvals(t_mat))) - 1.0) < 1e-9
        assert abs(np.max(_canonical_correlations_squared(c_xmu, c_mumu, c_xx)) - 1.0) < 1e-9
        _, trace = sa.unconstrained_m_steps(params(w_k, w_q), x, mu, a, n_steps=200)
        norm_k = np.asarray(trace.norm_k)
        assert abs(norm_k[-1] / norm_k[-2] - 1.0) < 1e-12
        assert norm_k[-1] > 0.05 * norm_k[0]


def test_slot_surrogate_minimiser_is_not_a_stationary_point_of_eq12():
    """prop-slot-collapse (3): at the surrogate's W_Q, the complex-step gradient of eq. (12)
    is -W_K C_xmu (attention recomputed there) and is not zero; as W -> 0, eq. (12) tends
    to -N ln S, and W = 0 is not a minimum: one of +-eps W_Q lies below it (concavity)."""
    ratios = []
    for _, _, _, (w_k, w_q, x, mu) in instances(706):
        a = attention_np(w_k, w_q, x, mu)
        new_q = np.asarray(m_step_w_q(params(w_k, w_q), x, mu, a))
        g = complex_step(energy_np, (w_k, new_q, x, mu), 1)
        assert relative_error_l2(-w_k @ x.T @ attention_np(w_k, new_q, x, mu) @ mu, g) < 1e-10
        ratios.append(np.linalg.norm(g) / np.linalg.norm(complex_step(energy_np, (w_k, w_q, x, mu), 1)))
        n, s = len(x), len(mu)
        assert abs(energy_np(1e-6 * w_k, 1e-6 * w_q, x, mu) + n * np.log(s)) < 1e-9 * n
        e_pm = [energy_np(w_k, sign * 1e-3 * w_q, x, mu) for sign in (1, -1)]
        assert min(e_pm) < -n * np.log(s)
    assert min(ratios) > 1e-3, min(ratios)


# ---------------------------------------------------------------------------
# prop-slot-procrustes
# ---------------------------------------------------------------------------


def _objective(w_k, w, w_q, x, mu, a, rho):
    return surrogate_np(w_k, w, x, mu, a) + rho * float(np.sum((w - w_q) ** 2))


def test_procrustes_step_is_the_minimiser_over_the_orthogonal_group():
    """prop-slot-procrustes, first claim: for d_mu = h = 2, U V^T matches the minimum of
    L + rho |W - W_Q|^2 over a 7200-point grid of O(2) (rotations and reflections) to grid
    resolution and is never above it; for the other shapes (Stiefel W_Q, h >= d_mu) it
    is never above 50 random orthonormal W nor 20 small moves along the manifold."""
    angles = np.linspace(0, 2 * np.pi, 3600, endpoint=False)
    rot = np.stack(
        [np.stack([np.cos(angles), -np.sin(angles)], -1), np.stack([np.sin(angles), np.cos(angles)], -1)], -2
    )
    grid = np.concatenate([rot, rot @ np.diag([1.0, -1.0])])
    shapes = [(1, 3, 2, 2, 2), (8, 3, 3, 2, 2)] + STIEFEL
    for k, rng, (_n, _s, _dx, dmu, h), (w_k, _, x, mu) in instances(707, shapes):
        rho = 0.0 if k % 2 == 0 else float(rng.uniform(0, 2))
        w_q = grid[rng.integers(len(grid))] if h == dmu == 2 else orthonormal_columns(rng, h, dmu)
        a = attention_np(w_k, w_q, x, mu)
        new = np.asarray(procrustes_w_q(params(w_k, w_q), x, mu, a, rho))
        assert np.allclose(new.T @ new, np.eye(dmu), atol=1e-12)
        best = _objective(w_k, new, w_q, x, mu, a, rho)
        tol = 1e-10 * max(1.0, abs(best))
        if h == dmu == 2:
            d2 = np.sum(((x @ w_k.T)[None, :, None, :] - np.einsum("gab,ib->gia", grid, mu)[:, None]) ** 2, -1)
            values = np.einsum("ji,gji->g", a, d2) + rho * np.sum((grid - w_q) ** 2, axis=(1, 2))
            assert best <= values.min() + tol
            assert values.min() - best <= 1e-4 * max(1.0, abs(best))  # grid spacing 1.7e-3 rad
        else:
            others = [orthonormal_columns(rng, h, dmu) for _ in range(50)]
            for _ in range(20):
                q, r = np.linalg.qr(new + 1e-3 * rng.normal(size=new.shape))
                others.append(q * np.sign(np.diag(r)))
            assert all(best <= _objective(w_k, w, w_q, x, mu, a, rho) + tol for w in others)


def test_procrustes_step_lowers_surrogate_energy_and_em_free_energy():
    """prop-slot-procrustes, bounds: with orthonormal W_Q (and an arbitrary W_K), the step
    never raises L nor eq. (12), both evaluated here; EM (package CCCP E-step, package
    Procrustes M-step) never raises F_lam over 5 iterations. Without the condition
    (W_Q = 3 x orthonormal) the same step raises eq. (12) on most instances."""
    raised_without = 0
    for _, rng, (_n, _s, _dx, dmu, h), (w_k, _, x, mu) in instances(708, STIEFEL):
        w_q = orthonormal_columns(rng, h, dmu)
        rho = float(rng.uniform(0, 1))
        a = attention_np(w_k, w_q, x, mu)
        new = np.asarray(procrustes_w_q(params(w_k, w_q), x, mu, a, rho))
        l0, l1 = surrogate_np(w_k, w_q, x, mu, a), surrogate_np(w_k, new, x, mu, a)
        e0, e1 = energy_np(w_k, w_q, x, mu), energy_np(w_k, new, x, mu)
        assert l1 <= l0 + 1e-11 * max(1.0, l0)
        assert e1 <= e0 + 1e-11 * max(1.0, abs(e0))
        lam = float(rng.uniform(0.3, 3))
        f_values, m, wq = [energy_np(w_k, w_q, x, mu, lam)], mu, w_q
        for _ in range(5):
            p = params(w_k, wq)
            m = np.asarray(cccp_step(p, x, m, lam))
            f_values.append(energy_np(w_k, wq, x, m, lam))
            wq = np.asarray(procrustes_w_q(p, x, m, attention_np(w_k, wq, x, m), rho))
            f_values.append(energy_np(w_k, wq, x, m, lam))
        f_values = np.array(f_values)
        assert np.all(np.diff(f_values) <= 1e-10 * np.maximum(np.abs(f_values[:-1]), 1.0))
        big = 3.0 * w_q
        new_big = np.asarray(procrustes_w_q(params(w_k, big), x, mu, attention_np(w_k, big, x, mu), rho))
        raised_without += energy_np(w_k, new_big, x, mu) > energy_np(w_k, big, x, mu)
    assert raised_without >= N_INSTANCES // 2, raised_without
