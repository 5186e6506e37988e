r"""New attention designs from structural inference: multi-hop and expanding attention.

This module implements §5 of Singh & Buckley (2023), *Attention as implicit
structural inference* (seed ``002_…``), on top of :mod:`lse_energy.attention`.
Transformer attention is the expectation of a value function under the
posterior over edges,
:math:`\mathbb{E}_{p(\phi \mid x)}[v(x, \phi)]` (their eq. 1); §5 changes
(a) the value function and (c) the structural prior.

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

**Expanding attention** (prior). A query attends to one earlier token at
distance :math:`\phi \in \{0, 1, 2, \dots\}` (0 = the nearest key), with a
geometric prior :math:`p(\phi \mid q) = q (1 - q)^\phi` and a conjugate
hyper-prior :math:`q \sim \mathrm{Beta}(\alpha, \beta)`. The truncated
mean-field updates of §5 are

1. :math:`q_t = \alpha_t / (\alpha_t + \beta_t)`,
2. :math:`p_t = p(\phi \mid x, q_t) = \mathrm{softmax}_{i < H(q_t)}\big(s_i + \ln q_t + i \ln(1 - q_t)\big)`,
3. :math:`\alpha_{t+1} = \alpha_t + 1`, :math:`\beta_{t+1} = \beta_t + \sum_{i < H(q_t)} i\, (p_t)_i`,

where :math:`s_i` is the (scaled) query-key dot product and the window
:math:`H(q) = \lceil \ln \varepsilon / \ln(1 - q) \rceil` is the smallest
:math:`H` whose prior tail :math:`P(\phi \ge H) = (1 - q)^H` is at most
:math:`\varepsilon`. The seed lost these symbols in PDF extraction; they are
rebuilt here from its text.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _progress
from lse_energy import attention as A
from lse_energy import _validate, core

Array = jax.Array

__all__ = [
    "VARIANTS",
    "MultiHopParams",
    "hop_matrix",
    "multihop_attend",
    "multihop_attention",
    "multihop_grad_logits",
    "geometric_log_prior",
    "geometric_window",
    "geometric_posterior",
    "geometric_energy",
    "geometric_grad_sims",
    "geometric_grad_q",
    "ExpandingResult",
    "expanding_attention",
    "self_attention_ops",
    "MultiHopTask",
    "make_multihop_task",
    "sample_multihop",
    "multihop_target_variance",
    "TOY_MODELS",
    "init_toy",
    "predict_multihop_task",
    "run_multihop_experiment",
    "run_multihop_experiments",
    "ExpandingTask",
    "make_expanding_task",
    "sample_expanding",
    "predict_expanding_task",
    "run_expanding_experiment",
    "ToyRun",
]

VARIANTS = ("paper", "code")


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


_concrete = _validate.is_concrete


_float = _validate.float_array


def _check_variant(variant):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")


def _check_positive(name, x):
    if _concrete(x):
        a = np.asarray(x)
        if not np.all(np.isfinite(a)) or not np.all(a > 0):
            raise ValueError(f"{name} must be finite and > 0; got {x!r}")


def _check_int(name, x, low):
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {x!r}")
    return int(x)


def _check_q(q):
    q = _float("q", q)
    if _concrete(q):
        a = np.asarray(q)
        if not np.all((a > 0) & (a < 1)):
            raise ValueError("q must lie strictly between 0 and 1")
    return q


def _check_eps(eps):
    if not (isinstance(eps, (float, int)) and 0 < eps < 1):
        raise ValueError(f"eps must be a number in (0, 1); got {eps!r}")
    return float(eps)


# ---------------------------------------------------------------------------
# Multi-hop attention (§5, "Multi-hop Attention")
# ---------------------------------------------------------------------------


class MultiHopParams(NamedTuple):
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
    p = _float("p", p, min_ndim=2)
    if p.shape[-1] != p.shape[-2]:
        raise ValueError(f"p must be square in its last two axes (self-attention); got {p.shape}")
    return _hop(p, variant)


def multihop_attend(q, k, v, *, variant: str = "paper", beta=None, mask=None) -> Array:
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
    """
    _check_variant(variant)
    v = _float("v", v, min_ndim=2)
    p = A.attention_weights(q, k, beta=beta, mask=mask)
    if p.shape[-1] != p.shape[-2]:
        raise ValueError(f"q and k must have the same number of rows; got {jnp.shape(q)}, {jnp.shape(k)}")
    if v.shape[-2] != p.shape[-1]:
        raise ValueError(f"v must have one row per key; got v{v.shape} for {p.shape[-1]} keys")
    return jnp.einsum("...ij,...je->...ie", _hop(p, variant), v)


def multihop_attention(params: MultiHopParams, x, *, variant: str = "paper", beta=None, mask=None) -> Array:
    r"""Multi-hop self-attention of tokens ``x: (..., N, d)``; returns ``(..., N, d_v)``."""
    if not isinstance(params, MultiHopParams):
        raise ValueError(f"params must be MultiHopParams; got {type(params).__name__}")
    x = _float("x", x, min_ndim=2)
    for name, w in zip(("wq", "wk", "wv"), params):
        if w.ndim != 2 or w.shape[1] != x.shape[-1]:
            raise ValueError(f"params.{name} must have shape (., {x.shape[-1]}); got {w.shape}")
    q, k, v = x @ params.wq.T, x @ params.wk.T, x @ params.wv.T
    return multihop_attend(q, k, v, variant=variant, beta=beta, mask=mask)


def multihop_grad_logits(logits, v, g, *, variant: str = "paper", mask=None) -> Array:
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
    logits = _float("logits", logits, min_ndim=2)
    v = _float("v", v, min_ndim=2)
    g = _float("g", g, min_ndim=2)
    p = core.weights(logits, mask)
    c = 1.0 if variant == "paper" else 1.0 / 3.0
    G = jnp.einsum("...ie,...je->...ij", g, v)
    pt = jnp.swapaxes(p, -1, -2)
    D = c * (G + G @ pt + pt @ G)
    return p * (D - jnp.sum(p * D, axis=-1, keepdims=True))


# ---------------------------------------------------------------------------
# Expanding attention (§5, "Expanding Attention")
# ---------------------------------------------------------------------------


def geometric_log_prior(q, n: int) -> Array:
    r""":math:`\ln p(\phi = i \mid q) = \ln q + i \ln(1 - q)`, :math:`i = 0, \dots, n-1`.

    Args:
      q: ``(...)`` success probabilities in (0, 1).
      n: number of distances.

    Returns:
      ``(..., n)``.
    """
    q = _check_q(q)
    n = _check_int("n", n, 1)
    return _log_prior(q, n)


def _log_prior(q, n):
    i = jnp.arange(n, dtype=q.dtype)
    return jnp.log(q)[..., None] + i * jnp.log1p(-q)[..., None]


def geometric_window(q, eps: float) -> Array:
    r"""Truncation horizon :math:`H(q) = \lceil \ln\varepsilon / \ln(1 - q) \rceil`.

    The geometric tail is :math:`P(\phi \ge H) = \sum_{i \ge H} q(1-q)^i = (1 - q)^H`,
    so :math:`(1-q)^H \le \varepsilon \iff H \ge \ln\varepsilon / \ln(1-q)`
    (both logarithms are negative). Returns the smallest such integer (at
    least 1) as int32.
    """
    q = _check_q(q)
    return _window(q, _check_eps(eps))


def _window(q, eps):
    h = jnp.ceil(math.log(eps) / jnp.log1p(-jax.lax.stop_gradient(q)))
    return jnp.maximum(h, 1.0).astype(jnp.int32)


def _window_mask(h, n, mask):
    inside = jnp.arange(n) < h[..., None]
    return inside if mask is None else inside & mask


def geometric_posterior(sims, q, *, window=None, mask=None) -> Array:
    r"""Posterior over the attended distance, step 2 of the mean-field updates.

    .. math:: p(\phi = i \mid x, q) = \frac{q (1-q)^i e^{s_i}}{\sum_{i' < H} q (1-q)^{i'} e^{s_{i'}}},
              \qquad i < H,

    i.e. ``core.weights(s + ln p(phi | q))`` restricted to the window.

    Args:
      sims: ``(..., n)`` similarities :math:`s_i` of the query to the key at distance ``i``.
      q: ``(...)`` geometric parameter.
      window: optional ``(...)`` integer :math:`H`; ``None`` uses all ``n``.
      mask: optional boolean ``(..., n)`` of existing keys.

    Returns:
      ``(..., n)``, zero outside the window.
    """
    sims = _float("sims", sims, min_ndim=1)
    q = _check_q(q)
    w = _geo_mask(sims, window, mask)
    return _weights_last(sims + _log_prior(q, sims.shape[-1]), w)


def _weights_last(s, mask):
    # core.weights over the last axis for any number of leading axes (it needs a child axis).
    return core.weights(s[..., None, :], None if mask is None else mask[..., None, :])[..., 0, :]


def _geo_mask(sims, window, mask):
    n = sims.shape[-1]
    if window is None:
        return mask
    return _window_mask(jnp.asarray(window), n, mask)


def geometric_energy(sims, q, *, window=None, mask=None) -> Array:
    r"""Energy of the query under the geometric prior: :math:`-\sum \ln \sum_{i<H} q(1-q)^i e^{s_i}`.

    The log-sum-exp energy (Tschantz eq. 2) with the log-prior as a bias
    (Singh & Buckley §6), one child per leading index; built on
    :func:`lse_energy.core.energy`. It is :math:`-\ln p(x \mid q)` up to the
    node potentials, so its minimiser in :math:`q` is the maximum-likelihood
    geometric parameter.

    Returns:
      Scalar (summed over leading axes).
    """
    sims = _float("sims", sims, min_ndim=1)
    q = _check_q(q)
    w = _geo_mask(sims, window, mask)
    s = (sims + _log_prior(q, sims.shape[-1]))[..., None, :]
    return core.energy(s, None if w is None else w[..., None, :])


def geometric_grad_sims(sims, q, *, window=None, mask=None) -> Array:
    r""":math:`\partial E / \partial s_i = -p(\phi = i \mid x, q)` (Tschantz eq. 4 with sim = :math:`s_i`)."""
    return -geometric_posterior(sims, q, window=window, mask=mask)


def geometric_grad_q(sims, q, *, window=None, mask=None) -> Array:
    r""":math:`\partial E / \partial q = -\big(1/q - m / (1 - q)\big)`, :math:`m = \sum_i i\, p(\phi = i \mid x, q)`.

    From eq. (4): the weights times :math:`\partial_q[\ln q + i \ln(1-q)] = 1/q - i/(1-q)`.
    Setting it to zero gives :math:`q = 1/(1 + m)`: the maximum-likelihood
    geometric parameter matches the posterior's mean distance, the fixed
    point of the mean-field iteration as :math:`t \to \infty`.

    Returns:
      ``(...)``, the shape of ``q``.
    """
    p = geometric_posterior(sims, q, window=window, mask=mask)
    m = jnp.sum(jnp.arange(p.shape[-1], dtype=p.dtype) * p, axis=-1)
    return -(1.0 / q - m / (1.0 - q))


class ExpandingResult(NamedTuple):
    r"""What :func:`expanding_attention` returns (one entry per query; leading axes ``...``).

    Attributes:
      output: ``(..., d_v)``, :math:`\sum_{i < H_T} (p_T)_i v_i`.
      window: ``(...)`` int, :math:`H_T = H(q_T)`, the window at convergence.
      iterations: ``(...)`` int, number of mean-field updates taken, :math:`T`.
      ops: ``(...)`` float, the operations this call performed,
        :math:`d\,D + \sum_{t=0}^{T-1} H_t + H_T + d_v H_T`: the :math:`D`
        dot products it actually computed (``dots``: all ``n`` keys on the
        dense path, ``cap`` on the truncated one, summed over the attempts of
        ``max_window="auto"``), one re-weighting per iteration over its window
        (plus the final one) and the value sum. The idealised cached algorithm
        computes only :math:`D = H_{\max}` dot products (``max_window``);
        compare :func:`self_attention_ops`.
      converged: ``(...)`` bool, :math:`|q_{t+1} - q_t| < \mathrm{tol}` reached.
      q: ``(...)``, :math:`q_T`.
      alpha, beta: ``(...)``, :math:`\alpha_T, \beta_T`.
      weights: ``(..., m)``, :math:`p_T` (zero outside the window) over the
        first ``m`` keys: ``m = n`` on the dense path, the cap on the
        truncated one (the keys beyond it have weight zero when there is no
        overflow).
      q_trace: ``(..., max_steps + 1)``, :math:`q_0, q_1, \dots` (held at
        :math:`q_T` after convergence).
      max_window: ``(...)`` int, :math:`H_{\max} = \max_{t \le T} H_t`.
      dots: ``(...)`` int, dot products computed for this query (see ``ops``).
      overflow: ``(...)`` bool, the truncated path needed a window larger than
        its cap (the result is then *not* the dense one; always ``False`` on
        the dense path and after ``max_window="auto"``).
    """

    output: Array
    window: Array
    iterations: Array
    ops: Array
    converged: Array
    q: Array
    alpha: Array
    beta: Array
    weights: Array
    q_trace: Array
    max_window: Array
    dots: Array
    overflow: Array


def _check_max_window(max_window, n):
    if max_window is None or max_window == "auto":
        return max_window
    return min(_check_int("max_window", max_window, 1), n)


def _auto_start(alpha0, beta0, eps, n):
    # Smallest power of two >= 32 and >= 2 H(q_0): windows usually grow from H(q_0) as q_t falls.
    q0 = np.asarray(alpha0, float) / (np.asarray(alpha0, float) + np.asarray(beta0, float))
    h0 = int(np.max(np.ceil(math.log(eps) / np.log1p(-q0))))
    return min(n, 1 << max(5, (2 * max(h0, 1) - 1).bit_length()))


def expanding_attention(q, k, v, *, alpha0=1.0, beta0=1.0, eps: float = 1e-2, tol: float = 1e-3,
                        max_steps: int = 100, scale=None, mask=None, max_window=None) -> ExpandingResult:
    r"""Expanding attention: geometric prior over the attended distance, Beta hyper-prior.

    Keys are ordered by distance from the query: ``k[..., i, :]`` is the key
    ``i + 1`` positions back (``i = 0`` the nearest). The dot products
    :math:`s_i = \mathrm{scale}\; q^\top k_i` are computed once and cached;
    each mean-field step (module docstring, steps 1–3) only re-weights them
    with the log-prior of the current :math:`q_t` inside the window
    :math:`H(q_t)`. Iteration stops at the first :math:`t` with
    :math:`|q_{t+1} - q_t| < \mathrm{tol}` or after ``max_steps`` updates;
    the output is the posterior expectation of the values under
    :math:`q_T` (window :math:`H(q_T)`).

    **Dense path** (``max_window=None``): a jitted ``lax.scan`` of
    ``max_steps`` steps over all ``n`` dot products that freezes the state
    once converged, so it works under ``jit``/``grad`` (the windows are
    integers and carry no gradient). Use it for training.

    **Truncated path** (``max_window=cap``): computes only the first ``cap``
    dot products and runs the same updates on them (a ``lax.while_loop`` that
    stops when every query has converged; forward only). *Exactness:* step 2
    at iteration :math:`t` reads only :math:`s_i` and ``mask`` for
    :math:`i < H_t`, and :math:`H_t = \min(H(q_t), n)` is a function of
    :math:`q_t` alone. So if :math:`H_t \le \mathrm{cap}` for every
    :math:`t \le T`, by induction on :math:`t` both paths see the same
    numbers and produce the same :math:`(\alpha_t, \beta_t, q_t)`, windows,
    iteration counts, weights and output (equal up to floating-point
    summation order). At the first step where :math:`H_t > \mathrm{cap}` the
    two states are still equal, so that step is detected exactly; it is
    reported in ``overflow`` (and the query's result is then that of a
    window clipped at ``cap``). ``max_window="auto"`` (concrete inputs only)
    starts from a small power of two (at least 32 and :math:`2 H(q_0)`), doubles the cap on the host until no
    query overflows (at worst ``cap = n``, which cannot overflow) and returns
    that exact result; ``ops`` and ``dots`` include the failed attempts. An
    integer cap is static and usable under ``jit``.

    Args:
      q: ``(..., d)`` queries.
      k: ``(..., n, d)`` keys in distance order.
      v: ``(..., n, d_v)`` values in the same order.
      alpha0, beta0: Beta hyper-prior parameters, ``> 0`` (scalars or ``(...)``).
      eps: prior tail mass left outside the window, in (0, 1).
      tol: convergence tolerance on :math:`q`, ``> 0``.
      max_steps: step limit, ``>= 0`` (0 evaluates the prior mean :math:`q_0`).
      scale: inverse temperature; ``None`` means :math:`1/\sqrt{d}`.
      mask: optional boolean ``(..., n)`` of existing keys (``mask[..., 0]``
        must be ``True``).
      max_window: ``None`` (dense), an integer ``cap >= 1`` (truncated,
        clipped to ``n``) or ``"auto"``.

    Returns:
      :class:`ExpandingResult`.
    """
    q = _float("q", q, min_ndim=1)
    k = _float("k", k, min_ndim=2)
    v = _float("v", v, min_ndim=2)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"q and k must share their feature dimension; got q{q.shape}, k{k.shape}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have one row per key; got k{k.shape}, v{v.shape}")
    _check_positive("alpha0", alpha0)
    _check_positive("beta0", beta0)
    eps = _check_eps(eps)
    if not (isinstance(tol, (float, int)) and tol > 0):
        raise ValueError(f"tol must be a number > 0; got {tol!r}")
    max_steps = _check_int("max_steps", max_steps, 0)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    _check_positive("scale", scale)
    if mask is not None:
        mask = jnp.asarray(mask)
        if mask.dtype != jnp.bool_ or mask.shape[-1] != k.shape[-2]:
            raise ValueError(f"mask must be boolean (..., n={k.shape[-2]}); got {mask.dtype}{mask.shape}")
        if _concrete(mask) and not bool(np.all(np.asarray(mask)[..., 0])):
            raise ValueError("mask[..., 0] must be True: every query needs its nearest key")
    n = k.shape[-2]
    max_window = _check_max_window(max_window, n)
    a0, b0 = jnp.asarray(alpha0, q.dtype), jnp.asarray(beta0, q.dtype)
    kw = dict(eps=eps, tol=float(tol), max_steps=max_steps, scale=scale)
    if max_window is None:
        return _expanding(q, k, v, a0, b0, mask, **kw)
    if max_window != "auto":
        return _expanding_trunc(q, k, v, a0, b0, mask, _nothing_spent(q.shape[:-1], q.dtype), cap=max_window,
                                stop_on_overflow=False, **kw)
    if not _concrete(q, k, v, a0, b0):
        raise ValueError('max_window="auto" needs concrete inputs (it chooses the cap on the host); '
                         "under jit pass an integer cap or None")
    return _auto_cap(lambda cap, stop, spent: _expanding_trunc(q, k, v, a0, b0, mask, spent, cap=cap,
                                                               stop_on_overflow=stop, **kw),
                     _auto_start(alpha0, beta0, eps, n), n, _nothing_spent(q.shape[:-1], q.dtype))


def _nothing_spent(batch, dtype):
    # (ops, dots) of no failed attempt, with the shapes of later ones (one compilation per cap).
    return np.zeros(batch, dtype), np.zeros(batch, np.int32)


def _auto_cap(run, cap, n, spent):
    """Double ``cap`` until ``run(cap, stop, spent)`` has no overflow; ops and dots include the failed attempts."""
    while cap < n:
        res = run(cap, True, spent)  # stops at the first overflow: the attempt is discarded anyway
        if not np.any(np.asarray(res.overflow)):
            return res
        spent = (res.ops, res.dots)
        cap = min(2 * cap, n)
    return run(n, False, spent)


def _meanfield(sims, v, alpha0, beta0, mask, n, *, eps, tol, max_steps, loop, stop_on_overflow=False):
    r"""The mean-field iteration on the cached similarities ``sims (..., m)`` of the first ``m <= n`` keys.

    Windows are :math:`\min(H(q_t), n)`; a window above ``m`` is clipped to
    ``m`` and flagged in ``overflow`` (impossible when ``m == n``).
    ``loop="scan"`` runs ``max_steps`` frozen-after-convergence steps
    (reverse-differentiable); ``"while"`` stops when every query has
    converged (or, with ``stop_on_overflow``, when any query overflowed).
    Inside the loop step 3 needs only the posterior mean distance
    :math:`m_t = \sum_i i\,(p_t)_i = \sum_i i\, e_i / \sum_i e_i` with
    :math:`e_i = \exp(s_i + i \ln(1 - q_t) - c)` on the window (:math:`\ln q_t`
    and the shift :math:`c` cancel), so the loop skips the normalised
    weights; the final posterior is ``core.weights`` of the log-prior-biased
    similarities.
    """
    m, dv = sims.shape[-1], v.shape[-1]
    batch = sims.shape[:-1]
    dist = jnp.arange(m, dtype=sims.dtype)

    def window(qt):
        h = jnp.minimum(_window(qt, eps), n)
        return jnp.minimum(h, m), h > m

    def inside(h):
        return _window_mask(h, m, mask)

    def mean_distance(qt, h):
        logit = jnp.where(inside(h), sims + dist * jnp.log1p(-qt)[..., None], -jnp.inf)
        e = jnp.exp(logit - jax.lax.stop_gradient(jnp.max(logit, axis=-1, keepdims=True)))
        return jnp.sum(dist * e, axis=-1) / jnp.sum(e, axis=-1)

    a = jnp.broadcast_to(alpha0, batch)
    b = jnp.broadcast_to(beta0, batch)
    q0 = a / (a + b)
    zeros_i = jnp.zeros(batch, jnp.int32)
    false = jnp.zeros(batch, bool)

    def step(carry):
        a, b, done, t, hmax, hsum, over = carry
        qt = a / (a + b)                                    # 1.
        h, o = window(qt)
        a1, b1 = a + 1.0, b + mean_distance(qt, h)          # 2. and 3.
        conv = jnp.abs(a1 / (a1 + b1) - qt) < tol
        live = ~done
        a = jnp.where(live, a1, a)
        b = jnp.where(live, b1, b)
        return (a, b, done | conv, t + live, jnp.where(live, jnp.maximum(hmax, h), hmax),
                hsum + jnp.where(live, h, 0), over | (live & o))

    init = (a, b, false, zeros_i, zeros_i, zeros_i, false)
    if loop == "scan":
        def scan_step(carry, _):
            carry = step(carry)
            return carry, carry[0] / (carry[0] + carry[1])

        carry, qs = jax.lax.scan(scan_step, init, None, length=max_steps)
        trace = jnp.concatenate([q0[..., None], jnp.moveaxis(qs, 0, -1)], axis=-1)
    else:
        trace0 = jnp.zeros((max_steps + 1,) + batch, sims.dtype).at[0].set(q0)

        def cond(c):
            j, carry, _ = c
            go = (j < max_steps) & ~jnp.all(carry[2])
            return go & ~(stop_on_overflow & jnp.any(carry[6]))

        def body(c):
            j, carry, tr = c
            carry = step(carry)
            return j + 1, carry, tr.at[j + 1].set(carry[0] / (carry[0] + carry[1]))

        j, carry, trace = jax.lax.while_loop(cond, body, (jnp.asarray(0), init, trace0))
        qh = carry[0] / (carry[0] + carry[1])
        trace = jnp.where(jnp.arange(max_steps + 1) > j, qh[..., None], jnp.moveaxis(trace, 0, -1))  # held
    a, b, done, t, hmax, hsum, over = carry
    qT = a / (a + b)
    h, o = window(qT)
    p = _weights_last(sims + _log_prior(qT, m), inside(h))
    over = over | o
    hmax = jnp.maximum(hmax, h)
    out = jnp.einsum("...n,...ne->...e", p, v)
    d_ops = hsum + h + dv * h
    return ExpandingResult(output=out, window=h, iterations=t, ops=d_ops.astype(sims.dtype), converged=done,
                           q=qT, alpha=a, beta=b, weights=p, q_trace=trace, max_window=hmax,
                           dots=jnp.full(batch, m, jnp.int32), overflow=over)


def _add_dot_ops(res, d):
    return res._replace(ops=res.ops + d * res.dots.astype(res.ops.dtype))


@partial(jax.jit, static_argnames=("eps", "tol", "max_steps"))
def _expanding(q, k, v, alpha0, beta0, mask, *, eps, tol, max_steps, scale):
    n, d = k.shape[-2], k.shape[-1]
    sims = scale * jnp.einsum("...d,...nd->...n", q, k)  # computed once, reused by every step
    res = _meanfield(sims, v, alpha0, beta0, mask, n, eps=eps, tol=tol, max_steps=max_steps, loop="scan")
    return _add_dot_ops(res, d)


@partial(jax.jit, static_argnames=("cap", "eps", "tol", "max_steps"))
def _expanding_trunc(q, k, v, alpha0, beta0, mask, spent, *, cap, stop_on_overflow, eps, tol, max_steps, scale):
    n, d = k.shape[-2], k.shape[-1]
    return _trunc_core(q, k[..., :cap, :], v[..., :cap, :], alpha0, beta0,
                       None if mask is None else mask[..., :cap], n, d, spent, stop_on_overflow=stop_on_overflow,
                       eps=eps, tol=tol, max_steps=max_steps, scale=scale)


def _trunc_core(q, kc, vc, alpha0, beta0, maskc, n, d, spent, *, stop_on_overflow, eps, tol, max_steps, scale):
    # kc, vc: the first cap keys/values; spent = (ops, dots) of failed attempts (max_window="auto"), added
    # here. Nothing of length n is touched: the weights stay (..., cap).
    cap = kc.shape[-2]
    sims = scale * jnp.einsum("...d,...nd->...n", q, kc)  # only the first cap dot products
    res = _meanfield(sims, vc, alpha0, beta0, maskc, n, eps=eps, tol=tol, max_steps=max_steps, loop="while",
                     stop_on_overflow=stop_on_overflow)
    res = _add_dot_ops(res, d)
    return res._replace(ops=res.ops + spent[0], dots=res.dots + spent[1])


def self_attention_ops(n: int, d: int, d_v: int) -> int:
    r"""Operation count of one query of ordinary attention over ``n`` keys: :math:`n d + n + n d_v`.

    (``n`` dot products of width ``d``, one softmax pass, the value sum; the
    same accounting as :attr:`ExpandingResult.ops`.)
    """
    n, d, d_v = _check_int("n", n, 1), _check_int("d", d, 1), _check_int("d_v", d_v, 1)
    return n * d + n + n * d_v


# ---------------------------------------------------------------------------
# Toy task of Fig. 2: multi-hop
# ---------------------------------------------------------------------------


class MultiHopTask(NamedTuple):
    r"""The generative model of the multi-hop toy task (Fig. 2).

    .. math:: x_0 \sim \mathcal N(0, I), \quad x_{i+1} = W_r x_i + \epsilon_i, \quad
              \epsilon_i \sim \mathcal N(0, I), \quad y = w_y^\top (x_1 + x_0),

    and the other nodes are :math:`\mathcal N(0, I)` noise. :math:`W_r = c\, U V^\top`
    with orthonormal :math:`U \perp V` (``d x r`` each), so :math:`W_r` has rank
    :math:`r` and :math:`W_r^2 = 0`: :math:`x_2` is independent of :math:`x_0`.

    Attributes:
      w_r: ``(d, d)``. w_y: ``(d,)``.
    """

    w_r: Array
    w_y: Array


def make_multihop_task(d: int, rank: int, *, key, strength: float = 3.0) -> MultiHopTask:
    r"""Draw :math:`W_r = c U V^\top` (``2 rank <= d``) and :math:`w_y \sim \mathcal N(0, I/d)`."""
    d, rank = _check_int("d", d, 2), _check_int("rank", rank, 1)
    if 2 * rank > d:
        raise ValueError(f"rank must satisfy 2 * rank <= d; got rank={rank}, d={d}")
    _check_positive("strength", strength)
    return _make_multihop_task(key, d, rank, strength)


def _make_multihop_task(key, d, rank, strength):
    k1, k2 = jax.random.split(key)
    basis, _ = jnp.linalg.qr(jax.random.normal(k1, (d, 2 * rank)))
    w_r = strength * basis[:, :rank] @ basis[:, rank:].T
    return MultiHopTask(w_r=w_r, w_y=jax.random.normal(k2, (d,)) / math.sqrt(d))


def multihop_target_variance(task: MultiHopTask) -> Array:
    r""":math:`\mathrm{Var}(y) = w_y^\top\big[(I + W_r)(I + W_r)^\top + I\big] w_y`, the MSE of predicting 0."""
    a = task.w_y @ (jnp.eye(task.w_r.shape[0]) + task.w_r)
    return a @ a + task.w_y @ task.w_y


def sample_multihop(task: MultiHopTask, n_nodes: int, batch: int, *, key):
    r"""A batch of shuffled node sets.

    Returns:
      ``(x, y, pos)``: ``x (batch, n_nodes, d)``, ``y (batch,)``, and
      ``pos (batch, 3)``, the shuffled positions of :math:`x_0, x_1, x_2`.
      The readout (query) is :math:`x_2`'s position ``pos[:, 2]``.
    """
    n_nodes, batch = _check_int("n_nodes", n_nodes, 3), _check_int("batch", batch, 1)
    return _sample_multihop(task, key, n_nodes, batch)


def _sample_multihop(task, key, n_nodes, batch):
    d = task.w_r.shape[0]
    k1, k2 = jax.random.split(key)
    z = jax.random.normal(k1, (batch, n_nodes, d))
    x0 = z[:, 0]
    x1 = x0 @ task.w_r.T + z[:, 1]
    x2 = x1 @ task.w_r.T + z[:, 2]
    y = (x1 + x0) @ task.w_y
    nodes = jnp.concatenate([jnp.stack([x0, x1, x2], 1), z[:, 3:]], axis=1)
    perm = jnp.argsort(jax.random.uniform(k2, (batch, n_nodes)), axis=1)  # uniform random permutations
    x = jnp.take_along_axis(nodes, perm[:, :, None], axis=1)
    pos = jnp.argsort(perm, axis=1)[:, :3]  # where nodes 0, 1, 2 ended up
    return x, y, pos


TOY_MODELS = ("one_layer", "two_layer", "multihop_paper", "multihop_code")


def init_toy(model: str, d: int, d_k: int, *, key):
    r"""Initial parameters of a toy model (Gaussian, :math:`\mathcal N(0, 1/d)` entries).

    * ``"one_layer"``, ``"multihop_paper"``, ``"multihop_code"``: a
      :class:`MultiHopParams` with ``wv: (1, d)`` (the value is the scalar
      prediction); the three have the same parameter count.
    * ``"two_layer"``: a pair; layer 1 is :class:`MultiHopParams` with
      ``wv: (d, d)`` and a residual connection, layer 2 as ``"one_layer"``.
    """
    if model not in TOY_MODELS:
        raise ValueError(f"model must be one of {TOY_MODELS}; got {model!r}")
    return _init_toy(model, key, d, d_k)


def _init_toy(model, key, d, d_k):
    ks = jax.random.split(key, 6)
    s = 1.0 / math.sqrt(d)

    def head(k3, dv):
        return MultiHopParams(wq=s * jax.random.normal(k3[0], (d_k, d)), wk=s * jax.random.normal(k3[1], (d_k, d)),
                              wv=s * jax.random.normal(k3[2], (dv, d)))

    if model == "two_layer":
        return (head(ks[:3], d), head(ks[3:], 1))
    return head(ks[:3], 1)


def _weights(params, x):
    q, k = x @ params.wq.T, x @ params.wk.T
    return A.attention_weights(q, k)


def predict_multihop_task(model: str, params, x, query) -> Array:
    r"""Scalar prediction read out at node ``query`` of ``x: (B, N, d)``; returns ``(B,)``.

    * one layer: :math:`\hat y = [P X w_v^\top]_{\mathrm{query}}`;
    * multi-hop: :math:`\hat y = [A(P) X w_v^\top]_{\mathrm{query}}` (:func:`hop_matrix`);
    * two layers: :math:`H = X + P_1 X W_{V,1}^\top`, :math:`\hat y = [P_2(H) H w_{v,2}^\top]_{\mathrm{query}}`.
    """
    if model not in TOY_MODELS:
        raise ValueError(f"model must be one of {TOY_MODELS}; got {model!r}")
    return _predict_mh(model, params, x, query)


def _predict_mh(model, params, x, query):
    rows = jnp.arange(x.shape[0])
    if model == "two_layer":
        p1, p2 = params
        h = x + _weights(p1, x) @ (x @ p1.wv.T)
        out = _weights(p2, h) @ (h @ p2.wv.T)
    else:
        p = _weights(params, x)
        if model != "one_layer":
            p = _hop(p, "paper" if model == "multihop_paper" else "code")
        out = p @ (x @ params.wv.T)
    return out[rows, query, 0]


class ToyRun(NamedTuple):
    r"""Result of a seeded toy experiment, one row per seed.

    Attributes:
      params: trained parameters, leading axis = seed.
      curve: ``(S, n_steps)`` normalised training MSE on fresh batches,
        :math:`\mathrm{MSE} / \mathrm{Var}(y)` (1 = predicting 0).
      final: ``(S,)`` normalised MSE on a held-out batch.
    """

    params: object
    curve: Array
    final: Array


def _check_optimizer(optimizer):
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise ValueError("optimizer must be an optax GradientTransformation (with init and update)")


def _train(loss_fn, params, key, optimizer, n_steps, report_every=0):
    opt_state = optimizer.init(params)

    def step(carry, inp):
        k, i = inp
        p, s = carry
        loss, g = jax.value_and_grad(loss_fn)(p, k)
        updates, s = optimizer.update(g, s, p)
        p = jax.tree_util.tree_map(lambda a, u: a + u, p, updates)
        _progress.tick(i, n_steps, report_every)
        return (p, s), loss

    xs = (jax.random.split(key, n_steps), jnp.arange(n_steps))
    (params, _), losses = jax.lax.scan(step, (params, opt_state), xs)
    return params, losses


def run_multihop_experiment(model: str, seeds, *, optimizer, n_steps: int = 400, batch: int = 64,
                            n_nodes: int = 8, d: int = 8, d_k: int = 8, rank: int = 2,
                            strength: float = 3.0, n_test: int = 2048, progress: bool = False) -> ToyRun:
    r"""Train ``model`` on the multi-hop task once per seed (vmapped, jitted).

    Each seed draws its own task (:func:`make_multihop_task`), initial
    parameters and data; every optimizer step sees a fresh batch, so the
    training curve is also a test curve. The loss is the MSE normalised by
    :func:`multihop_target_variance`. Same as
    ``run_multihop_experiments([model], ...)[model]``.

    Args:
      model: one of :data:`TOY_MODELS`.
      seeds: sequence of integer seeds.
      optimizer: optax ``GradientTransformation`` (hashable, static).
      progress: show a ``tqdm.auto`` bar of the optimizer steps (the
        compiled scan reports to the host every ``n_steps // 50`` steps; the
        callback changes how XLA fuses the loop body, so results agree with
        ``progress=False`` to round-off, not bit for bit).
    """
    return run_multihop_experiments((model,), seeds, optimizer=optimizer, n_steps=n_steps, batch=batch,
                                    n_nodes=n_nodes, d=d, d_k=d_k, rank=rank, strength=strength,
                                    n_test=n_test, progress=progress)[model]


# The single-head models as one family, A(P) = c_0 I + c_1 P + c_2 P^2 (see hop_matrix).
_HOP_COEFFS = {"one_layer": (0.0, 1.0, 0.0), "multihop_paper": (0.0, 1.0, 1.0),
               "multihop_code": (1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0)}


def run_multihop_experiments(models, seeds, *, optimizer, n_steps: int = 400, batch: int = 64,
                             n_nodes: int = 8, d: int = 8, d_k: int = 8, rank: int = 2,
                             strength: float = 3.0, n_test: int = 2048, progress: bool = False) -> dict:
    r""":func:`run_multihop_experiment` for several models at once; returns ``{model: ToyRun}``.

    The single-head models share their parameter shapes and differ only in
    the mixing matrix :math:`A(P) = c_0 I + c_1 P + c_2 P^2` (one layer
    :math:`(0, 1, 0)`, paper :math:`(0, 1, 1)`, code :math:`(1/3, 1/3, 1/3)`),
    so they are trained in one compiled program vmapped over the
    coefficients (the same seeds, hence the same tasks and data, for every
    model); ``"two_layer"`` is a second program. With ``progress=True`` each
    program shows a ``tqdm.auto`` bar of its optimizer steps.
    """
    models = tuple(models)
    if not models or any(m not in TOY_MODELS for m in models):
        raise ValueError(f"models must be a non-empty sequence of {TOY_MODELS}; got {models!r}")
    _check_optimizer(optimizer)
    seeds = np.asarray(seeds)
    if seeds.ndim != 1 or seeds.size == 0 or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be a non-empty 1-D sequence of integers; got {seeds!r}")
    for name, val, low in (("n_steps", n_steps, 1), ("batch", batch, 1), ("n_nodes", n_nodes, 3), ("d", d, 2),
                           ("d_k", d_k, 1), ("rank", rank, 1), ("n_test", n_test, 1)):
        _check_int(name, val, low)
    if 2 * rank > d:
        raise ValueError(f"rank must satisfy 2 * rank <= d; got rank={rank}, d={d}")
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    args = (optimizer, n_steps, batch, n_nodes, d, d_k, rank, float(strength), n_test)
    out = {}
    single = tuple(m for m in dict.fromkeys(models) if m != "two_layer")
    if single:
        coeffs = jnp.asarray([_HOP_COEFFS[m] for m in single], dtype=jnp.result_type(float))
        with _progress.bar(progress, n_steps, f"training {', '.join(single)}") as every:
            run = jax.block_until_ready(_run_mh(keys, coeffs, "single", *args, every))
        for i, m in enumerate(single):
            out[m] = jax.tree_util.tree_map(lambda a, i=i: a[i], run)
    if "two_layer" in models:
        with _progress.bar(progress, n_steps, "training two_layer") as every:
            run = jax.block_until_ready(_run_mh(keys, jnp.zeros((1, 3)), "two_layer", *args, every))
        out["two_layer"] = jax.tree_util.tree_map(lambda a: a[0], run)
    for m, r in out.items():
        _validate.require_finite(f"run_multihop_experiments ({m})", r, steps=jnp.moveaxis(r.curve, -1, 0),
                            hint="lower the optimizer's learning rate")
    return {m: out[m] for m in models}


def _predict_mh_coeffs(c, params, x, query):
    # c_0 I + c_1 P + c_2 P^2 applied to the values, read out at `query` (the single-head models).
    rows = jnp.arange(x.shape[0])
    p = _weights(params, x)
    val = x @ params.wv.T
    pv = p @ val
    out = c[0] * val + c[1] * pv + c[2] * (p @ pv)
    return out[rows, query, 0]


@partial(jax.jit, static_argnums=tuple(range(2, 13)))
def _run_mh(keys, coeffs, kind, optimizer, n_steps, batch, n_nodes, d, d_k, rank, strength, n_test,
            report_every=0):
    def one(c, key):
        kt, ki, kd, ke = jax.random.split(key, 4)
        task = _make_multihop_task(kt, d, rank, strength)
        var = multihop_target_variance(task)

        def predict(p, x, query):
            if kind == "two_layer":
                return _predict_mh("two_layer", p, x, query)
            return _predict_mh_coeffs(c, p, x, query)

        def loss(p, k):
            x, y, pos = _sample_multihop(task, k, n_nodes, batch)
            return jnp.mean((predict(p, x, pos[:, 2]) - y) ** 2) / var

        params, curve = _train(loss, _init_toy("two_layer" if kind == "two_layer" else "one_layer", ki, d, d_k),
                               kd, optimizer, n_steps, report_every)
        x, y, pos = _sample_multihop(task, ke, n_nodes, n_test)
        final = jnp.mean((predict(params, x, pos[:, 2]) - y) ** 2) / var
        return params, curve, final

    params, curve, final = jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None))(coeffs, keys)
    return ToyRun(params=params, curve=curve, final=final)


# ---------------------------------------------------------------------------
# Toy task of Fig. 3: expanding attention
# ---------------------------------------------------------------------------


class ExpandingTask(NamedTuple):
    r"""The generative model of the expanding-attention toy task (Fig. 3).

    :math:`x_1 \sim \mathcal N(0, I)`, :math:`x_2 = W_r x_1 + \epsilon`,
    :math:`y = w_y^\top x_1`, other tokens :math:`\mathcal N(0, I)`. The query
    :math:`x_2` is the last token; :math:`x_1` sits :math:`D + 1` positions
    before it, :math:`D \sim \mathrm{Geo}(p)` on :math:`\{0, 1, \dots\}`
    truncated to the sequence (``D <= n - 2``).

    Attributes:
      w_r: ``(d, d)`` (``c U V^\top``, rank ``r``). w_y: ``(d,)``.
    """

    w_r: Array
    w_y: Array


def make_expanding_task(d: int, rank: int, *, key, strength: float = 3.0) -> ExpandingTask:
    r"""Same draw as :func:`make_multihop_task`; :math:`\mathrm{Var}(y) = \|w_y\|^2`."""
    t = make_multihop_task(d, rank, key=key, strength=strength)
    return ExpandingTask(w_r=t.w_r, w_y=t.w_y)


def _truncated_geometric(key, p, n_max, shape):
    # Inverse CDF of Geo(p) on {0..n_max}: P(D <= k) = (1 - (1-p)^(k+1)) / (1 - (1-p)^(n_max+1)).
    u = jax.random.uniform(key, shape)
    tail = 1.0 - (1.0 - p) ** (n_max + 1)
    dist = jnp.floor(jnp.log1p(-u * tail) / jnp.log1p(-p))
    return jnp.clip(dist, 0, n_max).astype(jnp.int32)


def sample_expanding(task: ExpandingTask, n: int, batch: int, p, *, key):
    r"""A batch of sequences for the expanding task.

    Returns:
      ``(x, y, dist)``: ``x (batch, n, d)`` with the query at ``x[:, -1]``,
      ``y (batch,)`` and ``dist (batch,)``, the distance index of :math:`x_1`
      (``x[:, n - 2 - dist]``).
    """
    n, batch = _check_int("n", n, 2), _check_int("batch", batch, 1)
    if not 0 < float(p) <= 1:
        raise ValueError(f"p must lie in (0, 1]; got {p!r}")
    return _sample_expanding(task, key, n, batch, jnp.asarray(p, jnp.result_type(float)))


def _sample_expanding(task, key, n, batch, p):
    d = task.w_r.shape[0]
    k1, k2 = jax.random.split(key)
    z = jax.random.normal(k1, (batch, n, d))
    dist = _truncated_geometric(k2, p, n - 2, (batch,))
    rows = jnp.arange(batch)
    x1 = z[rows, n - 2 - dist]
    x2 = x1 @ task.w_r.T + z[:, -1]
    x = z.at[:, -1].set(x2)
    return x, x1 @ task.w_y, dist


def _distance_order(x):
    # keys/values of the query x[:, -1] in distance order: index i = token i + 1 back.
    return x[:, -2::-1]


def predict_expanding_task(model: str, params: MultiHopParams, x, *, alpha0=1.0, beta0=1.0, eps=1e-2,
                           tol=1e-3, max_steps=100, max_window=None):
    r"""Prediction of ``"self"`` or ``"expanding"`` attention read out at the last token.

    Both use the same :class:`MultiHopParams` (``wv: (1, d)``); the query
    :math:`x_{N}` attends to the ``N - 1`` earlier tokens, with a uniform
    prior (``"self"``) or the geometric prior of :func:`expanding_attention`.
    ``max_window`` is that of :func:`expanding_attention`: with an integer
    or ``"auto"`` cap only the ``cap`` tokens nearest the query are projected
    to keys and values and scored (exact whenever no window exceeds the cap,
    which ``"auto"`` guarantees and ``result.overflow`` reports).

    Returns:
      ``(y_hat (B,), result)`` where ``result`` is the
      :class:`ExpandingResult` (``None`` for ``"self"``).
    """
    if model not in ("self", "expanding"):
        raise ValueError(f"model must be 'self' or 'expanding'; got {model!r}")
    x = _float("x", x, min_ndim=3)
    if x.shape[-2] < 2:
        raise ValueError(f"x must hold at least 2 tokens (keys and the query); got shape {x.shape}")
    eps, tol, max_steps = _check_eps(eps), float(tol), _check_int("max_steps", max_steps, 0)
    _check_positive("alpha0", alpha0)
    _check_positive("beta0", beta0)
    if model == "self":
        return _predict_self(params, x), None
    n_keys = x.shape[-2] - 1
    mw = _check_max_window(max_window, n_keys)
    a0, b0 = jnp.asarray(alpha0, x.dtype), jnp.asarray(beta0, x.dtype)
    kw = dict(eps=eps, tol=tol, max_steps=max_steps)
    if mw is None:
        res = _predict_ex_dense(params, x, a0, b0, **kw)
    elif mw != "auto":
        res = _predict_ex_trunc(params, x, a0, b0, _nothing_spent(x.shape[:1], x.dtype), cap=mw,
                                stop_on_overflow=False, **kw)
    elif not _concrete(x, a0, b0, *params):
        raise ValueError('max_window="auto" needs concrete inputs (it chooses the cap on the host); '
                         "under jit pass an integer cap or None")
    else:
        res = _auto_cap(lambda cap, stop, spent: _predict_ex_trunc(params, x, a0, b0, spent, cap=cap,
                                                                   stop_on_overflow=stop, **kw),
                        _auto_start(alpha0, beta0, eps, n_keys), n_keys, _nothing_spent(x.shape[:1], x.dtype))
    return res.output[:, 0], res


@jax.jit
def _predict_self(params, x):
    return _predict_ex("self", params, x, None, None, None, None, None)[0]


@partial(jax.jit, static_argnames=("eps", "tol", "max_steps"))
def _predict_ex_dense(params, x, alpha0, beta0, *, eps, tol, max_steps):
    return _predict_ex("expanding", params, x, alpha0, beta0, eps, tol, max_steps)[1]


@partial(jax.jit, static_argnames=("cap", "eps", "tol", "max_steps"))
def _predict_ex_trunc(params, x, alpha0, beta0, spent, *, cap, stop_on_overflow, eps, tol, max_steps):
    n_keys = x.shape[-2] - 1
    ctx = x[:, n_keys - cap:n_keys][:, ::-1]  # the cap tokens nearest the query, in distance order
    q = x[:, -1] @ params.wq.T
    k, v = ctx @ params.wk.T, ctx @ params.wv.T  # only cap keys and values are projected
    return _trunc_core(q, k, v, alpha0, beta0, None, n_keys, q.shape[-1], spent, stop_on_overflow=stop_on_overflow,
                       eps=eps, tol=tol, max_steps=max_steps, scale=1.0 / math.sqrt(q.shape[-1]))


def _predict_ex(model, params, x, alpha0, beta0, eps, tol, max_steps):
    q = x[:, -1] @ params.wq.T
    if model == "self":  # a uniform prior is order-free: no need to reverse the context
        ctx = x[:, :-1]
        return A.attend(q[:, None, :], ctx @ params.wk.T, ctx @ params.wv.T)[:, 0, 0], None
    ctx = _distance_order(x)
    k, v = ctx @ params.wk.T, ctx @ params.wv.T
    res = _expanding(q, k, v, jnp.asarray(alpha0, x.dtype), jnp.asarray(beta0, x.dtype), None,
                     eps=eps, tol=tol, max_steps=max_steps, scale=1.0 / math.sqrt(q.shape[-1]))
    return res.output[:, 0], res


def run_expanding_experiment(model: str, seeds, ps, *, optimizer, n_steps: int = 300, batch: int = 32,
                             n: int = 64, d: int = 10, d_k: int = 8, rank: int = 2, strength: float = 3.0,
                             alpha0=1.0, beta0=1.0, eps: float = 1e-2, tol: float = 1e-3, max_steps: int = 100,
                             n_test: int = 1024, progress: bool = False):
    r"""Train ``"self"`` or ``"expanding"`` attention on the expanding task for every (p, seed).

    Vmapped over ``ps`` and ``seeds`` (one compilation per shape). Every
    step sees a fresh batch; the loss is :math:`\mathrm{MSE}/\|w_y\|^2`.
    ``progress=True`` shows a ``tqdm.auto`` bar of the optimizer steps.

    Returns:
      ``(run, stats)``: a :class:`ToyRun` whose arrays have leading axes
      ``(len(ps), len(seeds))``, and for ``"expanding"`` a dict of
      ``(len(ps), len(seeds))`` test-batch means: ``window`` (:math:`H_T`),
      ``max_window`` (:math:`H_{\max}`), ``iterations``, ``ops`` (of the
      dense path used in training: all ``n - 1`` dot products), ``reweight``
      (:math:`\sum_{t<T} H_t + H_T`), ``converged`` (fraction), ``q``,
      ``true_mean_distance`` (``None`` for ``"self"``).
    """
    if model not in ("self", "expanding"):
        raise ValueError(f"model must be 'self' or 'expanding'; got {model!r}")
    _check_optimizer(optimizer)
    seeds = np.asarray(seeds)
    if seeds.ndim != 1 or seeds.size == 0 or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be a non-empty 1-D sequence of integers; got {seeds!r}")
    ps = np.asarray(ps, dtype=float)
    if ps.ndim != 1 or ps.size == 0 or not np.all((ps > 0) & (ps <= 1)):
        raise ValueError(f"ps must be a non-empty 1-D sequence in (0, 1]; got {ps!r}")
    for name, val, low in (("n_steps", n_steps, 1), ("batch", batch, 1), ("n", n, 2), ("d", d, 2),
                           ("d_k", d_k, 1), ("rank", rank, 1), ("n_test", n_test, 1), ("max_steps", max_steps, 0)):
        _check_int(name, val, low)
    if 2 * rank > d:
        raise ValueError(f"rank must satisfy 2 * rank <= d; got rank={rank}, d={d}")
    _check_positive("alpha0", alpha0)
    _check_positive("beta0", beta0)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    eps = _check_eps(eps)
    with _progress.bar(progress, n_steps, f"training {model} attention") as every:
        run, stats = jax.block_until_ready(
            _run_ex(keys, jnp.asarray(ps), model, optimizer, n_steps, batch, n, d, d_k, rank, float(strength),
                    float(alpha0), float(beta0), eps, float(tol), max_steps, n_test, every))
    _validate.require_finite(f"run_expanding_experiment ({model})", run, steps=jnp.moveaxis(run.curve, -1, 0),
                        hint="lower the optimizer's learning rate")
    return run, (stats if model == "expanding" else None)


@partial(jax.jit, static_argnums=tuple(range(2, 18)))
def _run_ex(keys, ps, model, optimizer, n_steps, batch, n, d, d_k, rank, strength, alpha0, beta0, eps, tol,
            max_steps, n_test, report_every=0):
    def one(p, key):
        kt, ki, kd, ke = jax.random.split(key, 4)
        mt = _make_multihop_task(kt, d, rank, strength)
        task = ExpandingTask(w_r=mt.w_r, w_y=mt.w_y)
        var = task.w_y @ task.w_y

        def predict(params, x):
            return _predict_ex(model, params, x, alpha0, beta0, eps, tol, max_steps)

        def loss(params, k):
            x, y, _ = _sample_expanding(task, k, n, batch, p)
            return jnp.mean((predict(params, x)[0] - y) ** 2) / var

        params, curve = _train(loss, _init_toy("one_layer", ki, d, d_k), kd, optimizer, n_steps, report_every)
        x, y, dist = _sample_expanding(task, ke, n, n_test, p)
        yhat, res = predict(params, x)
        final = jnp.mean((yhat - y) ** 2) / var
        if res is None:
            stats = {}
        else:
            hmax = res.max_window.astype(x.dtype)
            h = res.window.astype(x.dtype)
            stats = dict(window=jnp.mean(h), max_window=jnp.mean(hmax),
                         iterations=jnp.mean(res.iterations.astype(x.dtype)), ops=jnp.mean(res.ops),
                         reweight=jnp.mean(res.ops - d_k * res.dots.astype(x.dtype) - h),
                         converged=jnp.mean(res.converged.astype(x.dtype)), q=jnp.mean(res.q),
                         true_mean_distance=jnp.mean(dist.astype(x.dtype)))
        return params, curve, final, stats

    f = jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None))
    params, curve, final, stats = f(ps, keys)
    return ToyRun(params=params, curve=curve, final=final), stats
