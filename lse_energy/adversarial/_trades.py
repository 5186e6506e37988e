r"""TRADES (§25.1) and the adversarial training loop :func:`fit` (part of :mod:`lse_energy.adversarial`)."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from lse_energy import _descent, _validate, core
from lse_energy.adversarial._attacks import (
    Ascent,
    FitExtras,
    Params,
    _ascend,
    _binary_ce_inner,
    _ce,
    _ce_inner,
    _check_binary,
    _check_box,
    _check_in_box,
    _check_multiclass,
    _check_params,
    _check_x,
    _check_y,
    _g,
    _logits,
    _params_vjp,
    _project,
)

Array = jax.Array

# ---------------------------------------------------------------------------
# TRADES (§25.1)
# ---------------------------------------------------------------------------


def softplus_surrogate(u) -> Array:
    r"""The smooth surrogate :math:`g(u) = \ln(1 + e^{-u})`, a two-term log-sum-exp.

    :math:`g(u) = \ln(e^0 + e^{-u})` is :func:`lse_energy.core.logsumexp` over
    the two "parents" :math:`\{0, -u\}`; it upper-bounds :math:`\ln 2` times the
    0-1 loss :math:`\mathbb 1[u \le 0]` and is the logistic loss.

    Examples:
      >>> from lse_energy import adversarial
      >>> round(float(adversarial.softplus_surrogate(0.0)), 3)  # ln 2
      0.693
    """
    u = _validate.float_array("u", u)
    return _g(u)


def binary_score(params: Params, x) -> Array:
    r"""The binary model :math:`f: X \to \mathbb R` of §25.1, ``(N,)``; ``sign f`` is the class.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 1, key=jax.random.key(0))
      >>> adversarial.binary_score(params, jnp.ones((5, 4))).shape
      (5,)
    """
    params = _check_params(params)
    _check_binary(params, "binary_score")
    return _logits(params, _check_x(params, x))[:, 0]


def _binary_inner(p, x, xa, aux):
    del aux
    return _g(_logits(p, x)[:, 0] * _logits(p, xa)[:, 0])


def _binary_trades(p, x, y, x_adv, trades_weight):
    f, fa = _logits(p, x)[:, 0], _logits(p, x_adv)[:, 0]
    return jnp.mean(_g(f * y) + trades_weight * _g(f * fa))


def _trades_args(params, x, y, x_adv, trades_weight, binary):
    params = _check_params(params)
    (_check_binary if binary else _check_multiclass)(params, "binary_trades_loss" if binary else "trades_loss")
    x = _check_x(params, x)
    y = _check_y(params, y, x.shape[0])
    x_adv = _check_x(params, x_adv, "x_adv")
    if x_adv.shape != x.shape:
        raise ValueError(f"x_adv must have the shape of x {x.shape}; got {x_adv.shape}")
    trades_weight = jnp.asarray(_validate.nonnegative("trades_weight", trades_weight), x.dtype)
    return params, x, y, x_adv, trades_weight


def binary_trades_loss(params: Params, x, y, x_adv, trades_weight: float) -> Array:
    r"""The joint loss of §25.1, averaged: :math:`\frac1N\sum_n g(f(X_n)T_n) + \beta\, g(f(X_n) f(X'_n))`.

    Term 1 asks for a correct class with margin; term 2 asks that the score
    keep its sign (the sign of :math:`f(X)`, not of :math:`T`) on :math:`X'`.
    ``y`` holds the labels :math:`T \in \{-1, 1\}` (the notes' :math:`T`); ``x_adv`` is
    :math:`X'`, held fixed; ``trades_weight`` is the notes' :math:`\beta \ge 0`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 1, key=jax.random.key(0))
      >>> x, y = jnp.ones((4, 4)), jnp.array([1, -1, 1, -1])
      >>> loss = adversarial.binary_trades_loss(params, x, y, x + 0.1, 1.0)
      >>> loss.shape, bool(loss > 0)
      ((), True)
    """
    params, x, y, x_adv, trades_weight = _trades_args(params, x, y, x_adv, trades_weight, True)
    return _binary_trades(params, x, y.astype(x.dtype), x_adv, trades_weight)


def grad_binary_trades_loss_params(params: Params, x, y, x_adv, trades_weight: float) -> Params:
    r"""Parameter gradient of :func:`binary_trades_loss` with :math:`X'` fixed.

    With :math:`g'(u) = -\sigma(-u)` (minus the softmax weight of the parent
    :math:`-u`), the score gradients enter with weights
    :math:`c = \frac1N[g'(fT)\,T + \beta\, g'(f f') f']` at :math:`X` and
    :math:`c' = \frac1N \beta\, g'(f f') f` at :math:`X'`, backpropagated
    (:math:`T` = ``y``, :math:`\beta` = ``trades_weight``).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 1, key=jax.random.key(0))
      >>> x, y = jnp.ones((4, 4)), jnp.array([1, -1, 1, -1])
      >>> g = adversarial.grad_binary_trades_loss_params(params, x, y, x + 0.1, 1.0)
      >>> g.W1.shape, g.W2.shape
      ((4, 3), (3, 1))
    """
    params, x, y, x_adv, trades_weight = _trades_args(params, x, y, x_adv, trades_weight, True)
    y = y.astype(x.dtype)
    f, fa = _logits(params, x)[:, 0], _logits(params, x_adv)[:, 0]
    dg1, dg2 = -jax.nn.sigmoid(-f * y), -jax.nn.sigmoid(-f * fa)
    n = x.shape[0]
    c = ((dg1 * y + trades_weight * dg2 * fa) / n)[:, None]
    ca = (trades_weight * dg2 * f / n)[:, None]
    return jax.tree_util.tree_map(jnp.add, _params_vjp(params, x, c), _params_vjp(params, x_adv, ca))


def kl_softmax(z, z_adv) -> Array:
    r"""Per-row :math:`\mathrm{KL}(\operatorname{softmax} z \,\|\, \operatorname{softmax} z')`, ``(N,)``.

    Written with log-partitions: :math:`\sum_j p_j (z_j - z'_j) - \mathrm{LSE}(z) + \mathrm{LSE}(z')`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> z = jnp.array([[1.0, 2.0], [0.0, 0.0]])
      >>> kl = adversarial.kl_softmax(z, z)  # equal distributions
      >>> kl.shape, bool(jnp.allclose(kl, 0.0))
      ((2,), True)
    """
    z = _validate.float_array("z", z, 2)
    z_adv = _validate.float_array("z_adv", z_adv, 2)
    if z.shape != z_adv.shape:
        raise ValueError(f"z and z_adv must have the same shape; got {z.shape} and {z_adv.shape}")
    return _kl(z, z_adv)


def _kl(z, za):
    return jnp.sum(core.weights(z) * (z - za), axis=-1) - core.logsumexp(z) + core.logsumexp(za)


def _kl_inner(p, x, xa, aux):
    del aux
    return _kl(_logits(p, x), _logits(p, xa))


def _trades(p, x, y, x_adv, trades_weight):
    return jnp.mean(_ce(p, x, y) + trades_weight * _kl(_logits(p, x), _logits(p, x_adv)))


def trades_loss(params: Params, x, y, x_adv, trades_weight: float) -> Array:
    r"""Multi-class TRADES: :math:`\frac1N\sum_n \ell(x_n, t_n) + \beta\,\mathrm{KL}(\operatorname{softmax} z(x_n)
    \,\|\, \operatorname{softmax} z(x'_n))`.

    The KL is the multi-class counterpart of §25.1's :math:`g(f(X) f(X'))`
    (Zhang et al. 2019); :math:`X'` is held fixed. ``y``: ``(N,)`` class indices
    (the notes' :math:`t`); ``trades_weight``: Zhang et al.'s and the notes' :math:`\beta \ge 0`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 3, key=jax.random.key(0))
      >>> x, y = jnp.ones((4, 4)), jnp.array([0, 1, 2, 0])
      >>> loss = adversarial.trades_loss(params, x, y, x, 1.0)  # x' = x: no KL term
      >>> bool(jnp.allclose(loss, adversarial.loss(params, x, y)))
      True
    """
    params, x, y, x_adv, trades_weight = _trades_args(params, x, y, x_adv, trades_weight, False)
    return _trades(params, x, y, x_adv, trades_weight)


def grad_trades_loss_params(params: Params, x, y, x_adv, trades_weight: float) -> Params:
    r"""Parameter gradient of :func:`trades_loss` with :math:`X'` fixed.

    With :math:`p = \operatorname{softmax} z`, :math:`q = \operatorname{softmax} z'`
    and :math:`D = \mathrm{KL}(p \| q)`:
    :math:`\partial D / \partial z = p \odot (\ln p - \ln q - D)` and
    :math:`\partial D / \partial z' = q - p`; the cross-entropy adds
    :math:`p - e_t` at :math:`z` (:math:`t` = ``y``). All are backpropagated through the
    network; :math:`D` enters with the weight :math:`\beta` = ``trades_weight``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 3, key=jax.random.key(0))
      >>> x, y = jnp.ones((4, 4)), jnp.array([0, 1, 2, 0])
      >>> g = adversarial.grad_trades_loss_params(params, x, y, x + 0.1, 1.0)
      >>> g.W2.shape
      (3, 3)
    """
    params, x, y, x_adv, trades_weight = _trades_args(params, x, y, x_adv, trades_weight, False)
    z, za = _logits(params, x), _logits(params, x_adv)
    p, q = core.weights(z), core.weights(za)
    logratio = (z - core.logsumexp(z)[:, None]) - (za - core.logsumexp(za)[:, None])
    kl = jnp.sum(p * logratio, axis=1, keepdims=True)
    n = x.shape[0]
    c = (p - jax.nn.one_hot(y, z.shape[1], dtype=z.dtype) + trades_weight * p * (logratio - kl)) / n
    ca = trades_weight * (q - p) / n
    return jax.tree_util.tree_map(jnp.add, _params_vjp(params, x, c), _params_vjp(params, x_adv, ca))


def inner_maximize(
    params: Params,
    x,
    epsilon: float,
    *,
    key,
    step_size: float,
    n_steps: int,
    monotone: bool = True,
    init_scale: float = 1e-3,
    box=None,
) -> Ascent:
    r"""TRADES inner maximisation: "several gradient ascents to find X'" (§25.1).

    Maximises the per-example inner loss over :math:`X' \in B_\infty(X,\epsilon)`
    (and the box): :math:`g(f(X) f(X'))` for a binary model, and
    :math:`\mathrm{KL}(\operatorname{softmax} z(X) \,\|\, \operatorname{softmax} z(X'))`
    for ``K >= 2``, by projected sign-ascent steps of size ``step_size`` from
    :math:`X + \mathcal N(0, \mathrm{init\_scale}^2)` (the KL has zero gradient at
    :math:`X' = X`). With ``monotone=True`` (the default) a step that would lower an
    example's inner loss is rejected and its step halved, so the inner loss never
    decreases.

    Returns:
      :class:`Ascent`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 3, key=jax.random.key(0))
      >>> x = jax.random.normal(jax.random.key(1), (5, 4))
      >>> opts = dict(key=jax.random.key(2), step_size=0.01, n_steps=3)
      >>> out = adversarial.inner_maximize(params, x, 0.1, **opts)
      >>> out.x_adv.shape, bool(jnp.max(jnp.abs(out.x_adv - x)) <= 0.1 + 1e-6)
      ((5, 4), True)
    """
    _validate.key("key", key)
    params = _check_params(params)
    x = _check_x(params, x)
    box = _check_box(box)
    _check_in_box(x, box)
    epsilon = jnp.asarray(_validate.positive("epsilon", epsilon), x.dtype)
    step_size = jnp.asarray(_validate.positive("step_size", step_size), x.dtype)
    n_steps = _validate.count("n_steps", n_steps)
    init_scale = _validate.nonnegative("init_scale", init_scale)
    return _inner(params, x, key, epsilon, step_size, init_scale, n_steps=n_steps, monotone=bool(monotone), box=box)


def _inner(p, x, key, epsilon, step_size, init_scale, *, n_steps, monotone, box):
    inner = _binary_inner if p.W2.shape[1] == 1 else _kl_inner
    x0 = _project(x + init_scale * core.random_normal(key, x.shape, x.dtype), x, epsilon, box)
    return _ascend(p, x, x0, None, epsilon, step_size, inner=inner, n_steps=n_steps, monotone=monotone, box=box)


def _augment(p, x, y, x_adv, trades_weight):
    r"""Plain adversarial training's loss: the mean over the batch and its adversarial copies,
    :math:`\frac12[\ell(X, T) + \ell(X', T)]` (``trades_weight`` unused)."""
    del trades_weight
    if p.W2.shape[1] == 1:
        return 0.5 * jnp.mean(_g(_logits(p, x)[:, 0] * y) + _g(_logits(p, x_adv)[:, 0] * y))
    return 0.5 * jnp.mean(_ce(p, x, y) + _ce(p, x_adv, y))


def _value_and_grad(p, batch, args, n_inner_steps, defence, box):
    # one minibatch of the driver (_descent.minibatch): the inner maximisation from the minibatch's key, then the loss
    ((xb, yb), kb), (trades_weight, epsilon, step_size) = batch, args
    binary = p.W2.shape[1] == 1
    yf = yb.astype(xb.dtype) if binary else yb
    if defence == "augment":
        x0 = _project(xb + 1e-3 * core.random_normal(kb, xb.shape, xb.dtype), xb, epsilon, box)
        xa = jax.lax.stop_gradient(
            _ascend(
                p,
                xb,
                x0,
                yf,
                epsilon,
                step_size,
                inner=_binary_ce_inner if binary else _ce_inner,
                n_steps=n_inner_steps,
                monotone=True,
                box=box,
            ).x_adv
        )
        return jax.value_and_grad(_augment)(p, xb, yf, xa, trades_weight)
    if n_inner_steps:
        xa = jax.lax.stop_gradient(
            _inner(p, xb, kb, epsilon, step_size, 1e-3, n_steps=n_inner_steps, monotone=True, box=box).x_adv
        )
    else:
        xa = xb
    if binary:
        return jax.value_and_grad(_binary_trades)(p, xb, yf, xa, trades_weight)
    return jax.value_and_grad(_trades)(p, xb, yb, xa, trades_weight)


def _result(opt_state, values, _):
    return jnp.mean(values, axis=1), FitExtras(opt_state, values), values


def fit(
    params: Params,
    x,
    y,
    *,
    key,
    optimizer: Any,
    n_epochs: int,
    batch_size: int,
    trades_weight: float = 0.0,
    epsilon: float = 0.1,
    n_inner_steps: int = 5,
    step_size: float | None = None,
    box=None,
    opt_state=None,
    defence: str = "trades",
    progress: bool = False,
) -> core.FitResult:
    r"""Standard training (``trades_weight = 0``), TRADES training (``trades_weight > 0``), or plain
    adversarial training (``defence="augment"``), §25 of the notes.

    Each minibatch (reshuffled with ``key`` every epoch; a last partial batch is
    dropped): with ``trades_weight > 0``, ``n_inner_steps`` monotone projected sign-ascent
    steps (:func:`inner_maximize`, step ``step_size``, default
    :math:`\epsilon/4`) find :math:`X'` in :math:`B_\infty(X, \epsilon)`; then one
    optimizer step on the joint loss, :func:`trades_loss` (``K >= 2``) or
    :func:`binary_trades_loss` (``K = 1``, labels ``-1/1``), with :math:`X'` held
    fixed. ``trades_weight = 0`` is plain cross-entropy (or :math:`g(f(X)T)`) training.

    ``defence="augment"`` is §25's first line, "add adversarial samples to
    dataset with proper classification": each minibatch, ``n_inner_steps``
    monotone projected sign-ascent steps on the *classification* loss
    :math:`\ell(X', T)` (the cross-entropy, or :math:`g(f(X')T)` for a binary
    model) from :math:`X + \mathcal N(0, 10^{-6})` find :math:`X'`, and the
    step descends :math:`\frac12[\ell(X, T) + \ell(X', T)]`, the loss of the
    batch with its adversarial copies added, correctly labelled (``trades_weight``
    is unused). Jitted, ``lax.scan`` over epochs and batches.

    Args:
      params: initial :class:`Params`.
      x: ``(N, d)`` inputs; y: ``(N,)`` integer labels (the notes' :math:`t`, or :math:`T`
        for a binary model).
      key: PRNG key (keyword-only).
      optimizer: an optax ``GradientTransformation`` (a fresh but equal one reuses the compiled program).
      n_epochs: integer ``>= 1``; batch_size: integer in ``[1, N]``.
      trades_weight: the TRADES weight, the notes' (and Zhang et al.'s) :math:`\beta \ge 0`.
      epsilon, n_inner_steps, step_size, box: the inner maximisation (unused at
        ``trades_weight = 0`` with ``defence="trades"``).
      opt_state: optimizer state to continue from, or ``None``.
      progress: show a ``tqdm.auto`` bar of the epochs (results agree with ``progress=False`` to round-off).
      defence: ``"trades"`` (the default) or ``"augment"``.

    Returns:
      :class:`~lse_energy.core.FitResult`: trained :class:`Params`; ``energies``
      ``(n_epochs,)``, the mean over each epoch's minibatches of the joint loss before
      their steps (the minibatch values are ``extras.batch_losses``); ``n_iter = n_epochs``;
      ``converged = None``; ``extras`` a :class:`FitExtras`.

    Raises:
      ValueError: on bad arguments, or when training diverged.

    Examples:
      TRADES training for two epochs of two minibatches:

      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import adversarial
      >>> params = adversarial.init_params(4, 3, 3, key=jax.random.key(0))
      >>> x, y = jax.random.normal(jax.random.key(1), (8, 4)), jnp.arange(8) % 3
      >>> opts = dict(
      ...     optimizer=optax.sgd(0.1),
      ...     n_epochs=2,
      ...     batch_size=4,
      ...     trades_weight=1.0,
      ...     epsilon=0.1,
      ... )
      >>> result = adversarial.fit(params, x, y, key=jax.random.key(2), **opts)
      >>> result.energies.shape, result.extras.batch_losses.shape
      ((2,), (2, 2))
    """
    _validate.key("key", key)
    params = _check_params(params)
    x = _check_x(params, x)
    y = _check_y(params, y, x.shape[0])
    n_epochs, batch_size = _validate.trainer(optimizer, n_epochs, batch_size, x.shape[0])
    trades_weight = _validate.nonnegative("trades_weight", trades_weight)
    epsilon = _validate.positive("epsilon", epsilon)
    n_inner_steps = _validate.count("n_inner_steps", n_inner_steps)
    step_size = epsilon / 4 if step_size is None else _validate.positive("step_size", step_size)
    box = _check_box(box)
    _check_in_box(x, box)
    _validate.choice("defence", defence, ("trades", "augment"))
    dt = x.dtype
    inner = n_inner_steps if (trades_weight > 0 or defence == "augment") else 0
    return _descent.minibatch(
        "adversarial.fit",
        partial(_value_and_grad, n_inner_steps=inner, defence=defence, box=box),
        params,
        (x, y),
        key=key,
        optimizer=optimizer,
        n_epochs=n_epochs,
        batch_size=batch_size,
        args=(jnp.asarray(trades_weight, dt), jnp.asarray(epsilon, dt), jnp.asarray(step_size, dt)),
        opt_state=opt_state,
        batch_keys=True,
        result=_result,
        progress=progress,
    )
