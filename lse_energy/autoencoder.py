r"""Autoencoders with tied weights (§19 of the lecture notes).

An autoencoder maps an input :math:`x \in \mathbb{R}^d` to a code
:math:`h = f(Wx + b) \in \mathbb{R}^k` and back to a reconstruction
:math:`x' = W^\top h + c`, and is trained to minimise the reconstruction loss
:math:`L(x', x)`. The weights are *tied*: the encoder is :math:`W` and the
decoder is :math:`W^\top` (§19: "the encoder weights are W and the decoder
weights are W^T"). Here :math:`L` is the squared error, averaged over the
:math:`N` rows of a data matrix,

.. math:: L(W, b, c) = \frac{1}{2N} \sum_{n=1}^N \|x'_n - x_n\|^2 ,

with the encoder nonlinearity :math:`f` one of ``"linear"`` (the identity: the
linear tied autoencoder), ``"sigmoid"`` or ``"tanh"``.

The loss contains no log-sum-exp. Read as a Gaussian negative log-likelihood
:math:`-\ln \mathcal{N}(x; x', I)`, it is the one-parent (single-term) case of
the package's energy, :math:`-\ln \sum_{p=1}^{1} \exp \mathrm{sim}` with
:math:`\mathrm{sim} = -\tfrac12\|x - x'\|^2` up to a constant: there is no
softmax and no log-partition function to speak of.

Because :math:`W` appears twice, the gradient in :math:`W` is the sum of an
*encoder-path* and a *decoder-path* term (:func:`grad_loss_paths`). For the
linear autoencoder without biases the loss depends on the data only through
:math:`C = X^\top X / N` (:func:`linear_loss`, :func:`grad_linear_loss_W`), and
its minimisers are the matrices with orthonormal rows spanning the top-:math:`k`
principal subspace of :math:`C` (the tied form of Baldi & Hornik, 1989);
:func:`principal_angles` measures how close a learned subspace is to it.

All gradient functions return :math:`\partial L/\partial(\cdot)` (the
gradient, not its negative). Every continuous-valued array must have a
floating dtype (an integer or boolean array raises ``ValueError`` naming the
argument).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "ACTIVATIONS",
    "Params",
    "init_params",
    "encode",
    "decode",
    "reconstruct",
    "loss",
    "GradPaths",
    "grad_loss_paths",
    "grad_params",
    "linear_loss",
    "grad_linear_loss_W",
    "principal_angles",
    "FitExtras",
    "fit",
]

#: The encoder nonlinearities :math:`f`, by name.
ACTIVATIONS = ("linear", "sigmoid", "tanh")


class Params(NamedTuple):
    r"""Parameters of a tied autoencoder with ``d`` inputs and ``k`` code units.

    .. math:: h = f(W x + b), \qquad x' = W^\top h + c .

    Attributes:
      W: ``(k, d)`` the encoder weights; the decoder weights are ``W.T`` (tied).
      b: ``(k,)`` the encoder (code) bias.
      c: ``(d,)`` the decoder (reconstruction) bias.
    """

    W: Array
    b: Array
    c: Array


# --- validation ------------------------------------------------------------------------


def _check_params(params) -> Params:
    return _validate.params(params, Params, {"W": "k d", "b": "k", "c": "d"})[0]


def _check_activation(activation) -> str:
    _validate.choice("activation", activation, ACTIVATIONS)
    return activation


def _check_x(params: Params, x) -> Array:
    return _validate.points("x", x, params.W.shape[1], ref="params.W's columns")


# --- the map -----------------------------------------------------------------------------


def _f(a: Array, activation: str) -> Array:
    if activation == "sigmoid":
        return jax.nn.sigmoid(a)
    if activation == "tanh":
        return jnp.tanh(a)
    return a


def _df(a: Array, h: Array, activation: str) -> Array:
    """:math:`f'(a)` written through :math:`h = f(a)` where that is shorter."""
    if activation == "sigmoid":
        return h * (1 - h)
    if activation == "tanh":
        return 1 - h * h
    return jnp.ones_like(a)


def init_params(d: int, n_hidden: int, *, key: Array, scale: float = 0.1, dtype=None) -> Params:
    r"""Random tied-autoencoder parameters: :math:`W_{ij} \sim \mathcal{N}(0, \mathrm{scale}^2/d)`, zero biases.

    Args:
      d: input dimension (integer ``>= 1``).
      n_hidden: the code size :math:`k` (integer ``>= 1``).
      key: PRNG key (keyword-only).
      scale: standard deviation of :math:`\sqrt{d}\,W_{ij}`, ``> 0``.
      dtype: floating dtype of the parameters (default: JAX's default float).

    Returns:
      a :class:`Params` with ``W`` of shape ``(k, d)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> (
      ...     params.W.shape,
      ...     autoencoder.reconstruct(params, jnp.ones((5, 4)), "tanh").shape,
      ... )
      ((2, 4), (5, 4))
    """
    _validate.key("key", key)
    d = _validate.count("d", d, 1)
    k = _validate.count("n_hidden", n_hidden, 1)
    scale = _validate.positive("scale", scale)
    dtype = _validate.float_dtype("dtype", dtype)
    W = (scale / math.sqrt(d)) * core.random_normal(key, (k, d), dtype)
    return Params(W, jnp.zeros((k,), dtype), jnp.zeros((d,), dtype))


def _encode(params: Params, x: Array, activation: str) -> tuple[Array, Array]:
    a = x @ params.W.T + params.b
    return a, _f(a, activation)


def encode(params: Params, x, activation: str = "linear") -> Array:
    r"""The code :math:`h = f(W x + b)` of each row of ``x`` (§19's encoder :math:`W`).

    Args:
      params: :class:`Params`.
      x: ``(N, d)`` inputs.
      activation: the encoder nonlinearity :math:`f`, one of :data:`ACTIVATIONS`.

    Returns:
      the ``(N, k)`` codes.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> autoencoder.encode(params, jnp.ones((5, 4))).shape
      (5, 2)
    """
    params = _check_params(params)
    x = _check_x(params, x)
    return _encode(params, x, _check_activation(activation))[1]


def decode(params: Params, h) -> Array:
    r"""The reconstruction :math:`x' = W^\top h + c` of each row of ``h`` (§19's tied decoder :math:`W^\top`).

    Args:
      params: :class:`Params`.
      h: ``(N, k)`` codes.

    Returns:
      the ``(N, d)`` reconstructions.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> autoencoder.decode(params, jnp.ones((5, 2))).shape
      (5, 4)
    """
    params = _check_params(params)
    h = _validate.points("h", h, params.W.shape[0], ref="params.W's rows")
    return h @ params.W + params.c


def reconstruct(params: Params, x, activation: str = "linear") -> Array:
    r"""The reconstruction :math:`x' = W^\top f(W x + b) + c` of each row of ``x``.

    This is the map the autoencoder computes (§19 of the lecture notes).

    Args:
      params: :class:`Params`.
      x: ``(N, d)`` inputs.
      activation: the encoder nonlinearity, one of :data:`ACTIVATIONS`.

    Returns:
      the ``(N, d)`` reconstructions.

    Examples:
      With one unit code along the first axis, the linear map projects onto that axis:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.Params(
      ...     jnp.array([[1.0, 0.0, 0.0]]), jnp.zeros(1), jnp.zeros(3)
      ... )  # k = 1, d = 3
      >>> autoencoder.reconstruct(params, jnp.array([[2.0, 5.0, 7.0]])).tolist()
      [[2.0, 0.0, 0.0]]
    """
    params = _check_params(params)
    x = _check_x(params, x)
    h = _encode(params, x, _check_activation(activation))[1]
    return h @ params.W + params.c


# --- the loss and its gradient -------------------------------------------------------------


def _loss(params: Params, x: Array, activation: str) -> Array:
    h = _encode(params, x, activation)[1]
    r = h @ params.W + params.c - x
    return 0.5 * jnp.sum(r * r) / x.shape[0]


def loss(params: Params, x, activation: str = "linear") -> Array:
    r"""The reconstruction loss :math:`L = \frac{1}{2N}\sum_n \|x'_n - x_n\|^2` (§19's :math:`L(x', x)`).

    The squared error is the Gaussian negative log-likelihood
    :math:`-\ln \mathcal{N}(x_n; x'_n, I)` less the constant
    :math:`\frac d2 \ln 2\pi`, averaged over the rows: a single-term
    ("one-parent") case of the log-sum-exp energy, with no log-sum-exp in it.

    Args:
      params: :class:`Params`.
      x: ``(N, d)`` data.
      activation: the encoder nonlinearity, one of :data:`ACTIVATIONS`.

    Returns:
      the scalar loss.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> loss = autoencoder.loss(params, jnp.ones((5, 4)))
      >>> loss.shape, bool(loss >= 0)
      ((), True)
    """
    params = _check_params(params)
    x = _check_x(params, x)
    return _loss(params, x, _check_activation(activation))


class GradPaths(NamedTuple):
    r"""The two contributions to :math:`\partial L/\partial W` of a tied autoencoder.

    With residuals :math:`R = X' - X` (``(N, d)``), codes :math:`H = f(A)`,
    :math:`A = X W^\top + b`:

    .. math:: \partial_W L = \underbrace{\tfrac1N H^\top R}_{\text{decoder path}}
              + \underbrace{\tfrac1N \big[(R W^\top) \odot f'(A)\big]^\top X}_{\text{encoder path}} .

    Attributes:
      encoder: ``(k, d)`` the gradient through the encoder's use of :math:`W`.
      decoder: ``(k, d)`` the gradient through the decoder's use of :math:`W^\top` (transposed to ``W``'s shape).
    """

    encoder: Array
    decoder: Array


def _grads(params: Params, x: Array, activation: str) -> tuple[Array, Array, Array, Array]:
    n = x.shape[0]
    a, h = _encode(params, x, activation)
    r = h @ params.W + params.c - x
    delta = (r @ params.W.T) * _df(a, h, activation)
    return delta.T @ x / n, h.T @ r / n, jnp.sum(delta, axis=0) / n, jnp.sum(r, axis=0) / n


def grad_loss_paths(params: Params, x, activation: str = "linear") -> GradPaths:
    r"""The encoder-path and decoder-path parts of :math:`\partial L/\partial W` (:class:`GradPaths`).

    Their sum is ``grad_params(...).W``. The decoder path equals the gradient
    of an *untied* autoencoder in its decoder weights :math:`V` at
    :math:`V = W^\top` (transposed), the encoder path its gradient in the
    encoder weights: tying adds them (§19 of the lecture notes).

    Args:
      params: :class:`Params`.
      x: ``(N, d)`` data.
      activation: the encoder nonlinearity, one of :data:`ACTIVATIONS`.

    Returns:
      a :class:`GradPaths`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> paths = autoencoder.grad_loss_paths(params, jnp.ones((5, 4)))
      >>> jax.tree.map(jnp.shape, paths)
      GradPaths(encoder=(2, 4), decoder=(2, 4))
    """
    params = _check_params(params)
    x = _check_x(params, x)
    gw_enc, gw_dec, _, _ = _grads(params, x, _check_activation(activation))
    return GradPaths(gw_enc, gw_dec)


def _grad(params: Params, x: Array, activation: str) -> Params:
    gw_enc, gw_dec, gb, gc = _grads(params, x, activation)
    return Params(gw_enc + gw_dec, gb, gc)


def grad_params(params: Params, x, activation: str = "linear") -> Params:
    r"""The analytic gradient :math:`\partial L/\partial (W, b, c)` of :func:`loss`.

    .. math:: \partial_W L = \tfrac1N\big(H^\top R + \Delta^\top X\big), \quad
              \partial_b L = \tfrac1N \textstyle\sum_n \Delta_n, \quad
              \partial_c L = \tfrac1N \textstyle\sum_n R_n,

    with :math:`R = X' - X` and :math:`\Delta = (R W^\top) \odot f'(A)`.

    Args:
      params: :class:`Params`.
      x: ``(N, d)`` data.
      activation: the encoder nonlinearity, one of :data:`ACTIVATIONS`.

    Returns:
      a :class:`Params` of gradients.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> g = autoencoder.grad_params(params, jnp.ones((5, 4)))
      >>> jax.tree.map(jnp.shape, g)
      Params(W=(2, 4), b=(2,), c=(4,))
    """
    params = _check_params(params)
    x = _check_x(params, x)
    return _grad(params, x, _check_activation(activation))


def _check_cov(W, cov) -> tuple[Array, Array]:
    W = _validate.array("W", W, 2)
    d = W.shape[1]
    cov = _validate.array("cov", cov, 2)
    if cov.shape != (d, d):
        raise ValueError(f"cov must have shape (d, d) = ({d}, {d}) to match W's columns; got {cov.shape}")
    return W, cov


def linear_loss(W, cov) -> Array:
    r"""The linear tied loss through the second moment: :math:`\tfrac12 \operatorname{tr}(E C E)`, :math:`E = I -
    W^\top W`.

    For the linear autoencoder without biases,
    :math:`L = \frac{1}{2N}\|X - X W^\top W\|_F^2 = \tfrac12\operatorname{tr}(E C E)` with
    :math:`C = X^\top X/N`: the loss sees the data only through :math:`C`.

    Args:
      W: ``(k, d)`` encoder weights.
      cov: ``(d, d)`` symmetric second-moment matrix :math:`C`.

    Returns:
      the scalar loss.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> W = jnp.eye(3)[:2]  # keeps two of three directions
      >>> float(autoencoder.linear_loss(W, jnp.eye(3)))  # 1/2 of the lost variance
      0.5
    """
    W, cov = _check_cov(W, cov)
    E = jnp.eye(W.shape[1], dtype=W.dtype) - W.T @ W
    return 0.5 * jnp.trace(E @ cov @ E)


def grad_linear_loss_W(W, cov) -> Array:
    r"""The gradient of :func:`linear_loss`: :math:`\partial_W L = -W(CE + EC)`.

    The term :math:`-WEC` is the encoder path and :math:`-WCE` the decoder
    path (:class:`GradPaths` with :math:`f` the identity and no biases);
    ``cov`` must be symmetric.

    Args:
      W: ``(k, d)`` encoder weights.
      cov: ``(d, d)`` symmetric second-moment matrix :math:`C`.

    Returns:
      the ``(k, d)`` gradient.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> W = jnp.eye(3)[:2]  # a principal subspace: a stationary point
      >>> bool(
      ...     jnp.allclose(
      ...         autoencoder.grad_linear_loss_W(W, jnp.diag(jnp.arange(3.0, 0, -1))),
      ...         0,
      ...     )
      ... )
      True
    """
    W, cov = _check_cov(W, cov)
    E = jnp.eye(W.shape[1], dtype=W.dtype) - W.T @ W
    return -W @ (cov @ E + E @ cov)


def principal_angles(a, b) -> Array:
    r"""The principal angles (radians, ascending) between the column spans of ``a`` and ``b``.

    The cosines are the singular values of :math:`Q_a^\top Q_b` for
    orthonormal bases :math:`Q_a, Q_b` (QR); the sines of the small angles
    are computed from the residual :math:`Q_b - Q_a Q_a^\top Q_b`, which keeps
    angles below ``1e-8`` accurate (the cosines alone cannot resolve them).

    Args:
      a: ``(d, p)`` matrix of full column rank.
      b: ``(d, q)`` matrix of full column rank, same ``d``.

    Returns:
      the ``min(p, q)`` angles in :math:`[0, \pi/2]`, ascending.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import autoencoder
      >>> a, b = jnp.eye(3)[:, :2], jnp.eye(3)[:, 1:]
      >>> [
      ...     round(v, 3) for v in autoencoder.principal_angles(a, b).tolist()
      ... ]  # 0, pi/2
      [0.0, 1.571]
    """
    a = _validate.array("a", a, 2)
    b = _validate.array("b", b, 2)
    if a.shape[0] != b.shape[0] or min(a.shape + b.shape) < 1:
        raise ValueError(f"a and b must be (d, p) and (d, q) with one d >= 1; got {a.shape} and {b.shape}")
    if a.shape[1] < b.shape[1]:
        a, b = b, a
    qa = jnp.linalg.qr(a)[0]
    qb = jnp.linalg.qr(b)[0]
    cos = jnp.clip(jnp.linalg.svd(qa.T @ qb, compute_uv=False), 0.0, 1.0)
    sin = jnp.clip(jnp.linalg.svd(qb - qa @ (qa.T @ qb), compute_uv=False), 0.0, 1.0)
    # cos is descending, sin descending too; pair the largest sine with the smallest cosine.
    angles = jnp.where(cos[::-1] > math.sqrt(0.5), jnp.arcsin(sin), jnp.arccos(cos[::-1]))
    return jnp.sort(angles)


# --- training ----------------------------------------------------------------------------


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      opt_state: the optimizer state, to continue training with another call.
      grad_norm: ``(n_steps,)`` Frobenius norm of :math:`\partial L/\partial W` before each step.
    """

    opt_state: Any
    grad_norm: Array


def _value_and_grad(p, _, x, activation):
    # one full-batch step of the driver (_descent.steps): the loss and the gradient norm, the analytic gradient
    g = _grad(p, x, activation)
    return (_loss(p, x, activation), jnp.sqrt(jnp.sum(g.W * g.W))), g


def _result(opt_state, values):
    values, gnorm = values
    return values, FitExtras(opt_state, gnorm), values


def fit(
    params: Params,
    x,
    *,
    optimizer: Any,
    n_steps: int,
    activation: str = "linear",
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Train a tied autoencoder by full-batch gradient descent on :func:`loss` (§19 of the lecture notes).

    Each of the ``n_steps`` steps computes the analytic gradient
    :func:`grad_params` on all of ``x`` and applies one ``optimizer`` update
    (``optax.sgd(lr)`` is plain gradient descent). Jitted, with ``lax.scan``.

    Args:
      params: initial :class:`Params` (cast to ``x``'s dtype).
      x: ``(N, d)`` training data.
      optimizer: an optax ``GradientTransformation`` (a fresh but equal one reuses the compiled program).
      n_steps: number of steps, integer ``>= 1``.
      activation: the encoder nonlinearity, one of :data:`ACTIVATIONS`.
      opt_state: optimizer state from a previous call, or ``None`` to initialise it.
      progress: show a ``tqdm.auto`` bar of the steps (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult`: the trained :class:`Params`;
      ``energies``, ``(n_steps,)``, the loss before each step;
      ``n_iter = n_steps``; ``converged = None`` (a fixed number of steps);
      ``extras`` a :class:`FitExtras`.

    Raises:
      ValueError: on bad arguments, or when training diverged (non-finite
        parameters or losses; the message names the first bad step).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import autoencoder
      >>> params = autoencoder.init_params(4, 2, key=jax.random.key(0))
      >>> x = jax.random.normal(jax.random.key(1), (10, 4))
      >>> result = autoencoder.fit(params, x, optimizer=optax.sgd(0.1), n_steps=20)
      >>> result.energies.shape, bool(result.energies[-1] < result.energies[0])
      ((20,), True)
    """
    params = _check_params(params)
    x = _check_x(params, x)
    activation = _check_activation(activation)
    _validate.optimizer(optimizer)
    n_steps = _validate.count("n_steps", n_steps, 1)
    params = Params(*(jnp.asarray(a, x.dtype) for a in params))
    return _descent.steps(
        "autoencoder.fit",
        partial(_value_and_grad, activation=activation),
        params,
        optimizer=optimizer,
        n_steps=n_steps,
        args=x,
        opt_state=opt_state,
        result=_result,
        progress=progress,
    )
