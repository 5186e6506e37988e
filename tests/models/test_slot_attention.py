"""Tests for lse_energy.slot_attention (Tschantz 2025 §5, §9, App. B; Singh & Buckley 2023 §4.3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from sklearn.metrics import adjusted_rand_score

from lse_energy import _progress
from lse_energy import slot_attention as sa
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def problem(seed, n=7, s=4, d=3, h=None, dmu=None):
    """Random tokens, slots and (non-square allowed) maps, of moderate scale."""
    h = d if h is None else h
    dmu = d if dmu is None else dmu
    k = jax.random.split(jax.random.key(seed), 4)
    params = sa.Params(jax.random.normal(k[0], (h, d)) / np.sqrt(d), jax.random.normal(k[1], (h, dmu)) / np.sqrt(dmu))
    x = jax.random.normal(k[2], (n, d))
    mu = jax.random.normal(k[3], (s, dmu))
    return params, x, mu


def orthogonal(key, d):
    q, r = jnp.linalg.qr(jax.random.normal(key, (d, d)))
    return q * jnp.sign(jnp.diag(r))


# ---------------------------------------------------------------------------
# Energy
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_matches_direct_formula(seed):
    params, x, mu = problem(seed, h=5, dmu=2)
    s = (x @ params.w_k.T) @ (mu @ params.w_q.T).T
    np.testing.assert_allclose(sa.energy(params, x, mu), -jnp.sum(logsumexp(s, axis=1)), rtol=1e-13)
    a = sa.attention(params, x, mu)
    # softmax over slots (the structural prior swapped relative to Hopfield)
    np.testing.assert_allclose(a, jax.nn.softmax(s, axis=1), rtol=1e-13)
    np.testing.assert_allclose(a.sum(1), 1.0, rtol=1e-14)
    lam = 0.7
    np.testing.assert_allclose(
        sa.regularised_energy(params, x, mu, lam), sa.energy(params, x, mu) + 0.5 * lam * jnp.sum(mu**2), rtol=1e-13
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_depends_on_maps_only_through_product(seed):
    params, x, mu = problem(seed)
    g = jax.random.normal(jax.random.key(100 + seed), (3, 3)) + 3 * jnp.eye(3)
    other = sa.Params(g @ params.w_k, jnp.linalg.inv(g).T @ params.w_q)
    np.testing.assert_allclose(sa.energy(other, x, mu), sa.energy(params, x, mu), rtol=1e-12)


def test_energy_has_no_minimum_in_slots():
    params, x, mu = problem(0)
    e = [float(sa.energy(params, x, t * mu)) for t in (1.0, 10.0, 100.0)]
    # E(t mu) ~ -t sum_j max_i s_ji: strictly decreasing, without bound
    slope = float(jnp.sum(jnp.max(sa.sim(params, x, mu), axis=1)))
    assert slope > 0
    assert e[0] > e[1] > e[2]
    assert e[2] < -50 * slope


# ---------------------------------------------------------------------------
# Gradients: eqs. (13), (14) and the parameter gradients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_x_eq13(seed):
    params, x, mu = problem(seed, h=5, dmu=2)
    assert_gradient(lambda v: sa.energy(params, v, mu), lambda v: sa.grad_x(params, v, mu), x)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_mu_eq14(seed):
    params, x, mu = problem(seed, h=5, dmu=2)
    assert_gradient(lambda v: sa.energy(params, x, v), lambda v: sa.grad_mu(params, x, v), mu)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_w_k(seed):
    params, x, mu = problem(seed, h=5, dmu=2)
    assert_gradient(
        lambda w: sa.energy(params._replace(w_k=w), x, mu),
        lambda w: sa.grad_w_k(params._replace(w_k=w), x, mu),
        params.w_k,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_w_q(seed):
    params, x, mu = problem(seed, h=5, dmu=2)
    assert_gradient(
        lambda w: sa.energy(params._replace(w_q=w), x, mu),
        lambda w: sa.grad_w_q(params._replace(w_q=w), x, mu),
        params.w_q,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_free_energy_mu(seed):
    params, x, mu = problem(seed)
    lam = 0.5 + seed
    assert_gradient(
        lambda v: sa.regularised_energy(params, x, v, lam),
        lambda v: sa.grad_regularised_energy_mu(params, x, v, lam),
        mu,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_gradients_are_seed_formulas(seed):
    """Eqs. (13)-(14) written out term by term, with the seed's minus sign."""
    params, x, mu = problem(seed)
    a = sa.attention(params, x, mu)
    b = params.w_k.T @ params.w_q
    rhs13 = jnp.stack([sum(a[j, i] * b @ mu[i] for i in range(mu.shape[0])) for j in range(x.shape[0])])
    rhs14 = jnp.stack([sum(a[j, i] * b.T @ x[j] for j in range(x.shape[0])) for i in range(mu.shape[0])])
    np.testing.assert_allclose(-sa.grad_x(params, x, mu), rhs13, rtol=1e-12)
    np.testing.assert_allclose(-sa.grad_mu(params, x, mu), rhs14, rtol=1e-12)


# ---------------------------------------------------------------------------
# E-step
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_descent_on_eq12_descends_for_any_step_and_diverges(seed):
    params, x, mu = problem(seed)
    for step in (0.01, 1.0, 10.0):
        m = mu
        for _ in range(20):
            g = sa.grad_mu(params, x, m)
            new = sa.gradient_step(params, x, m, step=step, lam=0.0)
            # concavity: E(mu - eta g) <= E(mu) - eta ||g||^2, for every eta > 0
            assert sa.energy(params, x, new) <= sa.energy(params, x, m) - step * jnp.sum(g**2) + 1e-9
            m = new
    _, trace = sa.e_step(params, x, mu, n_steps=200, method="gradient", step=0.1, lam=0.0)
    assert np.all(np.diff(np.asarray(trace)) <= 1e-12)
    m_far, _ = sa.e_step(params, x, mu, n_steps=2000, method="gradient", step=0.1, lam=0.0)
    assert jnp.linalg.norm(m_far) > 10 * jnp.linalg.norm(mu)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eta_lam", [0.3, 1.0, 1.9])
def test_gradient_descent_on_free_energy_monotone(seed, eta_lam):
    params, x, mu = problem(seed)
    lam = 2.0
    _, trace = sa.e_step(params, x, mu, n_steps=100, method="gradient", step=eta_lam / lam, lam=lam)
    assert np.all(np.diff(np.asarray(trace)) <= 1e-12 * np.abs(np.asarray(trace[1:])).max())


@pytest.mark.parametrize("seed", SEEDS)
def test_cccp_fixed_point_monotone_and_stationary(seed):
    params, x, mu = problem(seed)
    lam = 1.5
    # the CCCP step is the explicit formula of Singh & Buckley and the eta = 1/lam gradient step
    a = sa.attention(params, x, mu)
    formula = (a.T @ x) @ params.w_k.T @ params.w_q / lam
    np.testing.assert_allclose(sa.cccp_step(params, x, mu, lam), formula, rtol=1e-12)
    np.testing.assert_allclose(sa.gradient_step(params, x, mu, step=1 / lam, lam=lam), formula, rtol=1e-12, atol=1e-14)
    m, trace = sa.e_step(params, x, mu, n_steps=300, method="cccp", lam=lam)
    trace = np.asarray(trace)
    assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace).max())
    # converged to a stationary point of F_lambda
    g = sa.grad_regularised_energy_mu(params, x, m, lam)
    assert jnp.linalg.norm(g) <= 1e-8 * jnp.linalg.norm(sa.grad_mu(params, x, m))


def test_e_step_same_result_twice():
    params, x, mu = problem(3)
    a = sa.e_step(params, x, mu, n_steps=10)
    b = sa.e_step(params, x, mu, n_steps=10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


# ---------------------------------------------------------------------------
# M-step (§9)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("s", [2, 6])  # s=2 < d: the seed's inverse does not exist
def test_m_step_closed_forms_zero_surrogate_gradient(seed, s):
    params, x, mu = problem(seed, n=9, s=s, d=4)
    a = sa.attention(params, x, mu)
    L = lambda p: sa.surrogate(p, x, mu, a)  # noqa: E731
    scale = jnp.linalg.norm(jax.grad(L)(params._replace(w_q=jnp.zeros_like(params.w_q))).w_q)
    wq = sa.m_step_w_q(params, x, mu, a)
    g = jax.grad(L)(params._replace(w_q=wq))
    assert jnp.linalg.norm(g.w_q) <= 1e-10 * scale
    scale = jnp.linalg.norm(jax.grad(L)(params._replace(w_k=jnp.zeros_like(params.w_k))).w_k)
    wk = sa.m_step_w_k(params, x, mu, a)
    g = jax.grad(L)(params._replace(w_k=wk))
    assert jnp.linalg.norm(g.w_k) <= 1e-10 * scale
    # and each is a minimiser: random perturbations never do better
    for t in range(5):
        dq = jax.random.normal(jax.random.key(50 + t), wq.shape)
        assert L(params._replace(w_q=wq)) <= L(params._replace(w_q=wq + 0.1 * dq))


@pytest.mark.parametrize("seed", SEEDS)
def test_surrogate_matches_direct_formula(seed):
    params, x, mu = problem(seed, h=5, dmu=2)
    a = sa.attention(params, x, mu)
    direct = sum(
        a[j, i] * jnp.sum((params.w_k @ x[j] - params.w_q @ mu[i]) ** 2)
        for j in range(x.shape[0])
        for i in range(mu.shape[0])
    )
    np.testing.assert_allclose(sa.surrogate(params, x, mu, a), direct, rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_unconstrained_alternation_collapses(seed):
    params, x, mu = problem(seed, n=30, s=5, d=3)
    a = sa.attention(params, x, mu)
    _, tr = sa.unconstrained_m_steps(params, x, mu, a, n_steps=60)
    sur = np.asarray(tr.surrogate)
    assert np.all(np.diff(sur) <= 1e-12 * sur[0])  # block coordinate descent on L
    assert tr.norm_k[-1] < 1e-2 * tr.norm_k[1]
    assert tr.norm_q[-1] < 1e-2 * tr.norm_q[1]
    # the rate is the top squared canonical correlation: rho(T), T = C_xm C_mm^+ C_mx C_xx^+
    c_xm = x.T @ a @ mu
    c_mm = mu.T @ (a.sum(0)[:, None] * mu)
    c_xx = x.T @ x
    t = c_xm @ jnp.linalg.pinv(c_mm) @ c_xm.T @ jnp.linalg.inv(c_xx)
    rho = float(jnp.max(jnp.abs(jnp.linalg.eigvals(t))))
    assert rho < 1
    ratio = float(tr.norm_k[-1] / tr.norm_k[-2])
    np.testing.assert_allclose(ratio, rho, rtol=1e-6)
    # eq. (12) goes to its value at W = 0, -N ln S, not to a stationary point of its own
    np.testing.assert_allclose(tr.energy[-1], -x.shape[0] * np.log(mu.shape[0]), rtol=1e-3)


@pytest.mark.parametrize("seed", SEEDS)
def test_surrogate_stationary_point_is_not_energy_stationary(seed):
    params, x, mu = problem(seed, n=30, s=5, d=3)
    a = sa.attention(params, x, mu)
    p = params._replace(w_q=sa.m_step_w_q(params, x, mu, a))
    g_energy = sa.grad_w_q(p, x, mu)
    assert jnp.linalg.norm(g_energy) > 0.1 * jnp.linalg.norm(sa.grad_w_q(params, x, mu))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("prox", [0.0, 0.5])
def test_procrustes_minimises_surrogate_and_energy_bound(seed, prox):
    params, x, mu = problem(seed, n=20, s=5, d=3)
    params = params._replace(w_q=orthogonal(jax.random.key(10 + seed), 3))
    a = sa.attention(params, x, mu)
    w = sa.procrustes_w_q(params, x, mu, a, prox=prox)
    np.testing.assert_allclose(w.T @ w, jnp.eye(3), atol=1e-12)
    new = params._replace(w_q=w)
    obj = lambda p: sa.surrogate(p, x, mu, a) + prox * jnp.sum((p.w_q - params.w_q) ** 2)  # noqa: E731
    # global minimiser over the orthogonal group: beats random orthogonal matrices
    for t in range(20):
        q = orthogonal(jax.random.key(1000 + t), 3)
        assert obj(new) <= obj(params._replace(w_q=q)) + 1e-10
    # first-order condition on the group: W^T G symmetric for the Euclidean gradient G
    gq = jax.grad(obj)(new).w_q
    m = w.T @ gq
    assert jnp.linalg.norm(m - m.T) <= 1e-10 * jnp.linalg.norm(gq)
    # never increases the surrogate, nor eq. (12), even for a non-orthogonal W_K
    assert sa.surrogate(new, x, mu, a) <= sa.surrogate(params, x, mu, a) + 1e-10
    assert sa.energy(new, x, mu) <= sa.energy(params, x, mu) + 1e-10


@pytest.mark.parametrize("seed", SEEDS)
def test_fit_procrustes_monotone_and_converges(seed):
    pts, labels, _ = sa.blob_scene(3, key=jax.random.key(seed), n_per_blob=20)
    x = sa.fourier_features(pts, n_features=20, lengthscale=0.2, key=jax.random.key(7))
    mu0 = sa.init_slots(x, 4, key=jax.random.key(seed))
    params = sa.Params(jnp.eye(20), orthogonal(jax.random.key(seed), 20))
    fit = sa.fit(params, x, mu0, n_steps=60, n_e_steps=1, lam=1.0, prox=1e-3)
    tr = fit.extras
    f = np.asarray(tr.regularised_energy).reshape(-1)
    np.testing.assert_array_equal(fit.energies, np.concatenate([f[:1], tr.regularised_energy[:, -1]]))
    np.testing.assert_allclose(
        float(fit.energies[-1]), float(sa.regularised_energy(fit.params, x, tr.mu, 1.0)), rtol=1e-12
    )
    assert np.all(np.diff(f) <= 1e-10 * np.abs(f).max())
    assert np.all(np.asarray(tr.surrogate_after) <= np.asarray(tr.surrogate_before) * (1 + 1e-12))
    assert tr.delta_w_q[-1] < 1e-6
    np.testing.assert_allclose(tr.norm_w_q, np.sqrt(20), rtol=1e-12)


def test_fit_same_result_twice():
    params, x, mu = problem(4, n=12, s=3, d=3)
    params = params._replace(w_q=orthogonal(jax.random.key(0), 3))
    a = sa.fit(params, x, mu, n_steps=5)
    b = sa.fit(params, x, mu, n_steps=5)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(u, v)


# ---------------------------------------------------------------------------
# Experiment: objects from blobs (outside oracle: sklearn's adjusted Rand index)
# ---------------------------------------------------------------------------


def test_slots_discover_blobs():
    """Protocol of the chapter: 20 scenes of 3-5 blobs, S = 5 slots, ARI of argmax_i."""
    scores = []
    for s in range(20):
        k = jax.random.split(jax.random.key(s), 3)
        pts, labels, _ = sa.blob_scene(3 + s % 3, key=k[0])
        x = sa.fourier_features(pts, n_features=200, lengthscale=0.2, key=k[1])
        mu0 = sa.init_slots(x, 5, key=k[2])
        params = sa.Params(jnp.eye(200), jnp.eye(200))
        mu, trace = sa.e_step(params, x, mu0, n_steps=50, method="cccp", lam=1.0)
        assert np.all(np.diff(np.asarray(trace)) <= 1e-10 * np.abs(np.asarray(trace)).max())
        pred = np.asarray(jnp.argmax(sa.attention(params, x, mu), axis=1))
        scores.append(adjusted_rand_score(np.asarray(labels), pred))
    assert np.mean(scores) >= 0.9


def test_helpers_same_key_same_result():
    key = jax.random.key(11)
    a = sa.blob_scene(4, key=key)
    b = sa.blob_scene(4, key=key)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    c = sa.blob_scene(4, key=jax.random.key(12))
    assert not np.array_equal(a[0], c[0])
    pts = a[0]
    assert np.min(np.linalg.norm(a[2][:, None] - a[2][None], axis=-1) + 9 * np.eye(4)) >= 0.5
    f1 = sa.fourier_features(pts, n_features=30, lengthscale=0.3, key=key)
    f2 = sa.fourier_features(pts, n_features=30, lengthscale=0.3, key=key)
    np.testing.assert_array_equal(f1, f2)
    np.testing.assert_array_equal(sa.init_slots(f1, 4, key=key), sa.init_slots(f2, 4, key=key))


def test_fourier_features_approximate_gaussian_kernel():
    pts = jax.random.normal(jax.random.key(0), (6, 2)) * 0.3
    f = sa.fourier_features(pts, n_features=40000, lengthscale=0.4, key=jax.random.key(1))
    k = jnp.exp(-jnp.sum((pts[:, None] - pts[None]) ** 2, -1) / (2 * 0.4**2))
    # Monte Carlo error ~ 1/sqrt(D) = 0.005; allow 4 standard errors (entries have variance <= 1/D)
    assert jnp.max(jnp.abs(f @ f.T - k)) < 4 * np.sqrt(2.0 / 40000) * 2


def test_init_slots_farthest_point():
    x = jnp.array([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [0.0, 3.0]])
    mu = sa.init_slots(x, 3, key=jax.random.key(0))
    # whatever the first pick, the three slots land on three distinct far-apart groups
    chosen = {tuple(np.asarray(m)) for m in mu}
    assert (5.0, 0.0) in chosen and (0.0, 3.0) in chosen


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def test_validation_errors():
    params, x, mu = problem(0)
    with pytest.raises(
        ValueError, match=r"mu must have shape \(n, d_slot = params.w_q.shape\[1\]\) with n >= 1; got \(3,\)"
    ):
        sa.grad_mu(params, x, mu[0])
    with pytest.raises(ValueError, match="n_steps"):
        sa.e_step(params, x, mu, n_steps=0)
    with pytest.raises(ValueError, match="method"):
        sa.e_step(params, x, mu, n_steps=3, method="newton")
    with pytest.raises(ValueError, match="step"):
        sa.e_step(params, x, mu, n_steps=3, method="gradient")
    a = sa.attention(params, x, mu)
    with pytest.raises(ValueError, match="non-negative"):
        sa.m_step_w_q(params, x, mu, -a)
    with pytest.raises(ValueError, match="n_steps"):
        sa.unconstrained_m_steps(params, x, mu, a, n_steps=0)
    with pytest.raises(ValueError, match="orthonormal"):
        sa.fit(params, x, mu, n_steps=2)
    with pytest.raises(ValueError, match="m_step"):
        sa.fit(params, x, mu, n_steps=2, m_step="gradient")
    with pytest.raises(ValueError, match="prox"):
        sa.procrustes_w_q(params, x, mu, a, prox=-1.0)
    with pytest.raises(ValueError, match="n_features"):
        sa.fourier_features(x, n_features=0, lengthscale=1.0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="n_blobs"):
        sa.blob_scene(0, key=jax.random.key(0))


def test_fit_progress_bar_reaches_total_and_leaves_results_unchanged():
    params, x, mu = problem(4, n=12, s=3, d=3)
    params = params._replace(w_q=orthogonal(jax.random.key(0), 3))
    a = sa.fit(params, x, mu, n_steps=7)
    b = sa.fit(params, x, mu, n_steps=7, progress=True)
    assert _progress.last == (7, 7) and _progress._bar is None
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="progress must be a bool"):
        sa.fit(params, x, mu, n_steps=2, progress=1)


def test_procrustes_accepts_a_float32_qr_factor_and_refuses_a_scaled_one():
    """The orthonormality check on ``params.w_q`` follows the dtype (``sqrt(eps)``): a float32 QR factor,
    orthonormal to float32 round-off (about 1e-7, above the 1e-8 a fixed tolerance asked for), is
    accepted; the same factor scaled by 1.01 (columns of norm 1.01) is refused (issue 48)."""
    q, _ = jnp.linalg.qr(jax.random.normal(jax.random.key(1), (4, 2), jnp.float32))
    err = float(np.max(np.abs(np.asarray(q, np.float64).T @ np.asarray(q, np.float64) - np.eye(2))))
    assert err > 1e-8  # the old fixed tolerance would have refused it
    x = jax.random.normal(jax.random.key(3), (6, 2), jnp.float32)
    mu = jax.random.normal(jax.random.key(4), (3, 2), jnp.float32)
    w_k = jax.random.normal(jax.random.key(2), (4, 2), jnp.float32)
    result = sa.fit(sa.Params(w_k, q), x, mu, n_steps=2, m_step="procrustes")
    assert result.energies.dtype == jnp.float32
    with pytest.raises(ValueError, match="params.w_q must have orthonormal columns"):
        sa.fit(sa.Params(w_k, 1.01 * q), x, mu, n_steps=2, m_step="procrustes")
