r"""Modern (continuous) Hopfield networks, and the classical binary one for comparison.

This module implements §4 and Appendix B of Tschantz (2025), *Attention via
log-sum-exp energy*, and the Modern Continuous Hopfield Network of §4.2 of
Singh & Buckley (2023), *Attention as implicit structural inference* (their
CCCP fixed point, eq. 8).

**Model.** The children are the state (query) vectors
:math:`x_i \in \mathbb{R}^d`, :math:`i = 1..N`; the parents are the stored
memories :math:`m_\mu \in \mathbb{R}^d`, :math:`\mu = 1..K`; the similarity
is :math:`\mathrm{sim}(x_i, m_\mu) = \beta\, x_i^\top m_\mu` with inverse
temperature :math:`\beta > 0`.

**Energy and its scaling.** Eq. (9) of Tschantz is the log-sum-exp energy with
:math:`\beta = 1`. With an inverse temperature we follow Ramsauer et al.
(2021) and divide by :math:`\beta`,

.. math::

    E_\beta(X, M) = -\frac{1}{\beta} \sum_{i=1}^{N}
        \ln \sum_{\mu=1}^{K} \exp(\beta\, x_i^\top m_\mu)
    \qquad (\text{eq. 9 at } \beta = 1),

so that (i) at :math:`\beta = 1` it *is* eq. (9), (ii) the gradients are
exactly eqs. (10)-(11) with the softmax taken at inverse temperature
:math:`\beta` and no stray factor :math:`\beta`, and (iii) as
:math:`\beta \to \infty` the energy tends to :math:`-\sum_i \max_\mu x_i^\top m_\mu`.

**The bare energy has no minimum.** :math:`E_\beta` is concave in every
:math:`x_i` (minus a log-sum-exp of linear functions), and along
:math:`x = t\, m_\mu` it satisfies :math:`E_\beta \le -t \|m_\mu\|^2 \to -\infty`.
Descent on it alone diverges. The Modern Hopfield energy of Ramsauer et al.
adds the convex node potential :math:`\tfrac12 \|x_i\|^2` (the quadratic node
potential of Singh & Buckley §4),

.. math::

    E^{\mathrm{reg}}_\beta(X, M) = E_\beta(X, M) + \frac12 \sum_i \|x_i\|^2
    \;\ge\; -N\Big(\frac{\ln K}{\beta} + \frac12 \max_\mu \|m_\mu\|^2\Big),

which is bounded below, and whose CCCP step is the retrieval update
:math:`x_i \leftarrow \sum_\mu \mathrm{softmax}_\mu(\beta\, x_i^\top m_\mu)\, m_\mu`
(:func:`update`). Ramsauer et al. also add the constants
:math:`N(\beta^{-1}\ln K + \tfrac12 \max_\mu\|m_\mu\|^2)`, which make the
energy non-negative and do not change any gradient; we leave them out.

**Classical network.** :func:`classical_store`, :func:`classical_energy` and
:func:`classical_retrieve` implement the binary Hopfield network (Hebbian
weights, asynchronous sign updates) used as the baseline in the book.

Shapes: ``memories: (K, d)``, ``queries: (N, d)``.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate, core

Array = jax.Array

__all__ = [
    "sim",
    "energy",
    "grad_queries",
    "grad_memories",
    "regularised_energy",
    "regularised_energies",
    "grad_regularised_energy_queries",
    "cccp_surrogate",
    "update",
    "retrieve",
    "classical_store",
    "classical_energy",
    "classical_retrieve",
]


# ---------------------------------------------------------------------------
# Validation (public boundary only)
# ---------------------------------------------------------------------------


_concrete = _validate.is_concrete


def _check(memories, queries, beta):
    memories = _validate.points("memories", memories)
    queries = _validate.points("queries", queries, memories.shape[1], ref="memories")
    _validate.beta(beta)
    return memories, queries


@jax.jit
def _sim(memories, queries, beta):
    """``(N, K)`` similarities :math:`\\beta x_i^\\top m_\\mu`."""
    return beta * (queries @ memories.T)


# ---------------------------------------------------------------------------
# Energy and gradients
# ---------------------------------------------------------------------------


def sim(memories, queries, *, beta=1.0) -> Array:
    r"""The similarities :math:`\mathrm{sim}(x_i, m_\mu) = \beta\, x_i^\top m_\mu`, ``(N, K)``: children are the
    queries, parents the memories (arguments as :func:`energy`).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import hopfield
      >>> hopfield.sim(jnp.eye(3), jnp.ones((2, 3)), beta=2.0).tolist()  # (N, K)
      [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    """
    memories, queries = _check(memories, queries, beta)
    return _sim(memories, queries, beta)


def energy(memories, queries, *, beta=1.0) -> Array:
    r"""Hopfield energy, eq. (9) of Tschantz (2025), at inverse temperature :math:`\beta`.

    .. math::

        E_\beta = -\frac{1}{\beta} \sum_{i=1}^{N} \ln \sum_{\mu=1}^{K}
        \exp(\beta\, x_i^\top m_\mu)

    The :math:`1/\beta` prefactor (as in Ramsauer et al. 2021) makes
    :math:`\beta = 1` reproduce eq. (9) exactly and keeps the gradients in the
    form of eqs. (10)-(11). This *bare* energy is unbounded below in the
    queries (see :func:`regularised_energy`).

    Args:
      memories: ``(K, d)`` stored patterns :math:`m_\mu` (the parents).
      queries: ``(N, d)`` states :math:`x_i` (the children).
      beta: inverse temperature, finite and ``> 0``.

    Returns:
      Scalar energy.

    Examples:
      A query at the origin is equally similar to every memory, :math:`E = -\beta^{-1} \ln K`:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import hopfield
      >>> memories, queries = jnp.eye(3), jnp.zeros((1, 3))
      >>> round(float(hopfield.energy(memories, queries, beta=2.0)), 3)  # -ln(3) / 2
      -0.549
    """
    memories, queries = _check(memories, queries, beta)
    return core.energy(_sim(memories, queries, beta)) / beta


def grad_queries(memories, queries, *, beta=1.0) -> Array:
    r""":math:`\partial E_\beta / \partial x_i`, eq. (10) of Tschantz (2025).

    .. math::

        -\frac{\partial E_\beta}{\partial x_i} = \sum_{\mu=1}^{K}
        \mathrm{softmax}_\mu(\beta\, x_i^\top m_\mu)\, m_\mu .

    Eq. (10) is correct as printed (at :math:`\beta = 1`); the :math:`1/\beta`
    scaling of the energy cancels the :math:`\beta` of the chain rule.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(N, d)`` gradient of :func:`energy` with respect to ``queries``.
    """
    memories, queries = _check(memories, queries, beta)
    w = core.weights(_sim(memories, queries, beta))  # (N, K)
    return -(w @ memories)


def grad_memories(memories, queries, *, beta=1.0) -> Array:
    r""":math:`\partial E_\beta / \partial m_\mu`, eq. (11) of Tschantz (2025).

    .. math::

        -\frac{\partial E_\beta}{\partial m_\mu} = \sum_{i=1}^{N}
        \mathrm{softmax}_\mu(\beta\, x_i^\top m_\mu)\, x_i ,

    where, for each child :math:`i`, the softmax runs over the parents
    :math:`\mu` and its :math:`\mu`-th entry is taken. Eq. (11) is correct as
    printed (at :math:`\beta = 1`). The quadratic term of
    :func:`regularised_energy` does not involve the memories, so this is also
    the gradient of the regularised energy.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(K, d)`` gradient of :func:`energy` with respect to ``memories``.
    """
    memories, queries = _check(memories, queries, beta)
    w = core.weights(_sim(memories, queries, beta))  # (N, K)
    return -(w.T @ queries)


def regularised_energies(memories, queries, *, beta=1.0) -> Array:
    r"""Per-query regularised energies :math:`e_i`, with :math:`E^{\mathrm{reg}}_\beta = \sum_i e_i`.

    .. math::

        e_i = -\frac{1}{\beta} \ln \sum_\mu \exp(\beta\, x_i^\top m_\mu)
              + \frac12 \|x_i\|^2 .

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(N,)`` array.
    """
    memories, queries = _check(memories, queries, beta)
    return _energies(memories, queries, beta)


@jax.jit
def _energies(memories, queries, beta):
    lse = core.logsumexp(_sim(memories, queries, beta))
    return -lse / beta + 0.5 * jnp.sum(queries**2, axis=-1)


def regularised_energy(memories, queries, *, beta=1.0) -> Array:
    r"""Modern Hopfield energy: eq. (9) plus the quadratic node potential.

    .. math::

        E^{\mathrm{reg}}_\beta = E_\beta + \frac12 \sum_i \|x_i\|^2
        \;\ge\; -N\Big(\frac{\ln K}{\beta} + \frac12 \max_\mu \|m_\mu\|^2\Big).

    The bound follows from :math:`\ln\sum_\mu e^{\beta s_\mu} \le \beta \max_\mu
    s_\mu + \ln K` and :math:`x^\top m_\mu \le \|x\| M \le \tfrac12\|x\|^2 +
    \tfrac12 M^2`, :math:`M = \max_\mu \|m_\mu\|`. This is the energy of
    Ramsauer et al. (2021) without its additive constants; :func:`update` is
    its CCCP step.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      Scalar energy.
    """
    memories, queries = _check(memories, queries, beta)
    return energy(memories, queries, beta=beta) + 0.5 * jnp.sum(queries**2)


def grad_regularised_energy_queries(memories, queries, *, beta=1.0) -> Array:
    r""":math:`\partial E^{\mathrm{reg}}_\beta / \partial x_i = x_i - \sum_\mu \mathrm{softmax}_\mu(\beta x_i^\top
    m_\mu)\, m_\mu`.

    Eq. (10) plus the gradient :math:`x_i` of the node potential. Hence
    :func:`update` is ``queries - grad_regularised_energy_queries(...)``: a gradient
    step of unit size on the regularised energy.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(N, d)``.
    """
    return queries + grad_queries(memories, queries, beta=beta)


def cccp_surrogate(memories, queries, anchor, *, beta=1.0) -> Array:
    r"""The convex CCCP surrogate of :func:`regularised_energy` at ``anchor``.

    Split :math:`E^{\mathrm{reg}}_\beta = \tfrac12\sum_i\|x_i\|^2` (convex)
    :math:`+\, E_\beta` (concave in the queries), and replace the concave part
    by its tangent plane at the anchor :math:`\bar x`:

    .. math::

        S(X; \bar X) = \frac12 \sum_i \|x_i\|^2 + E_\beta(\bar X)
          + \sum_i \big\langle \nabla_{x_i} E_\beta(\bar X),\, x_i - \bar x_i \big\rangle .

    A concave function lies below its tangent, so
    :math:`S(X;\bar X) \ge E^{\mathrm{reg}}_\beta(X)` with equality at
    :math:`X = \bar X`; :math:`S` is a strictly convex quadratic whose unique
    minimiser is :func:`update` applied to :math:`\bar X`.

    Args:
      memories: ``(K, d)``.
      queries: ``(N, d)`` the point :math:`X` where the surrogate is evaluated.
      anchor: ``(N, d)`` the linearisation point :math:`\bar X`.
      beta: inverse temperature.

    Returns:
      Scalar.
    """
    memories, queries = _check(memories, queries, beta)
    anchor = _validate.points("anchor", anchor, memories.shape[1], ref="memories")
    if anchor.shape != queries.shape:
        raise ValueError(f"anchor must have the shape of queries {queries.shape}; got {anchor.shape}")
    g = grad_queries(memories, anchor, beta=beta)
    e0 = energy(memories, anchor, beta=beta)
    return 0.5 * jnp.sum(queries**2) + e0 + jnp.sum(g * (queries - anchor))


# ---------------------------------------------------------------------------
# Dynamics
# ---------------------------------------------------------------------------


def _update(memories, queries, beta):
    """``softmax(beta x m') m`` with :func:`lse_energy.core.softmax_average` (normalised after ``@ m``, query
    blocks)."""
    return core.softmax_average(queries, memories, memories, beta)


# The public update validates its inputs once, then runs this jitted kernel
# (core.weights on a concrete (N, K) matrix would copy it to the host to check it).
_update_jit = jax.jit(_update)


def update(memories, queries, *, beta=1.0) -> Array:
    r"""One retrieval step :math:`x_i \leftarrow \sum_\mu \mathrm{softmax}_\mu(\beta\, x_i^\top m_\mu)\, m_\mu`.

    In matrix form ``softmax(beta * queries @ memories.T) @ memories``: the
    fixed point equation (8) of Singh & Buckley (2023) for the Modern
    Continuous Hopfield Network, and cross-attention with keys = values =
    memories. It is the exact minimiser of :func:`cccp_surrogate` anchored at
    ``queries``, so :func:`regularised_energy` never increases; in fact it
    decreases by at least :math:`\tfrac12\|x^{\mathrm{new}} - x\|^2`.

    Args:
      memories: ``(K, d)``.
      queries: ``(N, d)``.
      beta: inverse temperature, finite and ``> 0``.

    Returns:
      ``(N, d)`` new states.
    """
    memories, queries = _check(memories, queries, beta)
    return _update_jit(memories, queries, jnp.asarray(beta, dtype=memories.dtype))


@partial(jax.jit, static_argnames=("n_steps", "return_energy"))
def _retrieve(memories, queries, beta, n_steps, return_energy):
    def body(x, _):
        x_new = _update(memories, x, beta)
        e = _energies(memories, x_new, beta) if return_energy else None
        return x_new, e

    x, trace = jax.lax.scan(body, queries, None, length=n_steps)
    if not return_energy:
        return x
    e0 = _energies(memories, queries, beta)
    if n_steps == 0:
        return x, e0[None]
    return x, jnp.concatenate([e0[None], trace], axis=0)


def retrieve(memories, queries, *, beta=1.0, n_steps=10, return_energy=False):
    r"""Iterate :func:`update` ``n_steps`` times (jitted, ``lax.scan`` inside).

    Args:
      memories: ``(K, d)``.
      queries: ``(N, d)`` initial states.
      beta: inverse temperature, finite and ``> 0`` (traced: changing it does
        not recompile).
      n_steps: number of updates, a non-negative integer (static).
      return_energy: also return the per-query regularised energies
        :math:`e_i` (:func:`regularised_energies`) before and after each step.

    Returns:
      ``(N, d)`` final states, and with ``return_energy`` a second array of
      shape ``(n_steps + 1, N)``; each column is non-increasing.
    """
    memories, queries = _check(memories, queries, beta)
    n_steps = _validate.count("n_steps", n_steps, 0)
    beta = jnp.asarray(beta, dtype=memories.dtype)
    return _retrieve(memories, queries, beta, n_steps, bool(return_energy))


# ---------------------------------------------------------------------------
# Classical binary Hopfield network (baseline)
# ---------------------------------------------------------------------------


def _check_binary(name, s, allow_zero):
    s = _validate.points(name, s)
    allowed = (-1.0, 0.0, 1.0) if allow_zero else (-1.0, 1.0)
    if _concrete(s) and not bool(np.all(np.isin(np.asarray(s), allowed))):
        what = "-1, 0 or +1" if allow_zero else "-1 or +1"
        raise ValueError(f"{name} must have entries {what}")
    return s


def classical_store(patterns) -> Array:
    r"""Hebbian weights of the classical binary Hopfield network.

    .. math::

        W = \frac{1}{d} \sum_{\mu=1}^{K} \xi_\mu \xi_\mu^\top, \qquad W_{jj} = 0 .

    For :math:`K` random :math:`\pm 1` patterns the stored patterns are
    (nearly) stable up to :math:`K \approx 0.138\, d` (Amit, Gutfreund &
    Sompolinsky 1985).

    Args:
      patterns: ``(K, d)`` with entries :math:`\pm 1`.

    Returns:
      ``(d, d)`` symmetric weight matrix with zero diagonal.
    """
    patterns = _check_binary("patterns", patterns, allow_zero=False)
    d = patterns.shape[1]
    w = patterns.T @ patterns / d
    return w * (1.0 - jnp.eye(d, dtype=w.dtype))


def classical_energy(weights, states) -> Array:
    r"""Classical Hopfield energy :math:`-\frac12 \sum_n s_n^\top W s_n` (summed over states).

    Args:
      weights: ``(d, d)`` symmetric, zero diagonal (:func:`classical_store`).
      states: ``(N, d)``.

    Returns:
      Scalar.
    """
    weights, states = _check_classical(weights, states)
    return -0.5 * jnp.sum((states @ weights) * states)


def _check_classical(weights, states):
    weights = _validate.points("weights", weights)
    d = weights.shape[1]
    if weights.shape[0] != d:
        raise ValueError(f"weights must be square (d, d); got {weights.shape}")
    states = _check_binary("states", states, allow_zero=True)
    if states.shape[1] != d:
        raise ValueError(f"states has dimension {states.shape[1]} but weights are {weights.shape}")
    return weights, states


def _sweep(weights, s):
    """One asynchronous sweep over units 0..d-1 of one state ``s: (d,)``."""

    def unit(j, s):
        h = weights[j] @ s
        new = jnp.where(h > 0, 1.0, jnp.where(h < 0, -1.0, s[j]))
        return s.at[j].set(new.astype(s.dtype))

    return jax.lax.fori_loop(0, s.shape[0], unit, s)


@partial(jax.jit, static_argnames=("n_steps", "return_energy"))
def _classical_retrieve(weights, states, n_steps, return_energy):
    def body(s, _):
        s = jax.vmap(partial(_sweep, weights))(s)
        e = -0.5 * jnp.sum((s @ weights) * s, axis=-1) if return_energy else None
        return s, e

    s, trace = jax.lax.scan(body, states, None, length=n_steps)
    if not return_energy:
        return s
    e0 = -0.5 * jnp.sum((states @ weights) * states, axis=-1)
    if n_steps == 0:
        return s, e0[None]
    return s, jnp.concatenate([e0[None], trace], axis=0)


def classical_retrieve(weights, states, *, n_steps=10, return_energy=False):
    r"""Asynchronous sign dynamics of the classical network (jitted).

    Each sweep visits the units :math:`j = 0, \dots, d-1` in order and sets
    :math:`s_j \leftarrow \mathrm{sign}(\sum_k W_{jk} s_k)`, keeping
    :math:`s_j` when the field is exactly zero. With a symmetric, zero-diagonal
    :math:`W` each such change lowers :math:`-\tfrac12 s^\top W s` by
    :math:`|h_j|\,|\Delta s_j| \ge 0`, so the energy never increases.
    Entries 0 (unknown, e.g. masked pixels) are allowed in the initial states.

    Args:
      weights: ``(d, d)`` from :func:`classical_store`.
      states: ``(N, d)`` initial states with entries in :math:`\{-1, 0, +1\}`.
      n_steps: number of full sweeps, a non-negative integer (static).
      return_energy: also return the per-state energies before and after
        each sweep, shape ``(n_steps + 1, N)``.

    Returns:
      ``(N, d)`` final states (and the energy trace).
    """
    weights, states = _check_classical(weights, states)
    n_steps = _validate.count("n_steps", n_steps, 0)
    return _classical_retrieve(weights, states, n_steps, bool(return_energy))
