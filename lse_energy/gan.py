r"""Generative adversarial networks: a logistic discriminator against a generator.

This module implements §30 of the lecture notes ("Generative
Adversarial Networks"). A discriminator :math:`D(x;\theta) = \sigma(a(x;\theta))`
(a small MLP with a scalar logit :math:`a`) gives the probability that
:math:`x` is real; a generator :math:`G(z;\varphi)` (another MLP) maps noise
:math:`z \sim p_z = \mathcal N(0, I)` to a sample. With the binary
cross-entropy :math:`\mathcal L(y, t) = -t \ln y - (1-t)\ln(1-y)` the notes
train, alternately,

.. math::

    \min_\theta \; \mathbb E_{\mathcal R, \mathcal F}\,[\mathcal L(D(x), t)],
    \qquad
    \min_\varphi \; \mathbb E_{z \sim p_z}\,[\mathcal L(D(G(z)), 1)]
    = \mathbb E_z[-\ln D(G(z))],

each by a gradient step :math:`\theta \leftarrow \theta - \kappa \nabla_\theta`,
:math:`\varphi \leftarrow \varphi - \kappa \nabla_\varphi` ("we use 1 to simulate
a targeted adversarial attack with target 1"). The generator's loss the notes
write is therefore the *non-saturating* one; the minimax one of the original
GAN, :math:`\min_\varphi \mathbb E_z \ln(1 - D(G(z)))`, is here too
(``generator_loss="minimax"``).

Where the log-sum-exp is. With :math:`y = \sigma(a)`,

.. math::

    \begin{aligned}
    -\ln \sigma(a) &= \operatorname{softplus}(-a) = \ln(e^0 + e^{-a}), \\
    -\ln(1 - \sigma(a)) &= \operatorname{softplus}(a) = \ln(e^0 + e^{a}),
    \end{aligned}

two-term log-sum-exps over the "parents" :math:`\{0, \mp a\}`. So the
discriminator's loss is :math:`L_D = -E` where :math:`E = -\sum_c \ln \sum_p
e^{\mathrm{sim}[c, p]}` is the book's energy (:func:`lse_energy.core.energy`)
with one child per sample and sims :math:`\{0, -a(x)\}` for a real sample,
:math:`\{0, a(G(z))\}` for a fake one (:func:`energy`): the discriminator
*ascends* the book's energy (the LSE enters as a log-partition, with the
opposite sign, as in softmax cross-entropy :math:`\mathrm{LSE}(0, a) - t a`).
The minimax generator minimises :math:`\mathbb E \ln(1 - D) = -\mathbb E\,
\mathrm{LSE}(0, a(G(z)))`: it *descends* the fake children's part of the same
energy. The non-saturating generator minimises :math:`\mathbb E\,\mathrm{LSE}(0,
-a(G(z)))`: a log-partition again, opposite sign.

Two slips in the notes as transcribed: the loss is printed
:math:`\mathbb E_{z \sim \mathcal R, \mathcal F}[\mathcal L(D(x;\theta), t)] +
\mathbb E_{z \sim p_z}[\mathcal L(D(G(z;\varphi), \varphi), 1)]`, where the
first expectation is over :math:`x \in \mathcal R \cup \mathcal F` and the
discriminator's parameters are :math:`\theta`, not :math:`\varphi`. The notes'
expectation over the pooled batch :math:`\mathcal R \cup \mathcal F` (equal
halves) is half of :func:`discriminator_loss`, which follows Goodfellow et al.
(2014): :math:`L_D = -V(D, G)`, :math:`V = \mathbb E_{\rm data}\ln D +
\mathbb E_z \ln(1 - D(G(z)))`. The factor changes no minimiser (it is absorbed
in :math:`\kappa`).

Data for the experiments: equal-weight isotropic Gaussian mixtures
(:func:`ring_centers`, :func:`sample_mixture`, :func:`mixture_log_density`),
whose density is known, and :func:`mode_coverage`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _validate, core

Array = jax.Array

__all__ = [
    "MLP",
    "Params",
    "FitExtras",
    "Coverage",
    "init_mlp",
    "init_params",
    "forward",
    "generate",
    "logit",
    "discriminate",
    "logistic_loss",
    "grad_logistic_loss_logits",
    "energy",
    "discriminator_loss",
    "generator_loss",
    "grad_generator_loss_logits",
    "optimal_logit",
    "ring_centers",
    "sample_mixture",
    "mixture_log_density",
    "mode_coverage",
    "fit",
]

GENERATOR_LOSSES = ("non_saturating", "minimax")


class MLP(NamedTuple):
    r"""A multilayer perceptron :math:`h_{l+1} = \tanh(h_l W_l + b_l)`, linear last layer.

    Attributes:
      weights: tuple of ``(n_l, n_{l+1})`` matrices :math:`W_l`.
      biases: tuple of ``(n_{l+1},)`` vectors :math:`b_l`.

    With one layer (no hidden layer) the map is affine, :math:`x = z W_0 + b_0`:
    a generator of Gaussian noise :math:`z \sim \mathcal N(0, I)` then has the
    known density :math:`\mathcal N(b_0, W_0^\top W_0)`.
    """

    weights: tuple
    biases: tuple


class Params(NamedTuple):
    r"""A GAN: generator :math:`G(z;\varphi)` and discriminator :math:`D(x;\theta) = \sigma(a(x;\theta))`.

    Attributes:
      generator: :class:`MLP` from noise ``(noise_dim,)`` to data ``(data_dim,)`` (:math:`\varphi`).
      discriminator: :class:`MLP` from data ``(data_dim,)`` to one logit :math:`a` (:math:`\theta`).
    """

    generator: MLP
    discriminator: MLP


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      generator_loss: ``(n_steps,)`` the generator's loss on its minibatch,
        before its update (``0`` where the generator is not trained).
      opt_state: ``(discriminator state, generator state)`` of the two
        optimizers, to continue training with another call.
      generator_grad_norm: ``(n_steps,)`` the Euclidean norm of
        :math:`\nabla_\varphi` of that loss over all generator parameters,
        the gradient the update used (``0`` where the generator is not trained).
      fake_prob: ``(n_steps,)`` the mean of :math:`D(G(z_m))` over the
        generator's minibatch, before its update: below 1/2 the discriminator
        rejects the fakes on average, where the minimax loss saturates
        (``0`` where the generator is not trained).
    """

    generator_loss: Array
    opt_state: Any
    generator_grad_norm: Array
    fake_prob: Array


class Coverage(NamedTuple):
    r"""Mode coverage of a sample (:func:`mode_coverage`).

    Attributes:
      counts: ``(K,)`` number of high-quality samples nearest to each mode.
      n_covered: modes whose count is at least ``min_fraction`` of all samples.
      high_quality: fraction of samples within ``n_std`` standard deviations of their nearest mode.
    """

    counts: Array
    n_covered: Array
    high_quality: Array


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


class _Layer(NamedTuple):
    """Layer ``i`` of an :class:`MLP` (``weights[i]``, ``biases[i]``), as :func:`_check_mlp` checks it."""

    weights: Array
    biases: Array


def _check_mlp(mlp, name: str, ends=("n_0", "n_L"), sizes=None) -> MLP:
    """``mlp``, layer ``i`` checked as ``{name}.layers[i]`` by ``_validate.params``: weights ``(n_i, n_{i+1})``,
    biases ``(n_{i+1},)``; ``ends`` names ``n_0`` and ``n_L``, ``sizes`` may fix them; one dtype throughout."""
    ws, bs = map(tuple, _validate.params(mlp, MLP, {}, name=name)[0])
    if len(ws) < 1 or len(ws) != len(bs):
        raise ValueError(f"{name} must have as many biases as weights (>= 1); got {len(ws)} and {len(bs)}")
    axes, layers = [ends[0], *(f"n_{i}" for i in range(1, len(ws))), ends[1]], []
    for i, layer in enumerate(map(_Layer, ws, bs)):
        shapes = {"weights": f"{axes[i]} {axes[i + 1]}", "biases": axes[i + 1]}
        layer, sizes = _validate.params(layer, _Layer, shapes, sizes, name=f"{name}.layers[{i}]")
        if layers and layer.weights.dtype != layers[0].weights.dtype:
            raise ValueError(f"{name}: every weight and bias must share one dtype; layer {i} does not")
        layers.append(layer)
    return MLP(*map(tuple, zip(*layers)))


def _check_params(params) -> Params:
    g, d = _validate.params(params, Params, {})[0]
    g = _check_mlp(g, "params.generator", ("noise_dim", "data_dim"))
    d = _check_mlp(d, "params.discriminator", ("data_dim", "logit"), {"data_dim": g.weights[-1].shape[1], "logit": 1})
    if g.weights[0].dtype != d.weights[0].dtype:
        raise ValueError("params.generator and params.discriminator must share one dtype")
    return Params(g, d)


def _dims(params: Params) -> tuple[int, int]:
    """(noise_dim, data_dim)."""
    return params.generator.weights[0].shape[0], params.discriminator.weights[0].shape[0]


def _check_logits(logits, labels):
    logits = _validate.array("logits", logits, 1)
    labels = _validate.array("labels", labels, 1)
    if labels.shape != logits.shape:
        raise ValueError(f"labels must have the shape of logits {logits.shape}; got {labels.shape}")
    if _validate.is_concrete(labels) and not bool(np.all((np.asarray(labels) >= 0) & (np.asarray(labels) <= 1))):
        raise ValueError("labels must lie in [0, 1]")
    return logits, labels.astype(logits.dtype)


def _check_kind(kind: str) -> str:
    _validate.choice("generator_loss", kind, GENERATOR_LOSSES)
    return kind


# ---------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------


def init_mlp(sizes, *, key, dtype=None) -> MLP:
    r"""An :class:`MLP` with layer sizes ``sizes = (n_0, ..., n_L)``: :math:`W_l \sim \mathcal N(0, 1/n_l)`, :math:`b_l
    = 0`.

    ``sizes`` has at least two positive integers; two give an affine map.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> mlp = gan.init_mlp((2, 3, 1), key=jax.random.key(0), dtype=jnp.float32)
      >>> [w.shape for w in mlp.weights]
      [(2, 3), (3, 1)]
    """
    _validate.key("key", key)
    if not isinstance(sizes, (tuple, list)) or len(sizes) < 2:
        raise ValueError(f"sizes must be a tuple of at least two layer sizes; got {sizes!r}")
    sizes = tuple(_validate.count("sizes", s, 1) for s in sizes)
    return _init_mlp(key, sizes, _validate.float_dtype("dtype", dtype))


@partial(jax.jit, static_argnums=(1, 2))
def _init_mlp(key, sizes, dtype) -> MLP:
    # One compiled program per architecture (called eagerly, as the chapters do).
    keys = jax.random.split(key, len(sizes) - 1)
    ws = tuple(core.random_normal(k, (m, n), dtype) / math.sqrt(m) for k, m, n in zip(keys, sizes[:-1], sizes[1:]))
    return MLP(ws, tuple(jnp.zeros(n, dtype) for n in sizes[1:]))


def init_params(
    noise_dim: int, data_dim: int, *, key, generator_hidden=(32, 32), discriminator_hidden=(32, 32), dtype=None
) -> Params:
    r""":class:`Params` of an MLP generator ``noise_dim -> hidden -> data_dim`` and discriminator
    ``data_dim -> hidden -> 1``.

    ``generator_hidden=()`` gives an affine generator (known Gaussian :math:`p_g`).
    Weights as :func:`init_mlp`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> params = gan.init_params(
      ...     2,
      ...     3,
      ...     key=jax.random.key(0),
      ...     generator_hidden=(8,),
      ...     discriminator_hidden=(8,),
      ... )
      >>> (
      ...     [w.shape for w in params.generator.weights],
      ...     gan.generate(params, jnp.ones((5, 2))).shape,
      ... )
      ([(2, 8), (8, 3)], (5, 3))
    """
    _validate.key("key", key)
    noise_dim = _validate.count("noise_dim", noise_dim, 1)
    data_dim = _validate.count("data_dim", data_dim, 1)
    for name, h in (("generator_hidden", generator_hidden), ("discriminator_hidden", discriminator_hidden)):
        if not isinstance(h, (tuple, list)):
            raise ValueError(f"{name} must be a tuple of hidden-layer sizes; got {h!r}")
        for s in h:
            _validate.count(name, s, 1)
    kg, kd = jax.random.split(key)
    return Params(
        init_mlp((noise_dim, *generator_hidden, data_dim), key=kg, dtype=dtype),
        init_mlp((data_dim, *discriminator_hidden, 1), key=kd, dtype=dtype),
    )


def _forward(mlp: MLP, x):
    for w, b in zip(mlp.weights[:-1], mlp.biases[:-1]):
        x = jnp.tanh(x @ w + b)
    return x @ mlp.weights[-1] + mlp.biases[-1]


def _rows(name, x, d, dtype):
    x = jnp.asarray(x)
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"{name} must have shape (N, {d}); got {x.shape}")
    return _validate.float_array(name, x).astype(dtype)


def forward(mlp: MLP, x) -> Array:
    r"""The MLP's output for rows ``x`` ``(N, n_0)``: ``(N, n_L)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> mlp = gan.init_mlp((2, 3, 1), key=jax.random.key(0), dtype=jnp.float32)
      >>> gan.forward(mlp, jnp.ones((4, 2))).shape
      (4, 1)
    """
    mlp = _check_mlp(mlp, "mlp")
    return _forward(mlp, _rows("x", x, mlp.weights[0].shape[0], mlp.weights[0].dtype))


def generate(params: Params, z) -> Array:
    r"""Samples :math:`G(z;\varphi)`, ``(N, data_dim)``, from noise ``z`` ``(N, noise_dim)`` (§30).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> params = gan.init_params(2, 2, key=jax.random.key(0), generator_hidden=(3,))
      >>> gan.generate(params, jnp.ones((4, 2))).shape
      (4, 2)
    """
    params = _check_params(params)
    z = _rows("z", z, _dims(params)[0], params.generator.weights[0].dtype)
    return _forward(params.generator, z)


@jax.jit
def _logit(params, x):
    return _forward(params.discriminator, x)[:, 0]


def logit(params: Params, x) -> Array:
    r"""The discriminator's logit :math:`a(x;\theta)`, ``(N,)``, so :math:`D = \sigma(a)`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> params = gan.init_params(2, 2, key=jax.random.key(0), generator_hidden=(3,))
      >>> gan.logit(params, jnp.ones((4, 2))).shape
      (4,)
    """
    params = _check_params(params)
    return _logit(params, _rows("x", x, _dims(params)[1], params.discriminator.weights[0].dtype))


def discriminate(params: Params, x) -> Array:
    r""":math:`D(x;\theta) = \sigma(a(x;\theta))`, "probability x is real" (§30), ``(N,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> params = gan.init_params(2, 2, key=jax.random.key(0), generator_hidden=(3,))
      >>> d = gan.discriminate(params, jnp.ones((4, 2)))
      >>> d.shape, bool(jnp.all((d > 0) & (d < 1)))
      ((4,), True)
    """
    return jax.nn.sigmoid(logit(params, x))


# ---------------------------------------------------------------------------
# Losses: log-sum-exps over {0, -+a}
# ---------------------------------------------------------------------------


def _softplus(a):
    """softplus(a) = ln(e^0 + e^a) = LSE(0, a), through core.logsumexp over the two parents {0, a}."""
    return core.logsumexp(jnp.stack([jnp.zeros_like(a), a], axis=-1)[..., None, :])[..., 0]


def logistic_loss(logits, labels) -> Array:
    r"""Mean binary cross-entropy :math:`\frac1N\sum_n \mathcal L(\sigma(a_n), t_n)`, the notes' :math:`\mathcal L(y,
    t)`.

    .. math::

        \mathcal L(\sigma(a), t) = -t\ln\sigma(a) - (1-t)\ln(1-\sigma(a))
        = \mathrm{LSE}(0, a) - t\,a,

    a two-class softmax cross-entropy with logits :math:`(0, a)`: the
    log-partition :math:`\mathrm{LSE}(0, a)` minus the target's logit, computed
    with :func:`lse_energy.core.logsumexp`. ``logits`` and ``labels`` are ``(N,)``;
    labels in :math:`[0, 1]`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> round(
      ...     float(gan.logistic_loss(jnp.zeros(4), jnp.array([1.0, 0.0, 1.0, 0.0]))),
      ...     3,
      ... )
      0.693
    """
    logits, labels = _check_logits(logits, labels)
    return jnp.mean(_softplus(logits) - labels * logits)


def grad_logistic_loss_logits(logits, labels) -> Array:
    r""":math:`\partial/\partial a_n` of :func:`logistic_loss`: :math:`(\sigma(a_n) - t_n)/N`.

    The softmax weight of parent :math:`a` among :math:`\{0, a\}` minus the target.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> g = gan.grad_logistic_loss_logits(jnp.zeros(2), jnp.array([1.0, 0.0]))
      >>> g.tolist()  # (sigma(0) - t) / N
      [-0.25, 0.25]
    """
    logits, labels = _check_logits(logits, labels)
    return (jax.nn.sigmoid(logits) - labels) / logits.shape[0]


def _energy(params, x, z):
    a_real = _logit(params, x)
    a_fake = _logit(params, _forward(params.generator, z))
    s = jnp.concatenate([-a_real, a_fake])
    return core.energy(jnp.stack([jnp.zeros_like(s), s], axis=-1))


def _xz(params, x, z):
    params = _check_params(params)
    noise_dim, data_dim = _dims(params)
    dtype = params.discriminator.weights[0].dtype
    return params, _rows("x", x, data_dim, dtype), _rows("z", z, noise_dim, dtype)


def energy(params: Params, x, z) -> Array:
    r"""The book's LSE energy of the discriminator's children, :math:`E = -\sum_c \ln \sum_p e^{\mathrm{sim}[c,p]}`.

    One child per sample, two parents each: sims :math:`\{0, -a(x_n)\}` for the
    real samples ``x`` ``(N, data_dim)`` and :math:`\{0, a(G(z_m))\}` for the fake
    ones from ``z`` ``(M, noise_dim)``, summed (:func:`lse_energy.core.energy`):

    .. math::

        \begin{aligned}
        E &= -\sum_n \operatorname{softplus}(-a(x_n)) - \sum_m \operatorname{softplus}(a(G(z_m))) \\
        &= \sum_n \ln D(x_n) + \sum_m \ln(1 - D(G(z_m))).
        \end{aligned}

    With equal batches (:math:`N = M`), :math:`E = -N\,` :func:`discriminator_loss`:
    the discriminator *ascends* :math:`E`; the minimax generator descends its
    second sum.

    Examples:
      A discriminator with zero weights says :math:`D = 1/2` to every sample, real or fake:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> key = jax.random.key(0)
      >>> params = gan.init_params(2, 2, key=key, generator_hidden=(3,))
      >>> blind = gan.MLP((jnp.zeros((2, 1)),), (jnp.zeros(1),))  # D = 1/2
      >>> params = params._replace(discriminator=blind)
      >>> x, z = jnp.ones((3, 2)), jnp.ones((4, 2))
      >>> round(float(gan.energy(params, x, z)), 3)  # -(3 + 4) ln(1/2)
      -4.852
    """
    return _energy(*_xz(params, x, z))


def _d_loss(params, x, z):
    a_real = _logit(params, x)
    a_fake = _logit(params, _forward(params.generator, z))
    return jnp.mean(_softplus(-a_real)) + jnp.mean(_softplus(a_fake))


def discriminator_loss(params: Params, x, z) -> Array:
    r"""The discriminator's loss :math:`L_D = -\frac1N\sum_n \ln D(x_n) - \frac1M\sum_m \ln(1 - D(G(z_m)))` (§30).

    That is :func:`logistic_loss` on the real rows ``x`` (label 1) plus on the
    fake rows :math:`G(z)` (label 0), i.e. :math:`-V(D, G)` of Goodfellow et al.
    (2014): twice the notes' expectation over the pooled batch when :math:`N = M`.
    Minimised over :math:`\theta`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> params = gan.init_params(2, 2, key=jax.random.key(0), generator_hidden=(3,))
      >>> blind = gan.MLP((jnp.zeros((2, 1)),), (jnp.zeros(1),))  # D = 1/2
      >>> params = params._replace(discriminator=blind)
      >>> round(
      ...     float(
      ...         gan.discriminator_loss(params, jnp.ones((3, 2)), jnp.ones((4, 2)))
      ...     ),
      ...     3,
      ... )
      1.386
    """
    return _d_loss(*_xz(params, x, z))


def _g_loss(params, z, kind):
    a = _logit(params, _forward(params.generator, z))
    if kind == "non_saturating":
        return jnp.mean(_softplus(-a))
    return -jnp.mean(_softplus(a))


def generator_loss(params: Params, z, generator_loss: str = "non_saturating") -> Array:
    r"""The generator's loss on noise ``z`` ``(M, noise_dim)``, minimised over :math:`\varphi` (§30).

    * ``"non_saturating"`` (the notes': :math:`\mathcal L(D(G(z)), 1)`):
      :math:`\frac1M\sum_m -\ln D(G(z_m)) = \frac1M \sum_m \mathrm{LSE}(0, -a_m)`.
    * ``"minimax"`` (Goodfellow et al. 2014): :math:`\frac1M\sum_m \ln(1 - D(G(z_m)))
      = -\frac1M\sum_m \mathrm{LSE}(0, a_m)`, the fake part of :math:`-L_D`.

    The minimax gradient vanishes where :math:`D(G(z)) \to 0` (the discriminator
    rejects the fakes); the non-saturating one does not (:func:`grad_generator_loss_logits`).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> params = gan.init_params(2, 2, key=jax.random.key(0), generator_hidden=(3,))
      >>> blind = gan.MLP((jnp.zeros((2, 1)),), (jnp.zeros(1),))  # D = 1/2
      >>> params = params._replace(discriminator=blind)
      >>> round(float(gan.generator_loss(params, jnp.ones((4, 2)))), 3)  # -ln(1/2)
      0.693
    """
    _check_kind(generator_loss)
    params = _check_params(params)
    z = _rows("z", z, _dims(params)[0], params.generator.weights[0].dtype)
    return _g_loss(params, z, generator_loss)


def grad_generator_loss_logits(logits, generator_loss: str = "non_saturating") -> Array:
    r""":math:`\partial/\partial a_m` of the generator's loss as a function of the fake logits ``(M,)``.

    Non-saturating: :math:`(\sigma(a_m) - 1)/M = -(1 - D)/M`; minimax:
    :math:`-\sigma(a_m)/M = -D/M`, the softmax weight of parent :math:`a_m` in
    :math:`\{0, a_m\}`, which vanishes when the discriminator rejects the sample
    (:math:`D \to 0`): the minimax loss saturates.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> g = gan.grad_generator_loss_logits(jnp.zeros(2))
      >>> g.shape, bool(jnp.all(g < 0))  # raising a fake logit lowers the loss
      ((2,), True)
    """
    _check_kind(generator_loss)
    logits = _validate.array("logits", logits, 1)
    p = jax.nn.sigmoid(logits)
    return ((p - 1) if generator_loss == "non_saturating" else -p) / logits.shape[0]


def optimal_logit(log_p_data, log_p_g) -> Array:
    r"""The optimal discriminator's logit :math:`a^* = \ln p_{\rm data} - \ln p_g`, so :math:`D^* = p_{\rm
    data}/(p_{\rm data} + p_g)`.

    Arrays of log-densities at the same points (any equal shapes).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> float(gan.optimal_logit(jnp.log(0.5), jnp.log(0.5)))  # D* = 1/2
      0.0
    """
    lp = _validate.float_array("log_p_data", log_p_data)
    lq = _validate.float_array("log_p_g", log_p_g)
    if lp.shape != lq.shape:
        raise ValueError(f"log_p_g must have the shape of log_p_data {lp.shape}; got {lq.shape}")
    return lp - lq


# ---------------------------------------------------------------------------
# Data: equal-weight isotropic Gaussian mixtures
# ---------------------------------------------------------------------------


def ring_centers(n_modes: int = 8, radius: float = 2.0, dtype=None) -> Array:
    r"""``(n_modes, 2)`` centres :math:`r(\cos 2\pi k/K, \sin 2\pi k/K)` on a ring.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> c = gan.ring_centers(4, dtype=jnp.float32)
      >>> c.shape, bool(jnp.allclose(jnp.linalg.norm(c, axis=1), 2.0))
      ((4, 2), True)
    """
    n_modes = _validate.count("n_modes", n_modes, 1)
    radius = _validate.positive("radius", radius)
    t = 2 * jnp.pi * jnp.arange(n_modes, dtype=_validate.float_dtype("dtype", dtype)) / n_modes
    return radius * jnp.stack([jnp.cos(t), jnp.sin(t)], axis=1)


def _check_mixture(centers, std):
    centers = _validate.points("centers", centers)
    return centers, _validate.positive("std", std)


def sample_mixture(centers, std: float, n_samples: int, *, key) -> Array:
    r"""``(n_samples, d)`` draws from :math:`\frac1K\sum_k \mathcal N(\mu_k, \mathrm{std}^2 I)`, ``centers``
    ``(K, d)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> c = gan.ring_centers(4, dtype=jnp.float32)
      >>> gan.sample_mixture(c, 0.1, 8, key=jax.random.key(0)).shape
      (8, 2)
    """
    _validate.key("key", key)
    centers, std = _check_mixture(centers, std)
    n_samples = _validate.count("n_samples", n_samples, 1)
    return _sample_mixture(centers, std, n_samples, key)


@partial(jax.jit, static_argnums=2)
def _sample_mixture(centers, std, n_samples, key):
    # One compiled program per shape (called eagerly, as the chapters do).
    kc, kn = jax.random.split(key)
    k = jax.random.randint(kc, (n_samples,), 0, centers.shape[0])
    return centers[k] + std * core.random_normal(kn, (n_samples, centers.shape[1]), centers.dtype)


def mixture_log_density(x, centers, std: float) -> Array:
    r""":math:`\ln \frac1K\sum_k \mathcal N(x; \mu_k, \mathrm{std}^2 I)` at rows ``x`` ``(N, d)``: ``(N,)``.

    A log-sum-exp over components (:func:`lse_energy.core.logsumexp`), the data's known density.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> c = gan.ring_centers(4, dtype=jnp.float32)
      >>> gan.mixture_log_density(jnp.zeros((3, 2)), c, 0.1).shape
      (3,)
    """
    centers, std = _check_mixture(centers, std)
    x = _validate.points("x", x, centers.shape[1], "centers")
    d = centers.shape[1]
    sq = jnp.sum((x[:, None, :] - centers[None, :, :]) ** 2, axis=-1)
    log_n = -sq / (2 * std**2) - d * (math.log(std) + 0.5 * math.log(2 * math.pi)) - math.log(centers.shape[0])
    return core.logsumexp(log_n)


def mode_coverage(samples, centers, std: float, *, n_std: float = 3.0, min_fraction: float = 0.02) -> Coverage:
    r"""Which modes a sample covers.

    A sample is *high quality* if it lies within ``n_std`` standard deviations
    (Euclidean distance :math:`\le` ``n_std * std``) of its nearest centre; a mode is
    *covered* if at least ``min_fraction`` of all samples are high-quality samples
    nearest to it.

    Returns:
      a :class:`Coverage`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gan
      >>> c = gan.ring_centers(4, dtype=jnp.float32)
      >>> x = jnp.repeat(c[:2], 5, axis=0)  # samples on two of the four modes
      >>> cov = gan.mode_coverage(x, c, 0.1)
      >>> int(cov.n_covered), float(cov.high_quality)
      (2, 1.0)
    """
    centers, std = _check_mixture(centers, std)
    samples = _validate.points("samples", samples, centers.shape[1], "centers")
    n_std = _validate.positive("n_std", n_std)
    min_fraction = _validate.open_unit("min_fraction", min_fraction)
    return _mode_coverage(samples, centers, std, n_std, min_fraction)


@jax.jit
def _mode_coverage(samples, centers, std, n_std, min_fraction) -> Coverage:
    dist = jnp.sqrt(jnp.sum((samples[:, None, :] - centers[None, :, :]) ** 2, axis=-1))
    near = jnp.argmin(dist, axis=1)
    good = jnp.min(dist, axis=1) <= n_std * std
    counts = jnp.sum(good[:, None] & (near[:, None] == jnp.arange(centers.shape[0])[None, :]), axis=0)
    n_covered = jnp.sum(counts >= min_fraction * samples.shape[0])
    return Coverage(counts, n_covered, jnp.mean(good.astype(centers.dtype)))


# ---------------------------------------------------------------------------
# Alternating training
# ---------------------------------------------------------------------------


def _round(carry, k, data, *, d_optimizer, g_optimizer, batch_size, n_discriminator_steps, kind, train_generator):
    # one step of fit (a round of _descent.rounds): n_discriminator_steps discriminator updates, then the generator's
    p, (ds, gs) = carry
    noise_dim = p.generator.weights[0].shape[0]
    dtype = data.dtype

    def d_update(carry, k):
        p, ds = carry
        ki, kz = jax.random.split(k)
        x = data[jax.random.randint(ki, (batch_size,), 0, data.shape[0])]
        z = core.random_normal(kz, (batch_size, noise_dim), dtype)
        loss, g = jax.value_and_grad(lambda th: _d_loss(p._replace(discriminator=th), x, z))(p.discriminator)
        discriminator, ds = _descent.step(d_optimizer, g, ds, p.discriminator)
        return (p._replace(discriminator=discriminator), ds), loss

    kd, kg = jax.random.split(k)
    (p, ds), d_losses = jax.lax.scan(d_update, (p, ds), jax.random.split(kd, n_discriminator_steps))
    if train_generator:
        z = core.random_normal(kg, (batch_size, noise_dim), dtype)
        g_val, g = jax.value_and_grad(lambda ph: _g_loss(p._replace(generator=ph), z, kind))(p.generator)
        g_norm = jnp.sqrt(sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(g)))
        d_fake = jnp.mean(jax.nn.sigmoid(_logit(p, _forward(p.generator, z))))
        generator, gs = _descent.step(g_optimizer, g, gs, p.generator)
        p = p._replace(generator=generator)
    else:
        g_val = g_norm = d_fake = jnp.zeros((), dtype)
    return (p, (ds, gs)), (d_losses[-1], g_val, g_norm, d_fake)


def _result(carry, values):
    p, opt_state = carry
    d_trace, g_trace, n_trace, f_trace = values
    return p, d_trace, FitExtras(g_trace, opt_state, n_trace, f_trace), d_trace


def fit(
    params: Params,
    x,
    *,
    key,
    d_optimizer,
    g_optimizer,
    n_steps: int,
    batch_size: int = 128,
    n_discriminator_steps: int = 1,
    generator_loss: str = "non_saturating",
    train_generator: bool = True,
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Alternating GAN training, §30 of the lecture notes.

    Each of ``n_steps`` steps takes ``n_discriminator_steps`` discriminator steps, each on a
    fresh minibatch of ``batch_size`` real rows (drawn from ``x`` with
    replacement) and ``batch_size`` fakes :math:`G(z)`, :math:`z \sim \mathcal N(0, I)`,
    with ``d_optimizer`` on :func:`discriminator_loss`; then (if
    ``train_generator``) one step of ``g_optimizer`` on :func:`generator_loss` of
    fresh noise, the gradient propagating through :math:`D` down to :math:`G`.
    ``optax.sgd(kappa)`` for both is the notes' :math:`\theta \leftarrow \theta -
    \kappa\nabla_\theta`, :math:`\varphi \leftarrow \varphi - \kappa\nabla_\varphi`.
    With ``train_generator=False`` the generator is fixed and only :math:`D`
    learns (it then tends to :math:`D^* = p_{\rm data}/(p_{\rm data} + p_g)`).
    Jitted, one ``lax.scan`` (``_descent.rounds``); compiled once per configuration of the optimizers.
    With concrete arguments it validates them; it may also be ``jax.vmap``-ed over
    ``params`` and ``key`` (return arrays only, e.g. ``fit(...).params``).

    Args:
      params: initial :class:`Params`; its dtype is the run's.
      x: ``(N, data_dim)`` real samples (cast to the params' dtype).
      key: a ``jax.random`` key (minibatches and noise).
      d_optimizer, g_optimizer: optax ``GradientTransformation`` s.
      n_steps, batch_size, n_discriminator_steps: integers ``>= 1``.
      generator_loss: ``"non_saturating"`` (the notes') or ``"minimax"``.
      train_generator: ``False`` trains the discriminator only.
      opt_state: ``(d_state, g_state)`` from a previous run's ``extras``, or
        ``None`` to initialise both.
      progress: show a ``tqdm.auto`` bar of the steps.

    Returns:
      :class:`~lse_energy.core.FitResult`: the trained :class:`Params`;
      ``energies``, ``(n_steps,)``, the discriminator loss on the step's last
      discriminator minibatch before its update; ``n_iter = n_steps``;
      ``converged = None``; ``extras`` a :class:`FitExtras`.

    Raises:
      ValueError: on bad arguments, or when training diverged (non-finite
        parameters or losses; the message names the first step).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import gan
      >>> params = gan.init_params(
      ...     2,
      ...     2,
      ...     key=jax.random.key(0),
      ...     generator_hidden=(8,),
      ...     discriminator_hidden=(8,),
      ... )
      >>> # a ring of 4 modes
      >>> x = gan.sample_mixture(gan.ring_centers(4), 0.1, 64, key=jax.random.key(1))
      >>> opts = dict(
      ...     d_optimizer=optax.sgd(0.05),
      ...     g_optimizer=optax.sgd(0.05),
      ...     n_steps=5,
      ...     batch_size=16,
      ... )
      >>> result = gan.fit(params, x, key=jax.random.key(2), **opts)
      >>> result.energies.shape, result.extras.fake_prob.shape
      ((5,), (5,))
    """
    _validate.key("key", key)
    params = _check_params(params)
    dtype = params.discriminator.weights[0].dtype
    x = _rows("x", x, _dims(params)[1], dtype)
    _validate.optimizer(d_optimizer, "d_optimizer")
    _validate.optimizer(g_optimizer, "g_optimizer")
    n_steps = _validate.count("n_steps", n_steps, 1)
    batch_size = _validate.count("batch_size", batch_size, 1)
    n_discriminator_steps = _validate.count("n_discriminator_steps", n_discriminator_steps, 1)
    kind = _check_kind(generator_loss)
    _validate.flag("train_generator", train_generator)
    if opt_state is None:
        opt_state = (d_optimizer.init(params.discriminator), g_optimizer.init(params.generator))
    round_ = partial(
        _round,
        d_optimizer=d_optimizer,
        g_optimizer=g_optimizer,
        batch_size=batch_size,
        n_discriminator_steps=n_discriminator_steps,
        kind=kind,
        train_generator=bool(train_generator),
    )
    return _descent.rounds(
        "gan.fit",
        round_,
        (params, opt_state),
        n_rounds=n_steps,
        key=key,
        args=x,
        result=_result,
        hint="lower the optimizers' learning rates",
        progress=progress,
    )
