"""Tests for lse_energy.attention: energies, gradients, attend oracles, transformer pieces."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy import attention as A
from lse_energy import core, structural
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, normal, relative_error


def _cross_setup(seed, nq=4, nk=6, d=3, din=5):
    ks = jax.random.split(jax.random.key(seed), 5)
    params = A.Params(wq=normal(ks[0], (d, din), 0.6), wk=normal(ks[1], (d, din), 0.6))
    xq = normal(ks[2], (nq, din))
    xk = normal(ks[3], (nk, din))
    mask = jax.random.bernoulli(ks[4], 0.6, (nq, nk)).at[:, 0].set(True)
    return params, xq, xk, mask


OPTIONS = [dict(), dict(beta=0.7), dict(beta=1.3, mask="mask")]


def _opts(o, mask):
    o = dict(o)
    if o.get("mask") == "mask":
        o["mask"] = mask
    return o


# ---------------------------------------------------------------------------
# Cross-attention gradients, eqs. (7)-(8) and the chain rule
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("opt", OPTIONS)
def test_cross_grad_queries_and_keys(seed, opt):
    params, xq, xk, mask = _cross_setup(seed)
    o = _opts(opt, mask)
    q, k = xq @ params.wq.T, xk @ params.wk.T
    assert_gradient(lambda q_: A.energy(q_, k, **o), lambda q_: A.grad_q(q_, k, **o), q)
    assert_gradient(lambda k_: A.energy(q, k_, **o), lambda k_: A.grad_k(q, k_, **o), k)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("opt", OPTIONS)
def test_cross_grad_tokens_and_params(seed, opt):
    params, xq, xk, mask = _cross_setup(seed)
    o = _opts(opt, mask)
    assert_gradient(lambda x: A.token_energy(params, x, xk, **o), lambda x: A.grad_tokens(params, x, xk, **o)[0], xq)
    assert_gradient(lambda x: A.token_energy(params, xq, x, **o), lambda x: A.grad_tokens(params, xq, x, **o)[1], xk)
    assert_gradient(lambda p: A.token_energy(p, xq, xk, **o), lambda p: A.grad_params(p, xq, xk, **o), params)


def test_cross_eq7_is_weighted_mean_of_keys():
    # eq. (7) at beta = 1: -dE/dq_c = sum_p softmax_p(q_c.k_p) k_p, written out with NumPy.
    params, xq, xk, _ = _cross_setup(3)
    q, k = np.asarray(xq @ params.wq.T), np.asarray(xk @ params.wk.T)
    s = q @ k.T
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    np.testing.assert_allclose(-A.grad_q(q, k), w @ k, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(-A.grad_k(q, k), w.T @ q, rtol=1e-13, atol=1e-14)


def test_cross_batched_equals_loop():
    ks = jax.random.split(jax.random.key(4), 2)
    q, k = normal(ks[0], (3, 4, 2)), normal(ks[1], (3, 5, 2))
    total = sum(A.energy(q[b], k[b]) for b in range(3))
    np.testing.assert_allclose(A.energy(q, k), total, rtol=1e-13)
    g = A.grad_q(q, k)
    for b in range(3):
        np.testing.assert_allclose(g[b], A.grad_q(q[b], k[b]), rtol=1e-13)


# ---------------------------------------------------------------------------
# Self-attention, eqs. (15)-(16)
# ---------------------------------------------------------------------------


def _self_setup(seed, n=5, d=4, dk=3):
    ks = jax.random.split(jax.random.key(10 + seed), 3)
    params = A.Params(wq=normal(ks[0], (dk, d), 0.7), wk=normal(ks[1], (dk, d), 0.7))
    x = normal(ks[2], (n, d))
    return params, x


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("opt", [dict(), dict(beta=0.5), dict(beta=2.0, mask="causal")])
def test_self_grad(seed, opt):
    params, x = _self_setup(seed)
    o = dict(opt)
    if o.get("mask") == "causal":
        o["mask"] = A.causal_mask(x.shape[0])
    assert_gradient(lambda x_: A.self_energy(params, x_, **o), lambda x_: A.grad_self(params, x_, **o), x)


@pytest.mark.parametrize("seed", SEEDS)
def test_self_grad_terms_match_core_graph(seed):
    # The two terms of eq. (16) equal the child/parent split of the general eq. (4) in core.
    params, x = _self_setup(seed)
    n = x.shape[0]
    term = core.EnergyTerm(
        children=np.arange(n), parents=np.arange(n), sim=lambda vc, vp: (params.wq @ vc) @ (params.wk @ vp)
    )
    ref = core.grad_graph_terms([term], x)
    mine = A.grad_self_terms(params, x)
    np.testing.assert_allclose(mine.child, ref.child, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(mine.parent, ref.parent, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_self_grad_transpose_order(seed):
    # Child term as printed in eq. (16): W^{QT} W^K x_p. The swapped order W^{KT} W^Q x_p is wrong.
    params, x = _self_setup(seed, dk=4)
    wq, wk = params.wq, params.wk
    w = core.weights((x @ wq.T) @ (x @ wk.T).T)
    printed = w @ (x @ (wq.T @ wk).T)  # rows: sum_p w_ip W^QT W^K x_p
    swapped = w @ (x @ (wk.T @ wq).T)
    child = A.grad_self_terms(params, x).child
    assert relative_error(child, printed) < 1e-13
    assert relative_error(child, swapped) > 1e-2


def test_self_energy_is_cross_energy_on_projections():
    params, x = _self_setup(0)
    np.testing.assert_allclose(
        A.self_energy(params, x, beta=0.3), A.energy(x @ params.wq.T, x @ params.wk.T, beta=0.3), rtol=1e-14
    )


# ---------------------------------------------------------------------------
# attend: the two oracles
# ---------------------------------------------------------------------------


def _bnth(x):
    """(B, N, T, H) -> (B, T, N, H), the layout of jax.nn.dot_product_attention."""
    return jnp.swapaxes(x, -3, -2)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("masked", [False, True])
def test_attend_matches_jax_dot_product_attention_float32(seed, masked):
    ks = jax.random.split(jax.random.key(20 + seed), 4)
    B, N, T, S, H = 2, 3, 5, 7, 8
    q = jax.random.normal(ks[0], (B, N, T, H), jnp.float32)
    k = jax.random.normal(ks[1], (B, N, S, H), jnp.float32)
    v = jax.random.normal(ks[2], (B, N, S, H), jnp.float32)
    mask = jax.random.bernoulli(ks[3], 0.5, (B, N, T, S)).at[..., 0].set(True) if masked else None
    ref = jax.nn.dot_product_attention(_bnth(q), _bnth(k), _bnth(v), mask=mask)
    mine = A.attend(q, k, v, mask=mask)
    assert mine.dtype == jnp.float32
    np.testing.assert_allclose(_bnth(mine), ref, rtol=1e-5, atol=1e-5)
    # and with an explicit beta and an additive bias
    bias = jax.random.normal(ks[3], (B, N, T, S), jnp.float32)
    ref = jax.nn.dot_product_attention(_bnth(q), _bnth(k), _bnth(v), bias=bias, mask=mask, scale=0.4)
    np.testing.assert_allclose(_bnth(A.attend(q, k, v, beta=0.4, mask=mask, bias=bias)), ref, rtol=1e-5, atol=1e-5)


def _numpy_attention(q, k, v, beta, mask=None):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = beta * np.einsum("...cd,...pd->...cp", q, k)
    if mask is not None:
        s = np.where(np.asarray(mask), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("...cp,...pe->...ce", e / e.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("masked", [False, True])
def test_attend_matches_numpy_float64(seed, masked):
    ks = jax.random.split(jax.random.key(30 + seed), 4)
    q, k, v = normal(ks[0], (2, 3, 5, 6)), normal(ks[1], (2, 3, 7, 6)), normal(ks[2], (2, 3, 7, 4))
    mask = jax.random.bernoulli(ks[3], 0.5, (2, 3, 5, 7)).at[..., 0].set(True) if masked else None
    ref = _numpy_attention(q, k, v, 1 / np.sqrt(6), mask)
    np.testing.assert_allclose(A.attend(q, k, v, mask=mask), ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(
        A.attend(q, k, v, beta=2.5, mask=mask), _numpy_attention(q, k, v, 2.5, mask), rtol=1e-12, atol=1e-13
    )


def test_attend_agrees_with_jax_dot_product_attention():
    # The peer's agreement bound only: its float64 accuracy is its own business (today it keeps the
    # softmax in float32), so nothing here asserts how inaccurate it is.
    ks = jax.random.split(jax.random.key(40), 3)
    q, k, v = normal(ks[0], (1, 6, 2, 8)), normal(ks[1], (1, 9, 2, 8)), normal(ks[2], (1, 9, 2, 8))
    out = jax.nn.dot_product_attention(q, k, v)
    ref = _bnth(_numpy_attention(_bnth(q), _bnth(k), _bnth(v), 1 / np.sqrt(8)))
    err_jax = np.max(np.abs(np.asarray(out) - ref))
    err_ours = np.max(np.abs(np.asarray(_bnth(A.attend(_bnth(q), _bnth(k), _bnth(v)))) - ref))
    assert err_jax < 1e-5 and err_ours < 1e-13


def test_attend_is_expectation_over_edge_structures():
    # Singh & Buckley eq. (1): enumerate all N_K^N_Q structures phi, p(phi|x) ∝ prod_c exp(sim[c, phi_c]).
    ks = jax.random.split(jax.random.key(50), 4)
    q, k, v = normal(ks[0], (3, 2)), normal(ks[1], (4, 2)), normal(ks[2], (4, 3))
    log_prior = np.log(np.asarray(jax.random.dirichlet(ks[3], jnp.ones(4), (3,))))
    s = np.asarray(q @ k.T)
    joint, values = [], []
    for phi in itertools.product(range(4), repeat=3):
        joint.append(sum(s[c, phi[c]] + log_prior[c, phi[c]] for c in range(3)))
        values.append(np.stack([np.asarray(v)[phi[c]] for c in range(3)]))
    post = np.exp(np.array(joint) - max(joint))
    post /= post.sum()
    expected = np.einsum("s,sce->ce", post, np.array(values))
    np.testing.assert_allclose(A.attend(q, k, v, beta=1.0, bias=log_prior), expected, rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------
# Log-prior reading of positional bias and temperature
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_relative_position_bias_is_edge_prior(seed):
    ks = jax.random.split(jax.random.key(60 + seed), 3)
    n, d = 6, 4
    q, k = normal(ks[0], (n, d)), normal(ks[1], (n, d))
    table = normal(ks[2], (2 * n - 1,))
    bias = A.relative_position_bias(table, n)
    for i, j in itertools.product(range(n), repeat=2):
        assert bias[i, j] == table[j - i + n - 1]
    sim = np.asarray(q @ k.T) / np.sqrt(d)
    prior = np.asarray(A.edge_prior(bias))
    # Bayes' rule with the prior, in NumPy: posterior ∝ prior * likelihood.
    post = prior * np.exp(sim)
    post /= post.sum(1, keepdims=True)
    np.testing.assert_allclose(A.attention_weights(q, k, bias=bias), post, rtol=1e-12)
    # The energy with the bias is the energy under the prior, up to sum_c ln Z_c of the bias.
    log_z = np.log(np.exp(np.asarray(bias)).sum(1)).sum()
    np.testing.assert_allclose(
        A.energy(q, k, beta=1 / np.sqrt(d), bias=bias), A.prior_energy(sim, prior) - log_z, rtol=1e-12
    )
    np.testing.assert_allclose(
        A.energy(q, k, beta=1 / np.sqrt(d), bias=jnp.log(prior)), A.prior_energy(sim, prior), rtol=1e-12
    )


def test_causal_mask_semantics():
    m = np.asarray(A.causal_mask(4))
    assert m.dtype == bool
    for i, j in itertools.product(range(4), repeat=2):
        assert m[i, j] == (j <= i)
    ks = jax.random.split(jax.random.key(70), 3)
    q, k, v = normal(ks[0], (6, 3)), normal(ks[1], (6, 3)), normal(ks[2], (6, 2))
    w = A.attention_weights(q, k, mask=A.causal_mask(6))
    assert np.all(np.asarray(w)[~np.asarray(A.causal_mask(6))] == 0.0)
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-14)
    # Output i depends only on tokens <= i: changing the future leaves the past unchanged.
    out = A.attend(q, k, v, mask=A.causal_mask(6))
    out2 = A.attend(q, k.at[4:].add(3.0), v.at[4:].add(-2.0), mask=A.causal_mask(6))
    np.testing.assert_array_equal(out[:4], out2[:4])
    assert not np.allclose(out[4:], out2[4:])
    np.testing.assert_allclose(out[0], v[0], rtol=1e-14)  # first token can only see itself
    rect = np.asarray(A.causal_mask(2, 5))
    np.testing.assert_array_equal(rect, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


def test_sinusoidal_encoding_properties():
    n, d = 50, 16
    pe = np.asarray(A.sinusoidal_encoding(n, d))
    i = np.arange(n)[:, None]
    j = np.arange(d // 2)[None, :]
    np.testing.assert_allclose(pe[:, 0::2], np.sin(i / 10000 ** (2 * j / d)), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(i / 10000 ** (2 * j / d)), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(pe, axis=1), np.sqrt(d / 2), rtol=1e-13)
    for shift in [1, 3, 7]:
        r = np.asarray(A.sinusoidal_shift(shift, d))
        np.testing.assert_allclose(r @ r.T, np.eye(d), atol=1e-13)
        np.testing.assert_allclose(pe[:-shift] @ r.T, pe[shift:], atol=1e-12)
    gram = pe @ pe.T
    for off in [0, 2, 5]:
        diag = np.diagonal(gram, off)
        np.testing.assert_allclose(diag, diag[0], atol=1e-11)


# ---------------------------------------------------------------------------
# Multi-head attention
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_matches_jax_per_head(seed, causal):
    key, kx = jax.random.split(jax.random.key(80 + seed))
    H, dm, T = 3, 12, 7
    p32 = jax.tree.map(lambda a: a.astype(jnp.float32), A.init_multihead(dm, H, key=key))
    x = jax.random.normal(kx, (2, T, dm), jnp.float32)
    mask = A.causal_mask(T) if causal else None
    out = A.multihead_attention(p32, x, mask=mask)
    q = jnp.einsum("hkm,btm->bthk", p32.wq, x)
    k = jnp.einsum("hkm,btm->bthk", p32.wk, x)
    v = jnp.einsum("hkm,btm->bthk", p32.wv, x)
    heads = jax.nn.dot_product_attention(q, k, v, is_causal=causal)  # (b, t, h, k)
    ref = jnp.einsum("hmk,bthk->btm", p32.wo, heads)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_multihead_matches_numpy_concat_float64():
    key, kx, ky = jax.random.split(jax.random.key(90), 3)
    H, dm = 2, 6
    p = A.init_multihead(dm, H, d_head=4, key=key)
    xq, xkv = normal(kx, (5, dm)), normal(ky, (8, dm))
    heads = [
        _numpy_attention(
            xq @ np.asarray(p.wq[h]).T, xkv @ np.asarray(p.wk[h]).T, xkv @ np.asarray(p.wv[h]).T, 1 / np.sqrt(4)
        )
        for h in range(H)
    ]
    wo = np.concatenate([np.asarray(p.wo[h]) for h in range(H)], axis=1)  # (d_model, H * d_v)
    ref = np.concatenate(heads, axis=1) @ wo.T
    np.testing.assert_allclose(A.multihead_attention(p, xq, xkv), ref, rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------
# CCCP (Singh & Buckley eq. 8)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("prior", ["hopfield", "slot"])
def test_cccp_descends(prior):
    for seed in range(25):
        ks = jax.random.split(jax.random.key(100 + seed), 3)
        mu0, x = normal(ks[0], (3, 4)), normal(ks[1], (7, 5))
        w = normal(ks[2], (4, 5), 0.8)
        mu, trace = structural.cccp(mu0, x, w, prior=prior, n_steps=30)
        trace = np.asarray(trace)
        assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace[:-1]))
        np.testing.assert_allclose(trace[0], structural.energy(mu0, x, w, prior=prior), rtol=1e-14)
    # stationary point: the fixed point has zero gradient
    mu_long, _ = structural.cccp(mu0, x, w, prior=prior, n_steps=500)
    g = jax.grad(lambda m: structural.energy(m, x, w, prior=prior))(mu_long)
    assert np.max(np.abs(g)) < 1e-8


def test_cccp_normalisation_rows_vs_columns():
    ks = jax.random.split(jax.random.key(7), 2)
    mu, x = normal(ks[0], (3, 4)), normal(ks[1], (6, 4))
    w = jnp.eye(4)
    s = np.asarray(mu @ x.T)
    e = np.exp(s - s.max())
    np.testing.assert_allclose(
        structural.cccp_step(mu, x, w, prior="hopfield"), (e / e.sum(1, keepdims=True)) @ x, rtol=1e-12
    )
    np.testing.assert_allclose(
        structural.cccp_step(mu, x, w, prior="slot"), (e / e.sum(0, keepdims=True)) @ x, rtol=1e-12
    )


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def test_validation_errors():
    q, k, v = jnp.ones((3, 2)), jnp.ones((4, 2)), jnp.ones((4, 5))
    with pytest.raises(ValueError, match="q must be finite"):
        A.attend(q.at[0, 0].set(jnp.nan), k, v)
    with pytest.raises(ValueError, match="bias"):
        A.attend(q, k, v, bias=jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="d must be a positive even"):
        A.sinusoidal_encoding(5, 3)
    with pytest.raises(ValueError, match="causal_mask"):
        A.causal_mask(5, 3)
    with pytest.raises(ValueError, match="prior"):
        structural.cccp_step(q, k, jnp.eye(2), prior="gmm")


@pytest.mark.parametrize("seed", SEEDS)
def test_sim_is_the_scaled_dot_product_plus_the_log_prior(seed):
    rng = np.random.default_rng(seed)
    q, k, b = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4, 5))
    s = np.asarray(A.sim(jnp.asarray(q), jnp.asarray(k), beta=1.7, bias=jnp.asarray(b)))
    np.testing.assert_allclose(s, 1.7 * np.einsum("bcd,bpd->bcp", q, k) + b, rtol=1e-13)
    # and the energy is the log-sum-exp energy of these similarities (scipy's logsumexp)
    from scipy.special import logsumexp

    assert abs(
        float(A.energy(jnp.asarray(q), jnp.asarray(k), beta=1.7, bias=jnp.asarray(b))) + logsumexp(s, axis=-1).sum()
    ) < 1e-12 * abs(logsumexp(s, axis=-1).sum())
