r"""Switching linear dynamics as a log-sum-exp energy (§7 and Appendix B of Tschantz 2025).

A trajectory :math:`x_1, \dots, x_T \in \mathbb{R}^d` is explained by :math:`K` linear
dynamical modes :math:`x_{t+1} \approx A_k x_t + b_k` with Gaussian noise
:math:`\Sigma_k` and mixing weight :math:`\pi_k`. Every transition is a child
:math:`x_{t+1}` whose candidate parents are the :math:`K` modes applied to
:math:`x_t`, with residual :math:`r_{t,k} = x_{t+1} - A_k x_t - b_k` and similarity

.. math::

    \begin{aligned}
    \mathrm{sim}_{t,k} &= \ln \pi_k - \tfrac12 \ln|2\pi\Sigma_k| \\
    &\quad - \tfrac12\, r_{t,k}^\top \Sigma_k^{-1} r_{t,k}, \\
    E &= -\sum_{t=1}^{T-1} \ln \sum_{k=1}^K \exp \mathrm{sim}_{t,k}
    \quad \text{(eq. 17)}.
    \end{aligned}

The seed prints sim without the log-determinant term; that form is available with
``normalised=False``. With the normaliser, :math:`E` is exactly the negative
log-likelihood :math:`-\ln p(x_{2:T} \mid x_1)` of a mixture of linear regressions
(equivalently an autoregressive HMM whose transition rows all equal :math:`\pi`),
which is what makes the covariances learnable: without it the energy decreases
towards 0 as :math:`\Sigma_k \to \infty` and has no minimiser in :math:`\Sigma`.

The gradients printed in §7 for :math:`x_{t+1}` and :math:`x_t` have the wrong sign,
and Appendix B's :math:`\partial \mathrm{sim}/\partial x_t` reads
":math:`\Delta_k^\top r`" where it should be :math:`A_k^\top \Sigma_k^{-1} r`; the
functions here implement the corrected forms (see each docstring).

The model treats every transition independently given the parameters: the mode of
step :math:`t` does not depend on the mode of step :math:`t-1`.

Input dtypes. The trajectory ``x``, the start state ``x0``, every parameter
and the responsibilities ``resp`` are continuous and must have a floating
dtype: an integer or boolean array raises ``ValueError`` naming it (cast
explicitly). Discrete arguments keep their natural types: ``missing`` is an
integer index array or a boolean mask, counts (``n_components``,
``n_steps``, ``max_iter``, ...) are integers, and scalar hyperparameters
(``reg_covar``, ``tol``, ``step_size``) may be any finite real number.
"""

from __future__ import annotations

import functools
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "Params",
    "residuals",
    "sim",
    "energy",
    "responsibilities",
    "grad_next",
    "grad_prev",
    "grad_x",
    "grad_A",
    "grad_b",
    "covariance_penalty",
    "objective",
    "m_step",
    "em_step",
    "init_params",
    "fit",
    "predict",
    "sample",
    "smoothness_bound",
    "impute",
]


class Params(NamedTuple):
    r"""Parameters of :math:`K` linear dynamical modes in :math:`\mathbb{R}^d`.

    Mode :math:`k` proposes :math:`x_{t+1} \sim \mathcal{N}(A_k x_t + b_k, \Sigma_k)`
    and is chosen with probability :math:`\pi_k`, independently at every step.

    Attributes:
      weights: ``(K,)`` mixing weights :math:`\pi_k > 0`, :math:`\sum_k \pi_k = 1`.
      A: ``(K, d, d)`` transition matrices :math:`A_k`.
      b: ``(K, d)`` offsets (drifts) :math:`b_k`.
      covariances: ``(K, d, d)`` symmetric positive-definite noise
        covariances :math:`\Sigma_k`.
    """

    weights: Array
    A: Array
    b: Array
    covariances: Array


# ---------------------------------------------------------------------------
# Validation (public boundary only)
# ---------------------------------------------------------------------------


_concrete = _validate.is_concrete


def _check_x(x) -> Array:
    x = _validate.points("x", x)
    if x.shape[0] < 2:
        raise ValueError(f"x must hold at least two time steps (T >= 2); got T = {x.shape[0]}")
    return x


def _check_params(params, d: int | None = None) -> Params:
    shapes = {"weights": "K", "A": "K d d", "b": "K d", "covariances": "K d d"}
    params = _validate.params(params, Params, shapes, None if d is None else {"d": d})[0]
    _validate.simplex("params.weights", params.weights)
    _validate.spd_stack("params.covariances", params.covariances)
    return params


# ---------------------------------------------------------------------------
# Energy
# ---------------------------------------------------------------------------


def _residuals(params: Params, x: Array) -> Array:
    pred = jnp.einsum("kij,tj->tki", params.A, x[:-1]) + params.b[None]
    return x[1:, None, :] - pred


def _precision_times(params: Params, v: Array) -> Array:
    """:math:`\\Sigma_k^{-1} v_{t,k}` for ``v: (T-1, K, d)`` via Cholesky solves."""
    L = jnp.linalg.cholesky(params.covariances)
    solve = jax.vmap(lambda Lk, vk: jax.scipy.linalg.cho_solve((Lk, True), vk.T).T, in_axes=(0, 1), out_axes=1)
    return solve(L, v)


@partial(jax.jit, static_argnums=2)
def _sim(params: Params, x: Array, normalised: bool) -> Array:
    r = _residuals(params, x)
    quad = jnp.einsum("tki,tki->tk", r, _precision_times(params, r))
    s = jnp.log(params.weights)[None, :] - 0.5 * quad
    if normalised:
        d = x.shape[1]
        L = jnp.linalg.cholesky(params.covariances)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
        s = s - 0.5 * (d * jnp.log(2.0 * jnp.pi) + logdet)[None, :]
    return s


def residuals(params: Params, x) -> Array:
    r"""Residuals :math:`r_{t,k} = x_{t+1} - A_k x_t - b_k`.

    Args:
      params: :class:`Params` with ``K`` modes in ``d`` dimensions.
      x: ``(T, d)`` trajectory.

    Returns:
      ``(T-1, K, d)`` array; row ``t`` (0-based) is the transition ``x[t] -> x[t+1]``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.residuals(params, x).shape  # (T - 1, K, d)
      (5, 2, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    return _residuals(params, x)


def sim(params: Params, x, *, normalised: bool = True) -> Array:
    r"""Similarities :math:`\mathrm{sim}_{t,k}` of child :math:`x_{t+1}` to mode :math:`k` at :math:`x_t`.

    .. math::

        \mathrm{sim}_{t,k} = \ln\pi_k - [\tfrac12 \ln|2\pi\Sigma_k|]
            - \tfrac12 r_{t,k}^\top \Sigma_k^{-1} r_{t,k}

    The bracketed log-normaliser is included when ``normalised=True`` (the
    default; needed for learning :math:`\Sigma_k`) and omitted with
    ``normalised=False``, which is the form printed in §7 of the seed.

    Args:
      params: :class:`Params`.
      x: ``(T, d)`` trajectory.
      normalised: include :math:`-\tfrac12 \ln|2\pi\Sigma_k|`.

    Returns:
      ``(T-1, K)`` array.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.sim(params, x).shape
      (5, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    return _sim(params, x, normalised)


def energy(params: Params, x, *, normalised: bool = True) -> Array:
    r"""The SLDS energy, eq. (17): :math:`E = -\sum_{t=1}^{T-1} \ln \sum_k \exp \mathrm{sim}_{t,k}`.

    With ``normalised=True`` this equals the negative conditional log-likelihood
    :math:`-\ln p(x_{2:T} \mid x_1)` of the mixture of linear dynamics; with
    ``normalised=False`` it is the normaliser-free form printed in the seed
    (which is :math:`\ge 0` and tends to 0 as every :math:`\Sigma_k \to \infty`).

    Args:
      params: :class:`Params`.
      x: ``(T, d)`` trajectory.
      normalised: see :func:`sim`.

    Returns:
      Scalar energy, built on :func:`lse_energy.core.energy`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> params = slds.Params(
      ...     jnp.ones(1), jnp.eye(2)[None], jnp.zeros((1, 2)), jnp.eye(2)[None]
      ... )
      >>> # stays put, as the one mode predicts: ln(2 pi) per transition
      >>> x = jnp.zeros((3, 2))
      >>> slds.sim(params, x).shape, round(float(slds.energy(params, x)), 3)
      ((2, 1), 3.676)
    """
    return core.energy(sim(params, x, normalised=normalised))


def responsibilities(params: Params, x, *, normalised: bool = True) -> Array:
    r"""Mode posteriors :math:`\alpha_{t,k} = \mathrm{softmax}_k\, \mathrm{sim}_{t,k}` (§7).

    Returns:
      ``(T-1, K)`` array whose rows sum to 1.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> a = slds.responsibilities(params, x)
      >>> a.shape, bool(jnp.allclose(a.sum(-1), 1.0))
      ((5, 2), True)
    """
    return core.weights(sim(params, x, normalised=normalised))


# ---------------------------------------------------------------------------
# Analytic gradients
# ---------------------------------------------------------------------------


def _alpha_and_scaled_residual(params, x, normalised):
    r = _residuals(params, x)
    alpha = core.weights(_sim(params, x, normalised))
    return alpha, _precision_times(params, r)  # (T-1, K), (T-1, K, d)


def grad_next(params: Params, x, *, normalised: bool = True) -> Array:
    r"""Child part of eq. (4): :math:`\partial E / \partial x_{t+1}` through term :math:`t`.

    .. math::

        \frac{\partial E}{\partial x_{t+1}} = \sum_k \alpha_{t,k}\, \Sigma_k^{-1} r_{t,k},
        \qquad\text{i.e.}\qquad
        -\frac{\partial E}{\partial x_{t+1}} = -\sum_k \alpha_{t,k}\, \Sigma_k^{-1} r_{t,k}.

    §7 of the seed prints :math:`-\partial E/\partial x_{t+1} = +\sum_k \alpha_{t,k}
    \Sigma_k^{-1} r_{t,k}`: the sign is wrong, since
    :math:`\partial \mathrm{sim}_{t,k}/\partial x_{t+1} = -\Sigma_k^{-1} r_{t,k}`.
    The normaliser does not depend on :math:`x`, but it changes
    :math:`\alpha` unless all :math:`|\Sigma_k|` are equal.

    Args:
      params: :class:`Params`.
      x: ``(T, d)``.
      normalised: see :func:`sim`.

    Returns:
      ``(T-1, d)``; row ``t`` is the gradient w.r.t. ``x[t+1]`` from the
      transition ``x[t] -> x[t+1]`` only.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.grad_next(params, x).shape
      (5, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    alpha, u = _alpha_and_scaled_residual(params, x, normalised)
    return jnp.einsum("tk,tki->ti", alpha, u)


def grad_prev(params: Params, x, *, normalised: bool = True) -> Array:
    r"""Parent part of eq. (4): :math:`\partial E / \partial x_t` through term :math:`t`.

    .. math::

        \frac{\partial E}{\partial x_t} = -\sum_k \alpha_{t,k}\, A_k^\top \Sigma_k^{-1} r_{t,k},
        \qquad\text{i.e.}\qquad
        -\frac{\partial E}{\partial x_t} = +\sum_k \alpha_{t,k}\, A_k^\top \Sigma_k^{-1} r_{t,k}.

    §7 prints :math:`-\partial E/\partial x_t = \sum_k \alpha_{t,k}(-A_k^\top\Sigma_k^{-1}) r_{t,k}`
    (wrong sign), and Appendix B prints :math:`\partial\mathrm{sim}/\partial x_t =
    \Delta_k^\top r` where the correct sim-derivative is
    :math:`A_k^\top \Sigma_k^{-1} r_{t,k}`.

    Returns:
      ``(T-1, d)``; row ``t`` is the gradient w.r.t. ``x[t]`` from the
      transition ``x[t] -> x[t+1]`` only.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.grad_prev(params, x).shape
      (5, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    alpha, u = _alpha_and_scaled_residual(params, x, normalised)
    return -jnp.einsum("tk,kji,tkj->ti", alpha, params.A, u)


def grad_x(params: Params, x, *, normalised: bool = True) -> Array:
    r"""Full :math:`\partial E / \partial x_t` for every state: eq. (4) with both roles.

    An interior state is the child of term :math:`t-1` and a parent in term
    :math:`t`, so

    .. math::

        \frac{\partial E}{\partial x_t}
        = \underbrace{\sum_k \alpha_{t-1,k} \Sigma_k^{-1} r_{t-1,k}}_{\text{child}}
          \; - \; \underbrace{\sum_k \alpha_{t,k} A_k^\top \Sigma_k^{-1} r_{t,k}}_{\text{parent}},

    with the child part absent for :math:`x_1` and the parent part absent for
    :math:`x_T`.

    Returns:
      ``(T, d)`` gradient of :func:`energy` w.r.t. ``x``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.grad_x(params, x).shape
      (6, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    alpha, u = _alpha_and_scaled_residual(params, x, normalised)
    child = jnp.einsum("tk,tki->ti", alpha, u)
    parent = -jnp.einsum("tk,kji,tkj->ti", alpha, params.A, u)
    zero = jnp.zeros((1, x.shape[1]), x.dtype)
    return jnp.concatenate([zero, child]) + jnp.concatenate([parent, zero])


def grad_A(params: Params, x, *, normalised: bool = True) -> Array:
    r""":math:`\partial E / \partial A_k = -\sum_t \alpha_{t,k} \Sigma_k^{-1} r_{t,k} x_t^\top` (§7, sign as printed).

    Returns:
      ``(K, d, d)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.grad_A(params, x).shape
      (2, 2, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    alpha, u = _alpha_and_scaled_residual(params, x, normalised)
    return -jnp.einsum("tk,tki,tj->kij", alpha, u, x[:-1])


def grad_b(params: Params, x, *, normalised: bool = True) -> Array:
    r""":math:`\partial E / \partial b_k = -\sum_t \alpha_{t,k} \Sigma_k^{-1} r_{t,k}` (§7 and Appendix B, sign as
    printed).

    Returns:
      ``(K, d)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> slds.grad_b(params, x).shape
      (2, 2)
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    alpha, u = _alpha_and_scaled_residual(params, x, normalised)
    return -jnp.einsum("tk,tki->ki", alpha, u)


# ---------------------------------------------------------------------------
# EM
# ---------------------------------------------------------------------------


def covariance_penalty(params: Params, reg_covar: float) -> Array:
    r"""The term :math:`\tfrac{\lambda}{2}\sum_k \mathrm{tr}\,\Sigma_k^{-1}` with :math:`\lambda` = ``reg_covar``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> params = slds.Params(
      ...     jnp.ones(1), jnp.eye(2)[None], jnp.zeros((1, 2)), jnp.eye(2)[None]
      ... )
      >>> round(float(slds.covariance_penalty(params, 0.5)), 3)  # 0.5 / 2 * tr I
      0.5
    """
    params = _check_params(params)
    _validate.nonnegative("reg_covar", reg_covar)
    return _penalty(params, reg_covar)


def _penalty(params, reg_covar):
    d = params.A.shape[1]
    inv = jnp.linalg.solve(
        params.covariances, jnp.broadcast_to(jnp.eye(d, dtype=params.covariances.dtype), params.covariances.shape)
    )
    return 0.5 * reg_covar * jnp.sum(jnp.trace(inv, axis1=-2, axis2=-1))


def objective(params: Params, x, *, reg_covar: float = 0.0) -> Array:
    r"""What EM decreases: :math:`E + \tfrac{\lambda}{2}\sum_k \mathrm{tr}\,\Sigma_k^{-1}`.

    :math:`E` is the normalised energy (17). The penalty, weighted by
    ``reg_covar`` :math:`=\lambda \ge 0`, is a prior on the precisions that
    keeps every :math:`\Sigma_k \succeq (\lambda / N_k) I` in the M-step; with
    ``reg_covar=0`` the objective is the energy itself.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> params = slds.Params(
      ...     jnp.ones(1), jnp.eye(2)[None], jnp.zeros((1, 2)), jnp.eye(2)[None]
      ... )
      >>> x = jnp.zeros((3, 2))
      >>> bool(jnp.allclose(slds.objective(params, x), slds.energy(params, x)))
      True
    """
    _validate.nonnegative("reg_covar", reg_covar)
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    return core.energy(_sim(params, x, True)) + _penalty(params, reg_covar)


def _m_step(x, resp, reg_covar):
    d = x.shape[1]
    z = jnp.concatenate([x[:-1], jnp.ones((x.shape[0] - 1, 1), x.dtype)], axis=1)  # (T-1, d+1)
    y = x[1:]
    nk = jnp.sum(resp, axis=0)  # (K,)
    G = jnp.einsum("tk,ti,tj->kij", resp, z, z)  # (K, d+1, d+1)
    C = jnp.einsum("tk,ti,tj->kij", resp, z, y)  # (K, d+1, d)
    W = jnp.swapaxes(jnp.linalg.solve(G, C), -1, -2)  # (K, d, d+1) = [A_k b_k]
    A, b = W[:, :, :d], W[:, :, d]
    r = y[:, None, :] - jnp.einsum("kij,tj->tki", W, z)
    S = jnp.einsum("tk,tki,tkj->kij", resp, r, r)
    cov = (S + reg_covar * jnp.eye(d, dtype=S.dtype)) / nk[:, None, None]
    cov = 0.5 * (cov + jnp.swapaxes(cov, -1, -2))
    return Params(nk / jnp.sum(nk), A, b, cov)


def m_step(x, resp, *, reg_covar: float = 0.0) -> Params:
    r"""Closed-form M-step given responsibilities :math:`\alpha_{t,k}`.

    With :math:`z_t = [x_t; 1]`, :math:`N_k = \sum_t \alpha_{t,k}` and
    :math:`W_k = [A_k\; b_k]`:

    .. math::

        \begin{aligned}
        W_k &= \Big(\sum_t \alpha_{t,k} x_{t+1} z_t^\top\Big) \\
        &\qquad \times \Big(\sum_t \alpha_{t,k} z_t z_t^\top\Big)^{-1}, \\
        \Sigma_k &= \frac{\sum_t \alpha_{t,k} r_{t,k} r_{t,k}^\top + \lambda I}{N_k}, \\
        \pi_k &= \frac{N_k}{\sum_j N_j}.
        \end{aligned}

    :math:`W_k` is weighted least squares (it does not depend on
    :math:`\Sigma_k`, because all output coordinates share the regressor
    :math:`z_t`); :math:`\Sigma_k` minimises the expected energy plus
    :func:`covariance_penalty`. Each mode needs :math:`N_k > 0` and
    :math:`\sum_t \alpha_{t,k} z_t z_t^\top` invertible.

    Args:
      x: ``(T, d)``, floating point and finite.
      resp: ``(T-1, K)`` non-negative responsibilities, floating point (an
        integer or boolean array, even a one-hot one, raises ``ValueError``:
        responsibilities are probabilities; cast them explicitly).
      reg_covar: :math:`\lambda \ge 0`.

    Returns:
      :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> new = slds.m_step(x, slds.responsibilities(params, x), reg_covar=1e-3)
      >>> new.A.shape, new.covariances.shape
      ((2, 2, 2), (2, 2, 2))
    """
    x = _check_x(x)
    _validate.nonnegative("reg_covar", reg_covar)
    resp = jnp.asarray(resp)
    if resp.ndim != 2 or resp.shape[0] != x.shape[0] - 1 or resp.shape[1] < 1:
        raise ValueError(f"resp must have shape (T-1, K) = ({x.shape[0] - 1}, K); got {resp.shape}")
    resp = _validate.float_array("resp", resp)
    if _concrete(resp):
        rn = np.asarray(resp)
        if np.any(rn < 0):
            raise ValueError("resp must be non-negative")
        if np.any(rn.sum(axis=0) <= 0):
            raise ValueError("resp: every mode needs a positive total responsibility N_k")
    return _m_step(x, resp.astype(x.dtype), reg_covar)


def _em_step(params, x, reg_covar):
    resp = core.weights(_sim(params, x, True))
    return _m_step(x, resp, reg_covar)


def em_step(params: Params, x, *, reg_covar: float = 0.0) -> Params:
    r"""One EM step on the normalised energy: E-step :math:`\alpha = \mathrm{softmax}_k\,\mathrm{sim}`, then
    :func:`m_step`.

    The result never has a larger :func:`objective` than ``params``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (8, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> new = slds.em_step(params, x, reg_covar=1e-3)
      >>> obj = lambda p: slds.objective(p, x, reg_covar=1e-3)
      >>> bool(obj(new) <= obj(params) + 1e-4)
      True
    """
    x = _check_x(x)
    _validate.nonnegative("reg_covar", reg_covar)
    params = _check_params(params, x.shape[1])
    return _em_step(params, x, reg_covar)


def _init_one(key, x, n_components, reg_covar):
    """Local-regression initialisation (see :func:`init_params`)."""
    T1, d = x.shape[0] - 1, x.shape[1]
    feats = jnp.concatenate([x[:-1], x[1:]], axis=1)
    m = max(3 * (d + 1), T1 // (2 * n_components))
    m = min(m, T1)
    anchors = jax.random.choice(key, T1, (n_components,), replace=False)
    dist = jnp.sum((feats[anchors][:, None, :] - feats[None, :, :]) ** 2, axis=-1)  # (K, T-1)
    _, idx = jax.lax.top_k(-dist, m)  # (K, m)
    resp = jnp.zeros((n_components, T1), x.dtype).at[jnp.arange(n_components)[:, None], idx].set(1.0).T
    p = _m_step(x, resp, reg_covar)
    # A local fit can have a tiny noise estimate; start every mode from the pooled scale.
    r = x[1:, None, :] - jnp.einsum("kij,tj->tki", p.A, x[:-1]) - p.b[None]
    best = jnp.min(jnp.sum(r**2, axis=-1), axis=1)  # best-mode squared residual per step
    scale = jnp.mean(best) / d + reg_covar / T1
    cov = jnp.broadcast_to(scale * jnp.eye(d, dtype=x.dtype), (n_components, d, d))
    w = jnp.full((n_components,), 1.0 / n_components, x.dtype)
    return Params(w, p.A, p.b, cov)


def init_params(x, n_components: int, *, key, reg_covar: float = 1e-6) -> Params:
    r"""Local-regression initialisation.

    ``n_components`` anchor transitions are drawn at random (from ``key``);
    mode :math:`k` is the least-squares fit of :math:`x_{t+1} \approx A x_t + b`
    on the :math:`m = \max(3(d+1), \lfloor (T-1)/2K \rfloor)` transitions nearest
    to anchor :math:`k` in :math:`(x_t, x_{t+1})` space. Mixing weights start
    uniform, and every covariance starts at the isotropic mean squared residual
    of the best-fitting mode.

    Args:
      x: ``(T, d)`` with ``T - 1 >= n_components``.
      n_components: ``K >= 1``.
      key: a ``jax.random`` key (keyword-only).
      reg_covar: see :func:`m_step`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> params.weights.shape, params.A.shape, params.b.shape
      ((2,), (2, 2, 2), (2, 2))
    """
    _validate.key("key", key)
    x = _check_x(x)
    _validate.nonnegative("reg_covar", reg_covar)
    _validate.count("n_components", n_components, 1)
    if n_components > x.shape[0] - 1:
        raise ValueError(f"n_components = {n_components} exceeds the number of transitions T-1 = {x.shape[0] - 1}")
    return _init_one(key, x, int(n_components), reg_covar)


# fit through _descent.em: the statistics an E-step hands the M-step are the parameters themselves,
# since em_step is the combined E/M step; the energy is the objective (17) plus the precision penalty.
def _objective_step(p, x, reg_covar):
    return -(core.energy(_sim(p, x, True)) + _penalty(p, reg_covar)), p


def _em_m_step(p, n, args):
    new = _em_step(p, *args)
    finite = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in new]
    return new, ~functools.reduce(jnp.logical_and, finite)  # a mode with a non-finite parameter


@functools.partial(jax.jit, static_argnames="n_components")
def _starts(keys, x, reg_covar, n_components):
    return jax.vmap(lambda k: _init_one(k, x, n_components, reg_covar))(keys)


def _raise_if_failed(failed):
    if failed[0] >= 0:
        raise ValueError(
            "every EM restart broke down (a mode lost all responsibility); try another key, more restarts or a larger"
            " reg_covar"
        )


def fit(
    x,
    n_components: int,
    *,
    key,
    max_iter: int = 100,
    tol: float = 1e-6,
    n_init: int = 4,
    reg_covar: float = 1e-6,
    progress: bool = False,
) -> core.FitResult:
    r"""Fit :math:`K` modes to a trajectory by EM on the normalised energy (17).

    Each of ``n_init`` restarts starts from :func:`init_params` with its own
    sub-key and runs :func:`em_step` until the objective falls by at most
    ``tol * (T-1)`` in one step, or ``max_iter`` steps. The restart with the
    lowest final :func:`objective` is returned. Jitted; the restarts run
    together under ``vmap``.

    Args:
      x: ``(T, d)`` trajectory.
      n_components: number of modes ``K >= 1``.
      key: ``jax.random`` key (keyword-only); the same key gives the same fit.
      max_iter: maximum number of EM steps per restart (``>= 1``).
      tol: stopping threshold on the per-transition decrease (``>= 0``).
      n_init: number of restarts (``>= 1``).
      reg_covar: :math:`\lambda \ge 0`, the precision prior of
        :func:`objective`; it adds :math:`\lambda / N_k` to the diagonal of
        every :math:`\Sigma_k` and keeps a mode that explains few, nearly
        collinear transitions from collapsing to a singular covariance.
      progress: show a ``tqdm.auto`` bar of the EM steps, out of ``max_iter``
        (the restarts run together; the bar reports the furthest one and
        stops where the last restart converged). With the bar, results agree
        with ``progress=False`` to round-off (see ``lse_energy._progress``).

    Returns:
      :class:`~lse_energy.core.FitResult`: the chosen restart's :class:`Params`,
      its objective before and after every EM step (``energies``, ``n_iter + 1``
      values), ``n_iter`` and ``converged`` (the ``tol`` rule stopped it); no
      ``extras``.

    Raises:
      ValueError: invalid arguments, or every restart broke down (a mode lost
        all its responsibility, giving non-finite parameters).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> # a random walk
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (30, 2)), axis=0)
      >>> slds.init_params(x, 2, key=jax.random.key(1)).A.shape
      (2, 2, 2)
      >>> result = slds.fit(x, 2, key=jax.random.key(1), max_iter=5, n_init=1)
      >>> bool(result.energies[-1] <= result.energies[0])
      True
    """
    _validate.key("key", key)
    x = _check_x(x)
    _validate.nonnegative("reg_covar", reg_covar)
    _validate.count("n_components", n_components, 1)
    if n_components > x.shape[0] - 1:
        raise ValueError(f"n_components = {n_components} exceeds the number of transitions T-1 = {x.shape[0] - 1}")
    _validate.count("max_iter", max_iter, 1)
    _validate.count("n_init", n_init, 1)
    _validate.nonnegative("tol", tol)
    reg = jnp.asarray(reg_covar, x.dtype)
    return _descent.em(
        lambda x, K, key, n_init: _starts(jax.random.split(key, n_init), x, reg, K),  # a split key even for one
        _objective_step,
        _em_m_step,
        x,
        int(n_components),
        key=key,
        max_iter=int(max_iter),
        tol=tol,
        n_init=int(n_init),
        data=(x, reg),
        args=(x, reg),
        n=x.shape[0] - 1,
        stop="decrease",
        on_failure=_raise_if_failed,
        label=f"SLDS EM ({int(n_init)} restarts)",
        progress=progress,
    )


def predict(params: Params, x, *, normalised: bool = True) -> Array:
    r"""Most probable mode of every transition, :math:`\arg\max_k \alpha_{t,k}`; ``(T-1,)`` ints.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (6, 2)), axis=0)
      >>> params = slds.init_params(x, 2, key=jax.random.key(1))
      >>> z = slds.predict(params, x)
      >>> z.shape, bool(jnp.all((z >= 0) & (z < 2)))
      ((5,), True)
    """
    return jnp.argmax(responsibilities(params, x, normalised=normalised), axis=1)


def sample(params: Params, x0, n_steps: int, *, key):
    r"""Draw a trajectory with i.i.d. modes :math:`z_t \sim \pi`, :math:`x_{t+1} \sim \mathcal{N}(A_{z_t} x_t +
    b_{z_t}, \Sigma_{z_t})`.

    Args:
      params: :class:`Params`.
      x0: ``(d,)`` initial state.
      n_steps: number of transitions ``>= 1``.
      key: ``jax.random`` key (keyword-only).

    Returns:
      ``(x, z)``: ``(n_steps + 1, d)`` states and ``(n_steps,)`` modes.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> params = slds.Params(
      ...     jnp.ones(1), 0.9 * jnp.eye(2)[None], jnp.zeros((1, 2)), jnp.eye(2)[None]
      ... )
      >>> out = slds.sample(params, jnp.zeros(2), 5, key=jax.random.key(0))
      >>> jax.tree.map(jnp.shape, out)
      ((6, 2), (5,))
    """
    _validate.key("key", key)
    x0 = _validate.array("x0", x0, 1)
    params = _check_params(params, x0.shape[0])
    n_steps = _validate.count("n_steps", n_steps, 1)
    return _sample(params, x0, key, int(n_steps))


def _sample_body(params, x0, key, n_steps):
    kz, ke = jax.random.split(key)
    z = jax.random.categorical(kz, jnp.log(params.weights), shape=(n_steps,))
    L = jnp.linalg.cholesky(params.covariances)
    eps = jnp.einsum("tij,tj->ti", L[z], core.random_normal(ke, (n_steps, x0.shape[0]), x0.dtype))

    def step(xt, inp):
        k, e = inp
        nxt = params.A[k] @ xt + params.b[k] + e
        return nxt, nxt

    _, xs = jax.lax.scan(step, x0, (z, eps))
    return jnp.concatenate([x0[None], xs]), z


_sample = jax.jit(_sample_body, static_argnames=("n_steps",))


# ---------------------------------------------------------------------------
# States as nodes: imputation by gradient descent
# ---------------------------------------------------------------------------


def _missing_mask(missing, T):
    m = np.asarray(missing)
    if m.dtype == np.bool_:
        if m.shape != (T,):
            raise ValueError(f"missing as a boolean mask must have shape (T,) = ({T},); got {m.shape}")
        mask = m
    else:
        if not np.issubdtype(m.dtype, np.integer):
            raise ValueError(f"missing must be integer indices or a boolean mask; got dtype {m.dtype}")
        m = np.atleast_1d(m)
        if m.ndim != 1 or np.any(m < 0) or np.any(m >= T):
            raise ValueError(f"missing indices must lie in [0, {T - 1}]; got {m}")
        mask = np.zeros(T, bool)
        mask[m] = True
    if not mask.any():
        raise ValueError("missing selects no time step")
    return mask


def smoothness_bound(params: Params, *, adjacent: bool = False) -> Array:
    r"""An upper bound :math:`L` on the Hessian of :math:`E` w.r.t. the missing states.

    With :math:`\lambda_* = \max_k \lambda_{\max}(\Sigma_k^{-1})` and
    :math:`a = \max_k \|A_k\|_2`, :math:`L = \lambda_*(1 + a^2)` when no two
    missing states are adjacent, and :math:`2\lambda_*(1 + a^2)` otherwise.
    Gradient descent with step :math:`1/L` then never increases :math:`E`
    (descent lemma). Holds for either value of ``normalised``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> params = slds.Params(
      ...     jnp.ones(1), jnp.eye(2)[None], jnp.zeros((1, 2)), jnp.eye(2)[None]
      ... )
      >>> L = slds.smoothness_bound(params)
      >>> L.shape, bool(L > 0)
      ((), True)
    """
    params = _check_params(params)
    lam = jnp.max(1.0 / jnp.linalg.eigvalsh(params.covariances)[:, 0])
    a = jnp.max(jnp.linalg.norm(params.A, ord=2, axis=(1, 2)))
    return (2.0 if adjacent else 1.0) * lam * (1.0 + a**2)


def _impute_body(params, x, mask, step, n_steps, normalised):
    def e(xx):
        return core.energy(_sim(params, xx, normalised))

    def grad(xx):
        alpha = core.weights(_sim(params, xx, normalised))
        u = _precision_times(params, _residuals(params, xx))
        child = jnp.einsum("tk,tki->ti", alpha, u)
        parent = -jnp.einsum("tk,kji,tkj->ti", alpha, params.A, u)
        zero = jnp.zeros((1, xx.shape[1]), xx.dtype)
        return jnp.concatenate([zero, child]) + jnp.concatenate([parent, zero])

    def body(xx, _):
        new = xx - step * jnp.where(mask[:, None], grad(xx), 0.0)
        return new, e(new)

    xf, es = jax.lax.scan(body, x, None, length=n_steps)
    return xf, jnp.concatenate([e(x)[None], es])


_impute = jax.jit(_impute_body, static_argnames=("n_steps", "normalised"))


def impute(params: Params, x, missing, *, n_steps: int = 200, step_size=None, normalised: bool = True):
    r"""Fill in missing states by gradient descent on :math:`E` w.r.t. those states.

    The states are nodes of the energy graph like any other: the update is
    :math:`x_t \leftarrow x_t - \eta\, \partial E/\partial x_t` with the full
    (child + parent) gradient of :func:`grad_x`, applied only at the
    missing steps; observed states stay fixed. The values of ``x`` at the
    missing steps are the starting point.

    Args:
      params: :class:`Params`.
      x: ``(T, d)`` trajectory with initial guesses at the missing steps.
      missing: integer indices or a ``(T,)`` boolean mask.
      n_steps: number of descent steps (``>= 1``).
      step_size: :math:`\eta > 0`; default :math:`1/L` from
        :func:`smoothness_bound`, for which the energy never increases.
      normalised: see :func:`sim`.

    Returns:
      ``(x_filled, energies)``: ``(T, d)`` and ``(n_steps + 1,)`` energies
      before and after every step.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slds
      >>> x = jnp.cumsum(jax.random.normal(jax.random.key(0), (8, 2)), axis=0)
      >>> params = slds.init_params(x, 1, key=jax.random.key(1))
      >>> missing = jnp.zeros(8, bool).at[3].set(True)
      >>> out = slds.impute(params, x, missing, n_steps=5)
      >>> jax.tree.map(jnp.shape, out)
      ((8, 2), (6,))
    """
    x = _check_x(x)
    params = _check_params(params, x.shape[1])
    mask = _missing_mask(missing, x.shape[0])
    _validate.count("n_steps", n_steps, 1)
    if step_size is None:
        adjacent = bool(np.any(mask[1:] & mask[:-1]))
        step_size = 1.0 / smoothness_bound(params, adjacent=adjacent)
    else:
        _validate.positive("step_size", step_size)
    return _impute(params, x, jnp.asarray(mask), jnp.asarray(step_size, x.dtype), int(n_steps), bool(normalised))
