r"""Multi-hop attention: a two-hop value function in attention as structural inference.

Singh & Buckley (2023), *Attention as implicit structural inference*,
§5. Transformer attention is the expectation of a value function
under the posterior over edges, :math:`\mathbb{E}_{p(\phi \mid x)}[v(x, \phi)]`
(their eq. 1); multi-hop attention changes the value function.

**Multi-hop attention** (value function). Each node :math:`i` picks a parent
:math:`\phi_i = j` and that parent picks its own parent :math:`\phi_j = k`;
the value function :math:`V(x_j + x_k)` uses both. Under the factorised
posterior :math:`p(\phi_i \mid x)\,p(\phi_j \mid x)` (rows of the attention
matrix :math:`P`) its expectation is

.. math:: \mathbb{E}[V(x_{\phi_i} + x_{\phi_{\phi_i}})] = \big[(P + P^2)\, X V^\top\big]_i
          \qquad \text{(§5, ``variant="paper"'')}.

The authors' public code uses :math:`(I + P + P^2)/3` instead
(``variant="code"``): the value function :math:`V(x_i + x_j + x_k)/3` that
also includes the query node itself.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from lse_energy import _validate, core

Array = jax.Array

__all__ = ["VARIANTS", "Params", "hop_matrix", "attend", "attention", "grad_logits"]

VARIANTS = ("paper", "code")


def _check_variant(variant):
    _validate.choice("variant", variant, VARIANTS)


class Params(NamedTuple):
    r"""One multi-hop attention head (the same parameters as one self-attention head).

    .. math:: P = \mathrm{softmax}_{\text{rows}}\big(\beta\,(X W_Q^\top)(X W_K^\top)^\top\big), \qquad
              \mathrm{out} = A(P)\, X W_V^\top,

    with :math:`A(P)` from :func:`hop_matrix`.

    Attributes:
      wq: ``(d_k, d)``, :math:`W_Q`.
      wk: ``(d_k, d)``, :math:`W_K`.
      wv: ``(d_v, d)``, :math:`W_V`.
    """

    wq: Array
    wk: Array
    wv: Array


def _hop(p, variant):
    p2 = jnp.einsum("...ij,...jk->...ik", p, p)
    if variant == "paper":
        return p + p2
    eye = jnp.eye(p.shape[-1], dtype=p.dtype)
    return (eye + p + p2) / 3.0


def hop_matrix(p, *, variant: str = "paper") -> Array:
    r"""The two-hop mixing matrix :math:`A(P)`.

    * ``"paper"``: :math:`A = P + P^2`, §5 of Singh & Buckley (2023); rows sum
      to 2 (the value function :math:`V(x_j + x_k)` is a *sum* of two nodes).
    * ``"code"``: :math:`A = (I + P + P^2)/3`, the authors' public code; rows
      sum to 1 and the query's own value enters with weight 1/3.

    :math:`(P^2)_{ik} = \sum_j p(\phi_i = j)\, p(\phi_j = k)` is the
    probability of the two-hop path :math:`i \to j \to k` under the
    factorised posterior.

    Args:
      p: ``(..., N, N)`` row-stochastic attention matrix.
      variant: ``"paper"`` or ``"code"``.

    Returns:
      ``(..., N, N)``.
    """
    _check_variant(variant)
    p = _validate.float_array("p", p, min_ndim=2)
    if p.shape[-1] != p.shape[-2]:
        raise ValueError(f"p must be square in its last two axes (self-attention); got {p.shape}")
    return _hop(p, variant)


def attend(q, k, v, *, variant: str = "paper", beta=None, mask=None) -> Array:
    r"""Multi-hop attention :math:`A(P)\, v` with :math:`P = \mathrm{softmax}(\beta q k^\top)`.

    Args:
      q: ``(..., N, d_k)`` queries; k: ``(..., N, d_k)`` keys (one per query:
        the second hop re-uses ``P``, so it is self-attention).
      v: ``(..., N, d_v)`` values.
      variant: see :func:`hop_matrix`.
      beta: inverse temperature; ``None`` means :math:`1/\sqrt{d_k}`.
      mask: optional boolean broadcastable to ``(..., N, N)``.

    Returns:
      ``(..., N, d_v)``.

    Examples:
      Queries orthogonal to the keys attend uniformly, so every output row mixes all values:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import multihop
      >>> q, k, v = jnp.zeros((3, 2)), jnp.ones((3, 2)), jnp.ones((3, 4))
      >>> out = multihop.attend(q, k, v)  # the rows of A = P + P^2 sum to 2
      >>> # (I + P + P^2) / 3: rows sum to 1
      >>> code = multihop.attend(q, k, v, variant="code")
      >>> out.shape, bool(jnp.allclose(out, 2.0)), bool(jnp.allclose(code, 1.0))
      ((3, 4), True, True)
    """
    _check_variant(variant)
    v = _validate.float_array("v", v, min_ndim=2)
    q, k = _validate.qk(q, k)
    beta = _validate.default_beta(beta, q.shape[-1])
    p = core.weights(beta * jnp.einsum("...cd,...pd->...cp", q, k), mask)
    if p.shape[-1] != p.shape[-2]:
        raise ValueError(f"q and k must have the same number of rows; got {jnp.shape(q)}, {jnp.shape(k)}")
    if v.shape[-2] != p.shape[-1]:
        raise ValueError(f"v must have one row per key; got v{v.shape} for {p.shape[-1]} keys")
    return jnp.einsum("...ij,...je->...ie", _hop(p, variant), v)


def attention(params: Params, x, *, variant: str = "paper", beta=None, mask=None) -> Array:
    r"""Multi-hop self-attention of tokens ``x: (..., N, d)``; returns ``(..., N, d_v)``.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities; ``None`` is
        :math:`1/\sqrt{d}`, with ``d`` the width of the queries.
    """
    if not isinstance(params, Params):
        raise ValueError(f"params must be multihop.Params; got {type(params).__name__}")
    x = _validate.float_array("x", x, min_ndim=2)
    for name, w in zip(("wq", "wk", "wv"), params):
        if w.ndim != 2 or w.shape[1] != x.shape[-1]:
            raise ValueError(f"params.{name} must have shape (., {x.shape[-1]}); got {w.shape}")
    q, k, v = x @ params.wq.T, x @ params.wk.T, x @ params.wv.T
    return attend(q, k, v, variant=variant, beta=beta, mask=mask)


def grad_logits(logits, v, g, *, variant: str = "paper", mask=None) -> Array:
    r"""Analytic :math:`\partial L / \partial S` for :math:`L = \langle G_{\mathrm{out}}, A(P)\,v\rangle`.

    With :math:`P = \mathrm{softmax}_{\text{rows}}(S)` and the upstream
    gradient :math:`g = \partial L / \partial\, \mathrm{out}`, write
    :math:`G = g v^\top` (``(N, N)``) and :math:`c = 1` (paper) or
    :math:`1/3` (code). Then

    .. math:: \frac{\partial L}{\partial P} = D = c\,(G + G P^\top + P^\top G), \qquad
              \frac{\partial L}{\partial S_{ij}} = P_{ij}\Big(D_{ij} - \sum_{l} P_{il} D_{il}\Big).

    The second-hop terms :math:`G P^\top` (credit to the first hop) and
    :math:`P^\top G` (credit to the second hop) are what one-layer attention
    lacks: a node :math:`j` is rewarded for attending to :math:`k` when some
    query attends to :math:`j`. (Derived here; §5 gives no gradient.)

    Args:
      logits: ``(..., N, N)`` pre-softmax scores :math:`S`.
      v: ``(..., N, d_v)``; g: ``(..., N, d_v)``.
      mask: optional boolean; masked logits get zero gradient.

    Returns:
      ``(..., N, N)``.
    """
    _check_variant(variant)
    logits = _validate.float_array("logits", logits, min_ndim=2)
    v = _validate.float_array("v", v, min_ndim=2)
    g = _validate.float_array("g", g, min_ndim=2)
    p = core.weights(logits, mask)
    c = 1.0 if variant == "paper" else 1.0 / 3.0
    G = jnp.einsum("...ie,...je->...ij", g, v)
    pt = jnp.swapaxes(p, -1, -2)
    D = c * (G + G @ pt + pt @ G)
    return p * (D - jnp.sum(p * D, axis=-1, keepdims=True))
