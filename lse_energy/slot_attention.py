r"""Slot attention as descent on the log-sum-exp energy (Tschantz 2025, §5, §9, App. B).

Children are the tokens :math:`x_j \in \mathbb{R}^{d_x}` (:math:`j = 1..N`), parents
are the slots :math:`\mu_i \in \mathbb{R}^{d_\mu}` (:math:`i = 1..S`), and

.. math::

    \begin{aligned}
    \mathrm{sim}(x_j, \mu_i) &= (W_K x_j)^\top (W_Q \mu_i), \\
    E^{\rm Slot} &= -\sum_{j=1}^N \ln \sum_{i=1}^S \exp \mathrm{sim}(x_j, \mu_i)
    \quad \text{(eq. 12)}.
    \end{aligned}

The softmax :math:`A_{ji} = \mathrm{softmax}_i\,\mathrm{sim}(x_j, \mu_i)` runs over the
*slots*: every token is explained by exactly one slot (Singh & Buckley 2023, §4.3: the
structural prior of the Hopfield network is swapped), so slots compete for tokens.

Contents, in the order of the spine:

* :func:`sim`, :func:`attention`, :func:`energy` (eq. 12) and
  :func:`regularised_energy` (eq. 12 plus the quadratic node potential
  :math:`\tfrac{\lambda}{2}\sum_i\|\mu_i\|^2` of Singh & Buckley's CCCP);
* analytic gradients :func:`grad_x` (eq. 13), :func:`grad_mu` (eq. 14),
  :func:`grad_w_k`, :func:`grad_w_q` (derived here; not printed in the seed);
* E-step: :func:`gradient_step`, :func:`cccp_step`, :func:`e_step`;
* M-step (§9): :func:`surrogate`, :func:`m_step_w_q`, :func:`m_step_w_k`,
  :func:`unconstrained_m_steps` (the seed's alternation, which collapses to
  :math:`W = 0`), :func:`procrustes_w_q` and :func:`fit` (the fix: :math:`W_K`
  held fixed, :math:`W_Q` on the orthogonal group by Procrustes);
* experiment helpers :func:`fourier_features`, :func:`init_slots`, :func:`blob_scene`.

Sign conventions: every ``grad_*`` returns :math:`\partial E/\partial(\cdot)`; the seed
prints :math:`-\partial E/\partial(\cdot)`.

Input dtypes. Tokens ``x``, slots ``mu``, the projections ``params.w_k`` and ``params.w_q``, the assignment matrix
``a`` and the ``points`` of :func:`fourier_features` are continuous and must have a floating dtype: an integer or
boolean array (even a one-hot assignment) raises ``ValueError`` naming it (cast explicitly). Counts (``n_steps``,
``n_slots``, ...) are Python integers; scalar hyperparameters (``lam``, ``step``, ``prox``, ``lengthscale``) may be
any finite real number.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "Params",
    "sim",
    "attention",
    "energy",
    "regularised_energy",
    "grad_x",
    "grad_mu",
    "grad_w_k",
    "grad_w_q",
    "grad_regularised_energy_mu",
    "gradient_step",
    "cccp_step",
    "e_step",
    "surrogate",
    "m_step_w_q",
    "m_step_w_k",
    "procrustes_w_q",
    "unconstrained_m_steps",
    "MStepTrace",
    "FitExtras",
    "fit",
    "fourier_features",
    "init_slots",
    "blob_scene",
]


class Params(NamedTuple):
    r"""Key and query maps of slot attention.

    .. math:: \mathrm{sim}(x_j, \mu_i) = (W_K x_j)^\top (W_Q \mu_i) = x_j^\top W_K^\top W_Q\, \mu_i

    Attributes:
      w_k: ``(h, d_x)`` key map :math:`W_K`, applied to tokens.
      w_q: ``(h, d_mu)`` query map :math:`W_Q`, applied to slots.

    The energy depends on the two maps only through :math:`B = W_K^\top W_Q`, so it is
    invariant under :math:`W_K \to G W_K,\ W_Q \to G^{-\top} W_Q` for any invertible
    :math:`G`; the least-squares surrogate of §9 is not.
    """

    w_k: Array
    w_q: Array


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _check(params, x, mu, a=None):
    w_k, w_q = params = _validate.params(params, Params, {"w_k": "d_k d", "w_q": "d_k d_slot"})[0]
    x = _validate.matrix("x", x, w_k.shape[1], "d = params.w_k.shape[1]")
    mu = _validate.matrix("mu", mu, w_q.shape[1], "d_slot = params.w_q.shape[1]")
    if a is None:
        return params, x, mu
    a = _validate.array("a", a, 2)
    if a.shape != (x.shape[0], mu.shape[0]):
        raise ValueError(f"a must have shape (N, S) = {(x.shape[0], mu.shape[0])}; got {a.shape}")
    if _validate.is_concrete(a) and bool(np.any(np.asarray(a) < 0)):
        raise ValueError("a must be non-negative (an assignment matrix)")
    return params, x, mu, a


# ---------------------------------------------------------------------------
# Energy (eq. 12)
# ---------------------------------------------------------------------------


@jax.jit
def _sim(params, x, mu):
    return (x @ params.w_k.T) @ (mu @ params.w_q.T).T


def sim(params: Params, x, mu) -> Array:
    r"""Similarities :math:`s_{ji} = (W_K x_j)^\top (W_Q \mu_i)` (§5).

    Args:
      params: :class:`Params`, ``w_k: (D, d_x)``, ``w_q: (D, d_mu)``.
      x: ``(N, d_x)`` tokens (children), ``N >= 1``.
      mu: ``(S, d_mu)`` slots (parents), ``S >= 1``. All three are floating
        point and finite: an integer or boolean array raises ``ValueError``
        naming it, here and in every function of this module.

    Returns:
      ``(N, S)`` matrix.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> x, mu = jnp.ones((5, 3)), jnp.ones((3, 2))  # 5 tokens, 3 slots
      >>> slot_attention.sim(p, x, mu).shape
      (5, 3)
    """
    params, x, mu = _check(params, x, mu)
    return _sim(params, x, mu)


def attention(params: Params, x, mu) -> Array:
    r"""Attention :math:`A_{ji} = \mathrm{softmax}_i\, s_{ji}`, normalised over slots.

    This is ``core.weights`` with tokens as children and slots as parents: each row
    sums to one (a token's posterior over which slot explains it).

    Returns:
      ``(N, S)`` array whose rows sum to 1.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.zeros((2, 2)))
      >>> a = slot_attention.attention(p, jnp.ones((5, 3)), jnp.ones((3, 2)))
      >>> a.shape, bool(jnp.allclose(a, 1 / 3))
      ((5, 3), True)
    """
    params, x, mu = _check(params, x, mu)
    return core.weights(_sim(params, x, mu))


def energy(params: Params, x, mu) -> Array:
    r"""Slot-attention energy, eq. (12): :math:`-\sum_j \ln \sum_i \exp s_{ji}`.

    Built on ``core.energy`` with children = tokens and parents = slots. Note that it is *concave* in the slots (a
    log-sum-exp of linear functions, negated) and in :math:`B = W_K^\top W_Q`, so it has no minimum: scaling the
    slots by :math:`t \to \infty` sends it to :math:`-\infty` whenever :math:`\sum_j \max_i s_{ji} > 0`.

    Args:
      params: :class:`Params`.
      x: ``(N, d_x)`` tokens.
      mu: ``(S, d_mu)`` slots.

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention as sa
      >>> p = sa.Params(jnp.ones((2, 3)), jnp.zeros((2, 2)))  # W_Q = 0: s = 0
      >>> x, mu = jnp.ones((5, 3)), jnp.ones((3, 2))  # 5 tokens, 3 slots: -5 ln 3
      >>> sa.sim(p, x, mu).shape, round(float(sa.energy(p, x, mu)), 3)
      ((5, 3), -5.493)
    """
    params, x, mu = _check(params, x, mu)
    return core.energy(_sim(params, x, mu))


def regularised_energy(params: Params, x, mu, lam: float = 1.0) -> Array:
    r"""Eq. (12) plus a quadratic node potential on the slots.

    .. math:: F_\lambda = E^{\rm Slot} + \frac{\lambda}{2}\sum_i \|\mu_i\|^2

    This is the collapsed free energy of Singh & Buckley (2023, §4, quadratic node
    potentials) for which the CCCP fixed point (their eq. 8, §4.3) is
    :func:`cccp_step`. It is bounded below for :math:`\lambda > 0`.

    Args:
      lam: :math:`\lambda \ge 0`; ``lam=0`` gives :func:`energy`.

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.zeros((2, 2)))
      >>> x, mu = jnp.ones((5, 3)), jnp.zeros((3, 2))
      >>> round(float(slot_attention.regularised_energy(p, x, mu)), 3)  # -5 ln 3
      -5.493
    """
    params, x, mu = _check(params, x, mu)
    _validate.nonnegative("lam", lam)
    return core.energy(_sim(params, x, mu)) + 0.5 * lam * jnp.sum(mu**2)


# ---------------------------------------------------------------------------
# Gradients (eqs. 13-14 and the parameter gradients)
# ---------------------------------------------------------------------------


def grad_x(params: Params, x, mu) -> Array:
    r""":math:`\partial E / \partial x_j`, eq. (13) of Tschantz (2025) with its sign.

    .. math:: -\frac{\partial E}{\partial x_j} = \sum_i A_{ji}\, W_K^\top W_Q \mu_i

    (the token acting as a child; App. B: :math:`\partial_{x_j}\mathrm{sim} = W_K^\top W_Q \mu_i`).

    Returns:
      ``(N, d_x)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> slot_attention.grad_x(p, jnp.ones((5, 3)), jnp.ones((3, 2))).shape
      (5, 3)
    """
    params, x, mu = _check(params, x, mu)
    a = core.weights(_sim(params, x, mu))
    return -(a @ (mu @ params.w_q.T)) @ params.w_k


def grad_mu(params: Params, x, mu) -> Array:
    r""":math:`\partial E / \partial \mu_i`, eq. (14) of Tschantz (2025) with its sign.

    .. math:: -\frac{\partial E}{\partial \mu_i} = \sum_j A_{ji}\, W_Q^\top W_K x_j

    (the slot acting as a parent; App. B: :math:`\partial_{\mu_i}\mathrm{sim} = W_Q^\top W_K x_j`).
    The softmax index is the slot :math:`i`, so the sum over tokens is *not* normalised.

    Returns:
      ``(S, d_mu)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> slot_attention.grad_mu(p, jnp.ones((5, 3)), jnp.ones((3, 2))).shape
      (3, 2)
    """
    params, x, mu = _check(params, x, mu)
    a = core.weights(_sim(params, x, mu))
    return -(a.T @ (x @ params.w_k.T)) @ params.w_q


def grad_w_k(params: Params, x, mu) -> Array:
    r""":math:`\partial E / \partial W_K` of eq. (12) (derived here; §9 only sets it to zero).

    .. math:: -\frac{\partial E}{\partial W_K} = \sum_{j,i} A_{ji}\, (W_Q \mu_i)\, x_j^\top
              = W_Q\, C_{\mu x}, \qquad C_{\mu x} = \sum_{j,i} A_{ji}\, \mu_i x_j^\top

    Returns:
      ``(h, d_x)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> slot_attention.grad_w_k(p, jnp.ones((5, 3)), jnp.ones((3, 2))).shape
      (2, 3)
    """
    params, x, mu = _check(params, x, mu)
    a = core.weights(_sim(params, x, mu))
    return -params.w_q @ (mu.T @ a.T @ x)


def grad_w_q(params: Params, x, mu) -> Array:
    r""":math:`\partial E / \partial W_Q` of eq. (12) (derived here; §9 only sets it to zero).

    .. math:: -\frac{\partial E}{\partial W_Q} = \sum_{j,i} A_{ji}\, (W_K x_j)\, \mu_i^\top
              = W_K\, C_{x\mu}

    Returns:
      ``(h, d_mu)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> slot_attention.grad_w_q(p, jnp.ones((5, 3)), jnp.ones((3, 2))).shape
      (2, 2)
    """
    params, x, mu = _check(params, x, mu)
    a = core.weights(_sim(params, x, mu))
    return -params.w_k @ (x.T @ a @ mu)


def grad_regularised_energy_mu(params: Params, x, mu, lam: float = 1.0) -> Array:
    r""":math:`\partial F_\lambda/\partial \mu_i = \lambda \mu_i + \partial E/\partial\mu_i` (eq. 14 plus the node
    potential).

    Returns:
      ``(S, d_mu)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.zeros((2, 2)))
      >>> mu = jnp.ones((3, 2))
      >>> g = slot_attention.grad_regularised_energy_mu(
      ...     p, jnp.ones((5, 3)), mu, lam=2.0
      ... )
      >>> bool(jnp.allclose(g, 2.0 * mu))  # W_Q = 0: only the node term
      True
    """
    _validate.nonnegative("lam", lam)
    return lam * jnp.asarray(mu) + grad_mu(params, x, mu)


# ---------------------------------------------------------------------------
# E-step: slot updates
# ---------------------------------------------------------------------------


def _grad_mu(params, x, mu):
    a = core.weights(_sim(params, x, mu))
    return -(a.T @ (x @ params.w_k.T)) @ params.w_q


def _free(params, x, mu, lam):
    return core.energy(_sim(params, x, mu)) + 0.5 * lam * jnp.sum(mu**2)


def gradient_step(params: Params, x, mu, *, step: float, lam: float = 0.0) -> Array:
    r"""One gradient-descent step on :math:`F_\lambda` (eq. 14 plus :math:`\lambda\mu`).

    .. math:: \mu_i \leftarrow \mu_i - \eta\,\bigl(\lambda\mu_i + \partial E/\partial \mu_i\bigr)

    Descent guarantees (proved in the chapter): with ``lam=0`` this descends the concave eq. (12) for *every*
    ``step > 0``, by at least :math:`\eta\|\nabla E\|^2`, and diverges (eq. 12 has no minimum); with ``lam > 0`` it
    descends the bounded :math:`F_\lambda` for :math:`0 < \eta \le 2/\lambda`.

    Returns:
      ``(S, d_mu)`` updated slots.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> mu = jnp.ones((3, 2))
      >>> slot_attention.gradient_step(p, jnp.ones((5, 3)), mu, step=0.1).shape
      (3, 2)
    """
    params, x, mu = _check(params, x, mu)
    _validate.positive("step", step)
    _validate.nonnegative("lam", lam)
    return mu - step * (lam * mu + _grad_mu(params, x, mu))


def cccp_step(params: Params, x, mu, lam: float = 1.0) -> Array:
    r"""The CCCP fixed-point update of Singh & Buckley (2023, §4.3, their eq. 8).

    .. math:: \mu_i^* = \frac{1}{\lambda}\sum_j \mathrm{softmax}_i\!\bigl(x_j^\top W_K^\top W_Q \mu_i\bigr)\, W_Q^\top
              W_K x_j
              = -\frac{1}{\lambda}\frac{\partial E}{\partial \mu_i}

    It minimises the convex majoriser
    :math:`\frac{\lambda}{2}\|\mu'\|^2 + E(\mu) + \nabla E(\mu)^\top(\mu' - \mu)` of
    :math:`F_\lambda` (:func:`regularised_energy`), so :math:`F_\lambda` never increases. It is
    the gradient step on :math:`F_\lambda` with :math:`\eta = 1/\lambda`.

    Returns:
      ``(S, d_mu)`` updated slots.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> slot_attention.cccp_step(p, jnp.ones((5, 3)), jnp.ones((3, 2))).shape
      (3, 2)
    """
    params, x, mu = _check(params, x, mu)
    _validate.positive("lam", lam)
    return -_grad_mu(params, x, mu) / lam


@partial(jax.jit, static_argnames=("n_steps", "method"))
def _e_step(params, x, mu, lam, step, n_steps, method):
    def body(m, _):
        if method == "cccp":
            new = -_grad_mu(params, x, m) / lam
        else:
            new = m - step * (lam * m + _grad_mu(params, x, m))
        return new, _free(params, x, new, lam)

    mu_out, trace = jax.lax.scan(body, mu, None, length=n_steps)
    return mu_out, jnp.concatenate([_free(params, x, mu, lam)[None], trace])


def e_step(params: Params, x, mu, *, n_steps: int, method: str = "cccp", lam: float = 1.0, step: float | None = None):
    r"""Run ``n_steps`` slot updates with the maps fixed (the E-step of §9).

    Args:
      params, x, mu: as in :func:`energy`; ``mu`` is the initial slots.
      n_steps: number of updates (static).
      method: ``"cccp"`` (:func:`cccp_step`, needs ``lam > 0``) or ``"gradient"``
        (:func:`gradient_step`, needs ``step``).
      lam: weight of the node potential; the trace is of :math:`F_\lambda`.
      step: step size of the gradient method.

    Returns:
      ``(mu, trace)``: final ``(S, d_mu)`` slots and the ``(n_steps + 1,)`` values of
      :math:`F_\lambda` (:func:`regularised_energy`; eq. 12 when ``lam=0``) along the run.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
      >>> p = slot_attention.Params(jax.random.normal(k0, (3, 4)), jnp.eye(3)[:, :2])
      >>> x, mu = jax.random.normal(k1, (6, 4)), jax.random.normal(k2, (2, 2))
      >>> out = slot_attention.e_step(p, x, mu, n_steps=3)
      >>> jax.tree.map(jnp.shape, out)
      ((2, 2), (4,))
    """
    params, x, mu = _check(params, x, mu)
    n_steps = _validate.count("n_steps", n_steps)
    _validate.choice("method", method, ("cccp", "gradient"))
    _validate.nonnegative("lam", lam)
    if method == "cccp":
        _validate.positive("lam", lam)
        step = 0.0
    else:
        if step is None:
            raise ValueError("step must be given for method='gradient'")
        _validate.positive("step", step)
    dtype = x.dtype
    return _e_step(params, x, mu, jnp.asarray(lam, dtype), jnp.asarray(step, dtype), int(n_steps), method)


# ---------------------------------------------------------------------------
# M-step (§9)
# ---------------------------------------------------------------------------


@jax.jit
def _surrogate(params, x, mu, a):
    kx = x @ params.w_k.T
    qm = mu @ params.w_q.T
    d2 = jnp.sum(kx**2, 1)[:, None] + jnp.sum(qm**2, 1)[None, :] - 2 * kx @ qm.T
    return jnp.sum(a * d2)


def surrogate(params: Params, x, mu, a) -> Array:
    r"""The weighted least-squares objective of §9 (not eq. 12).

    .. math:: L(W_K, W_Q) = \sum_{j,i} A_{ji}\, \|W_K x_j - W_Q \mu_i\|^2

    with the assignments :math:`A` held fixed. :math:`L \ge 0` and
    :math:`L(0, 0) = 0`: its global minimiser is the trivial :math:`W_K = W_Q = 0`.

    Args:
      a: ``(N, S)`` non-negative assignments (usually :func:`attention`).

    Returns:
      Scalar.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> p = slot_attention.Params(jnp.ones((2, 3)), jnp.ones((2, 2)))
      >>> x, mu = jnp.ones((5, 3)), jnp.ones((3, 2))
      >>> a = slot_attention.attention(p, x, mu)
      >>> slot_attention.surrogate(p, x, mu, a).shape
      ()
    """
    params, x, mu, a = _check(params, x, mu, a)
    return _surrogate(params, x, mu, a)


def _m_w_q(params, x, mu, a):
    c_xm = x.T @ a @ mu  # sum_ji A_ji x_j mu_i^T
    c_mm = mu.T @ (jnp.sum(a, 0)[:, None] * mu)  # sum_ji A_ji mu_i mu_i^T
    return params.w_k @ c_xm @ jnp.linalg.pinv(c_mm, hermitian=True)


def _m_w_k(params, x, mu, a):
    c_mx = mu.T @ a.T @ x
    c_xx = x.T @ (jnp.sum(a, 1)[:, None] * x)
    return params.w_q @ c_mx @ jnp.linalg.pinv(c_xx, hermitian=True)


def m_step_w_q(params: Params, x, mu, a) -> Array:
    r"""Closed-form :math:`W_Q` of §9, :math:`\arg\min_{W_Q} L` with :math:`W_K` fixed.

    .. math:: W_Q = \Bigl(\sum_{j,i} A_{ji}\, W_K x_j \mu_i^\top\Bigr)
                    \Bigl(\sum_{j,i} A_{ji}\, \mu_i \mu_i^\top\Bigr)^{+}

    The seed writes an inverse; :math:`\sum A_{ji}\mu_i\mu_i^\top` has rank at most :math:`S`, so it is singular
    whenever :math:`S < d_\mu`. The Moore-Penrose pseudo-inverse gives the minimum-norm minimiser, and still zeroes
    :math:`\partial L/\partial W_Q` (the rows of :math:`C_{x\mu}` lie in the span of the slots).

    Returns:
      ``(h, d_mu)`` new :math:`W_Q`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
      >>> p = slot_attention.Params(jax.random.normal(k0, (3, 4)), jnp.eye(3)[:, :2])
      >>> x, mu = jax.random.normal(k1, (6, 4)), jax.random.normal(k2, (2, 2))
      >>> a = slot_attention.attention(p, x, mu)
      >>> slot_attention.m_step_w_q(p, x, mu, a).shape
      (3, 2)
    """
    params, x, mu, a = _check(params, x, mu, a)
    return _m_w_q(params, x, mu, a)


def m_step_w_k(params: Params, x, mu, a) -> Array:
    r"""Closed-form :math:`W_K` of §9, :math:`\arg\min_{W_K} L` with :math:`W_Q` fixed.

    .. math:: W_K = \Bigl(\sum_{j,i} A_{ji}\, W_Q \mu_i x_j^\top\Bigr)
                    \Bigl(\sum_{j,i} A_{ji}\, x_j x_j^\top\Bigr)^{+}

    (pseudo-inverse as in :func:`m_step_w_q`).

    Returns:
      ``(h, d_x)`` new :math:`W_K`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
      >>> p = slot_attention.Params(jax.random.normal(k0, (3, 4)), jnp.eye(3)[:, :2])
      >>> x, mu = jax.random.normal(k1, (6, 4)), jax.random.normal(k2, (2, 2))
      >>> a = slot_attention.attention(p, x, mu)
      >>> slot_attention.m_step_w_k(p, x, mu, a).shape
      (3, 4)
    """
    params, x, mu, a = _check(params, x, mu, a)
    return _m_w_k(params, x, mu, a)


def _procrustes(params, x, mu, a, prox):
    m = params.w_k @ (x.T @ a @ mu) + prox * params.w_q  # W_K C_{x mu} + rho W_Q
    u, _, vt = jnp.linalg.svd(m, full_matrices=False)
    return u @ vt


def procrustes_w_q(params: Params, x, mu, a, *, prox: float = 0.0) -> Array:
    r"""Proximal orthogonal-Procrustes :math:`W_Q` (:math:`W_Q^\top W_Q = I`), :math:`W_K` fixed.

    .. math::

        \begin{aligned}
        W_Q^{\rm new} &= \arg\min_{W^\top W = I}\;
        \Bigl[L(W_K, W) + \rho\,\|W - W_Q\|_F^2\Bigr] = U V^\top, \\
        W_K C_{x\mu} + \rho W_Q &= U \Sigma V^\top .
        \end{aligned}

    For orthogonal :math:`W`, :math:`\|W\mu_i\| = \|\mu_i\|`, so
    :math:`L = \text{const} - 2\,\mathrm{tr}(W^\top W_K C_{x\mu})` and
    :math:`\|W - W_Q\|^2 = 2 d_\mu - 2\,\mathrm{tr}(W^\top W_Q)`: the bracket is linear in :math:`W` and the polar
    factor maximises it. ``prox`` :math:`=\rho = 0` is plain Procrustes (not unique when :math:`W_K C_{x\mu}` is
    rank deficient, e.g. :math:`S < d`); any :math:`\rho > 0` makes it unique and still never increases :math:`L`
    (nor eq. 12 when :math:`W_K` is orthogonal; see :func:`fit`). The norm is pinned, so nothing can collapse.

    Returns:
      ``(h, d_mu)`` with orthonormal columns (needs ``h >= d_mu``).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
      >>> p = slot_attention.Params(jax.random.normal(k0, (3, 4)), jnp.eye(3)[:, :2])
      >>> x, mu = jax.random.normal(k1, (6, 4)), jax.random.normal(k2, (2, 2))
      >>> wq = slot_attention.procrustes_w_q(p, x, mu, slot_attention.attention(p, x, mu))
      >>> wq.shape, bool(jnp.allclose(wq.T @ wq, jnp.eye(2), atol=1e-5))
      ((3, 2), True)
    """
    params, x, mu, a = _check(params, x, mu, a)
    if params.w_q.shape[0] < params.w_q.shape[1]:
        raise ValueError(f"params.w_q must have at least as many rows as columns; got {params.w_q.shape}")
    _validate.nonnegative("prox", prox)
    return _procrustes(params, x, mu, a, prox)


class MStepTrace(NamedTuple):
    r"""Traces of :func:`unconstrained_m_steps`, one entry per iterate (initial included).

    Attributes:
      norm_k: Frobenius norm of :math:`W_K`.
      norm_q: Frobenius norm of :math:`W_Q`.
      surrogate: :math:`L(W_K, W_Q)` at the fixed :math:`A`.
      energy: eq. (12) at the same slots and tokens (its own attention, not :math:`A`).
    """

    norm_k: Array
    norm_q: Array
    surrogate: Array
    energy: Array


@partial(jax.jit, static_argnames=("n_steps",))
def _alternate(params, x, mu, a, n_steps):
    def record(p):
        return (jnp.linalg.norm(p.w_k), jnp.linalg.norm(p.w_q), _surrogate(p, x, mu, a), core.energy(_sim(p, x, mu)))

    def body(p, _):
        p = p._replace(w_q=_m_w_q(p, x, mu, a))
        p = p._replace(w_k=_m_w_k(p, x, mu, a))
        return p, record(p)

    out, tr = jax.lax.scan(body, params, None, length=n_steps)
    first = record(params)
    tr = MStepTrace(*[jnp.concatenate([f[None], t]) for f, t in zip(first, tr)])
    return out, tr


def unconstrained_m_steps(params: Params, x, mu, a, *, n_steps: int):
    r"""Alternate the two §9 closed forms (:math:`W_Q`, then :math:`W_K`) at fixed :math:`A, \mu`.

    This is block-coordinate descent on :func:`surrogate`, so :math:`L` never increases, but
    :math:`L \ge 0 = L(0, 0)`: the iterates shrink towards the trivial minimiser. One sweep maps
    :math:`W_K \mapsto W_K T` with :math:`T = C_{x\mu} C_{\mu\mu}^{+} C_{\mu x} C_{xx}^{+}`, whose eigenvalues are
    squared (weighted) canonical correlations between tokens and slots, all :math:`\le 1`.

    Returns:
      ``(params, MStepTrace)``: final maps and ``(n_steps + 1,)`` traces.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
      >>> p = slot_attention.Params(jax.random.normal(k0, (3, 4)), jnp.eye(3)[:, :2])
      >>> x, mu = jax.random.normal(k1, (6, 4)), jax.random.normal(k2, (2, 2))
      >>> a = slot_attention.attention(p, x, mu)
      >>> p2, trace = slot_attention.unconstrained_m_steps(p, x, mu, a, n_steps=2)
      >>> p2.w_q.shape, trace.energy.shape
      ((3, 2), (3,))
    """
    params, x, mu, a = _check(params, x, mu, a)
    n_steps = _validate.count("n_steps", n_steps)
    return _alternate(params, x, mu, a, int(n_steps))


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`: the slots and the traces, one row per EM
    iteration.

    Attributes:
      mu: ``(K, d)`` slots after the last E-step.
      regularised_energy: ``(n_steps, n_e_steps + 2)`` values of :math:`F_\lambda`: before the
        E-step, after each of its CCCP updates, and after the M-step.
      surrogate_before: ``(n_steps,)`` :math:`L` at the E-step's :math:`A, \mu`
        before the :math:`W_Q` update.
      surrogate_after: ``(n_steps,)`` the same after the :math:`W_Q` update.
      delta_w_q: ``(n_steps,)`` Frobenius norm of the change in :math:`W_Q`.
      norm_w_q: ``(n_steps,)`` Frobenius norm of :math:`W_Q` after the M-step.
    """

    mu: Array
    regularised_energy: Array
    surrogate_before: Array
    surrogate_after: Array
    delta_w_q: Array
    norm_w_q: Array


def _round(carry, _key, args, n_e_steps, m_step):
    # one EM iteration of fit (a round of _descent.rounds): n_e_steps CCCP slot updates, then the W_Q step
    p, m = carry
    x, lam, prox = args

    def estep(mm, _):
        new = -_grad_mu(p, x, mm) / lam
        return new, _free(p, x, new, lam)

    m_new, tr = jax.lax.scan(estep, m, None, length=n_e_steps)
    a = core.weights(_sim(p, x, m_new))
    before = _surrogate(p, x, m_new, a)
    if m_step == "procrustes":
        w_q = _procrustes(p, x, m_new, a, prox)
    else:
        w_q = _m_w_q(p, x, m_new, a)
    p_new = p._replace(w_q=w_q)
    after = _surrogate(p_new, x, m_new, a)
    trace = jnp.concatenate([_free(p, x, m, lam)[None], tr, _free(p_new, x, m_new, lam)[None]])
    return (p_new, m_new), (trace, before, after, jnp.linalg.norm(w_q - p.w_q), jnp.linalg.norm(w_q))


def _result(carry, values):
    p, m = carry
    extras = FitExtras(m, *values)
    energies = jnp.concatenate([extras.regularised_energy[:1, 0], extras.regularised_energy[:, -1]])
    return p, energies, extras, extras.regularised_energy


def fit(
    params: Params,
    x,
    mu,
    *,
    n_steps: int,
    n_e_steps: int = 1,
    lam: float = 1.0,
    m_step: str = "procrustes",
    prox: float = 1e-3,
    progress: bool = False,
):
    r"""EM for slot attention with :math:`W_K` held fixed (the fix of the §9 collapse).

    Each iteration runs ``n_e_steps`` CCCP slot updates (:func:`cccp_step`, descending :math:`F_\lambda` at fixed
    maps), then updates :math:`W_Q` at the new :math:`A, \mu` with :math:`W_K` fixed:

    * ``m_step="procrustes"``: :func:`procrustes_w_q` (``prox`` :math:`=\rho`). Needs :math:`W_Q` with orthonormal
      columns on entry. The step minimises :math:`L` over orthogonal :math:`W_Q`, and because :math:`L` restricted
      to that group is the same linear functional of :math:`W_Q` that majorises the concave eq. (12), it never
      increases :math:`F_\lambda` either: the whole loop is monotone descent on :math:`F_\lambda`.
    * ``m_step="least_squares"``: :func:`m_step_w_q`, the §9 closed form. It minimises
      :math:`L` exactly, but :math:`L` is not :math:`F_\lambda`, so the loop has no
      Lyapunov function (the chapter shows it failing to converge).

    Fixing :math:`W_K` loses no expressiveness for eq. (12), which depends only on :math:`W_K^\top W_Q`, and removes
    the direction along which the unconstrained alternation shrinks to zero.

    ``progress=True`` shows a ``tqdm.auto`` bar of the EM iterations (the
    compiled loop reports to the host every 1/50 of the run; with the bar,
    results agree with ``progress=False`` to round-off, see
    ``lse_energy._progress``).

    Returns:
      :class:`~lse_energy.core.FitResult`: the fitted :class:`Params`; ``energies``, ``(n_steps + 1,)``,
      :math:`F_\lambda` before the first iteration and after each M-step; ``n_iter = n_steps``; ``converged = None``
      (a fixed number of iterations); ``extras`` a :class:`FitExtras` with the slots and the step-by-step traces.

    Raises:
      ValueError: on bad arguments, or when the run diverged (a non-finite parameter, slot or trace entry; the
        message names the first EM iteration where the trace is not finite).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention as sa
      >>> k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
      >>> p = sa.Params(jax.random.normal(k0, (3, 4)), jnp.eye(3)[:, :2])
      >>> x, mu = jax.random.normal(k1, (6, 4)), jax.random.normal(k2, (2, 2))
      >>> e = sa.fit(p, x, mu, n_steps=3).energies  # F_lambda, never rising
      >>> e.shape, bool(e[-1] <= e[0])
      ((4,), True)
    """
    params, x, mu = _check(params, x, mu)
    n_steps, n_e_steps = _validate.count("n_steps", n_steps), _validate.count("n_e_steps", n_e_steps)
    _validate.positive("lam", lam)
    _validate.choice("m_step", m_step, ("procrustes", "least_squares"))
    if m_step == "procrustes":
        _validate.nonnegative("prox", prox)
        _validate.orthonormal_columns("params.w_q", params.w_q, "for m_step='procrustes'")
    return _descent.rounds(
        "slot_attention.fit",
        partial(_round, n_e_steps=int(n_e_steps), m_step=m_step),
        (params, mu),
        n_rounds=int(n_steps),
        args=(x, jnp.asarray(lam, x.dtype), jnp.asarray(prox, x.dtype)),
        result=_result,
        hint="use m_step='procrustes' (monotone), a larger lam or fewer n_e_steps",
        progress=progress,
    )


# ---------------------------------------------------------------------------
# Experiment helpers
# ---------------------------------------------------------------------------


def fourier_features(points, *, n_features: int, lengthscale: float, key) -> Array:
    r"""Random Fourier features (Rahimi & Recht) of a Gaussian kernel.

    .. math:: \phi(p) = \sqrt{2/D}\,\cos(\Omega p + b), \quad
              \Omega_{kl} \sim \mathcal N(0, \ell^{-2}),\ b_k \sim U[0, 2\pi),

    so :math:`\phi(p)^\top\phi(q) \approx \exp(-\|p - q\|^2 / 2\ell^2)` and
    :math:`\|\phi(p)\|^2 \approx 1`.

    Args:
      points: ``(N, d_in)``.
      n_features: :math:`D \ge 1`.
      lengthscale: :math:`\ell > 0`.
      key: PRNG key (keyword-only) for :math:`\Omega, b`.

    Returns:
      ``(N, D)`` tokens.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> pts = jnp.zeros((5, 2))
      >>> f = slot_attention.fourier_features(
      ...     pts, n_features=8, lengthscale=0.5, key=jax.random.key(0)
      ... )
      >>> f.shape
      (5, 8)
    """
    _validate.key("key", key)
    points = _validate.array("points", points, 2)
    n_features = _validate.count("n_features", n_features)
    _validate.positive("lengthscale", lengthscale)
    return _fourier(points, key, jnp.asarray(lengthscale, points.dtype), int(n_features))


@partial(jax.jit, static_argnames=("n_features",))
def _fourier(points, key, lengthscale, n_features):
    k1, k2 = jax.random.split(key)
    omega = core.random_normal(k1, (n_features, points.shape[1]), points.dtype) / lengthscale
    b = core.random_uniform(k2, (n_features,), points.dtype, maxval=2 * jnp.pi)
    return jnp.sqrt(2.0 / n_features) * jnp.cos(points @ omega.T + b)


@partial(jax.jit, static_argnames=("n_slots",))
def _farthest(x, first, n_slots):
    d2 = jnp.sum((x - x[first]) ** 2, 1)
    idx = jnp.zeros(n_slots, jnp.int32).at[0].set(first.astype(jnp.int32))

    def body(s, carry):
        idx, d2 = carry
        nxt = jnp.argmax(d2).astype(jnp.int32)
        return idx.at[s].set(nxt), jnp.minimum(d2, jnp.sum((x - x[nxt]) ** 2, 1))

    idx, _ = jax.lax.fori_loop(1, n_slots, body, (idx, d2))
    return idx


def init_slots(x, n_slots: int, *, key) -> Array:
    r"""Farthest-point initialisation: slots are copies of tokens.

    The first slot is a token drawn uniformly with ``key``; each next slot is the token
    farthest (in token space) from the slots chosen so far.

    Args:
      x: ``(N, d)`` tokens.
      n_slots: :math:`1 \le S \le N`.
      key: PRNG key (keyword-only).

    Returns:
      ``(S, d)`` initial slots.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> x = jnp.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
      >>> mu = slot_attention.init_slots(x, 2, key=jax.random.key(0))
      >>> (
      ...     mu.shape,
      ...     bool(jnp.any(jnp.all(mu == x[2], axis=1))),
      ... )  # the far token is a slot
      ((2, 2), True)
    """
    _validate.key("key", key)
    x = _validate.array("x", x, 2)
    n_slots = _validate.count("n_slots", n_slots, high=x.shape[0], what="N")
    first = jax.random.randint(key, (), 0, x.shape[0])
    return x[_farthest(x, first, int(n_slots))]


def blob_scene(
    n_blobs: int, *, key, n_per_blob: int = 40, std: float = 0.08, min_separation: float = 0.5, n_candidates: int = 4096
):
    r"""A 2-D scene of isotropic Gaussian blobs ("objects").

    Centres are uniform on :math:`[-1, 1]^2`, redrawn (by vectorised rejection over ``n_candidates`` candidate sets)
    until all pairwise distances are at least ``min_separation``; each blob has ``n_per_blob`` points with standard
    deviation ``std``.

    Returns:
      ``(points, labels, centres)``: ``(n_blobs * n_per_blob, 2)``, ``(n_blobs *
      n_per_blob,)`` integer labels, ``(n_blobs, 2)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import slot_attention
      >>> scene = slot_attention.blob_scene(3, key=jax.random.key(0), n_per_blob=5)
      >>> jax.tree.map(jnp.shape, scene)
      ((15, 2), (15,), (3, 2))
    """
    _validate.key("key", key)
    n_blobs = _validate.count("n_blobs", n_blobs)
    _validate.positive("std", std)
    n_per_blob = _validate.count("n_per_blob", n_per_blob)
    n_candidates = _validate.count("n_candidates", n_candidates)
    _validate.nonnegative("min_separation", min_separation)
    points, labels, centres, found = _blob_scene(
        key, std, min_separation, int(n_blobs), int(n_per_blob), int(n_candidates)
    )
    if not bool(found):
        raise ValueError(f"min_separation={min_separation} too large for {n_blobs} blobs: no candidate set found")
    return points, labels, centres


@partial(jax.jit, static_argnames=("n_blobs", "n_per_blob", "n_candidates"))
def _blob_scene(key, std, min_separation, n_blobs, n_per_blob, n_candidates):
    """One compiled program per scene shape (the eager version compiled every operation separately)."""
    k1, k2 = jax.random.split(key)
    cand = core.random_uniform(k1, (n_candidates, n_blobs, 2), minval=-1.0, maxval=1.0)
    dist = jnp.linalg.norm(cand[:, :, None] - cand[:, None, :], axis=-1)
    dist = dist + jnp.where(jnp.eye(n_blobs, dtype=bool), jnp.inf, 0.0)
    ok = jnp.min(dist, axis=(1, 2)) >= min_separation
    centres = cand[jnp.argmax(ok)]
    labels = jnp.repeat(jnp.arange(n_blobs), n_per_blob)
    points = centres[labels] + std * core.random_normal(k2, (n_blobs * n_per_blob, 2), centres.dtype)
    return points, labels, centres, jnp.any(ok)
