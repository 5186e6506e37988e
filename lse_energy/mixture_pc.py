r"""Predictive coding with one layer of latent causes, as descent on the log-sum-exp energy.

§8 and Appendix B of Tschantz (2025), *Attention via log-sum-exp energy*. Data
points :math:`x_i \in \mathbb{R}^d` are the children, latent causes
:math:`\mu_k \in \mathbb{R}^m` the parents, and the similarity compares a
datum with the *prediction* :math:`f_\phi(\mu_k)` of a one-hidden-layer tanh
network (:class:`Params`, :func:`init_params`, :func:`predict`):

.. math::

    \begin{aligned}
    \mathrm{sim}(x_i, \mu_k) &= -\tfrac12 \|x_i - f_\phi(\mu_k)\|^2, \\
    E^{\mathrm{PC}} &= -\sum_{i=1}^N \ln \sum_{k=1}^K
        \exp\!\big(-\tfrac12 \|x_i - f_\phi(\mu_k)\|^2\big)
    \quad \text{(eq. 18)}.
    \end{aligned}

Functions: :func:`sim`, :func:`energy`, :func:`responsibilities`, the
gradients :func:`grad_x`, :func:`grad_mu`, :func:`grad_params`, the step-size
bound :func:`mu_lipschitz`, and the drivers :func:`infer` (inference of
:math:`\mu` by gradient descent) and :func:`fit` (EM-like alternation of
inference and optax steps on :math:`\phi`). :func:`sample` draws data from a
"teacher" network.

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
gradient, not its negative), like the rest of the package.

**Input dtypes.** Every continuous-valued array (network parameters, latent
causes, observations, layer values, activities, precisions) must have a
floating dtype: an integer or boolean array raises ``ValueError`` naming the
argument (cast it explicitly, e.g. ``x.astype(float)``). Discrete arguments
keep their natural types: counts (``n_steps``, ``batch_size``, ...) are
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

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "Params",
    "init_params",
    "predict",
    "sim",
    "energy",
    "responsibilities",
    "grad_x",
    "grad_mu",
    "grad_params",
    "mu_lipschitz",
    "Inference",
    "infer",
    "FitExtras",
    "fit",
    "Data",
    "sample",
]

# Largest value of |tanh''(z)| = |−2 tanh(z)(1 − tanh(z)^2)|, attained at tanh(z) = 1/√3.
_TANH2_MAX = 4.0 / (3.0 * math.sqrt(3.0))  # a Python float: weakly typed, keeps float32 float32


# ---------------------------------------------------------------------------
# Shared: the generative network f_phi
# ---------------------------------------------------------------------------


class Params(NamedTuple):
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


def init_params(
    latent_dim: int,
    hidden_dim: int,
    out_dim: int,
    *,
    key: Array,
    input_scale: float = 1.0,
    output_scale: float = 1.0,
    bias_scale: float = 0.0,
) -> Params:
    r"""Random :class:`Params` with LeCun-normal weights.

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
      :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> params.W1.shape, params.W2.shape
      ((4, 2), (3, 4))
    """
    _validate.key("key", key)
    latent_dim, hidden_dim = _validate.count("latent_dim", latent_dim), _validate.count("hidden_dim", hidden_dim)
    out_dim = _validate.count("out_dim", out_dim)
    input_scale = _validate.positive("input_scale", input_scale)
    output_scale = _validate.positive("output_scale", output_scale)
    bias_scale = _validate.nonnegative("bias_scale", bias_scale)
    dtype = jnp.result_type(float)
    return _init_params(key, latent_dim, hidden_dim, out_dim, input_scale, output_scale, bias_scale, dtype)


@partial(jax.jit, static_argnums=(1, 2, 3, 7))
def _init_params(key, latent_dim, hidden_dim, out_dim, input_scale, output_scale, bias_scale, dtype) -> Params:
    # One compiled program per shape (called eagerly, as the chapters do).
    k1, k2, k3, k4 = jax.random.split(key, 4)
    W1 = input_scale / np.sqrt(latent_dim) * core.random_normal(k1, (hidden_dim, latent_dim), dtype)
    W2 = output_scale / np.sqrt(hidden_dim) * core.random_normal(k2, (out_dim, hidden_dim), dtype)
    b1 = bias_scale * core.random_normal(k3, (hidden_dim,), dtype)
    b2 = bias_scale * output_scale * core.random_normal(k4, (out_dim,), dtype)
    return Params(W1=W1, b1=b1, W2=W2, b2=b2)


def predict(params: Params, mu) -> Array:
    r""":math:`f_\phi(\mu) = W_2 \tanh(W_1 \mu + b_1) + b_2`, row-wise.

    Args:
      params: :class:`Params` with ``W1: (H, m)``, ``b1: (H,)``,
        ``W2: (d, H)``, ``b2: (d,)``; floating point and finite.
      mu: ``(..., m)`` latent causes, floating point (an integer or boolean
        array raises ``ValueError``; cast it explicitly) and finite.

    Returns:
      ``(..., d)``.

    Raises:
      ValueError: ``mu`` without a last axis of width ``m = params.W1.shape[1]``,
        a non-floating dtype, or non-finite values (checked when concrete).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> mixture_pc.predict(params, jnp.zeros((5, 2))).shape  # f: R^2 -> R^3
      (5, 3)
    """
    params = _check_params(params)
    mu = _validate.last_axis("mu", mu, params.W1.shape[1], "m", "params.W1.shape[1]")
    return _predict(params, mu)


def _predict(params, mu):
    """:func:`predict` without validation (for use inside jitted code and gradients)."""
    h = jnp.tanh(mu @ params.W1.T + params.b1)
    return h @ params.W2.T + params.b2


def _check_params(params) -> Params:
    return _validate.params(params, Params, {"W1": "H m", "b1": "H", "W2": "d H", "b2": "d"})[0]


def _check_mixture(params, x, mu, mu_name="mu"):
    params = _check_params(params)
    m, d = params.W1.shape[1], params.W2.shape[0]
    x = _validate.matrix("x", x, d, "d = params.W2.shape[0]")
    mu = _validate.matrix(mu_name, mu, m, "m = params.W1.shape[1]")
    return params, x, mu


# ---------------------------------------------------------------------------
# Mixture part (§8 and Appendix B): one layer of latent causes, K parents
# ---------------------------------------------------------------------------


def _errors(params, x, mu):
    """Prediction errors e[i, k] = x_i - f(mu_k), shape (N, K, d), and f(mu), (K, d)."""
    pred = _predict(params, mu)
    return x[:, None, :] - pred[None, :, :], pred


def sim(params: Params, x, mu) -> Array:
    r"""Similarity matrix :math:`\mathrm{sim}(x_i, \mu_k) = -\frac12\|x_i - f_\phi(\mu_k)\|^2` (§8).

    Args:
      params: :class:`Params` of :math:`f_\phi`.
      x: ``(N, d)`` data (children), floating point and finite.
      mu: ``(K, m)`` latent causes (parents), floating point and finite.
        Integer or boolean ``x``, ``mu`` or parameters raise ``ValueError``
        (all are continuous; cast explicitly), as in every
        function.

    Returns:
      ``(N, K)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> mixture_pc.sim(params, jnp.ones((5, 3)), jnp.zeros((2, 2))).shape
      (5, 2)
    """
    params, x, mu = _check_mixture(params, x, mu)
    e, _ = _errors(params, x, mu)
    return -0.5 * jnp.sum(e * e, axis=-1)


def energy(params: Params, x, mu) -> Array:
    r"""Predictive-coding mixture energy, eq. (18):

    .. math:: E^{\mathrm{PC}} = -\sum_{i=1}^N \ln \sum_{k=1}^K
              \exp\!\big(-\tfrac12\|x_i - f_\phi(\mu_k)\|^2\big).

    Built on :func:`lse_energy.core.energy`. It is bounded below by
    :math:`-N \ln K` (each similarity is :math:`\le 0`).

    Args:
      params: :class:`Params`.
      x: ``(N, d)``.
      mu: ``(K, m)``.

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> # f: R^2 -> R^3
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> # f = 0: every sim is -|x|^2 / 2 = -1.5
      >>> flat = params._replace(W2=jnp.zeros((3, 4)))
      >>> x, mu = jnp.ones((5, 3)), jnp.zeros((3, 2))  # 5 points, 3 latent causes
      >>> round(float(mixture_pc.energy(flat, x, mu)), 3)  # 5 (1.5 - ln 3)
      2.007
    """
    return core.energy(sim(params, x, mu))


def responsibilities(params: Params, x, mu) -> Array:
    r"""Posterior over edges :math:`\alpha_{ik} = \mathrm{softmax}_k\,\mathrm{sim}(x_i, \mu_k)` (§8).

    Returns:
      ``(N, K)``, rows summing to 1.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> r = mixture_pc.responsibilities(params, jnp.ones((5, 3)), jnp.zeros((2, 2)))
      >>> r.shape, bool(jnp.allclose(r, 0.5))  # two equal latents
      ((5, 2), True)
    """
    return core.weights(sim(params, x, mu))


def _weighted_errors(params, x, mu):
    """alpha (N, K), errors (N, K, d), predictions (K, d)."""
    e, pred = _errors(params, x, mu)
    alpha = core.weights(-0.5 * jnp.sum(e * e, axis=-1))
    return alpha, e, pred


def grad_x(params: Params, x, mu) -> Array:
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
      params: :class:`Params`.
      x: ``(N, d)``.
      mu: ``(K, m)``.

    Returns:
      ``(N, d)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> mixture_pc.grad_x(params, jnp.ones((5, 3)), jnp.zeros((2, 2))).shape
      (5, 3)
    """
    params, x, mu = _check_mixture(params, x, mu)
    alpha, e, _ = _weighted_errors(params, x, mu)
    return jnp.einsum("nk,nkd->nd", alpha, e)


def _summed_errors(params, x, mu):
    """s_k = sum_i alpha_ik (x_i - f(mu_k)), shape (K, d)."""
    alpha, e, _ = _weighted_errors(params, x, mu)
    return jnp.einsum("nk,nkd->kd", alpha, e)


def grad_mu(params: Params, x, mu) -> Array:
    r""":math:`\partial E^{\mathrm{PC}}/\partial \mu_k`, the latent gradient of eq. (18) (§8).

    .. math:: -\frac{\partial E^{\mathrm{PC}}}{\partial \mu_k}
              = J_k^\top \sum_{i=1}^N \alpha_{ik}\,\big(x_i - f_\phi(\mu_k)\big),
              \qquad J_k = \frac{\partial f_\phi(\mu_k)}{\partial \mu_k} \in \mathbb{R}^{d \times m}.

    This is §8's formula with the Jacobian transposed (the seed writes
    :math:`J_k` where :math:`J_k^\top` is meant). It is evaluated as a
    vector-Jacobian product: ``jax.vjp`` of :math:`f_\phi` at
    :math:`\mu_{1:K}` applied to the softmax-weighted sums of errors
    :math:`s_k = \sum_i \alpha_{ik}(x_i - f_\phi(\mu_k))`; no Jacobian is
    formed and :math:`E` is never differentiated. Arguments as in
    :func:`grad_x`; returns ``(K, m)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> mixture_pc.grad_mu(params, jnp.ones((5, 3)), jnp.zeros((2, 2))).shape
      (2, 2)
    """
    params, x, mu = _check_mixture(params, x, mu)
    s = _summed_errors(params, x, mu)
    _, pullback = jax.vjp(lambda m: _predict(params, m), mu)
    (jts,) = pullback(s)
    return -jts


def grad_params(params: Params, x, mu) -> Params:
    r""":math:`\partial E^{\mathrm{PC}}/\partial \phi`, the learning gradient of eq. (18).

    .. math:: -\frac{\partial E^{\mathrm{PC}}}{\partial \phi}
              = \sum_{k=1}^K \Big(\frac{\partial f_\phi(\mu_k)}{\partial \phi}\Big)^{\!\top}
                \sum_{i=1}^N \alpha_{ik}\,\big(x_i - f_\phi(\mu_k)\big),

    the same weighted errors as :func:`grad_mu`, pulled back to the
    weights instead of the latents (``jax.vjp`` of :math:`\phi \mapsto
    f_\phi(\mu_{1:K})`). Not printed in the seed; it follows from eq. (4)
    of the seed with :math:`\phi` entering every similarity.

    Returns:
      :class:`Params` of the same shapes as ``params``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> g = mixture_pc.grad_params(params, jnp.ones((5, 3)), jnp.zeros((2, 2)))
      >>> g.W1.shape, g.b2.shape
      ((4, 2), (3,))
    """
    params, x, mu = _check_mixture(params, x, mu)
    return _grad_params(params, x, mu)


def _grad_params(params, x, mu):
    s = _summed_errors(params, x, mu)
    _, pullback = jax.vjp(lambda p: _predict(p, mu), params)
    (g,) = pullback(s)
    return jax.tree.map(jnp.negative, g)


def _lipschitz(params, x):
    n1 = jnp.linalg.norm(params.W1, ord=2)
    n2 = jnp.linalg.norm(params.W2, ord=2)
    H = params.W1.shape[0]
    emax = jnp.linalg.norm(x - params.b2, axis=-1) + n2 * math.sqrt(H)
    return jnp.sum(n1**2 * n2**2 + _TANH2_MAX * n1**2 * n2 * emax)


def mu_lipschitz(params: Params, x) -> Array:
    r"""A global Lipschitz constant :math:`L` of :math:`\nabla_\mu E^{\mathrm{PC}}`.

    .. math::

        \begin{aligned}
        L &= \sum_{i=1}^N \Big( \|W_1\|_2^2 \|W_2\|_2^2 \\
        &\quad + c\, \|W_1\|_2^2 \|W_2\|_2 \big(\|x_i - b_2\| + \sqrt{H}\,\|W_2\|_2\big)\Big), \\
        c &= \max_z |\tanh''(z)| = \tfrac{4}{3\sqrt3}.
        \end{aligned}

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
      params: :class:`Params`.
      x: ``(N, d)``.

    Returns:
      Scalar :math:`L > 0`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> bool(mixture_pc.mu_lipschitz(params, jnp.ones((5, 3))) > 0)
      True
    """
    params = _check_params(params)
    x = _validate.matrix("x", x, params.W2.shape[0], "d = params.W2.shape[0]")
    return _lipschitz(params, x)


class Inference(NamedTuple):
    r"""Result of :func:`infer`.

    Attributes:
      mu: ``(K, m)`` latents after the last step.
      energy: ``(n_steps + 1,)`` :math:`E^{\mathrm{PC}}` at the start and after each step.
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
    _, pullback = jax.vjp(lambda m: _predict(params, m), mu)
    return -pullback(s)[0]


def _infer_scan(params, x, mu0, eta, n_steps):
    def step(mu, _):
        mu = mu - eta * _grad_mu(params, x, mu)
        return mu, _energy(params, x, mu)

    mu, trace = jax.lax.scan(step, mu0, None, length=n_steps)
    return mu, jnp.concatenate([_energy(params, x, mu0)[None], trace])


@partial(jax.jit, static_argnames=("n_steps", "auto_step"))
def _infer_jit(params, x, mu0, step_size, n_steps, auto_step):
    eta = 1.0 / _lipschitz(params, x) if auto_step else step_size
    mu, trace = _infer_scan(params, x, mu0, eta, n_steps)
    return Inference(mu=mu, energy=trace, step_size=eta)


def infer(params: Params, x, mu0, *, n_steps: int, step_size: float | None = None) -> Inference:
    r"""Inference of the latent causes by gradient descent on eq. (18).

    .. math:: \mu_k \leftarrow \mu_k - \eta\, \frac{\partial E^{\mathrm{PC}}}{\partial \mu_k}
              = \mu_k + \eta\, J_k^\top \sum_i \alpha_{ik}\big(x_i - f_\phi(\mu_k)\big)

    with :math:`\phi` fixed, using :func:`grad_mu`'s vector-Jacobian
    product. Jitted, with ``lax.scan`` inside.

    Args:
      params: :class:`Params` (fixed).
      x: ``(N, d)`` data.
      mu0: ``(K, m)`` initial latents.
      n_steps: number of gradient steps, ``>= 1``.
      step_size: :math:`\eta > 0`; ``None`` (default) uses
        :math:`\eta = 1/L` with :math:`L` from :func:`mu_lipschitz`,
        for which the energy trace is guaranteed non-increasing (up to
        round-off).

    Returns:
      :class:`Inference` ``(mu, energy, step_size)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> x = jax.random.normal(jax.random.key(1), (6, 3))
      >>> inf = mixture_pc.infer(params, x, jnp.zeros((2, 2)), n_steps=4)
      >>> inf.mu.shape, inf.energy.shape, bool(inf.energy[-1] <= inf.energy[0])
      ((2, 2), (5,), True)
    """
    params, x, mu0 = _check_mixture(params, x, mu0, "mu0")
    n_steps = _validate.count("n_steps", n_steps, 1)
    step_size = _validate.positive("step_size", step_size, allow_none=True)
    return _infer_jit(
        params, x, mu0, jnp.asarray(1.0 if step_size is None else step_size, x.dtype), n_steps, step_size is None
    )


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      mu: ``(K, m)`` latents after the last inference phase.
      infer_energy: ``(n_steps, n_infer_steps)`` energy after each inference step.
      learn_energy: ``(n_steps, n_learn_steps)`` energy after each learning step.
    """

    mu: Array
    infer_energy: Array
    learn_energy: Array


def _round(carry, _key, args, *, optimizer, n_infer_steps, n_learn_steps, auto_step):
    # one round of fit (of _descent.rounds): inference on mu at fixed phi, then n_learn_steps optimizer steps on phi
    p, state, mu = carry
    x, step_size = args

    def learn(carry, _):
        p, state, mu = carry
        p, state = _descent.step(optimizer, _grad_params(p, x, mu), state, p)
        return (p, state, mu), _energy(p, x, mu)

    eta = 1.0 / _lipschitz(p, x) if auto_step else step_size
    mu, inf_trace = _infer_scan(p, x, mu, eta, n_infer_steps)
    (p, state, mu), learn_trace = jax.lax.scan(learn, (p, state, mu), None, length=n_learn_steps)
    return (p, state, mu), (inf_trace[1:], learn_trace)


def _result(start, carry, values):
    p, _, mu = carry
    inf, lrn = values
    energies = jnp.concatenate([start[None], lrn[:, -1]])
    return p, energies, FitExtras(mu=mu, infer_energy=inf, learn_energy=lrn), lrn


def fit(
    params: Params,
    x,
    mu0,
    *,
    optimizer: Any,
    n_steps: int,
    n_infer_steps: int,
    n_learn_steps: int,
    step_size: float | None = None,
    progress: bool = False,
) -> core.FitResult:
    r"""Learn :math:`\phi` and infer :math:`\mu` by alternating descent on eq. (18).

    Runs ``n_steps`` rounds; one step (one round) is ``n_infer_steps``
    gradient steps on :math:`\mu` with :math:`\phi` fixed (as :func:`infer`),
    then ``n_learn_steps`` optimizer steps on :math:`\phi` with :math:`\mu` fixed,
    using the analytic :func:`grad_params`. This is the EM-like
    scheme of §9 of the seed with gradient (not closed-form) M-steps. Jitted,
    with nested ``lax.scan``.

    Args:
      params: initial :class:`Params`.
      x: ``(N, d)`` data.
      mu0: ``(K, m)`` initial latents.
      optimizer: an optax ``GradientTransformation`` (anything with
        ``init(params)`` and ``update(grads, state, params)``), e.g.
        ``optax.adam(1e-2)``. It must be hashable (optax's are): it is a
        static argument of the jitted driver.
      n_steps: number of rounds (outer steps), an integer ``>= 1``.
      n_infer_steps, n_learn_steps: inference and learning steps per round,
        integers ``>= 1``.
      step_size: inference step; ``None`` uses :math:`1/L(\phi)` from
        :func:`mu_lipschitz`, recomputed at the start of every
        round for the current :math:`\phi`, so every inference phase is
        monotone. (Optimizer steps on :math:`\phi` carry no such guarantee.)
      progress: show a ``tqdm.auto`` bar of the rounds (the compiled loop
        reports to the host every 1/50 of the run; with the bar, results agree
        with ``progress=False`` to round-off, see ``lse_energy._progress``).

    Returns:
      :class:`~lse_energy.core.FitResult`: the learned :class:`Params`;
      ``energies``, ``(n_steps + 1,)``, :math:`E^{\mathrm{PC}}` at the start
      and after each round; ``n_iter = n_steps``; ``converged = None`` (a
      fixed number of rounds); ``extras`` a :class:`FitExtras` with the latents
      and the step-by-step traces.

    Raises:
      ValueError: on bad arguments, or when the run diverged (a non-finite
        parameter, latent or energy; the message names the first round).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import mixture_pc
      >>> params = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> x, mu0 = jax.random.normal(jax.random.key(1), (6, 3)), jnp.zeros((2, 2))
      >>> steps = dict(n_steps=3, n_infer_steps=2, n_learn_steps=2)
      >>> result = mixture_pc.fit(params, x, mu0, optimizer=optax.sgd(0.01), **steps)
      >>> (
      ...     result.energies.shape,
      ...     result.extras.mu.shape,
      ...     bool(result.energies[-1] < result.energies[0]),
      ... )
      ((4,), (2, 2), True)
    """
    params, x, mu0 = _check_mixture(params, x, mu0, "mu0")
    _validate.optimizer(optimizer)
    n_steps = _validate.count("n_steps", n_steps, 1)
    n_infer_steps = _validate.count("n_infer_steps", n_infer_steps, 1)
    n_learn_steps = _validate.count("n_learn_steps", n_learn_steps, 1)
    step_size = _validate.positive("step_size", step_size, allow_none=True)
    eta = jnp.asarray(1.0 if step_size is None else step_size, x.dtype)
    round_ = partial(
        _round,
        optimizer=optimizer,
        n_infer_steps=n_infer_steps,
        n_learn_steps=n_learn_steps,
        auto_step=step_size is None,
    )
    return _descent.rounds(
        "mixture_pc.fit",
        round_,
        (params, optimizer.init(params), mu0),
        n_rounds=n_steps,
        args=(x, eta),
        result=partial(_result, _energy(params, x, mu0)),
        hint="lower the optimizer's learning rate or step_size (None picks a safe one)",
        progress=progress,
    )


class Data(NamedTuple):
    r"""Data drawn by :func:`sample`.

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


def sample(
    teacher: Params,
    num_clusters: int,
    points_per_cluster: int,
    *,
    key: Array,
    centre_scale: float = 2.0,
    latent_noise: float = 0.1,
    obs_noise: float = 0.1,
    latent_centres=None,
) -> Data:
    r"""Sample data from a few latent causes through a teacher network.

    .. math:: c_k \sim \mathcal{N}(0, s_c^2 I_m), \quad
              z_{kj} = c_k + \tau\,\epsilon_{kj}, \quad
              x_{kj} = f_{\mathrm{teacher}}(z_{kj}) + \sigma\,\xi_{kj},

    with standard normal :math:`\epsilon, \xi`.

    Args:
      teacher: :class:`Params` of the generating network.
      num_clusters: ``K >= 1``.
      points_per_cluster: ``n >= 1``.
      key: PRNG key (keyword-only).
      centre_scale: :math:`s_c > 0`.
      latent_noise: :math:`\tau \ge 0`.
      obs_noise: :math:`\sigma \ge 0`.
      latent_centres: optional ``(K, m)`` centres :math:`c_k` to use instead
        of sampling them (then ``centre_scale`` is unused).

    Returns:
      :class:`Data`, points ordered cluster by cluster.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import mixture_pc
      >>> teacher = mixture_pc.init_params(2, 4, 3, key=jax.random.key(0))
      >>> data = mixture_pc.sample(teacher, 3, 5, key=jax.random.key(1))
      >>> data.x.shape, data.labels.shape, data.latent_centres.shape
      ((15, 3), (15,), (3, 2))
    """
    _validate.key("key", key)
    teacher = _check_params(teacher)
    K = _validate.count("num_clusters", num_clusters, 1)
    n = _validate.count("points_per_cluster", points_per_cluster, 1)
    centre_scale = _validate.positive("centre_scale", centre_scale)
    latent_noise = _validate.nonnegative("latent_noise", latent_noise)
    obs_noise = _validate.nonnegative("obs_noise", obs_noise)
    m = teacher.W1.shape[1]
    if latent_centres is not None:
        latent_centres = _validate.matrix("latent_centres", latent_centres, m, "m = teacher.W1.shape[1]")
        if latent_centres.shape[0] != K:
            raise ValueError(f"latent_centres must have num_clusters = {K} rows; got shape {latent_centres.shape}")
    return _sample(teacher, K, n, key, centre_scale, latent_noise, obs_noise, latent_centres)


@partial(jax.jit, static_argnums=(1, 2))
def _sample(teacher, K, n, key, centre_scale, latent_noise, obs_noise, latent_centres) -> Data:
    # One compiled program per shape (called eagerly, as the chapters do).
    m, d = teacher.W1.shape[1], teacher.W2.shape[0]
    dtype = teacher.W1.dtype
    kc, kz, kx = jax.random.split(key, 3)
    if latent_centres is None:
        centres = centre_scale * core.random_normal(kc, (K, m), dtype)
    else:
        centres = latent_centres
    labels = jnp.repeat(jnp.arange(K), n)
    z = centres[labels] + latent_noise * core.random_normal(kz, (K * n, m), dtype)
    x = _predict(teacher, z) + obs_noise * core.random_normal(kx, (K * n, d), dtype)
    return Data(x=x, labels=labels, latent_centres=centres, z=z)
