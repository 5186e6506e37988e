r"""Hierarchical predictive coding networks as the one-parent limit of the log-sum-exp energy.

The predictive coding networks of the lecture notes (§29), with value and
error nodes, the free energy :math:`F = \sum_l \pi_l \|x^l - \mu^l\|^2 / 2`,
inference by descent on :math:`F` (:func:`infer`), local learning rules
(:func:`grad_params`, :func:`fit`), and the training, generation and
classification modes obtained by clamping (:func:`fit`, :func:`generate`,
:func:`classify`).

All gradient functions return :math:`\partial F/\partial(\cdot)` (the
gradient, not its negative). Every continuous-valued array must have a
floating dtype (an integer or boolean array raises ``ValueError`` naming the
argument); counts are Python integers and ``clamp`` is a tuple of booleans.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "Params",
    "init_params",
    "forward",
    "predictions",
    "errors",
    "sim",
    "energy",
    "grad_x",
    "grad_params",
    "Inference",
    "infer",
    "FitExtras",
    "fit",
    "classify",
    "generate",
]

# A chain of L layers of value nodes x^1, ..., x^L. Layer l+1 is predicted from
# layer l by mu^{l+1} = W^l f(x^l) + b^l with f = tanh (the notes' "W f(x)"
# form, sigma(x^{i+1})^T M^i + beta^i), and each predicted layer carries a
# precision-weighted error node eps^l = pi_l (x^l - mu^l). The energy is
#
#     F = 1/2 sum_{l=2}^L pi_l ||x^l - mu^l||^2  (+ 1/2 pi_1 ||x^1 - m||^2),
#
# the K = 1 (one parent per child) limit of the log-sum-exp energy: every
# layer is a child with the single parent "the layer below", so
# -ln sum_p exp sim = -sim and the softmax is identically 1.


class Params(NamedTuple):
    r"""Weights of a hierarchical predictive coding network with layer sizes :math:`n_1, \dots, n_L`.

    Layer :math:`l+1` is predicted from layer :math:`l`
    (:math:`l = 1, \dots, L-1`) as

    .. math:: \mu^{l+1} = W^l f(x^l) + b^l, \qquad f = \tanh,

    the "weights times nonlinearity" form of §29 of the lecture notes
    (:math:`\mu^i = \sigma(x^{i+1})^\top M^i + \beta^i` there, with the layer
    numbering reversed, see :func:`energy`). An optional Gaussian prior
    :math:`\mathcal{N}(m, \pi_1^{-1} I)` on the root layer :math:`x^1` has
    mean ``prior_mean``; it only matters when :math:`x^1` is free
    (generation) and its precision :math:`\pi_1 > 0`.

    Attributes:
      weights: tuple of ``L - 1`` arrays, ``weights[l-1]`` is :math:`W^l`, shape ``(n_{l+1}, n_l)``.
      biases: tuple of ``L - 1`` arrays, ``biases[l-1]`` is :math:`b^l`, shape ``(n_{l+1},)``.
      prior_mean: ``(n_1,)`` the prior mean :math:`m` of the root layer.

    The layer sizes are static: they are the shapes of these arrays.
    """

    weights: tuple
    biases: tuple
    prior_mean: Array


def _sizes(params: Params) -> tuple:
    return (params.prior_mean.shape[-1],) + tuple(W.shape[0] for W in params.weights)


class _Layer(NamedTuple):
    """``params.layers[i]`` in messages: ``weights[i]`` and ``biases[i]``, layer ``i + 1`` to ``i + 2``."""

    weights: Array
    biases: Array


def _check_params(params) -> Params:
    params, sizes = _validate.params(params, Params, {"prior_mean": "n_1"})
    if len(params.weights) < 1 or len(params.weights) != len(params.biases):
        raise ValueError(
            f"params must hold L - 1 >= 1 weights and as many biases; "
            f"got {len(params.weights)} weights and {len(params.biases)} biases"
        )
    layers = []
    for l, layer in enumerate(map(_Layer, params.weights, params.biases), start=1):
        shapes = {"weights": f"n_{l + 1} n_{l}", "biases": f"n_{l + 1}"}
        layers.append(_validate.params(layer, _Layer, shapes, sizes, name=f"params.layers[{l - 1}]")[0])
        sizes = {f"n_{l + 1}": layers[-1].biases.shape[0]}
    return params._replace(weights=tuple(p.weights for p in layers), biases=tuple(p.biases for p in layers))


def _check_values(xs, sizes, name="xs") -> tuple:
    if not isinstance(xs, (tuple, list)) or len(xs) != len(sizes):
        raise ValueError(
            f"{name} must be a tuple of L = {len(sizes)} arrays (one per layer); got "
            f"{type(xs).__name__} of length {len(xs) if isinstance(xs, (tuple, list)) else '?'}"
        )
    xs = tuple(_validate.last_axis(f"{name}[{l}]", x, n, f"n_{l + 1}") for l, (x, n) in enumerate(zip(xs, sizes)))
    batch = xs[0].shape[:-1]
    for l, (x, n) in enumerate(zip(xs, sizes), start=1):
        if x.shape[:-1] != batch:
            raise ValueError(f"{name}[{l - 1}] (layer {l}) must have shape {batch} + ({n},); got {x.shape}")
    return xs


def _check_precisions(precisions, L, dtype) -> Array:
    p = _validate.float_array("precisions", precisions).astype(dtype)
    if p.shape != (L,):
        raise ValueError(f"precisions must have shape (L,) = ({L},); got {p.shape}")
    if _validate.is_concrete(p):
        v = np.asarray(p)
        if not (np.all(np.isfinite(v)) and v[0] >= 0 and np.all(v[1:] > 0)):
            raise ValueError(
                f"precisions must be finite with precisions[0] >= 0 (root prior) and precisions[1:] > 0; got {v}"
            )
    return p


def _setup(params, xs, precisions):
    """Checked ``(params, xs, precisions)``, the precisions defaulted (see :func:`energy`)."""
    params = _check_params(params)
    xs = _check_values(xs, _sizes(params))
    return params, xs, _default_precisions(precisions, len(xs), xs[0].dtype)


def _default_precisions(precisions, L, dtype):
    if precisions is None:
        return jnp.concatenate([jnp.zeros((1,), dtype), jnp.ones((L - 1,), dtype)])
    return _check_precisions(precisions, L, dtype)


def init_params(sizes, *, key: Array, weight_scale: float = 1.0) -> Params:
    r"""Random :class:`Params` for layer sizes ``sizes = (n_1, ..., n_L)``.

    :math:`W^l \sim \mathcal{N}(0, s^2/n_l)` (LeCun normal times
    ``weight_scale``), :math:`b^l = 0`, :math:`m = 0`, in the default float
    dtype (float64 when ``jax_enable_x64`` is on).

    Args:
      sizes: sequence of ``L >= 2`` integers ``>= 1`` (static).
      key: PRNG key (keyword-only).
      weight_scale: ``s > 0``.

    Returns:
      :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> [w.shape for w in params.weights], params.prior_mean.shape
      ([(3, 2), (2, 3)], (2,))
    """
    _validate.key("key", key)
    sizes = tuple(sizes) if isinstance(sizes, (tuple, list)) else sizes
    if not isinstance(sizes, tuple) or len(sizes) < 2:
        raise ValueError(f"sizes must be a sequence of L >= 2 layer sizes; got {sizes!r}")
    sizes = tuple(_validate.count("sizes", n, 1) for n in sizes)
    _validate.positive("weight_scale", weight_scale)
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    return _init_params(key, sizes, weight_scale, dtype)


@partial(jax.jit, static_argnums=(1, 3))
def _init_params(key, sizes, weight_scale, dtype) -> Params:
    # One compiled program per architecture (called eagerly, as the chapters do).
    keys = jax.random.split(key, len(sizes) - 1)
    Ws = tuple(
        weight_scale / np.sqrt(sizes[l]) * core.random_normal(keys[l], (sizes[l + 1], sizes[l]), dtype)
        for l in range(len(sizes) - 1)
    )
    bs = tuple(jnp.zeros((sizes[l + 1],), dtype) for l in range(len(sizes) - 1))
    return Params(weights=Ws, biases=bs, prior_mean=jnp.zeros((sizes[0],), dtype))


def _predict(W, b, x):
    return jnp.tanh(x) @ W.T + b


def _forward(params, x1):
    xs = [x1]
    for W, b in zip(params.weights, params.biases):
        xs.append(_predict(W, b, xs[-1]))
    return tuple(xs)


def forward(params: Params, x) -> tuple:
    r"""The feed-forward pass :math:`x^1 = x`, :math:`x^{l+1} = W^l \tanh(x^l) + b^l`.

    This is the network whose prediction errors are all zero; it is the
    unique equilibrium of inference with only :math:`x^1` clamped (see
    :func:`classify`).

    Args:
      params: :class:`Params`.
      x: ``(..., n_1)``.

    Returns:
      tuple of ``L`` arrays ``(..., n_l)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> [x.shape for x in pcn.forward(params, jnp.ones((4, 2)))]
      [(4, 2), (4, 3), (4, 2)]
    """
    params = _check_params(params)
    x = _validate.last_axis("x", x, _sizes(params)[0], "n_1")
    return _forward(params, x)


def _predictions(params, xs):
    return tuple(_predict(W, b, x) for W, b, x in zip(params.weights, params.biases, xs[:-1]))


def predictions(params: Params, xs) -> tuple:
    r"""Predictions :math:`\mu^{l+1} = W^l \tanh(x^l) + b^l`, :math:`l = 1, \dots, L-1` (§29).

    Args:
      params: :class:`Params`.
      xs: tuple of ``L`` value-node arrays ``(..., n_l)`` (common batch shape).

    Returns:
      tuple of ``L - 1`` arrays; entry ``l-1`` is :math:`\mu^{l+1}`, ``(..., n_{l+1})``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> xs = pcn.forward(params, jnp.ones((4, 2)))
      >>> [m.shape for m in pcn.predictions(params, xs)]
      [(4, 3), (4, 2)]
    """
    params = _check_params(params)
    xs = _check_values(xs, _sizes(params))
    return _predictions(params, xs)


def _errors(params, xs, prec):
    mus = _predictions(params, xs)
    first = prec[0] * (xs[0] - params.prior_mean)
    return (first,) + tuple(prec[l + 1] * (xs[l + 1] - mus[l]) for l in range(len(mus)))


def errors(params: Params, xs, precisions=None) -> tuple:
    r"""Error nodes :math:`\varepsilon^l = \pi_l (x^l - \mu^l)` (§29.1.1).

    §29.1.1 gives the error-node dynamics :math:`\tau\,\dot\varepsilon^l = x^l
    - \mu^l - v^l \varepsilon^l`, whose equilibrium is :math:`\varepsilon^l =
    (x^l - \mu^l)/v^l`; with :math:`v^l = 1/\pi_l` the *variance* this is the
    precision-weighted error returned here. For the root layer
    :math:`\mu^1 = m` (``params.prior_mean``) and :math:`\varepsilon^1 =
    \pi_1(x^1 - m)`, which is zero when :math:`\pi_1 = 0`.

    Args:
      params: :class:`Params`.
      xs: tuple of ``L`` floating-point arrays ``(..., n_l)`` (an integer or
        boolean layer raises ``ValueError``).
      precisions: ``(L,)`` floating-point scalars :math:`(\pi_1, \dots, \pi_L)`, with
        :math:`\pi_1 \ge 0` and :math:`\pi_l > 0` for :math:`l \ge 2`;
        ``None`` means :math:`(0, 1, \dots, 1)`. An integer array raises
        ``ValueError``.

    Returns:
      tuple of ``L`` arrays ``(..., n_l)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> xs = pcn.forward(params, jnp.ones((4, 2)))  # meets every prediction
      >>> [bool(jnp.allclose(e, 0.0, atol=1e-6)) for e in pcn.errors(params, xs)]
      [True, True, True]
    """
    params, xs, prec = _setup(params, xs, precisions)
    return _errors(params, xs, prec)


def _sims(params, xs, prec):
    """(..., L) similarities -1/2 pi_l ||x^l - mu^l||^2 of each layer to its one parent."""
    mus = (params.prior_mean,) + _predictions(params, xs)
    return jnp.stack(
        [-0.5 * prec[l] * jnp.sum((x - mu) ** 2, axis=-1) for l, (x, mu) in enumerate(zip(xs, mus))], axis=-1
    )


def sim(params: Params, xs, precisions=None) -> Array:
    r"""Per-layer similarities :math:`\mathrm{sim}(x^l, x^{l-1}) = -\tfrac12 \pi_l \|x^l - \mu^l\|^2`.

    Each layer :math:`l \ge 2` is a child whose *single* parent is layer
    :math:`l-1`; the root's similarity is to its prior mean.

    Returns:
      ``(..., L)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> pcn.sim(params, pcn.forward(params, jnp.ones((4, 2)))).shape  # (..., L)
      (4, 3)
    """
    params, xs, prec = _setup(params, xs, precisions)
    return _sims(params, xs, prec)


@jax.jit
def _energy(params, xs, prec):
    return core.energy(_sims(params, xs, prec)[..., None])


def energy(params: Params, xs, precisions=None) -> Array:
    r"""The predictive-coding free energy of §29.1.3,

    .. math:: F = \frac12 \sum_{l=2}^{L} \pi_l \,\|x^l - \mu^l\|^2
                  + \frac12 \pi_1 \|x^1 - m\|^2
                = \sum_{l} \frac{\|\varepsilon^l\|^2}{2\pi_l},

    summed over any leading batch axes. It is built on
    :func:`lse_energy.core.energy` with one parent per child: the similarity
    matrix is ``(..., L, 1)``, so :math:`-\ln\sum_p \exp\mathrm{sim} =
    -\mathrm{sim}` and the softmax weight is identically 1 (the
    :math:`K = 1` limit of the log-sum-exp energy).

    **Conventions versus the notes.** The notes number the layers so that
    :math:`\mu^i` is predicted from :math:`x^{i+1}` (a generative model of
    :math:`x^1 = X` given :math:`x^L = Y`); here layer :math:`l+1` is
    predicted from layer :math:`l`, so that with :math:`x^1 = X` and
    :math:`x^L = Y` the predictions run from the data to the label and the
    free-output equilibrium is the feed-forward classifier (the
    discriminative orientation of Whittington & Bogacz 2017). The notes'
    model is the same chain with the sizes reversed. The notes write
    :math:`F = \frac12\sum\|\varepsilon^i\|^2` with
    :math:`\varepsilon^i = (x^i - \mu^i)/v^i` and call :math:`v^i` both a
    standard deviation (the Gaussian) and a variance (the error-node
    dynamics); the two agree only at unit precision. Here :math:`\pi_l =
    1/\mathrm{variance}`, :math:`\varepsilon^l = \pi_l(x^l - \mu^l)` (so
    that :math:`\partial F/\partial x^l = \varepsilon^l - \dots`, as in the
    notes), and :math:`F` is the negative log-likelihood up to a constant.

    Args:
      params: :class:`Params`.
      xs: tuple of ``L`` arrays ``(..., n_l)``.
      precisions: ``(L,)``, see :func:`errors`.

    Returns:
      Scalar :math:`F \ge 0`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> # layer sizes 2 -> 3 -> 2
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> # the feed-forward pass meets every prediction
      >>> xs = pcn.forward(params, jnp.ones((4, 2)))
      >>> bool(pcn.energy(params, xs) < 1e-6)  # F = 0 up to round-off
      True
      >>> # 4 examples x 2 units x 1/2
      >>> round(float(pcn.energy(params, (xs[0], xs[1], xs[2] + 1.0))), 3)
      4.0
    """
    params, xs, prec = _setup(params, xs, precisions)
    return _energy(params, xs, prec)


@jax.jit
def _grad_x(params, xs, prec):
    eps = _errors(params, xs, prec)
    grads = []
    for l in range(len(xs)):
        g = eps[l]
        if l + 1 < len(xs):
            W = params.weights[l]
            g = g - (1.0 - jnp.tanh(xs[l]) ** 2) * (eps[l + 1] @ W)
        grads.append(g)
    return tuple(grads)


def grad_x(params: Params, xs, precisions=None) -> tuple:
    r""":math:`\partial F/\partial x^l` for every layer, in terms of the error nodes (§29.1.3–4).

    .. math:: \frac{\partial F}{\partial x^l}
              = \varepsilon^l - f'(x^l) \odot \big(W^{l\top} \varepsilon^{l+1}\big),
              \qquad f'(x) = 1 - \tanh^2 x,

    with no second term for the top layer :math:`l = L`. The inference
    dynamics are :math:`\dot x^l = -\partial F/\partial x^l`: a value node is
    pulled toward its own prediction and pushed to explain the error it
    causes one layer up, using only the error nodes adjacent to it.

    **Corrections to the notes.** §29.1.3 writes this as
    :math:`\nabla_{\varepsilon^i} F` and §29.1.4 as
    :math:`\tau\,d\varepsilon^i/dt`; both are the gradient with respect to
    (and the dynamics of) the *value* node :math:`x^i`. In the notes' row
    convention (:math:`\mu^{i-1} = \sigma(x^i)^\top M^{i-1} + \beta^{i-1}`,
    :math:`W = M^\top`) the feedback term must be
    :math:`\varepsilon^{i-1} (M^{i-1})^\top = \varepsilon^{i-1} W^{i-1}`;
    the notes print :math:`\varepsilon^{i-1}(W^{i-1})^\top` (= the
    untransposed :math:`\varepsilon^{i-1} M^{i-1}`, also printed in §29.1.4
    with index :math:`i`), which has the wrong shape unless the layers have
    equal sizes and the wrong value then. The code uses the transpose.

    Args:
      params: :class:`Params`.
      xs: tuple of ``L`` arrays ``(..., n_l)``.
      precisions: ``(L,)``, see :func:`errors`.

    Returns:
      tuple of ``L`` arrays ``(..., n_l)`` (the gradient also for nodes that
      a driver keeps clamped).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> xs = pcn.forward(params, jnp.ones((4, 2)))
      >>> [g.shape for g in pcn.grad_x(params, xs)]
      [(4, 2), (4, 3), (4, 2)]
    """
    params, xs, prec = _setup(params, xs, precisions)
    return _grad_x(params, xs, prec)


def _grad_params(params, xs, prec):
    eps = _errors(params, xs, prec)
    batch = "".join("abcdefgh"[: xs[0].ndim - 1])
    gW = tuple(-jnp.einsum(f"{batch}i,{batch}j->ij", eps[l + 1], jnp.tanh(xs[l])) for l in range(len(xs) - 1))
    gb = tuple(-jnp.sum(eps[l + 1].reshape(-1, eps[l + 1].shape[-1]), axis=0) for l in range(len(xs) - 1))
    gm = -jnp.sum(eps[0].reshape(-1, eps[0].shape[-1]), axis=0)
    return Params(weights=gW, biases=gb, prior_mean=gm)


def grad_params(params: Params, xs, precisions=None) -> Params:
    r""":math:`\partial F/\partial\theta`: the local, Hebbian learning rules of §29.1.4.

    .. math:: -\frac{\partial F}{\partial W^l} = \varepsilon^{l+1} f(x^l)^\top, \qquad
              -\frac{\partial F}{\partial b^l} = \varepsilon^{l+1}, \qquad
              -\frac{\partial F}{\partial m} = \varepsilon^1,

    summed over the leading batch axes. The weight change is the product of
    the post-synaptic error and the pre-synaptic rate :math:`f(x^l)`
    (the notes' :math:`dM^i/dt = \sigma(x^{i+1})^\top\varepsilon^i`, whose
    sign is right).

    Args:
      params: :class:`Params`.
      xs: tuple of ``L`` arrays ``(..., n_l)``.
      precisions: ``(L,)``, see :func:`errors`.

    Returns:
      :class:`Params` holding :math:`\partial F/\partial W^l`,
      :math:`\partial F/\partial b^l`, :math:`\partial F/\partial m`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> xs = pcn.forward(params, jnp.ones((4, 2)))
      >>> g = pcn.grad_params(params, xs)
      >>> [w.shape for w in g.weights]
      [(3, 2), (2, 3)]
    """
    params, xs, prec = _setup(params, xs, precisions)
    return _grad_params(params, xs, prec)


# --- inference: descent on F with some layers clamped -----------------------


class Inference(NamedTuple):
    r"""Result of :func:`infer`.

    Attributes:
      xs: tuple of ``L`` arrays ``(..., n_l)``, the value nodes after the last step.
      energy: ``(n_steps + 1,)`` :math:`F` (summed over the batch) at the
        start and after each step.
    """

    xs: tuple
    energy: Array


def _infer_single(params, xs, prec, eta, clamp, n_steps):
    """Inference for one example, xs[l]: (n_l,)."""
    free = tuple(not c for c in clamp)

    def step(xs, _):
        g = _grad_x(params, xs, prec)
        xs = tuple(x - eta * gl if f else x for x, gl, f in zip(xs, g, free))
        return xs, _energy(params, xs, prec)

    xs_end, trace = jax.lax.scan(step, xs, None, length=n_steps)
    return xs_end, jnp.concatenate([_energy(params, xs, prec)[None], trace])


def _infer_batch(params, xs, prec, eta, clamp, n_steps):
    """vmap of the one-example inference over the leading axis; energies summed."""
    xs_end, traces = jax.vmap(_infer_single, in_axes=(None, 0, None, None, None, None))(
        params, xs, prec, eta, clamp, n_steps
    )
    return xs_end, jnp.sum(traces, axis=0)


@partial(jax.jit, static_argnames=("clamp", "n_steps"))
def _infer_jit(params, xs, prec, eta, clamp, n_steps):
    batch = xs[0].shape[:-1]
    flat = tuple(x.reshape((-1, x.shape[-1])) for x in xs)
    xs_end, trace = _infer_batch(params, flat, prec, eta, clamp, n_steps)
    return Inference(xs=tuple(x.reshape(batch + x.shape[-1:]) for x in xs_end), energy=trace)


def _check_clamp(clamp, L) -> tuple:
    if not isinstance(clamp, (tuple, list)) or len(clamp) != L:
        raise ValueError(f"clamp must be a tuple of L = {L} booleans (True = clamped); got {clamp!r}")
    return tuple(_validate.flag(f"clamp[{i}]", c) for i, c in enumerate(clamp))


def infer(params: Params, xs0, precisions=None, *, clamp, n_steps: int, step_size: float = 0.1) -> Inference:
    r"""Inference: gradient descent on :math:`F` in the free value nodes (§29.1.4).

    .. math:: x^l \leftarrow x^l - \eta\,\Big(\varepsilon^l - f'(x^l)\odot
              W^{l\top}\varepsilon^{l+1}\Big) \quad \text{for every free layer } l,

    (the Euler discretisation of :math:`\tau\dot x^l = -\partial F/\partial
    x^l` with :math:`\eta = dt/\tau`), while clamped layers keep their
    initial values exactly. Which layers are clamped selects the mode of
    §29.1.4: ``(True, False, ..., True)`` is training, ``(False, ...,
    False, True)`` generation and ``(True, False, ..., False)`` inference.
    Examples of a batch are independent; the one-example ``lax.scan`` is
    ``jax.vmap``-ed over the batch. Jitted.

    Args:
      params: :class:`Params` (fixed).
      xs0: tuple of ``L`` initial value arrays ``(..., n_l)``; clamped layers
        hold the clamped values.
      precisions: ``(L,)``, see :func:`errors`.
      clamp: tuple of ``L`` booleans (static).
      n_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`. For a small enough step :math:`F` does
        not increase (descent lemma).

    Returns:
      :class:`Inference`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> xs0 = (jnp.ones((4, 2)), jnp.zeros((4, 3)), jnp.ones((4, 2)))
      >>> clamp = (True, False, True)
      >>> res = pcn.infer(params, xs0, clamp=clamp, n_steps=3)
      >>> [x.shape for x in res.xs], bool(res.energy[-1] <= res.energy[0])
      ([(4, 2), (4, 3), (4, 2)], True)
    """
    params = _check_params(params)
    xs0 = _check_values(xs0, _sizes(params), name="xs0")
    L = len(xs0)
    prec = _default_precisions(precisions, L, xs0[0].dtype)
    clamp = _check_clamp(clamp, L)
    n_steps = _validate.count("n_steps", n_steps, 1)
    eta = jnp.asarray(_validate.positive("step_size", step_size), xs0[0].dtype)
    return _infer_jit(params, xs0, prec, eta, clamp, n_steps)


def _check_data(params, x, y):
    sizes = _sizes(params)
    x = _validate.matrix("x", x, sizes[0], "n_1")
    y = _validate.matrix("y", y, sizes[-1], "n_L")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of rows; got {x.shape[0]} and {y.shape[0]}")
    return x, y


# --- training: clamp x^1 = X and x^L = Y, relax, then a Hebbian step ---------


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      opt_state: optimizer state, to continue training with another call.
      loss: ``(n_epochs, num_batches)`` mean squared output error
        :math:`\frac12\|Y - \hat y\|^2` of the feed-forward pass on each
        minibatch before its weight step.
      batch_energies: ``(n_epochs, num_batches)`` the mean :math:`F` per example at the end of
        each minibatch's inference phase (``energies`` holds their mean over each epoch).
    """

    opt_state: Any
    loss: Array
    batch_energies: Any = None


def _value_and_grad(params, batch, args, n_infer_steps):
    # one minibatch of the driver (_descent.minibatch): clamp, relax, then the Hebbian gradient
    (xb, yb), (prec, eta) = batch, args
    L = len(params.weights) + 1
    xs0 = _forward(params, xb)
    loss = 0.5 * jnp.mean(jnp.sum((yb - xs0[-1]) ** 2, axis=-1))
    xs0 = xs0[:-1] + (yb,)
    clamp = (True,) + (False,) * (L - 2) + (True,)
    xs, _ = _infer_batch(params, xs0, prec, eta, clamp, n_infer_steps)
    grads = jax.tree.map(lambda g: g / xb.shape[0], _grad_params(params, xs, prec))
    energy = _energy(params, xs, prec) / xb.shape[0]  # at the equilibrium, before the weight step
    return (energy, loss), grads


def _result(opt_state, values, _):
    energies, loss = values
    return jnp.mean(energies, axis=1), FitExtras(opt_state, loss, energies), energies


def fit(
    params: Params,
    x,
    y,
    precisions=None,
    *,
    key: Array,
    optimizer: Any,
    n_epochs: int,
    batch_size: int,
    n_infer_steps: int,
    step_size: float = 0.1,
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Training mode of §29.1.4: clamp :math:`x^1 = X`, :math:`x^L = Y`, relax, learn.

    For each minibatch (shuffled with ``key`` every epoch; a last partial
    batch is dropped): the value nodes start at the feed-forward pass
    :func:`forward` of :math:`X` with the top replaced by :math:`Y`;
    ``n_infer_steps`` inference steps (:func:`infer`, vmapped over the
    batch) relax the hidden layers toward equilibrium; then one optimizer
    step uses the Hebbian gradient :func:`grad_params`, averaged over
    the batch (plain SGD with rate :math:`\kappa` is
    :math:`\Delta W^l = \kappa\,\overline{\varepsilon^{l+1} f(x^l)^\top}`).
    Jitted, with nested ``lax.scan``.

    Args:
      params: initial :class:`Params`.
      x: ``(N, n_1)`` inputs (clamped at the bottom).
      y: ``(N, n_L)`` targets (clamped at the top), e.g. one-hot labels.
      precisions: ``(L,)``, see :func:`errors`.
      key: PRNG key for the shuffling (keyword-only).
      optimizer: an optax ``GradientTransformation`` (a fresh but equal one reuses the compiled program).
      n_epochs, n_infer_steps: integers ``>= 1``.
      batch_size: integer in ``[1, N]``.
      step_size: inference step :math:`\eta > 0`.
      opt_state: optimizer state from a previous call, or ``None`` to
        initialise it.
      progress: show a ``tqdm.auto`` bar of the epochs (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult`: the trained :class:`Params`;
      ``energies``, ``(n_epochs,)``, the mean over each epoch's minibatches of the mean
      :math:`F` per example at the end of a minibatch's inference phase (before its weight
      step; the minibatch values are ``extras.batch_energies``); ``n_iter = n_epochs``;
      ``converged = None`` (a fixed number of epochs); ``extras`` a :class:`FitExtras` with
      the optimizer state, the output loss and the minibatch energies.

    Raises:
      ValueError: on bad arguments, or when training diverged (non-finite
        parameters, energies or losses; the message names the first epoch).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> x, y = (
      ...     jax.random.normal(jax.random.key(1), (8, 2)),
      ...     jax.nn.one_hot(jnp.arange(8) % 2, 2),
      ... )
      >>> opts = dict(
      ...     optimizer=optax.sgd(0.1), n_epochs=3, batch_size=4, n_infer_steps=5
      ... )
      >>> result = pcn.fit(params, x, y, key=jax.random.key(2), **opts)
      >>> (
      ...     result.energies.shape,
      ...     result.extras.loss.shape,
      ... )  # per epoch; per epoch and minibatch
      ((3,), (3, 2))
    """
    _validate.key("key", key)
    params = _check_params(params)
    x, y = _check_data(params, x, y)
    prec = _default_precisions(precisions, len(params.weights) + 1, x.dtype)
    n_epochs, batch_size = _validate.trainer(optimizer, n_epochs, batch_size, x.shape[0])
    n_infer_steps = _validate.count("n_infer_steps", n_infer_steps, 1)
    eta = jnp.asarray(_validate.positive("step_size", step_size), x.dtype)
    return _descent.minibatch(
        "pcn.fit",
        partial(_value_and_grad, n_infer_steps=n_infer_steps),
        params,
        (x, y),
        key=key,
        optimizer=optimizer,
        n_epochs=n_epochs,
        batch_size=batch_size,
        args=(prec, eta),
        opt_state=opt_state,
        result=_result,
        hint="lower the optimizer's learning rate or the inference step_size",
        progress=progress,
    )


# --- the other two modes ---------------------------------------------------------


def classify(params: Params, x, precisions=None, *, n_steps: int, step_size: float = 0.1, xs0=None) -> tuple:
    r"""Inference mode of §29.1.4: clamp :math:`x^1 = X`, relax, read :math:`\arg\max_j x^L_j`.

    The free layers start at zero (or at ``xs0``). With only the bottom
    clamped, the feed-forward pass is the unique stationary point of
    :math:`F` (all errors vanish there, and :math:`\partial F/\partial x^L =
    \varepsilon^L = 0` forces every :math:`\varepsilon^l = 0` downward), so
    enough steps reproduce :func:`forward`.

    Args:
      params: :class:`Params`.
      x: ``(N, n_1)``.
      precisions: ``(L,)``, see :func:`errors`.
      n_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`.
      xs0: optional tuple of initial values (its first entry is replaced by ``x``).

    Returns:
      ``(labels, result)``: ``(N,)`` integer argmax of the top layer and the
      :class:`Inference`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> out = pcn.classify(params, jnp.ones((4, 2)), n_steps=3)
      >>> jax.tree.map(jnp.shape, out)
      ((4,), Inference(xs=((4, 2), (4, 3), (4, 2)), energy=(4,)))
    """
    params = _check_params(params)
    sizes = _sizes(params)
    x = _validate.matrix("x", x, sizes[0], "n_1")
    if xs0 is None:
        xs0 = (x,) + tuple(jnp.zeros((x.shape[0], n), x.dtype) for n in sizes[1:])
    else:
        xs0 = (x,) + tuple(_check_values(xs0, sizes, name="xs0")[1:])
    clamp = (True,) + (False,) * (len(sizes) - 1)
    res = infer(params, xs0, precisions, clamp=clamp, n_steps=n_steps, step_size=step_size)
    return jnp.argmax(res.xs[-1], axis=-1), res


def generate(params: Params, y, precisions=None, *, n_steps: int, step_size: float = 0.1) -> Inference:
    r"""Generation mode of §29.1.4: clamp :math:`x^L = Y`, relax, read :math:`x^1`.

    The free layers start at the feed-forward pass of the prior mean
    :math:`m` (``params.prior_mean``). Without a root prior
    (:math:`\pi_1 = 0`) the minimisers of :math:`F` in :math:`x^{1:L-1}`
    form a whole manifold whenever :math:`n_1 > n_L` (any :math:`x^1` whose
    feed-forward output is :math:`Y`), and the result depends on the
    starting point; a weak prior :math:`\pi_1 > 0` selects the one closest
    to :math:`m`.

    Args:
      params: :class:`Params`.
      y: ``(N, n_L)`` clamped top values (e.g. one-hot labels).
      precisions: ``(L,)``, see :func:`errors`.
      n_steps: integer ``>= 1``.
      step_size: :math:`\eta > 0`.

    Returns:
      :class:`Inference`; ``result.xs[0]`` is the generated bottom layer.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import pcn
      >>> params = pcn.init_params((2, 3, 2), key=jax.random.key(0))
      >>> res = pcn.generate(params, jnp.eye(2), n_steps=3)
      >>> [x.shape for x in res.xs]
      [(2, 2), (2, 3), (2, 2)]
    """
    params = _check_params(params)
    sizes = _sizes(params)
    y = _validate.matrix("y", y, sizes[-1], "n_L")
    start = _forward(params, jnp.broadcast_to(params.prior_mean, (y.shape[0], sizes[0])))
    xs0 = start[:-1] + (y,)
    clamp = (False,) * (len(sizes) - 1) + (True,)
    return infer(params, xs0, precisions, clamp=clamp, n_steps=n_steps, step_size=step_size)
