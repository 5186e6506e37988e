r"""Denoising diffusion (DDPM) and its ideal, closed-form denoiser as a log-sum-exp energy.

This module implements §22 of the lecture notes, which follow
Ho, Jain & Abbeel (2020), *Denoising diffusion probabilistic models*, and the
exact result that ties diffusion to the log-sum-exp energy of this package.

**Forward process.** With a variance schedule :math:`\beta_1, \dots, \beta_T`
in :math:`(0, 1)`, :math:`\alpha_t = 1 - \beta_t` and
:math:`\bar\alpha_t = \prod_{s \le t} \alpha_s` (the notes write
:math:`\tilde\alpha_t`),

.. math::

    q(x_t \mid x_{t-1}) = \mathcal{N}(\sqrt{\alpha_t}\, x_{t-1}, \beta_t I), \qquad
    q(x_t \mid x_0) = \mathcal{N}(\sqrt{\bar\alpha_t}\, x_0, (1 - \bar\alpha_t) I).

**Training and sampling.** A network :math:`\epsilon_\theta(x_t, t)` is fitted
with the simplified loss
:math:`\mathbb{E}_{x_0, t, \epsilon}\|\epsilon - \epsilon_\theta(\sqrt{\bar\alpha_t} x_0 +
\sqrt{1-\bar\alpha_t}\,\epsilon, t)\|^2`
and sampled ancestrally,

.. math::

    x_{t-1} = \frac{1}{\sqrt{\alpha_t}}\Big(x_t - \frac{\beta_t}{\sqrt{1 - \bar\alpha_t}}
    \epsilon_\theta(x_t, t)\Big) + \sigma_t z .

The notes print :math:`\sqrt{1 - \alpha_t}` in the denominator of the sampling
step; it must be :math:`\sqrt{1 - \bar\alpha_t}` (as in their own
:math:`\mu_t`). They also print the loss weight as
:math:`\beta_t^2 / (2\sigma^2\alpha_{t+1}(1-\alpha_t))`; the KL between the two
Gaussians gives :math:`\beta_t^2 / (2\sigma_t^2\alpha_t(1-\bar\alpha_t))`
(:func:`kl_weight`).

**The ideal denoiser.** For an empirical data set :math:`\{x_i\}_{i=1}^N`
the noised distribution is the Gaussian mixture
:math:`p_t(x) = \frac1N\sum_i \mathcal{N}(x; \sqrt{\bar\alpha_t} x_i, (1-\bar\alpha_t) I)`,
so :math:`-\ln p_t` is, up to a constant, the log-sum-exp energy with the noisy
samples as children, the scaled training points :math:`\sqrt{\bar\alpha_t} x_i`
as parents and :math:`\mathrm{sim}(x, x_i) = -\|x - \sqrt{\bar\alpha_t} x_i\|^2 / (2(1-\bar\alpha_t))`
(:func:`energy`). Its score, the posterior mean
:math:`\mathbb{E}[x_0 \mid x_t]` (Tweedie) and the implied noise prediction are
all softmax-weighted sums over the training points (:func:`ideal_score`,
:func:`ideal_denoiser`, :func:`ideal_epsilon`); the last one is the exact
minimiser of the simplified loss for that data set.

Conventions: time steps are integers ``t`` in ``1..T``; index ``t - 1`` of the
schedule arrays holds step ``t``. Shapes: ``data: (N, d)``, ``x: (B, d)``,
``t``: a scalar or ``(B,)`` integer array. A noise predictor ``eps_fn`` has
the signature ``eps_fn(params, schedule, x, t) -> (B, d)``; the ideal one is
``ideal_epsilon`` with ``params = data``, the learned one is
``lse_energy.experiments.diffusion_mlp.epsilon`` with its ``Params``.

Input dtypes. Points (``data``, ``x``, ``x0``, ``xt``, ``eps``, ...), the
variance schedule ``betas`` and network parameters are continuous and must
have a floating dtype: an integer or boolean array raises ``ValueError``
naming it (cast explicitly). Time steps ``t`` are integers (a float ``t``
raises), and counts (``n_steps``, ``n_samples``, ...) are
Python integers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate, core

Array = jax.Array

__all__ = [
    "sim",
    "Schedule",
    "make_schedule",
    "linear_schedule",
    "forward_marginal",
    "q_sample",
    "q_step",
    "q_posterior",
    "reverse_mean",
    "sigmas",
    "kl_weight",
    "denoising_loss",
    "simplified_loss",
    "energy",
    "ideal_log_density",
    "ideal_score",
    "ideal_denoiser",
    "ideal_epsilon",
    "effective_beta",
    "sample",
    "ideal_sample",
]


# ---------------------------------------------------------------------------
# Validation (public boundary only; value checks only on concrete inputs)
# ---------------------------------------------------------------------------


_concrete = _validate.is_concrete


def _check_schedule(schedule):
    if not isinstance(schedule, Schedule):
        raise ValueError(f"schedule must be a Schedule; got {type(schedule).__name__}")
    return schedule


# ---------------------------------------------------------------------------
# Schedule
# ---------------------------------------------------------------------------


class Schedule(NamedTuple):
    r"""A DDPM variance schedule.

    .. math::

        \alpha_t = 1 - \beta_t, \qquad \bar\alpha_t = \prod_{s=1}^{t} \alpha_s,
        \qquad t = 1, \dots, T .

    Attributes:
      betas: ``(T,)`` :math:`\beta_t \in (0, 1)`; entry ``t - 1`` is step ``t``.
      alphas: ``(T,)`` :math:`\alpha_t`.
      alpha_bars: ``(T,)`` :math:`\bar\alpha_t` (:math:`\tilde\alpha_t` in the notes),
        strictly decreasing in :math:`(0, 1)`.
    """

    betas: Array
    alphas: Array
    alpha_bars: Array


def make_schedule(betas) -> Schedule:
    r"""Build a :class:`Schedule` from :math:`\beta_{1..T}`.

    :math:`\bar\alpha_t` is accumulated as :math:`\exp\sum_{s\le t}\ln(1-\beta_s)`
    (``log1p``), which keeps its relative accuracy when :math:`\beta_t` is tiny.

    Args:
      betas: ``(T,)`` floating, finite, each in :math:`(0, 1)`.

    Raises:
      ValueError: wrong shape or dtype, non-finite or out-of-range entries.
    """
    betas = jnp.asarray(betas)
    if betas.ndim != 1 or betas.shape[0] == 0:
        raise ValueError(f"betas must have shape (T,) with T >= 1; got shape {betas.shape}")
    if not jnp.issubdtype(betas.dtype, jnp.floating):
        raise ValueError(f"betas must have a floating dtype; got {betas.dtype}")
    b = np.asarray(betas)
    if not np.all(np.isfinite(b)):
        raise ValueError("betas must be finite")
    if np.any(b <= 0) or np.any(b >= 1):
        raise ValueError(f"betas must lie in (0, 1); got range [{b.min()}, {b.max()}]")
    alphas = 1.0 - betas
    alpha_bars = jnp.exp(jnp.cumsum(jnp.log1p(-betas)))
    return Schedule(betas=betas, alphas=alphas, alpha_bars=alpha_bars)


def linear_schedule(n_steps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02) -> Schedule:
    r"""The linear schedule of Ho et al. (2020): :math:`\beta_t` evenly spaced from
    ``beta_start`` to ``beta_end`` over ``n_steps`` steps (their
    :math:`T = 1000`, :math:`10^{-4} \to 0.02`).

    Raises:
      ValueError: ``n_steps < 1`` or betas outside :math:`(0, 1)`.
    """
    n_steps = _validate.count("n_steps", n_steps, 1)
    beta_start, beta_end = _validate.open_unit("beta_start", beta_start), _validate.open_unit("beta_end", beta_end)
    return make_schedule(jnp.linspace(beta_start, beta_end, n_steps, dtype=jnp.result_type(float)))


def _abar(schedule, t):
    """:math:`\\bar\\alpha_t` for integer ``t`` (any shape); :math:`\\bar\\alpha_0 = 1`."""
    prev = jnp.concatenate([jnp.ones((1,), schedule.alpha_bars.dtype), schedule.alpha_bars])
    return prev[t]


# ---------------------------------------------------------------------------
# Forward process
# ---------------------------------------------------------------------------


def forward_marginal(schedule, x0, t):
    r"""Mean and variance of :math:`q(x_t \mid x_0) = \mathcal{N}(\sqrt{\bar\alpha_t} x_0, (1-\bar\alpha_t) I)`
    (the unrolled forward process of §22 of the notes, Ho et al. eq. 4).

    Args:
      schedule: :class:`Schedule`.
      x0: ``(B, d)`` clean points.
      t: scalar or ``(B,)`` integer steps in ``1..T``.

    Returns:
      ``(mean, var)``: ``(B, d)`` and ``(B,)`` (the isotropic variance).
    """
    schedule = _check_schedule(schedule)
    x0 = _validate.points("x0", x0)
    t = _validate.time_steps(t, schedule.betas.shape[0], x0.shape[0])
    ab = _abar(schedule, t)
    return jnp.sqrt(ab)[:, None] * x0, 1.0 - ab


def q_sample(schedule, x0, t, *, key):
    r"""Draw :math:`x_t = \sqrt{\bar\alpha_t}\, x_0 + \sqrt{1-\bar\alpha_t}\,\epsilon`,
    :math:`\epsilon \sim \mathcal{N}(0, I)`.

    Args:
      schedule: :class:`Schedule`.
      x0: ``(B, d)``.
      t: scalar or ``(B,)`` integer steps in ``1..T``.
      key: PRNG key (keyword-only).

    Returns:
      ``(x_t, eps)``, both ``(B, d)``.
    """
    _validate.key("key", key)
    mean, var = forward_marginal(schedule, x0, t)
    eps = core.random_normal(key, mean.shape, mean.dtype)
    return mean + jnp.sqrt(var)[:, None] * eps, eps


def q_step(schedule, x_prev, t, *, key):
    r"""One forward step :math:`x_t \sim q(x_t \mid x_{t-1}) = \mathcal{N}(\sqrt{1-\beta_t}\, x_{t-1}, \beta_t I)`
    (§22 of the notes, Ho et al. eq. 2).

    Args:
      schedule: :class:`Schedule`.
      x_prev: ``(B, d)`` the state :math:`x_{t-1}`.
      t: scalar or ``(B,)`` integer steps in ``1..T``.
      key: PRNG key (keyword-only).

    Returns:
      ``(B, d)`` :math:`x_t`.
    """
    _validate.key("key", key)
    schedule = _check_schedule(schedule)
    x_prev = _validate.points("x_prev", x_prev)
    t = _validate.time_steps(t, schedule.betas.shape[0], x_prev.shape[0])
    beta = schedule.betas[t - 1][:, None]
    z = core.random_normal(key, x_prev.shape, x_prev.dtype)
    return jnp.sqrt(1.0 - beta) * x_prev + jnp.sqrt(beta) * z


def q_posterior(schedule, x0, xt, t):
    r"""Mean and variance of the forward posterior :math:`q(x_{t-1} \mid x_t, x_0)` (Ho et al. eqs. 6-7):

    .. math::

        \tilde\mu_t = \frac{\sqrt{\bar\alpha_{t-1}}\,\beta_t}{1-\bar\alpha_t} x_0
                    + \frac{\sqrt{\alpha_t}(1-\bar\alpha_{t-1})}{1-\bar\alpha_t} x_t ,
        \qquad
        \tilde\beta_t = \frac{1-\bar\alpha_{t-1}}{1-\bar\alpha_t}\,\beta_t ,

    with :math:`\bar\alpha_0 = 1` (so at :math:`t = 1` the posterior is a point mass at :math:`x_0`).

    Returns:
      ``(mean, var)``: ``(B, d)`` and ``(B,)``.
    """
    schedule, x0, xt, t = _check_pair(schedule, "x0", x0, "xt", xt, t)
    ab, ab_prev = _abar(schedule, t), _abar(schedule, t - 1)
    beta, alpha = schedule.betas[t - 1], schedule.alphas[t - 1]
    c0 = jnp.sqrt(ab_prev) * beta / (1.0 - ab)
    ct = jnp.sqrt(alpha) * (1.0 - ab_prev) / (1.0 - ab)
    return c0[:, None] * x0 + ct[:, None] * xt, (1.0 - ab_prev) / (1.0 - ab) * beta


def _reverse_mean(schedule, xt, t, eps):
    ab = _abar(schedule, t)
    beta, alpha = schedule.betas[t - 1], schedule.alphas[t - 1]
    coef = beta / jnp.sqrt(1.0 - ab)
    return (xt - coef[:, None] * eps) / jnp.sqrt(alpha)[:, None]


def reverse_mean(schedule, xt, t, eps):
    r"""The reverse-step mean :math:`\mu_t` of §22 of the notes (Ho et al. eq. 11):

    .. math::

        \mu_t(x_t, \epsilon) = \frac{1}{\sqrt{\alpha_t}}\Big(x_t
        - \frac{\beta_t}{\sqrt{1-\bar\alpha_t}}\,\epsilon\Big).

    With the true noise :math:`\epsilon` of :math:`x_t` it equals
    :math:`\tilde\mu_t(x_t, x_0)` of :func:`q_posterior`. The notes' *sampling
    algorithm* prints :math:`\sqrt{1-\alpha_t}` instead of
    :math:`\sqrt{1-\bar\alpha_t}` in the denominator; that is a typo (it does not
    match their own :math:`\mu_t`), and this function uses :math:`\bar\alpha_t`.

    Args:
      schedule: :class:`Schedule`.
      xt: ``(B, d)``.
      t: scalar or ``(B,)`` integer steps.
      eps: ``(B, d)`` (predicted) noise.

    Returns:
      ``(B, d)``.
    """
    schedule, xt, eps, t = _check_pair(schedule, "xt", xt, "eps", eps, t)
    return _reverse_mean(schedule, xt, t, eps)


_SIGMA_KINDS = ("beta", "posterior")


def _sigmas(schedule, kind):
    if kind == "beta":
        return jnp.sqrt(schedule.betas)
    ab_prev = jnp.concatenate([jnp.ones((1,), schedule.alpha_bars.dtype), schedule.alpha_bars[:-1]])
    return jnp.sqrt((1.0 - ab_prev) / (1.0 - schedule.alpha_bars) * schedule.betas)


def sigmas(schedule, kind: str = "beta") -> Array:
    r"""Reverse-step noise scales :math:`\sigma_{1..T}` (the notes leave them open).

    ``"beta"``: :math:`\sigma_t^2 = \beta_t`; ``"posterior"``:
    :math:`\sigma_t^2 = \tilde\beta_t` (:func:`q_posterior`). Ho et al. report
    similar samples for both.

    Returns:
      ``(T,)``.
    """
    schedule = _check_schedule(schedule)
    _validate.choice("kind", kind, _SIGMA_KINDS)
    return _sigmas(schedule, kind)


def kl_weight(schedule, t, sigma2):
    r"""The weight :math:`\lambda_t` in :math:`D_{KL}(q(x_{t-1}\mid x_t,x_0) \,\|\, p_\theta(x_{t-1}\mid x_t))
    = \lambda_t \|\epsilon - \epsilon_\theta(x_t, t)\|^2`:

    .. math:: \lambda_t = \frac{\beta_t^2}{2\sigma_t^2\,\alpha_t\,(1-\bar\alpha_t)} ,

    valid when :math:`p_\theta` has variance :math:`\sigma_t^2 = \tilde\beta_t`
    (then the trace and log-det terms of the KL vanish). The notes print
    :math:`\beta_t^2 / (2\sigma^2\alpha_{t+1}(1-\alpha_t))`, which has the wrong
    :math:`\alpha` index and :math:`\alpha_t` where :math:`\bar\alpha_t` belongs.

    Args:
      schedule: :class:`Schedule`.
      t: scalar or ``(B,)`` integer steps.
      sigma2: scalar or ``(B,)`` finite positive :math:`\sigma_t^2` (a scalar
        hyperparameter: integer values such as ``1`` are accepted).

    Returns:
      array of the broadcast shape of ``t`` and ``sigma2``.
    """
    schedule = _check_schedule(schedule)
    t = jnp.asarray(t)
    _validate.time_steps(t, schedule.betas.shape[0], t.shape[0] if t.ndim == 1 else 1)
    sigma2 = jnp.asarray(sigma2)
    if not (jnp.issubdtype(sigma2.dtype, jnp.floating) or jnp.issubdtype(sigma2.dtype, jnp.integer)):
        raise ValueError(f"sigma2 must be real; got dtype {sigma2.dtype}")
    if sigma2.ndim > 1 or (sigma2.ndim == 1 and t.ndim == 1 and sigma2.shape != t.shape):
        raise ValueError(f"sigma2 must be a scalar or have the shape of t {t.shape}; got {sigma2.shape}")
    if _concrete(sigma2) and not bool(np.all(np.isfinite(np.asarray(sigma2)) & (np.asarray(sigma2) > 0))):
        raise ValueError("sigma2 must be finite and > 0")
    beta, alpha, ab = schedule.betas[t - 1], schedule.alphas[t - 1], _abar(schedule, t)
    return beta**2 / (2.0 * sigma2 * alpha * (1.0 - ab))


# ---------------------------------------------------------------------------
# The simplified loss
# ---------------------------------------------------------------------------


def _denoising_loss(eps_fn, params, schedule, x0, t, eps):
    ab = _abar(schedule, t)[:, None]
    xt = jnp.sqrt(ab) * x0 + jnp.sqrt(1.0 - ab) * eps
    pred = eps_fn(params, schedule, xt, t)
    return jnp.mean(jnp.sum((eps - pred) ** 2, axis=-1))


def _check_pair(schedule, name_a, a, name_b, b, t):
    """A schedule, two ``(B, d)`` point sets of one shape and ``B`` time steps, checked."""
    schedule = _check_schedule(schedule)
    a = _validate.points(name_a, a)
    b = _validate.points(name_b, b, a.shape[1])
    if b.shape != a.shape:
        raise ValueError(f"{name_b} must have the shape of {name_a} {a.shape}; got {b.shape}")
    return schedule, a, b, _validate.time_steps(t, schedule.betas.shape[0], a.shape[0])


def _check_loss(eps_fn, schedule, x0):
    if not callable(eps_fn):
        raise ValueError("eps_fn must be callable as eps_fn(params, schedule, x, t)")
    return _check_schedule(schedule), _validate.points("x0", x0)


def denoising_loss(eps_fn: Callable, params, schedule, x0, t, eps) -> Array:
    r"""The simplified loss at given :math:`(x_0, t, \epsilon)` (§22 of the notes; Ho et al. eq. 14):

    .. math:: \frac1B\sum_b \big\|\epsilon_b - \epsilon_\theta(\sqrt{\bar\alpha_{t_b}}\, x_{0,b}
              + \sqrt{1-\bar\alpha_{t_b}}\,\epsilon_b,\; t_b)\big\|^2 .

    Args:
      eps_fn: noise predictor ``eps_fn(params, schedule, x, t) -> (B, d)``.
      params: its parameters (a pytree; the data set for :func:`ideal_epsilon`).
      schedule: :class:`Schedule`.
      x0: ``(B, d)`` clean points.
      t: scalar or ``(B,)`` integer steps.
      eps: ``(B, d)`` the noise.

    Returns:
      Scalar.
    """
    schedule, x0 = _check_loss(eps_fn, schedule, x0)
    eps = _validate.points("eps", eps, x0.shape[1])
    if eps.shape != x0.shape:
        raise ValueError(f"eps must have the shape of x0 {x0.shape}; got {eps.shape}")
    t = _validate.time_steps(t, schedule.betas.shape[0], x0.shape[0])
    return _denoising_loss(eps_fn, params, schedule, x0, t, eps)


def simplified_loss(eps_fn: Callable, params, schedule, x0, *, key) -> Array:
    r"""Monte-Carlo simplified loss, the training objective of the notes' algorithm:
    :math:`t \sim \mathcal{U}\{1..T\}` and :math:`\epsilon \sim \mathcal{N}(0, I)`
    drawn independently for each row of ``x0``, then :func:`denoising_loss`.

    Args:
      eps_fn, params, schedule: as in :func:`denoising_loss`.
      x0: ``(B, d)`` clean points.
      key: PRNG key (keyword-only).

    Returns:
      Scalar.
    """
    _validate.key("key", key)
    schedule, x0 = _check_loss(eps_fn, schedule, x0)
    kt, ke = jax.random.split(key)
    t = jax.random.randint(kt, (x0.shape[0],), 1, schedule.betas.shape[0] + 1)
    eps = core.random_normal(ke, x0.shape, x0.dtype)
    return _denoising_loss(eps_fn, params, schedule, x0, t, eps)


# ---------------------------------------------------------------------------
# The ideal denoiser: a log-sum-exp energy
# ---------------------------------------------------------------------------


@jax.jit
def _ideal_sim(data, schedule, x, t):
    r"""``(B, N)`` similarities :math:`-\|x_b - \sqrt{\bar\alpha_t} x_i\|^2 / (2(1-\bar\alpha_t))`."""
    ab = _abar(schedule, t)[:, None]  # (B, 1)
    diff = x[:, None, :] - jnp.sqrt(ab)[:, :, None] * data[None, :, :]  # (B, N, d)
    return -jnp.sum(diff**2, axis=-1) / (2.0 * (1.0 - ab))


def _check_ideal(data, schedule, x, t):
    schedule = _check_schedule(schedule)
    data = _validate.points("data", data)
    x = _validate.points("x", x, data.shape[1])
    t = _validate.time_steps(t, schedule.betas.shape[0], x.shape[0])
    return data, schedule, x, t


def sim(data, schedule, x, t) -> Array:
    r"""The similarities :math:`\mathrm{sim}(x_b, x_i) = -\|x_b - \sqrt{\bar\alpha_t}\, x_i\|^2 / (2(1-\bar\alpha_t))`,
    ``(B, N)``: children are the noisy points, parents the scaled training points (arguments as
    :func:`energy`).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import diffusion
      >>> schedule = diffusion.linear_schedule(10, 1e-3, 0.2)
      >>> diffusion.sim(
      ...     jnp.ones((4, 2)), schedule, jnp.zeros((3, 2)), jnp.array([1, 5, 10])
      ... ).shape  # (B, N)
      (3, 4)
    """
    return _ideal_sim(*_check_ideal(data, schedule, x, t))


def energy(data, schedule, x, t) -> Array:
    r"""The energy of the noised empirical distribution: a log-sum-exp energy.

    .. math::

        E_t(x) = -\sum_{b=1}^{B} \ln \sum_{i=1}^{N}
        \exp\Big(-\frac{\|x_b - \sqrt{\bar\alpha_t}\, x_i\|^2}{2(1-\bar\alpha_t)}\Big)

    Children: the noisy points :math:`x_b`; parents: the scaled training points
    :math:`\sqrt{\bar\alpha_t} x_i`; :math:`-\ln p_t(x_b)` equals the
    :math:`b`-th term plus :math:`\ln N + \frac d2 \ln(2\pi(1-\bar\alpha_t))`
    (see :func:`ideal_log_density`). Built on :func:`lse_energy.core.energy`.

    Args:
      data: ``(N, d)`` training points :math:`x_i`.
      schedule: :class:`Schedule`.
      x: ``(B, d)`` noisy points.
      t: scalar or ``(B,)`` integer steps in ``1..T``.

    Returns:
      Scalar.

    Examples:
      Two training points at the origin and three noisy points there too: each child sees two
      equally near parents, :math:`E = -3 \ln 2`.

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import diffusion
      >>> schedule = diffusion.linear_schedule(10, 1e-3, 0.2)  # T = 10 steps
      >>> data, x = jnp.zeros((2, 2)), jnp.zeros((3, 2))
      >>> round(float(diffusion.energy(data, schedule, x, 5)), 3)
      -2.079
    """
    data, schedule, x, t = _check_ideal(data, schedule, x, t)
    return core.energy(_ideal_sim(data, schedule, x, t))


def ideal_log_density(data, schedule, x, t) -> Array:
    r""":math:`\ln p_t(x_b)` of :math:`p_t = \frac1N\sum_i \mathcal{N}(\sqrt{\bar\alpha_t}x_i, (1-\bar\alpha_t)I)`.

    Returns:
      ``(B,)``: :math:`\mathrm{LSE}_i\,\mathrm{sim} - \ln N - \frac d2\ln(2\pi(1-\bar\alpha_t))`.
    """
    data, schedule, x, t = _check_ideal(data, schedule, x, t)
    ab = _abar(schedule, t)
    n, d = data.shape
    lse = core.logsumexp(_ideal_sim(data, schedule, x, t))
    return lse - jnp.log(n) - 0.5 * d * jnp.log(2 * jnp.pi * (1.0 - ab))


def _ideal_denoiser(data, schedule, x, t):
    return core.weights(_ideal_sim(data, schedule, x, t)) @ data


def ideal_score(data, schedule, x, t) -> Array:
    r"""The score :math:`\nabla_x \ln p_t(x) = -\nabla_x E_t(x)` in closed form:

    .. math::

        \begin{aligned}
        \nabla \ln p_t(x_b) &= \sum_{i=1}^N w_{bi}\,
        \frac{\sqrt{\bar\alpha_t}\, x_i - x_b}{1-\bar\alpha_t}, \\
        w_{bi} &= \mathrm{softmax}_i\Big(-\frac{\|x_b - \sqrt{\bar\alpha_t} x_i\|^2}{2(1-\bar\alpha_t)}\Big),
        \end{aligned}

    eq. (4) of Tschantz (2025) with :math:`\partial_{x}\mathrm{sim} =
    (\sqrt{\bar\alpha_t} x_i - x)/(1-\bar\alpha_t)`; the weights are
    :func:`lse_energy.core.weights`.

    Returns:
      ``(B, d)``.
    """
    data, schedule, x, t = _check_ideal(data, schedule, x, t)
    ab = _abar(schedule, t)[:, None]
    w = core.weights(_ideal_sim(data, schedule, x, t))
    return (jnp.sqrt(ab) * (w @ data) - x) / (1.0 - ab)


def ideal_denoiser(data, schedule, x, t) -> Array:
    r"""The posterior mean :math:`\mathbb{E}[x_0 \mid x_t = x_b] = \sum_i w_{bi}\, x_i`
    (weights of :func:`ideal_score`), i.e. Tweedie's formula
    :math:`(x_b + (1-\bar\alpha_t)\nabla\ln p_t(x_b))/\sqrt{\bar\alpha_t}`.

    Returns:
      ``(B, d)``.
    """
    data, schedule, x, t = _check_ideal(data, schedule, x, t)
    return _ideal_denoiser(data, schedule, x, t)


def ideal_epsilon(data, schedule, x, t) -> Array:
    r"""The noise prediction implied by the ideal denoiser,
    :math:`\epsilon^*(x_b, t) = \mathbb{E}[\epsilon \mid x_t = x_b]
    = (x_b - \sqrt{\bar\alpha_t}\,\mathbb{E}[x_0 \mid x_b]) / \sqrt{1-\bar\alpha_t}
    = -\sqrt{1-\bar\alpha_t}\,\nabla\ln p_t(x_b)`.

    It minimises :func:`denoising_loss` over all functions of :math:`(x_t, t)`
    when :math:`x_0` is drawn uniformly from ``data``. It has the ``eps_fn``
    signature with ``params = data``.

    Returns:
      ``(B, d)``.
    """
    data, schedule, x, t = _check_ideal(data, schedule, x, t)
    ab = _abar(schedule, t)[:, None]
    return (x - jnp.sqrt(ab) * _ideal_denoiser(data, schedule, x, t)) / jnp.sqrt(1.0 - ab)


def effective_beta(schedule, t) -> Array:
    r"""Inverse temperature of the ideal denoiser read as a Hopfield update,
    :math:`\beta_{\mathrm{eff}}(t) = \sqrt{\bar\alpha_t}/(1-\bar\alpha_t)`.

    Expanding the square, :math:`\mathrm{sim}(x, x_i) = \beta_{\mathrm{eff}}\, x^\top x_i
    - \beta_{\mathrm{eff}}\sqrt{\bar\alpha_t}\,\|x_i\|^2/2 + (\text{terms without } i)`,
    so for training points of equal norm the denoiser is the modern Hopfield
    update :math:`\sum_i \mathrm{softmax}_i(\beta_{\mathrm{eff}}\, x^\top x_i)\, x_i`.

    Args:
      schedule: :class:`Schedule`.
      t: integer steps (any shape) in ``1..T``.

    Returns:
      array of the shape of ``t``.
    """
    schedule = _check_schedule(schedule)
    t = jnp.asarray(t)
    _validate.time_steps(t.reshape(-1), schedule.betas.shape[0], t.size)
    ab = _abar(schedule, t)
    return jnp.sqrt(ab) / (1.0 - ab)


# ---------------------------------------------------------------------------
# Ancestral sampling
# ---------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("eps_fn", "shape", "sigma", "return_path"))
def _sample(eps_fn, params, schedule, key, shape, sigma, return_path):
    n_steps = schedule.betas.shape[0]
    dtype = schedule.betas.dtype
    k_init, k_steps = jax.random.split(key)
    x_init = core.random_normal(k_init, shape, dtype)
    sig = _sigmas(schedule, sigma)
    step_keys = jax.random.split(k_steps, n_steps)
    ts = jnp.arange(n_steps, 0, -1)

    def step(x, inputs):
        t, k = inputs
        tb = jnp.full((shape[0],), t)
        eps = eps_fn(params, schedule, x, tb)
        z = jnp.where(t > 1, core.random_normal(k, shape, dtype), 0.0)
        x_new = _reverse_mean(schedule, x, tb, eps) + sig[t - 1] * z
        return x_new, (x_new if return_path else None)

    x0, path = jax.lax.scan(step, x_init, (ts, step_keys))
    if return_path:
        return x0, jnp.concatenate([x_init[None], path], axis=0)
    return x0


def sample(
    eps_fn: Callable, params, schedule, n_samples: int, dim: int, *, key, sigma: str = "beta", return_path: bool = False
):
    r"""Ancestral DDPM sampling (the notes' sampling algorithm, Ho et al. Algorithm 2):

    :math:`x_T \sim \mathcal{N}(0, I)`, then for :math:`t = T, \dots, 1`

    .. math::

        \begin{aligned}
        x_{t-1} &= \frac{1}{\sqrt{\alpha_t}}\Big(x_t - \frac{\beta_t}{\sqrt{1-\bar\alpha_t}}
        \epsilon_\theta(x_t, t)\Big) + \sigma_t z, \\
        z &\sim \mathcal{N}(0, I) \text{ if } t > 1 \text{ else } z = 0 .
        \end{aligned}

    Note :math:`\sqrt{1-\bar\alpha_t}`, not the notes' :math:`\sqrt{1-\alpha_t}`
    (see :func:`reverse_mean`). Jitted; one ``lax.scan`` over the steps.

    Args:
      eps_fn: noise predictor ``eps_fn(params, schedule, x, t) -> (B, d)``, a
        hashable function (static argument), e.g. :func:`ideal_epsilon` or
        ``lse_energy.experiments.diffusion_mlp.epsilon``.
      params: its parameters (``data`` for :func:`ideal_epsilon`).
      schedule: :class:`Schedule`.
      n_samples, dim: the samples are ``(n_samples, dim)``.
      key: PRNG key (keyword-only).
      sigma: ``"beta"`` or ``"posterior"`` (:func:`sigmas`).
      return_path: also return the whole chain ``(T + 1, n_samples, dim)``,
        from :math:`x_T` (index 0) to :math:`x_0` (index T).

    Returns:
      ``(n_samples, dim)`` samples :math:`x_0`, or ``(x_0, path)``.
    """
    _validate.key("key", key)
    schedule = _check_schedule(schedule)
    if not callable(eps_fn):
        raise ValueError("eps_fn must be callable as eps_fn(params, schedule, x, t)")
    n_samples = _validate.count("n_samples", n_samples, 1)
    dim = _validate.count("dim", dim, 1)
    _validate.choice("sigma", sigma, _SIGMA_KINDS)
    return _sample(eps_fn, params, schedule, key, (n_samples, dim), sigma, bool(return_path))


def _ideal_eps_inner(data, schedule, x, t):
    ab = _abar(schedule, t)[:, None]
    return (x - jnp.sqrt(ab) * _ideal_denoiser(data, schedule, x, t)) / jnp.sqrt(1.0 - ab)


def ideal_sample(data, schedule, n_samples: int, *, key, sigma: str = "beta", return_path: bool = False):
    r"""Ancestral sampling (:func:`sample`) with the closed-form :func:`ideal_epsilon`.

    This is exact DDPM sampling of the model whose noise predictor is the
    minimiser of the simplified loss on ``data``. Its last step returns
    :math:`x_0 = \mathbb{E}[x_0 \mid x_1]` exactly (because
    :math:`1-\bar\alpha_1 = \beta_1`), a softmax average at inverse temperature
    :func:`effective_beta` :math:`\approx 1/\beta_1`, i.e. (almost always) one
    training point.

    Args:
      data: ``(N, d)`` training points.
      schedule: :class:`Schedule`.
      n_samples: ``>= 1``.
      key: PRNG key (keyword-only).
      sigma, return_path: as in :func:`sample`.

    Returns:
      ``(n_samples, d)`` samples (and the path if asked).
    """
    _validate.key("key", key)
    data = _validate.points("data", data)
    return sample(
        _ideal_eps_inner, data, schedule, n_samples, data.shape[1], key=key, sigma=sigma, return_path=return_path
    )
