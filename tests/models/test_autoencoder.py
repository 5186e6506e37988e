"""Tests of lse_energy.autoencoder (tied-weight autoencoders, §19 of the lecture notes).

Oracles: ``jax.grad`` and finite differences (``lse_energy.testing.assert_gradient``), an untied autoencoder
differentiated by ``jax.grad`` (for the encoder/decoder split of the gradient), NumPy (the map, the loss,
the SVD), ``scipy.linalg.subspace_angles`` and scikit-learn's ``PCA`` (the principal subspace).
Bad inputs are cases of ``tests/contracts/test_validation.py`` (not repeated here).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg as sl
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA

from lse_energy import autoencoder as ae
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def _instance(seed, d=6, k=3, n=9):
    rng = np.random.default_rng(seed)
    p = ae.Params(
        jnp.asarray(rng.normal(size=(k, d))), jnp.asarray(rng.normal(size=k)), jnp.asarray(rng.normal(size=d))
    )
    return p, jnp.asarray(rng.normal(size=(n, d)))


def _np_f(a, activation):
    return {"linear": a, "sigmoid": 1 / (1 + np.exp(-a)), "tanh": np.tanh(a)}[activation]


@pytest.mark.parametrize("activation", ae.ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_map_and_loss_match_numpy(seed, activation):
    p, x = _instance(seed)
    W, b, c, X = (np.asarray(a) for a in (p.W, p.b, p.c, x))
    h = _np_f(X @ W.T + b, activation)
    xr = h @ W + c
    np.testing.assert_allclose(ae.encode(p, x, activation), h, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ae.decode(p, jnp.asarray(h)), xr, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ae.reconstruct(p, x, activation), xr, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ae.loss(p, x, activation), 0.5 * np.mean(np.sum((xr - X) ** 2, axis=1)), rtol=1e-13)


@pytest.mark.parametrize("activation", ae.ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_grad_loss_matches_jax_grad_and_finite_differences(seed, activation):
    p, x = _instance(seed)
    assert_gradient(lambda q: ae.loss(q, x, activation), lambda q: ae.grad_params(q, x, activation), p)


def _untied_loss(enc, dec, b, c, x, activation):
    h = _np_f_jax(x @ enc.T + b, activation)
    r = h @ dec.T + c - x
    return 0.5 * jnp.sum(r * r) / x.shape[0]


def _np_f_jax(a, activation):
    return {"linear": a, "sigmoid": jax.nn.sigmoid(a), "tanh": jnp.tanh(a)}[activation]


@pytest.mark.parametrize("activation", ae.ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_paths_are_the_untied_gradients(seed, activation):
    """Encoder path = d/d(encoder) and decoder path = d/d(decoder)^T of an untied AE at decoder = W^T."""
    p, x = _instance(seed)
    g_enc, g_dec = jax.grad(_untied_loss, argnums=(0, 1))(p.W, p.W.T, p.b, p.c, x, activation)
    paths = ae.grad_loss_paths(p, x, activation)
    np.testing.assert_allclose(paths.encoder, g_enc, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(paths.decoder, g_dec.T, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(paths.encoder + paths.decoder, ae.grad_params(p, x, activation).W, rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_linear_loss_in_second_moment_form(seed):
    p, x = _instance(seed)
    p0 = p._replace(b=jnp.zeros_like(p.b), c=jnp.zeros_like(p.c))
    cov = x.T @ x / x.shape[0]
    np.testing.assert_allclose(ae.linear_loss(p.W, cov), ae.loss(p0, x), rtol=1e-12)
    assert_gradient(lambda w: ae.linear_loss(w, cov), lambda w: ae.grad_linear_loss_W(w, cov), p.W)
    np.testing.assert_allclose(ae.grad_linear_loss_W(p.W, cov), ae.grad_params(p0, x).W, rtol=1e-11, atol=1e-12)
    paths = ae.grad_loss_paths(p0, x)
    E = np.eye(6) - np.asarray(p.W.T @ p.W)
    np.testing.assert_allclose(paths.encoder, -np.asarray(p.W) @ E @ np.asarray(cov), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(paths.decoder, -np.asarray(p.W) @ np.asarray(cov) @ E, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_principal_angles_match_scipy(seed):
    rng = np.random.default_rng(seed)
    for p, q in ((3, 2), (2, 3), (4, 4), (1, 3)):
        a, b = rng.normal(size=(7, p)), rng.normal(size=(7, q))
        ours, ref = ae.principal_angles(a, b), np.sort(sl.subspace_angles(a, b))
        # Where p + q > 7 the subspaces share p + q - 7 directions: those angles are exactly 0.
        # scipy 1.17 (with numpy 2.4) returns them as about 2e-8 (the accuracy of arccos near 1,
        # sqrt(eps)); ours resolves them to round-off. Elsewhere the two agree to 1e-12.
        shared = max(0, p + q - 7)
        np.testing.assert_array_less(ours[:shared], 1e-12)
        np.testing.assert_allclose(ours[:shared], ref[:shared], atol=1e-7)
        np.testing.assert_allclose(ours[shared:], ref[shared:], atol=1e-12)


def test_principal_angles_resolve_tiny_angles():
    theta = 1e-9
    a = np.eye(4)[:, :2]
    b = np.stack([np.array([1.0, 0, 0, 0]), np.array([0, np.cos(theta), np.sin(theta), 0])], axis=1)
    np.testing.assert_allclose(ae.principal_angles(a, b), [0.0, theta], rtol=1e-6, atol=1e-15)


@pytest.fixture(scope="module")
def digits_fit():
    x = load_digits().data / 16.0
    x = jnp.asarray(x - x.mean(0))
    lam_max = float(np.linalg.eigvalsh(np.asarray(x.T @ x) / x.shape[0])[-1])
    k = 4  # (lambda_4 - lambda_5) / lambda_1 = 0.18: a healthy eigengap
    out = ae.fit(ae.init_params(64, k, key=jax.random.key(0)), x, optimizer=optax.sgd(0.25 / lam_max), n_steps=1000)
    return x, k, out


def test_linear_fit_on_digits_finds_the_principal_subspace(digits_fit):
    """Gradient descent on the tied linear loss: span(W^T) = top-4 principal subspace (numpy SVD, sklearn PCA)."""
    x, k, out = digits_fit
    W = np.asarray(out.params.W)
    vt = np.linalg.svd(np.asarray(x), full_matrices=False)[2]
    pca = PCA(k, svd_solver="full").fit(np.asarray(x))
    assert np.max(sl.subspace_angles(W.T, vt[:k].T)) < 1e-4
    assert np.max(sl.subspace_angles(W.T, pca.components_.T)) < 1e-4
    assert np.max(np.asarray(ae.principal_angles(W.T, pca.components_.T))) < 1e-4
    np.testing.assert_allclose(W @ W.T, np.eye(k), atol=1e-8)
    s = np.linalg.svd(np.asarray(x), compute_uv=False)
    np.testing.assert_allclose(out.energies[-1], 0.5 * np.sum(s[k:] ** 2) / x.shape[0], rtol=1e-10)
    e = np.asarray(out.energies)
    assert np.all(np.diff(e) <= 1e-12 * e[:-1])  # gradient descent with step < 1/L decreases the loss


def test_fit_continues_from_its_state_and_keeps_dtype():
    p, x = _instance(0)
    opt = optax.adam(1e-2)
    one = ae.fit(p, x, optimizer=opt, n_steps=10, activation="tanh")
    two = ae.fit(p, x, optimizer=opt, n_steps=5, activation="tanh")
    two = ae.fit(two.params, x, optimizer=opt, n_steps=5, activation="tanh", opt_state=two.extras.opt_state)
    np.testing.assert_allclose(one.params.W, two.params.W, rtol=1e-12)
    out = ae.fit(p, x.astype(jnp.float32), optimizer=opt, n_steps=3)
    assert out.params.W.dtype == jnp.float32 and out.energies.dtype == jnp.float32


def test_init_params_same_key_same_result():
    a = ae.init_params(5, 2, key=jax.random.key(3))
    b = ae.init_params(5, 2, key=jax.random.key(3))
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert a.W.shape == (2, 5) and a.b.shape == (2,) and a.c.shape == (5,)
