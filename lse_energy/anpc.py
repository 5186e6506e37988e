r"""Attention-normalised predictive coding: §4.4 of
Singh and Buckley (2023), *Attention as implicit structural inference*.
A network of scalar neurons in which every incoming synapse
:math:`j \to i` makes its own prediction :math:`w_{ij} f(x_j) + b_{ij}` of
neuron :math:`i`, with error :math:`\varepsilon_{ij}`. Standard predictive
coding, :math:`F_{\mathrm{std}} = \sum_{ij} \frac12 k_{ij}
\varepsilon_{ij}^2`, lets every synapse explain its neuron at once; a
uniform prior over which *one* incoming synapse explains each neuron,
summed out, gives the log-sum-exp energy

.. math::

    F_{\mathrm{att}} = -\sum_i \ln \sum_{j \in \mathrm{pre}(i)}
        \exp\!\big(-\tfrac12 k_{ij}\,\varepsilon_{ij}^2\big),

whose gradient is the standard one with every error weighted by the
softmax :math:`\alpha_{ij}` over the neuron's incoming synapses (equal to
standard PC with effective precisions :math:`k_{ij}\alpha_{ij}`).
Functions: :func:`errors`, :func:`sim`, :func:`attention`,
:func:`effective_precisions`, :func:`energy`,
:func:`standard_energy`, the gradients :func:`grad_x`,
:func:`grad_x_standard`, :func:`grad_params`, the curvature
bound :func:`lipschitz` and the driver :func:`infer`.

All gradient functions return :math:`\partial F/\partial(\cdot)` (the gradient, not its
negative).
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

# Largest value of |tanh''(z)| = |−2 tanh(z)(1 − tanh(z)^2)|, attained at tanh(z) = 1/√3.
_TANH2_MAX = 4.0 / (3.0 * math.sqrt(3.0))  # a Python float: weakly typed, keeps float32 float32

__all__ = [
    "Params",
    "predictions",
    "errors",
    "sim",
    "attention",
    "effective_precisions",
    "energy",
    "standard_energy",
    "grad_x",
    "grad_x_standard",
    "grad_params",
    "lipschitz",
    "Inference",
    "infer",
]

# A network of N scalar neurons x_1, ..., x_N. Every synapse j -> i (adjacency
# A[i, j] = True) carries its own prediction mu_ij = W[i, j] f(x_j) + B[i, j] of
# the postsynaptic neuron and its own prediction error eps_ij = x_i - mu_ij.
#
# * Standard PC (every incoming synapse explains x_i at once, a product of
#   Gaussians):  F_std = sum_{(i, j) in A} 1/2 k_ij eps_ij^2.
# * Attention-normalised PC: a structural variable c_i in pre(i) picks the one
#   synapse that explains x_i, with a uniform prior 1/|pre(i)|. Summing it out,
#       sum_c prod_i p(c_i) exp(-1/2 k_{i c_i} eps_{i c_i}^2)
#           = prod_i |pre(i)|^{-1} sum_{j in pre(i)} exp(-1/2 k_ij eps_ij^2),
#   so  F_att = -sum_i ln sum_{j in pre(i)} exp(-1/2 k_ij eps_ij^2)   (+ const),
#   the log-sum-exp energy with child i, parents pre(i) and
#   sim = -1/2 k eps^2. Its gradient is the standard one with every error
#   multiplied by alpha_ij = softmax_{j in pre(i)}(-1/2 k_ij eps_ij^2).


_ACTIVATIONS = ("tanh", "linear")


class Params(NamedTuple):
    r"""A network of :math:`N` scalar neurons whose synapses each predict their target.

    Synapse :math:`j \to i` exists where ``adjacency[i, j]`` is ``True``
    (:math:`j \in \mathrm{pre}(i)`, :math:`i \in \mathrm{post}(j)`); it
    predicts the postsynaptic neuron and carries its own prediction error

    .. math:: \mu_{ij} = w_{ij}\, f(x_j) + b_{ij}, \qquad
              \varepsilon_{ij} = x_i - \mu_{ij},

    with :math:`f = \tanh` or the identity (the ``activation`` argument of
    every function). Each synapse is one candidate explanation of neuron
    :math:`i`. A neuron with no incoming synapse (a root, or an input
    neuron) contributes no error.

    Attributes:
      weights: ``(N, N)``, ``weights[i, j]`` is :math:`w_{ij}` (ignored where
        there is no synapse).
      biases: ``(N, N)``, ``biases[i, j]`` is :math:`b_{ij}` (ignored where
        there is no synapse).
      adjacency: ``(N, N)`` boolean, ``True`` marks a synapse :math:`j \to i`
        (self-synapses :math:`i \to i` are allowed). It is structure, not a
        learned parameter.
    """

    weights: Array
    biases: Array
    adjacency: Array


def _check_params(params) -> Params:
    params, sizes = _validate.params(params, Params, {"weights": "N N", "biases": "N N"})
    N = sizes["N"]
    A = jnp.asarray(params.adjacency)
    if A.shape != (N, N):
        raise ValueError(f"params.adjacency must have shape (N, N) = ({N}, {N}); got {A.shape}")
    if A.dtype != jnp.bool_:
        raise ValueError(f"params.adjacency must be boolean (True marks a synapse j -> i); got {A.dtype}")
    return params._replace(adjacency=A)


def _check_x(x, N, name="x") -> Array:
    return _validate.last_axis(name, x, N, "N")


def _check_precisions(precisions, N, dtype) -> Array:
    """Per-synapse precisions k (N, N); ``None`` is all ones, (N,) is per neuron."""
    if precisions is None:
        return jnp.ones((N, N), dtype)
    k = jnp.asarray(precisions)
    if not jnp.issubdtype(k.dtype, jnp.floating):
        raise ValueError(f"precisions must have a floating dtype; got {k.dtype}")
    k = k.astype(dtype)
    if k.shape == (N,):
        k = jnp.broadcast_to(k[:, None], (N, N))
    elif k.shape != (N, N):
        raise ValueError(
            f"precisions must have shape (N,) (one per neuron) or (N, N) (one per synapse) with N = {N}; got {k.shape}"
        )
    if _validate.is_concrete(k) and not (np.all(np.isfinite(np.asarray(k))) and np.all(np.asarray(k) >= 0)):
        raise ValueError("precisions must be finite and >= 0")
    return k


def _check_activation(activation) -> str:
    _validate.choice("activation", activation, _ACTIVATIONS)
    return activation


def _f(x, activation):
    return jnp.tanh(x) if activation == "tanh" else x


def _fprime(x, activation):
    return 1.0 - jnp.tanh(x) ** 2 if activation == "tanh" else jnp.ones_like(x)


def _setup(params, x, precisions, activation, x_name="x"):
    params = _check_params(params)
    N = params.weights.shape[0]
    x = _check_x(x, N, x_name)
    k = _check_precisions(precisions, N, x.dtype)
    return params, x, k, _check_activation(activation)


def _predictions(params, x, activation):
    return params.weights * _f(x, activation)[..., None, :] + params.biases


def _errors(params, x, activation):
    # Where there is no synapse the error is set to 0 so that nothing non-finite can leak.
    e = x[..., :, None] - _predictions(params, x, activation)
    return jnp.where(params.adjacency, e, 0.0)


def _sim(params, x, k, activation):
    e = _errors(params, x, activation)
    return -0.5 * k * e * e


def predictions(params: Params, x, *, activation: str = "tanh") -> Array:
    r"""Per-synapse predictions :math:`\mu_{ij} = w_{ij} f(x_j) + b_{ij}`.

    Args:
      params: :class:`Params`.
      x: ``(..., N)`` neuron values.
      activation: ``"tanh"`` or ``"linear"`` (:math:`f(x) = x`).

    Returns:
      ``(..., N, N)``; entry ``[..., i, j]`` is synapse :math:`j \to i`'s
      prediction of :math:`x_i` (meaningful only where there is a synapse).
    """
    params, x, _, activation = _setup(params, x, None, activation)
    return _predictions(params, x, activation)


def errors(params: Params, x, *, activation: str = "tanh") -> Array:
    r"""Per-synapse prediction errors :math:`\varepsilon_{ij} = x_i - w_{ij} f(x_j) - b_{ij}`.

    The :math:`\varepsilon` of both displays of §4.4 of Singh & Buckley
    (2023), one per incoming synapse.

    Returns:
      ``(..., N, N)``, zero where there is no synapse.
    """
    params, x, _, activation = _setup(params, x, None, activation)
    return _errors(params, x, activation)


def sim(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""Similarity of neuron :math:`i` to its presynaptic neuron :math:`j`:
    :math:`\mathrm{sim}_{ij} = -\tfrac12 k_{ij}\,\varepsilon_{ij}^2`.

    Args:
      params: :class:`Params`.
      x: ``(..., N)`` floating-point activities (an integer or boolean
        array raises ``ValueError``, as do integer ``precisions``).
      precisions: ``None`` (all :math:`k = 1`), ``(N,)`` one precision per
        neuron (:math:`k_{ij} = k_i`, the "node specific precisions" of
        §4.4), or ``(N, N)`` one per synapse; finite and :math:`\ge 0`.
        A zero precision switches a synapse's error off in
        :func:`standard_energy` (as the effective precisions
        :math:`k\alpha` of :func:`effective_precisions` do where
        :math:`\alpha` underflows); in :func:`energy` it would make the
        synapse a perfect explanation, so use :math:`k > 0` there.
      activation: ``"tanh"`` or ``"linear"``.

    Returns:
      ``(..., N, N)``, zero where there is no synapse (those entries are
      masked out of every log-sum-exp).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import anpc
      >>> adjacency = jnp.array([[False, True], [True, False]])
      >>> params = anpc.Params(jnp.ones((2, 2)), jnp.zeros((2, 2)), adjacency)
      >>> # eps_01 = 1 - 2, eps_10 = 2 - 1
      >>> s = anpc.sim(params, jnp.array([1.0, 2.0]), activation="linear")
      >>> s.shape, float(s[0, 1]), float(s[1, 0])
      ((2, 2), -0.5, -0.5)
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return _sim(params, x, k, activation)


@partial(jax.jit, static_argnums=3)
def _attention(params, x, k, activation):
    return core.weights(_sim(params, x, k, activation), params.adjacency, allow_empty=True)


def attention(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""Softmax over each neuron's incoming synapses (the normalisation of §4.4):

    .. math:: \alpha_{ij} = \frac{\exp(-\frac12 k_{ij}\varepsilon_{ij}^2)}
              {\sum_{j' \in \mathrm{pre}(i)} \exp(-\frac12 k_{ij'}\varepsilon_{ij'}^2)}
              = p(c_i = j \mid x),

    the posterior probability that synapse :math:`j \to i` is the one that
    explains neuron :math:`i`, under a uniform prior over
    :math:`\mathrm{pre}(i)`. Built on :func:`lse_energy.core.weights`.

    Returns:
      ``(..., N, N)``; each row with at least one synapse sums to 1, rows of
      neurons without incoming synapses are 0, as are non-synapses.
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return _attention(params, x, k, activation)


def effective_precisions(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""The effective per-synapse precisions :math:`k_{ij}\,\alpha_{ij}(x)`.

    At any state :math:`x`, the gradient of the attention-normalised energy
    equals the gradient of *standard* predictive coding whose synapse
    :math:`j \to i` has precision :math:`k_{ij}\alpha_{ij}(x)` (held fixed):
    the softmax terms "play a functionally equivalent role to precision
    variables" (§4.4). In particular an equilibrium of
    attention-normalised PC is an equilibrium of standard PC with these
    precisions.

    Returns:
      ``(..., N, N)``, zero where there is no synapse.
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return k * _attention(params, x, k, activation)


@partial(jax.jit, static_argnums=3)
def _energy(params, x, k, activation):
    return core.energy(_sim(params, x, k, activation), params.adjacency, allow_empty=True)


def energy(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""The attention-normalised predictive-coding energy,

    .. math:: F_{\mathrm{att}} = -\sum_{i} \ln \sum_{j \in \mathrm{pre}(i)}
              \exp\!\big(-\tfrac12 k_{ij}\,\varepsilon_{ij}^2\big),

    summed over neurons with at least one incoming synapse and over the
    leading batch axes; the log-sum-exp energy with children = neurons,
    parents = their presynaptic neurons, :math:`\mathrm{sim} = -\frac12
    k\varepsilon^2` (built on :func:`lse_energy.core.energy` with the
    adjacency as mask).

    It is the collapsed free energy of §4 of Singh & Buckley (2023),
    :math:`F = -\sum_i \ln \sum_{e_i} e^{f_i} + C`, for the structural prior
    "each neuron is explained by exactly one of its incoming synapses, chosen
    uniformly" and Gaussian synapse potentials: summing the choice out gives
    :math:`\prod_i |\mathrm{pre}(i)|^{-1} \sum_j \exp(-\frac12 k_{ij}
    \varepsilon_{ij}^2)`. With one precision per neuron (:math:`k_{ij} = k_i`)
    this is the negative log-likelihood up to the constant :math:`\sum_i
    [\ln|\mathrm{pre}(i)| + \frac12\ln(2\pi/k_i)]`; with per-synapse
    precisions the mixture components would also carry
    :math:`\frac12\ln k_{ij}`, which this energy (like §4.4) leaves out.

    Args:
      params: :class:`Params`.
      x: ``(..., N)``.
      precisions: see :func:`sim`.
      activation: ``"tanh"`` or ``"linear"``.

    Returns:
      Scalar. Bounded below by :math:`-\sum_i \ln|\mathrm{pre}(i)|` (each
      similarity is :math:`\le 0`), non-convex in general.

    Examples:
      Every synapse predicts its target exactly, so the energy sits at its lower bound
      :math:`-\sum_i \ln|\mathrm{pre}(i)|`; neuron 0 has two presynaptic neurons, neuron 1 one:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import anpc
      >>> adjacency = jnp.array(
      ...     [[False, True, True], [True, False, False], [False, False, False]]
      ... )
      >>> params = anpc.Params(jnp.zeros((3, 3)), jnp.zeros((3, 3)), adjacency)
      >>> round(float(anpc.energy(params, jnp.zeros(3))), 3)  # -ln 2
      -0.693
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return _energy(params, x, k, activation)


@partial(jax.jit, static_argnums=3)
def _standard_energy(params, x, k, activation):
    # Each synapse is its own child with a single parent: -ln exp(sim) = -sim.
    sim = _sim(params, x, k, activation)
    flat = sim.reshape(sim.shape[:-2] + (-1, 1))
    mask = params.adjacency.reshape(-1, 1)
    return core.energy(flat, mask, allow_empty=True)


def standard_energy(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r"""Standard predictive coding on the same synapses,

    .. math:: F_{\mathrm{std}} = \sum_{(i, j):\, j \in \mathrm{pre}(i)} \tfrac12 k_{ij}\,\varepsilon_{ij}^2,

    the energy whose gradient gives the first display of §4.4 (every
    incoming synapse explains its neuron at once: a product of Gaussians).
    It is the log-sum-exp energy in which every synapse is a child with a
    single parent (built on :func:`lse_energy.core.energy`). Where every
    neuron has at most one incoming synapse it equals :func:`energy`.

    Returns:
      Scalar :math:`\ge 0`, summed over the leading batch axes.
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return _standard_energy(params, x, k, activation)


def _grad_from(params, x, r, activation):
    """dF/dx from weighted errors r_ij = (weight) k_ij eps_ij (zero off the synapses)."""
    own = jnp.sum(r, axis=-1)
    fed_back = jnp.sum(r * params.weights, axis=-2)
    return own - _fprime(x, activation) * fed_back


def _grad_x(params, x, k, activation):
    e = _errors(params, x, activation)
    alpha = core.weights(-0.5 * k * e * e, params.adjacency, allow_empty=True)
    return _grad_from(params, x, alpha * k * e, activation)


def _standard_grad_x(params, x, k, activation):
    e = _errors(params, x, activation)
    return _grad_from(params, x, k * e, activation)


def grad_x(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r""":math:`\partial F_{\mathrm{att}}/\partial x`, the attention-normalised inference dynamics.

    .. math:: \dot x_i = -\frac{\partial F_{\mathrm{att}}}{\partial x_i}
              = -\sum_{j \in \mathrm{pre}(i)} \alpha_{ij}\, k_{ij}\,\varepsilon_{ij}
                + f'(x_i) \sum_{l \in \mathrm{post}(i)} \alpha_{li}\, k_{li}\,\varepsilon_{li}\, w_{li},

    with :math:`\alpha` from :func:`attention`: the second display of
    §4.4 of Singh & Buckley (2023). The first sum is over the errors that
    neuron :math:`i` *receives* (its own prediction errors, normalised by
    its softmax); the second over the errors it *causes* downstream, each
    weighted by the softmax of the neuron that receives it. It is eq. (4) of
    Tschantz (2025) with :math:`\partial\,\mathrm{sim}_{ij}/\partial x_i =
    -k_{ij}\varepsilon_{ij}` and :math:`\partial\,\mathrm{sim}_{ij}/\partial
    x_j = k_{ij}\varepsilon_{ij} w_{ij} f'(x_j)`.

    **How this reads §4.4 as transcribed.** (i) The softmax is over
    :math:`-\frac12 k\varepsilon^2`; the transcription shows
    :math:`-\varepsilon^2` with its symbols partly lost, and the two agree at
    unit precision (a lost :math:`\frac12 k` would make it this form), so this
    is a reading, not a correction. (ii) The feedback term carries
    :math:`f'(x_i)` (§4.4 writes the linear case). (iii) The softmax in the
    second sum is that of the postsynaptic neuron :math:`l`, over *its*
    incoming synapses, as the seed's words ("a normalisation across prediction
    errors received by a neuron") say.

    Arguments as in :func:`energy`.

    Returns:
      ``(..., N)`` (the gradient for every neuron, also those a driver keeps
      clamped).
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return _grad_x(params, x, k, activation)


def grad_x_standard(params: Params, x, precisions=None, *, activation: str = "tanh") -> Array:
    r""":math:`\partial F_{\mathrm{std}}/\partial x`, the standard inference dynamics (§4.4, first display).

    .. math:: \dot x_i = -\frac{\partial F_{\mathrm{std}}}{\partial x_i}
              = -\sum_{j \in \mathrm{pre}(i)} k_{ij}\,\varepsilon_{ij}
                + f'(x_i) \sum_{l \in \mathrm{post}(i)} k_{li}\,\varepsilon_{li}\, w_{li}

    i.e. :func:`grad_x` with every :math:`\alpha = 1`: one Gaussian per
    synapse, not the one Gaussian per neuron around the summed prediction of
    Bogacz (2017). For a neuron whose inputs are clamped and which has no
    outgoing synapse, its equilibrium is the precision-weighted mean of the
    predictions it receives (an outgoing synapse adds a feedback term that
    shifts it).

    Returns:
      ``(..., N)``.
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    return _standard_grad_x(params, x, k, activation)


def grad_params(params: Params, x, precisions=None, *, activation: str = "tanh", normalised: bool = True) -> Params:
    r"""Learning rules :math:`\partial F/\partial w` and :math:`\partial F/\partial b`.

    .. math:: -\frac{\partial F_{\mathrm{att}}}{\partial w_{ij}} = \alpha_{ij}\,k_{ij}\,\varepsilon_{ij}\, f(x_j),
              \qquad
              -\frac{\partial F_{\mathrm{att}}}{\partial b_{ij}} = \alpha_{ij}\,k_{ij}\,\varepsilon_{ij},

    summed over the leading batch axes: the Hebbian rule of standard PC
    (postsynaptic error times presynaptic rate) gated by the synapse's
    attention weight; with ``normalised=False`` every :math:`\alpha = 1`
    (the gradient of :func:`standard_energy`). Not printed in §4.4; it
    follows from eq. (4) of Tschantz (2025) with the weights inside the
    similarity. Zero where there is no synapse.

    Returns:
      :class:`Params` holding :math:`\partial F/\partial w` and
      :math:`\partial F/\partial b` (``adjacency`` is passed through
      unchanged: it is structure, not a parameter).
    """
    params, x, k, activation = _setup(params, x, precisions, activation)
    e = _errors(params, x, activation)
    if normalised:
        r = core.weights(-0.5 * k * e * e, params.adjacency, allow_empty=True) * k * e
    else:
        r = jnp.where(params.adjacency, k * e, 0.0)
    r = r.reshape((-1,) + r.shape[-2:])
    fx = _f(x, activation).reshape(-1, x.shape[-1])
    gW = -jnp.einsum("bij,bj->ij", r, fx)
    gB = -jnp.sum(r, axis=0)
    return Params(weights=gW, biases=gB, adjacency=params.adjacency)


def _check_clamp_mask(clamp, N) -> Array:
    c = jnp.asarray(clamp)
    if c.shape != (N,) or c.dtype != jnp.bool_:
        raise ValueError(
            f"clamp must be a boolean array of shape (N,) = ({N},) (True = clamped); got {c.dtype}{c.shape}"
        )
    return c


@partial(jax.jit, static_argnums=(3, 5))
def _lipschitz(params, k, free, activation, radius, normalised):
    A = params.adjacency
    W, B = params.weights, params.biases
    kA = jnp.where(A, k, 0.0)
    own = 2.0 * (jnp.max(kA, axis=-1) if normalised else jnp.sum(kA, axis=-1))
    if activation == "tanh":
        curv = _TANH2_MAX * jnp.abs(W) * (radius + jnp.abs(W) + jnp.abs(B))
    else:
        curv = jnp.zeros_like(W)
    down = jnp.sum(jnp.where(A, k * (2.0 * W**2 + curv), 0.0), axis=-2)
    return jnp.max(jnp.where(free, own + down, 0.0))


def lipschitz(
    params: Params,
    precisions=None,
    *,
    clamp,
    activation: str = "tanh",
    radius: float | None = None,
    normalised: bool = True,
) -> Array:
    r"""An upper curvature bound :math:`L` of :math:`F_{\mathrm{att}}` in the free neurons.

    .. math:: L = \max_{n\ \mathrm{free}} \Big( 2 \max_{j \in \mathrm{pre}(n)} k_{nj}
              + \sum_{i \in \mathrm{post}(n)} k_{in}\big(2 w_{in}^2 + c\,|w_{in}|(R + |w_{in}| + |b_{in}|)\big) \Big),

    with :math:`c = \max|\tanh''| = \frac{4}{3\sqrt3}` for ``"tanh"`` and
    :math:`c = 0` for ``"linear"``. Why: the Hessian of :math:`-\ln\sum_j
    e^{s_j}` is :math:`-\sum_j \alpha_j \nabla^2 s_j - \mathrm{Cov}_\alpha(\nabla
    s) \preceq -\sum_j \alpha_j \nabla^2 s_j`; for :math:`s_{ij} = -\frac12
    k_{ij}\varepsilon_{ij}^2`, :math:`-\nabla^2 s_{ij} = k_{ij} a a^\top -
    k_{ij}\varepsilon_{ij} w_{ij} f''(x_j)\, e_j e_j^\top` with :math:`a =
    e_i - w_{ij} f'(x_j) e_j`, and :math:`a a^\top \preceq 2 e_i e_i^\top + 2
    w_{ij}^2 e_j e_j^\top` (:math:`|f'| \le 1`). Using :math:`\sum_j
    \alpha_{ij} = 1` for the first part and :math:`\alpha \le 1` for the
    second gives a diagonal matrix that dominates the Hessian restricted to
    the free neurons; :math:`L` is its largest entry. For ``"linear"`` this
    holds everywhere. For ``"tanh"`` it needs :math:`|\varepsilon_{in}| \le R
    + |w_{in}| + |b_{in}|`, true while every :math:`|x_i| \le R` (check
    :attr:`Inference.max_abs`). By the descent lemma every step
    :math:`0 < \eta \le 2/L` of :func:`infer` does not increase
    :math:`F_{\mathrm{att}}`. For the standard energy
    (``normalised=False``) every :math:`\alpha` is 1, so the first part
    becomes :math:`2\sum_{j \in \mathrm{pre}(n)} k_{nj}`: the
    normalisation lets attention-normalised PC take steps up to
    :math:`|\mathrm{pre}(n)|` times larger on a neuron with many inputs.

    Args:
      params: :class:`Params`.
      precisions: see :func:`sim`.
      clamp: ``(N,)`` boolean, ``True`` for clamped neurons (they do not move).
      activation: ``"tanh"`` or ``"linear"``.
      radius: :math:`R > 0`, required for ``"tanh"``, unused for ``"linear"``.
      normalised: ``True`` (default) bounds :math:`F_{\mathrm{att}}`,
        ``False`` bounds :math:`F_{\mathrm{std}}`.

    Returns:
      Scalar :math:`L \ge 0` (0 when nothing is free or no free neuron
      touches a synapse).
    """
    params = _check_params(params)
    N = params.weights.shape[0]
    activation = _check_activation(activation)
    k = _check_precisions(precisions, N, params.weights.dtype)
    free = ~_check_clamp_mask(clamp, N)
    if activation == "tanh":
        radius = _validate.positive("radius", radius)
    else:
        radius = 0.0
    _validate.flag("normalised", normalised)
    return _lipschitz(params, k, free, activation, radius, bool(normalised))


class Inference(NamedTuple):
    r"""Result of :func:`infer`.

    Attributes:
      x: ``(..., N)`` neuron values after the last step.
      energy: ``(n_steps + 1,)`` the energy (:math:`F_{\mathrm{att}}`, or
        :math:`F_{\mathrm{std}}` with ``normalised=False``) summed over the
        batch, at the start and after each step.
      max_abs: ``(n_steps + 1,)`` :math:`\max_i |x_i|` over the batch at
        the start and after each step (to check the box assumption of
        :func:`lipschitz` for ``"tanh"``).
    """

    x: Array
    energy: Array
    max_abs: Array


@partial(jax.jit, static_argnames=("n_steps", "activation", "normalised"))
def _infer_jit(params, x0, k, free, eta, n_steps, activation, normalised):
    grad = _grad_x if normalised else _standard_grad_x
    energy = _energy if normalised else _standard_energy
    move = eta * free.astype(x0.dtype)

    def step(x, _):
        x = x - move * grad(params, x, k, activation)
        return x, (energy(params, x, k, activation), jnp.max(jnp.abs(x)))

    x, (trace, mx) = jax.lax.scan(step, x0, None, length=n_steps)
    e0 = energy(params, x0, k, activation)[None]
    return Inference(
        x=x, energy=jnp.concatenate([e0, trace]), max_abs=jnp.concatenate([jnp.max(jnp.abs(x0))[None], mx])
    )


def infer(
    params: Params,
    x0,
    precisions=None,
    *,
    clamp,
    n_steps: int,
    step_size: float,
    activation: str = "tanh",
    normalised: bool = True,
) -> Inference:
    r"""Inference: gradient descent on the energy in the free neurons.

    .. math:: x_i \leftarrow x_i - \eta\,\frac{\partial F}{\partial x_i}
              \quad \text{for every free neuron } i,

    the Euler discretisation of the dynamics of §4.4 (second display with
    ``normalised=True``, :func:`grad_x`; first display with
    ``normalised=False``, :func:`grad_x_standard`). Clamped neurons
    (inputs, observations) keep their initial values exactly. A batch of
    independent states is updated together. Jitted, with ``lax.scan``.

    Args:
      params: :class:`Params` (fixed).
      x0: ``(..., N)`` initial values; clamped neurons hold the clamped values.
      precisions: see :func:`sim`.
      clamp: ``(N,)`` boolean, ``True`` = clamped.
      n_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`. With :math:`\eta \le 2/L`,
        :math:`L` from :func:`lipschitz`, :math:`F_{\mathrm{att}}`
        does not increase (descent lemma).
      activation: ``"tanh"`` or ``"linear"`` (static).
      normalised: ``True`` for attention-normalised PC, ``False`` for
        standard PC (static).

    Returns:
      :class:`Inference`.
    """
    params, x0, k, activation = _setup(params, x0, precisions, activation, "x0")
    free = ~_check_clamp_mask(clamp, params.weights.shape[0])
    n_steps = _validate.count("n_steps", n_steps, 1)
    eta = jnp.asarray(_validate.positive("step_size", step_size), x0.dtype)
    _validate.flag("normalised", normalised)
    return _infer_jit(params, x0, k, free, eta, n_steps, activation, bool(normalised))
