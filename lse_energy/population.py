r"""Population coding, transformations and dynamics: the Neural Engineering Framework.

This module implements §26-28 of the lecture notes ("Population Coding",
"Transformations", "Dynamics"), which follow the Neural Engineering Framework (NEF) of
Eliasmith and Anderson (2003). The notes' convention is kept: a stimulus is a *row*
:math:`x \in \mathbb{R}^{1 \times d}`, a batch of ``M`` stimuli stacks the rows into
:math:`X \in \mathbb{R}^{M \times d}`, and the activities of ``N`` neurons are the rows of
:math:`H \in \mathbb{R}^{M \times N}`.

**Encoding.** Neuron :math:`i` has an encoder (preferred direction) :math:`e_i`, the
:math:`i`-th column of :math:`E \in \mathbb{R}^{d \times N}`, a gain :math:`\alpha_i` and a
bias :math:`\beta_i`; its input current and rate are

.. math:: J_i(x) = \alpha_i\, x e_i + \beta_i, \qquad H_{mi} = G(J_i(x_m)),

with the neuron nonlinearity :math:`G` passed in as a callable (the book passes the LIF
rate curve :func:`lse_energy.lif.rate`; this module never imports another model).

**Decoding (§26).** The linear decoder :math:`D \in \mathbb{R}^{N \times d'}` minimises
:math:`\frac{1}{2M}\|HD - T\|_F^2` for targets :math:`T` (:math:`T = X` to represent
:math:`x`, :math:`T = f(X)` to compute a function). Averaging the loss over noise
:math:`\epsilon` added to the activities (zero mean, independent entries of variance
:math:`\sigma^2`, so :math:`\mathbb{E}[\epsilon^\top\epsilon] = M\sigma^2 I`) gives
:math:`\|HD - T\|_F^2 + M\sigma^2\|D\|_F^2` and the regularised decoder

.. math:: D^* = (H^\top H + M\sigma^2 I)^{-1} H^\top T

(:func:`decoders`). The notes write :math:`\epsilon^\top\epsilon \approx \sigma^2 I`: their
:math:`\sigma^2` is the noise power summed over the ``M`` samples, ours is per sample.

**Transformations (§27).** Population A computes :math:`f` for population B through the
weights :math:`W = D_f E_B \in \mathbb{R}^{N_A \times N_B}` (:func:`connection_weights`):
B's currents are :math:`\alpha_B \odot (H_A W) + \beta_B`, the same as decoding
:math:`\hat f = H_A D_f` and re-encoding it.

**Dynamics (§28).** A recurrent population whose decoded signal passes through a
first-order synapse with time constant :math:`\tau` (the notes' :math:`\tau_s`) obeys
:math:`\tau \dot y = -y + \hat f(y) + \tilde u`. Choosing :math:`\hat f(y) = yA'^\top`
and :math:`\tilde u = uB'^\top` with the NEF mapping :math:`A' = \tau A + I`,
:math:`B' = \tau B` (:func:`nef_matrices`) gives :math:`\dot y = yA^\top + uB^\top`
(:func:`simulate`, with the notes' second, membrane time constant :math:`\tau_m` as an
option).

**Bayesian decoding.** For Poisson spike counts :math:`n \in \mathbb{R}^N` with means
:math:`F_{ji} = f_i(s_j)` at candidate stimuli :math:`s_1, \dots, s_G`,
:math:`\ln p(n \mid s_j) = \mathrm{sim}(n, s_j) - \sum_i \ln n_i!` with the similarity
:math:`\mathrm{sim}(n, s_j) = \sum_i n_i \ln F_{ji} - \sum_i F_{ji}`, linear in the counts.
Under a uniform prior the posterior over the grid is the softmax of the similarities and
the negative log-evidence is, up to constants, the log-sum-exp energy of ``core`` with the
response as the child and the stimuli as the parents (:func:`energy`). This is the only
place in §26-28 where the LSE appears: the least-squares decoders, the transformations and
the dynamics contain none, and nothing here is descended on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate, core

Array = jax.Array

__all__ = [
    "Params",
    "Trajectory",
    "activities",
    "bayes_decode",
    "connection_weights",
    "currents",
    "decode",
    "decoders",
    "decoding_loss",
    "energy",
    "feedforward",
    "grad_decoding_loss_decoders",
    "grad_counts",
    "init_params",
    "log_evidence",
    "nef_matrices",
    "posterior",
    "sim",
    "simulate",
]


class Params(NamedTuple):
    r"""A population of ``N`` neurons representing a ``d``-dimensional stimulus (§26).

    .. math:: J_i(x) = \alpha_i\, x e_i + \beta_i

    Attributes:
      encoders: ``(d, N)`` unit-norm columns :math:`e_i` (preferred directions).
      gains: ``(N,)`` positive gains :math:`\alpha_i`.
      biases: ``(N,)`` biases :math:`\beta_i`.
    """

    encoders: Array
    gains: Array
    biases: Array


class Trajectory(NamedTuple):
    r"""The result of :func:`simulate`.

    Attributes:
      y: ``(n_steps + 1, d)`` the synaptically filtered state :math:`y(t_k)`, ``y[0] = y0``.
      decoded: ``(n_steps + 1, d)`` the population's decoded estimate
        :math:`\hat x(t_k) = v(t_k) D` at the same times.
    """

    y: Array
    decoded: Array


def _params(params) -> Params:
    return _validate.params(params, Params, {"encoders": "d N", "gains": "N", "biases": "N"})[0]


def _nonlinearity(fn):
    if not callable(fn):
        raise ValueError("nonlinearity must be callable (e.g. lse_energy.lif.rate)")  # noqa: TRY004


def _range(name, value, low=None, high=None):
    value = _validate.real_pair(name, value, strict=False)
    if (low is not None and value[0] <= low) or (high is not None and value[1] >= high):
        raise ValueError(f"{name} must lie in ({low}, {high}); got {value!r}")
    return value


def init_params(
    d: int,
    n_neurons: int,
    *,
    key,
    intercepts=(-0.95, 0.95),
    max_currents=(2.0, 10.0),
    threshold: float = 1.0,
    dtype=None,
) -> Params:
    r"""A random population in the NEF style (§26 of the lecture notes).

    Encoders are uniform on the unit sphere (:math:`\pm 1` in one dimension). Each neuron
    gets an intercept :math:`c_i` (the value of :math:`x e_i` at which its current reaches
    ``threshold``) and a current :math:`J^{\max}_i` at :math:`x e_i = 1`, uniform in the given
    ranges, so :math:`\alpha_i = (J^{\max}_i - J_{th}) / (1 - c_i)` and
    :math:`\beta_i = J_{th} - \alpha_i c_i`.

    Args:
      d: stimulus dimension.
      n_neurons: number of neurons ``N``.
      key: a ``jax.random`` key.
      intercepts: range of :math:`c_i`, inside ``(-1, 1)``.
      max_currents: range of :math:`J^{\max}_i`, above ``threshold``.
      threshold: the current at which the nonlinearity starts firing (1 for :func:`lse_energy.lif.rate`).
      dtype: a floating dtype (default: JAX's default float).

    Returns:
      the :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import lif, population
      >>> params = population.init_params(1, 8, key=jax.random.key(0))  # d = 1, N = 8
      >>> rates = population.activities(params, jnp.linspace(-1.0, 1.0, 5), lif.rate)
      >>> params.encoders.shape, rates.shape, bool(jnp.all(rates >= 0))
      ((1, 8), (5, 8), True)
    """
    _validate.key("key", key)
    d = _validate.count("d", d)
    n = _validate.count("n_neurons", n_neurons)
    lo_c, hi_c = _range("intercepts", intercepts, -1.0, 1.0)
    threshold = _validate.positive("threshold", threshold)
    lo_j, hi_j = _range("max_currents", max_currents, threshold)
    dtype = _validate.float_dtype("dtype", dtype)
    k1, k2, k3 = jax.random.split(key, 3)
    enc = core.random_normal(k1, (d, n), dtype=dtype)
    enc = enc / jnp.linalg.norm(enc, axis=0, keepdims=True)
    c = core.random_uniform(k2, (n,), dtype=dtype, minval=lo_c, maxval=hi_c)
    jmax = core.random_uniform(k3, (n,), dtype=dtype, minval=lo_j, maxval=hi_j)
    gains = (jmax - threshold) / (1 - c)
    return Params(enc, gains, threshold - gains * c)


def _stimuli(name, x, d):
    x = _validate.float_array(name, x, 1)
    if x.ndim == 1:
        x = x[:, None] if d == 1 else x[None, :]
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"{name} must have shape (M, {d}) (or (M,) when d = 1); got {x.shape}")
    return x


def currents(params: Params, x) -> Array:
    r"""Input currents :math:`J = \alpha \odot (XE) + \beta`, shape ``(M, N)`` (§26).

    Args:
      params: the population.
      x: ``(M, d)`` stimuli (``(M,)`` when ``d = 1``).

    Returns:
      the ``(M, N)`` currents.
    """
    params = _params(params)
    x = _stimuli("x", x, params.encoders.shape[0])
    return params.gains * (x @ params.encoders) + params.biases


def activities(params: Params, x, nonlinearity: Callable) -> Array:
    r"""Rates :math:`H = G(J(X))`, shape ``(M, N)`` (§26): the tuning curves at the stimuli.

    Args:
      params: the population.
      x: ``(M, d)`` stimuli (``(M,)`` when ``d = 1``).
      nonlinearity: elementwise :math:`G`, e.g. :func:`lse_energy.lif.rate`.

    Returns:
      the ``(M, N)`` activities.
    """
    _nonlinearity(nonlinearity)
    return nonlinearity(currents(params, x))


def _acts_targets(h, targets):
    h = _validate.array("activities", h, 2)
    t = _validate.float_array("targets", targets, 1)
    if t.shape[0] != h.shape[0] or t.ndim > 2:
        raise ValueError(f"targets must have shape ({h.shape[0]},) or ({h.shape[0]}, k); got {t.shape}")
    return h, t


def decoders(activities, targets, sigma) -> Array:
    r"""The regularised least-squares decoder :math:`(H^\top H + M\sigma^2 I)^{-1} H^\top T` (§26).

    It minimises :math:`\|HD - T\|_F^2 + M\sigma^2\|D\|_F^2`, the expected squared error
    when noise of variance :math:`\sigma^2` is added to every activity (ridge regression
    with :math:`\alpha = M\sigma^2` and no intercept).

    Args:
      activities: ``(M, N)`` activities :math:`H`.
      targets: ``(M,)`` or ``(M, k)`` targets :math:`T`.
      sigma: noise standard deviation (same units as the activities), ``> 0``.

    Returns:
      the decoders, ``(N,)`` or ``(N, k)`` like the targets.
    """
    h, t = _acts_targets(activities, targets)
    sigma = _validate.positive("sigma", sigma)
    m, n = h.shape
    gram = h.T @ h + (m * sigma**2) * jnp.eye(n, dtype=h.dtype)
    return jnp.linalg.solve(gram, h.T @ t.astype(h.dtype))


def decode(activities, decoders) -> Array:
    r"""The decoded estimate :math:`\hat X = HD` (§26)."""
    h = _validate.array("activities", activities, 2)
    d = _validate.float_array("decoders", decoders, 1)
    if d.shape[0] != h.shape[1] or d.ndim > 2:
        raise ValueError(f"decoders must have shape ({h.shape[1]},) or ({h.shape[1]}, k); got {d.shape}")
    return h @ d


def decoding_loss(decoders, activities, targets, sigma) -> Array:
    r"""The noise-averaged loss :math:`\frac{1}{2M}(\|HD - T\|_F^2 + M\sigma^2\|D\|_F^2)` (§26).

    Its minimiser is :func:`decoders`; with ``sigma = 0`` it is the notes' plain MSE.
    """
    h, t = _acts_targets(activities, targets)
    sigma = _validate.nonnegative("sigma", sigma)
    r = decode(h, decoders) - t
    m = h.shape[0]
    return (jnp.sum(r**2) + m * sigma**2 * jnp.sum(jnp.asarray(decoders) ** 2)) / (2 * m)


def grad_decoding_loss_decoders(decoders, activities, targets, sigma) -> Array:
    r"""Gradient :math:`\frac{1}{M}\big(H^\top(HD - T) + M\sigma^2 D\big)` of :func:`decoding_loss`."""
    h, t = _acts_targets(activities, targets)
    sigma = _validate.nonnegative("sigma", sigma)
    d = jnp.asarray(decoders)
    m = h.shape[0]
    return (h.T @ (decode(h, d) - t) + m * sigma**2 * d) / m


def connection_weights(decoders, post: Params) -> Array:
    r"""The weights :math:`W = D_f E_B` from population A to population B (§27).

    Args:
      decoders: ``(N_A, d_B)`` decoders of A for the function :math:`f` (``(N_A,)`` when ``d_B = 1``).
      post: population B (its encoders are ``(d_B, N_B)``).

    Returns:
      the ``(N_A, N_B)`` weights, of rank at most ``d_B``.
    """
    post = _params(post)
    d = _validate.float_array("decoders", decoders, 1)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2 or d.shape[1] != post.encoders.shape[0]:
        raise ValueError(f"decoders must have shape (N_A, {post.encoders.shape[0]}); got {d.shape}")
    return d @ post.encoders


def feedforward(pre_activities, weights, post: Params, nonlinearity: Callable) -> Array:
    r"""B's activities :math:`G(\alpha_B \odot (H_A W) + \beta_B)` driven through ``weights`` (§27)."""
    post = _params(post)
    h = _validate.array("pre_activities", pre_activities, 2)
    w = _validate.matrix("weights", weights, post.encoders.shape[1], "N_post")
    if w.shape[0] != h.shape[1]:
        raise ValueError(f"weights must have shape ({h.shape[1]}, N_post); got {w.shape}")
    _nonlinearity(nonlinearity)
    return nonlinearity(post.gains * (h @ w) + post.biases)


def nef_matrices(a, b, tau) -> tuple[Array, Array]:
    r"""The NEF mapping :math:`A' = \tau A + I`, :math:`B' = \tau B` (§28).

    With a first-order synapse of time constant :math:`\tau`,
    :math:`\tau\dot y = -y + yA'^\top + uB'^\top` is exactly :math:`\dot y = yA^\top + uB^\top`.

    Args:
      a: ``(d, d)`` dynamics matrix :math:`A`.
      b: ``(d, k)`` input matrix :math:`B`.
      tau: synaptic time constant, ``> 0``.

    Returns:
      the pair ``(A', B')``.
    """
    a = _validate.array("a", a, 2)
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"a must be square; got {a.shape}")
    b = _validate.array("b", b, 2)
    if b.shape[0] != a.shape[0]:
        raise ValueError(f"b must have shape ({a.shape[0]}, k); got {b.shape}")
    tau = _validate.positive("tau", tau)
    return tau * a + jnp.eye(a.shape[0], dtype=a.dtype), tau * b


@partial(jax.jit, static_argnames=("nonlinearity", "adiabatic"))
def _simulate(params, nonlinearity, dec, a_prime, b_prime, u, y0, tau, dt, tau_m, adiabatic):
    def rates(y):
        return nonlinearity(params.gains * (y @ params.encoders) + params.biases)

    def step(carry, u_k):
        y, v = carry
        v = rates(y) if adiabatic else v
        xhat = v @ dec
        y_next = y + (dt / tau) * (-y + xhat @ a_prime.T + u_k @ b_prime.T)
        v_next = v if adiabatic else v + (dt / tau_m) * (rates(y) - v)
        return (y_next, v_next), (y_next, xhat)

    v0 = rates(y0)
    (y_last, v_last), (ys, xhats) = jax.lax.scan(step, (y0, v0), u)
    x_last = (rates(y_last) if adiabatic else v_last) @ dec
    return (jnp.concatenate([y0[None], ys]), jnp.concatenate([xhats, x_last[None]]))


def simulate(
    params: Params, nonlinearity: Callable, decoders, a_prime, b_prime, u, y0, *, tau, dt, tau_m=None
) -> Trajectory:
    r"""Euler simulation of a recurrent population with synaptic filtering (§28).

    The state is the synaptically filtered decoded signal :math:`y` (the notes' current
    :math:`s = yE` in stimulus coordinates); with ``tau_m=None`` the activities are at their
    equilibrium :math:`v = G(J(y))` (the notes' :math:`\tau_m \ll \tau_s`), otherwise they
    follow :math:`\tau_m \dot v = -v + G(J(y))`:

    .. math::

        y_{k+1} = y_k + \frac{\Delta t}{\tau}\big(-y_k + \hat x_k A'^\top + u_k B'^\top\big),
        \qquad \hat x_k = v_k D .

    With :math:`A', B'` from :func:`nef_matrices` and identity decoders :math:`D` this
    approximates :math:`\dot y = yA^\top + uB^\top`.

    Args:
      params: the recurrent population (``d``-dimensional).
      nonlinearity: elementwise rate function :math:`G` (a hashable callable; it is static under jit).
      decoders: ``(N, d)`` identity decoders :math:`D` of the population.
      a_prime: ``(d, d)`` recurrent map :math:`A'`.
      b_prime: ``(d, k)`` input map :math:`B'`.
      u: ``(n_steps, k)`` input, held constant over each step.
      y0: ``(d,)`` initial state.
      tau: synaptic time constant :math:`\tau`.
      dt: Euler step, at most ``tau`` (and at most ``tau_m``).
      tau_m: membrane (activity) time constant, or ``None`` for instantaneous activities.

    Returns:
      a :class:`Trajectory`; raises ``ValueError`` if the run became non-finite.
    """
    params = _params(params)
    _nonlinearity(nonlinearity)
    d, n = params.encoders.shape
    dec = _validate.matrix("decoders", decoders, d, "d")
    if dec.shape[0] != n:
        raise ValueError(f"decoders must have shape ({n}, {d}); got {dec.shape}")
    a_prime = _validate.array("a_prime", a_prime, 2)
    if a_prime.shape != (d, d):
        raise ValueError(f"a_prime must have shape ({d}, {d}); got {a_prime.shape}")
    b_prime = _validate.array("b_prime", b_prime, 2)
    if b_prime.shape[0] != d:
        raise ValueError(f"b_prime must have shape ({d}, k); got {b_prime.shape}")
    u = _validate.matrix("u", u, b_prime.shape[1], "k")
    y0 = _validate.array("y0", y0, 1)
    if y0.shape != (d,):
        raise ValueError(f"y0 must have shape ({d},); got {y0.shape}")
    tau = _validate.positive("tau", tau)
    dt = _validate.positive("dt", dt)
    if dt > tau:
        raise ValueError(f"dt must be at most tau (explicit Euler); got dt={dt}, tau={tau}")
    if tau_m is not None:
        tau_m = _validate.positive("tau_m", tau_m)
        if dt > tau_m:
            raise ValueError(f"dt must be at most tau_m (explicit Euler); got dt={dt}, tau_m={tau_m}")
    dtype = y0.dtype
    cast = partial(jnp.asarray, dtype=dtype)
    ys, xs = _simulate(
        Params(*map(cast, params)),
        nonlinearity,
        cast(dec),
        cast(a_prime),
        cast(b_prime),
        cast(u),
        y0,
        tau,
        dt,
        1.0 if tau_m is None else tau_m,
        tau_m is None,
    )
    out = Trajectory(ys.astype(dtype), xs.astype(dtype))
    _validate.require_finite("population.simulate", out, steps=ys, hint="reduce the input or dt")
    return out


# ---------------------------------------------------------------------------
# Bayesian decoding of Poisson spike counts: the log-sum-exp energy
# ---------------------------------------------------------------------------


def _counts_rates(counts, expected_counts):
    f = _validate.array("expected_counts", expected_counts, 2)
    n = jnp.asarray(counts)
    if jnp.issubdtype(n.dtype, jnp.integer) or n.dtype == jnp.bool_:
        n = n.astype(f.dtype)  # spike counts are discrete data: integer arrays are cast exactly
    n = _validate.float_array("counts", n, 1)
    if n.ndim > 2 or n.shape[-1] != f.shape[1]:
        raise ValueError(f"counts must have shape ({f.shape[1]},) or (M, {f.shape[1]}); got {n.shape}")
    if _validate.is_concrete(n) and bool(np.any(np.asarray(n) < 0)):
        raise ValueError("counts must be >= 0")
    if _validate.is_concrete(f) and not bool(np.all(np.asarray(f) > 0)):
        raise ValueError("expected_counts must be > 0 (add a baseline rate to silent neurons)")
    return n, f


def sim(counts, expected_counts) -> Array:
    r"""Similarities :math:`\mathrm{sim}(n, s_j) = \sum_i n_i \ln F_{ji} - \sum_i F_{ji}`.

    The Poisson log-likelihood :math:`\ln p(n \mid s_j)` without its :math:`-\sum_i \ln n_i!`,
    which does not depend on the stimulus.

    Args:
      counts: ``(N,)`` or ``(M, N)`` spike counts :math:`n`, nonnegative; an integer array is cast to
        the dtype of ``expected_counts``, and real values are allowed (the continuous relaxation).
      expected_counts: ``(G, N)`` positive mean counts :math:`F_{ji} = f_i(s_j)\,T_{\rm win}`.

    Returns:
      the similarities, ``(G,)`` or ``(M, G)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import population
      >>> expected = jnp.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
      >>> [
      ...     round(s, 3)
      ...     for s in population.sim(jnp.array([2.0, 0.0, 1.0]), expected).tolist()
      ... ]  # 0 - 3, 3 ln 2 - 6
      [-3.0, -3.921]
    """
    n, f = _counts_rates(counts, expected_counts)
    return n.astype(f.dtype) @ jnp.log(f).T - jnp.sum(f, axis=1)


def energy(counts, expected_counts) -> Array:
    r"""The LSE energy :math:`E = -\sum_m \ln \sum_j \exp \mathrm{sim}(n_m, s_j)`.

    Each response :math:`n_m` is a child and the ``G`` candidate stimuli are its parents.
    :math:`E = -\sum_m \ln p(n_m) - \sum_{m,i}\ln n_{mi}! - M\ln G` for a uniform prior over
    the grid (:func:`log_evidence`).

    Examples:
      Two candidate stimuli that predict the same mean counts explain any response equally well:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import population
      >>> # G = 2 stimuli, N = 3 neurons, one spike each on average
      >>> expected = jnp.ones((2, 3))
      >>> counts = jnp.array([[2.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # M = 2 responses
      >>> # every sim is -3: 2 (3 - ln 2)
      >>> round(float(population.energy(counts, expected)), 3)
      4.614
    """
    s = sim(counts, expected_counts)
    return core.energy(s if s.ndim == 2 else s[None])


def grad_counts(counts, expected_counts) -> Array:
    r"""Gradient of :func:`energy` in the counts: :math:`-\sum_j p(s_j \mid n)\ln F_{j}`.

    The softmax-weighted sum of the similarity gradients :math:`\partial\,\mathrm{sim}/\partial n
    = \ln F_j` (eq. (4) of Tschantz 2025), with a minus sign.
    """
    n, f = _counts_rates(counts, expected_counts)
    return -(posterior(n, f) @ jnp.log(f))


def posterior(counts, expected_counts) -> Array:
    r"""The posterior :math:`p(s_j \mid n) = \mathrm{softmax}_j\, \mathrm{sim}(n, s_j)` over the grid (uniform
    prior)."""
    s = sim(counts, expected_counts)
    w = core.weights(s if s.ndim == 2 else s[None])
    return w if s.ndim == 2 else w[0]


def log_evidence(counts, expected_counts) -> Array:
    r"""Total log-evidence :math:`\sum_m \ln \frac{1}{G}\sum_j \prod_i \mathrm{Poisson}(n_{mi}; F_{ji})`.

    Equal to :math:`-E - \sum_{m,i}\ln n_{mi}! - M \ln G` (:func:`energy`).
    """
    n, f = _counts_rates(counts, expected_counts)
    n2 = n if n.ndim == 2 else n[None]
    return (
        -energy(n2, f) - jnp.sum(jax.scipy.special.gammaln(n2.astype(f.dtype) + 1)) - n2.shape[0] * math.log(f.shape[0])
    )


def bayes_decode(counts, expected_counts, grid) -> Array:
    r"""The posterior mean :math:`\sum_j p(s_j \mid n)\, s_j` (minimum mean-squared error on the grid).

    Args:
      counts: ``(N,)`` or ``(M, N)`` spike counts.
      expected_counts: ``(G, N)`` positive mean counts.
      grid: ``(G,)`` or ``(G, d)`` candidate stimuli.

    Returns:
      the estimates, shaped like ``counts`` with the neuron axis replaced by the grid's feature axis.
    """
    n, f = _counts_rates(counts, expected_counts)
    g = _validate.float_array("grid", grid, 1)
    if g.shape[0] != f.shape[0] or g.ndim > 2:
        raise ValueError(f"grid must have shape ({f.shape[0]},) or ({f.shape[0]}, d); got {g.shape}")
    return posterior(n, f) @ g.astype(f.dtype)
