r"""Expanding attention: a geometric prior over the attended distance with a Beta hyper-prior.

Singh & Buckley (2023), *Attention as implicit structural inference*,
§5: changing the structural prior of attention.

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

from lse_energy import _validate, core

Array = jax.Array

__all__ = [
    "log_prior",
    "window_size",
    "posterior",
    "energy",
    "grad_sims",
    "grad_q",
    "Result",
    "attend",
    "Params",
    "attention",
    "self_attention_ops",
]


def _check_positive(name, x):
    """A scalar through ``_validate.positive``; an array (one value per query) elementwise."""
    if np.ndim(x) == 0:
        _validate.positive(name, x)
    elif _validate.is_concrete(x):
        a = np.asarray(x)
        if not np.all(np.isfinite(a)) or not np.all(a > 0):
            raise ValueError(f"{name} must be finite and > 0; got {x!r}")


def _check_q(q):
    q = _validate.float_array("q", q)
    if _validate.is_concrete(q):
        a = np.asarray(q)
        if not np.all((a > 0) & (a < 1)):
            raise ValueError("q must lie strictly between 0 and 1")
    return q


def log_prior(q, n: int) -> Array:
    r""":math:`\ln p(\phi = i \mid q) = \ln q + i \ln(1 - q)`, :math:`i = 0, \dots, n-1`.

    Args:
      q: ``(...)`` success probabilities in (0, 1).
      n: number of distances.

    Returns:
      ``(..., n)``.
    """
    q = _check_q(q)
    n = _validate.count("n", n, 1)
    return _log_prior(q, n)


def _log_prior(q, n):
    i = jnp.arange(n, dtype=q.dtype)
    return jnp.log(q)[..., None] + i * jnp.log1p(-q)[..., None]


def window_size(q, eps: float) -> Array:
    r"""Truncation horizon :math:`H(q) = \lceil \ln\varepsilon / \ln(1 - q) \rceil`.

    The geometric tail is :math:`P(\phi \ge H) = \sum_{i \ge H} q(1-q)^i = (1 - q)^H`,
    so :math:`(1-q)^H \le \varepsilon \iff H \ge \ln\varepsilon / \ln(1-q)`
    (both logarithms are negative). Returns the smallest such integer (at
    least 1) as int32.
    """
    q = _check_q(q)
    return _window(q, _validate.open_unit("eps", eps))


def _window(q, eps):
    h = jnp.ceil(math.log(eps) / jnp.log1p(-jax.lax.stop_gradient(q)))
    return jnp.maximum(h, 1.0).astype(jnp.int32)


def _window_mask(h, n, mask):
    inside = jnp.arange(n) < h[..., None]
    return inside if mask is None else inside & mask


def posterior(sims, q, *, window=None, mask=None) -> Array:
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
    sims = _validate.float_array("sims", sims, min_ndim=1)
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


def energy(sims, q, *, window=None, mask=None) -> Array:
    r"""Energy of the query under the geometric prior: :math:`-\sum \ln \sum_{i<H} q(1-q)^i e^{s_i}`.

    The log-sum-exp energy (Tschantz eq. 2) with the log-prior as a bias
    (Singh & Buckley §6), one child per leading index; built on
    :func:`lse_energy.core.energy`. It is :math:`-\ln p(x \mid q)` up to the
    node potentials, so its minimiser in :math:`q` is the maximum-likelihood
    geometric parameter.

    Returns:
      Scalar (summed over leading axes).

    Examples:
      Three equal similarities under :math:`q = 1/2`: :math:`E = -\ln(\tfrac12 + \tfrac14 + \tfrac18)`.

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import expanding
      >>> round(float(expanding.energy(jnp.zeros(3), 0.5)), 3)
      0.134
    """
    sims = _validate.float_array("sims", sims, min_ndim=1)
    q = _check_q(q)
    w = _geo_mask(sims, window, mask)
    s = (sims + _log_prior(q, sims.shape[-1]))[..., None, :]
    return core.energy(s, None if w is None else w[..., None, :])


def grad_sims(sims, q, *, window=None, mask=None) -> Array:
    r""":math:`\partial E / \partial s_i = -p(\phi = i \mid x, q)` (Tschantz eq. 4 with sim = :math:`s_i`)."""
    return -posterior(sims, q, window=window, mask=mask)


def grad_q(sims, q, *, window=None, mask=None) -> Array:
    r""":math:`\partial E / \partial q = -\big(1/q - m / (1 - q)\big)`, :math:`m = \sum_i i\, p(\phi = i \mid x, q)`.

    From eq. (4): the weights times :math:`\partial_q[\ln q + i \ln(1-q)] = 1/q - i/(1-q)`.
    Setting it to zero gives :math:`q = 1/(1 + m)`: the maximum-likelihood
    geometric parameter matches the posterior's mean distance, the fixed
    point of the mean-field iteration as :math:`t \to \infty`.

    Returns:
      ``(...)``, the shape of ``q``.
    """
    p = posterior(sims, q, window=window, mask=mask)
    m = jnp.sum(jnp.arange(p.shape[-1], dtype=p.dtype) * p, axis=-1)
    return -(1.0 / q - m / (1.0 - q))


class Result(NamedTuple):
    r"""What :func:`attend` returns (one entry per query; leading axes ``...``).

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
      alpha: ``(...)``, :math:`\alpha_T`.
      beta: ``(...)``, :math:`\beta_T`.
      weights: ``(..., m)``, :math:`p_T` (zero outside the window) over the
        first ``m`` keys: ``m = n`` on the dense path, the cap on the
        truncated one (the keys beyond it have weight zero when there is no
        overflow).
      q_trace: ``(..., max_iter + 1)``, :math:`q_0, q_1, \dots` (held at
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
    return min(_validate.count("max_window", max_window, 1), n)


def _auto_start(alpha0, beta0, eps, n):
    # Smallest power of two >= 32 and >= 2 H(q_0): windows usually grow from H(q_0) as q_t falls.
    q0 = np.asarray(alpha0, float) / (np.asarray(alpha0, float) + np.asarray(beta0, float))
    h0 = int(np.max(np.ceil(math.log(eps) / np.log1p(-q0))))
    return min(n, 1 << max(5, (2 * max(h0, 1) - 1).bit_length()))


def attend(
    q,
    k,
    v,
    *,
    alpha0=1.0,
    beta0=1.0,
    eps: float = 1e-2,
    tol: float = 1e-3,
    max_iter: int = 100,
    scale=None,
    mask=None,
    max_window=None,
) -> Result:
    r"""Expanding attention: geometric prior over the attended distance, Beta hyper-prior.

    Keys are ordered by distance from the query: ``k[..., i, :]`` is the key
    ``i + 1`` positions back (``i = 0`` the nearest). The dot products
    :math:`s_i = \mathrm{scale}\; q^\top k_i` are computed once and cached;
    each mean-field step (module docstring, steps 1–3) only re-weights them
    with the log-prior of the current :math:`q_t` inside the window
    :math:`H(q_t)`. Iteration stops at the first :math:`t` with
    :math:`|q_{t+1} - q_t| < \mathrm{tol}` or after ``max_iter`` updates;
    the output is the posterior expectation of the values under
    :math:`q_T` (window :math:`H(q_T)`).

    **Dense path** (``max_window=None``): a jitted ``lax.scan`` of
    ``max_iter`` steps over all ``n`` dot products that freezes the state
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
    starts from the cap its last call with the same shapes and options ended
    with (the first call: a small power of two, at least 32 and
    :math:`2 H(q_0)`), doubles the cap until no query overflows (at worst
    ``cap = n``, which cannot overflow) and returns that exact result; ``ops``
    and ``dots`` include the failed attempts. Each attempt is one jitted call
    (at most :math:`\log_2 n` compilations per shape) that also reports
    whether the values it read are finite: the keys and values beyond the cap
    are neither read nor checked. An integer cap is static and usable under
    ``jit``.

    Args:
      q: ``(..., d)`` queries.
      k: ``(..., n, d)`` keys in distance order.
      v: ``(..., n, d_v)`` values in the same order.
      alpha0, beta0: Beta hyper-prior parameters, ``> 0`` (scalars or ``(...)``).
      eps: prior tail mass left outside the window, in (0, 1).
      tol: convergence tolerance on :math:`q`, ``> 0``.
      max_iter: step limit, ``>= 0`` (0 evaluates the prior mean :math:`q_0`).
      scale: inverse temperature; ``None`` means :math:`1/\sqrt{d}`.
      mask: optional boolean ``(..., n)`` of existing keys (``mask[..., 0]``
        must be ``True``).
      max_window: ``None`` (dense), an integer ``cap >= 1`` (truncated,
        clipped to ``n``) or ``"auto"``.

    Returns:
      :class:`Result`.
    """
    auto = isinstance(max_window, str) and max_window == "auto"  # its finiteness check is on what it reads
    q = _float_array("q", q, 1, not auto)
    k = _float_array("k", k, 2, not auto)
    v = _float_array("v", v, 2, not auto)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"q and k must share their feature dimension; got q{q.shape}, k{k.shape}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have one row per key; got k{k.shape}, v{v.shape}")
    _check_positive("alpha0", alpha0)
    _check_positive("beta0", beta0)
    eps = _validate.open_unit("eps", eps)
    _validate.positive("tol", tol)
    max_iter = _validate.count("max_iter", max_iter, 0)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    _check_positive("scale", scale)
    if mask is not None:
        mask = jnp.asarray(mask)
        if mask.dtype != jnp.bool_ or mask.shape[-1] != k.shape[-2]:
            raise ValueError(f"mask must be boolean (..., n={k.shape[-2]}); got {mask.dtype}{mask.shape}")
        if _validate.is_concrete(mask) and not bool(np.all(np.asarray(mask)[..., 0])):
            raise ValueError("mask[..., 0] must be True: every query needs its nearest key")
    n = k.shape[-2]
    max_window = _check_max_window(max_window, n)
    a0, b0 = _scalar(alpha0, q.dtype), _scalar(beta0, q.dtype)
    kw = dict(eps=eps, tol=float(tol), max_iter=max_iter, scale=scale)
    if max_window is None:
        return _expanding(q, k, v, a0, b0, mask, **kw)
    if max_window != "auto":
        return _expanding_trunc(q, k, v, a0, b0, mask, cap=max_window, stop_on_overflow=False, **kw)[0]
    if not _validate.is_concrete(q, k, v, a0, b0):
        raise ValueError(
            'max_window="auto" needs concrete inputs (it chooses the cap on the host); '
            "under jit pass an integer cap or None"
        )
    a0, b0 = _const(a0), _const(b0)
    key = (
        "attend",
        q.shape,
        k.shape,
        v.shape,
        q.dtype,
        None if mask is None else mask.shape,
        np.shape(a0),
        np.shape(b0),
    )
    return _auto_cap(
        lambda cap, stop: _expanding_trunc(q, k, v, a0, b0, mask, cap=cap, stop_on_overflow=stop, **kw),
        key + (eps, kw["tol"], max_iter, scale),
        lambda: _auto_start(alpha0, beta0, eps, n),
        n,
        ("q", "k", "v"),
    )


def _float_array(name, x, min_ndim, check_finite):
    if check_finite:
        return _validate.float_array(name, x, min_ndim=min_ndim)
    x = x if isinstance(x, jax.Array) else jnp.asarray(x)  # _validate.float_array's rules but finiteness
    if x.ndim < min_ndim or not jnp.issubdtype(x.dtype, jnp.floating):
        _validate.float_array(name, x, min_ndim=min_ndim)  # raises its message before any value check
    return x


def _scalar(x, dtype):
    # A concrete hyper-parameter stays on the host (NumPy) and crosses with the call's arguments.
    return jnp.asarray(x, dtype) if isinstance(x, jax.core.Tracer) else np.asarray(x, dtype)


_CONSTS: dict = {}  # (value, dtype) -> a scalar hyper-parameter on the device, for max_window="auto"


def _const(a):
    # A concrete scalar from _scalar as a cached device array: a repeated call moves no argument to the device.
    if a.ndim:
        return a
    key = (a.item(), a.dtype)
    if key not in _CONSTS:
        if len(_CONSTS) >= 64:
            _CONSTS.clear()
        _CONSTS[key] = jnp.asarray(a)
    return _CONSTS[key]


# (kind, shapes, dtype, options) -> the cap of the last max_window="auto" call with these shapes: its next call
# starts there instead of at _auto_start. Exactness never rests on it: every attempt reports overflow.
_CAPS: dict = {}


def _auto_cap(run, key, start, n, names):
    """Double the cap until ``run(cap, stop) = (result, status)`` reports no overflow (``status`` bit 0).

    ``status`` bit 1: a value read by the attempt is not finite (``names``: the inputs, for the message).
    The first cap is the cached one of ``key`` (else ``start()``); caps are powers of two (or ``n``),
    so each key compiles at most ``log2 n`` variants. ``ops`` and ``dots`` include the failed attempts.
    """
    cap = _CAPS.get(key) or start()
    spent = None
    while True:
        res, status = run(cap, cap < n)  # stops at the first overflow: the attempt is discarded anyway
        status = int(status)
        if status & 2:
            raise ValueError(f"{' and '.join(names)} must be finite (a value read by the first {cap} keys is not)")
        if not status & 1:
            break
        spent = (res.ops, res.dots) if spent is None else (spent[0] + res.ops, spent[1] + res.dots)
        cap = min(2 * cap, n)
    _CAPS[key] = cap
    return res if spent is None else res._replace(ops=res.ops + spent[0], dots=res.dots + spent[1])


def _meanfield(sims, v, alpha0, beta0, mask, n, *, eps, tol, max_iter, loop, stop_on_overflow=False):
    r"""The mean-field iteration on the cached similarities ``sims (..., m)`` of the first ``m <= n`` keys.

    Windows are :math:`\min(H(q_t), n)`; a window above ``m`` is clipped to
    ``m`` and flagged in ``overflow`` (impossible when ``m == n``).
    ``loop="scan"`` runs ``max_iter`` frozen-after-convergence steps
    (reverse-differentiable); ``"while"`` (:func:`_while_iterations`) stops
    when every query has converged (or, with ``stop_on_overflow``, when any
    query overflowed). Inside the loop step 3 needs only the posterior mean
    distance :math:`m_t = \sum_i i\,(p_t)_i = \sum_i i\, e_i / \sum_i e_i`
    with :math:`e_i = \exp(s_i + i \ln(1 - q_t) - c)` on the window
    (:math:`\ln q_t` and the shift :math:`c` cancel), so the loop skips the
    normalised weights; the final posterior is ``core.weights`` of the
    log-prior-biased similarities.
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
        # By hand: only the posterior mean distance is needed and the normaliser cancels (no log-sum-exp formed).
        e = jnp.exp(logit - jax.lax.stop_gradient(jnp.max(logit, axis=-1, keepdims=True)))
        return jnp.sum(dist * e, axis=-1) / jnp.sum(e, axis=-1)

    a = jnp.broadcast_to(alpha0, batch)
    b = jnp.broadcast_to(beta0, batch)
    q0 = a / (a + b)
    zeros_i = jnp.zeros(batch, jnp.int32)
    false = jnp.zeros(batch, bool)
    if loop == "scan":

        def step(carry, _):
            a, b, done, t, hmax, hsum, over = carry
            qt = a / (a + b)  # 1.
            h, o = window(qt)
            a1, b1 = a + 1.0, b + mean_distance(qt, h)  # 2. and 3.
            conv = jnp.abs(a1 / (a1 + b1) - qt) < tol
            live = ~done
            a, b = jnp.where(live, a1, a), jnp.where(live, b1, b)
            hmax = jnp.where(live, jnp.maximum(hmax, h), hmax)
            carry = (a, b, done | conv, t + live, hmax, hsum + jnp.where(live, h, 0), over | (live & o))
            return carry, a / (a + b)

        init = (a, b, false, zeros_i, zeros_i, zeros_i, false)
        carry, qs = jax.lax.scan(step, init, None, length=max_iter)
        trace = jnp.concatenate([q0[..., None], jnp.moveaxis(qs, 0, -1)], axis=-1)
    else:
        carry, trace = _while_iterations(sims, a, b, mask, n, window, eps, tol, max_iter, stop_on_overflow)
    a, b, done, t, hmax, hsum, over = carry
    qT = a / (a + b)
    h, o = window(qT)
    p = _weights_last(sims + _log_prior(qT, m), inside(h))
    over = over | o
    hmax = jnp.maximum(hmax, h)
    out = jnp.einsum("...n,...ne->...e", p, v)
    d_ops = hsum + h + dv * h
    return Result(
        output=out,
        window=h,
        iterations=t,
        ops=d_ops.astype(sims.dtype),
        converged=done,
        q=qT,
        alpha=a,
        beta=b,
        weights=p,
        q_trace=trace,
        max_window=hmax,
        dots=jnp.full(batch, m, jnp.int32),
        overflow=over,
    )


_UNROLL = 4
_HORNER = 128  # caps up to this: the mean distance by Horner's rule, unrolled (a kernel of ~5 m operations)


def _add2(x, y):
    return x[0] + y[0], x[1] + y[1]


def _powers(z, count):
    """``z ** arange(count)`` along a new last axis by binary powering (a few ulp; no exp or log)."""
    k = np.arange(count)
    out = jnp.ones(z.shape + (count,), z.dtype)
    for bit in range(max(count - 1, 1).bit_length()):
        out = jnp.where((k >> bit) & 1, out * z[..., None], out)
        z = z * z
    return out


_TABLE = 8  # block of the power table: z^i = z^(i mod 8) * z^(8 (i div 8))


def _while_iterations(sims, a, b, mask, n, window, eps, tol, max_iter, stop):
    r"""The forward-only ``lax.while_loop`` of :func:`_meanfield`, built for few kernels per step.

    The state is one ``(..., 6)`` array :math:`(\alpha_t, \beta_t, \text{done}, T, \text{overflow}, q_t)`
    (the counts exact in floating point) plus the trace of :math:`(q_t, H_t)`, the
    windows the loop used (its one write per iteration), from which :math:`\max_t H_t`
    and :math:`\sum_t H_t` are summed after the loop.
    The mean distance takes no ``exp`` per key and step: with
    :math:`w_i = e^{s_i - c}` (once, :math:`c = \max_i s_i`) and
    :math:`z = 1 - q_t`, its two sums :math:`\sum_{i<H} w_i z^i` and
    :math:`\sum_{i<H} i\, w_i z^i` are, for ``m <= _HORNER``, Horner's rule
    unrolled over the keys (elementwise over the queries: one kernel, no
    reduction) and otherwise one reduction of
    :math:`e_i = w_i z^{i \bmod 8} z^{8 \lfloor i/8 \rfloor}`, the ``8 + m/8``
    powers by binary powering (either way a few ulp). On the
    window :math:`z^i > \varepsilon` (:math:`i \ln z > (H - 1) \ln z > \ln \varepsilon`),
    so nothing underflows unless :math:`w_0` does; when some
    :math:`s_0 - c` is below half the log of the smallest normal number, the
    loop uses the per-step maximum shift of the dense path instead (a ``lax.cond``).
    """
    dt, m, batch = sims.dtype, sims.shape[-1], sims.shape[:-1]
    nb = -(-m // _TABLE)
    s = sims if mask is None else jnp.where(mask, sims, -jnp.inf)
    c = jnp.max(s, axis=-1, keepdims=True)
    pad = [(0, 0)] * len(batch) + [(0, nb * _TABLE - m)]
    w = jnp.pad(jnp.exp(s - c), pad).reshape(batch + (nb, _TABLE))
    idx = jnp.arange(nb * _TABLE, dtype=dt).reshape(nb, _TABLE)
    wk = jnp.moveaxis(w.reshape(batch + (-1,)), -1, 0)  # wk[i]: key i's w over the queries

    def horner(qt, l, h):
        z, s0, s1 = 1.0 - qt, 0.0, 0.0
        for i in range(m - 1, -1, -1):
            wi = jnp.where(i < h, wk[i], 0.0)
            s0, s1 = s0 * z + wi, s1 * z + i * wi
        return s1 / s0

    def table(qt, l, h):
        lo = _powers(1.0 - qt, _TABLE)  # z^j, j < 8
        hi = _powers(lo[..., -1] * (1.0 - qt), nb)  # z^(8k)
        e = jnp.where(idx < h[..., None, None], w * lo[..., None, :] * hi[..., :, None], 0.0)
        zero = jnp.zeros((), dt)  # both sums in one reduction (one kernel)
        s0, s1 = jax.lax.reduce((e, idx * e), (zero, zero), _add2, (e.ndim - 2, e.ndim - 1))
        return s1 / s0

    dist = jnp.arange(m, dtype=dt)

    def shifted(qt, l, h):  # the dense path's mean distance: shift by the maximum on the window
        logit = jnp.where(dist < h[..., None], s + dist * l[..., None], -jnp.inf)
        e = jnp.exp(logit - jnp.max(logit, axis=-1, keepdims=True))
        return jnp.sum(dist * e, axis=-1) / jnp.sum(e, axis=-1)

    def run(mean_distance, unroll):
        def step(st):
            a, b, done, t, over, qt = (st[..., i] for i in range(6))  # qt = a / (a + b): 1.
            h, o = window(qt)
            a1, b1 = a + 1.0, b + mean_distance(qt, jnp.log1p(-qt), h.astype(dt))  # 2. and 3.
            q1 = a1 / (a1 + b1)
            live = done == 0
            a, b, qt = jnp.where(live, a1, a), jnp.where(live, b1, b), jnp.where(live, q1, qt)
            done = jnp.where(jnp.abs(q1 - st[..., 5]) < tol, 1.0, done)
            return jnp.stack([a, b, done, t + live, jnp.where(live & o, 1.0, over), qt], -1), h.astype(dt)

        def body(c):
            # `unroll` steps per loop iteration (the loop's own overhead is several kernels' worth) and one
            # trace write; a step past max_iter is skipped (its q_T lands in the trace's padding).
            j, st, tr = c
            qs = []
            for u in range(unroll):
                new, h = step(st)
                st = new if unroll == 1 else jnp.where(j + u < max_iter, new, st)
                qs.append(jnp.stack([st[..., 5], h], -1))  # q_{j+u+1} and H_{j+u}
            return j + unroll, st, jax.lax.dynamic_update_slice_in_dim(tr, jnp.stack(qs), j + 1, 0)

        def cond(c):
            j, st, _ = c
            return (j < max_iter) & ~jnp.all(st[..., 2] > 0) & ~(stop & jnp.any(st[..., 4] > 0))

        zero, q0 = jnp.zeros(batch, dt), a / (a + b)
        tr0 = jnp.zeros((max_iter + 1 + unroll,) + batch + (2,), dt).at[0, ..., 0].set(q0)
        init = (jnp.asarray(0), jnp.stack([a, b, zero, zero, zero, q0], -1), tr0)
        st, tr = jax.lax.while_loop(cond, body, init)[1:]
        return st, tr[: max_iter + 1]

    ok = jnp.all(s[..., 0] - c[..., 0] >= 0.5 * math.log(jnp.finfo(dt).tiny))
    fast = horner if m <= _HORNER else table
    st, tr = jax.lax.cond(ok, lambda: run(fast, _UNROLL), lambda: run(shifted, 1))  # the rare case: compact
    a, b, t = st[..., 0], st[..., 1], st[..., 3].astype(jnp.int32)
    trace = jnp.where(jnp.arange(max_iter + 1) > t[..., None], st[..., 5:], jnp.moveaxis(tr[..., 0], 0, -1))  # held
    h = jnp.moveaxis(tr[1:, ..., 1], 0, -1).astype(jnp.int32)  # H_s of the steps s < T, as the loop used them
    h = jnp.where(jnp.arange(max_iter) < t[..., None], h, 0)
    carry = (a, b, st[..., 2] > 0, t, jnp.max(h, axis=-1, initial=0), jnp.sum(h, axis=-1), st[..., 4] > 0)
    return carry, trace


def _add_dot_ops(res, d):
    return res._replace(ops=res.ops + d * res.dots.astype(res.ops.dtype))


@partial(jax.jit, static_argnames=("eps", "tol", "max_iter"))
def _expanding(q, k, v, alpha0, beta0, mask, *, eps, tol, max_iter, scale):
    n, d = k.shape[-2], k.shape[-1]
    sims = scale * jnp.einsum("...d,...nd->...n", q, k)  # computed once, reused by every step
    res = _meanfield(sims, v, alpha0, beta0, mask, n, eps=eps, tol=tol, max_iter=max_iter, loop="scan")
    return _add_dot_ops(res, d)


@partial(jax.jit, static_argnames=("cap", "stop_on_overflow", "eps", "tol", "max_iter"))
def _expanding_trunc(q, k, v, alpha0, beta0, mask, *, cap, stop_on_overflow, eps, tol, max_iter, scale):
    kc, vc = k[..., :cap, :], v[..., :cap, :]
    sims = scale * jnp.einsum("...d,...nd->...n", q, kc)  # only the first cap dot products
    maskc = None if mask is None else mask[..., :cap]
    return _trunc_core(
        sims, vc, alpha0, beta0, maskc, k.shape[-2], k.shape[-1], stop_on_overflow, eps, tol, max_iter, (sims, vc)
    )


def _trunc_core(sims, vc, alpha0, beta0, maskc, n, d, stop, eps, tol, max_iter, read):
    # sims, vc: of the first cap keys; nothing of length n is touched (the weights stay (..., cap)).
    # Returns (result, status): bit 0 any overflow, bit 1 a non-finite value among `read`: what the call read,
    # or the products of it (a non-finite input makes them non-finite: NaN * 0 and inf * 0 are NaN).
    res = _meanfield(
        sims, vc, alpha0, beta0, maskc, n, eps=eps, tol=tol, max_iter=max_iter, loop="while", stop_on_overflow=stop
    )
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(r)) for r in read]))
    return _add_dot_ops(res, d), jnp.any(res.overflow).astype(jnp.int32) + 2 * (~finite).astype(jnp.int32)


class Params(NamedTuple):
    r"""One expanding-attention head over tokens ``x: (..., N, d)``, read out at the last token.

    .. math::

        \begin{gathered}
        q = W_Q x_N, \quad k_i = W_K x_{N-1-i}, \quad v_i = W_V x_{N-1-i} \\
        (i = 0 \text{ is the nearest earlier token}).
        \end{gathered}

    The query and key maps ``wq``, ``wk`` are ``(d_k, d)`` and the value map
    ``wv`` is ``(d_v, d)``: the fields of :class:`lse_energy.multihop.Params`,
    so that one trained head runs both.
    """

    wq: Array  #: :math:`W_Q`
    wk: Array  #: :math:`W_K`
    wv: Array  #: :math:`W_V`


def attention(
    params: Params,
    x,
    *,
    alpha0=1.0,
    beta0=1.0,
    eps: float = 1e-2,
    tol: float = 1e-3,
    max_iter: int = 100,
    max_window=None,
) -> Result:
    r"""Expanding attention of the last token of ``x: (B, N, d)`` over the ``N - 1`` tokens before it.

    The query :math:`W_Q x_N` attends to the earlier tokens in distance
    order with the geometric prior of :func:`attend` (scale
    :math:`1/\sqrt{d_k}`). ``max_window`` is that of :func:`attend`: with an
    integer or ``"auto"`` cap only the ``cap`` tokens nearest the query are
    projected to keys and values and scored (exact whenever no window
    exceeds the cap, which ``"auto"`` guarantees and ``result.overflow``
    reports; ``"auto"`` checks the finiteness of the tokens it reads only).
    On the truncated path the scores are :math:`x_i^\top (W_K^\top q)`, equal
    to :math:`(W_K x_i)^\top q` up to round-off. Works under ``jit`` with
    ``max_window`` ``None`` or an integer.

    Returns:
      :class:`Result` with ``output: (B, d_v)``.
    """
    if not isinstance(params, Params):
        raise ValueError(f"params must be expanding.Params; got {type(params).__name__}")
    auto = isinstance(max_window, str) and max_window == "auto"
    x = _float_array("x", x, 3, not auto)  # "auto" checks the tokens it reads
    if x.shape[-2] < 2:
        raise ValueError(f"x must hold at least 2 tokens (keys and the query); got shape {x.shape}")
    eps, tol, max_iter = _validate.open_unit("eps", eps), float(tol), _validate.count("max_iter", max_iter, 0)
    _check_positive("alpha0", alpha0)
    _check_positive("beta0", beta0)
    n_keys = x.shape[-2] - 1
    mw = _check_max_window(max_window, n_keys)
    a0, b0 = _scalar(alpha0, x.dtype), _scalar(beta0, x.dtype)
    kw = dict(eps=eps, tol=tol, max_iter=max_iter)
    if mw is None:
        return _attention_dense(params, x, a0, b0, **kw)
    if mw != "auto":
        return _attention_trunc(params, x, a0, b0, cap=mw, stop_on_overflow=False, **kw)[0]
    if not _validate.is_concrete(x, a0, b0, *params):
        raise ValueError(
            'max_window="auto" needs concrete inputs (it chooses the cap on the host); '
            "under jit pass an integer cap or None"
        )
    a0, b0 = _const(a0), _const(b0)
    shapes = tuple(a.shape if hasattr(a, "shape") else np.shape(a) for a in (*params, a0, b0))  # no NumPy per array
    return _auto_cap(
        lambda cap, stop: _attention_trunc(params, x, a0, b0, cap=cap, stop_on_overflow=stop, **kw),
        ("attention", x.shape, x.dtype, shapes, eps, tol, max_iter),
        lambda: _auto_start(alpha0, beta0, eps, n_keys),
        n_keys,
        ("x", "params"),
    )


@partial(jax.jit, static_argnames=("eps", "tol", "max_iter"))
def _attention_dense(params, x, alpha0, beta0, *, eps, tol, max_iter):
    q = x[:, -1] @ params.wq.T
    ctx = x[:, -2::-1]  # keys/values in distance order: index i = token i + 1 back
    k, v = ctx @ params.wk.T, ctx @ params.wv.T
    return _expanding(
        q, k, v, alpha0, beta0, None, eps=eps, tol=tol, max_iter=max_iter, scale=1.0 / math.sqrt(q.shape[-1])
    )


@partial(jax.jit, static_argnames=("cap", "stop_on_overflow", "eps", "tol", "max_iter"))
def _attention_trunc(params, x, alpha0, beta0, *, cap, stop_on_overflow, eps, tol, max_iter):
    n_keys = x.shape[-2] - 1
    ctx = x[:, n_keys - cap : n_keys]  # the cap tokens nearest the query (position order)
    q = x[:, -1] @ params.wq.T
    # q . (W_K x_i) = (W_K^T q) . x_i: scores and values of the cap tokens in one product with
    # [W_K^T q, W_V^T] (no keys projected), reversed into distance order (index i = token i + 1 back).
    proj = jnp.concatenate(
        [(q @ params.wk)[:, :, None], jnp.broadcast_to(params.wv.T, (len(q),) + params.wv.T.shape)], -1
    )
    sv = jnp.einsum("bnd,bde->bne", ctx, proj)[:, ::-1]
    sims = sv[..., 0] / math.sqrt(q.shape[-1])
    return _trunc_core(
        sims, sv[..., 1:], alpha0, beta0, None, n_keys, q.shape[-1], stop_on_overflow, eps, tol, max_iter, (q, sv)
    )


def self_attention_ops(n: int, d: int, d_v: int) -> int:
    r"""Operation count of one query of ordinary attention over ``n`` keys: :math:`n d + n + n d_v`.

    (``n`` dot products of width ``d``, one softmax pass, the value sum; the
    same accounting as :attr:`Result.ops`.)
    """
    n, d, d_v = _validate.count("n", n, 1), _validate.count("d", d, 1), _validate.count("d_v", d_v, 1)
    return n * d + n + n * d_v
