"""GRU and minGRU (§18 of the lecture notes): cells, the four scans, the log-space gradient, the classifier.

Oracles: plain NumPy loops of the notes' equations, ``scipy.special.expit``,
``sklearn.metrics.log_loss``, ``jax.grad`` and finite differences
(``lse_energy.testing.assert_gradient``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.special import expit, log_expit
from sklearn.metrics import log_loss

from lse_energy import gru
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, relative_error


def np_scan(a, b, h0):
    """h_n = a_n h_{n-1} + b_n, one step at a time in NumPy."""
    h, out = np.array(h0, float), []
    for an, bn in zip(a, b):
        h = an * h + bn
        out.append(h)
    return np.array(out)


def np_gru(p, xs):
    """The notes' GRU (§18.3) in NumPy, with h^{n-1} in the update (the transcription's h~^{n-1})."""
    p = gru.Params(*(np.asarray(v) for v in p))
    h, out = np.zeros(p.W.shape[0]), []
    for x in xs:
        g = expit(h @ p.W_g + x @ p.U_g + p.b_g)
        r = expit(h @ p.W_r + x @ p.U_r + p.b_r)
        cand = np.tanh((h * r) @ p.W + x @ p.U + p.b)
        h = g * cand + (1 - g) * h
        out.append(h)
    return np.array(out)


def np_min_gru(p, xs):
    p = gru.MinParams(*(np.asarray(v) for v in p))
    g = expit(xs @ p.U_g + p.b_g)
    return np_scan(1 - g, g * (xs @ p.U + p.b), np.zeros(p.U.shape[1]))


def coeffs(seed, N=50, H=4):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.01, 0.99, (N, H)), rng.normal(size=(N, H)), rng.normal(size=H)


@pytest.mark.parametrize("seed", SEEDS)
def test_three_scans_agree_with_numpy_loop(seed):
    a, b, h0 = coeffs(seed)
    ref = np_scan(a, b, h0)
    for h in (gru.scan_sequential(a, b, h0), gru.scan_parallel(a, b, h0), gru.scan_log_signed(np.log(a), b, h0)):
        assert relative_error(h, ref) < 1e-12


@pytest.mark.parametrize("seed", SEEDS)
def test_scan_log_positive_elementwise(seed):
    a, b, h0 = coeffs(seed)
    b, h0 = np.abs(b), np.abs(h0)
    ref = np_scan(a, b, h0)
    np.testing.assert_allclose(np.exp(gru.scan_log(np.log(a), np.log(b), np.log(h0))), ref, rtol=1e-12)


def test_scan_log_handles_zero_initial_state():
    a, b, _ = coeffs(3)
    b = np.abs(b)
    out = gru.scan_log(np.log(a), np.log(b), np.full(4, -np.inf))
    np.testing.assert_allclose(np.exp(out), np_scan(a, b, np.zeros(4)), rtol=1e-12)


def test_cumprod_underflows_where_log_space_does_not():
    rng = np.random.default_rng(0)
    N = 4096
    a, b, h0 = rng.uniform(0.5, 0.9, (N, 3)), rng.normal(size=(N, 3)), rng.normal(size=3)
    assert np.all(np.sum(np.log(a), axis=0) < -745)  # prod a underflows in float64
    naive = np.asarray(gru.scan_cumprod(a, b, h0))
    assert not np.all(np.isfinite(naive))
    ref = np_scan(a, b, h0)
    assert relative_error(gru.scan_log_signed(np.log(a), b, h0), ref) < 1e-12
    short = slice(0, 20)  # before the underflow the closed form is right
    assert relative_error(naive[short], ref[short]) < 1e-10


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_scan_log(seed):
    rng = np.random.default_rng(seed)
    N, H = 9, 3
    x = (
        jnp.asarray(rng.normal(size=(N, H)) - 1.0),
        jnp.asarray(rng.normal(size=(N, H))),
        jnp.asarray(rng.normal(size=H)),
    )
    lam = jnp.asarray(rng.normal(size=(N, H)))
    assert_gradient(lambda t: jnp.sum(lam * gru.scan_log(*t)), lambda t: gru.grad_scan_log(*t, lam), x)


@pytest.mark.parametrize("seed", SEEDS)
def test_gru_matches_numpy_and_cell(seed):
    rng = np.random.default_rng(seed)
    p = gru.init_params(5, 4, 3, key=jax.random.key(seed))
    xs = rng.normal(size=(2, 6, 5))
    hs = gru.gru(p, xs)
    for i in range(2):
        np.testing.assert_allclose(hs[i], np_gru(p, xs[i]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gru.gru_cell(p, hs[:, 2], xs[:, 3]), hs[:, 3], rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", gru.METHODS)
def test_min_gru_matches_numpy(seed, method):
    rng = np.random.default_rng(seed)
    p = gru.init_min_params(5, 4, 3, key=jax.random.key(seed))
    p = p._replace(b=jnp.asarray(rng.normal(size=4)), b_g=jnp.asarray(rng.normal(size=4)))
    xs = rng.normal(size=(2, 30, 5))
    hs = gru.min_gru(p, xs, method=method)
    for i in range(2):
        assert relative_error(hs[i], np_min_gru(p, xs[i])) < 1e-12


def test_min_coefficients_keep_precision_near_one():
    p = gru.init_min_params(1, 1, 2, key=jax.random.key(0))
    p = p._replace(U_g=jnp.zeros((1, 1)), b_g=jnp.array([40.0]))  # g = sigma(40), 1 - g ~ 4e-18
    a, _ = gru.min_coefficients(p, jnp.zeros((1, 1, 1)))
    np.testing.assert_allclose(a[0, 0, 0], expit(-40.0), rtol=1e-14)
    assert float(1 - expit(40.0)) == 0.0  # the naive 1 - g would be 0


def test_sigmoid_is_two_way_softmax():
    a = np.linspace(-30, 30, 121)
    np.testing.assert_allclose(gru.sigmoid(a), expit(a), rtol=1e-14)
    np.testing.assert_allclose(gru.sigmoid(a), jax.nn.softmax(jnp.stack([a, 0 * a], -1), axis=-1)[:, 0], rtol=1e-14)
    np.testing.assert_allclose(gru.log_sigmoid(a), log_expit(a), rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_loss_is_sklearn_log_loss(seed):
    rng = np.random.default_rng(seed)
    for p in (
        gru.init_params(4, 3, 5, key=jax.random.key(seed)),
        gru.init_min_params(4, 3, 5, key=jax.random.key(seed)),
    ):
        xs, y = rng.normal(size=(12, 5, 4)), rng.integers(0, 5, 12)
        z = np.asarray(gru.logits(p, xs))
        prob = np.exp(z - z.max(1, keepdims=True))
        prob /= prob.sum(1, keepdims=True)
        np.testing.assert_allclose(gru.loss(p, xs, y), log_loss(y, prob, labels=range(5)), rtol=1e-12)
        np.testing.assert_allclose(gru.accuracy(p, xs, y), np.mean(z.argmax(1) == y))


def test_param_count_formula():
    D, K = 8, 10
    for H in (1, 5, 21):
        assert gru.param_count(gru.init_params(D, H, K, key=jax.random.key(0))) == 3 * (H * H + D * H + H) + H * K + K
        assert gru.param_count(gru.init_min_params(D, H, K, key=jax.random.key(0))) == 2 * (D * H + H) + H * K + K
    assert (
        gru.param_count(gru.init_params(D, 21, K, key=jax.random.key(0)))
        == gru.param_count(gru.init_min_params(D, 75, K, key=jax.random.key(0)))
        == 2110
    )


def _data(seed=0, B=40):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, B)
    xs = rng.normal(size=(B, 5, 2)) * 0.3 + y[:, None, None] * np.array([1.0, -1.0])
    return jnp.asarray(xs), jnp.asarray(y)


@pytest.mark.parametrize("init", [gru.init_params, gru.init_min_params])
def test_fit_learns_and_is_reproducible(init):
    xs, y = _data()
    p = init(2, 6, 3, key=jax.random.key(0))
    kw = {
        "key": jax.random.key(1),
        "optimizer": optax.adam(3e-2),
        "n_epochs": 15,
        "batch_size": 10,
        "x_eval": xs,
        "y_eval": y,
    }
    r1, r2 = gru.fit(p, xs, y, **kw), gru.fit(p, xs, y, **kw)
    assert r1.energies.shape == (15,) and r1.converged is None and r1.n_iter == 15
    assert r1.energies[-1] < r1.energies[0]
    np.testing.assert_array_equal(r1.energies, r2.energies)
    np.testing.assert_allclose(r1.extras.eval_accuracy[-1], gru.accuracy(r1.params, xs, y))
    if isinstance(p, gru.MinParams):
        r3 = gru.fit(p, xs, y, **kw, method="sequential")
        np.testing.assert_allclose(r3.energies, r1.energies, rtol=1e-10)


def test_fit_float32():
    xs, y = _data()
    p = jax.tree_util.tree_map(lambda v: v.astype(jnp.float32), gru.init_min_params(2, 4, 3, key=jax.random.key(0)))
    r = gru.fit(
        p, xs.astype(jnp.float32), y, key=jax.random.key(1), optimizer=optax.adam(1e-2), n_epochs=2, batch_size=10
    )
    assert r.energies.dtype == jnp.float32 and all(v.dtype == jnp.float32 for v in r.params)


def test_fit_continues_from_its_optimizer_state():
    """Two calls of fit, the second from the first's parameters and Adam state (as chapter 15's
    continuation check trains), equal a plain optax loop over the same minibatches that carries the
    Adam state across; restarting the state instead gives other parameters (the mutant it catches)."""
    D, H, K, B, bs = 3, 4, 5, 24, 8
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(B, 6, D)))
    y = jnp.asarray(rng.integers(0, K, B))
    opt = optax.adam(1e-2)
    keys = (jax.random.key(1), jax.random.key(2))
    grad = jax.jit(jax.grad(gru.loss))  # the loss's own gradient, one compilation per model
    for init in (gru.init_params, gru.init_min_params):
        p0 = init(D, H, K, key=jax.random.key(0))
        first = gru.fit(p0, x, y, key=keys[0], optimizer=opt, n_epochs=1, batch_size=bs)
        go_on = dict(key=keys[1], optimizer=opt, n_epochs=1, batch_size=bs)
        cont = gru.fit(first.params, x, y, opt_state=first.extras.opt_state, **go_on)
        fresh = gru.fit(first.params, x, y, **go_on)
        p, s = p0, opt.init(p0)  # oracle: the loop written out, one epoch per key
        for k in keys:
            perm = np.asarray(jax.random.permutation(jax.random.split(k, 1)[0], B))
            for j in range(B // bs):
                idx = perm[j * bs : (j + 1) * bs]
                g = grad(p, x[idx], y[idx])
                u, s = opt.update(g, s, p)
                p = optax.apply_updates(p, u)
        assert relative_error(cont.params, p) < 1e-12
        assert relative_error(fresh.params, p) > 1e-6
