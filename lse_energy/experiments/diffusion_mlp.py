r"""A small learned noise predictor for the diffusion chapter, and memorisation diagnostics.

:class:`Params`, :func:`init_params` and :func:`epsilon`: a fully connected
network :math:`\epsilon_\theta(x_t, t)` with a sinusoidal time embedding
(:func:`time_embedding`), in the ``eps_fn(params, schedule, x, t)`` form that
:func:`lse_energy.diffusion.sample` and :func:`lse_energy.diffusion.denoising_loss`
take; :func:`fit` trains it with the notes' algorithm. The diffusion model
itself (schedule, forward process, ideal denoiser and its log-sum-exp energy)
is :mod:`lse_energy.diffusion`; this module only adds a learned network and
its optax training, and no model imports it.

Its weight layout is ``(n_in, n_out)`` (rows are inputs, ``h @ W``), unlike
the ``(n_out, n_in)`` of :class:`lse_energy.mixture_pc.Params`.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lse_energy import _descent, _validate, core, diffusion

Array = jax.Array

__all__ = [
    "Params",
    "FitExtras",
    "time_embedding",
    "init_params",
    "epsilon",
    "fit",
    "nearest_training_point",
    "nearest_neighbour_spacing",
]


def _check_schedule(schedule):
    if not isinstance(schedule, diffusion.Schedule):
        raise ValueError(f"schedule must be a Schedule; got {type(schedule).__name__}")
    return schedule


class Params(NamedTuple):
    r"""A fully connected noise predictor :math:`\epsilon_\theta(x, t)`.

    .. math::

        h_0 = [x, \phi(t)], \quad h_{l} = \mathrm{silu}(h_{l-1} W_l + b_l), \quad
        \epsilon_\theta = h_{L-1} W_L + b_L ,

    with the sinusoidal time embedding :math:`\phi` of :func:`time_embedding`
    (``2F`` features; ``F`` is read off the shapes).

    Attributes:
      weights: tuple of ``(n_in, n_out)`` matrices; the first has
        ``n_in = d + 2F``, the last ``n_out = d``.
      biases: tuple of ``(n_out,)`` vectors.
    """

    weights: tuple
    biases: tuple


class FitExtras(NamedTuple):
    """The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      opt_state: the optimizer state (pass it back to continue training).
    """

    opt_state: object


def time_embedding(t, n_steps: int, n_freqs: int) -> Array:
    r"""Sinusoidal embedding :math:`\phi(t) = [\sin(\omega_k \tau), \cos(\omega_k \tau)]_{k<F}`
    of :math:`\tau = t/T`, with :math:`\omega_k = 2^{k}\,\pi/2`, :math:`k = 0..F-1`.

    Args:
      t: ``(B,)`` integer steps.
      n_steps: :math:`T`.
      n_freqs: :math:`F`.

    Returns:
      ``(B, 2F)``.
    """
    n_steps = _validate.count("n_steps", n_steps, 1)
    n_freqs = _validate.count("n_freqs", n_freqs, 1)
    t = jnp.asarray(t)
    if t.ndim != 1 or not jnp.issubdtype(t.dtype, jnp.integer):
        raise ValueError(f"t must be a (B,) array of integer time steps; got {t.dtype}{t.shape}")
    if _validate.is_concrete(t) and t.size and (int(jnp.min(t)) < 1 or int(jnp.max(t)) > n_steps):
        raise ValueError(f"t must lie in 1..n_steps = 1..{n_steps}")
    return _time_embedding(t, n_steps, n_freqs)


def _time_embedding(t, n_steps, n_freqs):
    tau = jnp.asarray(t, jnp.result_type(float)) / n_steps
    omega = (jnp.pi / 2) * 2.0 ** jnp.arange(n_freqs, dtype=tau.dtype)
    angle = tau[:, None] * omega[None, :]
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


def init_params(dim: int, *, key, hidden=(128, 128), n_freqs: int = 8) -> Params:
    r"""He-style initialisation: :math:`W_l \sim \mathcal{N}(0, 2/n_{\mathrm{in}})`, :math:`b_l = 0`;
    the last layer is scaled down by 10 so that :math:`\epsilon_\theta \approx 0` at the start.

    Args:
      dim: data dimension ``d``.
      key: PRNG key (keyword-only).
      hidden: widths of the hidden layers.
      n_freqs: ``F``, frequencies of the time embedding.
    """
    dim = _validate.count("dim", dim, 1)
    n_freqs = _validate.count("n_freqs", n_freqs, 1)
    hidden = tuple(_validate.count("hidden", h, 1) for h in hidden)
    sizes = (dim + 2 * n_freqs, *hidden, dim)
    keys = jax.random.split(key, len(sizes) - 1)
    ws, bs = [], []
    dtype = jnp.result_type(float)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        scale = jnp.sqrt(2.0 / n_in) * (0.1 if i == len(sizes) - 2 else 1.0)
        ws.append(scale * core.random_normal(k, (n_in, n_out), dtype))
        bs.append(jnp.zeros((n_out,), dtype))
    return Params(weights=tuple(ws), biases=tuple(bs))


def _check_params(params) -> Params:
    if not isinstance(params, Params):
        raise ValueError(f"params must be diffusion_mlp.Params; got {type(params).__name__}")
    if len(params.weights) < 1 or len(params.weights) != len(params.biases):
        raise ValueError(
            f"params must hold L >= 1 weights and as many biases; got {len(params.weights)} and {len(params.biases)}"
        )
    ws = tuple(jnp.asarray(w) for w in params.weights)
    bs = tuple(jnp.asarray(b) for b in params.biases)
    for i, (w, b) in enumerate(zip(ws, bs)):
        if w.ndim != 2 or b.shape != (w.shape[1],):
            raise ValueError(
                f"params.weights[{i}] must have shape (n_in, n_out) and params.biases[{i}] shape (n_out,); "
                f"got {w.shape} and {b.shape}"
            )
        if i > 0 and w.shape[0] != ws[i - 1].shape[1]:
            raise ValueError(
                f"params.weights[{i}] must have {ws[i - 1].shape[1]} rows to follow params.weights[{i - 1}]; "
                f"got shape {w.shape}"
            )
        for name, a in ((f"weights[{i}]", w), (f"biases[{i}]", b)):
            _validate.float_array(f"params.{name}", a)
    return Params(weights=ws, biases=bs)


def epsilon(params: Params, schedule, x, t) -> Array:
    r"""The learned noise predictor :math:`\epsilon_\theta(x_t, t)` (``eps_fn`` signature).

    Args:
      params: :class:`Params`, floating point and finite, with chained
        shapes ``weights[i]: (n_i, n_{i+1})``, ``biases[i]: (n_{i+1},)``.
      schedule: :class:`lse_energy.diffusion.Schedule` (gives :math:`T`).
      x: ``(B, d)``, floating point (an integer array raises ``ValueError``)
        and finite.
      t: scalar or ``(B,)`` integer steps.

    Returns:
      ``(B, d)``.
    """
    _check_params(params)
    schedule = _check_schedule(schedule)
    x = _validate.points("x", x)
    t = _validate.time_steps(t, schedule.betas.shape[0], x.shape[0])
    d = x.shape[1]
    n_in, d_out = params.weights[0].shape[0], params.weights[-1].shape[1]
    if d_out != d or n_in - d < 2 or (n_in - d) % 2:
        raise ValueError(
            f"x has width d = {d} but params expect inputs of width d + 2F = {n_in} (F >= 1) "
            f"and outputs of width {d_out}"
        )
    n_freqs = (params.weights[0].shape[0] - d) // 2
    h = jnp.concatenate([x, _time_embedding(t, schedule.betas.shape[0], n_freqs).astype(x.dtype)], axis=-1)
    for w, b in zip(params.weights[:-1], params.biases[:-1]):
        h = jax.nn.silu(h @ w + b)
    return h @ params.weights[-1] + params.biases[-1]


def _value_and_grad(p, k, args, batch_size):
    # one step of the driver (_descent.steps): a minibatch drawn with replacement, its time steps and noise
    data, schedule = args

    def loss_fn(p, k):
        ki, kt, ke = jax.random.split(k, 3)
        idx = jax.random.randint(ki, (batch_size,), 0, data.shape[0])
        t = jax.random.randint(kt, (batch_size,), 1, schedule.betas.shape[0] + 1)
        x0 = data[idx]
        eps = core.random_normal(ke, x0.shape, x0.dtype)
        return diffusion.denoising_loss(epsilon, p, schedule, x0, t, eps)

    return jax.value_and_grad(loss_fn)(p, k)


def _result(opt_state, losses):
    return losses, FitExtras(opt_state=opt_state), losses


def fit(
    params: Params,
    x,
    schedule,
    optimizer,
    *,
    key,
    n_steps: int,
    batch_size: int = 256,
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Train :func:`epsilon` with the notes' training algorithm: each step draws a
    minibatch of training points (with replacement), :math:`t \sim \mathcal{U}\{1..T\}`,
    :math:`\epsilon \sim \mathcal{N}(0, I)`, and takes one optimizer step on
    :func:`lse_energy.diffusion.denoising_loss`. Jitted; one ``lax.scan`` over the steps.

    Args:
      params: initial :class:`Params`.
      x: ``(N, d)`` training points.
      schedule: :class:`lse_energy.diffusion.Schedule`.
      optimizer: an optax ``GradientTransformation`` (``init``/``update``), hashable
        (a static argument).
      key: PRNG key (keyword-only).
      n_steps: number of optimizer steps, ``>= 1``.
      batch_size: ``>= 1``.
      opt_state: optimizer state to continue from (``None``: ``optimizer.init(params)``).
      progress: show a ``tqdm.auto`` bar of the steps (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult`: the trained :class:`Params`;
      ``energies``, ``(n_steps,)``, the minibatch simplified loss before each
      step; ``n_iter = n_steps``; ``converged = None``; ``extras`` a
      :class:`FitExtras` holding the optimizer state.

    Raises:
      ValueError: on bad arguments, or when training diverged (non-finite
        parameters or losses; the message names the first step).
    """
    params = _check_params(params)
    schedule = _check_schedule(schedule)
    x = _validate.points("x", x)
    _validate.optimizer(optimizer)
    n_steps = _validate.count("n_steps", n_steps, 1)
    batch_size = _validate.count("batch_size", batch_size, 1)
    if params.weights[-1].shape[1] != x.shape[1]:
        raise ValueError(f"params output dimension {params.weights[-1].shape[1]} != x dimension {x.shape[1]}")
    return _descent.steps(
        "diffusion_mlp.fit",
        partial(_value_and_grad, batch_size=batch_size),
        params,
        optimizer=optimizer,
        n_steps=n_steps,
        key=key,
        args=(x, schedule),
        opt_state=opt_state,
        result=_result,
        progress=progress,
    )


# ---------------------------------------------------------------------------
# Memorisation diagnostics
# ---------------------------------------------------------------------------


def nearest_training_point(samples, data):
    r"""Distance from each sample to its nearest training point, and that point's index.

    Args:
      samples: ``(n, d)``.
      data: ``(N, d)``.

    Returns:
      ``(dist, idx)``: ``(n,)`` Euclidean distances :math:`\min_i \|s - x_i\|` and ``(n,)`` argmins.
    """
    data = _validate.points("data", data)
    samples = _validate.points("samples", samples, data.shape[1])
    d2 = jnp.sum((samples[:, None, :] - data[None, :, :]) ** 2, axis=-1)
    idx = jnp.argmin(d2, axis=1)
    return jnp.sqrt(jnp.min(d2, axis=1)), idx


def nearest_neighbour_spacing(data) -> Array:
    r"""For each training point, the distance to its nearest *other* training point,
    :math:`\min_{j \ne i}\|x_i - x_j\|` (``(N,)``; needs ``N >= 2``)."""
    data = _validate.points("data", data)
    if data.shape[0] < 2:
        raise ValueError(f"data needs at least 2 points; got {data.shape[0]}")
    d2 = jnp.sum((data[:, None, :] - data[None, :, :]) ** 2, axis=-1)
    d2 = jnp.where(jnp.eye(data.shape[0], dtype=bool), jnp.inf, d2)
    return jnp.sqrt(jnp.min(d2, axis=1))
