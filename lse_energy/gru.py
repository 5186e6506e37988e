r"""Gated recurrent units and minGRU (§18 of the lecture notes).

The GRU of §18.3, in the notes' row-vector convention (as transcribed, the
update writes :math:`\tilde h^{n-1}` where the previous *state* :math:`h^{n-1}`
is meant; the tildes of the transcription also stand for vector arrows):

.. math::

   g^n = \sigma(h^{n-1} W_g + x^n U_g + b_g), \quad
   r^n = \sigma(h^{n-1} W_r + x^n U_r + b_r),

   \tilde h^n = \tanh\big((h^{n-1} \odot r^n) W + x^n U + b\big), \quad
   h^n = g^n \odot \tilde h^n + (1 - g^n) \odot h^{n-1}.

minGRU (§18.4, Feng et al. 2024) drops every dependence of the gate and the
candidate on :math:`h^{n-1}` (and the ``tanh``):
:math:`g^n = \sigma(x^n U_g + b_g)`, :math:`\tilde h^n = x^n U + b`, so the
state obeys the *linear* recurrence :math:`h_n = a_n h_{n-1} + b_n` with
:math:`a_n = 1 - g_n` and :math:`b_n = g_n \tilde h_n`, known for all ``n`` at
once. It is computed here four ways, all with time as the leading axis:
:func:`scan_sequential` (``lax.scan``), :func:`scan_parallel`
(``lax.associative_scan`` on the affine maps :math:`h \mapsto a h + b`),
:func:`scan_log` (for positive terms: a log-cumulative-sum-exp) with
:func:`scan_log_signed` (the sign split that makes it exact for real
candidates), and the naive closed form :func:`scan_cumprod`, whose cumulative
products underflow on long sequences.

Where the log-sum-exp appears: (i) the gates' sigmoids are two-way softmaxes,
:math:`\sigma(a) = e^a / (e^a + e^0)`, so :math:`\ln \sigma(a) = a -
\mathrm{LSE}(a, 0)` is the log-partition of a two-state choice; (ii) the
log-space scan is a cumulative LSE, an exact way of summing positive terms
whose gradient is a softmax (:func:`grad_scan_log`); (iii) the classifier's
cross-entropy :math:`\mathrm{LSE}(\text{logits}) - \text{logit}_y`
(:func:`loss`) is a log-partition entering with the sign opposite to the
package's energy. Nothing in the recurrence descends an energy: it is a
forward computation, and training descends the cross-entropy by backprop.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "FitExtras",
    "MinParams",
    "Params",
    "accuracy",
    "combine",
    "fit",
    "grad_scan_log",
    "gru",
    "gru_cell",
    "init_min_params",
    "init_params",
    "log_sigmoid",
    "logits",
    "loss",
    "min_coefficients",
    "min_gru",
    "param_count",
    "scan_cumprod",
    "scan_log",
    "scan_log_signed",
    "scan_parallel",
    "scan_sequential",
    "sigmoid",
]

METHODS = ("sequential", "parallel", "log")


class Params(NamedTuple):
    r"""GRU parameters (§18.3 of the lecture notes), row-vector convention.

    :math:`g = \sigma(h W_g + x U_g + b_g)`, :math:`r = \sigma(h W_r + x U_r + b_r)`,
    :math:`\tilde h = \tanh((h \odot r) W + x U + b)`,
    :math:`h' = g \odot \tilde h + (1 - g) \odot h`; a linear read-out
    :math:`\text{logits} = h^N V + c` of the last state classifies the sequence.

    Shapes: the hidden-to-hidden weights ``W``, ``W_g``, ``W_r`` are ``(H, H)``, the
    input-to-hidden weights ``U``, ``U_g``, ``U_r`` are ``(D, H)``, the biases ``b``,
    ``b_g``, ``b_r`` are ``(H,)``, the read-out weights ``V`` are ``(H, K)`` and its bias
    ``c`` is ``(K,)``.
    """

    W: Array
    U: Array
    b: Array
    W_g: Array
    U_g: Array
    b_g: Array
    W_r: Array
    U_r: Array
    b_r: Array
    V: Array
    c: Array


class MinParams(NamedTuple):
    r"""minGRU parameters (§18.4 of the lecture notes).

    :math:`g^n = \sigma(x^n U_g + b_g)`, :math:`\tilde h^n = x^n U + b`,
    :math:`h^n = (1 - g^n) \odot h^{n-1} + g^n \odot \tilde h^n`; read-out
    :math:`\text{logits} = h^N V + c`.

    Shapes: ``U`` and ``U_g`` are ``(D, H)``, ``b`` and ``b_g`` are ``(H,)``, ``V`` is
    ``(H, K)`` and ``c`` is ``(K,)``.
    """

    U: Array
    b: Array
    U_g: Array
    b_g: Array
    V: Array
    c: Array


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      opt_state: optimizer state, to continue training with another call.
      train_accuracy: ``(n_epochs,)`` accuracy on the training set after each epoch.
      eval_accuracy: ``(n_epochs,)`` accuracy on ``(x_eval, y_eval)`` after
        each epoch, or ``None`` when no evaluation set was given.
    """

    opt_state: Any
    train_accuracy: Array
    eval_accuracy: Array | None


# --- parameters -------------------------------------------------------------------------


def init_params(d_in: int, d_hidden: int, n_classes: int, *, key, dtype=None) -> Params:
    r"""GRU weights :math:`\sim \mathcal U(-1/\sqrt H, 1/\sqrt H)` (the usual GRU initialisation), zero biases.

    The read-out :math:`V` is drawn the same way with :math:`1/\sqrt H`.
    ``dtype`` defaults to the default floating dtype (float64 with x64 on).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> # D = 3, H = 4, K = 2
      >>> params = gru.init_params(3, 4, 2, key=jax.random.key(0))
      >>> gru.param_count(params), gru.logits(params, jnp.ones((6, 5, 3))).shape
      (106, (6, 2))
    """
    _validate.key("key", key)
    D = _validate.count("d_in", d_in)
    H = _validate.count("d_hidden", d_hidden)
    K = _validate.count("n_classes", n_classes)
    dtype = _validate.float_dtype("dtype", dtype)
    s = 1.0 / math.sqrt(H)
    ks = jax.random.split(key, 7)
    u = partial(jax.random.uniform, dtype=dtype, minval=-s, maxval=s)
    z = jnp.zeros(H, dtype)
    return Params(
        u(ks[0], (H, H)),
        u(ks[1], (D, H)),
        z,
        u(ks[2], (H, H)),
        u(ks[3], (D, H)),
        z,
        u(ks[4], (H, H)),
        u(ks[5], (D, H)),
        z,
        u(ks[6], (H, K)),
        jnp.zeros(K, dtype),
    )


def init_min_params(d_in: int, d_hidden: int, n_classes: int, *, key, dtype=None) -> MinParams:
    r"""minGRU weights :math:`\sim \mathcal U(-1/\sqrt D, 1/\sqrt D)`, read-out with :math:`1/\sqrt H`, zero biases.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_min_params(3, 4, 2, key=jax.random.key(0))
      >>> gru.param_count(params), gru.logits(params, jnp.ones((6, 5, 3))).shape
      (42, (6, 2))
    """
    _validate.key("key", key)
    D = _validate.count("d_in", d_in)
    H = _validate.count("d_hidden", d_hidden)
    K = _validate.count("n_classes", n_classes)
    dtype = _validate.float_dtype("dtype", dtype)
    sd, sh = 1.0 / math.sqrt(D), 1.0 / math.sqrt(H)
    ks = jax.random.split(key, 3)
    z = jnp.zeros(H, dtype)
    return MinParams(
        core.random_uniform(ks[0], (D, H), dtype, -sd, sd),
        z,
        core.random_uniform(ks[1], (D, H), dtype, -sd, sd),
        z,
        core.random_uniform(ks[2], (H, K), dtype, -sh, sh),
        jnp.zeros(K, dtype),
    )


def param_count(params) -> int:
    """The number of scalar parameters (read-out included) of a :class:`Params` or :class:`MinParams`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_params(3, 4, 2, key=jax.random.key(0))
      >>> gru.param_count(params)
      106
    """
    params = _check_params(params)
    return int(sum(int(np.prod(a.shape)) for a in params))


_SHAPES = dict(W="H H", U="D H", b="H", W_g="H H", U_g="D H", b_g="H", W_r="H H", U_r="D H", b_r="H", V="H K", c="K")


def _check_params(params, cls=None):
    """A :class:`Params` or :class:`MinParams` (a ``cls`` when given), checked by ``_validate.params``."""
    if cls is None and not isinstance(params, (Params, MinParams)):
        raise ValueError(f"params must be gru.Params or gru.MinParams; got {type(params).__name__}")
    cls = cls or type(params)
    return _validate.params(params, cls, {f: _SHAPES[f] for f in cls._fields})[0]


def _check_xs(params, xs, name="x"):
    xs = jnp.asarray(xs)
    if xs.ndim != 3:
        raise ValueError(f"{name} must have shape (B, N, D); got shape {xs.shape}")
    xs = _validate.float_array(name, xs)
    if xs.shape[1] < 1 or xs.shape[0] < 1:
        raise ValueError(f"{name} must have B >= 1 sequences of N >= 1 steps; got shape {xs.shape}")
    if xs.shape[2] != params.U.shape[0]:
        raise ValueError(f"{name} has D = {xs.shape[2]} features but params.U expects {params.U.shape[0]}")
    return xs


def _check_labels(y, n, K, name="y"):
    y = jnp.asarray(y)
    if not jnp.issubdtype(y.dtype, jnp.integer) or y.shape != (n,):
        raise ValueError(f"{name} must be ({n},) integer class labels; got {y.dtype} {y.shape}")
    if _validate.is_concrete(y) and (int(jnp.min(y)) < 0 or int(jnp.max(y)) >= K):
        raise ValueError(f"{name} must lie in 0..K-1 = 0..{K - 1}")
    return y


# --- gates: sigmoid = two-way softmax ------------------------------------------------------


def sigmoid(a) -> Array:
    r"""The gate nonlinearity as a two-way softmax: :math:`\sigma(a) = \mathrm{softmax}([a, 0])_0`.

    Computed as :math:`\exp \ln \sigma(a)` with :func:`log_sigmoid`, over
    the two states "take the candidate" (score :math:`a`) and "keep the state"
    (score 0). The LSE here is the log-partition of a two-state choice;
    nothing is descended.

    Examples:
      >>> from lse_energy import gru
      >>> float(gru.sigmoid(0.0))
      0.5
    """
    return jnp.exp(log_sigmoid(a))


def log_sigmoid(a) -> Array:
    r""":math:`\ln \sigma(a) = a - \mathrm{LSE}(a, 0) = -\mathrm{LSE}(0, -a)`, the log-probability of the first of two
    states.

    Evaluated as the second form with ``jnp.logaddexp`` (a two-term LSE that
    uses ``log1p``), which keeps full relative precision for large
    :math:`|a|`; the first form cancels when :math:`a \gg 0`.

    Examples:
      >>> from lse_energy import gru
      >>> round(float(gru.log_sigmoid(0.0)), 3)  # ln 1/2
      -0.693
    """
    a = _validate.float_array("a", a)
    return -jnp.logaddexp(jnp.zeros_like(a), -a)


# --- GRU --------------------------------------------------------------------------------


def _gru_step(p, h, x):
    g = jax.nn.sigmoid(h @ p.W_g + x @ p.U_g + p.b_g)
    r = jax.nn.sigmoid(h @ p.W_r + x @ p.U_r + p.b_r)
    cand = jnp.tanh((h * r) @ p.W + x @ p.U + p.b)
    return g * cand + (1 - g) * h


def gru_cell(params: Params, h, x) -> Array:
    r"""One GRU step of §18.3: :math:`h^n` from :math:`h^{n-1}` (``(..., H)``) and :math:`x^n` (``(..., D)``).

    The notes' update, as transcribed, reads
    :math:`h^n = g^n \odot \tilde h^n + (1 - g^n) \odot \tilde h^{n-1}`; the
    second term is the previous state :math:`h^{n-1}` (the transcription's
    tildes stand for vector arrows), which is what this computes.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_params(3, 4, 2, key=jax.random.key(0))
      >>> gru.gru_cell(params, jnp.zeros((6, 4)), jnp.ones((6, 3))).shape
      (6, 4)
    """
    params = _check_params(params, Params)
    H, D = params.W.shape[0], params.U.shape[0]
    h = _validate.float_array("h", h, 1)
    x = _validate.float_array("x", x, 1)
    if h.shape[-1] != H or x.shape[-1] != D:
        raise ValueError(f"h must end in H = {H} and x in D = {D}; got {h.shape} and {x.shape}")
    return _gru_step(params, h, x)


def _gru_states(p, xs):
    h0 = jnp.zeros((xs.shape[0], p.W.shape[0]), xs.dtype)

    def step(h, x):
        h = _gru_step(p, h, x)
        return h, h

    _, hs = lax.scan(step, h0, jnp.swapaxes(xs, 0, 1))
    return jnp.swapaxes(hs, 0, 1)


def gru(params: Params, x) -> Array:
    r"""GRU hidden states ``(B, N, H)`` of sequences ``x`` ``(B, N, D)``, from :math:`h^0 = 0` (``lax.scan``).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_params(3, 4, 2, key=jax.random.key(0))
      >>> gru.gru(params, jnp.ones((6, 5, 3))).shape
      (6, 5, 4)
    """
    params = _check_params(params, Params)
    return _gru_states(params, _check_xs(params, x))


# --- minGRU: the linear recurrence h_n = a_n h_{n-1} + b_n, four ways ---------------------------


def _min_coefficients(p, xs):
    u = xs @ p.U_g + p.b_g
    log_g = jax.nn.log_sigmoid(u)
    log_a = jax.nn.log_sigmoid(-u)  # ln(1 - sigma(u)) = ln sigma(-u): no cancellation as g -> 1
    return jnp.exp(log_a), jnp.exp(log_g) * (xs @ p.U + p.b), log_a


def min_coefficients(params: MinParams, x) -> tuple[Array, Array]:
    r"""The affine maps of minGRU: :math:`a_n = 1 - g_n` and :math:`b_n = g_n \tilde h_n`, each ``(B, N, H)``.

    Both depend on :math:`x^n` only, so all ``N`` are computed at once
    (§18.4 of the lecture notes). :math:`1 - g = \sigma(-u)` is evaluated as
    such, so that it keeps full relative precision when the gate is near 1.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_min_params(3, 4, 2, key=jax.random.key(0))
      >>> a, b = gru.min_coefficients(params, jnp.ones((6, 5, 3)))
      >>> a.shape, bool(jnp.all((a > 0) & (a < 1)))
      ((6, 5, 4), True)
    """
    params = _check_params(params, MinParams)
    a, b, _ = _min_coefficients(params, _check_xs(params, x))
    return a, b


def combine(first, second):
    r"""Compose two affine maps, ``first`` then ``second``: :math:`(a_1, b_1) \circ (a_2, b_2) = (a_1 a_2, a_2 b_1 +
    b_2)`.

    :math:`h \mapsto a_2 (a_1 h + b_1) + b_2`. Function composition is
    associative, which is all ``lax.associative_scan`` needs
    (:func:`scan_parallel`). Unvalidated kernel (any broadcastable arrays).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> first, second = (
      ...     (jnp.array(2.0), jnp.array(1.0)),
      ...     (jnp.array(3.0), jnp.array(0.5)),
      ... )
      >>> a, b = gru.combine(first, second)  # h -> 3 (2 h + 1) + 0.5
      >>> float(a), float(b)
      (6.0, 3.5)
    """
    a1, b1 = first
    a2, b2 = second
    return a1 * a2, a2 * b1 + b2


def _check_scan(a, b, h0, names=("a", "b", "h0")):
    a = _validate.float_array(names[0], a, 1)
    b = _validate.float_array(names[1], b, 1)
    h0 = _validate.float_array(names[2], h0)
    if a.shape != b.shape or a.shape[0] < 1:
        raise ValueError(
            f"{names[0]} and {names[1]} must share one shape (N, ...) with N >= 1; got {a.shape} and {b.shape}"
        )
    if h0.shape != a.shape[1:]:
        raise ValueError(f"{names[2]} must have shape {a.shape[1:]} (one step of {names[1]}); got {h0.shape}")
    return a, b, h0


@jax.jit
def _scan_sequential(a, b, h0):
    def step(h, ab):
        h = ab[0] * h + ab[1]
        return h, h

    return lax.scan(step, h0, (a, b))[1]


@jax.jit
def _scan_parallel(a, b, h0):
    A, B = lax.associative_scan(combine, (a, b), axis=0)
    return A * h0 + B


def scan_sequential(a, b, h0) -> Array:
    r""":math:`h_n = a_n h_{n-1} + b_n`, ``n = 1..N``, one step after another (``lax.scan``); time is axis 0.

    Args:
      a, b: ``(N, ...)`` coefficients; h0: ``(...)`` initial state.

    Returns:
      the ``(N, ...)`` states :math:`h_1, \dots, h_N`; ``N`` dependent steps.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> a, b = jnp.full((3, 1), 0.5), jnp.ones((3, 1))
      >>> gru.scan_sequential(a, b, jnp.zeros(1)).ravel().tolist()  # h = h / 2 + 1
      [1.0, 1.5, 1.75]
    """
    return _scan_sequential(*_check_scan(a, b, h0))


def scan_parallel(a, b, h0) -> Array:
    r"""The same states by a parallel prefix scan of the affine maps (``lax.associative_scan``).

    The prefix compositions :math:`(A_n, B_n) = (a_1, b_1) \circ \dots \circ
    (a_n, b_n)` take :math:`O(\log N)` dependent rounds and :math:`O(N)` work
    (Blelloch 1990); then :math:`h_n = A_n h_0 + B_n`. Same arguments and
    result as :func:`scan_sequential`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> a, b = jnp.full((3, 1), 0.5), jnp.ones((3, 1))
      >>> gru.scan_parallel(a, b, jnp.zeros(1)).ravel().tolist()  # h = h / 2 + 1
      [1.0, 1.5, 1.75]
    """
    return _scan_parallel(*_check_scan(a, b, h0))


def _log_combine(first, second):
    a1, b1 = first
    a2, b2 = second
    return a1 + a2, jnp.logaddexp(b1 + a2, b2)


@jax.jit
def _scan_log(log_a, log_b, log_h0):
    A, B = lax.associative_scan(_log_combine, (log_a, log_b), axis=0)
    return jnp.logaddexp(A + log_h0, B)


def scan_log(log_a, log_b, log_h0) -> Array:
    r"""Log-space scan for positive terms: :math:`\ln h_n = \mathrm{LSE}_{k=0..n}\big(\ln b_k + \sum_{j=k+1}^{n} \ln
    a_j\big)`.

    With :math:`b_0 = h_0`, the solution :math:`h_n = \sum_{k=0}^{n} b_k
    \prod_{j=k+1}^{n} a_j` of :math:`h_n = a_n h_{n-1} + b_n` is a sum of
    positive terms, so its logarithm is a cumulative log-sum-exp. It is
    computed by ``lax.associative_scan`` on the affine maps in log
    coordinates, :math:`(\alpha_1, \beta_1) \circ (\alpha_2, \beta_2) =
    (\alpha_1 + \alpha_2, \mathrm{LSE}(\beta_1 + \alpha_2, \beta_2))` (the
    log of :func:`combine`): a parallel scan whose combine is a two-term LSE.
    No product of the :math:`a_j` is ever formed, so nothing underflows.
    (Heinsen's form :math:`S_n + \mathrm{cumLSE}_k(\ln b_k - S_k)` with
    :math:`S_n = \sum_{j \le n} \ln a_j`, used by Feng et al. 2024, is the
    same sum but loses absolute accuracy :math:`\sim \epsilon |S_n|` in
    :math:`\ln h_n`; see the chapter's exercise.)

    Args:
      log_a, log_b: ``(N, ...)`` logs of positive coefficients (``-inf`` allowed in ``log_b``).
      log_h0: ``(...)`` log of the initial state (``-inf`` for :math:`h_0 = 0`).

    Returns:
      the ``(N, ...)`` values :math:`\ln h_n`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> log_a, log_b = jnp.log(jnp.full((3, 1), 0.5)), jnp.zeros((3, 1))
      >>> h = jnp.exp(gru.scan_log(log_a, log_b, jnp.array([-jnp.inf])))
      >>> [round(v, 3) for v in h.ravel().tolist()]  # h = h / 2 + 1
      [1.0, 1.5, 1.75]
    """
    log_a = _validate.float_array("log_a", log_a, 1)
    log_b, log_h0 = jnp.asarray(log_b), jnp.asarray(log_h0)
    for name, v in (("log_b", log_b), ("log_h0", log_h0)):
        if not jnp.issubdtype(v.dtype, jnp.floating):
            raise ValueError(f"{name} must have a floating dtype; got {v.dtype}")
        if _validate.is_concrete(v) and bool(jnp.any(jnp.isnan(v) | (v == jnp.inf))):
            raise ValueError(f"{name} must be finite or -inf (the log of a value >= 0)")
    if log_b.shape != log_a.shape or log_h0.shape != log_a.shape[1:]:
        raise ValueError(
            f"log_b must have shape {log_a.shape} and log_h0 {log_a.shape[1:]}; got {log_b.shape} and {log_h0.shape}"
        )
    return _scan_log(log_a, log_b, log_h0)


def _safe_log(x):
    pos = x > 0
    return jnp.where(pos, jnp.log(jnp.where(pos, x, 1)), -jnp.inf)


@jax.jit
def _scan_log_signed(log_a, b, h0):
    up = _scan_log(log_a, _safe_log(b), _safe_log(h0))
    down = _scan_log(log_a, _safe_log(-b), _safe_log(-h0))
    return jnp.exp(up) - jnp.exp(down)


def scan_log_signed(log_a, b, h0) -> Array:
    r"""The states of :math:`h_n = a_n h_{n-1} + b_n` for real ``b``, ``h0`` and positive ``a``, in log space.

    The recurrence is linear in :math:`(h_0, b)` and :math:`a > 0`, so with
    :math:`b = b^+ - b^-` (:math:`b^\pm = \max(\pm b, 0)`) and likewise
    :math:`h_0`, :math:`h = h^+ - h^-` where :math:`h^\pm` solve the recurrence
    with the positive terms :math:`b^\pm`; each is computed by :func:`scan_log`.
    Exact in exact arithmetic; in floating point the subtraction loses
    relative precision where :math:`h^+ \approx h^-` (errors are small relative
    to :math:`h^+ + h^-`, not to :math:`|h|`). Forward use only: the gradient
    through :math:`\ln 0` entries is not defined. Time is axis 0.

    Args:
      log_a: ``(N, ...)`` log of the decay :math:`a_n = 1 - g_n`.
      b: ``(N, ...)`` real inputs; h0: ``(...)`` real initial state.

    Returns:
      the ``(N, ...)`` states (not their logs).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> log_a, b = jnp.log(jnp.full((3, 1), 0.5)), -jnp.ones((3, 1))
      >>> h = gru.scan_log_signed(log_a, b, jnp.zeros(1))
      >>> [round(v, 3) for v in h.ravel().tolist()]  # h = h / 2 - 1
      [-1.0, -1.5, -1.75]
    """
    log_a, b, h0 = _check_scan(log_a, b, h0, ("log_a", "b", "h0"))
    return _scan_log_signed(log_a, b, h0)


@jax.jit
def _scan_cumprod(a, b, h0):
    P = jnp.cumprod(a, axis=0)
    return P * (h0 + jnp.cumsum(b / P, axis=0))


def scan_cumprod(a, b, h0) -> Array:
    r"""The naive closed form :math:`h_n = P_n \big(h_0 + \sum_{k \le n} b_k / P_k\big)`, :math:`P_n = \prod_{j \le n}
    a_j`.

    Algebraically the same states, parallel (two cumulative scans), but
    :math:`P_n` underflows to 0 once :math:`\sum_j \ln a_j < -745` (float64),
    after which :math:`b_k / P_k = \pm\infty` and :math:`0 \cdot \infty` gives
    NaN. Shown in chapter 15 as what the log-space scan avoids; no check on
    the result (it is meant to fail). Same arguments as :func:`scan_sequential`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> a, b = jnp.full((3, 1), 0.5), jnp.ones((3, 1))
      >>> gru.scan_cumprod(a, b, jnp.zeros(1)).ravel().tolist()  # h = h / 2 + 1
      [1.0, 1.5, 1.75]
    """
    return _scan_cumprod(*_check_scan(a, b, h0))


def grad_scan_log(log_a, log_b, log_h0, cotangent) -> tuple[Array, Array, Array]:
    r"""Analytic gradient of :math:`L = \sum_n \lambda_n \ln h_n` (:func:`scan_log`) w.r.t. its three inputs.

    :math:`\ln h_n = \mathrm{LSE}_{k \le n}\, z_{nk}` with
    :math:`z_{nk} = \ln b_k + \sum_{j=k+1}^n \ln a_j`, so its gradient is the
    softmax :math:`w_{nk} = \exp(z_{nk} - \ln h_n)` over the contributions
    :math:`k = 0..n` (the share of :math:`h_n` that entered at step ``k``):

    .. math::

       \frac{\partial \ln h_n}{\partial \ln b_k} = w_{nk}, \qquad
       \frac{\partial \ln h_n}{\partial \ln a_j} = \sum_{k < j} w_{nk} \quad (j \le n).

    Dense :math:`O(N^2)` evaluation, for checking. Arguments as
    :func:`scan_log` (all finite), plus ``cotangent`` :math:`\lambda`
    ``(N, ...)``. Returns the gradients w.r.t. ``log_a``, ``log_b``, ``log_h0``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> log_a, log_b = jnp.zeros((4, 2)), jnp.zeros((4, 2))
      >>> ga, gb, gh0 = gru.grad_scan_log(
      ...     log_a, log_b, jnp.zeros(2), jnp.ones((4, 2))
      ... )
      >>> ga.shape, gb.shape, gh0.shape
      ((4, 2), (4, 2), (2,))
    """
    log_a = _validate.float_array("log_a", log_a, 1)
    log_b = _validate.float_array("log_b", log_b, 1)
    log_h0 = _validate.float_array("log_h0", log_h0)
    lam = _validate.float_array("cotangent", cotangent, 1)
    if not (log_b.shape == lam.shape == log_a.shape and log_h0.shape == log_a.shape[1:]):
        raise ValueError("log_a, log_b, cotangent must share shape (N, ...) and log_h0 have shape (...)")
    N = log_a.shape[0]
    S = jnp.concatenate([jnp.zeros_like(log_h0)[None], jnp.cumsum(log_a, axis=0)], axis=0)  # S_0..S_N
    c = jnp.concatenate([log_h0[None], log_b], axis=0)  # ln b_0 .. ln b_N
    n = jnp.arange(N + 1)
    extra = (1,) * (log_a.ndim - 1)
    allowed = (n[:, None] >= n[None, :]).reshape((N + 1, N + 1) + extra)
    z = S[:, None] - S[None, :] + c[None, :]  # z[n, k]
    z = jnp.where(allowed, z, -jnp.inf)
    w = jnp.exp(z - jax.nn.logsumexp(z, axis=1, keepdims=True))  # softmax over k <= n
    lam0 = jnp.concatenate([jnp.zeros_like(log_h0)[None], lam], axis=0)  # lambda_0 = 0 (ln h_0 not an output)
    g_c = jnp.sum(lam0[:, None] * w, axis=0)  # sum_n lambda_n w_nk
    before = jnp.where(allowed, jnp.cumsum(w, axis=1) - w, 0)  # sum_{k < j} w_nk for j <= n, indexed [n, j]
    g_a = jnp.sum(lam0[:, None] * before, axis=0)[1:]
    return g_a, g_c[1:], g_c[0]


def _min_states(p, xs, method):
    a, b, log_a = _min_coefficients(p, xs)
    a, b, log_a = (jnp.swapaxes(v, 0, 1) for v in (a, b, log_a))  # time first
    h0 = jnp.zeros(a.shape[1:], a.dtype)
    if method == "sequential":
        hs = _scan_sequential(a, b, h0)
    elif method == "parallel":
        hs = _scan_parallel(a, b, h0)
    else:
        hs = _scan_log_signed(log_a, b, h0)
    return jnp.swapaxes(hs, 0, 1)


def _check_method(method):
    _validate.choice("method", method, METHODS)
    return method


def min_gru(params: MinParams, x, *, method: str = "parallel") -> Array:
    r"""minGRU hidden states ``(B, N, H)`` of ``x`` ``(B, N, D)`` from :math:`h^0 = 0` (§18.4 of the lecture notes).

    ``method``: ``"sequential"`` (:func:`scan_sequential`), ``"parallel"``
    (:func:`scan_parallel`) or ``"log"`` (:func:`scan_log_signed`, forward
    only). All three give the same states to round-off.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> # D = 3, H = 4, K = 2
      >>> params = gru.init_min_params(3, 4, 2, key=jax.random.key(0))
      >>> # B = 2 sequences of N = 5 steps
      >>> x = jax.random.normal(jax.random.key(1), (2, 5, 3))
      >>> h = gru.min_gru(params, x)
      >>> (
      ...     h.shape,
      ...     bool(
      ...         jnp.allclose(
      ...             h, gru.min_gru(params, x, method="sequential"), atol=1e-5
      ...         )
      ...     ),
      ... )
      ((2, 5, 4), True)
    """
    params = _check_params(params, MinParams)
    return _min_states(params, _check_xs(params, x), _check_method(method))


# --- classifier, loss, training -------------------------------------------------------------


def _logits(p, xs, method):
    hs = _gru_states(p, xs) if isinstance(p, Params) else _min_states(p, xs, method)
    return hs[:, -1] @ p.V + p.c


def _loss(p, xs, y, method):
    z = _logits(p, xs, method)
    lse = core.logsumexp(z[:, None, :])[:, 0]
    return jnp.mean(lse - jnp.take_along_axis(z, y[:, None], axis=-1)[:, 0])


def logits(params, x, *, method: str = "parallel") -> Array:
    r"""Class scores ``(B, K)``: :math:`h^N V + c` of the last state (GRU or minGRU, by the type of ``params``).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_min_params(3, 4, 2, key=jax.random.key(0))
      >>> gru.logits(params, jnp.ones((6, 5, 3))).shape
      (6, 2)
    """
    params = _check_params(params)
    return _logits(params, _check_xs(params, x), _check_method(method))


def loss(params, x, y, *, method: str = "parallel") -> Array:
    r"""Mean softmax cross-entropy :math:`\frac1B \sum_i [\mathrm{LSE}_k(z_{ik}) - z_{i y_i}]` of the logits.

    The LSE here is the log-partition of the class distribution; it enters
    with a *plus* sign, opposite to the package's energy
    :math:`E = -\sum \mathrm{LSE}`, and training *minimises* it: the logits of
    the wrong classes are pushed down, not up. Uses
    :func:`lse_energy.core.logsumexp`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_min_params(3, 4, 2, key=jax.random.key(0))
      >>> xs, y = jnp.ones((6, 5, 3)), jnp.arange(6) % 2
      >>> loss = gru.loss(params, xs, y)
      >>> loss.shape, bool(loss > 0)
      ((), True)
    """
    params = _check_params(params)
    x = _check_xs(params, x)
    y = _check_labels(y, x.shape[0], params.c.shape[0])
    return _loss(params, x, y, _check_method(method))


def accuracy(params, x, y, *, method: str = "parallel") -> Array:
    """Fraction of sequences whose largest logit is the label.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gru
      >>> params = gru.init_params(3, 4, 2, key=jax.random.key(0))
      >>> xs, y = jnp.ones((6, 5, 3)), jnp.arange(6) % 2
      >>> acc = gru.accuracy(params, xs, y)  # identical inputs: one class for all
      >>> acc.shape, float(acc)
      ((), 0.5)
    """
    params = _check_params(params)
    x = _check_xs(params, x)
    y = _check_labels(y, x.shape[0], params.c.shape[0])
    return jnp.mean(jnp.argmax(_logits(params, x, _check_method(method)), axis=-1) == y)


def _value_and_grad(p, batch, args, method):
    # one minibatch of the driver (_descent.minibatch)
    return jax.value_and_grad(_loss)(p, batch[0], batch[1], method)


def _epoch_end(p, values, data, args, method):
    # after each epoch: its mean loss, the training accuracy and the held-out accuracy (or None)
    (x, y), (x_eval, y_eval) = data, args

    def acc(xs, ys):
        return jnp.mean(jnp.argmax(_logits(p, xs, method), axis=-1) == ys).astype(x.dtype)

    return jnp.mean(values), acc(x, y), acc(x_eval, y_eval) if x_eval is not None else None


def _result(opt_state, values, ends):
    losses, tr, ev = ends
    return losses, FitExtras(opt_state, tr, ev), losses


def fit(
    params,
    x,
    y,
    *,
    key,
    optimizer,
    n_epochs: int,
    batch_size: int,
    x_eval=None,
    y_eval=None,
    method: str = "parallel",
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Train a GRU or minGRU classifier (by the type of ``params``) by minibatch descent on :func:`loss`.

    Each epoch shuffles with ``key`` and drops a last partial batch; each
    minibatch takes one step of ``optimizer`` (an optax transformation, e.g.
    ``optax.adam(1e-2)``) on the mean cross-entropy, gradients by backprop
    through the recurrence (§18 of the lecture notes describes the forward
    computation; the training objective is the classifier's).

    Args:
      params: :class:`Params` or :class:`MinParams`.
      x: ``(B, N, D)`` training sequences; y: ``(B,)`` integer labels.
      key: shuffling key. optimizer: optax ``GradientTransformation``.
      n_epochs, batch_size: integers ``>= 1`` (``batch_size <= B``).
      x_eval, y_eval: optional held-out set, scored after every epoch.
      method: the minGRU scan used in training (``"sequential"`` or ``"parallel"``).
      opt_state: optional optimizer state to continue from.
      progress: show a ``tqdm.auto`` bar of the epochs (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult` with ``energies`` the ``(n_epochs,)``
      mean training cross-entropy of each epoch's minibatches (before each
      step), ``converged=None`` and :class:`FitExtras`.

    Raises:
      ValueError: on invalid arguments, or when the run goes non-finite.

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import gru
      >>> params = gru.init_min_params(3, 4, 2, key=jax.random.key(0))
      >>> x, y = jax.random.normal(jax.random.key(1), (8, 5, 3)), jnp.arange(8) % 2
      >>> result = gru.fit(
      ...     params,
      ...     x,
      ...     y,
      ...     key=jax.random.key(2),
      ...     optimizer=optax.adam(1e-2),
      ...     n_epochs=2,
      ...     batch_size=4,
      ... )
      >>> result.energies.shape, result.extras.train_accuracy.shape
      ((2,), (2,))
    """
    _validate.key("key", key)
    params = _check_params(params)
    x = _check_xs(params, x, "x")
    y = _check_labels(y, x.shape[0], params.c.shape[0])
    if (x_eval is None) != (y_eval is None):
        raise ValueError("x_eval and y_eval must be given together")
    if x_eval is not None:
        x_eval = _check_xs(params, x_eval, "x_eval")
        y_eval = _check_labels(y_eval, x_eval.shape[0], params.c.shape[0], "y_eval")
    n_epochs, batch_size = _validate.trainer(optimizer, n_epochs, batch_size, x.shape[0], "B")
    _validate.choice("method", method, ("sequential", "parallel"))
    return _descent.minibatch(
        "gru.fit",
        partial(_value_and_grad, method=method),
        params,
        (x, y),
        key=key,
        optimizer=optimizer,
        n_epochs=n_epochs,
        batch_size=batch_size,
        args=(x_eval, y_eval),
        opt_state=opt_state,
        epoch_end=partial(_epoch_end, method=method),
        result=_result,
        progress=progress,
    )
