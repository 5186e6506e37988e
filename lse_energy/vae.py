r"""Variational autoencoders: the ELBO, the importance-weighted bound and a mixture prior.

This module implements §21 of the lecture notes ("Variational
Autoencoders"). A latent :math:`z \in \mathbb R^{d_z}` with prior :math:`p(z)`
generates :math:`x` through a decoder :math:`p_\theta(x \mid z)`; an encoder
:math:`q_\phi(z \mid x) = \mathcal N(\mu_\phi(x), \mathrm{diag}\,\sigma^2_\phi(x))`
approximates the posterior. For every :math:`q` (Jensen's inequality for the
concave :math:`\ln`),

.. math::

    \ln p(x) = \ln \mathbb E_{q}\Big[\frac{p(x, z)}{q(z\mid x)}\Big]
    \ \ge\ \mathbb E_q[\ln p(x \mid z)] - \mathrm{KL}(q(z\mid x)\,\|\,p(z))
    = \mathrm{ELBO},

and with :math:`K` samples :math:`z_k \sim q` and log-weights
:math:`\ell_k = \ln p(x, z_k) - \ln q(z_k \mid x)` the importance-weighted bound

.. math::

    \mathrm{IWAE}_K = \mathbb E\Big[\ln \frac1K \sum_{k=1}^K e^{\ell_k}\Big]
    = \mathbb E\big[\mathrm{LSE}_k(\ell_k)\big] - \ln K

is a log-sum-exp over samples (:func:`iwae_bound`, built on
:func:`lse_energy.core.logsumexp`), increasing in :math:`K`, with
:math:`\mathrm{IWAE}_1 = \mathrm{ELBO}` and limit :math:`\ln p(x)`.

Where the package's energy appears. With the standard normal prior of the notes the VAE loss has no log-sum-exp over
parents (the KL term is the closed form :func:`gaussian_kl`). With a Gaussian-mixture prior
:math:`p(z) = \sum_k \pi_k \mathcal N(z; m_k, S_k)` (:class:`MixturePrior`, diagonal :math:`S_k`), the prior term of
the loss is exactly the book's energy with the latent codes as *children* and the mixture components as *parents*,
:math:`\mathrm{sim}(z_n, k) = \ln\pi_k + \ln\mathcal N(z_n; m_k, S_k)` (:func:`sim`, :func:`energy`), and its
gradient is the softmax-weighted sum of sim-gradients (:func:`grad_prior_z`). This is the GMM energy of chapter 02
applied to the codes; it is computed here with :func:`lse_energy.core.energy`, not through ``lse_energy.gmm``.

On the notes as transcribed: §21 writes :math:`p(x) = \mathbb E_{z\sim q}[p(x|z)]` and inserts :math:`q(z)/q(z)`;
the identity needs the weight :math:`p(z)/q(z)` (:func:`linear_gaussian_log_weights` and the chapter check it). The
KL is printed as :math:`-\mathbb E_q[q \ln(q/p)]` (an extra :math:`q` and a sign); the code uses
:math:`\mathbb E_q[\ln(q/p)]`. The closed form :math:`\tfrac12(\sigma^2+\mu^2-\ln\sigma^2-1)` is right per
coordinate, summed over coordinates.

Shapes: data ``x`` is ``(N, d_x)``, codes ``z`` are ``(N, d_z)``; encoder
outputs are ``(N, d_z)``; per-example quantities are ``(N,)``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "DECODERS",
    "FitExtras",
    "MixturePrior",
    "Params",
    "decode",
    "elbo",
    "elbo_bound",
    "encode",
    "fit",
    "gaussian_kl",
    "grad_prior_z",
    "init_params",
    "init_prior",
    "iwae",
    "iwae_bound",
    "iwae_loss",
    "linear_gaussian_log_marginal",
    "linear_gaussian_log_weights",
    "linear_gaussian_posterior",
    "log_likelihood",
    "log_prior",
    "log_weights",
    "loss",
    "energy",
    "prior_responsibilities",
    "sim",
    "reparameterize",
]

DECODERS = ("bernoulli", "gaussian")
_LOG_2PI = math.log(2.0 * math.pi)


class MixturePrior(NamedTuple):
    r"""A diagonal Gaussian-mixture prior :math:`p(z) = \sum_k \pi_k \mathcal N(z; m_k, \mathrm{diag}\, s_k^2)`.

    Attributes:
      logits: ``(K,)``; :math:`\pi = \mathrm{softmax}(\mathrm{logits})`.
      means: ``(K, d_z)`` component means :math:`m_k`.
      log_scales: ``(K, d_z)`` :math:`\ln s_k` (standard deviations per coordinate).
    """

    logits: Array
    means: Array
    log_scales: Array


class Params(NamedTuple):
    r"""Encoder, decoder and (optionally) a learned mixture prior.

    Encoder (one ``tanh`` hidden layer of width :math:`H`):
    :math:`h = \tanh(x W_e + b_e)`, :math:`\mu = h W_\mu + b_\mu`,
    :math:`\ln\sigma^2 = h W_v + b_v`. Decoder:
    :math:`g = \tanh(z W_d + b_d)`, output :math:`o = g W_o + b_o`: Bernoulli
    logits, or the Gaussian mean :math:`d(z, \theta)` of the notes.

    Attributes:
      enc_W: ``(d_x, H)``; enc_b: ``(H,)``.
      mu_W: ``(H, d_z)``; mu_b: ``(d_z,)``.
      logvar_W: ``(H, d_z)``; logvar_b: ``(d_z,)``.
      dec_W: ``(d_z, H)``; dec_b: ``(H,)``.
      out_W: ``(H, d_x)``; out_b: ``(d_x,)``.
      prior: a :class:`MixturePrior` (learned with the rest), or ``None`` for the
        notes' :math:`p(z) = \mathcal N(0, I)`.
    """

    enc_W: Array
    enc_b: Array
    mu_W: Array
    mu_b: Array
    logvar_W: Array
    logvar_b: Array
    dec_W: Array
    dec_b: Array
    out_W: Array
    out_b: Array
    prior: MixturePrior | None = None


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      opt_state: optimizer state, to continue training with another call.
      kl: ``(n_epochs, n_batches)`` mean KL term per example of each minibatch
        (closed form for the standard prior, a one-sample estimate for a mixture; with
        ``n_samples = K > 1`` the mean over the :math:`K` samples of :math:`\ln q - \ln p(z)`).
      batch_losses: ``(n_epochs, n_batches)`` the loss of each minibatch before its step
        (``energies`` holds their mean over each epoch).
    """

    opt_state: Any
    kl: Array
    batch_losses: Any = None


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _check_prior(prior, d_z=None) -> MixturePrior:
    sizes = None if d_z is None else {"d_z": d_z}
    shapes = {"logits": "K", "means": "K d_z", "log_scales": "K d_z"}
    return _validate.params(prior, MixturePrior, shapes, sizes, name="prior")[0]


_SHAPES = dict(enc_W="d_x H", enc_b="H", mu_W="H d_z", mu_b="d_z", logvar_W="H d_z", logvar_b="d_z")
_SHAPES.update(dec_W="d_z H", dec_b="H", out_W="H d_x", out_b="d_x")


def _check_params(params) -> Params:
    params, sizes = _validate.params(params, Params, _SHAPES)
    return params._replace(prior=None if params.prior is None else _check_prior(params.prior, sizes["d_z"]))


def _check_decoder(decoder: str) -> str:
    _validate.choice("decoder", decoder, DECODERS)
    return decoder


def _check_x(x, d_x: int, name: str = "x") -> Array:
    return _validate.points(name, x, d_x, "params")


def _check_unit_data(x) -> None:
    if _validate.is_concrete(x) and not bool(np.all((np.asarray(x) >= 0) & (np.asarray(x) <= 1))):
        raise ValueError("x must lie in [0, 1] for the Bernoulli decoder")


# ---------------------------------------------------------------------------
# Parameters, encoder, decoder
# ---------------------------------------------------------------------------


def init_params(
    n_visible: int, n_latent: int, n_hidden: int, *, key, n_components: int | None = None, dtype=None
) -> Params:
    r"""Glorot-scaled Gaussian weights, zero biases; a mixture prior when ``n_components`` is given.

    The prior (:func:`init_prior`) gets uniform weights, means drawn from :math:`\mathcal N(0, I)` and unit scales.
    ``dtype`` defaults to the default float (float64 with x64 on, else float32).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))  # prior N(0, I)
      >>> params.enc_W.shape, params.mu_W.shape, params.prior is None
      ((6, 4), (4, 2), True)
    """
    _validate.key("key", key)
    d_x = _validate.count("n_visible", n_visible)
    d_z = _validate.count("n_latent", n_latent)
    H = _validate.count("n_hidden", n_hidden)
    dtype = _validate.float_dtype("dtype", dtype)
    K = None if n_components is None else _validate.count("n_components", n_components)
    return _init_params(key, d_x, d_z, H, K, dtype)


@partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _init_params(key, d_x, d_z, H, K, dtype) -> Params:
    # One compiled program per shape (called eagerly, as the chapters do).
    keys = jax.random.split(key, 6)

    def w(k, a, b):
        return core.random_normal(k, (a, b), dtype) * math.sqrt(2.0 / (a + b))

    def zeros(n):
        return jnp.zeros(n, dtype)

    prior = None
    if K is not None:
        prior = _prior(keys[5], K, d_z, 1.0, dtype)
    return Params(
        w(keys[0], d_x, H),
        zeros(H),
        w(keys[1], H, d_z),
        zeros(d_z),
        0.1 * w(keys[2], H, d_z),
        zeros(d_z),
        w(keys[3], d_z, H),
        zeros(H),
        w(keys[4], H, d_x),
        zeros(d_x),
        prior,
    )


def init_prior(n_components: int, n_latent: int, *, key, scale: float = 1.0, dtype=None) -> MixturePrior:
    r"""Uniform :math:`\pi`, means :math:`m_k \sim \mathcal N(0, \mathrm{scale}^2 I)`, unit scales.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> prior = vae.init_prior(3, 2, key=jax.random.key(0))
      >>> prior.means.shape, bool(jnp.allclose(jax.nn.softmax(prior.logits), 1 / 3))
      ((3, 2), True)
    """
    _validate.key("key", key)
    K = _validate.count("n_components", n_components)
    d_z = _validate.count("n_latent", n_latent)
    scale = _validate.positive("scale", scale)
    return _prior(key, K, d_z, scale, _validate.float_dtype("dtype", dtype))


def _prior(key, K, d_z, scale, dtype) -> MixturePrior:
    return MixturePrior(
        jnp.zeros(K, dtype), scale * core.random_normal(key, (K, d_z), dtype), jnp.zeros((K, d_z), dtype)
    )


def _encode(params, x):
    h = jnp.tanh(x @ params.enc_W + params.enc_b)
    return h @ params.mu_W + params.mu_b, h @ params.logvar_W + params.logvar_b


def _decode(params, z):
    return jnp.tanh(z @ params.dec_W + params.dec_b) @ params.out_W + params.out_b


def encode(params: Params, x) -> tuple[Array, Array]:
    r"""Encoder outputs :math:`(\mu(x), \ln\sigma^2(x))` of §21, each ``(N, d_z)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> mu, logvar = vae.encode(params, jnp.ones((3, 6)))
      >>> mu.shape, logvar.shape
      ((3, 2), (3, 2))
    """
    params = _check_params(params)
    return _encode(params, _check_x(x, params.enc_W.shape[0]))


def decode(params: Params, z) -> Array:
    r"""Decoder output :math:`d(z, \theta)`, ``(N, d_x)``: Bernoulli logits or the Gaussian mean.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> vae.decode(params, jnp.zeros((3, 2))).shape
      (3, 6)
    """
    params = _check_params(params)
    return _decode(params, _validate.points("z", z, params.mu_W.shape[1], "params"))


def reparameterize(mu, logvar, eps) -> Array:
    r"""The reparameterisation trick of §21: :math:`z = \mu + \epsilon \odot \sigma`, :math:`\sigma =
    e^{\ln\sigma^2/2}`.

    ``eps`` has shape ``(..., N, d_z)`` (leading sample axes broadcast).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> mu, logvar = jnp.ones((3, 2)), jnp.log(jnp.full((3, 2), 4.0))
      >>> z = vae.reparameterize(mu, logvar, jnp.ones((3, 2)))  # 1 + 1 * 2
      >>> bool(jnp.allclose(z, 3.0))
      True
    """
    mu = _validate.float_array("mu", mu, 1)
    logvar = _validate.float_array("logvar", logvar, 1)
    eps = _validate.float_array("eps", eps, 1)
    if logvar.shape != mu.shape or eps.shape[eps.ndim - mu.ndim :] != mu.shape:
        raise ValueError(f"mu, logvar and eps must end in one shape; got {mu.shape}, {logvar.shape}, {eps.shape}")
    return mu + eps * jnp.exp(0.5 * logvar)


def gaussian_kl(mu, logvar) -> Array:
    r""":math:`\mathrm{KL}(\mathcal N(\mu, \mathrm{diag}\,\sigma^2)\,\|\,\mathcal N(0, I)) =
    \tfrac12\sum_j(\sigma_j^2+\mu_j^2-\ln\sigma_j^2-1)`.

    The closed form of §21 (per coordinate as printed; summed over the last axis here).

    Returns:
      ``mu.shape[:-1]``, one KL per row.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> kl = vae.gaussian_kl(jnp.zeros((3, 2)), jnp.zeros((3, 2)))  # q = p
      >>> kl.shape, bool(jnp.allclose(kl, 0.0))
      ((3,), True)
    """
    mu = _validate.float_array("mu", mu, 1)
    logvar = _validate.float_array("logvar", logvar, 1)
    if logvar.shape != mu.shape:
        raise ValueError(f"logvar must have the shape of mu {mu.shape}; got {logvar.shape}")
    return 0.5 * jnp.sum(jnp.exp(logvar) + mu**2 - logvar - 1.0, axis=-1)


def _log_likelihood(out, x, decoder, obs_scale):
    if decoder == "bernoulli":  # x ln sigmoid(o) + (1 - x) ln sigmoid(-o) = x o - softplus(o)
        return jnp.sum(x * out - jnp.logaddexp(0.0, out), axis=-1)
    r = (x - out) / obs_scale
    return -0.5 * jnp.sum(r**2, axis=-1) - x.shape[-1] * (jnp.log(obs_scale) + 0.5 * _LOG_2PI)


def log_likelihood(params: Params, x, z, *, decoder: str = "bernoulli", obs_scale: float = 1.0) -> Array:
    r"""The decoder log-likelihood :math:`\ln p_\theta(x \mid z)`, per row, ``(N,)``.

    ``"bernoulli"``: :math:`\sum_i x_i o_i - \mathrm{softplus}(o_i)` (minus the BCE of §21; for grey
    levels in :math:`[0,1]` it is a cross-entropy, not a normalised density). ``"gaussian"``:
    :math:`\ln\mathcal N(x; d(z,\theta), \mathrm{obs\_scale}^2 I)`; its negative is the notes'
    :math:`\frac1{2\sigma^2}\|x - d(z,\theta)\|^2 + C`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> x = (jax.random.uniform(jax.random.key(1), (3, 6)) < 0.5).astype(float)
      >>> ll = vae.log_likelihood(params, x, jnp.zeros((3, 2)))
      >>> ll.shape, bool(jnp.all(ll < 0))
      ((3,), True)
    """
    params = _check_params(params)
    decoder = _check_decoder(decoder)
    x = _check_x(x, params.enc_W.shape[0])
    z = _validate.points("z", z, params.mu_W.shape[1], "params")
    if z.shape[0] != x.shape[0]:
        raise ValueError(f"z must have one row per row of x ({x.shape[0]}); got {z.shape[0]}")
    obs_scale = _validate.positive("obs_scale", obs_scale)
    return _log_likelihood(_decode(params, z), x, decoder, obs_scale)


# ---------------------------------------------------------------------------
# The mixture prior: the book's log-sum-exp energy over the codes
# ---------------------------------------------------------------------------


def _prior_sim(prior, z):
    inv = jnp.exp(-prior.log_scales)  # (K, d)
    r = (z[..., None, :] - prior.means) * inv  # (..., N, K, d)
    log_pi = prior.logits - core.logsumexp(prior.logits[None])[0]
    return log_pi - 0.5 * jnp.sum(r**2, axis=-1) - jnp.sum(prior.log_scales, axis=-1) - 0.5 * z.shape[-1] * _LOG_2PI


def sim(prior: MixturePrior, z) -> Array:
    r"""The similarities :math:`\mathrm{sim}(z_n, k) = \ln\pi_k + \ln\mathcal N(z_n; m_k, \mathrm{diag}\,s_k^2)`,
    ``(N, K)``.

    Children: the codes :math:`z_n`; parents: the prior's components (the
    normalised GMM sim of chapter 02 with diagonal covariances).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> prior = vae.init_prior(3, 2, key=jax.random.key(0))
      >>> vae.sim(prior, jnp.ones((4, 2))).shape
      (4, 3)
    """
    prior = _check_prior(prior)
    return _prior_sim(prior, _validate.points("z", z, prior.means.shape[1], "prior"))


def energy(prior: MixturePrior, z) -> Array:
    r"""The log-sum-exp energy of the codes under the mixture prior, :math:`-\sum_n \ln p(z_n)`.

    .. math:: E(z) = -\sum_n \ln \sum_k \exp \mathrm{sim}(z_n, k) = -\sum_n \ln \sum_k \pi_k \mathcal N(z_n; m_k, S_k)

    (``core.energy`` of :func:`sim`). It is the prior part of the negative
    ELBO, :math:`-\mathbb E_q[\ln p(z)]`, evaluated at sampled codes.

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> zero = jnp.zeros((1, 2))
      >>> prior = vae.MixturePrior(jnp.zeros(1), zero, zero)  # N(0, I)
      >>> z = jnp.zeros((3, 2))  # three codes at its mean: 3 ln(2 pi)
      >>> vae.sim(prior, z).shape, round(float(vae.energy(prior, z)), 3)
      ((3, 1), 5.514)
    """
    return core.energy(sim(prior, z))


def prior_responsibilities(prior: MixturePrior, z) -> Array:
    r"""The softmax weights :math:`w_{nk} = p(k \mid z_n)` of the prior energy, ``(N, K)``: soft cluster labels.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> prior = vae.init_prior(3, 2, key=jax.random.key(0))
      >>> w = vae.prior_responsibilities(prior, jnp.ones((4, 2)))
      >>> w.shape, bool(jnp.allclose(w.sum(1), 1.0))
      ((4, 3), True)
    """
    return core.weights(sim(prior, z))


def log_prior(prior: MixturePrior | None, z) -> Array:
    r""":math:`\ln p(z_n)` per row, ``(N,)``: the mixture's, or :math:`\ln\mathcal N(z; 0, I)` when ``prior`` is
    ``None``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> lp = vae.log_prior(None, jnp.zeros((3, 2)))  # N(0, I) at its mean
      >>> lp.shape, round(float(lp[0]), 3)  # -ln(2 pi)
      ((3,), -1.838)
    """
    if prior is None:
        z = _validate.float_array("z", z, 1)
        return _log_std_normal(z)
    return core.logsumexp(sim(prior, z))


def _log_std_normal(z):
    return -0.5 * jnp.sum(z**2, axis=-1) - 0.5 * z.shape[-1] * _LOG_2PI


def grad_prior_z(prior: MixturePrior, z) -> tuple[MixturePrior, Array]:
    r"""Analytic gradients of :func:`energy`: softmax-weighted sums of sim-gradients (eq. 4 of the book).

    With :math:`w_{nk}` the responsibilities and :math:`r_{nk} = (z_n - m_k)/s_k` (per coordinate),

    .. math::

        \partial_{z_n} E = \sum_k w_{nk}\, \frac{z_n - m_k}{s_k^2}, \qquad
        \partial_{m_k} E = -\sum_n w_{nk}\, \frac{z_n - m_k}{s_k^2}, \\
        \partial_{\ln s_k} E = -\sum_n w_{nk} (r_{nk}^2 - 1), \qquad
        \partial_{\mathrm{logits}_k} E = -\sum_n (w_{nk} - \pi_k).

    Returns:
      ``(MixturePrior of gradients, gradient in z)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> prior = vae.init_prior(3, 2, key=jax.random.key(0))
      >>> g_prior, g_z = vae.grad_prior_z(prior, jnp.ones((4, 2)))
      >>> g_prior.means.shape, g_z.shape
      ((3, 2), (4, 2))
    """
    prior = _check_prior(prior)
    z = _validate.points("z", z, prior.means.shape[1], "prior")
    w = core.weights(_prior_sim(prior, z))  # (N, K)
    inv2 = jnp.exp(-2.0 * prior.log_scales)  # (K, d)
    diff = z[:, None, :] - prior.means  # (N, K, d)
    g_z = jnp.einsum("nk,nkd->nd", w, diff * inv2)
    g_m = -jnp.einsum("nk,nkd->kd", w, diff * inv2)
    g_s = -jnp.einsum("nk,nkd->kd", w, diff**2 * inv2 - 1.0)
    pi = jnp.exp(prior.logits - core.logsumexp(prior.logits[None])[0])
    g_l = -(jnp.sum(w, axis=0) - z.shape[0] * pi)
    return MixturePrior(g_l, g_m, g_s), g_z


# ---------------------------------------------------------------------------
# Log-weights and the two bounds
# ---------------------------------------------------------------------------


def _log_weight_terms(params, x, eps, decoder, obs_scale):
    """``ln p(x | z)``, ``ln p(z)`` and ``ln q(z | x)`` of the reparameterised codes, each ``(S, N)``."""
    mu, logvar = _encode(params, x)
    z = mu + eps * jnp.exp(0.5 * logvar)  # (S, N, d_z)
    log_q = -0.5 * jnp.sum(eps**2 + logvar + _LOG_2PI, axis=-1)
    lp = _log_std_normal(z) if params.prior is None else core.logsumexp(_prior_sim(params.prior, z))
    return _log_likelihood(_decode(params, z), x, decoder, obs_scale), lp, log_q


@partial(jax.jit, static_argnums=3)
def _log_weights(params, x, eps, decoder, obs_scale):
    log_lik, lp, log_q = _log_weight_terms(params, x, eps, decoder, obs_scale)
    return log_lik + lp - log_q


def _check_eps(eps, n, d_z, samples: bool = True):
    """``eps`` of shape ``(S, n, d_z)`` (one draw per sample), or ``(n, d_z)`` with ``samples=False``."""
    eps = _validate.array("eps", eps, 3 if samples else 2)
    if eps.shape[-2:] != (n, d_z):
        want = f"(S, {n}, {d_z})" if samples else f"({n}, {d_z})"
        raise ValueError(f"eps must have shape {want}; got {eps.shape}")
    return eps


def log_weights(params: Params, x, eps, *, decoder: str = "bernoulli", obs_scale: float = 1.0) -> Array:
    r"""Importance log-weights :math:`\ell_{sn} = \ln p(x_n, z_{sn}) - \ln q(z_{sn} \mid x_n)`, ``(S, N)``.

    The codes are reparameterised, :math:`z_{sn} = \mu(x_n) + \epsilon_{sn} \odot \sigma(x_n)`, with the
    given standard normal draws ``eps`` of shape ``(S, N, d_z)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> x = (jax.random.uniform(jax.random.key(1), (3, 6)) < 0.5).astype(float)
      >>> eps = jax.random.normal(jax.random.key(2), (4, 3, 2))
      >>> vae.log_weights(params, x, eps).shape  # (S, N)
      (4, 3)
    """
    params = _check_params(params)
    decoder = _check_decoder(decoder)
    x = _check_x(x, params.enc_W.shape[0])
    eps = _check_eps(eps, x.shape[0], params.mu_W.shape[1])
    return _log_weights(params, x, eps, decoder, _validate.positive("obs_scale", obs_scale))


def elbo_bound(log_w) -> Array:
    r"""The Monte Carlo ELBO from log-weights ``(S, ...)``: :math:`\frac1S\sum_s \ell_s` (an average, no LSE).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> log_w = jnp.log(jnp.array([[0.5], [0.25]]))
      >>> round(float(vae.elbo_bound(log_w)[0]), 3)  # (ln 0.5 + ln 0.25) / 2
      -1.04
    """
    log_w = _validate.float_array("log_w", log_w, 1)
    return jnp.mean(log_w, axis=0)


def iwae_bound(log_w) -> Array:
    r"""One draw of :math:`\mathrm{IWAE}_K` from ``K`` log-weights ``(K, ...)``: :math:`\mathrm{LSE}_k \ell_k - \ln K`.

    This is a log-sum-exp over samples (children: the examples; parents: the
    ``K`` samples; sim: the log-weights), computed with :func:`lse_energy.core.logsumexp`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> log_w = jnp.log(jnp.array([[0.5], [0.25]]))
      >>> round(float(vae.iwae_bound(log_w)[0]), 3)  # ln((0.5 + 0.25) / 2)
      -0.981
    """
    log_w = _validate.float_array("log_w", log_w, 1)
    moved = jnp.moveaxis(log_w, 0, -1)
    return core.logsumexp(moved[..., None, :])[..., 0] - math.log(log_w.shape[0])


def _draw(params, x, key, n_samples):
    return core.random_normal(key, (n_samples,) + x.shape[:1] + params.mu_W.shape[1:], x.dtype)


def elbo(params: Params, x, *, key, n_samples: int = 1, decoder: str = "bernoulli", obs_scale: float = 1.0) -> Array:
    r"""Per-example ELBO estimate from ``n_samples`` reparameterised codes, ``(N,)``.

    :math:`\frac1S \sum_s [\ln p(x|z_s) + \ln p(z_s) - \ln q(z_s|x)]`: an unbiased estimate of the
    ELBO (for the standard prior, :func:`loss` uses the closed-form KL instead).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> x = (jax.random.uniform(jax.random.key(1), (3, 6)) < 0.5).astype(float)
      >>> e = vae.elbo(params, x, key=jax.random.key(2), n_samples=2)
      >>> e.shape, bool(jnp.all(e < 0))  # a bound on ln p(x) of binary data
      ((3,), True)
    """
    _validate.key("key", key)
    n = _validate.count("n_samples", n_samples)
    params = _check_params(params)
    x = _check_x(x, params.enc_W.shape[0])
    return elbo_bound(log_weights(params, x, _draw(params, x, key, n), decoder=decoder, obs_scale=obs_scale))


def iwae(params: Params, x, *, key, n_samples: int, decoder: str = "bernoulli", obs_scale: float = 1.0) -> Array:
    r"""Per-example draw of :math:`\mathrm{IWAE}_K` with :math:`K` = ``n_samples``, ``(N,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> x = (jax.random.uniform(jax.random.key(1), (3, 6)) < 0.5).astype(float)
      >>> vae.iwae(params, x, key=jax.random.key(2), n_samples=4).shape
      (3,)
    """
    _validate.key("key", key)
    n = _validate.count("n_samples", n_samples)
    params = _check_params(params)
    x = _check_x(x, params.enc_W.shape[0])
    return iwae_bound(log_weights(params, x, _draw(params, x, key, n), decoder=decoder, obs_scale=obs_scale))


def _loss_terms(params, x, eps, decoder, obs_scale, kl_weight):
    mu, logvar = _encode(params, x)
    z = mu + eps * jnp.exp(0.5 * logvar)
    rec = -jnp.mean(_log_likelihood(_decode(params, z), x, decoder, obs_scale))
    if params.prior is None:
        kl = jnp.mean(0.5 * jnp.sum(jnp.exp(logvar) + mu**2 - logvar - 1.0, axis=-1))
    else:  # E_q[ln q] in closed form (the entropy), E_q[-ln p(z)] = prior energy at the sample / N
        neg_entropy = -0.5 * jnp.sum(1.0 + logvar + _LOG_2PI, axis=-1)
        kl = jnp.mean(neg_entropy) + core.energy(_prior_sim(params.prior, z)) / x.shape[0]
    return rec + kl_weight * kl, kl


def _iwae_loss_terms(params, x, eps, decoder, obs_scale):
    log_lik, lp, log_q = _log_weight_terms(params, x, eps, decoder, obs_scale)
    lw = log_lik + lp - log_q  # (K, N)
    iw = core.logsumexp(lw.T[:, None, :])[:, 0] - math.log(eps.shape[0])
    return -jnp.mean(iw), jnp.mean(log_q - lp)


def iwae_loss(params: Params, x, eps, *, decoder: str = "bernoulli", obs_scale: float = 1.0) -> Array:
    r"""The importance-weighted training loss: :math:`-\frac1N\sum_n [\mathrm{LSE}_k\,\ell_{kn} - \ln K]`.

    ``eps`` of shape ``(K, N, d_z)``: :math:`K` reparameterised codes per example
    (:func:`log_weights`); the loss is minus the batch mean of one draw of
    :math:`\mathrm{IWAE}_K` (:func:`iwae_bound`), the book's log-sum-exp energy over the
    samples, per example. Its gradient weights each sample's gradient by its
    softmax weight :math:`\tilde w_k = e^{\ell_k}/\sum_j e^{\ell_j}` (Burda et al., 2016).
    With :math:`K = 1` it is the one-sample ELBO estimate (with a sampled, not
    closed-form, KL term).

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> x = (jax.random.uniform(jax.random.key(1), (3, 6)) < 0.5).astype(float)
      >>> eps = jax.random.normal(jax.random.key(2), (4, 3, 2))  # K = 4 codes per row
      >>> loss = vae.iwae_loss(params, x, eps)
      >>> loss.shape, bool(loss > 0)
      ((), True)
    """
    params = _check_params(params)
    decoder = _check_decoder(decoder)
    x = _check_x(x, params.enc_W.shape[0])
    eps = _check_eps(eps, x.shape[0], params.mu_W.shape[1])
    return _iwae_loss_terms(params, x, eps, decoder, _validate.positive("obs_scale", obs_scale))[0]


def loss(
    params: Params, x, eps, *, decoder: str = "bernoulli", obs_scale: float = 1.0, kl_weight: float = 1.0
) -> Array:
    r"""The training loss of §21: mean over the batch of :math:`-\mathbb E_q[\ln p(x|z)] + \beta\,\mathrm{KL}`.

    One reparameterised code per example (``eps`` of shape ``(N, d_z)``). With the
    standard prior the KL is the closed form :func:`gaussian_kl`; with a
    :class:`MixturePrior` it is :math:`-H[q] + \mathbb E_q[-\ln p(z)]`, the second
    term being :func:`energy` at the sampled codes (divided by :math:`N`). With
    :math:`\beta = 1` this is the negative ELBO per example (a β-VAE otherwise, §21).

    Args:
      kl_weight: :math:`\beta`, the weight of the KL term (β-VAE's :math:`\beta`), ``> 0``;
        1 gives the negative ELBO.

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> params = vae.init_params(6, 2, 4, key=jax.random.key(0))
      >>> x = (jax.random.uniform(jax.random.key(1), (3, 6)) < 0.5).astype(float)
      >>> eps = jax.random.normal(jax.random.key(2), (3, 2))
      >>> loss = vae.loss(params, x, eps)
      >>> loss.shape, bool(loss > 0)
      ((), True)
    """
    params = _check_params(params)
    decoder = _check_decoder(decoder)
    x = _check_x(x, params.enc_W.shape[0])
    eps = _check_eps(eps, x.shape[0], params.mu_W.shape[1], samples=False)
    return _loss_terms(
        params, x, eps, decoder, _validate.positive("obs_scale", obs_scale), _validate.positive("kl_weight", kl_weight)
    )[0]


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def _value_and_grad(p, batch, args, decoder, n_samples):
    # one minibatch of the driver (_descent.minibatch): its codes drawn from the minibatch's key
    (xb, k), (obs_scale, kl_weight) = batch, args
    shape = (xb.shape[0], p.mu_W.shape[1])
    if n_samples == 1:  # the ELBO of §21, closed-form KL for the standard prior
        eps = core.random_normal(k, shape, xb.dtype)
        return jax.value_and_grad(_loss_terms, has_aux=True)(p, xb, eps, decoder, obs_scale, kl_weight)
    eps = core.random_normal(k, (n_samples, *shape), xb.dtype)  # -IWAE_K
    return jax.value_and_grad(_iwae_loss_terms, has_aux=True)(p, xb, eps, decoder, obs_scale)


def _result(opt_state, values, _):
    values, kls = values
    return jnp.mean(values, axis=1), FitExtras(opt_state, kls, values), values


def fit(
    params: Params,
    x,
    *,
    key,
    optimizer: Any,
    n_epochs: int,
    batch_size: int,
    decoder: str = "bernoulli",
    obs_scale: float = 1.0,
    kl_weight: float = 1.0,
    n_samples: int = 1,
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Train a VAE by the procedure of §21: encode, sample :math:`z = \mu + \epsilon\odot\sigma`, KL, decode,
    reconstruction loss, a gradient step on the combined loss (:func:`loss`).

    Minibatches are reshuffled with ``key`` every epoch (a last partial batch is dropped); one code per example per
    step. The gradient is ``jax.grad`` of :func:`loss` (through the reparameterised sample); with a mixture prior in
    ``params.prior`` it includes the softmax-weighted prior-energy gradient of :func:`grad_prior_z` and the prior is
    learned too. Jitted, nested ``lax.scan``.

    Args:
      params: initial :class:`Params`.
      x: ``(N, d_x)`` data; in :math:`[0, 1]` for the Bernoulli decoder.
      key: PRNG key (shuffling and codes; keyword-only).
      optimizer: an optax ``GradientTransformation`` (a fresh but equal one reuses the compiled program).
      n_epochs: integer ``>= 1``; batch_size: integer in ``[1, N]``.
      decoder: ``"bernoulli"`` or ``"gaussian"``.
      obs_scale: the Gaussian decoder's :math:`\sigma` (ignored by the Bernoulli decoder).
      kl_weight: :math:`\beta`, the weight of the KL term (β-VAE's :math:`\beta`), ``> 0``
        (1: the ELBO).
      n_samples: :math:`K`. With 1 (the default) the loss is §21's one-sample ELBO
        (:func:`loss`); with :math:`K > 1` it is :math:`-\mathrm{IWAE}_K` (:func:`iwae_loss`,
        :math:`K` codes per example per step), and ``kl_weight`` must be 1.
      opt_state: state from a previous call, or ``None``.
      progress: show a ``tqdm.auto`` bar of the epochs (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult`: trained :class:`Params`; ``energies``,
      ``(n_epochs,)``, the mean over each epoch's minibatches of the loss before their steps
      (the negative ELBO per example when ``kl_weight = 1``, :math:`-\mathrm{IWAE}_K` when
      ``n_samples = K > 1``; the minibatch values are ``extras.batch_losses``);
      ``n_iter = n_epochs``; ``converged = None``; ``extras`` a :class:`FitExtras`.

    Raises:
      ValueError: on bad arguments, or when training diverged (the message names the first epoch).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import vae
      >>> key = jax.random.key(0)
      >>> params = vae.init_params(6, 2, 4, key=key, n_components=3)
      >>> x = (jax.random.uniform(key, (8, 6)) < 0.5).astype(float)  # binary
      >>> opt = optax.adam(1e-2)
      >>> r = vae.fit(params, x, key=key, optimizer=opt, n_epochs=2, batch_size=4)
      >>> r.params.prior.means.shape, r.energies.shape
      ((3, 2), (2,))
    """
    _validate.key("key", key)
    params = _check_params(params)
    decoder = _check_decoder(decoder)
    x = _check_x(x, params.enc_W.shape[0])
    if x.dtype != params.enc_W.dtype:
        raise ValueError(f"x must have the dtype of params ({params.enc_W.dtype}); got {x.dtype}")
    if decoder == "bernoulli":
        _check_unit_data(x)
    n_epochs, batch_size = _validate.trainer(optimizer, n_epochs, batch_size, x.shape[0])
    obs_scale = jnp.asarray(_validate.positive("obs_scale", obs_scale), x.dtype)
    n_samples = _validate.count("n_samples", n_samples)
    if n_samples > 1 and kl_weight != 1:
        raise ValueError(f"kl_weight must be 1 with n_samples = {n_samples} > 1 (the IWAE objective); got {kl_weight}")
    kl_weight = jnp.asarray(_validate.positive("kl_weight", kl_weight), x.dtype)
    return _descent.minibatch(
        "vae.fit",
        partial(_value_and_grad, decoder=decoder, n_samples=n_samples),
        params,
        x,
        key=key,
        optimizer=optimizer,
        n_epochs=n_epochs,
        batch_size=batch_size,
        args=(obs_scale, kl_weight),
        opt_state=opt_state,
        batch_keys=True,
        result=_result,
        progress=progress,
    )


# ---------------------------------------------------------------------------
# The linear-Gaussian model: everything in closed form (the chapter's check)
# ---------------------------------------------------------------------------


def _check_linear(W, b, sigma, x):
    W = _validate.array("W", W, 2)
    b = _validate.array("b", b, 1)
    if b.shape != (W.shape[0],):
        raise ValueError(f"b must have shape ({W.shape[0]},) to match W; got {b.shape}")
    sigma = _validate.positive("sigma", sigma)
    return W, b, sigma, _validate.points("x", x, W.shape[0], "W")


def linear_gaussian_log_marginal(W, b, sigma, x) -> Array:
    r"""Exact :math:`\ln p(x) = \ln\mathcal N(x; b, WW^\top + \sigma^2 I)` for :math:`p(z) = \mathcal N(0, I)`,
    :math:`p(x|z) = \mathcal N(Wz + b, \sigma^2 I)`; ``W`` is ``(d_x, d_z)``, ``x`` is ``(N, d_x)``; returns
    ``(N,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> W, b, x = jnp.zeros((2, 1)), jnp.zeros(2), jnp.zeros((3, 2))
      >>> lp = vae.linear_gaussian_log_marginal(W, b, 1.0, x)  # N(0, I) at 0
      >>> lp.shape, round(float(lp[0]), 3)  # -ln(2 pi)
      ((3,), -1.838)
    """
    W, b, sigma, x = _check_linear(W, b, sigma, x)
    return _linear_gaussian_log_marginal(W, b, sigma, x)


@jax.jit
def _linear_gaussian_log_marginal(W, b, sigma, x):
    C = W @ W.T + sigma**2 * jnp.eye(W.shape[0], dtype=W.dtype)
    L = jnp.linalg.cholesky(C)
    r = jax.scipy.linalg.solve_triangular(L, (x - b).T, lower=True)
    return -0.5 * jnp.sum(r**2, axis=0) - jnp.sum(jnp.log(jnp.diag(L))) - 0.5 * W.shape[0] * _LOG_2PI


def linear_gaussian_posterior(W, b, sigma, x) -> tuple[Array, Array]:
    r"""The exact posterior :math:`p(z|x) = \mathcal N(m(x), \Lambda^{-1})`, :math:`\Lambda = I + W^\top W/\sigma^2`,
    :math:`m(x) = \Lambda^{-1} W^\top (x - b)/\sigma^2`.

    Returns:
      the means ``(N, d_z)`` and the shared covariance ``(d_z, d_z)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> W, b, x = jnp.ones((2, 1)), jnp.zeros(2), jnp.ones((3, 2))
      >>> m, cov = vae.linear_gaussian_posterior(W, b, 1.0, x)
      >>> m.shape, cov.shape, round(float(cov[0, 0]), 3)  # 1 / (1 + 2)
      ((3, 1), (1, 1), 0.333)
    """
    W, b, sigma, x = _check_linear(W, b, sigma, x)
    Lam = jnp.eye(W.shape[1], dtype=W.dtype) + W.T @ W / sigma**2
    cov = jnp.linalg.inv(Lam)
    return (x - b) @ W @ cov / sigma**2, 0.5 * (cov + cov.T)


def linear_gaussian_log_weights(W, b, sigma, x, q_mean, q_chol, eps) -> Array:
    r"""Log-weights :math:`\ln p(x, z) - \ln q(z|x)` of the linear-Gaussian model for a Gaussian
    :math:`q = \mathcal N(m, LL^\top)` and codes :math:`z = m + L\epsilon`.

    Args:
      W, b, sigma, x: the model and ``(N, d_x)`` data.
      q_mean: ``(N, d_z)``; q_chol: ``(d_z, d_z)`` lower-triangular with a positive diagonal.
      eps: ``(S, N, d_z)`` standard normal draws.

    Returns:
      ``(S, N)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import vae
      >>> W, b, x = jnp.ones((2, 1)), jnp.zeros(2), jnp.ones((3, 2))
      >>> m, cov = vae.linear_gaussian_posterior(W, b, 1.0, x)
      >>> chol = jnp.linalg.cholesky(cov)
      >>> eps = jax.random.normal(jax.random.key(0), (5, 3, 1))
      >>> log_w = vae.linear_gaussian_log_weights(W, b, 1.0, x, m, chol, eps)
      >>> exact = vae.linear_gaussian_log_marginal(W, b, 1.0, x)
      >>> log_w.shape, bool(jnp.allclose(log_w, exact, atol=1e-4))  # q = posterior
      ((5, 3), True)
    """
    W, b, sigma, x = _check_linear(W, b, sigma, x)
    d_z = W.shape[1]
    q_mean = _validate.points("q_mean", q_mean, d_z, "W")
    q_chol = _validate.array("q_chol", q_chol, 2)
    if q_chol.shape != (d_z, d_z):
        raise ValueError(f"q_chol must have shape ({d_z}, {d_z}); got {q_chol.shape}")
    if _validate.is_concrete(q_chol) and not bool(np.all(np.diag(np.asarray(q_chol)) > 0)):
        raise ValueError("q_chol must have a positive diagonal")
    eps = _check_eps(eps, x.shape[0], d_z)
    return _linear_gaussian_log_weights(W, b, sigma, x, q_mean, q_chol, eps)


@jax.jit
def _linear_gaussian_log_weights(W, b, sigma, x, q_mean, q_chol, eps):
    d_z = W.shape[1]
    z = q_mean + eps @ jnp.tril(q_chol).T
    log_q = -0.5 * jnp.sum(eps**2, axis=-1) - jnp.sum(jnp.log(jnp.diag(q_chol))) - 0.5 * d_z * _LOG_2PI
    r = (x - z @ W.T - b) / sigma
    log_lik = -0.5 * jnp.sum(r**2, axis=-1) - W.shape[0] * (jnp.log(sigma) + 0.5 * _LOG_2PI)
    return log_lik + _log_std_normal(z) - log_q
