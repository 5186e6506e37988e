r"""Restricted Boltzmann machines: a log-sum-exp energy over binary edges.

This module implements §23 of the lecture notes ("Restricted
Boltzmann Machines"). Binary visible units :math:`v \in \{0,1\}^m` and hidden
units :math:`h \in \{0,1\}^n` interact only across the two layers:

.. math::

    E(v, h) = -v^\top W h - b^\top v - c^\top h \qquad \text{(§23.1)},
    \qquad q(v, h) = e^{-E(v, h)} / Z .

Summing out :math:`h` one unit at a time gives the free energy

.. math::

    F(v) = -\ln \sum_h e^{-E(v,h)}
         = -b^\top v - \sum_{j=1}^n \ln \sum_{h_j \in \{0, 1\}}
           \exp\big(h_j\,(c_j + W_{:j}^\top v)\big),

i.e. every hidden unit is a *child* whose two *parents* are its states
:math:`\{0, 1\}`, with :math:`\mathrm{sim} \in \{0,\ c_j + W_{:j}^\top v\}`.
That is the log-sum-exp energy of ``core`` (eq. 2 of Tschantz 2025) with a
fully factorised prior over binary edges, and it is how :func:`energy` is
computed (with :func:`lse_energy.core.logsumexp`). The softmax weights of that
energy are the conditionals :math:`P(h_j = 1 \mid v) = \sigma(c_j + W_{:j}^\top v)`.

Two remarks on the notes as printed: the Boltzmann distribution in §23.3 and the loss in §23.4 read
:math:`\tfrac12 e^{-E}` where :math:`\tfrac1Z e^{-E}` is meant, and §23.4 maximises over :math:`v` where it means
:math:`\theta`. The CD rule of §23.8 updates only :math:`W`; here the biases get the same positive-minus-negative
update (their statistics are :math:`v` and :math:`P(h=1\mid v)`).

Input dtypes. The parameters :math:`W, b, c` are continuous: an integer or boolean array raises ``ValueError``
naming it. Unit states ``v`` and ``h`` are binary data and keep their natural dtypes: float, integer or boolean
arrays are accepted and cast to ``params.W.dtype``; an integer or boolean array must hold 0/1 (anything else
raises), and functions that need binary data (:func:`gibbs`, :func:`grad_cd`, :func:`fit`, :func:`log_likelihood`,
...) require 0/1 of a float array too. Where a function accepts real-valued states (the energies, free energies and
conditional probabilities extend multilinearly), it says so.

Shapes: ``v`` is ``(n_visible,)`` or a batch ``(N, n_visible)``; ``h`` is ``(n_hidden,)`` or ``(N, n_hidden)``.
Per-configuration quantities (:func:`joint_energy`, :func:`energy`, :func:`log_likelihood`) are returned per sample,
``()`` or ``(N,)``: unlike the scalar energies elsewhere in the package, they are log-probabilities of individual
configurations; sum them for a total.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = ["Params", "EnergyGap", "GibbsState", "FitExtras", "init_params", "joint_energy", "energy", "energy_hidden"]
__all__ += ["grad_v", "grad_params", "energy_gap", "hidden_probs", "visible_probs", "sample_hidden", "sample_visible"]
__all__ += ["gibbs", "binary_states", "log_partition", "log_likelihood", "grad_log_likelihood_params", "grad_cd"]
__all__ += ["gibbs_transition_matrix", "grad_cd_expected", "fit"]

MAX_ENUMERATE = 24  # largest layer whose 2**n states we are willing to enumerate


class Params(NamedTuple):
    r"""Parameters of a Bernoulli-Bernoulli RBM.

    .. math:: E(v, h) = -v^\top W h - b^\top v - c^\top h

    Attributes:
      W: ``(n_visible, n_hidden)`` couplings; column :math:`W_{:j}` is the
        receptive field ("filter") of hidden unit :math:`j`.
      b: ``(n_visible,)`` visible biases.
      c: ``(n_hidden,)`` hidden biases.
    """

    W: Array
    b: Array
    c: Array


class EnergyGap(NamedTuple):
    r"""Energy gaps :math:`\Delta E(u) = E(u = 1) - E(u = 0)` of every unit (§23.2).

    Attributes:
      visible: same shape as ``v``, :math:`\Delta E(v_i) = -(W h)_i - b_i`.
      hidden: same shape as ``h``, :math:`\Delta E(h_j) = -(W^\top v)_j - c_j`.
    """

    visible: Array
    hidden: Array


class GibbsState(NamedTuple):
    r"""End of a block-Gibbs chain :math:`v \to h \to v \to \dots`.

    Attributes:
      v: ``(..., n_visible)`` the last visible sample.
      h: ``(..., n_hidden)`` the hidden sample it was drawn from.
      v_prob: ``(..., n_visible)`` :math:`P(v = 1 \mid h)`, the mean of ``v`` (smoother for display).
    """

    v: Array
    h: Array
    v_prob: Array


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      reconstruction_error: ``(n_epochs,)`` mean over data and pixels of :math:`(v - \sigma(b + W \sigma(c + W^\top
        v)))^2` after each epoch (cheap, deterministic, not the likelihood); ``None`` without ``monitor``.
      opt_state: the optimizer's state after the last step (pass it back to continue).
    """

    reconstruction_error: Array
    opt_state: Any = None


# --- Validation ------------------------------------------------------------
_concrete = _validate.is_concrete


def _check_params(params) -> Params:
    return _validate.params(params, Params, {"W": "n_visible n_hidden", "b": "n_visible", "c": "n_hidden"})[0]


def _check_layer(x, size: int, name: str, dtype, *, binary: bool = False) -> Array:
    x = jnp.asarray(x)
    if x.ndim not in (1, 2) or x.shape[-1] != size:
        raise ValueError(f"{name} must have shape ({size},) or (N, {size}); got {x.shape}")
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_):
        raise ValueError(f"{name} must be numeric; got dtype {x.dtype}")
    # Integer and boolean arrays are binary unit states (data), never a
    # continuous relaxation: they must hold 0/1, whatever the function.
    discrete = not jnp.issubdtype(x.dtype, jnp.floating)
    if _concrete(x):
        arr = np.asarray(x)
        if not discrete and not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite")
        if (binary or discrete) and not np.all((arr == 0) | (arr == 1)):
            got = f"an {x.dtype} array" if discrete else "other values"
            raise ValueError(f"{name} must be binary (entries 0 or 1); got {got} with values outside {{0, 1}}")
    return x.astype(dtype)


# --- Energy, free energy and their gradients -------------------------------
def init_params(n_visible: int, n_hidden: int, *, key, scale: float = 0.01, x=None, dtype=None) -> Params:
    r"""Small random couplings :math:`W_{ij} \sim \mathcal N(0, \mathrm{scale}^2)`, :math:`c = 0`.

    With ``x`` (``(N, n_visible)`` binary) the visible biases start at the log-odds of the pixel means,
    :math:`b_i = \ln \bar v_i / (1 - \bar v_i)` (means clipped to ``[1e-3, 1 - 1e-3]``), so the untrained model
    already has the data's marginals; otherwise :math:`b = 0`. ``dtype`` is a floating dtype, by default JAX's
    default floating dtype (float64 with x64 on, float32 without).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(6, 4, key=jax.random.key(0), dtype=jnp.float32)
      >>> params.W.shape, params.b.shape, params.c.shape
      ((6, 4), (6,), (4,))
    """
    _validate.key("key", key)
    n_visible = _validate.count("n_visible", n_visible, 1)
    n_hidden = _validate.count("n_hidden", n_hidden, 1)
    _validate.nonnegative("scale", scale)
    dtype = _validate.float_dtype("dtype", dtype)
    W = scale * core.random_normal(key, (n_visible, n_hidden), dtype)
    if x is None:
        b = jnp.zeros(n_visible, dtype)
    else:
        x = _check_layer(x, n_visible, "x", dtype, binary=True)
        p = jnp.clip(jnp.mean(jnp.atleast_2d(x), axis=0), 1e-3, 1 - 1e-3)
        b = jnp.log(p) - jnp.log1p(-p)
    return Params(W, b, jnp.zeros(n_hidden, dtype))


def joint_energy(params: Params, v, h) -> Array:
    r"""Joint energy :math:`E(v, h) = -v^\top W h - b^\top v - c^\top h` (§23.1 of the notes).

    Args:
      params: :class:`Params`.
      v: ``(n_visible,)`` or ``(N, n_visible)``; any real values (the energy
        is multilinear, so it extends to a continuous relaxation).
      h: ``(n_hidden,)`` or ``(N, n_hidden)``, same batch shape as ``v``.

    Returns:
      ``()`` for single vectors, ``(N,)`` per sample for batches.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.ones(3), jnp.zeros(2))
      >>> v, h = jnp.array([1.0, 0.0, 1.0]), jnp.zeros(2)
      >>> float(rbm.joint_energy(params, v, h))  # -b^T v
      -2.0
    """
    W, b, c = _check_params(params)
    v = _check_layer(v, W.shape[0], "v", W.dtype)
    h = _check_layer(h, W.shape[1], "h", W.dtype)
    if v.shape[:-1] != h.shape[:-1]:
        raise ValueError(f"v and h must have the same batch shape; got v {v.shape}, h {h.shape}")
    return -(jnp.einsum("...i,ij,...j->...", v, W, h) + v @ b + h @ c)


def _hidden_sim(W, c, v):
    """``(..., n_hidden, 2)``: sim of hidden unit j's two states, {0, c_j + W_j^T v}."""
    s = v @ W + c
    return jnp.stack([jnp.zeros_like(s), s], axis=-1)


def _visible_sim(W, b, h):
    """``(..., n_visible, 2)``: sim of visible unit i's two states, {0, b_i + W_i h}."""
    s = h @ W.T + b
    return jnp.stack([jnp.zeros_like(s), s], axis=-1)


@jax.jit
def _free_energy(W, b, c, v):
    return -(v @ b) - jnp.sum(core.logsumexp(_hidden_sim(W, c, v)), axis=-1)


def _free_energy_hidden(W, b, c, h):
    return -(h @ c) - jnp.sum(core.logsumexp(_visible_sim(W, b, h)), axis=-1)


def energy(params: Params, v) -> Array:
    r"""Free energy :math:`F(v) = -\ln \sum_h e^{-E(v,h)}`, one log-sum-exp per hidden unit.

    .. math::

        \begin{aligned}
        F(v) &= -b^\top v - \sum_j \ln \sum_{h_j \in \{0,1\}} \exp\big(h_j (c_j + W_{:j}^\top v)\big) \\
        &= -b^\top v - \sum_j \operatorname{softplus}(c_j + W_{:j}^\top v),
        \end{aligned}

    computed with :func:`lse_energy.core.logsumexp` over the two states
    (sim values :math:`\{0, c_j + W_{:j}^\top v\}`). It is :math:`L_1` of §23.4
    of the notes, and equals scikit-learn's ``BernoulliRBM._free_energy``.

    Args:
      params: :class:`Params`.
      v: ``(n_visible,)`` or ``(n_samples, n_visible)``. A floating array may
        hold any finite real values (the continuous relaxation); an integer
        or boolean array is binary data, cast to ``params.W.dtype``, and must
        hold 0/1 only.

    Returns:
      ``()`` or ``(n_samples,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.zeros(3), jnp.zeros(2))
      >>> f = rbm.energy(params, jnp.array([[1, 0, 1], [0, 0, 0]]))  # -2 ln 2
      >>> f.shape, [round(v, 3) for v in f.tolist()]
      ((2,), [-1.386, -1.386])
    """
    W, b, c = _check_params(params)
    v = _check_layer(v, W.shape[0], "v", W.dtype)
    return _free_energy(W, b, c, v)


def energy_hidden(params: Params, h) -> Array:
    r"""The other marginal: :math:`F(h) = -\ln \sum_v e^{-E(v,h)} = -c^\top h - \sum_i \operatorname{softplus}(b_i +
    W_{i:} h)`.

    Each *visible* unit is now the child, with the two parents
    :math:`\{0, b_i + W_{i:} h\}`.

    ``h`` is ``(n_hidden,)`` or ``(N, n_hidden)``, checked as :func:`energy`
    checks ``v``; the result is ``()`` or ``(N,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.zeros(3), jnp.zeros(2))
      >>> f = rbm.energy_hidden(params, jnp.zeros((1, 2)))  # -3 ln 2
      >>> f.shape, round(float(f[0]), 3)
      ((1,), -2.079)
    """
    W, b, c = _check_params(params)
    return _free_energy_hidden(W, b, c, _check_layer(h, W.shape[1], "h", W.dtype))


def grad_v(params: Params, v) -> Array:
    r""":math:`\partial F / \partial v = -b - W\,\sigma(c + W^\top v)`, the continuous relaxation.

    This is the child part of eq. (4) of Tschantz (2025): softmax weights (:math:`\sigma` and :math:`1 - \sigma`
    over the two states) times the sim-gradients (:math:`W_{:j}` and 0). Its negative,
    :math:`b + W \sigma(W^\top v + c)`, is a tied-weight feed-forward block with a sigmoid non-linearity.

    Args:
      v: ``(n_visible,)`` or ``(N, n_visible)``.

    Returns:
      same shape as ``v``; row ``n`` is the gradient of ``F(v_n)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> rbm.grad_v(params, jnp.ones((4, 3))).shape
      (4, 3)
    """
    W, b, c = _check_params(params)
    v = _check_layer(v, W.shape[0], "v", W.dtype)
    p = jax.nn.sigmoid(v @ W + c)
    return -b - p @ W.T


def grad_params(params: Params, v) -> Params:
    r"""Gradient of the *mean* free energy :math:`\bar F = \frac1N \sum_n F(v_n)` w.r.t. the parameters.

    .. math::

        \begin{aligned}
        \frac{\partial \bar F}{\partial W} &= -\frac1N \sum_n v_n\, \sigma(c + W^\top v_n)^\top, \\
        \frac{\partial \bar F}{\partial b} &= -\frac1N \sum_n v_n, \\
        \frac{\partial \bar F}{\partial c} &= -\frac1N \sum_n \sigma(c + W^\top v_n).
        \end{aligned}

    Its negative is the *positive phase* of §23.8 of the notes (:math:`-\nabla_W L_1 = V^\top \sigma(VW + c)`), and
    evaluated at model samples the negative phase. A single ``v`` counts as ``N = 1``.

    Returns:
      :class:`Params` of the same shapes as ``params``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> g = rbm.grad_params(params, jnp.ones((4, 3)))
      >>> g.W.shape, g.b.shape, g.c.shape
      ((3, 2), (3,), (2,))
    """
    W, b, c = _check_params(params)
    v = _check_layer(v, W.shape[0], "v", W.dtype)
    return _free_energy_grad_params(W, c, jnp.atleast_2d(v))


def _free_energy_grad_params(W, c, v):
    p = jax.nn.sigmoid(v @ W + c)
    n = v.shape[0]
    return Params(W=-(v.T @ p) / n, b=-jnp.mean(v, axis=0), c=-jnp.mean(p, axis=0))


def energy_gap(params: Params, v, h) -> EnergyGap:
    r"""Energy gaps :math:`\Delta E(u) = E(u{=}1) - E(u{=}0)` of every unit, the rest held fixed (§23.2).

    .. math::

        \Delta E(v_i) = -\textstyle\sum_j W_{ij} h_j - b_i, \qquad
        \Delta E(h_j) = -\textstyle\sum_i v_i W_{ij} - c_j .

    Because :math:`E` is linear in each unit, the gap equals the partial derivative :math:`\partial E / \partial u`
    ("like a gradient but for binary nodes"), and :math:`P(u = 1 \mid \text{rest}) = \sigma(-\Delta E(u))`.

    Args:
      v: ``(n_visible,)`` or ``(N, n_visible)``.
      h: ``(n_hidden,)`` or ``(N, n_hidden)``, same batch shape.

    Returns:
      :class:`EnergyGap` with ``visible`` shaped like ``v`` and ``hidden`` like ``h``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> gap = rbm.energy_gap(params, jnp.ones(3), jnp.zeros(2))
      >>> jax.tree.map(jnp.shape, gap)
      EnergyGap(visible=(3,), hidden=(2,))
    """
    W, b, c = _check_params(params)
    v = _check_layer(v, W.shape[0], "v", W.dtype)
    h = _check_layer(h, W.shape[1], "h", W.dtype)
    if v.shape[:-1] != h.shape[:-1]:
        raise ValueError(f"v and h must have the same batch shape; got v {v.shape}, h {h.shape}")
    return EnergyGap(visible=-(h @ W.T) - b, hidden=-(v @ W) - c)


# --- Conditionals and block Gibbs sampling ---------------------------------
def hidden_probs(params: Params, v) -> Array:
    r""":math:`P(h_j = 1 \mid v) = \sigma(c_j + W_{:j}^\top v)` (§23.2, §23.8).

    Computed as the softmax weight of state 1 among hidden unit :math:`j`'s two states, ``core.weights`` over
    :math:`\{0, c_j + W_{:j}^\top v\}`: the posterior over the binary edge.

    Args:
      v: ``(n_visible,)`` or ``(N, n_visible)``.

    Returns:
      ``(n_hidden,)`` or ``(N, n_hidden)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.zeros(3), jnp.zeros(2))
      >>> p = rbm.hidden_probs(params, jnp.ones((4, 3)))
      >>> p.shape, bool(jnp.allclose(p, 0.5))
      ((4, 2), True)
    """
    W, b, c = _check_params(params)
    v = _check_layer(v, W.shape[0], "v", W.dtype)
    return core.weights(_hidden_sim(W, c, v))[..., 1]


def visible_probs(params: Params, h) -> Array:
    r""":math:`P(v_i = 1 \mid h) = \sigma(b_i + W_{i:} h)`, the softmax weight of state 1 of visible unit :math:`i`.

    ``h`` is ``(n_hidden,)`` or ``(N, n_hidden)``; the result is ``(n_visible,)`` or
    ``(N, n_visible)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.zeros(3), jnp.zeros(2))
      >>> p = rbm.visible_probs(params, jnp.ones((4, 2)))
      >>> p.shape, bool(jnp.allclose(p, 0.5))
      ((4, 3), True)
    """
    W, b, c = _check_params(params)
    return core.weights(_visible_sim(W, b, _check_layer(h, W.shape[1], "h", W.dtype)))[..., 1]


def _threefry2x32(k1, k2, x1, x2):
    # JAX's threefry2x32, unrolled (on CPU, JAX's is a loop storing the arrays at each of its 5 steps): ~5x faster
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            x1, x2 = x1 + x2, ((x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r))) ^ (x1 + x2)
        x1, x2 = x1 + ks[(i + 1) % 3], x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _blocks(key, n):
    # threefry blocks (b1, b2) number 0..n-1 of key, as jax.random draws them; a batch of keys gives a batch
    kd = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    lo = jax.lax.iota(np.uint32, n)
    return _threefry2x32(kd[..., :1], kd[..., 1:], jnp.zeros_like(lo), lo)


def _bernoulli(key, p):
    # u < p: u = jax.random.uniform(key, p.shape, p.dtype) bit for bit, or from blocks (fit's uniform_bits=16)
    def f(x):  # uint32 < 2**31 to p's float type
        return x.astype(np.int32).astype(p.dtype)

    if isinstance(key, tuple):  # uniform r * blocks + j is 16-bit half r % 2 of b1[j] (r < 2) or b2[j]
        r = jnp.arange(4, dtype=np.uint32)[:, None]
        u = f(jnp.where(r < 2, *key) >> (r & 1) * 16 & 0xFFFF) * 2.0**-16
    elif core.prefix_stable(key) and p.size < 2**31 and p.dtype in (jnp.float32, jnp.float64):
        b1, b2 = _blocks(key, p.size)  # JAX's mantissa of 1 + u: (b1 ^ b2) >> 9, or in float64 (b1 << 32 | b2) >> 12
        if p.dtype == jnp.float32:
            u = f((b1 ^ b2) >> 9) * 2.0**-23
        else:
            u = f(b1 >> 1) * 2.0**-31 + f((b1 & 1) << 20 | b2 >> 12) * 2.0**-52
    else:
        u = core.random_uniform(key, p.shape, p.dtype)  # jax.random.bernoulli(key, p)
    return (u.reshape(-1)[: p.size].reshape(p.shape) < p).astype(p.dtype)


def sample_hidden(params: Params, v, *, key) -> Array:
    r"""Draw :math:`h \sim P(h \mid v) = \prod_j P(h_j \mid v)` (the sampling algorithm of §23.2).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> h = rbm.sample_hidden(params, jnp.ones((4, 3)), key=jax.random.key(1))
      >>> h.shape, bool(jnp.all((h == 0) | (h == 1)))
      ((4, 2), True)
    """
    _validate.key("key", key)
    return _bernoulli(key, hidden_probs(params, v))


def sample_visible(params: Params, h, *, key) -> Array:
    r"""Draw :math:`v \sim P(v \mid h) = \prod_i P(v_i \mid h)`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> v = rbm.sample_visible(params, jnp.ones((4, 2)), key=jax.random.key(1))
      >>> v.shape, bool(jnp.all((v == 0) | (v == 1)))
      ((4, 3), True)
    """
    _validate.key("key", key)
    return _bernoulli(key, visible_probs(params, h))


def _permutation(key, n):
    # jax.random.permutation(key, n) bit for bit, each stable sort done on one uint64 key, word << 32 | position
    if not (core.prefix_stable(key) and jax.config.jax_enable_x64):
        return jax.random.permutation(key, n)
    x = jnp.arange(n)
    for _ in range(int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))):
        key, sub = jax.random.split(key)
        b1, b2 = _blocks(sub, n)
        x = x[jax.lax.sort((b1 ^ b2).astype(np.uint64) << 32 | jnp.arange(n, dtype=np.uint64)).astype(np.uint32)]
    return x


def _sweep_keys(key, n):  # (n, 2): split(split(key, n)[i]), the (hidden, visible) keys of sweep i
    return jax.vmap(jax.random.split)(jax.random.split(key, n))


def _gibbs_step(W, b, c, v, keys):
    h = _bernoulli(keys[0], jax.nn.sigmoid(v @ W + c))
    pv = jax.nn.sigmoid(h @ W.T + b)
    return _bernoulli(keys[1], pv), h, pv


@partial(jax.jit, static_argnames=("n_steps",))
def _gibbs(W, b, c, v0, key, n_steps):
    def body(state, k):
        return GibbsState(*_gibbs_step(W, b, c, state.v, k)), None

    h0 = jnp.zeros(v0.shape[:-1] + (W.shape[1],), W.dtype)
    state, _ = jax.lax.scan(body, GibbsState(v0, h0, v0), _sweep_keys(key, n_steps))
    return state


def gibbs(params: Params, v0, n_steps: int, *, key) -> GibbsState:
    r"""Run ``n_steps`` sweeps of block Gibbs sampling, :math:`h \sim P(h\mid v)` then :math:`v \sim P(v \mid h)`
    (§23.9).

    Every row of ``v0`` is an independent chain. Jitted; a ``lax.scan`` over
    the sweeps. The same ``key`` gives the same samples.

    Args:
      v0: ``(n_visible,)`` or ``(N, n_visible)`` binary start state(s).
      n_steps: number of sweeps, ``>= 1``.
      key: a ``jax.random`` key.

    Returns:
      :class:`GibbsState` after the last sweep.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> state = rbm.gibbs(params, jnp.ones((4, 3)), 3, key=jax.random.key(1))
      >>> jax.tree.map(jnp.shape, state)
      GibbsState(v=(4, 3), h=(4, 2), v_prob=(4, 3))
    """
    _validate.key("key", key)
    W, b, c = _check_params(params)
    v0 = _check_layer(v0, W.shape[0], "v0", W.dtype, binary=True)
    n_steps = _validate.count("n_steps", n_steps, 1)
    return _gibbs(W, b, c, v0, key, n_steps)


# --- Exact likelihood of small RBMs (enumeration) --------------------------
def binary_states(n: int, dtype=None) -> Array:
    r"""All :math:`2^n` binary vectors, ``(2**n, n)``; row ``k`` holds the bits of ``k`` (unit ``i`` = bit ``i``),
    in ``dtype`` (by default JAX's default floating dtype).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> rbm.binary_states(2, dtype=jnp.float32).astype(int).tolist()
      [[0, 0], [1, 0], [0, 1], [1, 1]]
    """
    n = _validate.count("n", n, 0)
    dtype = _validate.float_dtype("dtype", dtype)
    if n > MAX_ENUMERATE:
        raise ValueError(f"n must be <= {MAX_ENUMERATE} to enumerate 2**n states; got {n}")
    idx = np.arange(2**n, dtype=np.int64)
    return jnp.asarray((idx[:, None] >> np.arange(n)) & 1, dtype)


@partial(jax.jit, static_argnames=("n", "side"))
def _log_partition(W, b, c, n, side):
    chunk_bits = min(n, 12)
    n_chunks = 2 ** (n - chunk_bits)
    low = jnp.arange(2**chunk_bits)
    bits = jnp.arange(n)

    def chunk(i):
        idx = i * (2**chunk_bits) + low
        states = ((idx[:, None] >> bits) & 1).astype(W.dtype)
        if side == "visible":
            f = _free_energy(W, b, c, states)
        else:
            f = _free_energy_hidden(W, b, c, states)
        return jax.nn.logsumexp(-f)

    parts = jax.lax.map(chunk, jnp.arange(n_chunks))
    # jax.nn.logsumexp: a plain reduction over enumerated states, not a children/parents energy (no mask, no sim).
    return jax.nn.logsumexp(parts)


def log_partition(params: Params, *, over: str = "auto") -> Array:
    r"""Exact :math:`\ln Z = \ln \sum_{v,h} e^{-E(v,h)}` by enumerating one layer.

    ``over="visible"``: :math:`\ln \sum_v e^{-F(v)}` over :math:`2^{n_\text{visible}}` states;
    ``over="hidden"``: :math:`\ln \sum_h e^{-F(h)}` over :math:`2^{n_\text{hidden}}`;
    ``"auto"`` picks the smaller layer. Enumerated in chunks of 4096 states.

    Raises:
      ValueError: unknown ``over``, or the enumerated layer has more than
        ``MAX_ENUMERATE`` units.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.zeros(3), jnp.zeros(2))
      >>> round(float(rbm.log_partition(params)), 3)  # ln 2^5
      3.466
    """
    W, b, c = _check_params(params)
    _validate.choice("over", over, ("auto", "visible", "hidden"))
    if over == "auto":
        over = "visible" if W.shape[0] <= W.shape[1] else "hidden"
    n = W.shape[0] if over == "visible" else W.shape[1]
    if n > MAX_ENUMERATE:
        raise ValueError(f"over={over!r}: cannot enumerate 2**{n} states (limit 2**{MAX_ENUMERATE})")
    return _log_partition(W, b, c, n, over)


def log_likelihood(params: Params, v, *, log_z=None) -> Array:
    r"""Exact :math:`\ln q(v) = -F(v) - \ln Z` per sample (:math:`-L` of §23.4).

    Args:
      v: ``(n_visible,)`` or ``(N, n_visible)`` binary visible states
        (float, integer or boolean holding 0/1; other values raise
        ``ValueError``, since :math:`Z` sums over binary states only).
      log_z: a precomputed :func:`log_partition`; computed when ``None``.

    Returns:
      ``()`` or ``(N,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.Params(jnp.zeros((3, 2)), jnp.zeros(3), jnp.zeros(2))
      >>> ll = rbm.log_likelihood(params, jnp.ones((2, 3)))  # uniform: -3 ln 2
      >>> ll.shape, round(float(ll[0]), 3)
      ((2,), -2.079)
    """
    W, _, _ = _check_params(params)
    _check_layer(v, W.shape[0], "v", W.dtype, binary=True)
    if log_z is None:
        log_z = log_partition(params)
    else:
        log_z = jnp.asarray(log_z)
        if log_z.ndim != 0 or not (
            jnp.issubdtype(log_z.dtype, jnp.floating) or jnp.issubdtype(log_z.dtype, jnp.integer)
        ):
            raise ValueError(f"log_z must be a real scalar (a log_partition); got {log_z.dtype}{log_z.shape}")
        if _concrete(log_z) and not bool(np.isfinite(np.asarray(log_z))):
            raise ValueError(f"log_z must be finite; got {log_z}")
    return energy(params, v) * -1.0 - log_z


def grad_log_likelihood_params(params: Params, v) -> Params:
    r"""Exact gradient of the mean log-likelihood (§23.5–23.7): positive minus negative phase.

    .. math::

        \nabla_\theta \frac1N \sum_n \ln q(v_n)
          = -\frac1N \sum_n \nabla_\theta F(v_n) + \sum_{v} q(v)\, \nabla_\theta F(v),

    the model expectation taken exactly over all :math:`2^{n_\text{visible}}` visible states. (The notes write the
    loss :math:`L = -\ln q`, whose gradient is the negative of this.) For small RBMs only.

    Args:
      params: :class:`Params`.
      v: ``(n_visible,)`` or ``(N, n_visible)`` binary data (float, integer
        or boolean 0/1; other values raise ``ValueError``).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> g = rbm.grad_log_likelihood_params(params, jnp.ones((4, 3)))
      >>> g.W.shape
      (3, 2)
    """
    W, b, c = _check_params(params)
    v = jnp.atleast_2d(_check_layer(v, W.shape[0], "v", W.dtype, binary=True))
    states = binary_states(W.shape[0], W.dtype)
    q = jax.nn.softmax(-_free_energy(W, b, c, states))
    p = jax.nn.sigmoid(states @ W + c)
    model = Params(W=-(states.T * q) @ p, b=-(q @ states), c=-(q @ p))
    data = _free_energy_grad_params(W, c, v)
    return jax.tree_util.tree_map(lambda m, d: m - d, model, data)


def gibbs_transition_matrix(params: Params) -> Array:
    r"""The one-sweep block-Gibbs kernel on visible states, :math:`T[v, v'] = \sum_h P(h \mid v) P(v' \mid h)`.

    Rows and columns index :func:`binary_states` ``(n_visible)``; rows sum to one and the stationary distribution is
    the model marginal :math:`q(v)`. For small RBMs (``n_visible``, ``n_hidden`` <= 14).

    Returns:
      ``(2**n_visible, 2**n_visible)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> t = rbm.gibbs_transition_matrix(params)  # 2^3 visible states
      >>> t.shape, bool(jnp.allclose(t.sum(1), 1.0, atol=1e-5))
      ((8, 8), True)
    """
    W, b, c = _check_params(params)
    m, n = W.shape
    if m > 14 or n > 14:
        raise ValueError(f"params.W: transition matrix needs n_visible, n_hidden <= 14; got {W.shape}")
    vs, hs = binary_states(m, W.dtype), binary_states(n, W.dtype)

    def log_cond(x, logits):  # ln P(x | .) for all x (rows) and all conditioning states (cols)
        return x @ jax.nn.log_sigmoid(logits).T + (1 - x) @ jax.nn.log_sigmoid(-logits).T

    p_h_given_v = jnp.exp(log_cond(hs, vs @ W + c)).T  # (2**m, 2**n)
    p_v_given_h = jnp.exp(log_cond(vs, hs @ W.T + b)).T  # (2**n, 2**m)
    return p_h_given_v @ p_v_given_h


def grad_cd_expected(params: Params, v, n_gibbs_steps: int) -> Params:
    r"""The CD-k gradient (:math:`k` = ``n_gibbs_steps``) averaged over infinitely many chains, computed exactly
    (small RBMs).

    .. math::

        \mathbb E[\hat g_k] = -\frac1N \sum_n \nabla_\theta F(v_n)
           + \sum_{v'} (p_\text{data} T^k)(v')\, \nabla_\theta F(v'),

    with :math:`T` from :func:`gibbs_transition_matrix`. At :math:`k = 0` it is zero; as :math:`k \to \infty`,
    :math:`p_\text{data} T^k \to q` and it tends to :func:`grad_log_likelihood_params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> g = rbm.grad_cd_expected(params, jnp.ones((4, 3)), 1)
      >>> g.W.shape
      (3, 2)
    """
    W, b, c = _check_params(params)
    v = jnp.atleast_2d(_check_layer(v, W.shape[0], "v", W.dtype, binary=True))
    k = _validate.count("n_gibbs_steps", n_gibbs_steps, 0)
    index = jnp.asarray(np.asarray(v, np.int64) @ (2 ** np.arange(W.shape[0])))
    return _expected_cd_gradient(Params(W, b, c), v, index, k)


@partial(jax.jit, static_argnums=3)
def _expected_cd_gradient(params, v, index, k):
    # One compiled program per shape and k (called eagerly, as the chapters do).
    W, b, c = params
    T = gibbs_transition_matrix(params)
    states = binary_states(W.shape[0], W.dtype)
    dist = jnp.zeros(states.shape[0], W.dtype).at[index].add(1.0 / v.shape[0])
    dist = jax.lax.fori_loop(0, k, lambda _, d: d @ T, dist)
    p = jax.nn.sigmoid(states @ W + c)
    model = Params(W=-(states.T * dist) @ p, b=-(dist @ states), c=-(dist @ p))
    data = _free_energy_grad_params(W, c, v)
    return jax.tree_util.tree_map(lambda m, d: m - d, model, data)


# --- Contrastive divergence ------------------------------------------------
def _cd_gradient(W, b, c, v, keys, k):
    # k sweeps (k may be traced) with keys[:k] (_sweep_keys, or their _blocks), then negative - positive phase
    def body(i, x):
        return _gibbs_step(W, b, c, x, jax.tree_util.tree_map(lambda a: a[i], keys))[0]

    vk = jax.lax.fori_loop(0, k, body, v)
    pos = _free_energy_grad_params(W, c, v)
    neg = _free_energy_grad_params(W, c, jax.lax.stop_gradient(vk))
    return jax.tree_util.tree_map(lambda n_, p_: n_ - p_, neg, pos)


# One compilation per k; or one for every k <= n_keys if split(key, k) is the head of split(key, n_keys)
_cd_gradient_jit = jax.jit(
    lambda W, b, c, v, key, k: _cd_gradient(W, b, c, v, _sweep_keys(key, k), k), static_argnames="k"
)
_cd_gradient_any_k = jax.jit(
    lambda W, b, c, v, key, k, n_keys: _cd_gradient(W, b, c, v, _sweep_keys(key, n_keys), k), static_argnames="n_keys"
)


def grad_cd(params: Params, v, n_gibbs_steps: int = 1, *, key) -> Params:
    r"""CD-k estimate of the log-likelihood gradient (ascent direction), §23.8.

    Positive phase: clamp the data and use :math:`P(h = 1 \mid v)`; negative phase: run ``k`` block-Gibbs sweeps
    from the data to :math:`v_k` and use :math:`P(h = 1 \mid v_k)` (the notes' :math:`\sigma(vW + c)`):

    .. math::

        \begin{aligned}
        \hat g_k &= -\frac1N \sum_n \nabla_\theta F(v_n) + \frac1N \sum_n \nabla_\theta F(v_{k,n}) \\
        &\quad \;\Rightarrow\; \hat g_W = \tfrac1N\big(V^\top \sigma(VW + c) - V_k^\top \sigma(V_k W + c)\big).
        \end{aligned}

    The notes' update is :math:`W \leftarrow W + \eta \hat g_W`.

    Args:
      v: ``(N, n_visible)`` binary data (one chain per row).
      n_gibbs_steps: :math:`k`, the Gibbs sweeps, ``>= 1``.
      key: a ``jax.random`` key.

    Returns:
      :class:`Params`, an estimate of :func:`grad_log_likelihood_params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import rbm
      >>> params = rbm.init_params(3, 2, key=jax.random.key(0), dtype=jnp.float32)
      >>> g = rbm.grad_cd(params, jnp.ones((4, 3)), 1, key=jax.random.key(1))
      >>> g.W.shape, g.b.shape
      ((3, 2), (3,))
    """
    _validate.key("key", key)
    W, b, c = _check_params(params)
    v = jnp.atleast_2d(_check_layer(v, W.shape[0], "v", W.dtype, binary=True))
    k = _validate.count("n_gibbs_steps", n_gibbs_steps, 1)
    if core.prefix_stable(key):
        return _cd_gradient_any_k(W, b, c, v, key, k, n_keys=max(64, 1 << (k - 1).bit_length()))
    return _cd_gradient_jit(W, b, c, v, key, k)


def _value_and_grad(p, batch, args, k):
    # a minibatch of _descent.minibatch: no loss; optax descends, so -CD-k (CD-k estimates +d ln p / d theta)
    return None, jax.tree_util.tree_map(jnp.negative, _cd_gradient(p.W, p.b, p.c, *batch, k))


def _batch_keys(keys, args, k, bits, shape):
    # the minibatches' keys -> each sweep's (hidden, visible) keys, (n_batches, k, 2)
    keys = jax.vmap(_sweep_keys, (0, None))(keys, k)
    if bits:  # every sweep's blocks at once: in a step's fusion XLA would hash a block 4 times
        batch_size, n_visible, n_hidden = shape
        keys = tuple(_blocks(keys[:, :, i], -(-batch_size * n // 4)) for i, n in enumerate((n_hidden, n_visible)))
    return keys


def _epoch_end(p, values, data, args):
    # the per-epoch diagnostics (monitor): reconstruction error and mean free energy of all the data
    ph = jax.nn.sigmoid(data @ p.W + p.c)
    recon = jax.nn.sigmoid(ph @ p.W.T + p.b)
    return jnp.mean((data - recon) ** 2), jnp.mean(_free_energy(p.W, p.b, p.c, data))


def _result(opt_state, values, ends):
    err, fe = ends or (None, None)
    return fe, FitExtras(reconstruction_error=err, opt_state=opt_state), fe


def _driver(shape, batch_size, k, monitor, bits):  # the hooks of fit's _descent.minibatch call (and _lower's)
    return dict(
        value_and_grad=partial(_value_and_grad, k=k),
        batch_keys=partial(_batch_keys, k=k, bits=bits, shape=(batch_size, *shape)),
        permutation=_permutation,
        epoch_end=_epoch_end if monitor else None,
    )


def _lower(params, opt_state, x, key, optimizer, n_epochs, batch_size, k, monitor=True, bits=0):
    # fit's compiled program, lowered (the benchmarks profile it)
    hooks = _driver(params.W.shape, batch_size, k, monitor, bits)
    return _descent.lower_minibatch(params=params, data=x, key=key, optimizer=optimizer, opt_state=opt_state, **hooks,
                                    n_epochs=n_epochs, batch_size=batch_size)  # fmt: skip


def fit(
    params: Params,
    x,
    *,
    key,
    optimizer,
    n_epochs: int,
    batch_size: int,
    n_gibbs_steps: int = 1,
    monitor: bool = True,
    opt_state=None,
    uniform_bits: int | None = None,
    progress: bool = False,
) -> core.FitResult:
    r"""Train by CD-k (:math:`k` = ``n_gibbs_steps``) with an optax optimizer (§23.8).

    Each epoch shuffles the data, splits it into ``N // batch_size`` minibatches (the remainder is dropped for that
    epoch) and takes one optimizer step per minibatch on the negated :func:`grad_cd` (optax descends; CD is an
    ascent direction): ``optax.sgd(eta)`` gives the notes' :math:`\theta \leftarrow \theta + \eta \hat g_k`. Jitted;
    ``lax.scan`` over epochs and minibatches.

    Args:
      params: initial :class:`Params` (e.g. from :func:`init_params`).
      x: ``(N, n_visible)`` binary data.
      key: a ``jax.random`` key (shuffling and Gibbs sampling).
      optimizer: an optax ``GradientTransformation`` (a fresh but equal one reuses the compiled program).
      n_epochs, batch_size, n_gibbs_steps: integers ``>= 1``; ``batch_size <= N``.
      monitor: compute the per-epoch diagnostics (``energies``, the reconstruction error), a
        pass over all of ``x`` per epoch that costs about twice the epoch in float64 (18k x 64
        digits, 256 hidden); with ``False`` both are ``None`` and the parameters are identical.
      opt_state: state from a previous call, or ``None``.
      uniform_bits: ``None``: each Bernoulli draw :math:`u < p` takes :math:`u` from ``jax.random.uniform``
        (one threefry block per draw), the stream of earlier versions. ``16`` (a threefry key; others draw as
        ``None``): four :math:`u = m / 2^{16}` per block, a quarter of the hashing, another stream, 2 bytes per
        draw held for an epoch: :math:`P(u < p) = \lceil 2^{16} p \rceil / 2^{16}`, above :math:`p` by less
        than :math:`2^{-16} \approx 1.5 \cdot 10^{-5}`, far below the noise of a CD estimate.
      progress: show a ``tqdm.auto`` bar of the epochs (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult`: the trained :class:`Params`; ``energies``, ``(n_epochs,)``, the mean free
      energy :math:`F(v)` (:func:`energy`) of the training data after each epoch (CD-k does not descend it exactly:
      it is a diagnostic); ``n_iter = n_epochs``; ``converged = None`` (a fixed number of epochs); ``extras`` a
      :class:`FitExtras`.

    Raises:
      ValueError: on bad arguments, or when training diverged (non-finite parameters or diagnostics; with
        ``monitor`` the message names the first epoch).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import rbm
      >>> key = jax.random.key(0)
      >>> x = (jax.random.uniform(key, (16, 6)) < 0.5).astype(float)  # binary
      >>> params = rbm.init_params(6, 4, key=key, x=x, dtype=float)
      >>> sgd = optax.sgd(0.1)
      >>> r = rbm.fit(params, x, key=key, optimizer=sgd, n_epochs=2, batch_size=8)
      >>> r.params.W.shape, r.energies.shape
      ((6, 4), (2,))
    """
    _validate.key("key", key)
    W, b, c = _check_params(params)
    x = _check_layer(x, W.shape[0], "x", W.dtype, binary=True)
    if x.ndim != 2:
        raise ValueError(f"x must have shape (N, {W.shape[0]}); got {x.shape}")
    n_epochs, batch_size = _validate.trainer(optimizer, n_epochs, batch_size, x.shape[0])
    k = _validate.count("n_gibbs_steps", n_gibbs_steps, 1)
    _validate.flag("monitor", monitor)
    params = Params(W, b, c)
    if uniform_bits is not None and (type(uniform_bits) is not int or uniform_bits != 16):
        raise ValueError(f"uniform_bits must be None or 16; got {uniform_bits!r}")
    bits = 16 if uniform_bits and core.prefix_stable(key) else 0
    return _descent.minibatch(
        "rbm.fit",
        params=params,
        data=x,
        key=key,
        optimizer=optimizer,
        n_epochs=n_epochs,
        batch_size=batch_size,
        opt_state=opt_state,
        result=_result,
        **_driver(W.shape, batch_size, k, bool(monitor), bits),
        progress=progress,
    )
