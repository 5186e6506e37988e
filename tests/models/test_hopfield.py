"""Tests for lse_energy.hopfield: eqs. (9)-(11) of Tschantz (2025) and the CCCP step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy import core, hopfield
from lse_energy.testing import assert_gradient
from tests.support import SEEDS

BETAS = [0.3, 1.0, 4.0]


def instance(seed, n=5, k=7, d=4, scale=1.0):
    km, kx = jax.random.split(jax.random.key(seed))
    memories = scale * jax.random.normal(km, (k, d))
    queries = scale * jax.random.normal(kx, (n, d))
    return memories, queries


# --- energy -------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_at_beta_one_is_eq9(seed):
    m, x = instance(seed)
    # eq. (9) written out directly with numpy, no shared code path
    sim = np.asarray(x) @ np.asarray(m).T
    expected = -np.sum(np.log(np.sum(np.exp(sim), axis=1)))
    np.testing.assert_allclose(hopfield.energy(m, x, beta=1.0), expected, rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", BETAS)
def test_energy_scaling(seed, beta):
    m, x = instance(seed)
    np.testing.assert_allclose(hopfield.energy(m, x, beta=beta), core.energy(beta * x @ m.T) / beta, rtol=1e-13)
    np.testing.assert_allclose(
        hopfield.regularised_energy(m, x, beta=beta),
        jnp.sum(hopfield.regularised_energies(m, x, beta=beta)),
        rtol=1e-13,
    )


def test_energy_tends_to_minus_max_similarity():
    m, x = instance(3)
    limit = -np.sum(np.max(np.asarray(x @ m.T), axis=1))
    e = float(hopfield.energy(m, x, beta=1e6))
    # beta max <= lse <= beta max + ln K, so limit - N ln K / beta <= E_beta <= limit
    tol = 1e-12 * abs(limit)
    assert limit - 5 * np.log(7) / 1e6 - tol <= e <= limit + tol


# --- gradients ----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", BETAS)
def test_grad_queries_eq10(seed, beta):
    m, x = instance(seed)
    assert_gradient(
        lambda q: hopfield.energy(m, q, beta=beta), lambda q: hopfield.grad_queries(m, q, beta=beta), x, n_coords=None
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", BETAS)
def test_grad_memories_eq11(seed, beta):
    m, x = instance(seed)
    assert_gradient(
        lambda mm: hopfield.energy(mm, x, beta=beta),
        lambda mm: hopfield.grad_memories(mm, x, beta=beta),
        m,
        n_coords=None,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_regularised(seed):
    m, x = instance(seed)
    assert_gradient(
        lambda q: hopfield.regularised_energy(m, q, beta=2.0),
        lambda q: hopfield.grad_regularised_energy_queries(m, q, beta=2.0),
        x,
        n_coords=None,
    )
    # update = x - grad E_reg: a unit gradient step
    np.testing.assert_allclose(
        hopfield.update(m, x, beta=2.0),
        x - hopfield.grad_regularised_energy_queries(m, x, beta=2.0),
        rtol=1e-12,
        atol=1e-14,
    )


# --- unboundedness of eq. (9) and the lower bound of the regularised energy ----


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", BETAS)
def test_bare_energy_unbounded_regularised_bounded(seed, beta):
    m, _ = instance(seed)
    mu = seed % m.shape[0]
    t = jnp.array([1.0, 10.0, 100.0, 1e3, 1e4])
    bare = jnp.array([hopfield.energy(m, ti * m[mu][None], beta=beta) for ti in t])
    reg = jnp.array([hopfield.regularised_energy(m, ti * m[mu][None], beta=beta) for ti in t])
    norm2 = float(m[mu] @ m[mu])
    # E(t m_mu) <= -t |m_mu|^2 -> -inf, and strictly decreasing along the ray
    assert np.all(np.asarray(bare) <= -np.asarray(t) * norm2 * (1 - 1e-12))
    assert np.all(np.diff(np.asarray(bare)) < 0)
    lower = -(np.log(m.shape[0]) / beta + 0.5 * float(jnp.max(jnp.sum(m**2, 1))))
    assert np.all(np.asarray(reg) >= lower)
    assert reg[-1] > 0  # grows like t^2 / 2


@pytest.mark.parametrize("seed", SEEDS)
def test_regularised_lower_bound_random_points(seed):
    m, _ = instance(seed, k=9)
    x = 3.0 * jax.random.normal(jax.random.key(100 + seed), (500, 4))
    for beta in [0.1, 1.0, 10.0]:
        e = hopfield.regularised_energies(m, x, beta=beta)
        lower = -(np.log(9) / beta + 0.5 * float(jnp.max(jnp.sum(m**2, 1))))
        assert float(jnp.min(e)) >= lower


# --- CCCP ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("beta", [0.05, 0.5, 2.0, 8.0, 50.0])
def test_energy_never_increases_along_update(seed, beta):
    m, x = instance(seed, n=6, k=10, d=5, scale=1.5)
    for _ in range(15):
        x_new = hopfield.update(m, x, beta=beta)
        e_old = hopfield.regularised_energies(m, x, beta=beta)
        e_new = hopfield.regularised_energies(m, x_new, beta=beta)
        step = 0.5 * jnp.sum((x_new - x) ** 2, axis=1)
        # CCCP sufficient decrease: e_old - e_new >= |x_new - x|^2 / 2
        slack = 1e-12 * (1.0 + jnp.abs(e_old))
        assert bool(jnp.all(e_old - e_new >= step - slack))
        x = x_new


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", BETAS)
def test_update_minimises_cccp_surrogate(seed, beta):
    m, x = instance(seed)
    x_new = hopfield.update(m, x, beta=beta)
    g = jax.grad(lambda q: hopfield.cccp_surrogate(m, q, x, beta=beta))(x_new)
    assert float(jnp.max(jnp.abs(g))) <= 1e-13 * (1 + float(jnp.max(jnp.abs(x_new))))
    # majorises E_reg, touches it at the anchor; minimum value is below E_reg(x)
    s_anchor = hopfield.cccp_surrogate(m, x, x, beta=beta)
    np.testing.assert_allclose(s_anchor, hopfield.regularised_energy(m, x, beta=beta), rtol=1e-13)
    z = x + jax.random.normal(jax.random.key(seed + 50), x.shape)
    assert hopfield.cccp_surrogate(m, z, x, beta=beta) >= hopfield.regularised_energy(m, z, beta=beta)
    # strictly convex quadratic with identity Hessian: S(z) - S(x_new) = |z - x_new|^2 / 2
    np.testing.assert_allclose(
        hopfield.cccp_surrogate(m, z, x, beta=beta) - hopfield.cccp_surrogate(m, x_new, x, beta=beta),
        0.5 * jnp.sum((z - x_new) ** 2),
        rtol=1e-10,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", BETAS)
def test_update_is_dot_product_attention(seed, beta):
    m, x = instance(seed)
    out = hopfield.update(m, x, beta=beta)
    # float64 reference through jax.nn.softmax (not core.weights)
    ref64 = jax.nn.softmax(beta * x @ m.T, axis=-1) @ m
    np.testing.assert_allclose(out, ref64, rtol=1e-12, atol=1e-14)
    # jax.nn.dot_product_attention (keys = values = memories, scale = beta). It always
    # takes the softmax in float32, so the logits carry a relative rounding error
    # u = 2**-24; that is an absolute error u * max|logit| in each exponent, hence a
    # relative error of about that size (plus a few u) in every probability.
    ref = jax.nn.dot_product_attention(x[None, :, None, :], m[None, :, None, :], m[None, :, None, :], scale=beta)[
        0, :, 0, :
    ]
    u = 2.0**-24
    max_logit = float(jnp.max(jnp.abs(beta * x @ m.T)))
    tol = 4 * u * (1 + max_logit) * float(jnp.max(jnp.abs(m)))
    assert float(jnp.max(jnp.abs(out - ref))) <= tol


# --- retrieve -----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_retrieve_matches_update_loop_and_trace(seed):
    m, x = instance(seed)
    out, trace = hopfield.retrieve(m, x, beta=1.5, n_steps=6, return_energy=True)
    ref = x
    energies = [hopfield.regularised_energies(m, ref, beta=1.5)]
    for _ in range(6):
        ref = hopfield.update(m, ref, beta=1.5)
        energies.append(hopfield.regularised_energies(m, ref, beta=1.5))
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(trace, jnp.stack(energies), rtol=1e-12)
    assert trace.shape == (7, 5)
    assert bool(jnp.all(jnp.diff(trace, axis=0) <= 1e-12))
    np.testing.assert_allclose(hopfield.retrieve(m, x, beta=1.5, n_steps=6), out, rtol=0, atol=0)
    out0, tr0 = hopfield.retrieve(m, x, beta=1.5, n_steps=0, return_energy=True)
    np.testing.assert_array_equal(out0, x)
    assert tr0.shape == (1, 5)


@pytest.mark.parametrize("seed", SEEDS)
def test_one_step_retrieval_of_separated_patterns(seed):
    # random +-1 patterns in d = 64, scaled to unit norm: cross-cosines are O(1/8)
    d, k = 64, 20
    key_p, key_f = jax.random.split(jax.random.key(seed))
    m = jax.random.rademacher(key_p, (k, d), dtype=jnp.float64) / np.sqrt(d)
    flip = jax.random.bernoulli(key_f, 0.1, (k, d))
    x = jnp.where(flip, -m, m)  # 10% of the pixels flipped
    beta = 200.0
    out = hopfield.retrieve(m, x, beta=beta, n_steps=1)
    # derived bound: |x_new - m_mu| <= 2 max|m| sum_{nu != mu} exp(-beta (m_mu - m_nu)^T x)
    s = np.asarray(x @ m.T)
    gaps = np.diag(s)[:, None] - s
    np.fill_diagonal(gaps, np.inf)
    bound = 2 * float(jnp.max(jnp.linalg.norm(m, axis=1))) * np.sum(np.exp(-beta * gaps), axis=1)
    err = np.asarray(jnp.linalg.norm(out - m, axis=1))
    assert np.all(err <= bound * (1 + 1e-9) + 1e-15)
    assert np.all(bound < 1e-6)
    # and the nearest stored pattern of every output is the right one
    assert np.all(np.argmax(np.asarray(out @ m.T), axis=1) == np.arange(k))


# --- validation ---------------------------------------------------------------


def test_validation():
    m, x = instance(0)
    with pytest.raises(ValueError, match="queries"):
        hopfield.update(m, x[:, :3], beta=1.0)
    with pytest.raises(ValueError, match="memories"):
        hopfield.update(m[0], x, beta=1.0)
    with pytest.raises(ValueError, match="memories"):
        hopfield.grad_memories(m.at[1, 1].set(jnp.inf), x, beta=1.0)
    with pytest.raises(ValueError, match="patterns"):
        hopfield.classical_store(jnp.array([[1.0, 0.5]]))
    w = hopfield.classical_store(jnp.array([[1.0, -1.0, 1.0]]))
    with pytest.raises(ValueError, match="states"):
        hopfield.classical_retrieve(w, jnp.array([[1.0, 2.0, 1.0]]))
    with pytest.raises(ValueError, match="states"):
        hopfield.classical_retrieve(w, jnp.array([[1.0, 1.0]]))
    with pytest.raises(ValueError, match="n_steps"):
        hopfield.classical_retrieve(w, jnp.array([[1.0, 1.0, 1.0]]), n_steps=-2)


# --- classical binary network -------------------------------------------------


def numpy_async(w, s, sweeps):
    """Reference asynchronous dynamics, written independently with numpy loops."""
    w, s = np.asarray(w), np.array(s, dtype=float)
    for _ in range(sweeps):
        for n in range(s.shape[0]):
            for j in range(s.shape[1]):
                h = sum(w[j, k] * s[n, k] for k in range(s.shape[1]))
                if h > 0:
                    s[n, j] = 1.0
                elif h < 0:
                    s[n, j] = -1.0
    return s


@pytest.mark.parametrize("seed", SEEDS)
def test_classical_matches_numpy_reference_and_descends(seed):
    d, k = 16, 3
    rng = np.random.default_rng(seed)
    patterns = rng.choice([-1.0, 1.0], size=(k, d))
    states = rng.choice([-1.0, 0.0, 1.0], size=(4, d))
    w = hopfield.classical_store(jnp.asarray(patterns))
    np.testing.assert_allclose(w, (patterns.T @ patterns - k * np.eye(d)) / d, rtol=1e-14, atol=1e-15)
    out, trace = hopfield.classical_retrieve(w, jnp.asarray(states), n_steps=3, return_energy=True)
    np.testing.assert_array_equal(out, numpy_async(w, states, 3))
    assert bool(jnp.all(jnp.diff(trace, axis=0) <= 1e-12))
    np.testing.assert_allclose(jnp.sum(trace[-1]), hopfield.classical_energy(w, out), rtol=1e-13)


def test_classical_orthogonal_patterns_are_fixed_points():
    # Sylvester-Hadamard rows are orthogonal: W xi = (1 - K/d) xi, stable for K < d
    h = np.array([[1.0]])
    for _ in range(4):
        h = np.block([[h, h], [h, -h]])
    patterns = jnp.asarray(h[:5])  # d = 16, K = 5
    w = hopfield.classical_store(patterns)
    np.testing.assert_allclose(w @ patterns.T, (1 - 5 / 16) * patterns.T, atol=1e-14)
    np.testing.assert_array_equal(hopfield.classical_retrieve(w, patterns, n_steps=2), patterns)


@pytest.mark.parametrize("seed", SEEDS)
def test_sim_is_beta_times_the_overlaps(seed):
    rng = np.random.default_rng(seed)
    m, x = rng.normal(size=(6, 3)), rng.normal(size=(4, 3))
    s = np.asarray(hopfield.sim(jnp.asarray(m), jnp.asarray(x), beta=2.5))
    np.testing.assert_allclose(s, 2.5 * x @ m.T, rtol=1e-13)
