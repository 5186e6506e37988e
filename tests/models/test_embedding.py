"""Tests of lse_energy.embedding (§20 of the lecture notes: skip-gram embeddings).

Oracles: ``jax.grad`` and finite differences (``assert_gradient``), explicit
exp / sum normalisation over every candidate in NumPy and mpmath, Python loops
over the corpus, scikit-learn's cosine similarity, and an optax loop written here.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import optax
import pytest
from sklearn.metrics.pairwise import cosine_similarity as sk_cosine

from lse_energy import embedding as emb
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def _instance(seed, n=6, d=3, scale=0.7):
    rng = np.random.default_rng(seed)
    params = emb.Params(jnp.asarray(scale * rng.normal(size=(n, d))), jnp.asarray(scale * rng.normal(size=(n, d))))
    counts = jnp.asarray(rng.integers(0, 5, size=(n, n)).astype(float))
    noise = rng.random(n) + 0.1
    return params, counts, jnp.asarray(noise / noise.sum())


# --- gradients -----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_softmax_loss(seed):
    params, counts, _ = _instance(seed)
    assert_gradient(lambda p: emb.softmax_loss(p, counts), lambda p: emb.grad_softmax_loss_params(p, counts), params)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_negative_sampling_loss(seed):
    params, counts, noise = _instance(seed)
    assert_gradient(
        lambda p: emb.negative_sampling_loss(p, counts, noise, 3),
        lambda p: emb.grad_negative_sampling_loss_params(p, counts, noise, 3),
        params,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_energy(seed):
    params, counts, _ = _instance(seed)
    assert_gradient(lambda p: emb.energy(p, counts), lambda p: emb.grad_params(p, counts), params)


# --- losses against brute force --------------------------------------------------


def _pairs_loss_numpy(U, V, centres, contexts):
    """-sum_i ln p(o_i | c_i) with p normalised explicitly over every candidate (exp / sum)."""
    total = 0.0
    for c, o in zip(centres, contexts):
        s = np.array([U[c] @ V[w] for w in range(V.shape[0])])
        p = np.exp(s) / np.sum(np.exp(s))
        total -= np.log(p[o])
    return total


@pytest.mark.parametrize("seed", SEEDS)
def test_softmax_loss_is_pair_nll_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 7
    tokens = rng.integers(0, n, size=40)
    params, _, _ = _instance(seed, n=n)
    counts = emb.cooccurrence(jnp.asarray(tokens), n, 2)
    c, o = emb.skipgram_pairs(jnp.asarray(tokens), 2)
    ref = _pairs_loss_numpy(np.asarray(params.U), np.asarray(params.V), np.asarray(c), np.asarray(o))
    np.testing.assert_allclose(float(emb.softmax_loss(params, counts)), ref, rtol=1e-12)


def test_log_partition_mpmath():
    params, _, _ = _instance(5, n=5)
    U, V = np.asarray(params.U), np.asarray(params.V)
    mpmath.mp.dps = 40
    for c in range(5):
        z = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(U[c] @ V[w]))) for w in range(5)))
        assert abs(float(emb.log_partition(params)[c]) - float(z)) < 1e-13


@pytest.mark.parametrize("seed", SEEDS)
def test_loss_is_minus_data_term_minus_energy(seed):
    params, counts, _ = _instance(seed)
    S = np.asarray(params.U) @ np.asarray(params.V).T
    E_brute = -np.sum(np.asarray(counts).sum(1) * np.log(np.exp(S).sum(1)))
    np.testing.assert_allclose(float(emb.energy(params, counts)), E_brute, rtol=1e-12)
    np.testing.assert_allclose(
        float(emb.softmax_loss(params, counts)), -np.sum(np.asarray(counts) * S) - E_brute, rtol=1e-12
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_negative_sampling_loss_loop(seed):
    params, counts, noise = _instance(seed)
    U, V, N, q = (np.asarray(a) for a in (params.U, params.V, counts, noise))
    k, n = 4, N.shape[0]
    ref = 0.0
    for c in range(n):
        for w in range(n):
            s = U[c] @ V[w]
            ref += N[c, w] * np.log1p(np.exp(-s)) + k * N[c].sum() * q[w] * np.log1p(np.exp(s))
    np.testing.assert_allclose(float(emb.negative_sampling_loss(params, counts, noise, k)), ref, rtol=1e-12)


def test_sampled_negative_sampling_loss_loop():
    params, _, _ = _instance(3)
    rng = np.random.default_rng(3)
    c, o, neg = rng.integers(0, 6, 10), rng.integers(0, 6, 10), rng.integers(0, 6, (10, 3))
    U, V = np.asarray(params.U), np.asarray(params.V)
    ref = sum(
        np.log1p(np.exp(-U[c[i]] @ V[o[i]])) + sum(np.log1p(np.exp(U[c[i]] @ V[j])) for j in neg[i]) for i in range(10)
    )
    got = emb.sampled_negative_sampling_loss(params, jnp.asarray(c), jnp.asarray(o), jnp.asarray(neg))
    np.testing.assert_allclose(float(got), ref, rtol=1e-12)


# --- corpus helpers --------------------------------------------------------------


def test_cooccurrence_loop():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 5, size=30)
    for window in (1, 3):
        ref = np.zeros((5, 5))
        for t, j in itertools.product(range(30), range(-window, window + 1)):
            if j != 0 and 0 <= t + j < 30:
                ref[tokens[t], tokens[t + j]] += 1
        np.testing.assert_array_equal(np.asarray(emb.cooccurrence(jnp.asarray(tokens), 5, window)), ref)


def test_noise_distribution_and_pmi():
    _, counts, _ = _instance(1)
    N = np.asarray(counts)
    q = N.sum(0) ** 0.75
    np.testing.assert_allclose(np.asarray(emb.noise_distribution(counts)), q / q.sum(), rtol=1e-13)
    with np.errstate(divide="ignore"):
        ref = np.log(N * N.sum() / np.outer(N.sum(1), N.sum(0)))
    got = np.asarray(emb.pmi(counts))
    assert np.array_equal(np.isinf(got), np.isinf(ref))
    np.testing.assert_allclose(got[np.isfinite(ref)], ref[np.isfinite(ref)], rtol=1e-12, atol=1e-13)


def test_ring_transition_and_chain():
    P = np.asarray(emb.ring_transition(7, 0.2))
    np.testing.assert_allclose(P.sum(1), 1.0)
    assert P[0, 1] == P[0, 6] == pytest.approx(0.4) and P[0, 0] == pytest.approx(0.2) and P[0, 3] == 0
    tokens = np.asarray(emb.sample_chain(P, 20000, key=jax.random.PRNGKey(0)))
    assert np.array_equal(tokens, np.asarray(emb.sample_chain(P, 20000, key=jax.random.PRNGKey(0))))
    trans = np.zeros((7, 7))
    np.add.at(trans, (tokens[:-1], tokens[1:]), 1)
    freq = trans / trans.sum(1, keepdims=True)
    # ~2850 visits per state: binomial std of a frequency <= 0.01; 5 sigma
    assert np.max(np.abs(freq - P)) < 0.05
    assert np.all(trans[P == 0] == 0)


def test_cosine_similarity_sklearn():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(4, 3))
    np.testing.assert_allclose(
        np.asarray(emb.cosine(jnp.asarray(a), jnp.asarray(b))), sk_cosine(a, b), rtol=1e-12, atol=1e-14
    )


def test_analogy_loop():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(9, 4))
    a, b, c = rng.integers(0, 9, 20), rng.integers(0, 9, 20), rng.integers(0, 9, 20)
    got = np.asarray(emb.analogy(jnp.asarray(x), jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)))
    for i in range(20):
        t = x[b[i]] - x[a[i]] + x[c[i]]
        best, arg = -np.inf, -1
        for w in range(9):
            if w in (a[i], b[i], c[i]):
                continue
            cos = t @ x[w] / (np.linalg.norm(t) * np.linalg.norm(x[w]))
            if cos > best:
                best, arg = cos, w
        assert got[i] == arg
    # the textbook example on hand-made vectors: king - man + woman = queen
    royal, male = np.array([1.0, 0, 0.1]), np.array([0, 1.0, 0.1])
    words = np.stack([royal + male, male, -male, royal - male, np.array([0.1, 0.1, 1.0])])  # king man woman queen x
    assert int(emb.analogy(jnp.asarray(words), 1, 0, 2)) == 3


# --- training --------------------------------------------------------------------


def _ring_counts(seed=0, n=12):
    tokens = emb.sample_chain(emb.ring_transition(n), 3000, key=jax.random.PRNGKey(seed))
    return emb.cooccurrence(tokens, n, 2)


@pytest.mark.parametrize("objective", ["softmax", "negative"])
def test_fit_matches_optax_loop_and_descends(objective):
    counts = _ring_counts()
    p0 = emb.init_params(12, 3, key=jax.random.PRNGKey(1))
    opt = optax.adam(0.05)
    res = emb.fit(p0, counts, optimizer=opt, n_steps=60, objective=objective, n_negatives=3)
    noise = emb.noise_distribution(counts)
    if objective == "softmax":
        loss, grad = (lambda p: emb.softmax_loss(p, counts)), (lambda p: emb.grad_softmax_loss_params(p, counts))
    else:

        def loss(p):
            return emb.negative_sampling_loss(p, counts, noise, 3)

        def grad(p):
            return emb.grad_negative_sampling_loss_params(p, counts, noise, 3)

    p, s, values = p0, opt.init(p0), []
    total = float(counts.sum())
    for _ in range(60):
        values.append(float(loss(p)) / total)
        g = jax.tree_util.tree_map(lambda a: a / total, grad(p))
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
    np.testing.assert_allclose(np.asarray(res.energies), values, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(res.params.U), np.asarray(p.U), rtol=1e-8, atol=1e-10)
    assert res.n_iter == 60 and res.converged is None
    assert values[-1] < values[0]


@pytest.mark.parametrize("objective", ["softmax", "negative"])
def test_fit_minibatch_reproducible_and_descends(objective):
    counts = _ring_counts()
    p0 = emb.init_params(12, 3, key=jax.random.PRNGKey(1))
    opt = optax.adam(0.05)
    kw = {"optimizer": opt, "n_steps": 200, "objective": objective, "batch_size": 32, "key": jax.random.PRNGKey(4)}
    a, b = emb.fit(p0, counts, **kw), emb.fit(p0, counts, **kw)
    np.testing.assert_array_equal(np.asarray(a.params.U), np.asarray(b.params.U))
    assert float(a.energies[-1]) < float(a.energies[0]) - 0.1


def test_fit_float32_dtype():
    counts = _ring_counts().astype(jnp.float32)
    p0 = emb.init_params(12, 3, key=jax.random.PRNGKey(1), dtype=jnp.float32)
    res = emb.fit(p0, counts, optimizer=optax.sgd(0.1), n_steps=5)
    assert res.params.U.dtype == jnp.float32 and res.energies.dtype == jnp.float32


def test_analogy_answers_in_the_shape_of_its_queries():
    from lse_energy import embedding as emb_mod

    emb = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.1, 1.0]])
    one = emb_mod.analogy(emb, 0, 1, 2)
    assert one.shape == () and int(one) == 3
    many = emb_mod.analogy(emb, jnp.array([0, 1]), jnp.array([1, 0]), jnp.array([2, 3]))
    assert many.shape == (2,) and many.tolist() == [3, 2]
