r"""The Gaussian mixture as a log-sum-exp energy: :class:`Params`, the similarity, the energy and its gradients.

Part of :mod:`lse_energy.gmm` (whose docstring states the model); the EM and streaming drivers are in
``lse_energy.gmm._em``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from lse_energy import _validate, core

Array = jax.Array


class Params(NamedTuple):
    r"""Parameters of a :math:`K`-component Gaussian mixture in :math:`\mathbb{R}^d`.

    .. math:: p(x) = \sum_{k=1}^K \pi_k\, \mathcal N(x \mid \mu_k, \Sigma_k)

    Attributes:
      weights: ``(K,)`` mixing proportions :math:`\pi_k > 0`, :math:`\sum_k \pi_k = 1`.
      means: ``(K, d)`` component means :math:`\mu_k` (the parent nodes).
      covariances: ``(K, d, d)`` symmetric positive-definite :math:`\Sigma_k`.
    """

    weights: Array
    means: Array
    covariances: Array


# ---------------------------------------------------------------------------
# Validation (public boundary only)
# ---------------------------------------------------------------------------


_concrete = _validate.is_concrete


def check_x(x, d: int | None = None) -> Array:
    """``x`` as a non-empty ``(N, d)`` floating, finite array (``d``, when given, that of the means).

    An integer or boolean ``x`` raises ``ValueError`` (cast it explicitly).
    """
    x = _validate.points("x", x)
    if d is not None and x.shape[1] != d:
        raise ValueError(f"x has dimension {x.shape[1]} but params.means has d = {d}")
    return x


def check_params(params) -> Params:
    """``params`` as :class:`Params` of floating arrays, or ``ValueError`` naming the bad field.

    Checks shapes ``(K,)``, ``(K, d)``, ``(K, d, d)`` and, when concrete, that
    every entry is finite, the weights are positive and sum to one, and every
    covariance is symmetric positive definite.
    """
    params, _ = _validate.params(params, Params, {"means": "K d", "weights": "K", "covariances": "K d d"})
    _validate.simplex("params.weights", params.weights)
    _validate.spd_stack("params.covariances", params.covariances)
    return params


def _check_reg(reg_covar) -> float:
    return _validate.nonnegative("reg_covar", reg_covar)


# ---------------------------------------------------------------------------
# Internals (trust their callers)
# ---------------------------------------------------------------------------


def _cholesky(covariances: Array) -> Array:
    # symmetrize_input=True (the default) makes the derivative symmetric in Sigma.
    return jnp.linalg.cholesky(covariances)


_tri_solve = jax.vmap(lambda L, b, trans: solve_triangular(L, b, lower=True, trans=trans), in_axes=(0, 0, None))


def _whitened(params: Params, x: Array):
    """Return ``L (K,d,d)``, ``diff (K,N,d)`` and ``z = L^{-1} diff`` as ``(K,d,N)``."""
    L = _cholesky(params.covariances)
    diff = x[None, :, :] - params.means[:, None, :]
    z = _tri_solve(L, jnp.swapaxes(diff, 1, 2), 0)
    return L, diff, z


@partial(jax.jit, static_argnums=2)
def _sim(params: Params, x: Array, normalised: bool) -> Array:
    L, _, z = _whitened(params, x)
    s = jnp.log(params.weights)[None, :] - 0.5 * jnp.sum(z**2, axis=1).T
    if normalised:
        d = x.shape[1]
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
        s = s - 0.5 * (d * math.log(2.0 * math.pi) + logdet)[None, :]
    return s


def _precision_times_diff(params: Params, x: Array):
    r"""``L (K,d,d)``, ``diff (K,N,d)`` and ``u = \Sigma_k^{-1}(x_i - \mu_k)`` as ``(K,N,d)``."""
    L, diff, z = _whitened(params, x)
    u = jnp.swapaxes(_tri_solve(L, z, 1), 1, 2)  # L^{-T} L^{-1} diff
    return L, diff, u


# ---------------------------------------------------------------------------
# Energy
# ---------------------------------------------------------------------------


def sim(params: Params, x, *, normalised: bool = True) -> Array:
    r"""The similarity matrix :math:`\mathrm{sim}(x_i, \mu_k)` of §2.

    .. math::

        \mathrm{sim}(x_i, \mu_k) = \ln\pi_k
        - \tfrac12 (x_i-\mu_k)^\top \Sigma_k^{-1} (x_i-\mu_k)
        \;\big[ - \tfrac12 \ln|2\pi\Sigma_k| \big]

    Args:
      params: :class:`Params` with shapes ``(K,)``, ``(K, d)``, ``(K, d, d)``.
      x: ``(N, d)`` data points.
      normalised: include the bracketed Gaussian normaliser (default). With
        ``False`` this is the seed's sim exactly as printed in §2 / Appendix B.

    Returns:
      ``(N, K)`` array; ``sim[i, k] = ln pi_k + ln N(x_i | mu_k, Sigma_k)``
      when ``normalised``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> params = gmm.Params(
      ...     jnp.full(2, 0.5), jnp.zeros((2, 3)), jnp.stack([jnp.eye(3)] * 2)
      ... )
      >>> gmm.sim(params, jnp.ones((4, 3))).shape
      (4, 2)
    """
    params = check_params(params)
    x = check_x(x, params.means.shape[1])
    return _sim(params, x, normalised)


def energy(params: Params, x) -> Array:
    r"""Exact negative log-likelihood, eq. (5) with the normalised sim.

    .. math::

        E = -\sum_{i=1}^N \ln \sum_{k=1}^K \pi_k\, \mathcal N(x_i \mid \mu_k, \Sigma_k)

    ``energy(params, x) / N`` equals ``-GaussianMixture.score(x)`` of
    scikit-learn at the same parameters.

    Args:
      params: :class:`Params`.
      x: ``(N, d)``.

    Returns:
      Scalar.

    Examples:
      One standard Gaussian in 2-d, one point at its mean: :math:`E = \ln 2\pi`.

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> params = gmm.Params(jnp.ones(1), jnp.zeros((1, 2)), jnp.eye(2)[None])
      >>> round(float(gmm.energy(params, jnp.zeros((1, 2)))), 3)
      1.838
    """
    return core.energy(sim(params, x, normalised=True))


def seed_energy(params: Params, x) -> Array:
    r"""The seed's eq. (5) as printed: the log-sum-exp of the *unnormalised* sim.

    .. math::

        E^{\text{seed}} = -\sum_i \ln \sum_k \pi_k
        \exp\!\big(-\tfrac12 (x_i-\mu_k)^\top \Sigma_k^{-1} (x_i-\mu_k)\big)

    With one shared covariance :math:`\Sigma`,
    :math:`E = E^{\text{seed}} + \frac N2 \ln|2\pi\Sigma|`; with unequal
    covariances the two differ by more than a constant.

    Returns:
      Scalar.
    """
    return core.energy(sim(params, x, normalised=False))


def responsibilities(params: Params, x, *, normalised: bool = True) -> Array:
    r"""The softmax weights of eq. (4): :math:`r_{ik} = \mathrm{softmax}_k\, \mathrm{sim}(x_i, \mu_k)`.

    With ``normalised=True`` this is the posterior
    :math:`p(z_i = k \mid x_i) = \pi_k \mathcal N(x_i|\mu_k,\Sigma_k) / \sum_j \pi_j \mathcal N(x_i|\mu_j,\Sigma_j)`
    (the E-step); with ``False`` it is the seed's :math:`\mathrm{softmax}_k(A_{ik})`.

    Returns:
      ``(N, K)`` array with rows summing to one.
    """
    return core.weights(sim(params, x, normalised=normalised))


def predict(params: Params, x) -> Array:
    r"""Hard assignments: the component of largest responsibility, :math:`\arg\max_k r_{ik}` (scikit-learn's
    ``GaussianMixture.predict``).

    Args:
      params: :class:`Params`.
      x: ``(N, d)`` data with the ``d`` of ``params.means``.

    Returns:
      ``(N,)`` integer component indices in ``0..K-1`` (ties go to the lowest index).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> params = gmm.Params(
      ...     jnp.array([0.5, 0.5]), jnp.array([[-3.0], [3.0]]), jnp.ones((2, 1, 1))
      ... )
      >>> gmm.predict(params, jnp.array([[-2.5], [0.5], [4.0]])).tolist()
      [0, 1, 1]
    """
    params = check_params(params)
    x = check_x(x, params.means.shape[1])
    return jnp.argmax(_sim(params, x, True), axis=1)


def free_energy(params: Params, x, resp) -> Array:
    r"""The EM upper bound (variational free energy) :math:`F(q, \theta) \ge E(\theta)`.

    .. math::

        F(q, \theta) = -\sum_{i,k} q_{ik}\,\big(\mathrm{sim}(x_i,\mu_k) - \ln q_{ik}\big)
        = E(\theta) + \sum_i \mathrm{KL}\big(q_i \,\|\, r_i(\theta)\big),

    with the normalised sim and :math:`r = ` :func:`responsibilities`. The
    E-step sets :math:`q = r(\theta)` (making the bound tight); the M-step of
    :func:`em_step` minimises :math:`F(q, \cdot)` in closed form. Entries with
    :math:`q_{ik} = 0` contribute :math:`0 \ln 0 = 0`.

    Args:
      params: :class:`Params`.
      x: ``(N, d)``.
      resp: ``(N, K)`` non-negative, rows summing to one.

    Returns:
      Scalar.
    """
    s = sim(params, x, normalised=True)
    resp = _validate.float_array("resp", resp)
    if resp.shape != s.shape:
        raise ValueError(f"resp must have shape (N, K) = {s.shape}; got shape {resp.shape}")
    if _concrete(resp):
        q = np.asarray(resp, np.float64)
        if not np.all(np.isfinite(q)) or np.any(q < 0):
            raise ValueError("resp must be finite and non-negative")
        if np.max(np.abs(q.sum(axis=1) - 1.0)) > math.sqrt(float(jnp.finfo(resp.dtype).eps)):
            raise ValueError("resp rows must sum to 1")
    safe = jnp.where(resp > 0, resp, 1.0)
    return -jnp.sum(resp * (s - jnp.log(safe)))


# ---------------------------------------------------------------------------
# Analytic gradients
# ---------------------------------------------------------------------------


def _weights_and_whitened(params, x, normalised):
    """Checked inputs' responsibilities ``r (N, K)`` and ``u = Sigma_k^{-1}(x_i - mu_k)`` ``(K, N, d)``."""
    params = check_params(params)
    x = check_x(x, params.means.shape[1])
    return core.weights(_sim(params, x, normalised)), _precision_times_diff(params, x)[2]


def grad_means(params: Params, x, *, normalised: bool = True) -> Array:
    r""":math:`\partial E / \partial \mu_k`, the parent part of eq. (4) (§2 "Gradients", Appendix B).

    .. math::

        -\frac{\partial E}{\partial \mu_k} = \sum_{i} r_{ik}\, \Sigma_k^{-1} (x_i - \mu_k)

    using :math:`\partial\,\mathrm{sim}/\partial\mu_k = \Sigma_k^{-1}(x_i-\mu_k)`
    (Appendix B). The normaliser does not depend on :math:`\mu_k`, so the
    form is the same for :func:`energy` and :func:`seed_energy`; only the
    responsibilities :math:`r_{ik}` differ (``normalised`` selects which energy).

    Returns:
      ``(K, d)``.
    """
    r, u = _weights_and_whitened(params, x, normalised)
    return -jnp.einsum("ik,kid->kd", r, u)


def grad_x(params: Params, x, *, normalised: bool = True) -> Array:
    r""":math:`\partial E / \partial x_i`, the child part of eq. (4) (not printed in the seed).

    .. math::

        \frac{\partial E}{\partial x_i} = \sum_{k} r_{ik}\, \Sigma_k^{-1} (x_i - \mu_k),

    since :math:`\partial\,\mathrm{sim}/\partial x_i = -\Sigma_k^{-1}(x_i-\mu_k)`.
    Descending it pulls each point towards the responsibility-weighted
    component means. Same form for both energies (see :func:`grad_means`).

    Returns:
      ``(N, d)``.
    """
    r, u = _weights_and_whitened(params, x, normalised)
    return jnp.einsum("ik,kid->id", r, u)


def grad_covariances(params: Params, x, *, normalised: bool = True) -> Array:
    r""":math:`\partial E / \partial \Sigma_k` (symmetric), eq. (4) with the sim-derivative w.r.t. :math:`\Sigma_k`.

    .. math::

        \frac{\partial E}{\partial \Sigma_k} = \tfrac12 \sum_i r_{ik}
        \big( c\,\Sigma_k^{-1} - \Sigma_k^{-1}(x_i-\mu_k)(x_i-\mu_k)^\top\Sigma_k^{-1} \big)

    with :math:`c = 1` for the exact energy (the :math:`\Sigma_k^{-1}` term is
    the derivative of :math:`\frac12\ln|2\pi\Sigma_k|`) and :math:`c = 0` for
    the seed's energy, whose gradient is then negative semi-definite: the
    seed energy always decreases as a covariance grows, so it has no
    minimiser in :math:`\Sigma_k`. The seed does not print this derivative.

    Returns:
      ``(K, d, d)``, symmetric; equal to ``jax.grad`` through the
      (symmetrising) Cholesky factorisation.
    """
    params = check_params(params)
    x = check_x(x, params.means.shape[1])
    r = core.weights(_sim(params, x, normalised))
    L, _, u = _precision_times_diff(params, x)
    outer = jnp.einsum("ik,kia,kib->kab", r, u, u)
    if not normalised:
        return -0.5 * outer
    d = x.shape[1]
    eye = jnp.broadcast_to(jnp.eye(d, dtype=L.dtype), L.shape)
    precision = _tri_solve(L, _tri_solve(L, eye, 0), 1)
    precision = 0.5 * (precision + jnp.swapaxes(precision, 1, 2))
    Nk = jnp.sum(r, axis=0)
    return 0.5 * (Nk[:, None, None] * precision - outer)


def grad_weights(params: Params, x, *, normalised: bool = True) -> Array:
    r""":math:`\partial E / \partial \pi_k`, treating :math:`\pi` as free in :math:`\ln\pi_k` of sim.

    .. math::

        \frac{\partial E}{\partial \pi_k} = -\frac{N_k}{\pi_k},\qquad N_k = \sum_i r_{ik}.

    On the simplex only the tangential part matters; the Lagrange condition
    :math:`-N_k/\pi_k + \lambda = 0` gives the M-step :math:`\pi_k = N_k/N`.
    For the softmax parameterisation :math:`\pi = \mathrm{softmax}(\eta)` the
    chain rule gives :math:`\partial E/\partial\eta_k = N\pi_k - N_k`.

    Returns:
      ``(K,)``.
    """
    params = check_params(params)
    x = check_x(x, params.means.shape[1])
    r = core.weights(_sim(params, x, normalised))
    return -jnp.sum(r, axis=0) / params.weights
