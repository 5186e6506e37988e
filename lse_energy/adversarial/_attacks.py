r"""The classifier, its cross-entropy and input gradient, and the attacks of §24.

Part of :mod:`lse_energy.adversarial`.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate, core

Array = jax.Array


class Params(NamedTuple):
    r"""A one-hidden-layer classifier, :math:`z(x) = \tanh(x W_1 + b_1) W_2 + b_2`.

    Attributes:
      W1: ``(d, H)`` input-to-hidden weights.
      b1: ``(H,)`` hidden biases.
      W2: ``(H, K)`` hidden-to-logit weights (``K = 1``: the binary score of §25.1).
      b2: ``(K,)`` logit biases.
    """

    W1: Array
    b1: Array
    W2: Array
    b2: Array


class Ascent(NamedTuple):
    r"""Result of :func:`inner_maximize` / :func:`pgd`.

    Attributes:
      x_adv: ``(N, d)`` the adversarial inputs, in the ball (and box).
      losses: ``(n_steps + 1, N)`` the per-example inner loss at the start and
        after every step.
    """

    x_adv: Array
    losses: Array


class MinimalPerturbation(NamedTuple):
    r"""Result of :func:`minimal_perturbation`.

    Attributes:
      epsilon: ``(N,)`` the smallest :math:`L_\infty` radius found along the FGSM
        direction that flips the prediction (0 for an input already
        misclassified; ``eps_max`` where none up to ``eps_max`` does).
      fooled: ``(N,)`` boolean, whether the prediction at ``epsilon`` is wrong.
    """

    epsilon: Array
    fooled: Array


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`.

    Attributes:
      opt_state: the optimizer state at the end (pass it back to continue).
      batch_losses: ``(n_epochs, n_batches)`` the joint loss of each minibatch before its step.
    """

    opt_state: Any
    batch_losses: Any = None


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _check_params(params) -> Params:
    return _validate.params(params, Params, {"W1": "d H", "b1": "H", "W2": "H K", "b2": "K"})[0]


def _check_x(params: Params, x, name: str = "x") -> Array:
    x = _validate.points(name, x, params.W1.shape[0], ref="params.W1")
    return x.astype(params.W1.dtype)


def _check_y(params: Params, y, n: int, name: str = "y") -> Array:
    y = jnp.asarray(y)
    if not jnp.issubdtype(y.dtype, jnp.integer):
        raise ValueError(f"{name} must be integer labels; got dtype {y.dtype}")
    if y.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},); got {y.shape}")
    k = params.W2.shape[1]
    if _validate.is_concrete(y):
        yv = np.asarray(y)
        if k == 1 and not np.all((yv == -1) | (yv == 1)):
            raise ValueError(f"{name} must hold -1/1 for a binary model (n_classes = 1)")
        if k > 1 and (np.any(yv < 0) or np.any(yv >= k)):
            raise ValueError(f"{name} must hold class indices in 0..{k - 1}")
    return y


def _check_multiclass(params: Params, what: str) -> None:
    if params.W2.shape[1] < 2:
        raise ValueError(f"{what} needs a multi-class model (n_classes >= 2); params has 1 output")


def _check_binary(params: Params, what: str) -> None:
    if params.W2.shape[1] != 1:
        raise ValueError(f"{what} needs a binary model (n_classes = 1); params has {params.W2.shape[1]}")


def _check_box(box):
    if box is None:
        return None
    return _validate.real_pair("box", box)


def _check_in_box(x, box):
    if box is not None and _validate.is_concrete(x):
        xv = np.asarray(x)
        if np.any(xv < box[0]) or np.any(xv > box[1]):
            raise ValueError(f"x must lie in the box [{box[0]}, {box[1]}] it is clipped to")


# ---------------------------------------------------------------------------
# Classifier, loss and gradients
# ---------------------------------------------------------------------------


def init_params(n_in: int, n_hidden: int, n_classes: int, *, key, scale: float = 1.0, dtype=None) -> Params:
    r"""Weights :math:`\mathcal N(0, \mathrm{scale}^2 / \text{fan-in})`, zero biases.

    ``n_classes = 1`` builds the binary score :math:`f: X \to \mathbb R` of §25.1.
    ``dtype`` defaults to the default floating dtype (float64 with x64 enabled).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> # d = 4, H = 3, K = 2
      >>> params = adversarial.init_params(4, 3, 2, key=jax.random.key(0))
      >>> params.W1.shape, adversarial.logits(params, jnp.ones((5, 4))).shape
      ((4, 3), (5, 2))
    """
    _validate.key("key", key)
    dtype = _validate.float_dtype("dtype", dtype)
    n_in, n_hidden = _validate.count("n_in", n_in), _validate.count("n_hidden", n_hidden)
    n_classes = _validate.count("n_classes", n_classes)
    scale = _validate.positive("scale", scale)
    return _init_params(key, n_in, n_hidden, n_classes, scale, dtype)


@partial(jax.jit, static_argnums=(1, 2, 3, 5))
def _init_params(key, n_in, n_hidden, n_classes, scale, dtype) -> Params:
    # One compiled program per shape (called eagerly, as the chapters do).
    k1, k2 = jax.random.split(key)
    W1 = core.random_normal(k1, (n_in, n_hidden), dtype) * (scale / np.sqrt(n_in))
    W2 = core.random_normal(k2, (n_hidden, n_classes), dtype) * (scale / np.sqrt(n_hidden))
    return Params(W1, jnp.zeros(n_hidden, dtype), W2, jnp.zeros(n_classes, dtype))


def _hidden(p: Params, x):
    return jnp.tanh(x @ p.W1 + p.b1)


def _logits(p: Params, x):
    return _hidden(p, x) @ p.W2 + p.b2


@jax.jit
def _ce(p: Params, x, y):
    z = _logits(p, x)
    return core.logsumexp(z) - jnp.take_along_axis(z, y[:, None], axis=1)[:, 0]


def logits(params: Params, x) -> Array:
    r"""Logits :math:`z(x) = \tanh(x W_1 + b_1) W_2 + b_2`, ``(N, K)``."""
    params = _check_params(params)
    return _logits(params, _check_x(params, x))


def example_losses(params: Params, x, y) -> Array:
    r"""Per-example cross-entropy :math:`\ell_n = \ln\sum_j e^{z_j(x_n)} - z_{t_n}(x_n)`, ``(N,)``.

    ``y``: ``(N,)`` integer labels (the notes' :math:`t`). The log-partition is
    :func:`lse_energy.core.logsumexp` of the logits: the book's energy with the
    opposite sign (§24's error :math:`E(f(x;\theta), t)`).

    Examples:
      With zero hidden-to-logit weights every logit is 0, so each loss is :math:`\ln K`:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> # d = 4, H = 3, K = 3
      >>> params = adversarial.init_params(4, 3, 3, key=jax.random.key(0))
      >>> flat = params._replace(W2=jnp.zeros((3, 3)))
      >>> [
      ...     round(v, 3)
      ...     for v in adversarial.example_losses(
      ...         flat, jnp.ones((2, 4)), jnp.array([0, 2])
      ...     ).tolist()
      ... ]
      [1.099, 1.099]
    """
    params = _check_params(params)
    _check_multiclass(params, "example_losses")
    x = _check_x(params, x)
    return _ce(params, x, _check_y(params, y, x.shape[0]))


def loss(params: Params, x, y) -> Array:
    r"""Mean cross-entropy :math:`\frac1N \sum_n \ell_n`, the training loss of standard training."""
    return jnp.mean(example_losses(params, x, y))


def _logit_jacobian(p: Params, x):
    """``(N, K, d)``: row j of example n is grad_x z_j(x_n) = W1 diag(1 - h^2) W2[:, j]."""
    h = _hidden(p, x)
    return jnp.einsum("dh,nh,hk->nkd", p.W1, 1.0 - h**2, p.W2)


def grad_x(params: Params, x, y) -> Array:
    r"""Input gradient of each example's cross-entropy, in the eq.-(4) form.

    .. math:: \nabla_{x_n} \ell_n = \sum_j \operatorname{softmax}(z(x_n))_j\,
              \nabla_x z_j(x_n) - \nabla_x z_{t_n}(x_n),

    a softmax-weighted average of the logit gradients (the Jacobian rows,
    :math:`\nabla_x z_j = W_1 \operatorname{diag}(1 - h^2) W_{2,:j}`) minus the
    target's: eq. (4) of Tschantz (2025) with the sign of a log-partition. Row
    ``n`` is the gradient of :math:`\ell_n` (equivalently of
    :math:`\sum_n \ell_n`). This is :math:`\nabla_x E` of §24.

    Returns:
      ``(N, d)``, the gradient of each example's loss.
    """
    return _input_gradient(*_check_multiclass_call(params, x, y, "grad_x"))


def _check_multiclass_call(params, x, y, name):
    """Validated ``(params, x, y)`` for a multi-class function ``name``."""
    params = _check_params(params)
    _check_multiclass(params, name)
    x = _check_x(params, x)
    return params, x, _check_y(params, y, x.shape[0])


@jax.jit
def _input_gradient(p, x, y):
    jac = _logit_jacobian(p, x)
    w = core.weights(_logits(p, x))
    return jnp.einsum("nk,nkd->nd", w, jac) - jnp.take_along_axis(jac, y[:, None, None], axis=1)[:, 0]


def _params_vjp(p: Params, x, c) -> Params:
    r"""Backpropagation: :math:`\sum_{n,k} c_{nk} \nabla_\theta z_k(x_n)` as a :class:`Params`."""
    h = _hidden(p, x)
    da = (c @ p.W2.T) * (1.0 - h**2)
    return Params(W1=x.T @ da, b1=jnp.sum(da, axis=0), W2=h.T @ c, b2=jnp.sum(c, axis=0))


def grad_params(params: Params, x, y) -> Params:
    r"""Gradient of the mean cross-entropy in the parameters.

    :math:`\partial \ell_n / \partial z = \operatorname{softmax}(z) - e_{t_n}`
    (the softmax weights minus the target's one-hot), backpropagated.
    """
    return _grad_ce_params(*_check_multiclass_call(params, x, y, "grad_params"))


def _grad_ce_params(p, x, y):
    z = _logits(p, x)
    c = (core.weights(z) - jax.nn.one_hot(y, z.shape[1], dtype=z.dtype)) / x.shape[0]
    return _params_vjp(p, x, c)


def predict(params: Params, x) -> Array:
    r"""Predicted class :math:`\arg\max_j z_j` (``K >= 2``) or :math:`\mathrm{sign} f` as ``-1/1`` (``K = 1``)."""
    params = _check_params(params)
    return _predict(params, _check_x(params, x))


def _predict(p, x):
    z = _logits(p, x)
    if z.shape[1] == 1:
        return jnp.where(z[:, 0] > 0, 1, -1)
    return jnp.argmax(z, axis=1)


def accuracy(params: Params, x, y) -> Array:
    r"""Fraction of correct predictions; for ``K = 1``, correct means :math:`f(X)T > 0` (§25.1)."""
    params = _check_params(params)
    x = _check_x(params, x)
    y = _check_y(params, y, x.shape[0])
    return _accuracy(params, x, y)


def _accuracy(p, x, y):
    z = _logits(p, x)
    if z.shape[1] == 1:
        return jnp.mean((z[:, 0] * y > 0).astype(x.dtype))
    return jnp.mean((jnp.argmax(z, axis=1) == y).astype(x.dtype))


# ---------------------------------------------------------------------------
# Attacks (§24)
# ---------------------------------------------------------------------------


def _project(x_adv, x, epsilon, box):
    x_adv = jnp.clip(x_adv, x - epsilon, x + epsilon)
    return x_adv if box is None else jnp.clip(x_adv, box[0], box[1])


def _attack_args(params, x, y, box):
    params = _check_params(params)
    _check_multiclass(params, "the attack")
    x = _check_x(params, x)
    y = _check_y(params, y, x.shape[0])
    box = _check_box(box)
    _check_in_box(x, box)
    return params, x, y, box


def gradient_attack(
    params: Params, x, y, step_size: float, *, targeted: bool = False, epsilon: float | None = None, box=None
) -> Array:
    r"""The gradient attacks of §24, one step of size ``step_size`` (the notes' :math:`k`).

    Untargeted: :math:`x' = x + k \nabla_x E(f(x;\theta), t(x))` (``y`` the true
    labels, the notes' :math:`t(x)`); targeted: :math:`x' = x - k \nabla_x E(f(x;\theta), t)`
    (``y`` the target classes, the notes' :math:`t`), with :math:`E` the cross-entropy
    (:func:`grad_x`) and :math:`k` = ``step_size``.
    With ``epsilon`` the step is projected onto :math:`B_\infty(x, \epsilon)`;
    with ``box = (lo, hi)`` it is clipped to the pixel box.

    Returns:
      ``(N, d)`` the attacked inputs.
    """
    params, x, y, box = _attack_args(params, x, y, box)
    step_size = _validate.positive("step_size", step_size)
    step = -step_size if targeted else step_size
    x_adv = x + step * _input_gradient(params, x, y)
    if epsilon is not None:
        x_adv = _project(x_adv, x, _validate.positive("epsilon", epsilon), None)
    return x_adv if box is None else jnp.clip(x_adv, box[0], box[1])


def fgsm(params: Params, x, y, epsilon: float, *, targeted: bool = False, box=None) -> Array:
    r"""Fast gradient sign method (§24.1): :math:`x' = x + \epsilon\,\mathrm{sign}(\nabla_x E)`.

    Every pixel moves by :math:`\pm\epsilon`, so :math:`\|x' - x\|_\infty = \epsilon`
    (less where the gradient is exactly 0 or the box clips). Targeted:
    :math:`x' = x - \epsilon\,\mathrm{sign}(\nabla_x E(f(x), t))`. The sign
    direction maximises the linearised loss over the :math:`L_\infty` ball.

    Returns:
      ``(N, d)`` the attacked inputs, in :math:`B_\infty(x, \epsilon)` and the box.
    """
    params, x, y, box = _attack_args(params, x, y, box)
    epsilon = _validate.nonnegative("epsilon", epsilon)
    direction = jnp.sign(_input_gradient(params, x, y))
    if targeted:
        direction = -direction
    x_adv = x + epsilon * direction
    return x_adv if box is None else jnp.clip(x_adv, box[0], box[1])


@partial(jax.jit, static_argnames=("inner", "n_steps", "monotone", "box"))
def _ascend(p, x, x0, aux, epsilon, step_size, *, inner, n_steps, monotone, box):
    """Projected sign ascent of the per-example ``inner(p, x, x_adv, aux)`` from ``x0``."""

    def per_example(xa):
        return inner(p, x, xa, aux)

    grad = jax.grad(lambda xa: jnp.sum(per_example(xa)))

    def step(carry, _):
        xa, val, alpha = carry
        prop = _project(xa + alpha[:, None] * jnp.sign(grad(xa)), x, epsilon, box)
        new = per_example(prop)
        if monotone:
            ok = new >= val
            xa = jnp.where(ok[:, None], prop, xa)
            val = jnp.where(ok, new, val)
            alpha = jnp.where(ok, alpha, 0.5 * alpha)
        else:
            xa, val = prop, new
        return (xa, val, alpha), val

    v0 = per_example(x0)
    alpha0 = jnp.full(x.shape[0], step_size, x.dtype)
    (xa, _, _), vals = jax.lax.scan(step, (x0, v0, alpha0), None, length=n_steps)
    return Ascent(xa, jnp.concatenate([v0[None], vals], axis=0))


def _ce_inner(p, x, xa, y):
    return _ce(p, xa, y)


def _g(u):
    """The binary surrogate g(u) = ln(1 + e^{-u}) of §25.1 (see softplus_surrogate)."""
    return jax.nn.softplus(-u)


def _binary_ce_inner(p, x, xa, y):
    """The binary model's classification loss g(f(x') T) at x' (``y`` = T as floats -1/1)."""
    del x
    return _g(_logits(p, xa)[:, 0] * y)


def pgd(
    params: Params, x, y, epsilon: float, *, step_size: float, n_steps: int, monotone: bool = False, key=None, box=None
) -> Ascent:
    r"""Iterated FGSM with projection (PGD; Madry et al. 2018, not in the notes).

    ``n_steps`` steps :math:`x' \leftarrow \Pi_{B_\infty(x,\epsilon)\cap\text{box}}
    (x' + \alpha\,\mathrm{sign}\,\nabla_{x'} \ell(x', t))` from :math:`x' = x`,
    or, with a PRNG ``key``, from a point drawn uniformly from the ball (clipped
    to the box): one *random restart*; call it with several keys for several.
    :math:`\ell` is the cross-entropy (``K >= 2``) or, for a binary model
    (``K = 1``, labels ``-1/1``), the surrogate :math:`g(f(x')T)` of §25.1, so
    a step raises the loss of the true class in both cases. Plain PGD
    (``monotone=False``) may *decrease* the loss on a step; with
    ``monotone=True`` a step is accepted only if it does not decrease the
    example's loss, and otherwise that example's :math:`\alpha` is halved
    (backtracking), so every ``losses`` row is non-decreasing.

    Returns:
      :class:`Ascent`.
    """
    params = _check_params(params)
    x = _check_x(params, x)
    y = _check_y(params, y, x.shape[0])
    box = _check_box(box)
    _check_in_box(x, box)
    epsilon = _validate.positive("epsilon", epsilon)
    step_size = _validate.positive("step_size", step_size)
    n_steps = _validate.count("n_steps", n_steps)
    eps = jnp.asarray(epsilon, x.dtype)
    x0 = x
    if key is not None:
        key = _validate.key("key", key)
        x0 = _project(x + eps * core.random_uniform(key, x.shape, x.dtype, -1.0, 1.0), x, eps, box)
    inner, aux = (_binary_ce_inner, y.astype(x.dtype)) if params.W2.shape[1] == 1 else (_ce_inner, y)
    return _ascend(
        params,
        x,
        x0,
        aux,
        eps,
        jnp.asarray(step_size, x.dtype),
        inner=inner,
        n_steps=n_steps,
        monotone=bool(monotone),
        box=box,
    )


def minimal_perturbation(params: Params, x, y, *, eps_max: float, n_bisect: int = 30, box=None) -> MinimalPerturbation:
    r"""§24's minimal perturbation, searched along the FGSM direction by bisection.

    The notes ask for :math:`\min \|\delta x\|` such that
    :math:`\arg\max_i y_i(x + \delta x) \ne t(x)` (the notes' :math:`y` is the output
    :math:`f(x)`; their label :math:`t(x)` is the argument ``y``). Restricting
    :math:`\delta x = \epsilon\,\mathrm{sign}(\nabla_x E)` (clipped to the box),
    this bisects ``n_bisect`` times on :math:`\epsilon \in [0, \epsilon_{\max}]`
    for the boundary between correct and wrong predictions. Misclassification
    need not be monotone in :math:`\epsilon` along the ray, so the result is an
    *upper bound* on the :math:`L_\infty` minimal perturbation (a radius at which
    the prediction is wrong), not necessarily the minimum.

    Returns:
      :class:`MinimalPerturbation`.
    """
    params, x, y, box = _attack_args(params, x, y, box)
    eps_max = _validate.positive("eps_max", eps_max)
    n_bisect = _validate.count("n_bisect", n_bisect)
    return _bisect(params, x, y, jnp.asarray(eps_max, x.dtype), n_bisect=n_bisect, box=box)


@partial(jax.jit, static_argnames=("n_bisect", "box"))
def _bisect(p, x, y, eps_max, *, n_bisect, box):
    direction = jnp.sign(_input_gradient(p, x, y))

    def wrong(eps):
        xa = x + eps[:, None] * direction
        xa = xa if box is None else jnp.clip(xa, box[0], box[1])
        return _predict(p, xa) != y

    lo = jnp.zeros(x.shape[0], x.dtype)
    hi = jnp.full(x.shape[0], eps_max, x.dtype)
    fooled_max = wrong(hi)

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        w = wrong(mid)
        return jnp.where(w, lo, mid), jnp.where(w, mid, hi)

    lo, hi = jax.lax.fori_loop(0, n_bisect, body, (lo, hi))
    already = wrong(jnp.zeros_like(lo))
    eps = jnp.where(already, 0.0, jnp.where(fooled_max, hi, eps_max))
    return MinimalPerturbation(eps, already | fooled_max)
