r"""The toy tasks of Singh & Buckley (2023) §5 (their Figs. 2 and 3) and their training loops.

* Multi-hop (Fig. 2): :class:`MultiHopTask`, :func:`make_multihop_task`,
  :func:`sample_multihop`, the models of :data:`TOY_MODELS` (one layer, two
  layers, multi-hop in the paper's and the code's form) and
  :func:`run_multihop_experiments`, seeded and vmapped.
* Expanding (Fig. 3): :class:`ExpandingTask`, :func:`make_expanding_task`,
  :func:`sample_expanding`, :func:`predict_expanding_task` and
  :func:`run_expanding_experiment`.

The models themselves are :mod:`lse_energy.multihop`,
:mod:`lse_energy.expanding` and :mod:`lse_energy.attention`; this module only
adds data and optax training, and no model imports it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _progress, _validate, attention, core, expanding, multihop

Array = jax.Array

__all__ = [
    "MultiHopTask",
    "make_multihop_task",
    "sample_multihop",
    "multihop_target_variance",
    "TOY_MODELS",
    "init_toy",
    "predict_multihop_task",
    "run_multihop_experiment",
    "run_multihop_experiments",
    "ExpandingTask",
    "make_expanding_task",
    "sample_expanding",
    "predict_expanding_task",
    "run_expanding_experiment",
    "ToyRun",
]


class MultiHopTask(NamedTuple):
    r"""The generative model of the multi-hop toy task (Fig. 2).

    .. math:: x_0 \sim \mathcal N(0, I), \quad x_{i+1} = W_r x_i + \epsilon_i, \quad
              \epsilon_i \sim \mathcal N(0, I), \quad y = w_y^\top (x_1 + x_0),

    and the other nodes are :math:`\mathcal N(0, I)` noise. :math:`W_r = c\, U V^\top`
    with orthonormal :math:`U \perp V` (``d x r`` each), so :math:`W_r` has rank
    :math:`r` and :math:`W_r^2 = 0`: :math:`x_2` is independent of :math:`x_0`.

    Attributes:
      w_r: ``(d, d)``. w_y: ``(d,)``.
    """

    w_r: Array
    w_y: Array


def make_multihop_task(d: int, rank: int, *, key, strength: float = 3.0) -> MultiHopTask:
    r"""Draw :math:`W_r = c U V^\top` (``2 rank <= d``) and :math:`w_y \sim \mathcal N(0, I/d)`."""
    d, rank = _validate.count("d", d, 2), _validate.count("rank", rank, 1)
    if 2 * rank > d:
        raise ValueError(f"rank must satisfy 2 * rank <= d; got rank={rank}, d={d}")
    _validate.positive("strength", strength)
    return _make_multihop_task(key, d, rank, strength)


@partial(jax.jit, static_argnums=(1, 2))  # one compiled draw instead of an eager op per line
def _make_multihop_task(key, d, rank, strength):
    k1, k2 = jax.random.split(key)
    basis, _ = jnp.linalg.qr(core.random_normal(k1, (d, 2 * rank)))
    w_r = strength * basis[:, :rank] @ basis[:, rank:].T
    return MultiHopTask(w_r=w_r, w_y=core.random_normal(k2, (d,)) / math.sqrt(d))


def multihop_target_variance(task: MultiHopTask) -> Array:
    r""":math:`\mathrm{Var}(y) = w_y^\top\big[(I + W_r)(I + W_r)^\top + I\big] w_y`, the MSE of predicting 0."""
    a = task.w_y @ (jnp.eye(task.w_r.shape[0]) + task.w_r)
    return a @ a + task.w_y @ task.w_y


def sample_multihop(task: MultiHopTask, n_nodes: int, batch: int, *, key):
    r"""A batch of shuffled node sets.

    Returns:
      ``(x, y, pos)``: ``x (batch, n_nodes, d)``, ``y (batch,)``, and
      ``pos (batch, 3)``, the shuffled positions of :math:`x_0, x_1, x_2`.
      The readout (query) is :math:`x_2`'s position ``pos[:, 2]``.
    """
    n_nodes, batch = _validate.count("n_nodes", n_nodes, 3), _validate.count("batch", batch, 1)
    return _sample_multihop(task, key, n_nodes, batch)


def _sample_multihop(task, key, n_nodes, batch):
    d = task.w_r.shape[0]
    k1, k2 = jax.random.split(key)
    z = core.random_normal(k1, (batch, n_nodes, d))
    x0 = z[:, 0]
    x1 = x0 @ task.w_r.T + z[:, 1]
    x2 = x1 @ task.w_r.T + z[:, 2]
    y = (x1 + x0) @ task.w_y
    nodes = jnp.concatenate([jnp.stack([x0, x1, x2], 1), z[:, 3:]], axis=1)
    perm = jnp.argsort(core.random_uniform(k2, (batch, n_nodes)), axis=1)  # uniform random permutations
    x = jnp.take_along_axis(nodes, perm[:, :, None], axis=1)
    pos = jnp.argsort(perm, axis=1)[:, :3]  # where nodes 0, 1, 2 ended up
    return x, y, pos


#: The models of the multi-hop task (one attention layer, two layers, multi-hop as in the paper and as in the code).
TOY_MODELS = ("one_layer", "two_layer", "multihop_paper", "multihop_code")


def init_toy(model: str, d: int, d_k: int, *, key):
    r"""Initial parameters of a toy model (Gaussian, :math:`\mathcal N(0, 1/d)` entries).

    * ``"one_layer"``, ``"multihop_paper"``, ``"multihop_code"``: a
      :class:`lse_energy.multihop.Params` with ``wv: (1, d)`` (the value is the scalar
      prediction); the three have the same parameter count.
    * ``"two_layer"``: a pair; layer 1 is :class:`lse_energy.multihop.Params` with
      ``wv: (d, d)`` and a residual connection, layer 2 as ``"one_layer"``.
    """
    if model not in TOY_MODELS:
        raise ValueError(f"model must be one of {TOY_MODELS}; got {model!r}")
    return _init_toy(model, key, d, d_k)


def _init_toy(model, key, d, d_k):
    ks = jax.random.split(key, 6)
    s = 1.0 / math.sqrt(d)

    def head(k3, dv):
        return multihop.Params(
            wq=s * core.random_normal(k3[0], (d_k, d)),
            wk=s * core.random_normal(k3[1], (d_k, d)),
            wv=s * core.random_normal(k3[2], (dv, d)),
        )

    if model == "two_layer":
        return (head(ks[:3], d), head(ks[3:], 1))
    return head(ks[:3], 1)


def _weights(params, x):
    q, k = x @ params.wq.T, x @ params.wk.T
    return attention.attention_weights(q, k)


def predict_multihop_task(model: str, params, x, query) -> Array:
    r"""Scalar prediction read out at node ``query`` of ``x: (B, N, d)``; returns ``(B,)``.

    * one layer: :math:`\hat y = [P X w_v^\top]_{\mathrm{query}}`;
    * multi-hop: :math:`\hat y = [A(P) X w_v^\top]_{\mathrm{query}}` (:func:`lse_energy.multihop.hop_matrix`);
    * two layers: :math:`H = X + P_1 X W_{V,1}^\top`, :math:`\hat y = [P_2(H) H w_{v,2}^\top]_{\mathrm{query}}`.
    """
    if model not in TOY_MODELS:
        raise ValueError(f"model must be one of {TOY_MODELS}; got {model!r}")
    return _predict_mh(model, params, x, query)


def _predict_mh(model, params, x, query):
    rows = jnp.arange(x.shape[0])
    if model == "two_layer":
        p1, p2 = params
        h = x + _weights(p1, x) @ (x @ p1.wv.T)
        out = _weights(p2, h) @ (h @ p2.wv.T)
    else:
        p = _weights(params, x)
        if model != "one_layer":
            p = multihop.hop_matrix(p, variant="paper" if model == "multihop_paper" else "code")
        out = p @ (x @ params.wv.T)
    return out[rows, query, 0]


class ToyRun(NamedTuple):
    r"""Result of a seeded toy experiment, one row per seed.

    Attributes:
      params: trained parameters, leading axis = seed.
      curve: ``(S, n_steps)`` normalised training MSE on fresh batches,
        :math:`\mathrm{MSE} / \mathrm{Var}(y)` (1 = predicting 0).
      final: ``(S,)`` normalised MSE on a held-out batch.
    """

    params: object
    curve: Array
    final: Array


def _check_sizes(*, d, rank, **sizes):
    """Every size a count (``>= 1``, or ``(value, low)``), ``d >= 2`` and ``2 * rank <= d``."""
    for name, val in sizes.items():
        _validate.count(name, *(val if isinstance(val, tuple) else (val, 1)))
    _validate.count("d", d, 2)
    _validate.count("rank", rank, 1)
    if 2 * rank > d:
        raise ValueError(f"rank must satisfy 2 * rank <= d; got rank={rank}, d={d}")


def _train(loss_fn, params, key, optimizer, n_steps, report_every=0):
    opt_state = optimizer.init(params)

    def value_and_grad(p, inp):
        k, i = inp
        _progress.tick(i, n_steps, report_every)
        return jax.value_and_grad(loss_fn)(p, k)

    xs = (jax.random.split(key, n_steps), jnp.arange(n_steps))
    (params, _), losses = _descent.scan(value_and_grad, params, opt_state, optimizer, xs)
    return params, losses


def run_multihop_experiment(model: str, seeds, **settings) -> ToyRun:
    r"""Train ``model`` on the multi-hop task once per seed (vmapped, jitted).

    Each seed draws its own task (:func:`make_multihop_task`), initial
    parameters and data; every optimizer step sees a fresh batch, so the
    training curve is also a test curve. The loss is the MSE normalised by
    :func:`multihop_target_variance`. Same as
    ``run_multihop_experiments([model], ...)[model]``.

    Args:
      model: one of :data:`TOY_MODELS`.
      seeds: sequence of integer seeds.
      settings: the keywords of :func:`run_multihop_experiments`:
        ``optimizer`` (optax ``GradientTransformation``, hashable, static;
        required), the task and batch sizes, and ``progress``, which shows a
        ``tqdm.auto`` bar of the optimizer steps (the compiled scan reports
        to the host every ``n_steps // 50`` steps; the callback changes how
        XLA fuses the loop body, so results agree with ``progress=False`` to
        round-off, not bit for bit).
    """
    return run_multihop_experiments((model,), seeds, **settings)[model]


# The single-head models as one family, A(P) = c_0 I + c_1 P + c_2 P^2 (see hop_matrix).
_HOP_COEFFS = {
    "one_layer": (0.0, 1.0, 0.0),
    "multihop_paper": (0.0, 1.0, 1.0),
    "multihop_code": (1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0),
}


def run_multihop_experiments(
    models,
    seeds,
    *,
    optimizer,
    n_steps: int = 400,
    batch: int = 64,
    n_nodes: int = 8,
    d: int = 8,
    d_k: int = 8,
    rank: int = 2,
    strength: float = 3.0,
    n_test: int = 2048,
    progress: bool = False,
) -> dict:
    r""":func:`run_multihop_experiment` for several models at once; returns ``{model: ToyRun}``.

    The single-head models share their parameter shapes and differ only in
    the mixing matrix :math:`A(P) = c_0 I + c_1 P + c_2 P^2` (one layer
    :math:`(0, 1, 0)`, paper :math:`(0, 1, 1)`, code :math:`(1/3, 1/3, 1/3)`),
    so they are trained in one compiled program vmapped over the
    coefficients (the same seeds, hence the same tasks and data, for every
    model); ``"two_layer"`` is a second program. With ``progress=True`` each
    program shows a ``tqdm.auto`` bar of its optimizer steps.
    """
    models = tuple(models)
    if not models or any(m not in TOY_MODELS for m in models):
        raise ValueError(f"models must be a non-empty sequence of {TOY_MODELS}; got {models!r}")
    _validate.optimizer(optimizer)
    seeds = _validate.seeds(seeds)
    _check_sizes(n_steps=n_steps, batch=batch, n_nodes=(n_nodes, 3), d=d, d_k=d_k, rank=rank, n_test=n_test)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    args = (optimizer, n_steps, batch, n_nodes, d, d_k, rank, float(strength), n_test)
    out = {}
    single = tuple(m for m in dict.fromkeys(models) if m != "two_layer")
    if single:
        coeffs = jnp.asarray([_HOP_COEFFS[m] for m in single], dtype=jnp.result_type(float))
        with _progress.bar(progress, n_steps, f"training {', '.join(single)}") as every:
            run = jax.block_until_ready(_run_mh(keys, coeffs, "single", *args, every))
        for i, m in enumerate(single):
            out[m] = jax.tree_util.tree_map(lambda a, i=i: a[i], run)
    if "two_layer" in models:
        with _progress.bar(progress, n_steps, "training two_layer") as every:
            run = jax.block_until_ready(_run_mh(keys, jnp.zeros((1, 3)), "two_layer", *args, every))
        out["two_layer"] = jax.tree_util.tree_map(lambda a: a[0], run)
    for m, r in out.items():
        _validate.require_finite(
            f"run_multihop_experiments ({m})",
            r,
            steps=jnp.moveaxis(r.curve, -1, 0),
            hint="lower the optimizer's learning rate",
        )
    return {m: out[m] for m in models}


def _predict_mh_coeffs(c, params, x, query):
    # c_0 I + c_1 P + c_2 P^2 applied to the values, read out at `query` (the single-head models).
    rows = jnp.arange(x.shape[0])
    p = _weights(params, x)
    val = x @ params.wv.T
    pv = p @ val
    out = c[0] * val + c[1] * pv + c[2] * (p @ pv)
    return out[rows, query, 0]


@partial(jax.jit, static_argnums=tuple(range(2, 13)))
def _run_mh(keys, coeffs, kind, optimizer, n_steps, batch, n_nodes, d, d_k, rank, strength, n_test, report_every=0):
    def one(c, key):
        kt, ki, kd, ke = jax.random.split(key, 4)
        task = _make_multihop_task(kt, d, rank, strength)
        var = multihop_target_variance(task)

        def predict(p, x, query):
            if kind == "two_layer":
                return _predict_mh("two_layer", p, x, query)
            return _predict_mh_coeffs(c, p, x, query)

        def loss(p, k):
            x, y, pos = _sample_multihop(task, k, n_nodes, batch)
            return jnp.mean((predict(p, x, pos[:, 2]) - y) ** 2) / var

        params, curve = _train(
            loss,
            _init_toy("two_layer" if kind == "two_layer" else "one_layer", ki, d, d_k),
            kd,
            optimizer,
            n_steps,
            report_every,
        )
        x, y, pos = _sample_multihop(task, ke, n_nodes, n_test)
        final = jnp.mean((predict(params, x, pos[:, 2]) - y) ** 2) / var
        return params, curve, final

    params, curve, final = jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None))(coeffs, keys)
    return ToyRun(params=params, curve=curve, final=final)


# ---------------------------------------------------------------------------
# Toy task of Fig. 3: expanding attention
# ---------------------------------------------------------------------------


class ExpandingTask(NamedTuple):
    r"""The generative model of the expanding-attention toy task (Fig. 3).

    :math:`x_1 \sim \mathcal N(0, I)`, :math:`x_2 = W_r x_1 + \epsilon`,
    :math:`y = w_y^\top x_1`, other tokens :math:`\mathcal N(0, I)`. The query
    :math:`x_2` is the last token; :math:`x_1` sits :math:`D + 1` positions
    before it, :math:`D \sim \mathrm{Geo}(p)` on :math:`\{0, 1, \dots\}`
    truncated to the sequence (``D <= n - 2``).

    Attributes:
      w_r: ``(d, d)`` (``c U V^\top``, rank ``r``). w_y: ``(d,)``.
    """

    w_r: Array
    w_y: Array


def make_expanding_task(d: int, rank: int, *, key, strength: float = 3.0) -> ExpandingTask:
    r"""Same draw as :func:`make_multihop_task`; :math:`\mathrm{Var}(y) = \|w_y\|^2`."""
    t = make_multihop_task(d, rank, key=key, strength=strength)
    return ExpandingTask(w_r=t.w_r, w_y=t.w_y)


def _truncated_geometric(key, p, n_max, shape):
    # Inverse CDF of Geo(p) on {0..n_max}: P(D <= k) = (1 - (1-p)^(k+1)) / (1 - (1-p)^(n_max+1)).
    u = core.random_uniform(key, shape)
    tail = 1.0 - (1.0 - p) ** (n_max + 1)
    dist = jnp.floor(jnp.log1p(-u * tail) / jnp.log1p(-p))
    return jnp.clip(dist, 0, n_max).astype(jnp.int32)


def sample_expanding(task: ExpandingTask, n: int, batch: int, p, *, key):
    r"""A batch of sequences for the expanding task.

    Returns:
      ``(x, y, dist)``: ``x (batch, n, d)`` with the query at ``x[:, -1]``,
      ``y (batch,)`` and ``dist (batch,)``, the distance index of :math:`x_1`
      (``x[:, n - 2 - dist]``).
    """
    n, batch = _validate.count("n", n, 2), _validate.count("batch", batch, 1)
    if not 0 < float(p) <= 1:
        raise ValueError(f"p must lie in (0, 1]; got {p!r}")
    return _sample_expanding(task, key, n, batch, jnp.asarray(p, jnp.result_type(float)))


@partial(jax.jit, static_argnums=(2, 3))
def _sample_expanding(task, key, n, batch, p):
    d = task.w_r.shape[0]
    k1, k2 = jax.random.split(key)
    z = core.random_normal(k1, (batch, n, d))
    dist = _truncated_geometric(k2, p, n - 2, (batch,))
    rows = jnp.arange(batch)
    x1 = z[rows, n - 2 - dist]
    x2 = x1 @ task.w_r.T + z[:, -1]
    x = z.at[:, -1].set(x2)
    return x, x1 @ task.w_y, dist


def predict_expanding_task(
    model: str, params, x, *, alpha0=1.0, beta0=1.0, eps=1e-2, tol=1e-3, max_iter=100, max_window=None
):
    r"""Prediction of ``"self"`` or ``"expanding"`` attention read out at the last token.

    Both use one head ``params`` with ``wq``, ``wk`` and ``wv: (1, d)``
    (:class:`lse_energy.expanding.Params`, or the :class:`lse_energy.multihop.Params`
    of :func:`init_toy`); the query :math:`x_{N}` attends to
    the ``N - 1`` earlier tokens, with a uniform prior (``"self"``) or the
    geometric prior of :func:`lse_energy.expanding.attention`, whose
    ``max_window`` this passes on.

    Returns:
      ``(y_hat (B,), result)`` where ``result`` is the
      :class:`lse_energy.expanding.Result` (``None`` for ``"self"``).
    """
    if model not in ("self", "expanding"):
        raise ValueError(f"model must be 'self' or 'expanding'; got {model!r}")
    if model == "self":
        x = _validate.float_array("x", x, min_ndim=3)
        if x.shape[-2] < 2:
            raise ValueError(f"x must hold at least 2 tokens (keys and the query); got shape {x.shape}")
        return _predict_self(params, x), None
    if isinstance(params, multihop.Params):  # one head of init_toy: the same three projections
        params = expanding.Params(*params)
    res = expanding.attention(
        params, x, alpha0=alpha0, beta0=beta0, eps=eps, tol=tol, max_iter=max_iter, max_window=max_window
    )
    return res.output[:, 0], res


@jax.jit
def _predict_self(params, x):
    return _predict_ex("self", params, x, None, None, None, None, None)[0]


def _predict_ex(model, params, x, alpha0, beta0, eps, tol, max_iter):
    if model == "self":  # a uniform prior is order-free: no need to reverse the context
        q = x[:, -1] @ params.wq.T
        ctx = x[:, :-1]
        return attention.attend(q[:, None, :], ctx @ params.wk.T, ctx @ params.wv.T)[:, 0, 0], None
    res = expanding.attention(params, x, alpha0=alpha0, beta0=beta0, eps=eps, tol=tol, max_iter=max_iter)
    return res.output[:, 0], res


def run_expanding_experiment(
    model: str,
    seeds,
    ps,
    *,
    optimizer,
    n_steps: int = 300,
    batch: int = 32,
    n: int = 64,
    d: int = 10,
    d_k: int = 8,
    rank: int = 2,
    strength: float = 3.0,
    alpha0=1.0,
    beta0=1.0,
    eps: float = 1e-2,
    tol: float = 1e-3,
    max_iter: int = 100,
    n_test: int = 1024,
    progress: bool = False,
):
    r"""Train ``"self"`` or ``"expanding"`` attention on the expanding task for every (p, seed).

    Vmapped over ``ps`` and ``seeds`` (one compilation per shape). Every
    step sees a fresh batch; the loss is :math:`\mathrm{MSE}/\|w_y\|^2`.
    ``progress=True`` shows a ``tqdm.auto`` bar of the optimizer steps.

    Returns:
      ``(run, stats)``: a :class:`ToyRun` whose arrays have leading axes
      ``(len(ps), len(seeds))``, and for ``"expanding"`` a dict of
      ``(len(ps), len(seeds))`` test-batch means: ``window`` (:math:`H_T`),
      ``max_window`` (:math:`H_{\max}`), ``iterations``, ``ops`` (of the
      dense path used in training: all ``n - 1`` dot products), ``reweight``
      (:math:`\sum_{t<T} H_t + H_T`), ``converged`` (fraction), ``q``,
      ``true_mean_distance`` (``None`` for ``"self"``).
    """
    if model not in ("self", "expanding"):
        raise ValueError(f"model must be 'self' or 'expanding'; got {model!r}")
    _validate.optimizer(optimizer)
    seeds = _validate.seeds(seeds)
    ps = np.asarray(ps, dtype=float)
    if ps.ndim != 1 or ps.size == 0 or not np.all((ps > 0) & (ps <= 1)):
        raise ValueError(f"ps must be a non-empty 1-D sequence in (0, 1]; got {ps!r}")
    _check_sizes(n_steps=n_steps, batch=batch, n=(n, 2), d=d, d_k=d_k, rank=rank, n_test=n_test, max_iter=(max_iter, 0))
    _validate.positive("alpha0", alpha0)
    _validate.positive("beta0", beta0)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    eps = _validate.open_unit("eps", eps)
    with _progress.bar(progress, n_steps, f"training {model} attention") as every:
        run, stats = jax.block_until_ready(
            _run_ex(
                keys,
                jnp.asarray(ps),
                model,
                optimizer,
                n_steps,
                batch,
                n,
                d,
                d_k,
                rank,
                float(strength),
                float(alpha0),
                float(beta0),
                eps,
                float(tol),
                max_iter,
                n_test,
                every,
            )
        )
    _validate.require_finite(
        f"run_expanding_experiment ({model})",
        run,
        steps=jnp.moveaxis(run.curve, -1, 0),
        hint="lower the optimizer's learning rate",
    )
    return run, (stats if model == "expanding" else None)


@partial(jax.jit, static_argnums=tuple(range(2, 18)))
def _run_ex(
    keys,
    ps,
    model,
    optimizer,
    n_steps,
    batch,
    n,
    d,
    d_k,
    rank,
    strength,
    alpha0,
    beta0,
    eps,
    tol,
    max_iter,
    n_test,
    report_every=0,
):
    def one(p, key):
        kt, ki, kd, ke = jax.random.split(key, 4)
        mt = _make_multihop_task(kt, d, rank, strength)
        task = ExpandingTask(w_r=mt.w_r, w_y=mt.w_y)
        var = task.w_y @ task.w_y

        def predict(params, x):
            return _predict_ex(model, params, x, alpha0, beta0, eps, tol, max_iter)

        def loss(params, k):
            x, y, _ = _sample_expanding(task, k, n, batch, p)
            return jnp.mean((predict(params, x)[0] - y) ** 2) / var

        params, curve = _train(
            loss, expanding.Params(*_init_toy("one_layer", ki, d, d_k)), kd, optimizer, n_steps, report_every
        )
        x, y, dist = _sample_expanding(task, ke, n, n_test, p)
        yhat, res = predict(params, x)
        final = jnp.mean((yhat - y) ** 2) / var
        if res is None:
            stats = {}
        else:
            hmax = res.max_window.astype(x.dtype)
            h = res.window.astype(x.dtype)
            stats = dict(
                window=jnp.mean(h),
                max_window=jnp.mean(hmax),
                iterations=jnp.mean(res.iterations.astype(x.dtype)),
                ops=jnp.mean(res.ops),
                reweight=jnp.mean(res.ops - d_k * res.dots.astype(x.dtype) - h),
                converged=jnp.mean(res.converged.astype(x.dtype)),
                q=jnp.mean(res.q),
                true_mean_distance=jnp.mean(dist.astype(x.dtype)),
            )
        return params, curve, final, stats

    f = jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None))
    params, curve, final, stats = f(ps, keys)
    return ToyRun(params=params, curve=curve, final=final), stats
