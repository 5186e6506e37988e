r"""Cross-, self- and multi-head attention as log-sum-exp energies.

This module implements §3 (cross-attention, eqs. 6–8), §6 (self-attention,
eqs. 15–16) and Appendix B of Tschantz (2025), *Attention via log-sum-exp
energy*; the structural-inference reading of attention of Singh & Buckley
(2023), *Attention as implicit structural inference*, §3 (attention is the
posterior expectation of a value function, eq. 1; their §4, iterative
attention as a CCCP fixed point, is :mod:`lse_energy.structural`); and the transformer pieces of the lecture notes
§31 (the :math:`1/\sqrt{d}` temperature, multi-head attention, sinusoidal
positional encodings).

Conventions. Tokens are *rows*: ``x: (N, d_in)``. A projection
:math:`q_c = W^Q x_c` with ``wq: (d_k, d_in)`` is therefore ``x @ wq.T``.
Every energy is

.. math::

    E = -\sum_c \ln \sum_p \exp\big(\beta\, \mathrm{sim}(c, p) + b_{cp}\big),

built on :func:`lse_energy.core.energy`, with an inverse temperature
:math:`\beta > 0`, an optional boolean ``mask`` (``True`` = allowed edge
:math:`c \leftarrow p`) and, where offered, an additive log-prior ``bias``
:math:`b_{cp} = \ln p(\phi_c = p) + \text{const}` (Singh & Buckley §6).
The gradients below return :math:`\partial E/\partial(\cdot)`; the seed
equations are written for :math:`-\partial E/\partial(\cdot)`.

**Input validation.** Every public function checks its inputs once, at the
boundary, and raises ``ValueError`` naming the argument. Continuous-valued
arrays (queries, keys, values, tokens, projections, biases, priors, tables,
latent means) must have a floating dtype: an integer or boolean array raises
(``"q must have a floating dtype; got int64"``; cast it explicitly). They
must be finite and there must be at least one key. ``mask`` is boolean (as in
:func:`lse_energy.core.energy`), and a mask row with no allowed key raises.
Sizes and step counts (``n``, ``d``, ``n_heads``, ``n_steps``) are Python
integers; ``beta`` is any finite real scalar ``> 0``. Value checks run only
on concrete (untraced) inputs, and the jitted kernels do no checking.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate, core
from lse_energy.core import GradientTerms

Array = jax.Array

__all__ = [
    "sim",
    "Params",
    "MultiHeadParams",
    "energy",
    "grad_q",
    "grad_k",
    "token_energy",
    "grad_tokens",
    "grad_params",
    "self_energy",
    "grad_self_terms",
    "grad_self",
    "attention_weights",
    "attend",
    "edge_prior",
    "prior_energy",
    "init_params",
    "init_multihead",
    "multihead_attention",
    "causal_mask",
    "relative_position_bias",
    "sinusoidal_encoding",
    "sinusoidal_shift",
]


class Params(NamedTuple):
    r"""Query and key projections of one attention head.

    .. math:: q_c = W^Q x_c, \qquad k_p = W^K x_p, \qquad
              \mathrm{sim}(x_c, x_p) = (W^Q x_c)^\top (W^K x_p).

    Attributes:
      wq: ``(d_k, d_in)``, :math:`W^Q`.
      wk: ``(d_k, d_in)``, :math:`W^K` (for cross-attention the key tokens
        may have their own width: ``(d_k, d_in_k)``).
    """

    wq: Array
    wk: Array


class MultiHeadParams(NamedTuple):
    r"""Multi-head attention (lecture notes §31), one slice per head ``h``.

    .. math::

        \begin{aligned}
        \mathrm{MHA}(X^Q, X^{KV})_c &= \sum_{h=1}^{H} W^O_h \sum_p
        \mathrm{softmax}_p\!\Big(\beta\,(W^Q_h x^Q_c)^\top (W^K_h x^{KV}_p) \\
        &\quad + b_{cp}\Big)\, W^V_h x^{KV}_p,
        \end{aligned}

    which equals concatenating the heads and applying one
    :math:`W^O = [W^O_1, \dots, W^O_H]`.

    Attributes:
      wq: ``(H, d_head, d_model)``, :math:`W^Q_h`.
      wk: ``(H, d_head, d_model)``, :math:`W^K_h`.
      wv: ``(H, d_v, d_model)``, :math:`W^V_h`.
      wo: ``(H, d_model, d_v)``, :math:`W^O_h`.
    """

    wq: Array
    wk: Array
    wv: Array
    wo: Array


def _no_empty_rows(fn, sim, mask):
    """``fn`` (``core.energy`` or ``core.weights``) of ``sim`` under ``mask``, where a query with no allowed key
    is an error that says so in attention's terms (``core``'s names its own ``allow_empty``, which no
    attention function takes)."""
    try:
        return fn(sim, mask)
    except ValueError as err:
        if mask is None or "has no allowed parent" not in str(err):
            raise
        empty = ~np.any(np.broadcast_to(np.asarray(mask), np.shape(sim)), axis=-1)
        first = tuple(int(i) for i in np.argwhere(empty)[0])
        raise ValueError(
            f"mask: query {first} (index into the scores' shape[:-1]) has no allowed key: a fully masked row "
            "has no attention weights; allow at least one key in every row of mask"
        ) from None


def _energy(sim, mask):
    return _no_empty_rows(core.energy, sim, mask)


def _weights(sim, mask):
    return _no_empty_rows(core.weights, sim, mask)


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


_concrete = _validate.is_concrete


@jax.jit
def _sim(q, k, beta, bias):
    s = beta * jnp.einsum("...cd,...pd->...cp", q, k)
    return s if bias is None else s + bias


# ---------------------------------------------------------------------------
# Cross-attention (§3, eqs. 6-8)
# ---------------------------------------------------------------------------


def sim(q, k, *, beta=1.0, bias=None) -> Array:
    r"""The similarities of cross-attention, :math:`\mathrm{sim}(q_c, k_p) = \beta\, q_c^\top k_p + b_{cp}`,
    ``(..., N_Q, N_K)``: children are the queries, parents the keys (arguments as :func:`energy`).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import attention
      >>> s = attention.sim(jnp.ones((2, 3)), jnp.ones((4, 3)), beta=0.5)
      >>> s.shape, float(s[0, 0])
      ((2, 4), 1.5)
    """
    q, k = _validate.qk(q, k)
    _validate.beta(beta)
    return _sim(q, k, beta, _validate.bias(bias, q.shape[:-1] + k.shape[-2:-1]))


def energy(q, k, *, beta=1.0, mask=None, bias=None) -> Array:
    r"""Cross-attention energy, eq. (6) of Tschantz (2025), with temperature and log-prior.

    .. math:: E^{\mathrm{Cross}} = -\sum_{c=1}^{N_Q} \ln \sum_{p=1}^{N_K}
              \exp\big(\beta\, q_c^\top k_p + b_{cp}\big).

    The seed's eq. (6) is the case :math:`\beta = 1`, :math:`b = 0`, no mask.

    Args:
      q: ``(..., N_Q, d)`` queries (children).
      k: ``(..., N_K, d)`` keys (parents).
      beta: inverse temperature, a scalar ``> 0``.
      mask: optional boolean broadcastable to ``(..., N_Q, N_K)``; ``True``
        marks an allowed edge.
      bias: optional additive log-prior :math:`b`, broadcastable to
        ``(..., N_Q, N_K)``.

    Returns:
      Scalar energy (leading batch axes are summed).

    Examples:
      Queries orthogonal to every key see uniform attention, :math:`E = -N_Q \ln N_K`:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import attention
      >>> q, k = jnp.zeros((2, 3)), jnp.ones((4, 3))
      >>> round(float(attention.energy(q, k)), 3)  # -2 ln 4
      -2.773
    """
    q, k = _validate.qk(q, k)
    _validate.beta(beta)
    bias = _validate.bias(bias, q.shape[:-1] + k.shape[-2:-1])
    return _energy(_sim(q, k, beta, bias), mask)


def grad_q(q, k, *, beta=1.0, mask=None, bias=None) -> Array:
    r""":math:`\partial E^{\mathrm{Cross}}/\partial q_c`, eq. (7) of Tschantz (2025).

    .. math:: -\frac{\partial E}{\partial q_c} = \beta \sum_p w_{cp}\, k_p,
              \qquad w_{cp} = \mathrm{softmax}_p(\beta q_c^\top k_p + b_{cp}),

    i.e. the query is pulled towards the softmax-weighted mean of the keys
    (eq. 7 is the case :math:`\beta = 1`).

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(..., N_Q, d)``, the gradient (not its negative).
    """
    q, k = _validate.qk(q, k)
    _validate.beta(beta)
    bias = _validate.bias(bias, q.shape[:-1] + k.shape[-2:-1])
    w = _weights(_sim(q, k, beta, bias), mask)
    return -beta * jnp.einsum("...cp,...pd->...cd", w, k)


def grad_k(q, k, *, beta=1.0, mask=None, bias=None) -> Array:
    r""":math:`\partial E^{\mathrm{Cross}}/\partial k_p`, eq. (8) of Tschantz (2025).

    .. math:: -\frac{\partial E}{\partial k_p} = \beta \sum_c w_{cp}\, q_c,

    with the same weights as :func:`grad_q`: the softmax is over
    parents :math:`p` (each child's row), and the key collects the queries
    that chose it. Eq. (8)'s ":math:`\mathrm{softmax}_p`" means exactly this
    row-normalised :math:`w_{cp}`, summed down the column :math:`p`.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(..., N_K, d)``.
    """
    q, k = _validate.qk(q, k)
    _validate.beta(beta)
    bias = _validate.bias(bias, q.shape[:-1] + k.shape[-2:-1])
    w = _weights(_sim(q, k, beta, bias), mask)
    return -beta * jnp.einsum("...cp,...cd->...pd", w, q)


def _check_cross_tokens(params, xq, xk):
    wq, wk = _validate.params(params, Params, {"wq": "d_k d_in", "wk": "d_k d_in_k"})[0]
    xq = _validate.float_array("xq", xq, 2)
    xk = _validate.float_array("xk", xk, 2)
    if xq.shape[-1] != wq.shape[1]:
        raise ValueError(f"xq has width {xq.shape[-1]} but params.wq expects {wq.shape[1]}")
    if xk.shape[-1] != wk.shape[1]:
        raise ValueError(f"xk has width {xk.shape[-1]} but params.wk expects {wk.shape[1]}")
    return wq, wk, xq, xk


def token_energy(params: Params, xq, xk, *, beta=1.0, mask=None, bias=None) -> Array:
    r"""Eq. (6) as a function of raw tokens: :math:`q_c = W^Q x^Q_c`, :math:`k_p = W^K x^K_p`.

    Args:
      params: :class:`Params` with ``wq: (d_k, d_q)``, ``wk: (d_k, d_kin)``.
      xq: ``(..., N_Q, d_q)`` raw query tokens.
      xk: ``(..., N_K, d_kin)`` raw key tokens.
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      Scalar energy.
    """
    wq, wk, xq, xk = _check_cross_tokens(params, xq, xk)
    return energy(xq @ wq.T, xk @ wk.T, beta=beta, mask=mask, bias=bias)


def grad_tokens(params: Params, xq, xk, *, beta=1.0, mask=None, bias=None):
    r"""Gradients w.r.t. the raw tokens: eqs. (7)–(8) followed by the chain rule.

    §3 of Tschantz (2025): "when mapping back to the raw tokens, chain-rule
    multiplies by :math:`W^Q` or :math:`W^K`". Precisely, by their transposes:

    .. math:: \frac{\partial E}{\partial x^Q_c} = W^{Q\top} \frac{\partial E}{\partial q_c}, \qquad
              \frac{\partial E}{\partial x^K_p} = W^{K\top} \frac{\partial E}{\partial k_p}.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(dE/dxq, dE/dxk)`` with the shapes of ``xq`` and ``xk``.
    """
    wq, wk, xq, xk = _check_cross_tokens(params, xq, xk)
    q, k = xq @ wq.T, xk @ wk.T
    dq = grad_q(q, k, beta=beta, mask=mask, bias=bias)
    dk = grad_k(q, k, beta=beta, mask=mask, bias=bias)
    return dq @ wq, dk @ wk


def grad_params(params: Params, xq, xk, *, beta=1.0, mask=None, bias=None) -> Params:
    r"""Gradients w.r.t. :math:`W^Q` and :math:`W^K`: eqs. (7)–(8) and the chain rule.

    .. math::

        \begin{aligned}
        \frac{\partial E}{\partial W^Q} &= \sum_c \frac{\partial E}{\partial q_c}\, x_c^{Q\top} \\
        &= -\beta \sum_{c,p} w_{cp}\, k_p x_c^{Q\top}, \\
        \frac{\partial E}{\partial W^K} &= \sum_p \frac{\partial E}{\partial k_p}\, x_p^{K\top} \\
        &= -\beta \sum_{c,p} w_{cp}\, q_c x_p^{K\top}
        \end{aligned}

    (summed over leading batch axes too).

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      :class:`Params` of gradients, shaped like ``params``.
    """
    wq, wk, xq, xk = _check_cross_tokens(params, xq, xk)
    q, k = xq @ wq.T, xk @ wk.T
    dq = grad_q(q, k, beta=beta, mask=mask, bias=bias)
    dk = grad_k(q, k, beta=beta, mask=mask, bias=bias)
    return Params(wq=jnp.einsum("...ck,...ci->ki", dq, xq), wk=jnp.einsum("...pk,...pi->ki", dk, xk))


# ---------------------------------------------------------------------------
# Self-attention (§6, eqs. 15-16)
# ---------------------------------------------------------------------------


def _check_self(params, x):
    wq, wk = _validate.params(params, Params, {"wq": "d_k d", "wk": "d_k d"})[0]
    x = _validate.float_array("x", x, 2)
    if x.shape[-1] != wq.shape[1]:
        raise ValueError(f"x has width {x.shape[-1]} but params.wq expects {wq.shape[1]}")
    return wq, wk, x


def self_energy(params: Params, x, *, beta=1.0, mask=None, bias=None) -> Array:
    r"""Self-attention energy, eq. (15) of Tschantz (2025), every token child and parent.

    .. math:: E^{\mathrm{SA}} = -\sum_{c=1}^{N} \ln \sum_{p=1}^{N}
              \exp\big(\beta\,(W^Q x_c)^\top (W^K x_p) + b_{cp}\big).

    Args:
      params: :class:`Params`, ``wq, wk: (d_k, d)``.
      x: ``(..., N, d)`` tokens.
      beta: inverse temperature ``> 0``.
      mask: optional boolean ``(..., N, N)``, e.g. :func:`causal_mask`.
      bias: optional additive log-prior ``(..., N, N)``.

    Returns:
      Scalar energy.
    """
    wq, wk, x = _check_self(params, x)
    _validate.beta(beta)
    bias = _validate.bias(bias, x.shape[:-1] + x.shape[-2:-1])
    return _energy(_sim(x @ wq.T, x @ wk.T, beta, bias), mask)


def grad_self_terms(params: Params, x, *, beta=1.0, mask=None, bias=None) -> GradientTerms:
    r"""The two terms of :math:`-\partial E^{\mathrm{SA}}/\partial x_i`, eq. (16) of Tschantz (2025).

    .. math::

        \begin{aligned}
        -\frac{\partial E}{\partial x_i}
        &= \underbrace{\beta \sum_p w_{ip}\, W^{Q\top} W^K x_p}_{\text{child } i} \\
        &\quad + \underbrace{\beta \sum_c w_{ci}\, W^{K\top} W^Q x_c}_{\text{parent } i}, \\
        w_{cp} &= \mathrm{softmax}_p\big(\beta (W^Q x_c)^\top(W^K x_p) + b_{cp}\big).
        \end{aligned}

    The transposes are as printed in eq. (16) and Appendix B:
    :math:`\partial_{x_c} (W^Q x_c)^\top (W^K x_p) = W^{Q\top} W^K x_p` (the
    seed writes it :math:`W_Q^\top W_K x_p`, same matrices). The other order,
    :math:`W^{K\top} W^Q x_p`, is wrong unless :math:`W^{Q\top} W^K` is
    symmetric; the tests and the chapter check this.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      :class:`lse_energy.core.GradientTerms` with ``child`` and ``parent``,
      each ``(..., N, d)``; their sum is :math:`-\partial E/\partial x`.
    """
    wq, wk, x = _check_self(params, x)
    _validate.beta(beta)
    bias = _validate.bias(bias, x.shape[:-1] + x.shape[-2:-1])
    q, k = x @ wq.T, x @ wk.T
    w = _weights(_sim(q, k, beta, bias), mask)
    child = beta * jnp.einsum("...ip,...pk->...ik", w, k) @ wq  # sum_p w_ip W^QT W^K x_p
    parent = beta * jnp.einsum("...ci,...ck->...ik", w, q) @ wk  # sum_c w_ci W^KT W^Q x_c
    return GradientTerms(child=child, parent=parent)


def grad_self(params: Params, x, *, beta=1.0, mask=None, bias=None) -> Array:
    r""":math:`\partial E^{\mathrm{SA}}/\partial x`, eq. (16): minus the sum of :func:`grad_self_terms`.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(..., N, d)``.
    """
    t = grad_self_terms(params, x, beta=beta, mask=mask, bias=bias)
    return -(t.child + t.parent)


# ---------------------------------------------------------------------------
# Attention as an expectation (Singh & Buckley eq. 1)
# ---------------------------------------------------------------------------


def attention_weights(q, k, *, beta=None, mask=None, bias=None) -> Array:
    r"""The posterior over edges, :math:`p(\phi_c = p \mid x) = \mathrm{softmax}_p(\beta q_c^\top k_p + b_{cp})`.

    With a uniform structural prior this is Singh & Buckley's
    :math:`p(\phi \mid x) = \mathrm{softmax}(\ln p(x, \phi))`; a bias
    :math:`b_{cp} = \ln \pi_{cp}` turns it into the posterior under the prior
    :math:`\pi` (§6 there). ``beta=None`` means :math:`1/\sqrt{d}`.

    Args:
      q: ``(..., N_Q, d)``; k: ``(..., N_K, d)``.
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      ``(..., N_Q, N_K)``; rows sum to one over allowed edges.
    """
    q, k = _validate.qk(q, k)
    beta = _validate.default_beta(beta, q.shape[-1])
    bias = _validate.bias(bias, q.shape[:-1] + k.shape[-2:-1])
    return _weights(_sim(q, k, beta, bias), mask)


def attend(q, k, v, *, beta=None, mask=None, bias=None) -> Array:
    r"""Attention :math:`\mathrm{softmax}(\beta\, q k^\top + b)\, v`, an expectation over edges.

    Singh & Buckley (2023) eq. (1): with the factorised structural prior
    (each query chooses one key, :math:`\phi_c \in \{1..N_K\}`) and value
    function :math:`v_c(x, \phi_c = p) = v_p`,

    .. math:: \mathrm{attend}(q, k, v)_c = \mathbb{E}_{p(\phi_c \mid x)}[v_{\phi_c}]
              = \sum_p \mathrm{softmax}_p(\beta q_c^\top k_p + b_{cp})\, v_p.

    Args:
      q: ``(..., N_Q, d)`` queries.
      k: ``(..., N_K, d)`` keys.
      v: ``(..., N_K, d_v)`` values.
      beta: inverse temperature; ``None`` means :math:`1/\sqrt{d}` (lecture
        notes §31).
      mask: optional boolean broadcastable to ``(..., N_Q, N_K)``.
      bias: optional additive log-prior broadcastable to ``(..., N_Q, N_K)``.

    Returns:
      ``(..., N_Q, d_v)``.
    """
    v = _validate.float_array("v", v, 2)
    q, k = _validate.qk(q, k)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have one row per key: k{k.shape} but v{v.shape}")
    if mask is not None:
        w = attention_weights(q, k, beta=beta, mask=mask, bias=bias)
        return jnp.einsum("...cp,...pe->...ce", w, v)
    # Fast path: everything is validated above, so the jitted kernel skips
    # core's host-side finiteness check of the (N_Q, N_K) similarity matrix.
    beta = _validate.default_beta(beta, q.shape[-1])
    bias = _validate.bias(bias, q.shape[:-1] + k.shape[-2:-1])
    return _attend_jit(q, k, v, jnp.asarray(beta, q.dtype), bias)


def _attend(q, k, v, beta, bias):
    r"""``softmax(beta q k' + bias) v`` via :func:`lse_energy.core.softmax_average`.

    The normalisation is applied after the ``@ v``, and long un-batched query
    sets are processed in cache-sized blocks (see the core docstring).
    """
    return core.softmax_average(q, k, v, beta, bias)


_attend_jit = jax.jit(_attend)


def edge_prior(bias, mask=None) -> Array:
    r"""The normalised edge prior :math:`\pi_{cp} \propto \exp b_{cp}` of an additive bias.

    Singh & Buckley §6: a positional bias is a non-uniform structural prior.
    ``softmax(sim + b)`` is the posterior under :math:`\pi` (Bayes' rule).

    Args:
      bias: ``(..., N_Q, N_K)``.

    Returns:
      ``(..., N_Q, N_K)``, rows summing to one.
    """
    bias = _validate.float_array("bias", bias, 2)
    return _weights(bias, mask)


def prior_energy(sim, prior) -> Array:
    r"""Energy under a non-uniform edge prior: :math:`-\sum_c \ln \sum_p \pi_{cp} \exp \mathrm{sim}_{cp}`.

    This is :math:`-\sum_c \ln p(x_c)` for the mixture whose edge prior is
    :math:`\pi` (up to the node potentials). It is computed directly from
    :math:`\pi` (not through a bias), so that
    ``core.energy(sim + log(pi)) == prior_energy(sim, pi)`` is a real check
    of the log-prior reading. Edges with :math:`\pi_{cp} = 0` are excluded.

    Args:
      sim: ``(..., C, P)`` floating-point, finite, ``P >= 1``.
      prior: ``(..., C, P)`` floating point, the shape of ``sim``,
        non-negative, rows summing to one (so no row is all zero).

    Returns:
      Scalar.

    Raises:
      ValueError: integer or non-finite ``sim``/``prior``, ``prior`` of
        another shape, or a ``prior`` row that is negative or does not sum
        to one.
    """
    sim = _validate.float_array("sim", sim, 2)
    prior = _validate.float_array("prior", prior, 2)
    if sim.shape[-1] < 1:
        raise ValueError(f"sim must have at least one parent (P >= 1); got shape {sim.shape}")
    if prior.shape != sim.shape:
        raise ValueError(f"prior must have the shape of sim (..., C, P) = {sim.shape}; got {prior.shape}")
    if _concrete(prior):
        p = np.asarray(prior)
        if np.any(p < 0) or not np.allclose(p.sum(-1), 1.0, rtol=0, atol=1e-10):
            raise ValueError("prior must be non-negative with rows summing to one")
    # Log-sum-exp by hand, not core.energy(sim + log prior): a zero prior entry is allowed and its log is -inf.
    m = jax.lax.stop_gradient(jnp.max(sim, axis=-1, keepdims=True))
    return -jnp.sum(jnp.log(jnp.sum(prior * jnp.exp(sim - m), axis=-1)) + m[..., 0])


# ---------------------------------------------------------------------------
# Transformer pieces (lecture notes §31)
# ---------------------------------------------------------------------------


def init_params(d_in: int, d_k: int, *, key, scale: float = 1.0) -> Params:
    r"""Gaussian :math:`W^Q, W^K` with entries :math:`\mathcal{N}(0, \mathrm{scale}^2/d_{in})`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import attention
      >>> # d_in = 3, d_k = 2
      >>> params = attention.init_params(3, 2, key=jax.random.key(0))
      >>> params.wq.shape, attention.self_energy(params, jnp.ones((4, 3))).shape
      ((2, 3), ())
    """
    d_in = _validate.count("d_in", d_in, 1)
    d_k = _validate.count("d_k", d_k, 1)
    scale = _validate.positive("scale", scale)
    k1, k2 = jax.random.split(_validate.key("key", key))
    s = scale / math.sqrt(d_in)
    return Params(wq=s * core.random_normal(k1, (d_k, d_in)), wk=s * core.random_normal(k2, (d_k, d_in)))


def init_multihead(d_model: int, n_heads: int, d_head: int | None = None, *, key) -> MultiHeadParams:
    r"""Gaussian multi-head parameters, :math:`\mathcal{N}(0, 1/\text{fan-in})` entries.

    Args:
      d_model: token width :math:`d_{model} \ge 1`.
      n_heads: number of heads :math:`H \ge 1`.
      d_head: width of each head's queries, keys and values; ``None``
        (default) means ``d_model // n_heads``, which must then divide exactly.
      key: a JAX PRNG key (``jax.random.key(0)``), keyword-only.

    Returns:
      :class:`MultiHeadParams` with ``wq``, ``wk``, ``wv`` of shape
      ``(H, d_head, d_model)`` and ``wo`` of shape ``(H, d_model, d_head)``
      (the output projection's entries have variance :math:`1/(H d_{head})`).

    Examples:
      >>> import jax
      >>> from lse_energy import attention
      >>> attention.init_multihead(8, 2, key=jax.random.key(0)).wq.shape
      (2, 4, 8)
    """
    d_model = _validate.count("d_model", d_model, 1)
    n_heads = _validate.count("n_heads", n_heads, 1)
    if d_head is None:
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}; pass d_head")
        d_head = d_model // n_heads
    d_head = _validate.count("d_head", d_head, 1)
    kq, kk, kv, ko = jax.random.split(_validate.key("key", key), 4)
    a = 1.0 / math.sqrt(d_model)
    return MultiHeadParams(
        wq=a * core.random_normal(kq, (n_heads, d_head, d_model)),
        wk=a * core.random_normal(kk, (n_heads, d_head, d_model)),
        wv=a * core.random_normal(kv, (n_heads, d_head, d_model)),
        wo=core.random_normal(ko, (n_heads, d_model, d_head)) / math.sqrt(n_heads * d_head),
    )


def multihead_attention(params: MultiHeadParams, xq, xkv=None, *, beta=None, mask=None, bias=None) -> Array:
    r"""Multi-head attention (see :class:`MultiHeadParams` for the formula).

    Each head is :func:`attend` on its own projections; ``beta=None`` means
    :math:`1/\sqrt{d_{head}}`.

    Args:
      params: :class:`MultiHeadParams`, floating point and finite, ``H >= 1``.
      xq: ``(..., N_Q, d_model)`` query tokens, floating point and finite
        (integer arrays raise ``ValueError``, here and for ``params``).
      xkv: ``(..., N_K, d_model)`` key/value tokens with ``N_K >= 1``;
        ``None`` for self-attention (``xkv = xq``).
      beta: the inverse temperature :math:`\beta > 0` of every head's
        scores :math:`\beta\, q_h k_h^\top`; ``None`` (default) means
        :math:`1/\sqrt{d_{head}}`, the transformer's scaling.
      mask: optional boolean broadcastable to ``(..., H, N_Q, N_K)``
        (a ``(N_Q, N_K)`` mask applies to every head).
      bias: optional log-prior broadcastable to ``(..., H, N_Q, N_K)``.

    Returns:
      ``(..., N_Q, d_model)``.
    """
    if not isinstance(params, MultiHeadParams):
        raise ValueError(f"params must be MultiHeadParams; got {type(params).__name__}")
    params = MultiHeadParams(
        *(_validate.float_array(f"params.{name}", a) for name, a in zip(MultiHeadParams._fields, params))
    )
    if any(a.ndim != 3 for a in params):
        raise ValueError(
            "params must have wq, wk: (H, d_head, d_model), wv: (H, d_v, d_model), wo: (H, d_model, d_v); got "
            f"{params.wq.shape}, {params.wk.shape}, {params.wv.shape}, {params.wo.shape}"
        )
    if params.wq.shape[0] < 1:
        raise ValueError(f"params must hold at least one head (H >= 1); got params.wq of shape {params.wq.shape}")
    xq = _validate.float_array("xq", xq, 2)
    xkv = xq if xkv is None else _validate.float_array("xkv", xkv, 2)
    H, dh, dm = params.wq.shape
    if (
        params.wk.shape != (H, dh, dm)
        or params.wv.shape[::2] != (H, dm)
        or params.wo.shape[:2] != (H, dm)
        or params.wo.shape[2] != params.wv.shape[1]
    ):
        raise ValueError(
            "params must have wq, wk: (H, d_head, d_model), wv: (H, d_v, d_model), wo: (H, d_model, d_v); got "
            f"{params.wq.shape}, {params.wk.shape}, {params.wv.shape}, {params.wo.shape}"
        )
    if xq.shape[-1] != dm or xkv.shape[-1] != dm:
        raise ValueError(f"xq and xkv must have width d_model={dm}; got {xq.shape}, {xkv.shape}")
    q = jnp.einsum("hkm,...cm->...hck", params.wq, xq)
    k = jnp.einsum("hkm,...pm->...hpk", params.wk, xkv)
    v = jnp.einsum("hkm,...pm->...hpk", params.wv, xkv)
    heads = attend(q, k, v, beta=beta, mask=mask, bias=bias)  # (..., H, N_Q, d_v)
    return jnp.einsum("hmk,...hck->...cm", params.wo, heads)


def causal_mask(n: int, m: int | None = None) -> Array:
    r"""Boolean ``(n, m)`` causal mask: query ``i`` may attend to key ``j`` iff ``j <= i``.

    With ``m > n`` the queries are the last ``n`` of ``m`` positions (query
    ``i`` sits at position ``i + m - n``), so every row keeps at least one key.
    """
    n = _validate.count("n", n, 1)
    m = n if m is None else _validate.count("m", m, 1)
    if m < n:
        raise ValueError(f"causal_mask needs 1 <= n <= m; got n={n}, m={m}")
    return jnp.arange(m)[None, :] <= (jnp.arange(n)[:, None] + (m - n))


def relative_position_bias(table, n: int) -> Array:
    r"""Bias :math:`b_{ij} = t[j - i + n - 1]` that depends only on the offset :math:`j - i`.

    Args:
      table: ``(2n - 1,)`` (or ``(..., 2n - 1)`` for one table per head),
        entry ``t[o + n - 1]`` is the log-prior weight of offset ``o = j - i``.
      n: sequence length.

    Returns:
      ``(..., n, n)``.
    """
    table = _validate.float_array("table", table, min_ndim=1)
    n = _validate.count("n", n, 1)
    if table.shape[-1] != 2 * n - 1:
        raise ValueError(f"table must have 2n - 1 = {2 * n - 1} entries in its last axis; got {table.shape}")
    idx = jnp.arange(n)[None, :] - jnp.arange(n)[:, None] + n - 1
    return table[..., idx]


def _check_encoding(d, base) -> int:
    """A sinusoidal encoding's width ``d`` (an even integer >= 2; ``True`` is not a width) and ``base`` (> 1)."""
    d = _validate.count("d", d, 2)
    if d % 2:
        raise ValueError(f"d must be a positive even integer; got {d}")
    if not (np.ndim(base) == 0 and np.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite scalar > 1; got {base!r}")
    return d


def sinusoidal_encoding(n: int, d: int, *, base: float = 10000.0) -> Array:
    r"""Sinusoidal positional encodings of lecture notes §31, ``(n, d)``.

    .. math:: \mathrm{PE}(i)_{2j} = \sin(i\,\omega_j), \quad
              \mathrm{PE}(i)_{2j+1} = \cos(i\,\omega_j), \quad
              \omega_j = \mathrm{base}^{-2j/d}.
    """
    n = _validate.count("n", n, 1)
    d = _check_encoding(d, base)
    omega = base ** (-2.0 * jnp.arange(d // 2) / d)
    ang = jnp.arange(n)[:, None] * omega[None, :]
    return jnp.stack([jnp.sin(ang), jnp.cos(ang)], axis=-1).reshape(n, d)


def sinusoidal_shift(offset, d: int, *, base: float = 10000.0) -> Array:
    r"""The rotation :math:`R(o)` with :math:`\mathrm{PE}(i + o) = R(o)\, \mathrm{PE}(i)` for all ``i``.

    Block diagonal, one :math:`2 \times 2` block per frequency:
    :math:`\begin{pmatrix} \cos o\omega_j & \sin o\omega_j \\ -\sin o\omega_j & \cos o\omega_j \end{pmatrix}`
    (from :math:`\sin(a+b)` and :math:`\cos(a+b)`), independent of ``i``; so
    :math:`\mathrm{PE}(i)^\top \mathrm{PE}(j)` depends on :math:`j - i` only.

    Args:
      offset: the shift :math:`o` in positions, a finite real scalar.
      d: the encoding's width, a positive even integer.

    Returns:
      ``(d, d)`` orthogonal matrix.
    """
    d = _check_encoding(d, base)
    if _concrete(offset) and not (np.ndim(offset) == 0 and np.isfinite(offset)):
        raise ValueError(f"offset must be a finite scalar; got {offset!r}")
    omega = base ** (-2.0 * jnp.arange(d // 2) / d)
    c, s = jnp.cos(offset * omega), jnp.sin(offset * omega)
    blocks = jnp.stack([jnp.stack([c, s], -1), jnp.stack([-s, c], -1)], -2)  # (d/2, 2, 2)
    return jax.scipy.linalg.block_diag(*blocks)
