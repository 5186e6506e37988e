r"""Predictive coding as descent on the log-sum-exp energy.

This module is organised in parts, one per predictive-coding model, each with
its own name prefix so that later parts can be added beside it:

* **Shared**: :class:`MLPParams`, :func:`init_mlp` and :func:`mlp`, a
  one-hidden-layer tanh network :math:`f_\phi` written in plain JAX.
* **Mixture part** (prefix ``mixture_``): §8 and Appendix B of Tschantz
  (2025), *Attention via log-sum-exp energy*. Data points :math:`x_i \in
  \mathbb{R}^d` are the children, latent causes :math:`\mu_k \in \mathbb{R}^m`
  the parents, and the similarity compares a datum with the *prediction*
  :math:`f_\phi(\mu_k)`:

  .. math::

      \mathrm{sim}(x_i, \mu_k) = -\tfrac12 \|x_i - f_\phi(\mu_k)\|^2, \qquad
      E^{\mathrm{PC}} = -\sum_{i=1}^N \ln \sum_{k=1}^K
          \exp\!\big(-\tfrac12 \|x_i - f_\phi(\mu_k)\|^2\big)
      \qquad \text{(eq. 18)}.

  Functions: :func:`mixture_sim`, :func:`mixture_energy`,
  :func:`mixture_responsibilities`, the gradients :func:`mixture_grad_x`,
  :func:`mixture_grad_mu`, :func:`mixture_grad_params`, the step-size bound
  :func:`mixture_mu_lipschitz`, and the drivers :func:`mixture_infer`
  (inference of :math:`\mu` by gradient descent) and :func:`mixture_fit`
  (EM-like alternation of inference and optax steps on :math:`\phi`).
  :func:`mixture_sample` draws data from a "teacher" network.

* **Hierarchical networks** (prefix ``pcn_``): the predictive coding networks
  of the lecture notes (§29), with value and error nodes, the free energy
  :math:`F = \sum_l \|\varepsilon^l\|^2 / (2\pi_l)`, inference by descent on
  :math:`F`, local learning rules, and the training, generation and
  inference modes obtained by clamping (see the section below).
* **Attention-normalised predictive coding** (prefix ``anpc_``): §4.4 of
  Singh and Buckley (2023), *Attention as implicit structural inference*.
  A network of scalar neurons in which every incoming synapse
  :math:`j \to i` makes its own prediction :math:`w_{ij} f(x_j) + b_{ij}` of
  neuron :math:`i`, with error :math:`\varepsilon_{ij}`. Standard predictive
  coding, :math:`F_{\mathrm{std}} = \sum_{ij} \frac12 k_{ij}
  \varepsilon_{ij}^2`, lets every synapse explain its neuron at once; a
  uniform prior over which *one* incoming synapse explains each neuron,
  summed out, gives the log-sum-exp energy

  .. math::

      F_{\mathrm{att}} = -\sum_i \ln \sum_{j \in \mathrm{pre}(i)}
          \exp\!\big(-\tfrac12 k_{ij}\,\varepsilon_{ij}^2\big),

  whose gradient is the standard one with every error weighted by the
  softmax :math:`\alpha_{ij}` over the neuron's incoming synapses (equal to
  standard PC with effective precisions :math:`k_{ij}\alpha_{ij}`).
  Functions: :func:`anpc_errors`, :func:`anpc_sim`, :func:`anpc_attention`,
  :func:`anpc_effective_precisions`, :func:`anpc_energy`,
  :func:`anpc_standard_energy`, the gradients :func:`anpc_grad_x`,
  :func:`anpc_standard_grad_x`, :func:`anpc_grad_params`, the curvature
  bound :func:`anpc_lipschitz` and the driver :func:`anpc_infer`.

**Correction to the seed.** §8 and Appendix B print
:math:`\partial\,\mathrm{sim}/\partial x_i = x_i - f_\phi(\mu_k)` and
:math:`-\partial E/\partial x_i = \sum_k \alpha_{ik}(x_i - f_\phi(\mu_k))`.
Both have the wrong sign: with :math:`\mathrm{sim} = -\frac12\|x_i -
f_\phi(\mu_k)\|^2` one has :math:`\partial\,\mathrm{sim}/\partial x_i =
-(x_i - f_\phi(\mu_k))`, hence :math:`\partial E/\partial x_i = +\sum_k
\alpha_{ik}(x_i - f_\phi(\mu_k))`. The :math:`\mu_k` gradient is printed with
the Jacobian :math:`\partial f_\phi/\partial \mu_k` where its *transpose* is
meant (the two differ whenever the Jacobian is not symmetric, and the
untransposed product has the wrong shape when :math:`m \ne d`); it is the
vector-Jacobian product computed here with ``jax.vjp``. The code implements
the correct expressions.

All gradient functions return :math:`\partial E/\partial(\cdot)` (the
gradient, not its negative), like :func:`lse_energy.core.graph_gradient`.

**Input dtypes.** Every continuous-valued array (network parameters, latent
causes, observations, layer values, activities, precisions) must have a
floating dtype: an integer or boolean array raises ``ValueError`` naming the
argument (cast it explicitly, e.g. ``x.astype(float)``). Discrete arguments
keep their natural types: counts (``num_steps``, ``batch_size``, ...) are
Python integers, ``clamp`` and ``params.adjacency`` are boolean. Scalar step
sizes may be any finite real number.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _progress, core

Array = jax.Array

__all__ = [
    # shared
    "MLPParams",
    "init_mlp",
    "mlp",
    # mixture part (§8)
    "mixture_sim",
    "mixture_energy",
    "mixture_responsibilities",
    "mixture_grad_x",
    "mixture_grad_mu",
    "mixture_grad_params",
    "mixture_mu_lipschitz",
    "MixtureInference",
    "mixture_infer",
    "MixtureFit",
    "mixture_fit",
    "MixtureData",
    "mixture_sample",
]

# Largest value of |tanh''(z)| = |−2 tanh(z)(1 − tanh(z)^2)|, attained at tanh(z) = 1/√3.
_TANH2_MAX = 4.0 / (3.0 * math.sqrt(3.0))  # a Python float: weakly typed, keeps float32 float32


_is_concrete = core.is_concrete


# ---------------------------------------------------------------------------
# Shared: the generative network f_phi
# ---------------------------------------------------------------------------


class MLPParams(NamedTuple):
    r"""A one-hidden-layer tanh network :math:`f_\phi : \mathbb{R}^m \to \mathbb{R}^d`.

    .. math:: f_\phi(\mu) = W_2 \tanh(W_1 \mu + b_1) + b_2, \qquad
              \phi = (W_1, b_1, W_2, b_2).

    Attributes:
      W1: ``(H, m)`` input-to-hidden weights.
      b1: ``(H,)`` hidden biases.
      W2: ``(d, H)`` hidden-to-output weights.
      b2: ``(d,)`` output biases.

    Because :math:`|\tanh| < 1`, the range of :math:`f_\phi` is bounded:
    :math:`\|f_\phi(\mu) - b_2\| \le \|W_2\|_2 \sqrt{H}` for every
    :math:`\mu`.
    """

    W1: Array
    b1: Array
    W2: Array
    b2: Array


def init_mlp(
    latent_dim: int,
    hidden_dim: int,
    out_dim: int,
    *,
    key: Array,
    input_scale: float = 1.0,
    output_scale: float = 1.0,
    bias_scale: float = 0.0,
) -> MLPParams:
    r"""Random :class:`MLPParams` with LeCun-normal weights.

    :math:`W_1 \sim \mathcal{N}(0, s_{\mathrm{in}}^2/m)`,
    :math:`W_2 \sim \mathcal{N}(0, s_{\mathrm{out}}^2/H)`,
    :math:`b_1 \sim \mathcal{N}(0, s_b^2)`,
    :math:`b_2 \sim \mathcal{N}(0, s_b^2 s_{\mathrm{out}}^2)`, in the default
    floating dtype (float64 when ``jax_enable_x64`` is on).

    Args:
      latent_dim: ``m >= 1``.
      hidden_dim: ``H >= 1``.
      out_dim: ``d >= 1``.
      key: PRNG key (keyword-only).
      input_scale, output_scale: ``> 0``, the scales :math:`s_{\mathrm{in}}, s_{\mathrm{out}}`.
      bias_scale: ``>= 0``, the scale :math:`s_b` of the biases.

    Returns:
      :class:`MLPParams`.
    """
    for name, v in (("latent_dim", latent_dim), ("hidden_dim", hidden_dim), ("out_dim", out_dim)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {v!r}")
    for name, v in (("input_scale", input_scale), ("output_scale", output_scale)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be finite and > 0; got {v!r}")
    if not (np.isfinite(bias_scale) and bias_scale >= 0):
        raise ValueError(f"bias_scale must be finite and >= 0; got {bias_scale!r}")
    k1, k2, k3, k4 = jax.random.split(key, 4)
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    W1 = input_scale / np.sqrt(latent_dim) * jax.random.normal(k1, (hidden_dim, latent_dim), dtype)
    W2 = output_scale / np.sqrt(hidden_dim) * jax.random.normal(k2, (out_dim, hidden_dim), dtype)
    b1 = bias_scale * jax.random.normal(k3, (hidden_dim,), dtype)
    b2 = bias_scale * output_scale * jax.random.normal(k4, (out_dim,), dtype)
    return MLPParams(W1=W1, b1=b1, W2=W2, b2=b2)


def mlp(params: MLPParams, mu) -> Array:
    r""":math:`f_\phi(\mu) = W_2 \tanh(W_1 \mu + b_1) + b_2`, row-wise.

    Args:
      params: :class:`MLPParams` with ``W1: (H, m)``, ``b1: (H,)``,
        ``W2: (d, H)``, ``b2: (d,)``; floating point and finite.
      mu: ``(..., m)`` latent causes, floating point (an integer or boolean
        array raises ``ValueError``; cast it explicitly) and finite.

    Returns:
      ``(..., d)``.

    Raises:
      ValueError: ``mu`` without a last axis of width ``m = params.W1.shape[1]``,
        a non-floating dtype, or non-finite values (checked when concrete).
    """
    params = _check_params(params)
    mu = jnp.asarray(mu)
    m = params.W1.shape[1]
    if mu.ndim < 1 or mu.shape[-1] != m:
        raise ValueError(f"mu must have shape (..., m) with m = params.W1.shape[1] = {m}; got {mu.shape}")
    return _mlp(params, _floating_finite("mu", mu))


def _mlp(params, mu):
    """:func:`mlp` without validation (for use inside jitted code and gradients)."""
    h = jnp.tanh(mu @ params.W1.T + params.b1)
    return h @ params.W2.T + params.b2


def _check_params(params) -> MLPParams:
    if not isinstance(params, MLPParams):
        raise ValueError(f"params must be MLPParams; got {type(params).__name__}")
    W1, b1, W2, b2 = (jnp.asarray(a) for a in params)
    if W1.ndim != 2 or W2.ndim != 2 or b1.ndim != 1 or b2.ndim != 1:
        raise ValueError(
            "params must hold W1 (H, m), b1 (H,), W2 (d, H), b2 (d,); got shapes "
            f"{W1.shape}, {b1.shape}, {W2.shape}, {b2.shape}"
        )
    H = W1.shape[0]
    if b1.shape != (H,) or W2.shape[1] != H or b2.shape != (W2.shape[0],):
        raise ValueError(
            "params shapes are inconsistent: need W1 (H, m), b1 (H,), W2 (d, H), b2 (d,); got "
            f"{W1.shape}, {b1.shape}, {W2.shape}, {b2.shape}"
        )
    for name, a in zip(MLPParams._fields, (W1, b1, W2, b2)):
        _floating_finite(f"params.{name}", a)
    return MLPParams(W1, b1, W2, b2)


def _floating_finite(name: str, a: Array) -> Array:
    """``a`` (already shape-checked) must have a floating dtype and, when concrete, finite values."""
    if not jnp.issubdtype(a.dtype, jnp.floating):
        raise ValueError(f"{name} must be floating point; got {a.dtype}")
    if _is_concrete(a) and not bool(np.all(np.isfinite(np.asarray(a)))):
        raise ValueError(f"{name} must be finite")
    return a


def _check_matrix(name: str, a, cols: int, what: str) -> Array:
    a = jnp.asarray(a)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} must have shape (n, {what}) with n >= 1; got {a.shape}")
    if a.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns ({what}); got shape {a.shape}")
    return _floating_finite(name, a)


def _check_mixture(params, x, mu, mu_name="mu"):
    params = _check_params(params)
    m, d = params.W1.shape[1], params.W2.shape[0]
    x = _check_matrix("x", x, d, "d = params.W2.shape[0]")
    mu = _check_matrix(mu_name, mu, m, "m = params.W1.shape[1]")
    return params, x, mu


# ---------------------------------------------------------------------------
# Mixture part (§8 and Appendix B): one layer of latent causes, K parents
# ---------------------------------------------------------------------------


def _errors(params, x, mu):
    """Prediction errors e[i, k] = x_i - f(mu_k), shape (N, K, d), and f(mu), (K, d)."""
    pred = _mlp(params, mu)
    return x[:, None, :] - pred[None, :, :], pred


def mixture_sim(params: MLPParams, x, mu) -> Array:
    r"""Similarity matrix :math:`\mathrm{sim}(x_i, \mu_k) = -\frac12\|x_i - f_\phi(\mu_k)\|^2` (§8).

    Args:
      params: :class:`MLPParams` of :math:`f_\phi`.
      x: ``(N, d)`` data (children), floating point and finite.
      mu: ``(K, m)`` latent causes (parents), floating point and finite.
        Integer or boolean ``x``, ``mu`` or parameters raise ``ValueError``
        (all are continuous; cast explicitly), as in every ``mixture_*``
        function.

    Returns:
      ``(N, K)``.
    """
    params, x, mu = _check_mixture(params, x, mu)
    e, _ = _errors(params, x, mu)
    return -0.5 * jnp.sum(e * e, axis=-1)


def mixture_energy(params: MLPParams, x, mu) -> Array:
    r"""Predictive-coding mixture energy, eq. (18):

    .. math:: E^{\mathrm{PC}} = -\sum_{i=1}^N \ln \sum_{k=1}^K
              \exp\!\big(-\tfrac12\|x_i - f_\phi(\mu_k)\|^2\big).

    Built on :func:`lse_energy.core.energy`. It is bounded below by
    :math:`-N \ln K` (each similarity is :math:`\le 0`).

    Args:
      params: :class:`MLPParams`.
      x: ``(N, d)``.
      mu: ``(K, m)``.

    Returns:
      Scalar.
    """
    return core.energy(mixture_sim(params, x, mu))


def mixture_responsibilities(params: MLPParams, x, mu) -> Array:
    r"""Posterior over edges :math:`\alpha_{ik} = \mathrm{softmax}_k\,\mathrm{sim}(x_i, \mu_k)` (§8).

    Returns:
      ``(N, K)``, rows summing to 1.
    """
    return core.weights(mixture_sim(params, x, mu))


def _weighted_errors(params, x, mu):
    """alpha (N, K), errors (N, K, d), predictions (K, d)."""
    e, pred = _errors(params, x, mu)
    alpha = core.weights(-0.5 * jnp.sum(e * e, axis=-1))
    return alpha, e, pred


def mixture_grad_x(params: MLPParams, x, mu) -> Array:
    r""":math:`\partial E^{\mathrm{PC}}/\partial x_i`, the data gradient of eq. (18).

    .. math:: \frac{\partial E^{\mathrm{PC}}}{\partial x_i}
              = \sum_{k=1}^K \alpha_{ik}\,\big(x_i - f_\phi(\mu_k)\big),

    since :math:`\partial\,\mathrm{sim}/\partial x_i = -(x_i - f_\phi(\mu_k))`.
    **Sign correction:** §8 prints this sum as :math:`-\partial E/\partial
    x_i` and Appendix B prints :math:`\partial\,\mathrm{sim}/\partial x_i =
    +(x_i - f_\phi(\mu_k))`; both signs are wrong. Descending :math:`E` in
    :math:`x_i` moves the datum toward the responsibility-weighted
    prediction :math:`\sum_k \alpha_{ik} f_\phi(\mu_k)`.

    Args:
      params: :class:`MLPParams`.
      x: ``(N, d)``.
      mu: ``(K, m)``.

    Returns:
      ``(N, d)``.
    """
    params, x, mu = _check_mixture(params, x, mu)
    alpha, e, _ = _weighted_errors(params, x, mu)
    return jnp.einsum("nk,nkd->nd", alpha, e)


def _summed_errors(params, x, mu):
    """s_k = sum_i alpha_ik (x_i - f(mu_k)), shape (K, d)."""
    alpha, e, _ = _weighted_errors(params, x, mu)
    return jnp.einsum("nk,nkd->kd", alpha, e)


def mixture_grad_mu(params: MLPParams, x, mu) -> Array:
    r""":math:`\partial E^{\mathrm{PC}}/\partial \mu_k`, the latent gradient of eq. (18) (§8).

    .. math:: -\frac{\partial E^{\mathrm{PC}}}{\partial \mu_k}
              = J_k^\top \sum_{i=1}^N \alpha_{ik}\,\big(x_i - f_\phi(\mu_k)\big),
              \qquad J_k = \frac{\partial f_\phi(\mu_k)}{\partial \mu_k} \in \mathbb{R}^{d \times m}.

    This is §8's formula with the Jacobian transposed (the seed writes
    :math:`J_k` where :math:`J_k^\top` is meant). It is evaluated as a
    vector-Jacobian product: ``jax.vjp`` of :math:`f_\phi` at
    :math:`\mu_{1:K}` applied to the softmax-weighted sums of errors
    :math:`s_k = \sum_i \alpha_{ik}(x_i - f_\phi(\mu_k))`; no Jacobian is
    formed and :math:`E` is never differentiated.

    Args:
      params: :class:`MLPParams`.
      x: ``(N, d)``.
      mu: ``(K, m)``.

    Returns:
      ``(K, m)``.
    """
    params, x, mu = _check_mixture(params, x, mu)
    s = _summed_errors(params, x, mu)
    _, pullback = jax.vjp(lambda m: _mlp(params, m), mu)
    (jts,) = pullback(s)
    return -jts


def mixture_grad_params(params: MLPParams, x, mu) -> MLPParams:
    r""":math:`\partial E^{\mathrm{PC}}/\partial \phi`, the learning gradient of eq. (18).

    .. math:: -\frac{\partial E^{\mathrm{PC}}}{\partial \phi}
              = \sum_{k=1}^K \Big(\frac{\partial f_\phi(\mu_k)}{\partial \phi}\Big)^{\!\top}
                \sum_{i=1}^N \alpha_{ik}\,\big(x_i - f_\phi(\mu_k)\big),

    the same weighted errors as :func:`mixture_grad_mu`, pulled back to the
    weights instead of the latents (``jax.vjp`` of :math:`\phi \mapsto
    f_\phi(\mu_{1:K})`). Not printed in the seed; it follows from eq. (4)
    of the seed with :math:`\phi` entering every similarity.

    Returns:
      :class:`MLPParams` of the same shapes as ``params``.
    """
    params, x, mu = _check_mixture(params, x, mu)
    return _grad_params(params, x, mu)


def _grad_params(params, x, mu):
    s = _summed_errors(params, x, mu)
    _, pullback = jax.vjp(lambda p: _mlp(p, mu), params)
    (g,) = pullback(s)
    return jax.tree.map(jnp.negative, g)


def _lipschitz(params, x):
    n1 = jnp.linalg.norm(params.W1, ord=2)
    n2 = jnp.linalg.norm(params.W2, ord=2)
    H = params.W1.shape[0]
    emax = jnp.linalg.norm(x - params.b2, axis=-1) + n2 * math.sqrt(H)
    return jnp.sum(n1**2 * n2**2 + _TANH2_MAX * n1**2 * n2 * emax)


def mixture_mu_lipschitz(params: MLPParams, x) -> Array:
    r"""A global Lipschitz constant :math:`L` of :math:`\nabla_\mu E^{\mathrm{PC}}`.

    .. math:: L = \sum_{i=1}^N \Big( \|W_1\|_2^2 \|W_2\|_2^2
              + c\, \|W_1\|_2^2 \|W_2\|_2 \big(\|x_i - b_2\| + \sqrt{H}\,\|W_2\|_2\big)\Big),
              \qquad c = \max_z |\tanh''(z)| = \tfrac{4}{3\sqrt3}.

    Why: the Hessian of :math:`-\ln\sum_k e^{s_k}` is
    :math:`-\sum_k \alpha_k \nabla^2 s_k - \mathrm{Cov}_\alpha(\nabla s)
    \preceq -\sum_k \alpha_k \nabla^2 s_k`, and
    :math:`-\nabla^2_{\mu_k} s_{ik} = J_k^\top J_k - \sum_j e_{ikj}
    \nabla^2 f_j(\mu_k)` with :math:`\|J_k\|_2 \le \|W_1\|_2\|W_2\|_2`,
    :math:`\|\sum_j e_j \nabla^2 f_j\|_2 \le c\|W_1\|_2^2\|W_2\|_2\|e\|`, and
    the error bounded by :math:`\|x_i - b_2\| + \sqrt H \|W_2\|_2` because
    :math:`|\tanh| < 1`. Hence :math:`\nabla^2_\mu E \preceq L\,I` everywhere,
    and by the descent lemma every gradient step with :math:`0 < \eta \le
    2/L` does not increase :math:`E` (with :math:`\eta = 1/L` it decreases
    :math:`E` by at least :math:`\frac{1}{2L}\|\nabla_\mu E\|^2`).

    Args:
      params: :class:`MLPParams`.
      x: ``(N, d)``.

    Returns:
      Scalar :math:`L > 0`.
    """
    params = _check_params(params)
    x = _check_matrix("x", x, params.W2.shape[0], "d = params.W2.shape[0]")
    return _lipschitz(params, x)


class MixtureInference(NamedTuple):
    r"""Result of :func:`mixture_infer`.

    Attributes:
      mu: ``(K, m)`` latents after the last step.
      energy: ``(num_steps + 1,)`` :math:`E^{\mathrm{PC}}` at the start and after each step.
      step_size: scalar step :math:`\eta` that was used.
    """

    mu: Array
    energy: Array
    step_size: Array


def _energy(params, x, mu):
    e, _ = _errors(params, x, mu)
    return core.energy(-0.5 * jnp.sum(e * e, axis=-1))


def _grad_mu(params, x, mu):
    s = _summed_errors(params, x, mu)
    _, pullback = jax.vjp(lambda m: _mlp(params, m), mu)
    return -pullback(s)[0]


def _infer_scan(params, x, mu0, eta, num_steps):
    def step(mu, _):
        mu = mu - eta * _grad_mu(params, x, mu)
        return mu, _energy(params, x, mu)

    mu, trace = jax.lax.scan(step, mu0, None, length=num_steps)
    return mu, jnp.concatenate([_energy(params, x, mu0)[None], trace])


def _step_size(params, x, step_size):
    if step_size is None:
        return 1.0 / _lipschitz(params, x)
    return jnp.asarray(step_size, x.dtype)


@partial(jax.jit, static_argnames=("num_steps", "auto_step"))
def _infer_jit(params, x, mu0, step_size, num_steps, auto_step):
    eta = 1.0 / _lipschitz(params, x) if auto_step else step_size
    mu, trace = _infer_scan(params, x, mu0, eta, num_steps)
    return MixtureInference(mu=mu, energy=trace, step_size=eta)


def _check_int(name, v, minimum):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {v!r}")
    return int(v)


def _check_step(step_size):
    if step_size is None:
        return None
    if not (np.ndim(step_size) == 0 and np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a finite scalar > 0 or None; got {step_size!r}")
    return float(step_size)


def mixture_infer(params: MLPParams, x, mu0, *, num_steps: int, step_size: float | None = None
                  ) -> MixtureInference:
    r"""Inference of the latent causes by gradient descent on eq. (18).

    .. math:: \mu_k \leftarrow \mu_k - \eta\, \frac{\partial E^{\mathrm{PC}}}{\partial \mu_k}
              = \mu_k + \eta\, J_k^\top \sum_i \alpha_{ik}\big(x_i - f_\phi(\mu_k)\big)

    with :math:`\phi` fixed, using :func:`mixture_grad_mu`'s vector-Jacobian
    product. Jitted, with ``lax.scan`` inside.

    Args:
      params: :class:`MLPParams` (fixed).
      x: ``(N, d)`` data.
      mu0: ``(K, m)`` initial latents.
      num_steps: number of gradient steps, ``>= 1``.
      step_size: :math:`\eta > 0`; ``None`` (default) uses
        :math:`\eta = 1/L` with :math:`L` from :func:`mixture_mu_lipschitz`,
        for which the energy trace is guaranteed non-increasing (up to
        round-off).

    Returns:
      :class:`MixtureInference` ``(mu, energy, step_size)``.
    """
    params, x, mu0 = _check_mixture(params, x, mu0, "mu0")
    num_steps = _check_int("num_steps", num_steps, 1)
    step_size = _check_step(step_size)
    return _infer_jit(params, x, mu0, jnp.asarray(1.0 if step_size is None else step_size, x.dtype),
                      num_steps, step_size is None)


class MixtureFit(NamedTuple):
    r"""Result of :func:`mixture_fit`.

    Attributes:
      params: learned :class:`MLPParams`.
      mu: ``(K, m)`` latents after the last inference phase.
      initial_energy: scalar :math:`E^{\mathrm{PC}}` at the starting point.
      infer_energy: ``(num_rounds, infer_steps)`` energy after each inference step.
      learn_energy: ``(num_rounds, learn_steps)`` energy after each learning step.
    """

    params: MLPParams
    mu: Array
    initial_energy: Array
    infer_energy: Array
    learn_energy: Array


@partial(jax.jit, static_argnames=("optimizer", "num_rounds", "infer_steps", "learn_steps", "auto_step",
                                   "report_every"))
def _fit_jit(params, x, mu0, step_size, optimizer, num_rounds, infer_steps, learn_steps, auto_step,
             report_every=0):
    def learn(carry, _):
        p, state, mu = carry
        g = _grad_params(p, x, mu)
        updates, state = optimizer.update(g, state, p)
        p = jax.tree.map(jnp.add, p, updates)
        return (p, state, mu), _energy(p, x, mu)

    def round_(carry, i):
        p, state, mu = carry
        _progress.tick(i, num_rounds, report_every)
        eta = 1.0 / _lipschitz(p, x) if auto_step else step_size
        mu, inf_trace = _infer_scan(p, x, mu, eta, infer_steps)
        (p, state, mu), learn_trace = jax.lax.scan(learn, (p, state, mu), None, length=learn_steps)
        return (p, state, mu), (inf_trace[1:], learn_trace)

    state = optimizer.init(params)
    (p, _, mu), (inf, lrn) = jax.lax.scan(round_, (params, state, mu0), jnp.arange(num_rounds))
    return MixtureFit(params=p, mu=mu, initial_energy=_energy(params, x, mu0),
                      infer_energy=inf, learn_energy=lrn)


def mixture_fit(
    params: MLPParams,
    x,
    mu0,
    *,
    optimizer: Any,
    num_rounds: int,
    infer_steps: int,
    learn_steps: int,
    step_size: float | None = None,
    progress: bool = False,
) -> MixtureFit:
    r"""Learn :math:`\phi` and infer :math:`\mu` by alternating descent on eq. (18).

    Each of ``num_rounds`` rounds runs ``infer_steps`` gradient steps on
    :math:`\mu` with :math:`\phi` fixed (as :func:`mixture_infer`), then
    ``learn_steps`` optimizer steps on :math:`\phi` with :math:`\mu` fixed,
    using the analytic :func:`mixture_grad_params`. This is the EM-like
    scheme of §9 of the seed with gradient (not closed-form) M-steps. Jitted,
    with nested ``lax.scan``.

    Args:
      params: initial :class:`MLPParams`.
      x: ``(N, d)`` data.
      mu0: ``(K, m)`` initial latents.
      optimizer: an optax ``GradientTransformation`` (anything with
        ``init(params)`` and ``update(grads, state, params)``), e.g.
        ``optax.adam(1e-2)``. It must be hashable (optax's are): it is a
        static argument of the jitted driver.
      num_rounds, infer_steps, learn_steps: integers ``>= 1``.
      step_size: inference step; ``None`` uses :math:`1/L(\phi)` from
        :func:`mixture_mu_lipschitz`, recomputed at the start of every
        round for the current :math:`\phi`, so every inference phase is
        monotone. (Optimizer steps on :math:`\phi` carry no such guarantee.)
      progress: show a ``tqdm.auto`` bar of the rounds (the compiled loop
        reports to the host every 1/50 of the run; with the bar, results agree
        with ``progress=False`` to round-off, see :mod:`lse_energy._progress`).

    Returns:
      :class:`MixtureFit`.

    Raises:
      ValueError: on bad arguments, or when the run diverged (a non-finite
        parameter, latent or energy; the message names the first round).
    """
    params, x, mu0 = _check_mixture(params, x, mu0, "mu0")
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise ValueError("optimizer must be an optax GradientTransformation (with init and update)")
    num_rounds = _check_int("num_rounds", num_rounds, 1)
    infer_steps = _check_int("infer_steps", infer_steps, 1)
    learn_steps = _check_int("learn_steps", learn_steps, 1)
    step_size = _check_step(step_size)
    eta = jnp.asarray(1.0 if step_size is None else step_size, x.dtype)
    with _progress.bar(progress, num_rounds, "predictive-coding mixture fit (rounds)") as every:
        out = jax.block_until_ready(_fit_jit(params, x, mu0, eta, optimizer, num_rounds, infer_steps,
                                             learn_steps, step_size is None, every))
    core.require_finite("mixture_fit", out, steps=out.learn_energy,
                        hint="lower the optimizer's learning rate or step_size (None picks a safe one)")
    return out


class MixtureData(NamedTuple):
    r"""Data drawn by :func:`mixture_sample`.

    Attributes:
      x: ``(K * n, d)`` observations :math:`x = f_{\mathrm{teacher}}(z) + \sigma\xi`.
      labels: ``(K * n,)`` integer cluster of each observation.
      latent_centres: ``(K, m)`` latent cluster centres :math:`c_k`.
      z: ``(K * n, m)`` latent points :math:`z = c_k + \tau\epsilon`.
    """

    x: Array
    labels: Array
    latent_centres: Array
    z: Array


def mixture_sample(
    teacher: MLPParams,
    num_clusters: int,
    points_per_cluster: int,
    *,
    key: Array,
    centre_scale: float = 2.0,
    latent_noise: float = 0.1,
    obs_noise: float = 0.1,
    latent_centres=None,
) -> MixtureData:
    r"""Sample data from a few latent causes through a teacher network.

    .. math:: c_k \sim \mathcal{N}(0, s_c^2 I_m), \quad
              z_{kj} = c_k + \tau\,\epsilon_{kj}, \quad
              x_{kj} = f_{\mathrm{teacher}}(z_{kj}) + \sigma\,\xi_{kj},

    with standard normal :math:`\epsilon, \xi`.

    Args:
      teacher: :class:`MLPParams` of the generating network.
      num_clusters: ``K >= 1``.
      points_per_cluster: ``n >= 1``.
      key: PRNG key (keyword-only).
      centre_scale: :math:`s_c > 0`.
      latent_noise: :math:`\tau \ge 0`.
      obs_noise: :math:`\sigma \ge 0`.
      latent_centres: optional ``(K, m)`` centres :math:`c_k` to use instead
        of sampling them (then ``centre_scale`` is unused).

    Returns:
      :class:`MixtureData`, points ordered cluster by cluster.
    """
    teacher = _check_params(teacher)
    K = _check_int("num_clusters", num_clusters, 1)
    n = _check_int("points_per_cluster", points_per_cluster, 1)
    if not (np.isfinite(centre_scale) and centre_scale > 0):
        raise ValueError(f"centre_scale must be finite and > 0; got {centre_scale!r}")
    for name, v in (("latent_noise", latent_noise), ("obs_noise", obs_noise)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be finite and >= 0; got {v!r}")
    m, d = teacher.W1.shape[1], teacher.W2.shape[0]
    dtype = teacher.W1.dtype
    kc, kz, kx = jax.random.split(key, 3)
    if latent_centres is None:
        centres = centre_scale * jax.random.normal(kc, (K, m), dtype)
    else:
        centres = _check_matrix("latent_centres", latent_centres, m, "m = teacher.W1.shape[1]")
        if centres.shape[0] != K:
            raise ValueError(
                f"latent_centres must have num_clusters = {K} rows; got shape {centres.shape}"
            )
    labels = jnp.repeat(jnp.arange(K), n)
    z = centres[labels] + latent_noise * jax.random.normal(kz, (K * n, m), dtype)
    x = _mlp(teacher, z) + obs_noise * jax.random.normal(kx, (K * n, d), dtype)
    return MixtureData(x=x, labels=labels, latent_centres=centres, z=z)


# ===========================================================================
# Hierarchical predictive coding networks (lecture notes §29; Singh & Buckley
# 2023 §4.4). Prefix ``pcn_``.
# ===========================================================================
#
# A chain of L layers of value nodes x^1, ..., x^L. Layer l+1 is predicted from
# layer l by mu^{l+1} = W^l f(x^l) + b^l with f = tanh (the notes' "W f(x)"
# form, sigma(x^{i+1})^T M^i + beta^i), and each predicted layer carries a
# precision-weighted error node eps^l = pi_l (x^l - mu^l). The energy is
#
#     F = 1/2 sum_{l=2}^L pi_l ||x^l - mu^l||^2  (+ 1/2 pi_1 ||x^1 - m||^2),
#
# the K = 1 (one parent per child) limit of the log-sum-exp energy: every
# layer is a child with the single parent "the layer below", so
# -ln sum_p exp sim = -sim and the softmax is identically 1.

__all__ += [
    "PCNParams",
    "pcn_init",
    "pcn_forward",
    "pcn_predictions",
    "pcn_errors",
    "pcn_sim",
    "pcn_energy",
    "pcn_grad_x",
    "pcn_grad_params",
    "PCNInference",
    "pcn_infer",
    "PCNTrain",
    "pcn_train",
    "pcn_classify",
    "pcn_generate",
]


class PCNParams(NamedTuple):
    r"""Weights of a hierarchical predictive coding network with layer sizes :math:`n_1, \dots, n_L`.

    Layer :math:`l+1` is predicted from layer :math:`l`
    (:math:`l = 1, \dots, L-1`) as

    .. math:: \mu^{l+1} = W^l f(x^l) + b^l, \qquad f = \tanh,

    the "weights times nonlinearity" form of §29 of the lecture notes
    (:math:`\mu^i = \sigma(x^{i+1})^\top M^i + \beta^i` there, with the layer
    numbering reversed, see :func:`pcn_energy`). An optional Gaussian prior
    :math:`\mathcal{N}(m, \pi_1^{-1} I)` on the root layer :math:`x^1` has
    mean ``prior_mean``; it only matters when :math:`x^1` is free
    (generation) and its precision :math:`\pi_1 > 0`.

    Attributes:
      weights: tuple of ``L - 1`` arrays, ``weights[l-1]`` is :math:`W^l`, shape ``(n_{l+1}, n_l)``.
      biases: tuple of ``L - 1`` arrays, ``biases[l-1]`` is :math:`b^l`, shape ``(n_{l+1},)``.
      prior_mean: ``(n_1,)`` the prior mean :math:`m` of the root layer.

    The layer sizes are static: they are the shapes of these arrays.
    """

    weights: tuple
    biases: tuple
    prior_mean: Array


def _pcn_sizes(params: PCNParams) -> tuple:
    return (params.prior_mean.shape[-1],) + tuple(W.shape[0] for W in params.weights)


def _check_pcn_params(params) -> PCNParams:
    if not isinstance(params, PCNParams):
        raise ValueError(f"params must be PCNParams; got {type(params).__name__}")
    Ws = tuple(jnp.asarray(W) for W in params.weights)
    bs = tuple(jnp.asarray(b) for b in params.biases)
    m = jnp.asarray(params.prior_mean)
    if len(Ws) < 1 or len(Ws) != len(bs):
        raise ValueError(
            f"params must hold L - 1 >= 1 weights and as many biases; got {len(Ws)} weights "
            f"and {len(bs)} biases"
        )
    if m.ndim != 1:
        raise ValueError(f"params.prior_mean must have shape (n_1,); got {m.shape}")
    n = m.shape[0]
    for l, (W, b) in enumerate(zip(Ws, bs), start=1):
        if W.ndim != 2 or W.shape[1] != n or b.shape != (W.shape[0],):
            raise ValueError(
                f"params.weights[{l - 1}] must have shape (n_{l + 1}, n_{l}) with n_{l} = {n} and "
                f"params.biases[{l - 1}] shape (n_{l + 1},); got {W.shape} and {b.shape}"
            )
        n = W.shape[0]
    for name, a in [("prior_mean", m)] + [(f"weights[{i}]", W) for i, W in enumerate(Ws)] + [
        (f"biases[{i}]", b) for i, b in enumerate(bs)
    ]:
        _floating_finite(f"params.{name}", a)
    return PCNParams(weights=Ws, biases=bs, prior_mean=m)


def _check_values(xs, sizes, name="xs") -> tuple:
    if not isinstance(xs, (tuple, list)) or len(xs) != len(sizes):
        raise ValueError(
            f"{name} must be a tuple of L = {len(sizes)} arrays (one per layer); got "
            f"{type(xs).__name__} of length {len(xs) if isinstance(xs, (tuple, list)) else '?'}"
        )
    xs = tuple(jnp.asarray(x) for x in xs)
    batch = xs[0].shape[:-1] if xs[0].ndim >= 1 else None
    for l, (x, n) in enumerate(zip(xs, sizes), start=1):
        if x.ndim < 1 or x.shape[-1] != n or x.shape[:-1] != batch:
            raise ValueError(
                f"{name}[{l - 1}] (layer {l}) must have shape {batch} + ({n},); got {x.shape}"
            )
        _floating_finite(f"{name}[{l - 1}]", x)
    return xs


def _check_precisions(precisions, L, dtype) -> Array:
    p = jnp.asarray(precisions)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        raise ValueError(f"precisions must be floating point; got {p.dtype}")
    p = p.astype(dtype)
    if p.shape != (L,):
        raise ValueError(f"precisions must have shape (L,) = ({L},); got {p.shape}")
    if _is_concrete(p):
        v = np.asarray(p)
        if not (np.all(np.isfinite(v)) and v[0] >= 0 and np.all(v[1:] > 0)):
            raise ValueError(
                "precisions must be finite with precisions[0] >= 0 (root prior) and "
                f"precisions[1:] > 0; got {v}"
            )
    return p


def _default_precisions(precisions, L, dtype):
    if precisions is None:
        return jnp.concatenate([jnp.zeros((1,), dtype), jnp.ones((L - 1,), dtype)])
    return _check_precisions(precisions, L, dtype)


def pcn_init(sizes, *, key: Array, weight_scale: float = 1.0) -> PCNParams:
    r"""Random :class:`PCNParams` for layer sizes ``sizes = (n_1, ..., n_L)``.

    :math:`W^l \sim \mathcal{N}(0, s^2/n_l)` (LeCun normal times
    ``weight_scale``), :math:`b^l = 0`, :math:`m = 0`, in the default float
    dtype (float64 when ``jax_enable_x64`` is on).

    Args:
      sizes: sequence of ``L >= 2`` integers ``>= 1`` (static).
      key: PRNG key (keyword-only).
      weight_scale: ``s > 0``.

    Returns:
      :class:`PCNParams`.
    """
    sizes = tuple(sizes) if isinstance(sizes, (tuple, list)) else sizes
    if not isinstance(sizes, tuple) or len(sizes) < 2:
        raise ValueError(f"sizes must be a sequence of L >= 2 layer sizes; got {sizes!r}")
    for n in sizes:
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ValueError(f"sizes must hold integers >= 1; got {sizes!r}")
    if not (np.isfinite(weight_scale) and weight_scale > 0):
        raise ValueError(f"weight_scale must be finite and > 0; got {weight_scale!r}")
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    keys = jax.random.split(key, len(sizes) - 1)
    Ws = tuple(
        weight_scale / np.sqrt(sizes[l]) * jax.random.normal(keys[l], (sizes[l + 1], sizes[l]), dtype)
        for l in range(len(sizes) - 1)
    )
    bs = tuple(jnp.zeros((sizes[l + 1],), dtype) for l in range(len(sizes) - 1))
    return PCNParams(weights=Ws, biases=bs, prior_mean=jnp.zeros((sizes[0],), dtype))


def _pcn_predict(W, b, x):
    return jnp.tanh(x) @ W.T + b


def _pcn_forward(params, x1):
    xs = [x1]
    for W, b in zip(params.weights, params.biases):
        xs.append(_pcn_predict(W, b, xs[-1]))
    return tuple(xs)


def pcn_forward(params: PCNParams, x) -> tuple:
    r"""The feed-forward pass :math:`x^1 = x`, :math:`x^{l+1} = W^l \tanh(x^l) + b^l`.

    This is the network whose prediction errors are all zero; it is the
    unique equilibrium of inference with only :math:`x^1` clamped (see
    :func:`pcn_classify`).

    Args:
      params: :class:`PCNParams`.
      x: ``(..., n_1)``.

    Returns:
      tuple of ``L`` arrays ``(..., n_l)``.
    """
    params = _check_pcn_params(params)
    n1 = _pcn_sizes(params)[0]
    x = jnp.asarray(x)
    if x.ndim < 1 or x.shape[-1] != n1:
        raise ValueError(f"x must have shape (..., n_1) with n_1 = {n1}; got {x.shape}")
    return _pcn_forward(params, _floating_finite("x", x))


def _pcn_predictions(params, xs):
    return tuple(_pcn_predict(W, b, x) for W, b, x in zip(params.weights, params.biases, xs[:-1]))


def pcn_predictions(params: PCNParams, xs) -> tuple:
    r"""Predictions :math:`\mu^{l+1} = W^l \tanh(x^l) + b^l`, :math:`l = 1, \dots, L-1` (§29).

    Args:
      params: :class:`PCNParams`.
      xs: tuple of ``L`` value-node arrays ``(..., n_l)`` (common batch shape).

    Returns:
      tuple of ``L - 1`` arrays; entry ``l-1`` is :math:`\mu^{l+1}`, ``(..., n_{l+1})``.
    """
    params = _check_pcn_params(params)
    xs = _check_values(xs, _pcn_sizes(params))
    return _pcn_predictions(params, xs)


def _pcn_errors(params, xs, prec):
    mus = _pcn_predictions(params, xs)
    first = prec[0] * (xs[0] - params.prior_mean)
    return (first,) + tuple(prec[l + 1] * (xs[l + 1] - mus[l]) for l in range(len(mus)))


def pcn_errors(params: PCNParams, xs, precisions=None) -> tuple:
    r"""Error nodes :math:`\varepsilon^l = \pi_l (x^l - \mu^l)` (§29.1.1).

    §29.1.1 gives the error-node dynamics :math:`\tau\,\dot\varepsilon^l = x^l
    - \mu^l - v^l \varepsilon^l`, whose equilibrium is :math:`\varepsilon^l =
    (x^l - \mu^l)/v^l`; with :math:`v^l = 1/\pi_l` the *variance* this is the
    precision-weighted error returned here. For the root layer
    :math:`\mu^1 = m` (``params.prior_mean``) and :math:`\varepsilon^1 =
    \pi_1(x^1 - m)`, which is zero when :math:`\pi_1 = 0`.

    Args:
      params: :class:`PCNParams`.
      xs: tuple of ``L`` floating-point arrays ``(..., n_l)`` (an integer or
        boolean layer raises ``ValueError``).
      precisions: ``(L,)`` floating-point scalars :math:`(\pi_1, \dots, \pi_L)`, with
        :math:`\pi_1 \ge 0` and :math:`\pi_l > 0` for :math:`l \ge 2`;
        ``None`` means :math:`(0, 1, \dots, 1)`. An integer array raises
        ``ValueError``.

    Returns:
      tuple of ``L`` arrays ``(..., n_l)``.
    """
    params = _check_pcn_params(params)
    xs = _check_values(xs, _pcn_sizes(params))
    prec = _default_precisions(precisions, len(xs), xs[0].dtype)
    return _pcn_errors(params, xs, prec)


def _pcn_sims(params, xs, prec):
    """(..., L) similarities -1/2 pi_l ||x^l - mu^l||^2 of each layer to its one parent."""
    mus = (params.prior_mean,) + _pcn_predictions(params, xs)
    return jnp.stack(
        [-0.5 * prec[l] * jnp.sum((x - mu) ** 2, axis=-1) for l, (x, mu) in enumerate(zip(xs, mus))],
        axis=-1,
    )


def pcn_sim(params: PCNParams, xs, precisions=None) -> Array:
    r"""Per-layer similarities :math:`\mathrm{sim}(x^l, x^{l-1}) = -\tfrac12 \pi_l \|x^l - \mu^l\|^2`.

    Each layer :math:`l \ge 2` is a child whose *single* parent is layer
    :math:`l-1`; the root's similarity is to its prior mean.

    Returns:
      ``(..., L)``.
    """
    params = _check_pcn_params(params)
    xs = _check_values(xs, _pcn_sizes(params))
    prec = _default_precisions(precisions, len(xs), xs[0].dtype)
    return _pcn_sims(params, xs, prec)


def _pcn_energy(params, xs, prec):
    return core.energy(_pcn_sims(params, xs, prec)[..., None])


def pcn_energy(params: PCNParams, xs, precisions=None) -> Array:
    r"""The predictive-coding free energy of §29.1.3,

    .. math:: F = \frac12 \sum_{l=2}^{L} \pi_l \,\|x^l - \mu^l\|^2
                  + \frac12 \pi_1 \|x^1 - m\|^2
                = \sum_{l} \frac{\|\varepsilon^l\|^2}{2\pi_l},

    summed over any leading batch axes. It is built on
    :func:`lse_energy.core.energy` with one parent per child: the similarity
    matrix is ``(..., L, 1)``, so :math:`-\ln\sum_p \exp\mathrm{sim} =
    -\mathrm{sim}` and the softmax weight is identically 1 (the
    :math:`K = 1` limit of the log-sum-exp energy).

    **Conventions versus the notes.** The notes number the layers so that
    :math:`\mu^i` is predicted from :math:`x^{i+1}` (a generative model of
    :math:`x^1 = X` given :math:`x^L = Y`); here layer :math:`l+1` is
    predicted from layer :math:`l`, so that with :math:`x^1 = X` and
    :math:`x^L = Y` the predictions run from the data to the label and the
    free-output equilibrium is the feed-forward classifier (the
    discriminative orientation of Whittington & Bogacz 2017). The notes'
    model is the same chain with the sizes reversed. The notes write
    :math:`F = \frac12\sum\|\varepsilon^i\|^2` with
    :math:`\varepsilon^i = (x^i - \mu^i)/v^i` and call :math:`v^i` both a
    standard deviation (the Gaussian) and a variance (the error-node
    dynamics); the two agree only at unit precision. Here :math:`\pi_l =
    1/\mathrm{variance}`, :math:`\varepsilon^l = \pi_l(x^l - \mu^l)` (so
    that :math:`\partial F/\partial x^l = \varepsilon^l - \dots`, as in the
    notes), and :math:`F` is the negative log-likelihood up to a constant.

    Args:
      params: :class:`PCNParams`.
      xs: tuple of ``L`` arrays ``(..., n_l)``.
      precisions: ``(L,)``, see :func:`pcn_errors`.

    Returns:
      Scalar :math:`F \ge 0`.
    """
    params = _check_pcn_params(params)
    xs = _check_values(xs, _pcn_sizes(params))
    prec = _default_precisions(precisions, len(xs), xs[0].dtype)
    return _pcn_energy(params, xs, prec)


def _pcn_grad_x(params, xs, prec):
    eps = _pcn_errors(params, xs, prec)
    grads = []
    for l in range(len(xs)):
        g = eps[l]
        if l + 1 < len(xs):
            W = params.weights[l]
            g = g - (1.0 - jnp.tanh(xs[l]) ** 2) * (eps[l + 1] @ W)
        grads.append(g)
    return tuple(grads)


def pcn_grad_x(params: PCNParams, xs, precisions=None) -> tuple:
    r""":math:`\partial F/\partial x^l` for every layer, in terms of the error nodes (§29.1.3–4).

    .. math:: \frac{\partial F}{\partial x^l}
              = \varepsilon^l - f'(x^l) \odot \big(W^{l\top} \varepsilon^{l+1}\big),
              \qquad f'(x) = 1 - \tanh^2 x,

    with no second term for the top layer :math:`l = L`. The inference
    dynamics are :math:`\dot x^l = -\partial F/\partial x^l`: a value node is
    pulled toward its own prediction and pushed to explain the error it
    causes one layer up, using only the error nodes adjacent to it.

    **Corrections to the notes.** §29.1.3 writes this as
    :math:`\nabla_{\varepsilon^i} F` and §29.1.4 as
    :math:`\tau\,d\varepsilon^i/dt`; both are the gradient with respect to
    (and the dynamics of) the *value* node :math:`x^i`. In the notes' row
    convention (:math:`\mu^{i-1} = \sigma(x^i)^\top M^{i-1} + \beta^{i-1}`,
    :math:`W = M^\top`) the feedback term must be
    :math:`\varepsilon^{i-1} (M^{i-1})^\top = \varepsilon^{i-1} W^{i-1}`;
    the notes print :math:`\varepsilon^{i-1}(W^{i-1})^\top` (= the
    untransposed :math:`\varepsilon^{i-1} M^{i-1}`, also printed in §29.1.4
    with index :math:`i`), which has the wrong shape unless the layers have
    equal sizes and the wrong value then. The code uses the transpose.

    Args:
      params: :class:`PCNParams`.
      xs: tuple of ``L`` arrays ``(..., n_l)``.
      precisions: ``(L,)``, see :func:`pcn_errors`.

    Returns:
      tuple of ``L`` arrays ``(..., n_l)`` (the gradient also for nodes that
      a driver keeps clamped).
    """
    params = _check_pcn_params(params)
    xs = _check_values(xs, _pcn_sizes(params))
    prec = _default_precisions(precisions, len(xs), xs[0].dtype)
    return _pcn_grad_x(params, xs, prec)


def _pcn_grad_params(params, xs, prec):
    eps = _pcn_errors(params, xs, prec)
    batch = "".join("abcdefgh"[: xs[0].ndim - 1])
    gW = tuple(
        -jnp.einsum(f"{batch}i,{batch}j->ij", eps[l + 1], jnp.tanh(xs[l])) for l in range(len(xs) - 1)
    )
    gb = tuple(-jnp.sum(eps[l + 1].reshape(-1, eps[l + 1].shape[-1]), axis=0) for l in range(len(xs) - 1))
    gm = -jnp.sum(eps[0].reshape(-1, eps[0].shape[-1]), axis=0)
    return PCNParams(weights=gW, biases=gb, prior_mean=gm)


def pcn_grad_params(params: PCNParams, xs, precisions=None) -> PCNParams:
    r""":math:`\partial F/\partial\theta`: the local, Hebbian learning rules of §29.1.4.

    .. math:: -\frac{\partial F}{\partial W^l} = \varepsilon^{l+1} f(x^l)^\top, \qquad
              -\frac{\partial F}{\partial b^l} = \varepsilon^{l+1}, \qquad
              -\frac{\partial F}{\partial m} = \varepsilon^1,

    summed over the leading batch axes. The weight change is the product of
    the post-synaptic error and the pre-synaptic rate :math:`f(x^l)`
    (the notes' :math:`dM^i/dt = \sigma(x^{i+1})^\top\varepsilon^i`, whose
    sign is right).

    Args:
      params: :class:`PCNParams`.
      xs: tuple of ``L`` arrays ``(..., n_l)``.
      precisions: ``(L,)``, see :func:`pcn_errors`.

    Returns:
      :class:`PCNParams` holding :math:`\partial F/\partial W^l`,
      :math:`\partial F/\partial b^l`, :math:`\partial F/\partial m`.
    """
    params = _check_pcn_params(params)
    xs = _check_values(xs, _pcn_sizes(params))
    prec = _default_precisions(precisions, len(xs), xs[0].dtype)
    return _pcn_grad_params(params, xs, prec)


# --- inference: descent on F with some layers clamped -----------------------


class PCNInference(NamedTuple):
    r"""Result of :func:`pcn_infer`.

    Attributes:
      xs: tuple of ``L`` arrays ``(..., n_l)``, the value nodes after the last step.
      energy: ``(num_steps + 1,)`` :math:`F` (summed over the batch) at the
        start and after each step.
    """

    xs: tuple
    energy: Array


def _pcn_infer_single(params, xs, prec, eta, clamp, num_steps):
    """Inference for one example, xs[l]: (n_l,)."""
    free = tuple(not c for c in clamp)

    def step(xs, _):
        g = _pcn_grad_x(params, xs, prec)
        xs = tuple(x - eta * gl if f else x for x, gl, f in zip(xs, g, free))
        return xs, _pcn_energy(params, xs, prec)

    xs_end, trace = jax.lax.scan(step, xs, None, length=num_steps)
    return xs_end, jnp.concatenate([_pcn_energy(params, xs, prec)[None], trace])


def _pcn_infer_batch(params, xs, prec, eta, clamp, num_steps):
    """vmap of the one-example inference over the leading axis; energies summed."""
    xs_end, traces = jax.vmap(_pcn_infer_single, in_axes=(None, 0, None, None, None, None))(
        params, xs, prec, eta, clamp, num_steps
    )
    return xs_end, jnp.sum(traces, axis=0)


@partial(jax.jit, static_argnames=("clamp", "num_steps"))
def _pcn_infer_jit(params, xs, prec, eta, clamp, num_steps):
    batch = xs[0].shape[:-1]
    flat = tuple(x.reshape((-1, x.shape[-1])) for x in xs)
    xs_end, trace = _pcn_infer_batch(params, flat, prec, eta, clamp, num_steps)
    return PCNInference(xs=tuple(x.reshape(batch + x.shape[-1:]) for x in xs_end), energy=trace)


def _pcn_check_clamp(clamp, L) -> tuple:
    if not isinstance(clamp, (tuple, list)) or len(clamp) != L or not all(
        isinstance(c, (bool, np.bool_)) for c in clamp
    ):
        raise ValueError(f"clamp must be a tuple of L = {L} booleans (True = clamped); got {clamp!r}")
    return tuple(bool(c) for c in clamp)


def _pcn_check_step(step_size) -> float:
    if not (np.ndim(step_size) == 0 and np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a finite scalar > 0; got {step_size!r}")
    return float(step_size)


def pcn_infer(params: PCNParams, xs0, precisions=None, *, clamp, num_steps: int,
              step_size: float = 0.1) -> PCNInference:
    r"""Inference: gradient descent on :math:`F` in the free value nodes (§29.1.4).

    .. math:: x^l \leftarrow x^l - \eta\,\Big(\varepsilon^l - f'(x^l)\odot
              W^{l\top}\varepsilon^{l+1}\Big) \quad \text{for every free layer } l,

    (the Euler discretisation of :math:`\tau\dot x^l = -\partial F/\partial
    x^l` with :math:`\eta = dt/\tau`), while clamped layers keep their
    initial values exactly. Which layers are clamped selects the mode of
    §29.1.4: ``(True, False, ..., True)`` is training, ``(False, ...,
    False, True)`` generation and ``(True, False, ..., False)`` inference.
    Examples of a batch are independent; the one-example ``lax.scan`` is
    ``jax.vmap``-ed over the batch. Jitted.

    Args:
      params: :class:`PCNParams` (fixed).
      xs0: tuple of ``L`` initial value arrays ``(..., n_l)``; clamped layers
        hold the clamped values.
      precisions: ``(L,)``, see :func:`pcn_errors`.
      clamp: tuple of ``L`` booleans (static).
      num_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`. For a small enough step :math:`F` does
        not increase (descent lemma).

    Returns:
      :class:`PCNInference`.
    """
    params = _check_pcn_params(params)
    xs0 = _check_values(xs0, _pcn_sizes(params), name="xs0")
    L = len(xs0)
    prec = _default_precisions(precisions, L, xs0[0].dtype)
    clamp = _pcn_check_clamp(clamp, L)
    num_steps = _check_int("num_steps", num_steps, 1)
    eta = jnp.asarray(_pcn_check_step(step_size), xs0[0].dtype)
    return _pcn_infer_jit(params, xs0, prec, eta, clamp, num_steps)


def _pcn_check_data(params, x, y):
    sizes = _pcn_sizes(params)
    x = _check_matrix("x", x, sizes[0], "n_1")
    y = _check_matrix("y", y, sizes[-1], "n_L")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of rows; got {x.shape[0]} and {y.shape[0]}")
    return x, y


# --- training: clamp x^1 = X and x^L = Y, relax, then a Hebbian step ---------


class PCNTrain(NamedTuple):
    r"""Result of :func:`pcn_train`.

    Attributes:
      params: trained :class:`PCNParams`.
      opt_state: optimizer state, to continue training with another call.
      energy: ``(num_epochs, num_batches)`` mean :math:`F` per example at
        the end of each minibatch's inference phase (before its weight step).
      loss: ``(num_epochs, num_batches)`` mean squared output error
        :math:`\frac12\|Y - \hat y\|^2` of the feed-forward pass on each
        minibatch before its weight step.
    """

    params: PCNParams
    opt_state: Any
    energy: Array
    loss: Array


def _pcn_train_batch(params, opt_state, xb, yb, prec, eta, optimizer, infer_steps):
    L = len(params.weights) + 1
    xs0 = _pcn_forward(params, xb)
    loss = 0.5 * jnp.mean(jnp.sum((yb - xs0[-1]) ** 2, axis=-1))
    xs0 = xs0[:-1] + (yb,)
    clamp = (True,) + (False,) * (L - 2) + (True,)
    xs, _ = _pcn_infer_batch(params, xs0, prec, eta, clamp, infer_steps)
    grads = jax.tree.map(lambda g: g / xb.shape[0], _pcn_grad_params(params, xs, prec))
    energy = _pcn_energy(params, xs, prec) / xb.shape[0]  # at the equilibrium, before the weight step
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = jax.tree.map(jnp.add, params, updates)
    return params, opt_state, energy, loss


@partial(jax.jit, static_argnames=("optimizer", "num_epochs", "batch_size", "infer_steps"))
def _pcn_train_jit(params, opt_state, x, y, prec, eta, key, optimizer, num_epochs, batch_size,
                   infer_steps):
    n_batches = x.shape[0] // batch_size

    def epoch(carry, k):
        p, s = carry
        perm = jax.random.permutation(k, x.shape[0])[: n_batches * batch_size]
        xb = x[perm].reshape(n_batches, batch_size, -1)
        yb = y[perm].reshape(n_batches, batch_size, -1)

        def batch(carry, data):
            p, s = carry
            p, s, F, loss = _pcn_train_batch(p, s, data[0], data[1], prec, eta, optimizer,
                                             infer_steps)
            return (p, s), (F, loss)

        (p, s), (F, loss) = jax.lax.scan(batch, (p, s), (xb, yb))
        return (p, s), (F, loss)

    keys = jax.random.split(key, num_epochs)
    (p, s), (F, loss) = jax.lax.scan(epoch, (params, opt_state), keys)
    return PCNTrain(params=p, opt_state=s, energy=F, loss=loss)


def pcn_train(params: PCNParams, x, y, precisions=None, *, key: Array, optimizer: Any,
              num_epochs: int, batch_size: int, infer_steps: int, step_size: float = 0.1,
              opt_state=None) -> PCNTrain:
    r"""Training mode of §29.1.4: clamp :math:`x^1 = X`, :math:`x^L = Y`, relax, learn.

    For each minibatch (shuffled with ``key`` every epoch; a last partial
    batch is dropped): the value nodes start at the feed-forward pass
    :func:`pcn_forward` of :math:`X` with the top replaced by :math:`Y`;
    ``infer_steps`` inference steps (:func:`pcn_infer`, vmapped over the
    batch) relax the hidden layers toward equilibrium; then one optimizer
    step uses the Hebbian gradient :func:`pcn_grad_params`, averaged over
    the batch (plain SGD with rate :math:`\kappa` is
    :math:`\Delta W^l = \kappa\,\overline{\varepsilon^{l+1} f(x^l)^\top}`).
    Jitted, with nested ``lax.scan``.

    Args:
      params: initial :class:`PCNParams`.
      x: ``(N, n_1)`` inputs (clamped at the bottom).
      y: ``(N, n_L)`` targets (clamped at the top), e.g. one-hot labels.
      precisions: ``(L,)``, see :func:`pcn_errors`.
      key: PRNG key for the shuffling (keyword-only).
      optimizer: an optax ``GradientTransformation`` (hashable; static).
      num_epochs, infer_steps: integers ``>= 1``.
      batch_size: integer in ``[1, N]``.
      step_size: inference step :math:`\eta > 0`.
      opt_state: optimizer state from a previous call, or ``None`` to
        initialise it.

    Returns:
      :class:`PCNTrain`.

    Raises:
      ValueError: on bad arguments, or when training diverged (non-finite
        parameters, energies or losses; the message names the first epoch).
    """
    params = _check_pcn_params(params)
    x, y = _pcn_check_data(params, x, y)
    prec = _default_precisions(precisions, len(params.weights) + 1, x.dtype)
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise ValueError("optimizer must be an optax GradientTransformation (with init and update)")
    num_epochs = _check_int("num_epochs", num_epochs, 1)
    infer_steps = _check_int("infer_steps", infer_steps, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    if batch_size > x.shape[0]:
        raise ValueError(f"batch_size must be <= N = {x.shape[0]}; got {batch_size}")
    eta = jnp.asarray(_pcn_check_step(step_size), x.dtype)
    if opt_state is None:
        opt_state = optimizer.init(params)
    out = _pcn_train_jit(params, opt_state, x, y, prec, eta, key, optimizer, num_epochs,
                         batch_size, infer_steps)
    core.require_finite("pcn_train", out, steps=out.energy,
                        hint="lower the optimizer's learning rate or the inference step_size")
    return out


# --- the other two modes ---------------------------------------------------------


def pcn_classify(params: PCNParams, x, precisions=None, *, num_steps: int, step_size: float = 0.1,
                 xs0=None) -> tuple:
    r"""Inference mode of §29.1.4: clamp :math:`x^1 = X`, relax, read :math:`\arg\max_j x^L_j`.

    The free layers start at zero (or at ``xs0``). With only the bottom
    clamped, the feed-forward pass is the unique stationary point of
    :math:`F` (all errors vanish there, and :math:`\partial F/\partial x^L =
    \varepsilon^L = 0` forces every :math:`\varepsilon^l = 0` downward), so
    enough steps reproduce :func:`pcn_forward`.

    Args:
      params: :class:`PCNParams`.
      x: ``(N, n_1)``.
      precisions: ``(L,)``, see :func:`pcn_errors`.
      num_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`.
      xs0: optional tuple of initial values (its first entry is replaced by ``x``).

    Returns:
      ``(labels, result)``: ``(N,)`` integer argmax of the top layer and the
      :class:`PCNInference`.
    """
    params = _check_pcn_params(params)
    sizes = _pcn_sizes(params)
    x = _check_matrix("x", x, sizes[0], "n_1")
    if xs0 is None:
        xs0 = (x,) + tuple(jnp.zeros((x.shape[0], n), x.dtype) for n in sizes[1:])
    else:
        xs0 = (x,) + tuple(_check_values(xs0, sizes, name="xs0")[1:])
    clamp = (True,) + (False,) * (len(sizes) - 1)
    res = pcn_infer(params, xs0, precisions, clamp=clamp, num_steps=num_steps, step_size=step_size)
    return jnp.argmax(res.xs[-1], axis=-1), res


def pcn_generate(params: PCNParams, y, precisions=None, *, num_steps: int,
                 step_size: float = 0.1) -> PCNInference:
    r"""Generation mode of §29.1.4: clamp :math:`x^L = Y`, relax, read :math:`x^1`.

    The free layers start at the feed-forward pass of the prior mean
    :math:`m` (``params.prior_mean``). Without a root prior
    (:math:`\pi_1 = 0`) the minimisers of :math:`F` in :math:`x^{1:L-1}`
    form a whole manifold whenever :math:`n_1 > n_L` (any :math:`x^1` whose
    feed-forward output is :math:`Y`), and the result depends on the
    starting point; a weak prior :math:`\pi_1 > 0` selects the one closest
    to :math:`m`.

    Args:
      params: :class:`PCNParams`.
      y: ``(N, n_L)`` clamped top values (e.g. one-hot labels).
      precisions: ``(L,)``, see :func:`pcn_errors`.
      num_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`.

    Returns:
      :class:`PCNInference`; ``result.xs[0]`` is the generated bottom layer.
    """
    params = _check_pcn_params(params)
    sizes = _pcn_sizes(params)
    y = _check_matrix("y", y, sizes[-1], "n_L")
    start = _pcn_forward(params, jnp.broadcast_to(params.prior_mean, (y.shape[0], sizes[0])))
    xs0 = start[:-1] + (y,)
    clamp = (False,) * (len(sizes) - 1) + (True,)
    return pcn_infer(params, xs0, precisions, clamp=clamp, num_steps=num_steps, step_size=step_size)


# ===========================================================================
# Attention-normalised predictive coding (Singh & Buckley 2023, §4.4).
# Prefix ``anpc_``.
# ===========================================================================
#
# A network of N scalar neurons x_1, ..., x_N. Every synapse j -> i (adjacency
# A[i, j] = True) carries its own prediction mu_ij = W[i, j] f(x_j) + B[i, j] of
# the postsynaptic neuron and its own prediction error eps_ij = x_i - mu_ij.
#
# * Standard PC (every incoming synapse explains x_i at once, a product of
#   Gaussians):  F_std = sum_{(i, j) in A} 1/2 k_ij eps_ij^2.
# * Attention-normalised PC: a structural variable c_i in pre(i) picks the one
#   synapse that explains x_i, with a uniform prior 1/|pre(i)|. Summing it out,
#       sum_c prod_i p(c_i) exp(-1/2 k_{i c_i} eps_{i c_i}^2)
#           = prod_i |pre(i)|^{-1} sum_{j in pre(i)} exp(-1/2 k_ij eps_ij^2),
#   so  F_att = -sum_i ln sum_{j in pre(i)} exp(-1/2 k_ij eps_ij^2)   (+ const),
#   the log-sum-exp energy with child i, parents pre(i) and
#   sim = -1/2 k eps^2. Its gradient is the standard one with every error
#   multiplied by alpha_ij = softmax_{j in pre(i)}(-1/2 k_ij eps_ij^2).

__all__ += [
    "ANPCParams",
    "anpc_predictions",
    "anpc_errors",
    "anpc_sim",
    "anpc_attention",
    "anpc_effective_precisions",
    "anpc_energy",
    "anpc_standard_energy",
    "anpc_grad_x",
    "anpc_standard_grad_x",
    "anpc_grad_params",
    "anpc_lipschitz",
    "ANPCInference",
    "anpc_infer",
]

_ANPC_ACTIVATIONS = ("tanh", "linear")


class ANPCParams(NamedTuple):
    r"""A network of :math:`N` scalar neurons whose synapses each predict their target.

    Synapse :math:`j \to i` exists where ``adjacency[i, j]`` is ``True``
    (:math:`j \in \mathrm{pre}(i)`, :math:`i \in \mathrm{post}(j)`); it
    predicts the postsynaptic neuron and carries its own prediction error

    .. math:: \mu_{ij} = w_{ij}\, f(x_j) + b_{ij}, \qquad
              \varepsilon_{ij} = x_i - \mu_{ij},

    with :math:`f = \tanh` or the identity (the ``activation`` argument of
    every function). Each synapse is one candidate explanation of neuron
    :math:`i`. A neuron with no incoming synapse (a root, or an input
    neuron) contributes no error.

    Attributes:
      weights: ``(N, N)``, ``weights[i, j]`` is :math:`w_{ij}` (ignored where
        there is no synapse).
      biases: ``(N, N)``, ``biases[i, j]`` is :math:`b_{ij}` (ignored where
        there is no synapse).
      adjacency: ``(N, N)`` boolean, ``True`` marks a synapse :math:`j \to i`
        (self-synapses :math:`i \to i` are allowed). It is structure, not a
        learned parameter.
    """

    weights: Array
    biases: Array
    adjacency: Array


def _check_anpc_params(params) -> ANPCParams:
    if not isinstance(params, ANPCParams):
        raise ValueError(f"params must be ANPCParams; got {type(params).__name__}")
    W, B, A = (jnp.asarray(a) for a in params)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 1:
        raise ValueError(f"params.weights must have shape (N, N) with N >= 1; got {W.shape}")
    N = W.shape[0]
    for name, a in (("biases", B), ("adjacency", A)):
        if a.shape != (N, N):
            raise ValueError(f"params.{name} must have shape (N, N) = ({N}, {N}); got {a.shape}")
    if A.dtype != jnp.bool_:
        raise ValueError(f"params.adjacency must be boolean (True marks a synapse j -> i); got {A.dtype}")
    for name, a in (("weights", W), ("biases", B)):
        _floating_finite(f"params.{name}", a)
    return ANPCParams(weights=W, biases=B, adjacency=A)


def _check_anpc_x(x, N, name="x") -> Array:
    x = jnp.asarray(x)
    if x.ndim < 1 or x.shape[-1] != N:
        raise ValueError(f"{name} must have shape (..., N) with N = {N}; got {x.shape}")
    return _floating_finite(name, x)


def _check_anpc_precisions(precisions, N, dtype) -> Array:
    """Per-synapse precisions k (N, N); ``None`` is all ones, (N,) is per neuron."""
    if precisions is None:
        return jnp.ones((N, N), dtype)
    k = jnp.asarray(precisions)
    if not jnp.issubdtype(k.dtype, jnp.floating):
        raise ValueError(f"precisions must be floating point; got {k.dtype}")
    k = k.astype(dtype)
    if k.shape == (N,):
        k = jnp.broadcast_to(k[:, None], (N, N))
    elif k.shape != (N, N):
        raise ValueError(
            f"precisions must have shape (N,) (one per neuron) or (N, N) (one per synapse) with "
            f"N = {N}; got {k.shape}"
        )
    if _is_concrete(k) and not (np.all(np.isfinite(np.asarray(k))) and np.all(np.asarray(k) >= 0)):
        raise ValueError("precisions must be finite and >= 0")
    return k


def _check_activation(activation) -> str:
    if activation not in _ANPC_ACTIVATIONS:
        raise ValueError(f"activation must be one of {_ANPC_ACTIVATIONS}; got {activation!r}")
    return activation


def _anpc_f(x, activation):
    return jnp.tanh(x) if activation == "tanh" else x


def _anpc_fprime(x, activation):
    return 1.0 - jnp.tanh(x) ** 2 if activation == "tanh" else jnp.ones_like(x)


def _anpc_setup(params, x, precisions, activation, x_name="x"):
    params = _check_anpc_params(params)
    N = params.weights.shape[0]
    x = _check_anpc_x(x, N, x_name)
    k = _check_anpc_precisions(precisions, N, x.dtype)
    return params, x, k, _check_activation(activation)


def _anpc_predictions(params, x, activation):
    return params.weights * _anpc_f(x, activation)[..., None, :] + params.biases


def _anpc_errors(params, x, activation):
    # Where there is no synapse the error is set to 0 so that nothing non-finite can leak.
    e = x[..., :, None] - _anpc_predictions(params, x, activation)
    return jnp.where(params.adjacency, e, 0.0)


def _anpc_sim(params, x, k, activation):
    e = _anpc_errors(params, x, activation)
    return -0.5 * k * e * e


def anpc_predictions(params: ANPCParams, x, *, activation: str = "tanh") -> Array:
    r"""Per-synapse predictions :math:`\mu_{ij} = w_{ij} f(x_j) + b_{ij}`.

    Args:
      params: :class:`ANPCParams`.
      x: ``(..., N)`` neuron values.
      activation: ``"tanh"`` or ``"linear"`` (:math:`f(x) = x`).

    Returns:
      ``(..., N, N)``; entry ``[..., i, j]`` is synapse :math:`j \to i`'s
      prediction of :math:`x_i` (meaningful only where there is a synapse).
    """
    params, x, _, activation = _anpc_setup(params, x, None, activation)
    return _anpc_predictions(params, x, activation)


def anpc_errors(params: ANPCParams, x, *, activation: str = "tanh") -> Array:
    r"""Per-synapse prediction errors :math:`\varepsilon_{ij} = x_i - w_{ij} f(x_j) - b_{ij}`.

    The :math:`\varepsilon` of both displays of §4.4 of Singh & Buckley
    (2023), one per incoming synapse.

    Returns:
      ``(..., N, N)``, zero where there is no synapse.
    """
    params, x, _, activation = _anpc_setup(params, x, None, activation)
    return _anpc_errors(params, x, activation)


def anpc_sim(params: ANPCParams, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""Similarity of neuron :math:`i` to its presynaptic neuron :math:`j`:
    :math:`\mathrm{sim}_{ij} = -\tfrac12 k_{ij}\,\varepsilon_{ij}^2`.

    Args:
      params: :class:`ANPCParams`.
      x: ``(..., N)`` floating-point activities (an integer or boolean
        array raises ``ValueError``, as do integer ``precisions``).
      precisions: ``None`` (all :math:`k = 1`), ``(N,)`` one precision per
        neuron (:math:`k_{ij} = k_i`, the "node specific precisions" of
        §4.4), or ``(N, N)`` one per synapse; finite and :math:`\ge 0`.
        A zero precision switches a synapse's error off in
        :func:`anpc_standard_energy` (as the effective precisions
        :math:`k\alpha` of :func:`anpc_effective_precisions` do where
        :math:`\alpha` underflows); in :func:`anpc_energy` it would make the
        synapse a perfect explanation, so use :math:`k > 0` there.
      activation: ``"tanh"`` or ``"linear"``.

    Returns:
      ``(..., N, N)``, zero where there is no synapse (those entries are
      masked out of every log-sum-exp).
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return _anpc_sim(params, x, k, activation)


def _anpc_attention(params, x, k, activation):
    return core.weights(_anpc_sim(params, x, k, activation), params.adjacency, allow_empty=True)


def anpc_attention(params: ANPCParams, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""Softmax over each neuron's incoming synapses (the normalisation of §4.4):

    .. math:: \alpha_{ij} = \frac{\exp(-\frac12 k_{ij}\varepsilon_{ij}^2)}
              {\sum_{j' \in \mathrm{pre}(i)} \exp(-\frac12 k_{ij'}\varepsilon_{ij'}^2)}
              = p(c_i = j \mid x),

    the posterior probability that synapse :math:`j \to i` is the one that
    explains neuron :math:`i`, under a uniform prior over
    :math:`\mathrm{pre}(i)`. Built on :func:`lse_energy.core.weights`.

    Returns:
      ``(..., N, N)``; each row with at least one synapse sums to 1, rows of
      neurons without incoming synapses are 0, as are non-synapses.
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return _anpc_attention(params, x, k, activation)


def anpc_effective_precisions(params: ANPCParams, x, precisions=None, *,
                              activation: str = "tanh") -> Array:
    r"""The effective per-synapse precisions :math:`k_{ij}\,\alpha_{ij}(x)`.

    At any state :math:`x`, the gradient of the attention-normalised energy
    equals the gradient of *standard* predictive coding whose synapse
    :math:`j \to i` has precision :math:`k_{ij}\alpha_{ij}(x)` (held fixed):
    the softmax terms "play a functionally equivalent role to precision
    variables" (§4.4). In particular an equilibrium of
    attention-normalised PC is an equilibrium of standard PC with these
    precisions.

    Returns:
      ``(..., N, N)``, zero where there is no synapse.
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return k * _anpc_attention(params, x, k, activation)


def _anpc_energy(params, x, k, activation):
    return core.energy(_anpc_sim(params, x, k, activation), params.adjacency, allow_empty=True)


def anpc_energy(params: ANPCParams, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""The attention-normalised predictive-coding energy,

    .. math:: F_{\mathrm{att}} = -\sum_{i} \ln \sum_{j \in \mathrm{pre}(i)}
              \exp\!\big(-\tfrac12 k_{ij}\,\varepsilon_{ij}^2\big),

    summed over neurons with at least one incoming synapse and over the
    leading batch axes; the log-sum-exp energy with children = neurons,
    parents = their presynaptic neurons, :math:`\mathrm{sim} = -\frac12
    k\varepsilon^2` (built on :func:`lse_energy.core.energy` with the
    adjacency as mask).

    It is the collapsed free energy of §4 of Singh & Buckley (2023),
    :math:`F = -\sum_i \ln \sum_{e_i} e^{f_i} + C`, for the structural prior
    "each neuron is explained by exactly one of its incoming synapses, chosen
    uniformly" and Gaussian synapse potentials: summing the choice out gives
    :math:`\prod_i |\mathrm{pre}(i)|^{-1} \sum_j \exp(-\frac12 k_{ij}
    \varepsilon_{ij}^2)`. With one precision per neuron (:math:`k_{ij} = k_i`)
    this is the negative log-likelihood up to the constant :math:`\sum_i
    [\ln|\mathrm{pre}(i)| + \frac12\ln(2\pi/k_i)]`; with per-synapse
    precisions the mixture components would also carry
    :math:`\frac12\ln k_{ij}`, which this energy (like §4.4) leaves out.

    Args:
      params: :class:`ANPCParams`.
      x: ``(..., N)``.
      precisions: see :func:`anpc_sim`.
      activation: ``"tanh"`` or ``"linear"``.

    Returns:
      Scalar. Bounded below by :math:`-\sum_i \ln|\mathrm{pre}(i)|` (each
      similarity is :math:`\le 0`), non-convex in general.
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return _anpc_energy(params, x, k, activation)


def _anpc_standard_energy(params, x, k, activation):
    # Each synapse is its own child with a single parent: -ln exp(sim) = -sim.
    sim = _anpc_sim(params, x, k, activation)
    flat = sim.reshape(sim.shape[:-2] + (-1, 1))
    mask = params.adjacency.reshape(-1, 1)
    return core.energy(flat, mask, allow_empty=True)


def anpc_standard_energy(params: ANPCParams, x, precisions=None, *,
                         activation: str = "tanh") -> Array:
    r"""Standard predictive coding on the same synapses,

    .. math:: F_{\mathrm{std}} = \sum_{(i, j):\, j \in \mathrm{pre}(i)} \tfrac12 k_{ij}\,\varepsilon_{ij}^2,

    the energy whose gradient gives the first display of §4.4 (every
    incoming synapse explains its neuron at once: a product of Gaussians).
    It is the log-sum-exp energy in which every synapse is a child with a
    single parent (built on :func:`lse_energy.core.energy`). Where every
    neuron has at most one incoming synapse it equals :func:`anpc_energy`.

    Returns:
      Scalar :math:`\ge 0`, summed over the leading batch axes.
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return _anpc_standard_energy(params, x, k, activation)


def _anpc_grad_from(params, x, r, activation):
    """dF/dx from weighted errors r_ij = (weight) k_ij eps_ij (zero off the synapses)."""
    own = jnp.sum(r, axis=-1)
    fed_back = jnp.sum(r * params.weights, axis=-2)
    return own - _anpc_fprime(x, activation) * fed_back


def _anpc_grad_x(params, x, k, activation):
    e = _anpc_errors(params, x, activation)
    alpha = core.weights(-0.5 * k * e * e, params.adjacency, allow_empty=True)
    return _anpc_grad_from(params, x, alpha * k * e, activation)


def _anpc_standard_grad_x(params, x, k, activation):
    e = _anpc_errors(params, x, activation)
    return _anpc_grad_from(params, x, k * e, activation)


def anpc_grad_x(params: ANPCParams, x, precisions=None, *, activation: str = "tanh") -> Array:
    r""":math:`\partial F_{\mathrm{att}}/\partial x`, the attention-normalised inference dynamics.

    .. math:: \dot x_i = -\frac{\partial F_{\mathrm{att}}}{\partial x_i}
              = -\sum_{j \in \mathrm{pre}(i)} \alpha_{ij}\, k_{ij}\,\varepsilon_{ij}
                + f'(x_i) \sum_{l \in \mathrm{post}(i)} \alpha_{li}\, k_{li}\,\varepsilon_{li}\, w_{li},

    with :math:`\alpha` from :func:`anpc_attention`: the second display of
    §4.4 of Singh & Buckley (2023). The first sum is over the errors that
    neuron :math:`i` *receives* (its own prediction errors, normalised by
    its softmax); the second over the errors it *causes* downstream, each
    weighted by the softmax of the neuron that receives it. It is eq. (4) of
    Tschantz (2025) with :math:`\partial\,\mathrm{sim}_{ij}/\partial x_i =
    -k_{ij}\varepsilon_{ij}` and :math:`\partial\,\mathrm{sim}_{ij}/\partial
    x_j = k_{ij}\varepsilon_{ij} w_{ij} f'(x_j)`.

    **Corrections to §4.4 as printed.** (i) The softmax is over
    :math:`-\frac12 k\varepsilon^2`, not :math:`-\frac12\varepsilon^2`: the
    two agree only at unit precision. (ii) The feedback term carries
    :math:`f'(x_i)` (§4.4 writes the linear case). (iii) The text says
    "neuron :math:`\phi_i`" and sums over pre-/post-synaptic *terminals*;
    the softmax in the second sum is that of the postsynaptic neuron
    :math:`l`, over *its* incoming synapses, not a softmax over neuron
    :math:`i`'s outgoing synapses.

    Args:
      params: :class:`ANPCParams`.
      x: ``(..., N)``.
      precisions: see :func:`anpc_sim`.
      activation: ``"tanh"`` or ``"linear"``.

    Returns:
      ``(..., N)`` (the gradient for every neuron, also those a driver keeps
      clamped).
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return _anpc_grad_x(params, x, k, activation)


def anpc_standard_grad_x(params: ANPCParams, x, precisions=None, *,
                         activation: str = "tanh") -> Array:
    r""":math:`\partial F_{\mathrm{std}}/\partial x`, the standard inference dynamics (§4.4, first display).

    .. math:: \dot x_i = -\frac{\partial F_{\mathrm{std}}}{\partial x_i}
              = -\sum_{j \in \mathrm{pre}(i)} k_{ij}\,\varepsilon_{ij}
                + f'(x_i) \sum_{l \in \mathrm{post}(i)} k_{li}\,\varepsilon_{li}\, w_{li}

    (Bogacz 2017; Whittington & Bogacz 2017), i.e. :func:`anpc_grad_x` with
    every :math:`\alpha = 1`. Its equilibrium for a neuron whose inputs are
    clamped is the precision-weighted mean of the predictions it receives.

    Returns:
      ``(..., N)``.
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    return _anpc_standard_grad_x(params, x, k, activation)


def anpc_grad_params(params: ANPCParams, x, precisions=None, *, activation: str = "tanh",
                     normalised: bool = True) -> ANPCParams:
    r"""Learning rules :math:`\partial F/\partial w` and :math:`\partial F/\partial b`.

    .. math:: -\frac{\partial F_{\mathrm{att}}}{\partial w_{ij}} = \alpha_{ij}\,k_{ij}\,\varepsilon_{ij}\, f(x_j),
              \qquad
              -\frac{\partial F_{\mathrm{att}}}{\partial b_{ij}} = \alpha_{ij}\,k_{ij}\,\varepsilon_{ij},

    summed over the leading batch axes: the Hebbian rule of standard PC
    (postsynaptic error times presynaptic rate) gated by the synapse's
    attention weight; with ``normalised=False`` every :math:`\alpha = 1`
    (the gradient of :func:`anpc_standard_energy`). Not printed in §4.4; it
    follows from eq. (4) of Tschantz (2025) with the weights inside the
    similarity. Zero where there is no synapse.

    Returns:
      :class:`ANPCParams` holding :math:`\partial F/\partial w` and
      :math:`\partial F/\partial b` (``adjacency`` is passed through
      unchanged: it is structure, not a parameter).
    """
    params, x, k, activation = _anpc_setup(params, x, precisions, activation)
    e = _anpc_errors(params, x, activation)
    if normalised:
        r = core.weights(-0.5 * k * e * e, params.adjacency, allow_empty=True) * k * e
    else:
        r = jnp.where(params.adjacency, k * e, 0.0)
    r = r.reshape((-1,) + r.shape[-2:])
    fx = _anpc_f(x, activation).reshape(-1, x.shape[-1])
    gW = -jnp.einsum("bij,bj->ij", r, fx)
    gB = -jnp.sum(r, axis=0)
    return ANPCParams(weights=gW, biases=gB, adjacency=params.adjacency)


def _check_clamp_mask(clamp, N) -> Array:
    c = jnp.asarray(clamp)
    if c.shape != (N,) or c.dtype != jnp.bool_:
        raise ValueError(f"clamp must be a boolean array of shape (N,) = ({N},) (True = clamped); "
                         f"got {c.dtype}{c.shape}")
    return c


def _anpc_lipschitz(params, k, free, activation, radius, normalised):
    A = params.adjacency
    W, B = params.weights, params.biases
    kA = jnp.where(A, k, 0.0)
    own = 2.0 * (jnp.max(kA, axis=-1) if normalised else jnp.sum(kA, axis=-1))
    if activation == "tanh":
        curv = _TANH2_MAX * jnp.abs(W) * (radius + jnp.abs(W) + jnp.abs(B))
    else:
        curv = jnp.zeros_like(W)
    down = jnp.sum(jnp.where(A, k * (2.0 * W**2 + curv), 0.0), axis=-2)
    return jnp.max(jnp.where(free, own + down, 0.0))


def anpc_lipschitz(params: ANPCParams, precisions=None, *, clamp, activation: str = "tanh",
                   radius: float | None = None, normalised: bool = True) -> Array:
    r"""An upper curvature bound :math:`L` of :math:`F_{\mathrm{att}}` in the free neurons.

    .. math:: L = \max_{n\ \mathrm{free}} \Big( 2 \max_{j \in \mathrm{pre}(n)} k_{nj}
              + \sum_{i \in \mathrm{post}(n)} k_{in}\big(2 w_{in}^2 + c\,|w_{in}|(R + |w_{in}| + |b_{in}|)\big) \Big),

    with :math:`c = \max|\tanh''| = \frac{4}{3\sqrt3}` for ``"tanh"`` and
    :math:`c = 0` for ``"linear"``. Why: the Hessian of :math:`-\ln\sum_j
    e^{s_j}` is :math:`-\sum_j \alpha_j \nabla^2 s_j - \mathrm{Cov}_\alpha(\nabla
    s) \preceq -\sum_j \alpha_j \nabla^2 s_j`; for :math:`s_{ij} = -\frac12
    k_{ij}\varepsilon_{ij}^2`, :math:`-\nabla^2 s_{ij} = k_{ij} a a^\top -
    k_{ij}\varepsilon_{ij} w_{ij} f''(x_j)\, e_j e_j^\top` with :math:`a =
    e_i - w_{ij} f'(x_j) e_j`, and :math:`a a^\top \preceq 2 e_i e_i^\top + 2
    w_{ij}^2 e_j e_j^\top` (:math:`|f'| \le 1`). Using :math:`\sum_j
    \alpha_{ij} = 1` for the first part and :math:`\alpha \le 1` for the
    second gives a diagonal matrix that dominates the Hessian restricted to
    the free neurons; :math:`L` is its largest entry. For ``"linear"`` this
    holds everywhere. For ``"tanh"`` it needs :math:`|\varepsilon_{in}| \le R
    + |w_{in}| + |b_{in}|`, true while every :math:`|x_i| \le R` (check
    :attr:`ANPCInference.max_abs`). By the descent lemma every step
    :math:`0 < \eta \le 2/L` of :func:`anpc_infer` does not increase
    :math:`F_{\mathrm{att}}`. For the standard energy
    (``normalised=False``) every :math:`\alpha` is 1, so the first part
    becomes :math:`2\sum_{j \in \mathrm{pre}(n)} k_{nj}`: the
    normalisation lets attention-normalised PC take steps up to
    :math:`|\mathrm{pre}(n)|` times larger on a neuron with many inputs.

    Args:
      params: :class:`ANPCParams`.
      precisions: see :func:`anpc_sim`.
      clamp: ``(N,)`` boolean, ``True`` for clamped neurons (they do not move).
      activation: ``"tanh"`` or ``"linear"``.
      radius: :math:`R > 0`, required for ``"tanh"``, unused for ``"linear"``.
      normalised: ``True`` (default) bounds :math:`F_{\mathrm{att}}`,
        ``False`` bounds :math:`F_{\mathrm{std}}`.

    Returns:
      Scalar :math:`L \ge 0` (0 when nothing is free or no free neuron
      touches a synapse).
    """
    params = _check_anpc_params(params)
    N = params.weights.shape[0]
    activation = _check_activation(activation)
    k = _check_anpc_precisions(precisions, N, params.weights.dtype)
    free = ~_check_clamp_mask(clamp, N)
    if activation == "tanh":
        if radius is None or not (np.ndim(radius) == 0 and np.isfinite(radius) and radius > 0):
            raise ValueError(f"radius must be a finite scalar > 0 for activation='tanh'; got {radius!r}")
    else:
        radius = 0.0
    if not isinstance(normalised, (bool, np.bool_)):
        raise ValueError(f"normalised must be a bool; got {normalised!r}")
    return _anpc_lipschitz(params, k, free, activation, radius, bool(normalised))


class ANPCInference(NamedTuple):
    r"""Result of :func:`anpc_infer`.

    Attributes:
      x: ``(..., N)`` neuron values after the last step.
      energy: ``(num_steps + 1,)`` the energy (:math:`F_{\mathrm{att}}`, or
        :math:`F_{\mathrm{std}}` with ``normalised=False``) summed over the
        batch, at the start and after each step.
      max_abs: ``(num_steps + 1,)`` :math:`\max_i |x_i|` over the batch at
        the start and after each step (to check the box assumption of
        :func:`anpc_lipschitz` for ``"tanh"``).
    """

    x: Array
    energy: Array
    max_abs: Array


@partial(jax.jit, static_argnames=("num_steps", "activation", "normalised"))
def _anpc_infer_jit(params, x0, k, free, eta, num_steps, activation, normalised):
    grad = _anpc_grad_x if normalised else _anpc_standard_grad_x
    energy = _anpc_energy if normalised else _anpc_standard_energy
    move = eta * free.astype(x0.dtype)

    def step(x, _):
        x = x - move * grad(params, x, k, activation)
        return x, (energy(params, x, k, activation), jnp.max(jnp.abs(x)))

    x, (trace, mx) = jax.lax.scan(step, x0, None, length=num_steps)
    e0 = energy(params, x0, k, activation)[None]
    return ANPCInference(x=x, energy=jnp.concatenate([e0, trace]),
                         max_abs=jnp.concatenate([jnp.max(jnp.abs(x0))[None], mx]))


def anpc_infer(params: ANPCParams, x0, precisions=None, *, clamp, num_steps: int,
               step_size: float, activation: str = "tanh", normalised: bool = True) -> ANPCInference:
    r"""Inference: gradient descent on the energy in the free neurons.

    .. math:: x_i \leftarrow x_i - \eta\,\frac{\partial F}{\partial x_i}
              \quad \text{for every free neuron } i,

    the Euler discretisation of the dynamics of §4.4 (second display with
    ``normalised=True``, :func:`anpc_grad_x`; first display with
    ``normalised=False``, :func:`anpc_standard_grad_x`). Clamped neurons
    (inputs, observations) keep their initial values exactly. A batch of
    independent states is updated together. Jitted, with ``lax.scan``.

    Args:
      params: :class:`ANPCParams` (fixed).
      x0: ``(..., N)`` initial values; clamped neurons hold the clamped values.
      precisions: see :func:`anpc_sim`.
      clamp: ``(N,)`` boolean, ``True`` = clamped.
      num_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`. With :math:`\eta \le 2/L`,
        :math:`L` from :func:`anpc_lipschitz`, :math:`F_{\mathrm{att}}`
        does not increase (descent lemma).
      activation: ``"tanh"`` or ``"linear"`` (static).
      normalised: ``True`` for attention-normalised PC, ``False`` for
        standard PC (static).

    Returns:
      :class:`ANPCInference`.
    """
    params, x0, k, activation = _anpc_setup(params, x0, precisions, activation, "x0")
    free = ~_check_clamp_mask(clamp, params.weights.shape[0])
    num_steps = _check_int("num_steps", num_steps, 1)
    eta = jnp.asarray(_pcn_check_step(step_size), x0.dtype)
    if not isinstance(normalised, (bool, np.bool_)):
        raise ValueError(f"normalised must be a bool; got {normalised!r}")
    return _anpc_infer_jit(params, x0, k, free, eta, num_steps, activation, bool(normalised))
