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
from scipy import integrate
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, norm

from lse_energy import vae
from tests.support import complex_step, relative_error

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


# --- the linear-Gaussian model in the package's VAE -------------------------------------------
# The package's network (vae.Params) represents p(z) = N(0, I), p(x|z) = N(Wz + b, s^2 I) and a
# diagonal Gaussian q = N(m_q, diag s_q^2) exactly up to O(delta^2): the encoder's weights are 0
# (mu = m_q, ln sigma^2 = 2 ln s_q whatever x is), and the decoder's tanh layer is run in its
# linear range, tanh(delta z) / delta = z - delta^2 z^3 / 3 + ..., with delta = 1e-6 (an error
# below 1e-9 for |z| < 15). The oracles are written here with NumPy and scipy: ln p(x) as a
# scipy density, the posterior and KL(q || posterior) in closed form.

_DELTA = 1e-6


def _lg_model(rng, orthogonal=False):
    """A random linear-Gaussian model (W, b, s, x) whose posterior sd is >= 0.2 in every direction."""
    while True:
        d_x, d_z = int(rng.integers(2, 6)), int(rng.integers(1, 3))
        W = rng.normal(size=(d_x, d_z)) / np.sqrt(d_x)
        if orthogonal:  # W^T W diagonal: a diagonal posterior, reachable by q
            W = np.linalg.qr(W)[0] * rng.uniform(0.5, 1.5, d_z)
        b, s = rng.normal(size=d_x), float(np.exp(rng.normal(scale=0.3)))
        x = W @ rng.normal(size=d_z) + b + s * rng.normal(size=d_x)
        if np.min(np.linalg.eigvalsh(np.linalg.inv(np.eye(d_z) + W.T @ W / s**2))) >= 0.04:
            return W, b, s, x


def _lg_posterior(W, b, s, x):
    """Posterior mean and covariance by Bayes' rule for Gaussians (NumPy)."""
    prec = np.eye(W.shape[1]) + W.T @ W / s**2
    cov = np.linalg.inv(prec)
    return cov @ W.T @ (x - b) / s**2, cov


def _lg_params(W, b, q_mean, q_sd, rng):
    """vae.Params for the model (W, b) with q = N(q_mean, diag q_sd^2) (see the note above)."""
    d_x, d_z = W.shape
    H = d_z + 2
    dec_W = np.zeros((d_z, H))
    dec_W[:, :d_z] = _DELTA * np.eye(d_z)
    out_W = np.zeros((H, d_x))
    out_W[:d_z] = W.T / _DELTA
    arrays = (
        rng.normal(size=(d_x, H)),
        rng.normal(size=H),
        np.zeros((H, d_z)),
        q_mean,
        np.zeros((H, d_z)),
        2 * np.log(q_sd),
        dec_W,
        np.zeros(H),
        out_W,
        b,
    )
    return vae.Params(*(jnp.asarray(a) for a in arrays))


def _kl_gauss(m0, S0, m1, S1):
    """KL(N(m0, S0) || N(m1, S1)), closed form (NumPy)."""
    P1, d = np.linalg.inv(S1), m0 - m1
    return 0.5 * (np.trace(P1 @ S0) + d @ P1 @ d - m0.size + np.linalg.slogdet(S1)[1] - np.linalg.slogdet(S0)[1])


def _eps_grid(d_z, h=0.1, L=12.0):
    """A tensor grid over [-L, L]^d_z and its trapezoid weights times the N(0, I) density."""
    g = np.arange(-L, L + h / 2, h)
    pts = np.stack(np.meshgrid(*([g] * d_z), indexing="ij"), -1).reshape(-1, d_z)
    w = np.full(g.size, h)
    w[[0, -1]] = h / 2
    wt = np.prod(np.stack(np.meshgrid(*([w] * d_z), indexing="ij"), -1).reshape(-1, d_z), axis=1)
    return pts, wt * np.prod(norm.pdf(pts), axis=1)


_log_weights = jax.jit(vae.log_weights, static_argnames=("decoder",))
_log_lik = jax.jit(vae.log_likelihood, static_argnames=("decoder",))


def _lw(params, x, eps, s):
    """Package log-weights ln p(x, z) - ln q(z|x) at codes z = mu + eps * sigma, one example x."""
    out = _log_weights(params, jnp.asarray(x[None]), jnp.asarray(eps[:, None, :]), decoder="gaussian", obs_scale=s)
    return np.asarray(out)[:, 0]


def test_elbo_gap_is_the_posterior_kl():
    """vae.elbo_bound of vae.log_weights on the linear-Gaussian model equals ln p(x) - KL(q || p(z|x))
    (closed form, NumPy; ln p(x) from scipy), so ELBO <= ln p(x), with equality at q = p(z|x).

    The log-weight is quadratic in eps, so its mean under N(0, I) is the plain mean over the 2 d_z
    points +-sqrt(d_z) e_i (a rule exact to degree 3): elbo_bound of those log-weights is the ELBO
    itself, not an estimate. Each log-weight is also checked against ln p(x) + ln p(z|x) - ln q(z)
    (scipy densities) at random codes, and the mean of 4000 random log-weights against the closed
    form within 4 standard errors. Last, exact sums over a discrete latent (100 random models).
    """
    rng = np.random.default_rng(1)
    for i in range(N_INSTANCES):
        W, b, s, x = _lg_model(rng, orthogonal=i % 2 == 1)
        d_x, d_z = W.shape
        log_px = multivariate_normal(b, W @ W.T + s**2 * np.eye(d_x)).logpdf(x)
        m_post, C_post = _lg_posterior(W, b, s, x)
        sd_post = np.sqrt(np.diag(C_post))
        q_mean = m_post + 0.5 * sd_post * rng.normal(size=d_z)
        q_sd = sd_post * rng.uniform(0.7, 2.0, d_z)
        params = _lg_params(W, b, q_mean, q_sd, rng)
        kl = _kl_gauss(q_mean, np.diag(q_sd**2), m_post, C_post)
        # each log-weight, against Bayes' rule with scipy densities
        eps = rng.normal(size=(50, d_z))
        z = q_mean + eps * q_sd
        ref = (
            log_px
            + multivariate_normal(m_post, C_post).logpdf(z)
            - multivariate_normal(q_mean, np.diag(q_sd**2)).logpdf(z)
        )
        assert np.max(np.abs(_lw(params, x, eps, s) - ref)) < 1e-8 * max(1.0, abs(log_px))
        # the ELBO, exactly (degree-3 rule)
        pts = np.sqrt(d_z) * np.concatenate([np.eye(d_z), -np.eye(d_z)])
        elbo = float(vae.elbo_bound(jnp.asarray(_lw(params, x, pts, s))))
        assert abs(elbo - (log_px - kl)) < 1e-8 * max(1.0, abs(log_px))
        assert kl > 1e-6 and elbo < log_px
        # and as a Monte Carlo estimate from random draws, within 4 standard errors
        lw = _lw(params, x, rng.normal(size=(4000, d_z)), s)
        assert abs(float(vae.elbo_bound(jnp.asarray(lw))) - (log_px - kl)) < 4 * lw.std(ddof=1) / np.sqrt(lw.size)
        if i % 2 == 1:  # a diagonal posterior: q = p(z|x) makes every log-weight ln p(x)
            exact = _lg_params(W, b, m_post, sd_post, rng)
            assert np.max(np.abs(C_post - np.diag(sd_post**2))) < 1e-12
            lw0 = _lw(exact, x, rng.normal(size=(50, d_z)), s)
            assert np.max(np.abs(lw0 - log_px)) < 1e-8 * max(1.0, abs(log_px))
            assert abs(float(vae.elbo_bound(jnp.asarray(lw0))) - log_px) < 1e-8 * max(1.0, abs(log_px))
    # a discrete latent, by exact sums: ELBO(q) = ln p(x) - KL(q || p(z|x))
    for _ in range(N_INSTANCES):
        M = int(rng.integers(2, 7))
        log_prior, log_lik, log_q = _discrete_model(rng, M)
        log_joint = log_prior + log_lik
        log_px = logsumexp(log_joint)
        q = np.exp(log_q)
        elbo = np.sum(q * (log_joint - log_q))  # definition: E_q[ln p(x,z) - ln q]
        log_post = log_joint - log_px
        kl = np.sum(q * (log_q - log_post))
        assert abs(elbo - (log_px - kl)) < 1e-12 * max(1.0, abs(log_px))
        assert kl > 0 and elbo < log_px


def _iwae_exact(log_w, q, K):
    """E[IWAE_K] by enumerating all M^K tuples of samples (package's iwae_bound on each tuple)."""
    M = log_w.size
    tuples = np.array(list(itertools.product(range(M), repeat=K)))  # (M^K, K)
    prob = np.prod(q[tuples], axis=1)
    per_tuple = np.asarray(_iwae_jit(jnp.asarray(log_w[tuples].T)))  # (M^K,)
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
        assert abs(bounds[0] - np.sum(q * log_w)) < 1e-12 * max(1.0, abs(bounds[0]))  # IWAE_1 = ELBO
        assert all(b2 >= b1 - 1e-12 for b1, b2 in itertools.pairwise(bounds))
        assert bounds[-1] <= log_px + 1e-12
        # per draw, IWAE_2 < IWAE_1 of its first sample whenever the second weight is smaller
        _, per2, tup = _iwae_exact(log_w, q, 2)
        worse = log_w[tup[:, 1]] < log_w[tup[:, 0]]
        assert np.any(worse) and np.all(per2[worse] < log_w[tup[worse, 0]])


def test_importance_weights_are_unbiased_with_full_support():
    """E_q[p(x,z)/q(z)] = p(x): the package's log-weights on the linear-Gaussian model, integrated
    over eps on a fine grid (trapezoid rule, spectrally accurate here: 1e-9), against p(x) from
    scipy. Also by exact sums over a discrete latent, where a q that misses a state with
    p(x, z) > 0 gives a mean that falls short (the condition is needed)."""
    rng = np.random.default_rng(3)
    for _i in range(N_INSTANCES):
        W, b, s, x = _lg_model(rng)
        d_x, d_z = W.shape
        px = multivariate_normal(b, W @ W.T + s**2 * np.eye(d_x)).pdf(x)
        m_post, C_post = _lg_posterior(W, b, s, x)
        sd_post = np.sqrt(np.diag(C_post))
        q_mean = m_post + 0.5 * sd_post * rng.normal(size=d_z)
        params = _lg_params(W, b, q_mean, sd_post * rng.uniform(0.7, 2.0, d_z), rng)
        pts, wt = _eps_grid(d_z)
        w = np.exp(_lw(params, x, pts, s))
        assert abs(np.sum(wt * w) - px) < 1e-9 * px
    # The package's q is Gaussian, so it always has full support; the condition's failure is
    # shown on a discrete latent whose q misses a state (exact sums).
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
    """As transcribed, p(x) = E_{z~q}[p(x|z)]: with the package's vae.log_likelihood on the
    linear-Gaussian model, integrated over a fine grid against p(x) from scipy, it holds for
    q = p(z) and fails for another q; with the weight p(z)/q(z) (vae.log_weights) it holds for
    every q. Also by exact sums over a discrete latent."""
    rng = np.random.default_rng(4)
    for _i in range(N_INSTANCES):
        W, b, s, x = _lg_model(rng)
        d_x, d_z = W.shape
        px = multivariate_normal(b, W @ W.T + s**2 * np.eye(d_x)).pdf(x)
        m_post, C_post = _lg_posterior(W, b, s, x)
        sd_post = np.sqrt(np.diag(C_post))
        q_mean = m_post + 0.5 * sd_post * rng.normal(size=d_z)
        q_sd = sd_post * rng.uniform(0.7, 2.0, d_z)
        pts, wt = _eps_grid(d_z)
        xs = jnp.asarray(np.broadcast_to(x, (pts.shape[0], d_x)))
        for mean, sd, is_prior in ((np.zeros(d_z), np.ones(d_z), True), (q_mean, q_sd, False)):
            params = _lg_params(W, b, mean, sd, rng)
            lik = np.exp(
                np.asarray(_log_lik(params, xs, jnp.asarray(mean + pts * sd), decoder="gaussian", obs_scale=s))
            )
            transcribed = np.sum(wt * lik)  # E_{z~q}[p(x|z)]
            weighted = np.sum(wt * np.exp(_lw(params, x, pts, s)))  # E_q[p(x|z) p(z)/q(z)]
            assert abs(weighted - px) < 1e-9 * px
            if is_prior:
                assert abs(transcribed - px) < 1e-9 * px
            else:
                assert abs(transcribed - px) > 1e-3 * px
    for _ in range(N_INSTANCES):  # discrete latent: exact sums
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
    energy, grad = jax.jit(vae.energy), jax.jit(vae.grad_prior_z)
    shapes = [(2, 1, 3), (3, 2, 4), (4, 3, 5), (1, 2, 2)]  # (K, d_z, N)
    for i in range(N_INSTANCES):
        K, d, N = shapes[i % len(shapes)]
        logits, means = rng.normal(size=K), rng.normal(scale=1.5, size=(K, d))
        log_scales, z = rng.normal(scale=0.4, size=(K, d)), rng.normal(scale=1.5, size=(N, d))
        prior = vae.MixturePrior(jnp.asarray(logits), jnp.asarray(means), jnp.asarray(log_scales))
        pi = np.exp(logits) / np.exp(logits).sum()
        dens = sum(
            pi[k] * multivariate_normal(means[k], np.diag(np.exp(2 * log_scales[k]))).pdf(z).reshape(N)
            for k in range(K)
        )
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
        w2 = np.asarray(
            lw(jnp.asarray(W), jnp.asarray(b), s, jnp.asarray(x), m + 0.3, jnp.linalg.cholesky(1.5 * C), eps)
        )
        assert np.min(np.std(w2, axis=0)) > 1e-3 and np.all(
            np.mean(w2, axis=0) < ref + 4 * np.std(w2, axis=0) / np.sqrt(50)
        )
