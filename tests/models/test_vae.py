"""Tests for lse_energy.vae: scipy densities, jax.grad and finite differences, training runs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.special import logsumexp
from scipy.stats import bernoulli, multivariate_normal, norm

from lse_energy import core, vae
from lse_energy.testing import assert_gradient


def _prior(seed, K=3, d=2):
    rng = np.random.default_rng(seed)
    return vae.MixturePrior(
        jnp.asarray(rng.normal(size=K)),
        jnp.asarray(rng.normal(scale=1.5, size=(K, d))),
        jnp.asarray(rng.normal(scale=0.3, size=(K, d))),
    )


def _mixture_logpdf(prior, z):
    pi = np.exp(np.asarray(prior.logits))
    pi = pi / pi.sum()
    return np.log(
        sum(
            pi[k]
            * multivariate_normal(np.asarray(prior.means[k]), np.diag(np.exp(2 * np.asarray(prior.log_scales[k]))))
            .pdf(z)
            .reshape(-1)
            for k in range(pi.size)
        )
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prior_energy_is_core_energy_of_the_mixture_sim_and_matches_scipy(seed):
    prior = _prior(seed)
    z = jnp.asarray(np.random.default_rng(seed + 10).normal(size=(6, 2)))
    ref = -np.sum(_mixture_logpdf(prior, np.asarray(z)))
    assert np.isclose(float(vae.energy(prior, z)), ref, rtol=1e-12)
    assert np.isclose(float(core.energy(vae.sim(prior, z))), ref, rtol=1e-12)
    assert np.allclose(vae.log_prior(prior, z), _mixture_logpdf(prior, np.asarray(z)), rtol=1e-12)
    w = vae.prior_responsibilities(prior, z)
    assert np.allclose(np.sum(w, axis=1), 1.0, atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grad_prior_energy_matches_jax_grad_and_finite_differences(seed):
    prior = _prior(seed, K=4, d=3)
    z = jnp.asarray(np.random.default_rng(seed + 20).normal(size=(5, 3)))
    assert_gradient(lambda zz: vae.energy(prior, zz), lambda zz: vae.grad_prior_z(prior, zz)[1], z)
    assert_gradient(lambda p: vae.energy(p, z), lambda p: vae.grad_prior_z(p, z)[0], prior)


def test_log_likelihood_matches_scipy():
    rng = np.random.default_rng(0)
    params = vae.init_params(5, 2, 4, key=jax.random.key(0))
    z = jnp.asarray(rng.normal(size=(3, 2)))
    xb = jnp.asarray((rng.random((3, 5)) < 0.5).astype(float))
    logits = np.asarray(vae.decode(params, z))
    ref = np.sum(bernoulli(1 / (1 + np.exp(-logits))).logpmf(np.asarray(xb)), axis=1)
    assert np.allclose(vae.log_likelihood(params, xb, z), ref, rtol=1e-12)
    xg = jnp.asarray(rng.normal(size=(3, 5)))
    ref = np.sum(norm(logits, 0.7).logpdf(np.asarray(xg)), axis=1)
    assert np.allclose(vae.log_likelihood(params, xg, z, decoder="gaussian", obs_scale=0.7), ref, rtol=1e-12)


@pytest.mark.parametrize("n_components", [None, 3])
def test_log_weights_match_scipy_densities(n_components):
    rng = np.random.default_rng(1)
    params = vae.init_params(4, 2, 6, key=jax.random.key(1), n_components=n_components)
    x = jnp.asarray(rng.random((3, 4)))
    eps = jnp.asarray(rng.normal(size=(5, 3, 2)))
    got = np.asarray(vae.log_weights(params, x, eps, decoder="gaussian", obs_scale=0.5))
    mu, logvar = (np.asarray(a) for a in vae.encode(params, x))
    for s in range(5):
        for n in range(3):
            sd = np.exp(0.5 * logvar[n])
            z = mu[n] + eps[s, n] * sd
            log_q = np.sum(norm(mu[n], sd).logpdf(z))
            if n_components is None:
                log_p = np.sum(norm(0, 1).logpdf(z))
            else:
                log_p = _mixture_logpdf(params.prior, z[None])[0]
            out = np.asarray(vae.decode(params, jnp.asarray(z[None])))[0]
            log_lik = np.sum(norm(out, 0.5).logpdf(np.asarray(x[n])))
            assert np.isclose(got[s, n], log_lik + log_p - log_q, rtol=1e-11)


def test_bounds_iwae_is_lse_minus_log_k_and_reduces_to_elbo():
    log_w = jnp.asarray(np.random.default_rng(2).normal(size=(7, 4)) * 3)
    assert np.allclose(vae.iwae_bound(log_w), logsumexp(np.asarray(log_w), axis=0) - np.log(7), rtol=1e-13)
    assert np.allclose(vae.iwae_bound(log_w[:1]), vae.elbo_bound(log_w[:1]), rtol=0, atol=1e-14)
    assert np.all(vae.iwae_bound(log_w) >= vae.elbo_bound(log_w))  # Jensen, per draw of K samples
    params = vae.init_params(4, 2, 6, key=jax.random.key(0))
    x = jnp.asarray(np.random.default_rng(3).random((3, 4)))
    e, i = (
        vae.elbo(params, x, key=jax.random.key(5), n_samples=8),
        vae.iwae(params, x, key=jax.random.key(5), n_samples=8),
    )
    assert e.shape == i.shape == (3,) and np.all(i >= e)


def test_gaussian_kl_and_reparameterize():
    mu, logvar = jnp.asarray([[0.3, -1.0]]), jnp.asarray([[0.2, -0.5]])
    sd = np.exp(0.5 * np.asarray(logvar[0]))
    ref = sum(0.5 * (sd[j] ** 2 + mu[0, j] ** 2 - np.log(sd[j] ** 2) - 1) for j in range(2))
    assert np.isclose(float(vae.gaussian_kl(mu, logvar)[0]), ref, rtol=1e-14)
    assert np.allclose(vae.gaussian_kl(jnp.zeros((2, 3)), jnp.zeros((2, 3))), 0.0)
    eps = jnp.ones((4, 1, 2))
    assert np.allclose(vae.reparameterize(mu, logvar, eps), np.broadcast_to(np.asarray(mu) + sd, (4, 1, 2)))


@pytest.mark.parametrize("n_components", [None, 2])
def test_loss_is_reconstruction_plus_kl(n_components):
    rng = np.random.default_rng(4)
    params = vae.init_params(4, 2, 6, key=jax.random.key(2), n_components=n_components)
    x = jnp.asarray(rng.random((5, 4)))
    eps = jnp.asarray(rng.normal(size=(5, 2)))
    mu, logvar = vae.encode(params, x)
    z = vae.reparameterize(mu, logvar, eps)
    rec = -np.mean(vae.log_likelihood(params, x, z))
    if n_components is None:
        kl = np.mean(vae.gaussian_kl(mu, logvar))
    else:
        ent = np.mean(
            [multivariate_normal(np.asarray(mu[n]), np.diag(np.exp(np.asarray(logvar[n])))).entropy() for n in range(5)]
        )
        kl = -ent - np.mean(_mixture_logpdf(params.prior, np.asarray(z)))
    assert np.isclose(float(vae.loss(params, x, eps)), rec + kl, rtol=1e-12)
    assert np.isclose(float(vae.loss(params, x, eps, kl_weight=0.5)), rec + 0.5 * kl, rtol=1e-12)


def test_linear_gaussian_closed_forms_match_scipy_and_bayes():
    rng = np.random.default_rng(5)
    W, b, s = rng.normal(size=(4, 2)), rng.normal(size=4), 0.6
    x = rng.normal(size=(3, 4))
    lp = np.asarray(vae.linear_gaussian_log_marginal(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x)))
    assert np.allclose(lp, multivariate_normal(b, W @ W.T + s**2 * np.eye(4)).logpdf(x), rtol=1e-12)
    m, C = vae.linear_gaussian_posterior(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x))
    z = rng.normal(size=2)
    for n in range(3):  # Bayes: ln p(z|x) = ln p(x|z) + ln p(z) - ln p(x)
        bayes = (
            multivariate_normal(W @ z + b, s**2 * np.eye(4)).logpdf(x[n])
            + multivariate_normal(np.zeros(2), np.eye(2)).logpdf(z)
            - lp[n]
        )
        assert np.isclose(multivariate_normal(np.asarray(m[n]), np.asarray(C)).logpdf(z), bayes, rtol=1e-11)


def _digits_like(n=40, d=6, seed=0):
    return jnp.asarray(np.random.default_rng(seed).random((n, d)))


@pytest.mark.parametrize("n_components", [None, 3])
def test_fit_returns_fit_result_learns_and_is_deterministic(n_components):
    x = _digits_like()
    params = vae.init_params(6, 2, 8, key=jax.random.key(0), n_components=n_components)
    out = vae.fit(params, x, key=jax.random.key(1), optimizer=optax.adam(1e-2), n_epochs=40, batch_size=10)
    assert isinstance(out, core.FitResult) and out.n_iter == 40 and out.converged is None
    assert out.energies.shape == (40,) and out.extras.kl.shape == (40, 4) and out.extras.batch_losses.shape == (40, 4)
    np.testing.assert_allclose(out.energies, np.mean(np.asarray(out.extras.batch_losses), axis=1), rtol=1e-6)
    assert np.mean(out.energies[-5:]) < np.mean(out.energies[:5])
    again = vae.fit(params, x, key=jax.random.key(1), optimizer=optax.adam(1e-2), n_epochs=40, batch_size=10)
    assert np.array_equal(np.asarray(out.energies), np.asarray(again.energies))
    assert (out.params.prior is None) == (n_components is None)


def test_fit_float32_keeps_dtype():
    x = _digits_like().astype(jnp.float32)
    params = vae.init_params(6, 2, 8, key=jax.random.key(0), n_components=2, dtype=jnp.float32)
    out = vae.fit(params, x, key=jax.random.key(1), optimizer=optax.adam(1e-2), n_epochs=2, batch_size=10)
    assert out.params.enc_W.dtype == jnp.float32 and out.energies.dtype == jnp.float32
    assert out.params.prior.means.dtype == jnp.float32


@pytest.mark.parametrize("n_components", [None, 2])
def test_iwae_loss_is_minus_scipy_logsumexp_of_the_log_weights(n_components):
    rng = np.random.default_rng(7)
    params = vae.init_params(4, 2, 6, key=jax.random.key(3), n_components=n_components)
    x = jnp.asarray(rng.random((5, 4)))
    eps = jnp.asarray(rng.normal(size=(7, 5, 2)))
    lw = np.asarray(vae.log_weights(params, x, eps))
    ref = -np.mean(logsumexp(lw, axis=0) - np.log(7))
    assert np.isclose(float(vae.iwae_loss(params, x, eps)), ref, rtol=1e-13)
    # K = 1: minus the one-sample ELBO estimate; a sampled KL, so not vae.loss unless the samples agree
    assert np.isclose(float(vae.iwae_loss(params, x, eps[:1])), -np.mean(lw[0]), rtol=1e-13)


def test_iwae_gradient_is_the_softmax_weighted_sample_gradient():
    rng = np.random.default_rng(8)
    params = vae.init_params(4, 2, 6, key=jax.random.key(4))
    x = jnp.asarray(rng.random((3, 4)))
    eps = jnp.asarray(rng.normal(size=(6, 3, 2)))
    g = jax.grad(vae.iwae_loss)(params, x, eps)
    lw = np.asarray(vae.log_weights(params, x, eps))  # (K, N)
    w = np.exp(lw - logsumexp(lw, axis=0))  # softmax over the samples
    jac = jax.jacobian(lambda p: vae.log_weights(p, x, eps))(params)  # leaves (K, N, ...)
    for gl, jl in zip(jax.tree.leaves(g), jax.tree.leaves(jac)):
        ref = -np.einsum("kn,kn...->...", w, np.asarray(jl)) / x.shape[0]
        assert np.allclose(np.asarray(gl), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n_components", [None, 2])
def test_fit_with_n_samples_takes_steps_on_minus_iwae(n_components):
    x = _digits_like(n=12)
    params = vae.init_params(6, 2, 8, key=jax.random.key(0), n_components=n_components)
    key, K, lr = jax.random.key(5), 4, 0.05
    out = vae.fit(params, x, key=key, optimizer=optax.sgd(lr), n_epochs=1, batch_size=12, n_samples=K)
    # the one step, rebuilt: fit's shuffle and noise for epoch 0, batch 0
    k_perm, k_eps = jax.random.split(jax.random.split(key, 1)[0])
    xb = x[jax.random.permutation(k_perm, 12)]
    eps = jax.random.normal(jax.random.split(k_eps, 1)[0], (K, 12, 2), x.dtype)
    assert np.isclose(float(out.extras.batch_losses[0, 0]), float(vae.iwae_loss(params, xb, eps)), rtol=1e-12)
    g = jax.grad(vae.iwae_loss)(params, xb, eps)
    want = jax.tree.map(lambda p, d: p - lr * d, params, g)
    for a, b in zip(jax.tree.leaves(out.params), jax.tree.leaves(want)):
        assert np.allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
    longer = vae.fit(params, x, key=key, optimizer=optax.adam(1e-2), n_epochs=60, batch_size=4, n_samples=K)
    assert np.mean(longer.energies[-5:]) < np.mean(longer.energies[:5])
    with pytest.raises(ValueError, match="kl_weight must be 1"):
        vae.fit(params, x, key=key, optimizer=optax.sgd(lr), n_epochs=1, batch_size=4, n_samples=K, kl_weight=0.5)


def test_loss_names_the_shape_eps_must_have():
    params = vae.init_params(4, 2, 3, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"eps must have shape \(5, 2\); got \(5, 3\)"):
        vae.loss(params, jnp.zeros((5, 4)), jnp.zeros((5, 3)))
