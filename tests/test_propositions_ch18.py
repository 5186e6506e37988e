"""Propositions of chapter 18 (variational autoencoders), checked independently.

Each test checks one proposition on at least 100 random instances (float64, NumPy
generators with fixed seeds) against a computation that does not share the package's
formula: numerical integration (``scipy.integrate.quad``), scipy densities, exact
enumeration of a discrete latent variable (every tuple of ``K`` samples, weighted by its
probability), and complex-step derivatives of an energy written here in NumPy. Where a
proposition needs a condition, the test also shows it failing without it.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from oracles import complex_step, relative_error
from scipy import integrate
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from lse_energy import vae

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100


def _kl_quad(mu, s, m=0.0, t=1.0):
    """KL(N(mu, s^2) || N(m, t^2)) of one coordinate by quadrature of q ln(q/p) (densities written out)."""
    def f(z):
        log_q = -0.5 * ((z - mu) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)
        log_p = -0.5 * ((z - m) / t) ** 2 - math.log(t) - 0.5 * math.log(2 * math.pi)
        return math.exp(log_q) * (log_q - log_p)

    return integrate.quad(f, mu - 40 * s, mu + 40 * s, epsabs=1e-13, epsrel=1e-12, limit=200)[0]


def test_gaussian_kl_closed_form():
    """KL(N(mu, diag s^2) || N(0, I)) = 1/2 sum(s^2 + mu^2 - ln s^2 - 1) vs quadrature; the formula
    needs the standard normal prior (a shifted, scaled prior gives another value)."""
    rng = np.random.default_rng(0)
    kl = jax.jit(vae.gaussian_kl)
    for _ in range(N_INSTANCES):
        d = int(rng.integers(1, 5))
        mu, logvar = rng.normal(size=d), rng.normal(scale=1.0, size=d)
        s = np.exp(0.5 * logvar)
        ref = sum(_kl_quad(mu[j], s[j]) for j in range(d))
        assert abs(float(kl(jnp.asarray(mu[None]), jnp.asarray(logvar[None]))[0]) - ref) < 1e-9 * max(1.0, ref)
        # without the condition: against N(m, t^2) the closed form is wrong
        m, t = rng.normal(size=d), np.exp(rng.normal(scale=0.5, size=d)) + 0.2
        other = sum(_kl_quad(mu[j], s[j], m[j], t[j]) for j in range(d))
        assert abs(float(kl(jnp.asarray(mu[None]), jnp.asarray(logvar[None]))[0]) - other) > 1e-6


def _discrete_model(rng, M):
    """A discrete latent z in {0..M-1}: ln p(z), ln p(x|z) for the observed x, and a proposal ln q(z)."""
    log_prior = np.log(rng.dirichlet(np.ones(M)))
    log_lik = rng.normal(scale=1.5, size=M)
    log_q = np.log(rng.dirichlet(np.ones(M)))
    return log_prior, log_lik, log_q


def test_elbo_gap_is_the_posterior_kl():
    """ELBO(q) = ln p(x) - KL(q || p(z|x)) <= ln p(x), with equality at q = p(z|x) (exact sums)."""
    rng = np.random.default_rng(1)
    for _ in range(N_INSTANCES):
        M = int(rng.integers(2, 7))
        log_prior, log_lik, log_q = _discrete_model(rng, M)
        log_joint = log_prior + log_lik
        log_px = logsumexp(log_joint)
        q = np.exp(log_q)
        elbo = np.sum(q * (log_joint - log_q))                       # definition: E_q[ln p(x,z) - ln q]
        log_post = log_joint - log_px
        kl = np.sum(q * (log_q - log_post))
        assert abs(elbo - (log_px - kl)) < 1e-12 * max(1.0, abs(log_px))
        assert kl > 0 and elbo < log_px
        post = np.exp(log_post)
        assert abs(np.sum(post * (log_joint - log_post)) - log_px) < 1e-12 * max(1.0, abs(log_px))


def _iwae_exact(log_w, q, K):
    """E[IWAE_K] by enumerating all M^K tuples of samples (package's iwae_bound on each tuple)."""
    M = log_w.size
    tuples = np.array(list(itertools.product(range(M), repeat=K)))            # (M^K, K)
    prob = np.prod(q[tuples], axis=1)
    per_tuple = np.asarray(_iwae_jit(jnp.asarray(log_w[tuples].T)))          # (M^K,)
    return float(np.sum(prob * per_tuple)), per_tuple, tuples


_iwae_jit = jax.jit(vae.iwae_bound)


def test_iwae_is_monotone_in_K_in_expectation():
    """ELBO = IWAE_1 <= IWAE_2 <= IWAE_3 <= IWAE_4 <= ln p(x), exactly in expectation (enumeration);
    not draw by draw: a tuple whose added sample has a smaller weight lowers the bound."""
    rng = np.random.default_rng(2)
    for _ in range(N_INSTANCES):
        M = int(rng.integers(2, 5))
        log_prior, log_lik, log_q = _discrete_model(rng, M)
        log_w = log_prior + log_lik - log_q
        q = np.exp(log_q)
        log_px = logsumexp(log_prior + log_lik)
        bounds = [_iwae_exact(log_w, q, K)[0] for K in (1, 2, 3, 4)]
        assert abs(bounds[0] - np.sum(q * log_w)) < 1e-12 * max(1.0, abs(bounds[0]))   # IWAE_1 = ELBO
        assert all(b2 >= b1 - 1e-12 for b1, b2 in itertools.pairwise(bounds))
        assert bounds[-1] <= log_px + 1e-12
        # per draw, IWAE_2 < IWAE_1 of its first sample whenever the second weight is smaller
        _, per2, tup = _iwae_exact(log_w, q, 2)
        worse = log_w[tup[:, 1]] < log_w[tup[:, 0]]
        assert np.any(worse) and np.all(per2[worse] < log_w[tup[worse, 0]])


def test_importance_weights_are_unbiased_with_full_support():
    """E_q[p(x,z)/q(z)] = p(x) exactly when q > 0 wherever p(x,z) > 0; with a state outside the
    support of q the estimate's mean is the sum over the support only, strictly less."""
    rng = np.random.default_rng(3)
    for _ in range(N_INSTANCES):
        M = int(rng.integers(2, 7))
        log_prior, log_lik, log_q = _discrete_model(rng, M)
        q = np.exp(log_q)
        px = np.sum(np.exp(log_prior + log_lik))
        assert abs(np.sum(q * np.exp(log_prior + log_lik - log_q)) - px) < 1e-12 * px
        q0 = q.copy()
        q0[0] = 0.0
        q0 /= q0.sum()
        mean0 = np.sum([q0[z] * np.exp(log_prior[z] + log_lik[z]) / q0[z] for z in range(M) if q0[z] > 0])
        assert mean0 < px * (1 - 1e-12)


def test_transcribed_identity_needs_the_importance_weight():
    """As transcribed, p(x) = E_{z~q}[p(x|z)]: true for q = p(z), false for another q; with the weight
    p(z)/q(z) it holds for every q (exact sums)."""
    rng = np.random.default_rng(4)
    for _ in range(N_INSTANCES):
        M = int(rng.integers(2, 7))
        log_prior, log_lik, log_q = _discrete_model(rng, M)
        px = np.sum(np.exp(log_prior + log_lik))
        q, prior, lik = np.exp(log_q), np.exp(log_prior), np.exp(log_lik)
        assert abs(np.sum(prior * lik) - px) < 1e-12 * px
        assert abs(np.sum(q * lik) - px) > 1e-8 * px
        assert abs(np.sum(q * lik * prior / q) - px) < 1e-12 * px


def _mixture_energy_np(logits, means, log_scales, z):
    """-sum_n ln sum_k pi_k prod_j N(z_nj; m_kj, s_kj^2), written out (complex-safe)."""
    log_pi = logits - np.log(np.sum(np.exp(logits)))
    s = np.exp(log_scales)
    r = (z[:, None, :] - means[None]) / s[None]
    comp = log_pi[None] - 0.5 * np.sum(r**2, -1) - np.sum(log_scales, -1)[None] - 0.5 * z.shape[1] * np.log(2 * np.pi)
    top = np.max(np.real(comp), axis=1, keepdims=True)
    return -np.sum(np.log(np.sum(np.exp(comp - top), axis=1)) + top[:, 0])


def test_mixture_prior_energy_is_the_lse_energy():
    """prior_energy = -sum_n ln sum_k pi_k N(z_n; m_k, S_k) (scipy densities), and its gradients in z and
    in the means are softmax-weighted sums of sim-gradients (complex-step derivatives)."""
    rng = np.random.default_rng(5)
    energy, grad = jax.jit(vae.prior_energy), jax.jit(vae.grad_prior_energy)
    shapes = [(2, 1, 3), (3, 2, 4), (4, 3, 5), (1, 2, 2)]            # (K, d_z, N)
    for i in range(N_INSTANCES):
        K, d, N = shapes[i % len(shapes)]
        logits, means = rng.normal(size=K), rng.normal(scale=1.5, size=(K, d))
        log_scales, z = rng.normal(scale=0.4, size=(K, d)), rng.normal(scale=1.5, size=(N, d))
        prior = vae.MixturePrior(jnp.asarray(logits), jnp.asarray(means), jnp.asarray(log_scales))
        pi = np.exp(logits) / np.exp(logits).sum()
        dens = sum(pi[k] * multivariate_normal(means[k], np.diag(np.exp(2 * log_scales[k]))).pdf(z).reshape(N)
                   for k in range(K))
        ref = -np.sum(np.log(dens))
        assert abs(float(energy(prior, jnp.asarray(z))) - ref) < 1e-11 * max(1.0, abs(ref))
        g_prior, g_z = grad(prior, jnp.asarray(z))
        args = (logits, means, log_scales, z)
        assert relative_error(g_z, complex_step(_mixture_energy_np, args, 3)) < 1e-10
        assert relative_error(g_prior.means, complex_step(_mixture_energy_np, args, 1)) < 1e-10
        assert relative_error(g_prior.log_scales, complex_step(_mixture_energy_np, args, 2)) < 1e-10
        g_ref = complex_step(_mixture_energy_np, args, 0)
        assert np.max(np.abs(g_prior.logits - g_ref)) < 1e-10 * max(1.0, np.max(np.abs(g_ref)))


def test_linear_gaussian_exact_posterior_has_zero_variance_weights():
    """For p(z) = N(0, I), p(x|z) = N(Wz + b, s^2 I): ln p(x) = ln N(x; b, WW^T + s^2 I) (scipy); with q the
    exact posterior every log-weight equals ln p(x), so the ELBO is exact; with another q they vary."""
    rng = np.random.default_rng(6)
    marg, post = jax.jit(vae.linear_gaussian_log_marginal), jax.jit(vae.linear_gaussian_posterior)
    lw = jax.jit(vae.linear_gaussian_log_weights)
    for i in range(N_INSTANCES):
        d_x, d_z = [(3, 1), (4, 2), (5, 3)][i % 3]
        W, b, s = rng.normal(size=(d_x, d_z)), rng.normal(size=d_x), float(np.exp(rng.normal(scale=0.5)))
        x = rng.normal(size=(2, d_x)) * 2
        ref = multivariate_normal(b, W @ W.T + s**2 * np.eye(d_x)).logpdf(x)
        got = np.asarray(marg(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x)))
        assert np.max(np.abs(got - ref)) < 1e-11 * max(1.0, np.max(np.abs(ref)))
        m, C = post(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x))
        eps = jnp.asarray(rng.normal(size=(50, 2, d_z)))
        w = np.asarray(lw(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x), m, jnp.linalg.cholesky(C), eps))
        assert np.max(np.abs(w - ref[None])) < 1e-10 * max(1.0, np.max(np.abs(ref)))
        w2 = np.asarray(lw(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x), m + 0.3,
                           jnp.linalg.cholesky(1.5 * C), eps))
        assert np.min(np.std(w2, axis=0)) > 1e-3 and np.all(np.mean(w2, axis=0) < ref + 4 * np.std(w2, axis=0) / np.sqrt(50))
