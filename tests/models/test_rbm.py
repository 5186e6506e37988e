"""Tests for lse_energy.rbm: algebra, oracles (scikit-learn, enumeration), sampling, CD."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree
from scipy import stats
from sklearn.neural_network import BernoulliRBM

from lse_energy import core, rbm
from lse_energy.testing import assert_gradient
from tests.support import SEEDS

SGD = optax.sgd(0.05)

M, N = 10, 8  # tiny RBM: 2**10 visible states, 2**18 joint states


def random_params(seed, m=M, n=N, scale=0.7):
    kw, kb, kc = jax.random.split(jax.random.key(seed), 3)
    return rbm.Params(
        W=scale * jax.random.normal(kw, (m, n)),
        b=0.5 * jax.random.normal(kb, (m,)),
        c=0.5 * jax.random.normal(kc, (n,)),
    )


def random_binary(seed, shape):
    return jax.random.bernoulli(jax.random.key(100 + seed), 0.5, shape).astype(jnp.float64)


def flat(tree):
    return np.asarray(ravel_pytree(tree)[0])


# --- energy and free energy -------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_matches_sum_formula(seed):
    p = random_params(seed)
    v, h = random_binary(seed, (5, M)), random_binary(seed + 7, (5, N))
    W, b, c = (np.asarray(a) for a in p)
    vn, hn = np.asarray(v), np.asarray(h)
    expected = np.array(
        [
            -sum(vn[s, i] * W[i, j] * hn[s, j] for i in range(M) for j in range(N)) - vn[s] @ b - hn[s] @ c
            for s in range(5)
        ]
    )
    out = rbm.joint_energy(p, v, h)
    assert out.shape == (5,)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert rbm.joint_energy(p, v[0], h[0]).shape == ()
    np.testing.assert_allclose(rbm.joint_energy(p, v[0], h[0]), expected[0], rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_free_energy_is_lse_over_hidden_states(seed):
    """F(v) = -ln sum_h exp(-E(v, h)) by enumerating all 2**N hidden states,
    and F(v) = -b.v + core.energy over each hidden unit's two states."""
    p = random_params(seed)
    v = random_binary(seed, (6, M))
    H = rbm.binary_states(N)
    brute = np.array([-jax.nn.logsumexp(-rbm.joint_energy(p, jnp.broadcast_to(vs, (H.shape[0], M)), H)) for vs in v])
    f = rbm.energy(p, v)
    assert f.shape == (6,)
    np.testing.assert_allclose(f, brute, rtol=1e-12)
    s = v[0] @ p.W + p.c
    via_core = -(v[0] @ p.b) + core.energy(jnp.stack([jnp.zeros_like(s), s], -1))
    np.testing.assert_allclose(rbm.energy(p, v[0]), via_core, rtol=1e-13)
    np.testing.assert_allclose(rbm.energy(p, v[0]), -(v[0] @ p.b) - jnp.sum(jax.nn.softplus(s)), rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_free_energy_matches_sklearn(seed):
    """Outside oracle: BernoulliRBM._free_energy with components_ = W^T,
    intercept_hidden_ = c, intercept_visible_ = b (same sign convention)."""
    p = random_params(seed, m=20, n=7)
    v = np.asarray(random_binary(seed, (30, 20)))
    sk = BernoulliRBM(n_components=7)
    sk.components_ = np.asarray(p.W).T.copy()
    sk.intercept_hidden_ = np.asarray(p.c).copy()
    sk.intercept_visible_ = np.asarray(p.b).copy()
    np.testing.assert_allclose(rbm.energy(p, v), sk._free_energy(v), rtol=1e-10, atol=0)
    # sklearn's transform is P(h = 1 | v)
    np.testing.assert_allclose(rbm.hidden_probs(p, v), sk.transform(v), rtol=1e-10, atol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_sklearn_score_samples_is_exact_pseudo_likelihood(seed):
    """sklearn's score_samples flips bit i (drawn from RandomState(random_state)) and
    returns m ln P(v_i | v_-i); compare with our exact likelihoods over all 2**M states."""
    p = random_params(seed)
    V = np.asarray(rbm.binary_states(M))
    sk = BernoulliRBM(n_components=N, random_state=seed)
    sk.components_ = np.asarray(p.W).T.copy()
    sk.intercept_hidden_ = np.asarray(p.c).copy()
    sk.intercept_visible_ = np.asarray(p.b).copy()
    sk.n_features_in_ = M
    score = sk.score_samples(V)
    bit = np.random.RandomState(seed).randint(0, M, V.shape[0])
    flipped = V.copy()
    flipped[np.arange(V.shape[0]), bit] = 1 - flipped[np.arange(V.shape[0]), bit]
    ll, llf = rbm.log_likelihood(p, V), rbm.log_likelihood(p, flipped)
    np.testing.assert_allclose(score, M * (ll - jnp.logaddexp(ll, llf)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_free_energy_hidden_is_other_marginal(seed):
    p = random_params(seed)
    h = random_binary(seed, (4, N))
    V = rbm.binary_states(M)
    brute = np.array([-jax.nn.logsumexp(-rbm.joint_energy(p, V, jnp.broadcast_to(hs, (V.shape[0], N)))) for hs in h])
    np.testing.assert_allclose(rbm.energy_hidden(p, h), brute, rtol=1e-12)


# --- analytic gradients -------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_free_energy_grad_v(seed):
    """dF/dv = -b - W sigma(c + W^T v) on the continuous relaxation v in R^m."""
    p = random_params(seed)
    v = jax.random.uniform(jax.random.key(seed + 50), (M,))
    assert_gradient(lambda x: rbm.energy(p, x), lambda x: rbm.grad_v(p, x), v)
    batch = jax.random.uniform(jax.random.key(seed + 51), (4, M))
    assert_gradient(lambda x: jnp.sum(rbm.energy(p, x)), lambda x: rbm.grad_v(p, x), batch)


@pytest.mark.parametrize("seed", SEEDS)
def test_free_energy_grad_params(seed):
    """Positive-phase statistics: gradient of the mean free energy w.r.t. (W, b, c)."""
    p = random_params(seed)
    v = random_binary(seed, (7, M))
    assert_gradient(lambda q: jnp.mean(rbm.energy(q, v)), lambda q: rbm.grad_params(q, v), p, n_coords=None)


@pytest.mark.parametrize("seed", SEEDS)
def test_log_likelihood_grad(seed):
    """Exact positive-minus-negative phase = grad of the exact mean log-likelihood."""
    p = random_params(seed)
    v = random_binary(seed, (9, M))
    assert_gradient(
        lambda q: jnp.mean(rbm.log_likelihood(q, v)), lambda q: rbm.grad_log_likelihood_params(q, v), p, n_coords=None
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_gap_is_flip_difference_and_derivative(seed):
    p = random_params(seed)
    v, h = random_binary(seed, (M,)), random_binary(seed + 3, (N,))
    gap = rbm.energy_gap(p, v, h)
    for i in range(M):
        diff = rbm.joint_energy(p, v.at[i].set(1.0), h) - rbm.joint_energy(p, v.at[i].set(0.0), h)
        np.testing.assert_allclose(gap.visible[i], diff, rtol=1e-12, atol=1e-14)
    for j in range(N):
        diff = rbm.joint_energy(p, v, h.at[j].set(1.0)) - rbm.joint_energy(p, v, h.at[j].set(0.0))
        np.testing.assert_allclose(gap.hidden[j], diff, rtol=1e-12, atol=1e-14)
    gv, gh = jax.grad(rbm.joint_energy, argnums=(1, 2))(p, v, h)
    np.testing.assert_allclose(gap.visible, gv, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gap.hidden, gh, rtol=1e-12, atol=1e-14)


# --- conditionals -------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_conditionals_match_enumeration(seed):
    """P(h | v) from exp(-E) over all 2**N hidden states: factorises, marginals = hidden_probs."""
    p = random_params(seed)
    H = rbm.binary_states(N)
    for v in random_binary(seed, (3, M)):
        post = jax.nn.softmax(-rbm.joint_energy(p, jnp.broadcast_to(v, H.shape[:1] + (M,)), H))
        ph = rbm.hidden_probs(p, v)
        np.testing.assert_allclose(post @ H, ph, rtol=1e-12)
        product = jnp.prod(H * ph + (1 - H) * (1 - ph), axis=1)
        np.testing.assert_allclose(post, product, rtol=1e-11)
        gap = rbm.energy_gap(p, v, jnp.zeros(N)).hidden
        np.testing.assert_allclose(ph, jax.nn.sigmoid(-gap), rtol=1e-13)
    V = rbm.binary_states(M)
    for h in random_binary(seed, (3, N)):
        post = jax.nn.softmax(-rbm.joint_energy(p, V, jnp.broadcast_to(h, V.shape[:1] + (N,))))
        np.testing.assert_allclose(post @ V, rbm.visible_probs(p, h), rtol=1e-12)


# --- partition function -------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_log_partition_brute_force(seed):
    """ln Z over 2**10 visible states = over 2**8 hidden states = full 2**18 joint sum."""
    p = random_params(seed)
    V, H = rbm.binary_states(M), rbm.binary_states(N)
    joint = -(jnp.einsum("ai,ij,bj->ab", V, p.W, H) + (V @ p.b)[:, None] + (H @ p.c)[None, :])
    assert joint.size == 2**18
    np.testing.assert_allclose(joint[5, 7], rbm.joint_energy(p, V[5], H[7]), rtol=1e-13)
    log_z = jax.nn.logsumexp(-joint)
    np.testing.assert_allclose(rbm.log_partition(p, over="visible"), log_z, rtol=1e-12)
    np.testing.assert_allclose(rbm.log_partition(p, over="hidden"), log_z, rtol=1e-12)
    np.testing.assert_allclose(rbm.log_partition(p), log_z, rtol=1e-12)
    probs = jnp.exp(rbm.log_likelihood(p, V))
    np.testing.assert_allclose(jnp.sum(probs), 1.0, rtol=1e-12)


def test_log_partition_chunked_large_layer():
    """A 13-unit layer takes two 4096-state chunks; must equal the unchunked sum."""
    p = random_params(4, m=13, n=3, scale=0.3)
    V = rbm.binary_states(13)
    np.testing.assert_allclose(rbm.log_partition(p, over="visible"), jax.nn.logsumexp(-rbm.energy(p, V)), rtol=1e-12)
    np.testing.assert_allclose(rbm.log_partition(p, over="visible"), rbm.log_partition(p, over="hidden"), rtol=1e-12)


# --- Gibbs sampling -----------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_gibbs_same_key_same_samples(seed):
    p = random_params(seed)
    v0 = random_binary(seed, (16, M))
    a = rbm.gibbs(p, v0, 5, key=jax.random.key(seed))
    b = rbm.gibbs(p, v0, 5, key=jax.random.key(seed))
    c = rbm.gibbs(p, v0, 5, key=jax.random.key(seed + 1000))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.v, c.v)
    assert set(np.unique(np.asarray(a.v))) <= {0.0, 1.0}
    np.testing.assert_allclose(a.v_prob, rbm.visible_probs(p, a.h), rtol=1e-13)
    h1 = rbm.sample_hidden(p, v0, key=jax.random.key(3))
    np.testing.assert_array_equal(h1, rbm.sample_hidden(p, v0, key=jax.random.key(3)))


def test_gibbs_transition_matrix_is_a_kernel_for_q():
    p = random_params(0, scale=0.5)
    T = rbm.gibbs_transition_matrix(p)
    np.testing.assert_allclose(T.sum(axis=1), 1.0, rtol=1e-12)
    q = jnp.exp(rbm.log_likelihood(p, rbm.binary_states(M)))
    np.testing.assert_allclose(q @ T, q, rtol=1e-10, atol=1e-15)


def test_gibbs_samples_follow_model_marginal():
    """Long chains: empirical P(v_i = 1) within 5 standard errors of the exact marginal."""
    p = random_params(1, scale=0.5)
    V = rbm.binary_states(M)
    q = jnp.exp(rbm.log_likelihood(p, V))
    exact = q @ V
    chains = 4000
    out = rbm.gibbs(p, jnp.zeros((chains, M)), 50, key=jax.random.key(0))
    emp = np.asarray(out.v.mean(axis=0))
    se = np.sqrt(np.asarray(exact) * (1 - np.asarray(exact)) / chains)
    assert np.all(np.abs(emp - exact) < 5 * se)


# --- Bernoulli draws ----------------------------------------------------------

ALPHA = 1e-6  # false-alarm probability (over keys) of each statistical check below; Bonferroni across its parts


def _bernoulli_failures(x, ps, pairs, resolution):
    """What is wrong with draws ``x`` (``(K, R)``, row ``k`` from Bernoulli(``ps[k]``)): one line per failure.

    * p = 0 and p = 1 give all 0 and all 1 (deterministic);
    * each other row's count within ``z`` binomial standard errors of ``R p`` (plus ``R * resolution``, the
      largest bias of a uniform on a grid of that step), ``z`` two-sided at ``ALPHA`` over the rows;
    * draws that should be independent (``pairs``: ``(a, b)`` flat index arrays, p = 1/2) are uncorrelated:
      ``|corr| sqrt(n) <= z`` (a normal approximation, n in the tens of thousands).
    """
    x, ps = np.asarray(x), np.asarray(ps)
    bad = []
    for p, row in zip(ps, x):
        c, r = row.sum(), row.size
        if p in (0.0, 1.0):
            bad += [f"p={p}: {c} of {r}"] if c != p * r else []
            continue
        z = stats.norm.isf(ALPHA / (2 * len(ps)))
        if abs(c - r * p) > z * np.sqrt(r * p * (1 - p)) + r * resolution:
            bad.append(f"p={p}: {c} of {r}, expected {r * p:.0f}")
    z = stats.norm.isf(ALPHA / (2 * max(1, len(pairs))))
    for i, (a, b) in enumerate(pairs):
        corr = np.corrcoef(x.reshape(-1)[a], x.reshape(-1)[b])[0, 1]
        if not abs(corr) * np.sqrt(len(a)) <= z:
            bad.append(f"pair {i}: correlation {corr:.4f} over {len(a)} draws")
    return bad


PS = [0.0, 2.0**-12, 0.001, 0.05, 1 / 3, 0.5, 0.5, 0.77, 0.999, 1 - 2.0**-12, 1.0]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_default_draws_are_jax_uniform_draws_bit_for_bit(dtype):
    # The default stream is jax.random.uniform's (fit and gibbs replay stored runs): u < p exactly, ties included.
    for key in (jax.random.key(3), jax.random.PRNGKey(4), jax.random.split(jax.random.key(5), 3)[1]):
        u = jax.random.uniform(key, (64, 37), dtype)
        for p in (u, jnp.nextafter(u, 2), jnp.nextafter(u, -1), jax.random.uniform(jax.random.key(9), u.shape, dtype)):
            got = rbm._bernoulli(key, p)
            assert got.dtype == dtype
            np.testing.assert_array_equal(got, (u < p).astype(dtype))
            np.testing.assert_array_equal(jax.jit(rbm._bernoulli)(key, p), got)
        assert not np.array_equal(rbm._bernoulli(key, u), (u <= u).astype(dtype))  # the <= mutant differs


@pytest.mark.parametrize("n", [1, 5, 17970, 200_000])
def test_shuffle_is_jax_permutation_bit_for_bit(n):
    # fit shuffles with jax.random.permutation's permutation (stored runs replay), sorted faster
    for key in (jax.random.key(n), jax.random.PRNGKey(n + 1)):
        np.testing.assert_array_equal(rbm._permutation(key, n), jax.random.permutation(key, n))
    if n == 200_000:  # equal sort words here, so the tie order (stable sorts) is exercised
        sub = jax.random.split(jax.random.key(n))[1]
        assert len(np.unique(np.asarray(jax.random.bits(sub, (n,), jnp.uint32)))) < n


def _uniforms16(blocks):
    """The reference 16-bit uniforms of ``blocks`` (b1, b2): draw r * m + j is half r % 2 (low first) of b1[j]
    (r < 2) or b2[j], over 2**16."""
    b1, b2 = (np.asarray(b, np.int64) for b in blocks)
    return np.concatenate([b1 & 0xFFFF, b1 >> 16, b2 & 0xFFFF, b2 >> 16]) / 2.0**16


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_16_bit_draws_are_bernoulli_p(dtype):
    # fit(uniform_bits=16): Bernoulli(p) with P = ceil(2**16 p) / 2**16 and independent draws, though four share
    # a threefry block. Rows of PS at R draws each, then n draws at p = 1/2 for the independence checks.
    K, R, n = len(PS), 2**16, 2**18
    blocks = rbm._blocks(jax.random.key(11), K * R // 4)
    p = jnp.repeat(jnp.asarray(PS, dtype), R).reshape(K, R)
    x, u = rbm._bernoulli(blocks, p), _uniforms16(blocks).reshape(K, R)
    np.testing.assert_array_equal(x, (u < np.asarray(p)).astype(dtype))  # exactly the reference draws
    assert _bernoulli_failures(x, PS, [], 2.0**-16) == []
    blocks = rbm._blocks(jax.random.key(12), n // 4)
    half = rbm._bernoulli(blocks, jnp.full((1, n), 0.5, dtype))
    uh = _uniforms16(blocks)
    np.testing.assert_array_equal(half[0], (uh < 0.5).astype(dtype))
    # draws sharing a block (the two halves of b1, b1 vs b2, ...) and draws of neighbouring blocks
    pairs = [(np.arange(n - lag), np.arange(lag, n)) for lag in (n // 4, n // 2, 3 * n // 4, 1)]
    assert _bernoulli_failures(half, [0.5], pairs, 2.0**-16) == []
    # u < p, not u <= p: at p = u every draw is 0 (the mutant would give 1s)
    assert not np.any(rbm._bernoulli(blocks, jnp.asarray(uh, dtype)[None]))
    # ... and the checks catch a threshold biased by 1%, 8-bit uniforms, one 16-bit half used twice
    pn = np.asarray(p, np.float64)
    assert _bernoulli_failures(u < pn + 0.01, PS, [], 2.0**-16)
    assert _bernoulli_failures(np.floor(u * 2**8) / 2**8 + 2**-9 < pn, PS, [], 2.0**-16)
    twice = np.concatenate([uh[: n // 4], uh[: n // 4], uh[n // 2 :]])[None] < 0.5
    assert any("pair 0" in f for f in _bernoulli_failures(twice, [0.5], pairs, 2.0**-16))


# --- CD-k -------------------------------------------------------------------


def test_expected_cd_gradient_limits():
    """k = 0: positive and negative phases cancel exactly; k -> infinity: the exact gradient."""
    p = random_params(2, scale=0.5)
    v = random_binary(2, (12, M))
    zero = flat(rbm.grad_cd_expected(p, v, 0))
    assert np.max(np.abs(zero)) < 1e-15
    exact = flat(rbm.grad_log_likelihood_params(p, v))
    far = flat(rbm.grad_cd_expected(p, v, 400))
    np.testing.assert_allclose(far, exact, rtol=0, atol=1e-10 * np.max(np.abs(exact)))


def test_cd_gradient_mc_average_matches_expectation():
    """Averaged over many chains, the CD-1 estimate equals its exact expectation
    up to Monte Carlo error (each entry within 5 standard errors)."""
    p = random_params(0, scale=0.5)
    v = random_binary(0, (4, M))
    reps = 2000
    data = jnp.tile(v, (reps, 1))
    exp_g = flat(rbm.grad_cd_expected(p, v, 1))
    draws = np.stack([flat(rbm.grad_cd(p, v, 1, key=jax.random.fold_in(jax.random.key(7), r))) for r in range(200)])
    se = draws.std(axis=0) / np.sqrt(draws.shape[0])  # draws are i.i.d.
    big = flat(rbm.grad_cd(p, data, 1, key=jax.random.key(8)))  # = mean of `reps` draws
    se_big = draws.std(axis=0) / np.sqrt(reps)
    assert np.all(np.abs(draws.mean(axis=0) - exp_g) <= 5 * se + 1e-12)
    assert np.all(np.abs(big - exp_g) <= 5 * se_big + 1e-12)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_cd_k_mc_average_matches_expectation(k):
    """CD-k for k >= 2: the Monte Carlo estimate (``grad_cd``) equals its exact expectation
    (``grad_cd_expected``, p_data T^k) within 5 standard errors in every entry, and the check has
    the power to tell k from k - 1 sweeps (the expectations differ by more than 10 standard errors;
    weights of scale 2 mix slowly enough for that at k = 5)."""
    p = random_params(0, scale=2.0)
    v = random_binary(0, (4, M))
    reps, batches = 500, 40
    data = jnp.tile(v, (reps, 1))  # each batch: the mean of `reps` i.i.d. chains per data row
    key = jax.random.key(9)
    means = np.stack([flat(rbm.grad_cd(p, data, k, key=jax.random.fold_in(key, g))) for g in range(batches)])
    se = means.std(axis=0, ddof=1) / np.sqrt(batches)  # batches are i.i.d.
    exp_k = flat(rbm.grad_cd_expected(p, v, k))
    assert np.all(np.abs(means.mean(axis=0) - exp_k) <= 5 * se + 1e-12)
    exp_fewer = flat(rbm.grad_cd_expected(p, v, k - 1))
    assert np.max(np.abs(exp_k - exp_fewer) / (se + 1e-300)) > 10


@pytest.mark.parametrize("uniform_bits", [None, 16])
def test_cd1_training_raises_exact_log_likelihood(uniform_bits):
    """On prototype-plus-noise data, CD-1 closes at least half the gap between the
    initial exact log-likelihood and that of the true data distribution (either sampler)."""
    rng = np.random.default_rng(0)
    protos = rng.integers(0, 2, (3, M))
    flip = 0.1
    z = rng.integers(0, 3, 200)
    data = np.abs(protos[z] - (rng.random((200, M)) < flip)).astype(float)
    V = np.asarray(rbm.binary_states(M))
    d = (V[:, None, :] != protos[None]).sum(-1)
    p_true = np.mean(flip**d * (1 - flip) ** (M - d), axis=1)
    np.testing.assert_allclose(p_true.sum(), 1.0, rtol=1e-12)
    ll_true = np.mean(np.log(p_true[data.astype(int) @ (2 ** np.arange(M))]))
    p0 = rbm.init_params(M, N, key=jax.random.key(0), scale=0.01, x=data)
    ll0 = float(jnp.mean(rbm.log_likelihood(p0, data)))
    kw = dict(optimizer=optax.sgd(0.1), n_epochs=150, batch_size=20, uniform_bits=uniform_bits)
    fit = rbm.fit(p0, data, key=jax.random.key(1), **kw)
    p1 = fit.params
    ll1 = float(jnp.mean(rbm.log_likelihood(p1, data)))
    assert fit.extras.reconstruction_error.shape == (150,) and fit.energies.shape == (150,)
    assert fit.n_iter == 150 and fit.converged is None
    np.testing.assert_allclose(float(fit.energies[-1]), float(jnp.mean(rbm.energy(p1, data))), rtol=1e-12)
    assert ll0 < ll_true
    assert ll1 - ll0 > 0.5 * (ll_true - ll0)


def test_fit_same_key_same_result():
    v = random_binary(0, (40, M))
    p0 = rbm.init_params(M, N, key=jax.random.key(0))
    a = rbm.fit(p0, v, key=jax.random.key(3), optimizer=SGD, n_epochs=3, batch_size=8)
    b = rbm.fit(p0, v, key=jax.random.key(3), optimizer=SGD, n_epochs=3, batch_size=8)
    np.testing.assert_array_equal(flat(a.params), flat(b.params))
    np.testing.assert_array_equal(a.energies, b.energies)
    # Without the diagnostics the training path, and so the parameters, are unchanged.
    c = rbm.fit(p0, v, key=jax.random.key(3), optimizer=SGD, n_epochs=3, batch_size=8, monitor=False)
    np.testing.assert_array_equal(flat(a.params), flat(c.params))
    assert c.extras.reconstruction_error is None and c.energies is None


def test_fit_16_bit_uniforms_same_key_same_result_another_stream():
    v = random_binary(0, (40, M))
    p0 = rbm.init_params(M, N, key=jax.random.key(0))
    kw = dict(optimizer=SGD, n_epochs=3, batch_size=7, n_gibbs_steps=2)  # 7 * 10 draws: not a multiple of 4
    a = rbm.fit(p0, v, key=jax.random.key(3), uniform_bits=16, **kw)
    b = rbm.fit(p0, v, key=jax.random.key(3), uniform_bits=16, **kw)
    np.testing.assert_array_equal(flat(a.params), flat(b.params))
    assert not np.array_equal(flat(a.params), flat(rbm.fit(p0, v, key=jax.random.key(3), **kw).params))
    # a generator other than threefry draws as without the option
    rbg = jax.random.key(3, impl="rbg")
    c, d = (rbm.fit(p0, v, key=rbg, uniform_bits=bits, **kw) for bits in (16, None))
    np.testing.assert_array_equal(flat(c.params), flat(d.params))


# --- validation ---------------------------------------------------------------


def test_validation_errors():
    p = random_params(0)
    v = random_binary(0, (5, M))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="params must be rbm\\.Params"):
        rbm.energy((p.W, p.b, p.c), v)
    with pytest.raises(ValueError, match=r"params.b must have shape \(n_visible,\) with n_visible = 10"):
        rbm.energy(p._replace(b=jnp.zeros(M + 1)), v)
    with pytest.raises(ValueError, match="x must be binary"):
        rbm.fit(p, v + 0.2, key=key, optimizer=SGD, n_epochs=1, batch_size=1)
    for bits in (8, True, 16.0):
        with pytest.raises(ValueError, match="uniform_bits must be None or 16"):
            rbm.fit(p, v, key=key, optimizer=SGD, n_epochs=1, batch_size=1, uniform_bits=bits)
    with pytest.raises(ValueError, match="n_gibbs_steps must be"):
        rbm.grad_cd(p, v, 0, key=key)
    with pytest.raises(ValueError, match="over"):
        rbm.log_partition(p, over="both")
    with pytest.raises(ValueError, match="cannot enumerate"):
        rbm.log_partition(rbm.init_params(30, 30, key=key))
    with pytest.raises(ValueError, match="n must be"):
        rbm.binary_states(25)
    with pytest.raises(TypeError):
        rbm.gibbs(p, v, 3, key)  # key is keyword-only


@pytest.mark.parametrize("k", [1, 3, 64, 65])
def test_cd_gradient_one_compilation_for_every_k_gives_the_same_numbers(k):
    # grad_cd runs k sweeps with k traced (one compilation for all k <= 64); it must equal
    # the scan over jax.random.split(key, k) compiled for this k alone.
    params = rbm.init_params(6, 4, key=jax.random.key(0))
    v = (jax.random.uniform(jax.random.key(1), (9, 6)) < 0.5).astype(params.W.dtype)
    key = jax.random.key(2)
    got = rbm.grad_cd(params, v, k, key=key)
    ref = rbm._cd_gradient_jit(params.W, params.b, params.c, v, key, k)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # and k matters (the comparison can fail): one sweep fewer gives another estimate
    if k > 1:
        fewer = rbm._cd_gradient_jit(params.W, params.b, params.c, v, key, k - 1)
        assert not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, fewer))
