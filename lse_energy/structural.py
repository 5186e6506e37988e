r"""Iterative attention as structural inference: the collapsed free energy and CCCP.

Singh & Buckley (2023), *Attention as implicit structural inference*, §4.
Latent means :math:`\mu_i` and observations :math:`x_j` are joined by edge
potentials :math:`\psi(x_j, \mu_i) = \mu_i^\top W x_j`; summing out a
factorised uniform prior over which observation each latent attends to
(``prior="hopfield"``) or which latent each observation belongs to
(``prior="slot"``) gives the collapsed free energy :func:`energy`, a
log-sum-exp energy plus the node potentials :math:`\tfrac12\|\mu_i\|^2`.
Its concave-convex procedure (CCCP, their eq. 8) is the attention update
:func:`cccp_step`; :func:`cccp` iterates it.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from lse_energy import _validate, core

Array = jax.Array

__all__ = ["energy", "cccp_step", "cccp"]

_PRIORS = ("hopfield", "slot")


def _check_structural(mu, x, w, prior, mu_name="mu"):
    mu = _validate.float_array(mu_name, mu, 2)
    x = _validate.float_array("x", x, 2)
    w = _validate.float_array("w", w, 2)
    if mu.ndim != 2 or x.ndim != 2 or w.ndim != 2:
        raise ValueError(f"{mu_name}, x and w must be matrices; got {mu.shape}, {x.shape}, {w.shape}")
    if mu.shape[0] < 1 or x.shape[0] < 1:
        raise ValueError(f"{mu_name} and x must each have at least one row (m, n >= 1); got {mu.shape}, {x.shape}")
    if w.shape != (mu.shape[1], x.shape[1]):
        raise ValueError(f"w must have shape (d_mu, d_x) = {(mu.shape[1], x.shape[1])}; got {w.shape}")
    _validate.choice("prior", prior, _PRIORS)
    return mu, x, w


def _edge_potentials(mu, x, w):
    return mu @ w @ x.T  # (m latents, n observations): psi(x_j, z_i) = z_i^T W x_j


def energy(mu, x, w, *, prior: str = "hopfield") -> Array:
    r"""Collapsed (first-order Laplace) free energy of a pMRF with quadratic node potentials.

    Singh & Buckley §4: node potentials :math:`-\tfrac12\|\mu_i\|^2`, edge
    potentials :math:`\psi(x_j, \mu_i) = \mu_i^\top W x_j`, structural
    variables marginalised under a factorised uniform prior:

    * ``prior="hopfield"``: each latent :math:`i` picks one observation
      (:math:`\phi_i \sim \mathrm{Uniform}\{(x_1, z_i), \dots, (x_n, z_i)\}`),

      .. math:: F = \tfrac12 \sum_i \|\mu_i\|^2 - \sum_i \ln \sum_j \exp(\mu_i^\top W x_j);

    * ``prior="slot"``: each observation :math:`j` picks one latent,

      .. math:: F = \tfrac12 \sum_i \|\mu_i\|^2 - \sum_j \ln \sum_i \exp(\mu_i^\top W x_j).

    (Constants :math:`\ln n` / :math:`\ln m` from the uniform prior are dropped.)

    Args:
      mu: ``(m, d_mu)`` latent means. x: ``(n, d_x)`` observations.
      w: ``(d_mu, d_x)``. All three floating point (integer arrays raise
        ``ValueError``) and finite, with ``m, n >= 1``.

    Returns:
      Scalar.

    Examples:
      Latents at the origin have no node cost and weigh every edge alike:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import structural
      >>> mu, x, w = (
      ...     jnp.zeros((2, 2)),
      ...     jnp.ones((3, 4)),
      ...     jnp.ones((2, 4)),
      ... )  # m = 2, n = 3
      >>> hopfield, slot = (
      ...     structural.energy(mu, x, w),
      ...     structural.energy(mu, x, w, prior="slot"),
      ... )
      >>> round(float(hopfield), 3), round(float(slot), 3)  # -2 ln 3 and -3 ln 2
      (-2.197, -2.079)
    """
    mu, x, w = _check_structural(mu, x, w, prior)
    return _free_energy_inner(mu, x, w, prior)


def cccp_step(mu, x, w, *, prior: str = "hopfield") -> Array:
    r"""The CCCP fixed-point map, eq. (8) of Singh & Buckley (2023).

    :math:`F` = convex :math:`\tfrac12\|\mu\|^2` + concave
    :math:`-\sum \ln\sum \exp(\text{linear in } \mu)`. CCCP sets the gradient
    of the convex part at :math:`\mu^*` to minus that of the concave part at
    :math:`\mu`:

    .. math:: \mu_i^* = \sum_j a_{ij}\, W x_j, \qquad
              a_{ij} = \begin{cases} \mathrm{softmax}_j(\mu_i^\top W x_j) & \text{hopfield} \\
                                     \mathrm{softmax}_i(\mu_i^\top W x_j) & \text{slot} \end{cases}

    and guarantees :math:`F(\mu^*) \le F(\mu)`.

    Returns:
      ``(m, d_mu)``.
    """
    mu, x, w = _check_structural(mu, x, w, prior)
    return _cccp_body(mu, x, w, prior)


def cccp(mu0, x, w, *, prior: str = "hopfield", n_steps: int = 20):
    r"""Iterate :func:`cccp_step` ``n_steps`` times (jitted ``lax.scan``).

    Args:
      mu0, x, w: as in :func:`energy`.
      prior: ``"hopfield"`` or ``"slot"``.
      n_steps: a Python integer ``>= 0`` (a float such as ``1.5`` raises
        ``ValueError`` rather than being truncated).

    Returns:
      ``(mu, trace)``: the final ``(m, d_mu)`` means and the ``(n_steps + 1,)``
      free energies :math:`F(\mu^{(0)}), \dots, F(\mu^{(T)})`.
    """
    mu0, x, w = _check_structural(mu0, x, w, prior, "mu0")
    n_steps = _validate.count("n_steps", n_steps, 0)
    return _cccp(mu0, x, w, prior=prior, n_steps=n_steps)


@partial(jax.jit, static_argnums=3)
def _cccp_body(mu, x, w, prior):
    s = _edge_potentials(mu, x, w)
    a = core.weights(s) if prior == "hopfield" else core.weights(s.T).T
    return a @ (x @ w.T)


@partial(jax.jit, static_argnums=3)
def _free_energy_inner(mu, x, w, prior):
    s = _edge_potentials(mu, x, w)
    lse = core.energy(s) if prior == "hopfield" else core.energy(s.T)
    return 0.5 * jnp.sum(mu**2) + lse


@partial(jax.jit, static_argnames=("prior", "n_steps"))
def _cccp(mu0, x, w, prior, n_steps):
    def step(mu, _):
        new = _cccp_body(mu, x, w, prior)
        return new, _free_energy_inner(new, x, w, prior)

    mu, fs = jax.lax.scan(step, mu0, None, length=n_steps)
    return mu, jnp.concatenate([_free_energy_inner(mu0, x, w, prior)[None], fs])
