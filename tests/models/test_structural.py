"""Tests for lse_energy.multihop, lse_energy.expanding and their toy tasks (Singh & Buckley §5)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy import _progress, core, expanding, multihop
from lse_energy import attention as A
from lse_energy.experiments import structural_tasks as toy
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, normal


def _softmax_rows(s):
    s = np.asarray(s)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------------------
# Multi-hop
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_multihop_equals_explicit_matrix_products(seed):
    ks = jax.random.split(jax.random.key(seed), 3)
    n, dk, dv = 5, 3, 2
    q, k, v = normal(ks[0], (n, dk)), normal(ks[1], (n, dk)), normal(ks[2], (n, dv))
    P = _softmax_rows(np.asarray(q) @ np.asarray(k).T / math.sqrt(dk))
    V = np.asarray(v)
    np.testing.assert_allclose(multihop.attend(q, k, v, variant="paper"), (P + P @ P) @ V, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(
        multihop.attend(q, k, v, variant="code"), (np.eye(n) + P + P @ P) @ V / 3, rtol=1e-12, atol=1e-13
    )


# The multi-hop proposition (structural expectation over all N^N structures, with and
# without self-edges) is tested against brute force in tests/propositions/test_propositions_ch09.py.


def test_multihop_variants_differ_and_row_sums():
    ks = jax.random.split(jax.random.key(3), 2)
    P = A.attention_weights(normal(ks[0], (6, 3)), normal(ks[1], (6, 3)))
    paper, code = multihop.hop_matrix(P, variant="paper"), multihop.hop_matrix(P, variant="code")
    np.testing.assert_allclose(paper.sum(-1), 2.0, rtol=1e-13)
    np.testing.assert_allclose(code.sum(-1), 1.0, rtol=1e-13)
    np.testing.assert_allclose(3 * code - jnp.eye(6), paper, rtol=1e-12, atol=1e-13)
    assert float(jnp.max(jnp.abs(paper - code))) > 0.1


def test_multihop_with_mask_matches_matrix_products():
    ks = jax.random.split(jax.random.key(4), 3)
    n = 5
    q, k, v = normal(ks[0], (n, 3)), normal(ks[1], (n, 3)), normal(ks[2], (n, 2))
    mask = A.causal_mask(n)
    s = np.where(np.asarray(mask), np.asarray(q) @ np.asarray(k).T / math.sqrt(3), -np.inf)
    P = _softmax_rows(s)
    np.testing.assert_allclose(multihop.attend(q, k, v, mask=mask), (P + P @ P) @ np.asarray(v), rtol=1e-12, atol=1e-13)


def test_multihop_attention_batched_and_params():
    ks = jax.random.split(jax.random.key(5), 4)
    params = multihop.Params(wq=normal(ks[0], (3, 4)), wk=normal(ks[1], (3, 4)), wv=normal(ks[2], (2, 4)))
    x = normal(ks[3], (2, 5, 4))
    out = multihop.attention(params, x, variant="code")
    assert out.shape == (2, 5, 2)
    for b in range(2):
        ref = multihop.attend(x[b] @ params.wq.T, x[b] @ params.wk.T, x[b] @ params.wv.T, variant="code")
        np.testing.assert_allclose(out[b], ref, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("variant", multihop.VARIANTS)
def test_multihop_grad_logits_matches_autodiff(seed, variant):
    ks = jax.random.split(jax.random.key(seed), 3)
    n, dv = 5, 3
    logits, v, g = normal(ks[0], (n, n)), normal(ks[1], (n, dv)), normal(ks[2], (n, dv))

    def loss(s):
        return jnp.sum(g * (multihop.hop_matrix(core.weights(s), variant=variant) @ v))

    assert_gradient(loss, lambda s: multihop.grad_logits(s, v, g, variant=variant), logits)


@pytest.mark.parametrize("seed", SEEDS)
def test_multihop_grad_logits_masked(seed):
    ks = jax.random.split(jax.random.key(seed), 3)
    n, dv = 5, 2
    logits, v, g = normal(ks[0], (n, n)), normal(ks[1], (n, dv)), normal(ks[2], (n, dv))
    mask = A.causal_mask(n)

    def loss(s):
        return jnp.sum(g * (multihop.hop_matrix(core.weights(s, mask)) @ v))

    grad = multihop.grad_logits(logits, v, g, mask=mask)
    assert_gradient(loss, lambda s: multihop.grad_logits(s, v, g, mask=mask), logits)
    assert float(jnp.max(jnp.abs(jnp.where(mask, 0.0, grad)))) == 0.0


def test_multihop_validation():
    P = jnp.full((3, 3), 1 / 3)
    with pytest.raises(ValueError, match="variant"):
        multihop.hop_matrix(P, variant="both")
    with pytest.raises(ValueError, match="same number of rows"):
        multihop.attend(jnp.ones((3, 2)), jnp.ones((4, 2)), jnp.ones((4, 1)))
    with pytest.raises(ValueError, match="wv"):
        multihop.attention(multihop.Params(jnp.ones((2, 2)), jnp.ones((2, 2)), jnp.ones((1, 3))), jnp.ones((3, 2)))


# ---------------------------------------------------------------------------
# Geometric prior, its energy and gradients
# ---------------------------------------------------------------------------


def test_geometric_window_is_smallest_horizon_with_small_tail():
    for q, eps in itertools.product([0.02, 0.1, 0.3, 0.5, 0.9], [1e-1, 1e-2, 1e-3]):
        h = int(expanding.window_size(jnp.asarray(q), eps))
        assert (1 - q) ** h <= eps * (1 + 1e-12)
        assert h == 1 or (1 - q) ** (h - 1) > eps


def test_geometric_log_prior_normalises():
    lp = expanding.log_prior(jnp.asarray([0.3, 0.05]), 2000)
    np.testing.assert_allclose(jnp.exp(lp).sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(lp[0, :3], [math.log(0.3), math.log(0.3 * 0.7), math.log(0.3 * 0.49)], rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_geometric_posterior_is_softmax_with_log_prior(seed):
    # Oracle: jax.nn.dot_product_attention with the log-prior as bias.
    ks = jax.random.split(jax.random.key(seed), 3)
    n, d = 7, 4
    qv, k, v = normal(ks[0], (d,)), normal(ks[1], (n, d)), normal(ks[2], (n, d))
    qg = 0.2
    bias = np.log(qg) + np.arange(n) * np.log(1 - qg)
    ref = jax.nn.dot_product_attention(
        qv[None, None, None, :],
        k[None, :, None, :],
        v[None, :, None, :],
        bias=jnp.asarray(bias)[None, None, None, :],
        scale=1 / math.sqrt(d),
    )[0, 0, 0]
    p = expanding.posterior(k @ qv / math.sqrt(d), jnp.asarray(qg))
    # jax.nn.dot_product_attention keeps its softmax in float32 even for float64 inputs,
    # so this oracle is good to float32 precision; the brute-force check below is float64.
    np.testing.assert_allclose(p @ v, ref, rtol=1e-6, atol=1e-7)
    brute = _softmax_rows(np.asarray(k @ qv) / math.sqrt(d) + bias)
    np.testing.assert_allclose(p, brute, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_geometric_energy_gradients(seed):
    ks = jax.random.split(jax.random.key(seed), 2)
    sims = normal(ks[0], (3, 8))
    q = jnp.array([0.2, 0.5, 0.7])
    window = jnp.array([8, 3, 5])
    assert_gradient(
        lambda s: expanding.energy(s, q, window=window), lambda s: expanding.grad_sims(s, q, window=window), sims
    )
    assert_gradient(
        lambda qq: expanding.energy(sims, qq, window=window), lambda qq: expanding.grad_q(sims, qq, window=window), q
    )


def test_geometric_energy_brute_force():
    sims = np.array([0.3, -1.0, 2.0, 0.5])
    q = 0.3
    ref = -math.log(sum(q * (1 - q) ** i * math.exp(s) for i, s in enumerate(sims[:3])))
    np.testing.assert_allclose(expanding.energy(jnp.asarray(sims), jnp.asarray(q), window=3), ref, rtol=1e-13)


def test_geometric_validation():
    with pytest.raises(ValueError, match="q must lie strictly between 0 and 1"):
        expanding.log_prior(jnp.asarray(1.0), 3)
    with pytest.raises(ValueError, match="eps"):
        expanding.window_size(jnp.asarray(0.5), 1.5)
    with pytest.raises(ValueError, match="n must"):
        expanding.log_prior(jnp.asarray(0.5), 0)


# ---------------------------------------------------------------------------
# Expanding attention
# ---------------------------------------------------------------------------


def _expanding_inputs(seed, batch=(3,), n=12, d=4, dv=2):
    ks = jax.random.split(jax.random.key(seed), 3)
    return normal(ks[0], batch + (d,)), normal(ks[1], batch + (n, d)), normal(ks[2], batch + (n, dv))


@pytest.mark.parametrize("seed", SEEDS)
def test_expanding_zero_steps_full_window_is_softmax_with_log_prior(seed):
    q, k, v = _expanding_inputs(seed, n=10)
    alpha0, beta0 = 2.0, 3.0
    q0 = alpha0 / (alpha0 + beta0)
    res = expanding.attend(q, k, v, alpha0=alpha0, beta0=beta0, eps=1e-12, max_iter=0)
    assert np.all(np.asarray(res.window) == 10)  # H(0.4) at eps=1e-12 is 55, clipped to n
    bias = np.log(q0) + np.arange(10) * np.log(1 - q0)
    s = np.einsum("bd,bnd->bn", np.asarray(q), np.asarray(k)) / 2.0
    ref = np.einsum("bn,bne->be", _softmax_rows(s + bias), np.asarray(v))
    np.testing.assert_allclose(res.output, ref, rtol=1e-12, atol=1e-13)
    assert np.all(np.asarray(res.iterations) == 0)


def _reference_meanfield(qv, k, v, alpha, beta, eps, tol, max_iter):
    """Plain-Python transcription of the three updates of §5 (one query)."""
    n, d = k.shape
    s = k @ qv / math.sqrt(d)
    hs, qs = [], [alpha / (alpha + beta)]
    converged = False
    for _ in range(max_iter):
        qt = alpha / (alpha + beta)
        h = min(max(math.ceil(math.log(eps) / math.log(1 - qt)), 1), n)
        logits = s[:h] + np.log(qt) + np.arange(h) * np.log(1 - qt)
        p = _softmax_rows(logits)
        alpha, beta = alpha + 1.0, beta + float(np.arange(h) @ p)
        hs.append(h)
        qs.append(alpha / (alpha + beta))
        if abs(qs[-1] - qt) < tol:
            converged = True
            break
    qT = alpha / (alpha + beta)
    h = min(max(math.ceil(math.log(eps) / math.log(1 - qT)), 1), n)
    p = _softmax_rows(s[:h] + np.log(qT) + np.arange(h) * np.log(1 - qT))
    ops = d * n + sum(hs) + h + v.shape[1] * h  # the dense path computes all n dot products
    return dict(
        output=p @ v[:h],
        window=h,
        iterations=len(hs),
        ops=ops,
        q=qT,
        converged=converged,
        qs=qs,
        max_window=max(hs + [h]),
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("hyper", [(1.0, 1.0), (5.0, 0.5), (0.5, 20.0)])
def test_expanding_matches_reference_loop(seed, hyper):
    q, k, v = _expanding_inputs(seed, batch=(4,), n=40)
    res = expanding.attend(q, k, v, alpha0=hyper[0], beta0=hyper[1], eps=1e-2, tol=1e-4, max_iter=300)
    for b in range(4):
        ref = _reference_meanfield(np.asarray(q[b]), np.asarray(k[b]), np.asarray(v[b]), *hyper, 1e-2, 1e-4, 300)
        assert int(res.window[b]) == ref["window"]
        assert int(res.iterations[b]) == ref["iterations"]
        assert bool(res.converged[b]) == ref["converged"]
        np.testing.assert_allclose(res.ops[b], ref["ops"], rtol=1e-15)
        assert int(res.max_window[b]) == ref["max_window"] and int(res.dots[b]) == 40
        np.testing.assert_allclose(res.q[b], ref["q"], rtol=1e-12)
        np.testing.assert_allclose(res.output[b], ref["output"], rtol=1e-11, atol=1e-13)
        t = ref["iterations"]
        np.testing.assert_allclose(res.q_trace[b, : t + 1], ref["qs"], rtol=1e-12)
        np.testing.assert_allclose(res.q_trace[b, t:], ref["q"], rtol=1e-12)  # held after convergence


@pytest.mark.parametrize("seed", SEEDS)
def test_meanfield_reaches_tolerance_within_step_limit(seed):
    q, k, v = _expanding_inputs(seed, batch=(6,), n=64)
    tol, max_iter = 1e-3, 200
    res = expanding.attend(q, k, v, tol=tol, max_iter=max_iter)
    assert bool(jnp.all(res.converged))
    assert int(jnp.max(res.iterations)) < max_iter
    tr = np.asarray(res.q_trace)
    for b in range(6):
        t = int(res.iterations[b])
        assert abs(tr[b, t] - tr[b, t - 1]) < tol
        assert np.all(np.abs(np.diff(tr[b, :t])) >= tol)  # it stopped at the first step below tol
    # alpha counts the updates exactly (update 3).
    np.testing.assert_allclose(res.alpha, 1.0 + res.iterations, rtol=1e-15)


def test_expanding_step_limit_is_respected():
    q, k, v = _expanding_inputs(0, batch=(3,), n=64)
    res = expanding.attend(q, k, v, tol=1e-9, max_iter=5)
    assert np.all(np.asarray(res.iterations) == 5)
    assert not bool(jnp.any(res.converged))


def test_expanding_caches_dot_products():
    # Only the sims of keys inside the largest window may influence the output.
    q, k, v = _expanding_inputs(1, batch=(2,), n=50)
    res = expanding.attend(q, k, v, alpha0=20.0, beta0=1.0)
    hmax = int(jnp.max(res.max_window))
    assert hmax < 50
    k2 = k.at[:, hmax:].set(100.0)
    res2 = expanding.attend(q, k2, v, alpha0=20.0, beta0=1.0)
    np.testing.assert_array_equal(res.output, res2.output)
    np.testing.assert_array_equal(res.ops, res2.ops)


_FIELDS_EQUAL = ("window", "iterations", "converged", "max_window", "overflow")
_FIELDS_CLOSE = ("output", "q", "alpha", "beta", "q_trace")


def _assert_same_as_dense(res, dense, d, rows=slice(None), ops=True):
    for f in _FIELDS_EQUAL:
        np.testing.assert_array_equal(np.asarray(getattr(res, f))[rows], np.asarray(getattr(dense, f))[rows], f)
    for f in _FIELDS_CLOSE:
        np.testing.assert_allclose(
            np.asarray(getattr(res, f))[rows], np.asarray(getattr(dense, f))[rows], rtol=1e-12, atol=1e-14, err_msg=f
        )
    m = res.weights.shape[-1]
    np.testing.assert_allclose(res.weights[rows], dense.weights[rows, ..., :m], rtol=1e-12, atol=1e-14)
    assert float(jnp.max(jnp.abs(dense.weights[rows, ..., m:]), initial=0.0)) == 0.0
    # ops differ only by the dot products: cap on the truncated path, n on the dense one (and, after
    # max_window="auto", by its failed attempts: ops=False).
    if ops:
        np.testing.assert_allclose(
            res.ops[rows] - d * res.dots[rows], dense.ops[rows] - d * dense.dots[rows], rtol=1e-15
        )


def test_truncated_path_equals_dense_path():
    # Exactness: no window exceeds the cap, so the truncated iteration sees the same numbers.
    # Three seeds of random inputs stacked on a batch axis (one compilation per cap).
    ins = [_expanding_inputs(seed, batch=(3,), n=300) for seed in SEEDS]
    q, k, v = (jnp.stack([x[i] for x in ins]) for i in range(3))
    ks = jax.random.split(jax.random.key(10), 2)
    alpha0, beta0 = jnp.exp(normal(ks[0], (3, 3))), jnp.exp(normal(ks[1], (3, 3)))
    mask = jnp.arange(300) < jnp.array([[300], [40], [7]])[None, :, :]
    kw = dict(alpha0=alpha0, beta0=beta0, mask=mask, tol=1e-4, max_iter=150)
    dense = expanding.attend(q, k, v, **kw)
    hmax = int(jnp.max(dense.max_window))
    assert hmax < 300 and not bool(jnp.any(dense.overflow)) and np.all(np.asarray(dense.dots) == 300)
    res = expanding.attend(q, k, v, max_window=hmax, **kw)  # the boundary case: a window equal to the cap
    assert res.weights.shape == (3, 3, hmax) and np.all(np.asarray(res.dots) == hmax)
    _assert_same_as_dense(res, dense, 4)
    auto = expanding.attend(q, k, v, max_window="auto", **kw)
    _assert_same_as_dense(auto, dense, 4)
    # Caps tried: the smallest power of two >= max(32, 2 H(q_0)), doubled until it covers max_window.
    h0 = int(jnp.max(expanding.window_size(alpha0 / (alpha0 + beta0), 1e-2)))
    tried = [2 ** math.ceil(math.log2(max(32, 2 * h0)))]
    while tried[-1] < hmax:
        tried.append(2 * tried[-1])
    assert auto.weights.shape[-1] == min(tried[-1], 300)
    # ops and dots count every attempt.
    assert np.all(np.asarray(auto.dots) == sum(min(c, 300) for c in tried))


def test_truncated_path_overflow_fallback():
    q, k, v = _expanding_inputs(4, batch=(16,), n=200)
    alpha0 = jnp.linspace(0.3, 30.0, 16)  # small alpha0: long windows; large: short ones
    dense = expanding.attend(q, k, v, alpha0=alpha0, beta0=1.0)
    hm = np.asarray(dense.max_window)
    cap = int(np.median(hm))
    res = expanding.attend(q, k, v, alpha0=alpha0, beta0=1.0, max_window=cap)
    over = np.asarray(res.overflow)
    # The overflow flag is exact: set iff the dense path needed a larger window than the cap ...
    np.testing.assert_array_equal(over, hm > cap)
    assert 0 < over.sum() < 16
    # ... and every query without overflow gets the dense result, in the same batch.
    _assert_same_as_dense(res, dense, 4, rows=~over)
    assert np.all(np.asarray(res.window)[over] <= cap)
    # "auto" doubles until nothing overflows; the dense path never overflows.
    auto = expanding.attend(q, k, v, alpha0=alpha0, beta0=1.0, max_window="auto")
    assert not bool(jnp.any(auto.overflow)) and auto.weights.shape[-1] >= hm.max()
    _assert_same_as_dense(auto, dense, 4)
    # An integer cap is static and works under jit.
    jitted = jax.jit(lambda qq: expanding.attend(qq, k, v, alpha0=alpha0, beta0=1.0, max_window=cap))(q)
    np.testing.assert_array_equal(jitted.overflow, over)
    with pytest.raises(ValueError, match="auto"):
        jax.jit(lambda qq: expanding.attend(qq, k, v, max_window="auto").output)(q)
    with pytest.raises(ValueError, match="max_window"):
        expanding.attend(q, k, v, max_window=0)


def test_truncated_prediction_projects_only_the_cap_and_matches_dense():
    task = toy.make_expanding_task(6, 2, key=jax.random.key(0))
    params = toy.init_toy("one_layer", 6, 4, key=jax.random.key(1))
    x, _, _ = toy.sample_expanding(task, 500, 8, 0.2, key=jax.random.key(2))
    yd, dense = toy.predict_expanding_task("expanding", params, x)
    ya, auto = toy.predict_expanding_task("expanding", params, x, max_window="auto")
    cap = auto.weights.shape[-1]
    assert cap < 499 and not bool(jnp.any(auto.overflow))
    np.testing.assert_allclose(ya, yd, rtol=1e-12, atol=1e-14)
    _assert_same_as_dense(auto, dense, 4)
    # Tokens beyond the cap are never read: changing them changes nothing (bit for bit).
    x2 = x.at[:, : 499 - cap].set(1e3)
    np.testing.assert_array_equal(
        toy.predict_expanding_task("expanding", params, x2, max_window=cap)[0],
        toy.predict_expanding_task("expanding", params, x, max_window=cap)[0],
    )
    # The self model reads every token.
    ys = toy.predict_expanding_task("self", params, x)[0]
    assert float(jnp.max(jnp.abs(toy.predict_expanding_task("self", params, x2)[0] - ys))) > 0
    with pytest.raises(ValueError, match="auto"):
        jax.jit(lambda xx: toy.predict_expanding_task("expanding", params, xx, max_window="auto")[0])(x)


def _auto_and_dense(x, params, alpha0):
    auto = expanding.attention(params, x, alpha0=alpha0, max_window="auto")
    dense = expanding.attention(params, x, alpha0=alpha0)
    _assert_same_as_dense(auto, dense, params.wq.shape[0], ops=False)
    return auto.weights.shape[-1]


def test_auto_cap_cache_is_exact_and_keyed_by_shape():
    # The cap of max_window="auto" is cached per shape; every result must still equal the dense path.
    expanding._CAPS.clear()
    task = toy.make_expanding_task(6, 2, key=jax.random.key(0))
    params = expanding.Params(*toy.init_toy("one_layer", 6, 4, key=jax.random.key(1)))
    x, _, _ = toy.sample_expanding(task, 201, 8, 0.2, key=jax.random.key(2))
    assert _auto_and_dense(x, params, 30.0) == 32  # short windows: the first cap is enough
    # Same shape, data needing longer windows (up to 45): the cached 32 overflows and grows (a cache trusted
    # without the overflow check would return a clipped, wrong result here).
    assert _auto_and_dense(x, params, 1.0) == 64
    assert _auto_and_dense(x, params, 30.0) == 64  # the cache only grows: exact, if larger than needed
    # Another shape with fewer keys than the cached cap: it starts afresh (a cache that ignored the shape
    # would start at 64, more than its 49 keys).
    x2, _, _ = toy.sample_expanding(task, 50, 8, 0.2, key=jax.random.key(3))
    assert _auto_and_dense(x2, params, 30.0) == 32
    assert len(expanding._CAPS) == 2


def test_auto_checks_what_it_reads():
    task = toy.make_expanding_task(6, 2, key=jax.random.key(0))
    params = expanding.Params(*toy.init_toy("one_layer", 6, 4, key=jax.random.key(1)))
    x, _, _ = toy.sample_expanding(task, 201, 8, 0.2, key=jax.random.key(2))
    cap = expanding.attention(params, x, alpha0=30.0, max_window="auto").weights.shape[-1]
    with pytest.raises(ValueError, match="x and params must be finite"):
        expanding.attention(params, x.at[3, -2, 0].set(jnp.nan), alpha0=30.0, max_window="auto")
    # A token beyond every window is never read, so never checked: the result is that of the finite input.
    far = expanding.attention(params, x.at[3, 0, 0].set(jnp.nan), alpha0=30.0, max_window="auto")
    assert far.weights.shape[-1] == cap < 200
    np.testing.assert_array_equal(far.output, expanding.attention(params, x, alpha0=30.0, max_window="auto").output)
    q, k, v = _expanding_inputs(0, batch=(2,), n=50)
    with pytest.raises(ValueError, match=r"q and k and v must be finite \(a value read by the first \d+ keys"):
        expanding.attend(q, k.at[0, 1, 0].set(jnp.inf), v, max_window="auto")


def test_truncated_path_with_a_far_dominant_key():
    # A key far inside the cap with a score 1000 above the nearest one: the truncated loop's shift by the
    # largest score would underflow e^(s_0 - c), so it takes the per-step shift; still the dense result.
    q, k, v = _expanding_inputs(5, batch=(3,), n=80)
    k = k.at[1, 40].set(300.0 * q[1])
    kw = dict(alpha0=2.0, beta0=1.0, eps=1e-2)
    dense = expanding.attend(q, k, v, **kw)
    assert float(jnp.max(dense.max_window)) < 64
    res = expanding.attend(q, k, v, max_window=64, **kw)
    assert not bool(jnp.any(res.overflow))
    _assert_same_as_dense(res, dense, 4)


def test_expanding_mask_and_self_ops():
    q, k, v = _expanding_inputs(2, batch=(2,), n=8)
    mask = jnp.arange(8)[None, :] < jnp.array([[3], [8]])
    res = expanding.attend(q, k, v, mask=mask, alpha0=0.5, beta0=10.0)
    assert float(jnp.max(jnp.abs(res.weights[0, 3:]))) == 0.0
    assert expanding.self_attention_ops(10, 4, 2) == 10 * 4 + 10 + 10 * 2


def test_expanding_is_differentiable():
    q, k, v = _expanding_inputs(3, batch=(2,), n=16)

    def f(kk):
        return jnp.sum(expanding.attend(q, kk, v, max_iter=50).output ** 2)

    g = jax.grad(f)(k)
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.max(jnp.abs(g))) > 0


def test_expanding_validation():
    q, k, v = _expanding_inputs(0, batch=(2,), n=5)
    with pytest.raises(ValueError, match="beta0"):
        expanding.attend(q, k, v, beta0=-1.0)
    with pytest.raises(ValueError, match="tol"):
        expanding.attend(q, k, v, tol=0.0)
    with pytest.raises(ValueError, match="feature"):
        expanding.attend(q[:, :3], k, v)
    with pytest.raises(ValueError, match="k must be finite"):
        expanding.attend(q, k.at[0, 0, 0].set(jnp.nan), v)


# ---------------------------------------------------------------------------
# Toy tasks
# ---------------------------------------------------------------------------


def test_multihop_task_structure():
    task = toy.make_multihop_task(8, 2, key=jax.random.key(0))
    assert float(jnp.max(jnp.abs(task.w_r @ task.w_r))) < 1e-12  # W_r^2 = 0: x_2 independent of x_0
    assert int(jnp.linalg.matrix_rank(task.w_r)) == 2
    x, y, pos = toy.sample_multihop(task, 6, 4000, key=jax.random.key(1))
    rows = jnp.arange(4000)
    x0, x1 = x[rows, pos[:, 0]], x[rows, pos[:, 1]]
    np.testing.assert_allclose(y, (x0 + x1) @ task.w_y, rtol=1e-12, atol=1e-12)
    assert np.all(np.sort(np.asarray(pos), axis=1)[:, 1:] != np.sort(np.asarray(pos), axis=1)[:, :-1])
    # Empirical Var(y) vs the derived formula: 4000 samples, 5 standard errors of a variance.
    var = float(toy.multihop_target_variance(task))
    assert abs(float(jnp.var(y)) - var) < 5 * var * math.sqrt(2 / 4000)


def test_expanding_task_distance_is_truncated_geometric():
    task = toy.make_expanding_task(6, 2, key=jax.random.key(0))
    n, p, B = 12, 0.2, 20000
    x, y, dist = toy.sample_expanding(task, n, B, p, key=jax.random.key(1))
    rows = jnp.arange(B)
    np.testing.assert_allclose(y, x[rows, n - 2 - dist] @ task.w_y, rtol=1e-12, atol=1e-12)
    counts = np.bincount(np.asarray(dist), minlength=n - 1)
    probs = p * (1 - p) ** np.arange(n - 1)
    probs /= probs.sum()
    assert counts.size == n - 1
    assert np.all(np.abs(counts / B - probs) < 5 * np.sqrt(probs * (1 - probs) / B))


def test_toy_predictions_match_module_functions():
    key = jax.random.key(0)
    task = toy.make_multihop_task(6, 2, key=key)
    x, y, pos = toy.sample_multihop(task, 5, 3, key=key)
    params = toy.init_toy("multihop_code", 6, 4, key=key)
    yhat = toy.predict_multihop_task("multihop_code", params, x, pos[:, 2])
    full = multihop.attention(params, x, variant="code")
    np.testing.assert_allclose(yhat, full[jnp.arange(3), pos[:, 2], 0], rtol=1e-13)
    # Permutation equivariance: reading out at x_2's shuffled position = putting x_2 first.
    perm = jnp.argsort(jnp.where(jnp.arange(5)[None, :] == pos[:, 2:3], -1, jnp.arange(5)[None, :]), axis=1)
    xf = jnp.take_along_axis(x, perm[:, :, None], axis=1)
    np.testing.assert_allclose(
        toy.predict_multihop_task("multihop_code", params, xf, jnp.zeros(3, int)), yhat, rtol=1e-12
    )


def test_single_head_family_matches_named_models():
    # run_multihop_experiments trains the single-head models as c0 I + c1 P + c2 P^2.
    key = jax.random.key(3)
    task = toy.make_multihop_task(6, 2, key=key)
    x, _, pos = toy.sample_multihop(task, 5, 4, key=key)
    params = toy.init_toy("one_layer", 6, 4, key=key)
    for m, c in toy._HOP_COEFFS.items():
        np.testing.assert_allclose(
            toy._predict_mh_coeffs(jnp.asarray(c), params, x, pos[:, 2]),
            toy.predict_multihop_task(m, params, x, pos[:, 2]),
            rtol=1e-12,
            atol=1e-14,
        )


def test_same_key_same_result_and_validation():
    import optax

    opt = optax.adam(1e-2)
    # Tiny sizes: the cost of this test is compilation (one program per runner).
    small = dict(optimizer=opt, n_steps=3, batch=4, n_nodes=3, d=2, d_k=1, rank=1, n_test=8)
    a = toy.run_multihop_experiment("multihop_paper", [0, 1], **small)
    b = toy.run_multihop_experiment("multihop_paper", [0, 1], **small)
    np.testing.assert_array_equal(a.curve, b.curve)
    assert a.curve.shape == (2, 3)
    c = toy.run_multihop_experiment("multihop_paper", [2, 1], **small)
    np.testing.assert_array_equal(c.curve[1], a.curve[1])
    assert not np.array_equal(c.curve[0], a.curve[0])
    small_ex = dict(optimizer=opt, n_steps=2, batch=4, n=4, d=2, d_k=1, rank=1, n_test=4, max_iter=2)
    r1, s1 = toy.run_expanding_experiment("expanding", [0], [0.5], **small_ex)
    r2, s2 = toy.run_expanding_experiment("expanding", [0], [0.5], **small_ex)
    np.testing.assert_array_equal(r1.curve, r2.curve)
    np.testing.assert_array_equal(s1["ops"], s2["ops"])
    with pytest.raises(ValueError, match="model"):
        toy.run_multihop_experiment("three_layer", [0], optimizer=opt)
    with pytest.raises(ValueError, match="models"):
        toy.run_multihop_experiments((), [0], optimizer=opt)
    with pytest.raises(ValueError, match="optimizer"):
        toy.run_multihop_experiment("one_layer", [0], optimizer=None)
    with pytest.raises(ValueError, match="rank"):
        toy.run_multihop_experiment("one_layer", [0], optimizer=opt, d=4, rank=3)
    with pytest.raises(ValueError, match="ps"):
        toy.run_expanding_experiment("self", [0], [0.0], optimizer=opt)
    with pytest.raises(ValueError, match="p must"):
        toy.sample_expanding(toy.make_expanding_task(4, 1, key=jax.random.key(0)), 5, 2, 1.5, key=jax.random.key(0))


def test_progress_bar_reaches_total_and_leaves_results_unchanged():
    import optax

    opt = optax.adam(1e-2)
    small = dict(n_steps=30, batch=8, n_nodes=4, d=4, d_k=4, rank=2, n_test=16)
    a = toy.run_multihop_experiment("one_layer", [0, 1], optimizer=opt, **small)
    b = toy.run_multihop_experiment("one_layer", [0, 1], optimizer=opt, progress=True, **small)
    assert _progress.last == (30, 30) and _progress._bar is None
    # the host callback changes the fusion of the loop body: equal to round-off
    np.testing.assert_allclose(np.asarray(b.curve), np.asarray(a.curve), rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(b.final), np.asarray(a.final), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="progress must be a bool"):
        toy.run_multihop_experiment("one_layer", [0], optimizer=opt, progress="yes", **small)
