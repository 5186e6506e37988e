r"""The toy tasks of Singh & Buckley (2023), Figs. 2 and 3, as the authors' public code defines them.

The multi-hop task (Fig. 2) is :func:`make_task`, :func:`sample` and :func:`run`; the expanding task
(Fig. 3, their ``data_expanding.py`` and ``run_expanding.py``) is :func:`make_fig3_task`,
:func:`sample_fig3`, :func:`predict_fig3` and :func:`run_fig3`, with two references,
:func:`ridge_floor` and :func:`handset_fig3`. What follows describes Fig. 2; see those functions for Fig. 3.

The authors' repository ``ryan-sussex/AttentionAsStructuralInference`` (files
``data.py``, ``models.py``, ``run_multihop.py``) trains its Fig. 2 models on a
task that differs from the book's :mod:`lse_energy.experiments.structural_tasks`
in its data, its target and its optimiser. This module rebuilds *their* task in
JAX (written from a description of their code, not translated from it) so that
both can be run side by side.

**Task** (one draw per seed): a readout :math:`w \in \mathbb R^d` with entries
:math:`\mathcal N(1, 1)` and a transition :math:`A \in [0, 1)^{d \times d}`
with uniform entries. Each sequence holds ``n_tokens`` tokens: a chain

.. math:: x_0 \sim \mathcal U[0, s)^d, \qquad x_{i+1} = A^\top x_i + \epsilon_i, \qquad
          \epsilon_i \sim \mathcal N(0, \sigma^2 I),

of length ``chain`` (their code writes row vectors, :math:`x_{i+1} = x_i A`) and
``n_tokens - chain`` distractors :math:`\mathcal N(0, \sigma^2 I)`. The target is

.. math:: y = w^\top \Big(x_0 + \sum_{i=0}^{\text{chain}-1} x_i\Big)
          \quad (= w^\top(2x_0 + x_1 + x_2) \text{ for chain} = 3),

so :math:`x_0` counts twice and the query :math:`x_2` itself is part of the
target (their loop starts from :math:`x_0` and adds every chain token;
``target="code"``). The last chain token sits at the last position and is the
readout (query); the other tokens are shuffled by one permutation per batch.
Their sizes: ``d = 3``, ``n_tokens = 5``, ``chain = 3``, :math:`s = 10`,
:math:`\sigma = 1`.

**Models**, one head, no residual, no output projection: :math:`q = W_Q x`,
:math:`k = W_K x` (``d x d``) and a *scalar* value :math:`v = w_v^\top x`; logits
:math:`q_i^\top k_j / \sqrt d`, no mask (their causal-mask buffer has size 1 and
masks nothing). The prediction is the last row of a mixing matrix :math:`M`
applied to the values, :math:`\hat y = \sum_j M_{Nj} v_j`:

* ``"standard"``: :math:`M = P`, the row softmax.
* ``"multihop"`` (their ``LongAttention``): they normalise the logits over the
  *query* axis and transpose, which is a row softmax with the roles of
  :math:`W_Q` and :math:`W_K` exchanged, :math:`Q_{ab} \propto \exp(k_a^\top q_b)`;
  then :math:`M = (I + Q + Q^2)/3` (:func:`lse_energy.multihop.hop_matrix`,
  ``variant="code"``).
* ``"multihop_paper"`` (not in their code): :math:`M = P + P^2`, §5 of the paper.
* ``"self_plus_one_hop"`` (an ablation, not in their code): :math:`M = (I + Q)/2`,
  the authors' multi-hop without its second hop.

``target="paper"`` replaces their target by the one the paper's Fig. 2 caption
describes (:math:`y` generated from :math:`x_0` and :math:`x_1`),
:math:`y = w^\top \sum_{i < \text{chain}-1} x_i`: no query, no double :math:`x_0`.

**Training** (their values as defaults): MSE in raw units on a fresh batch of
200 every step, Adam with learning rate :math:`10^{-3}` and *coupled* L2 weight
decay 2 (``torch.optim.Adam(weight_decay=2)``: :math:`2\theta` is added to the
gradient before the moments), 20000 steps, weights initialised
:math:`\mathcal U(-1/\sqrt d, 1/\sqrt d)` (PyTorch's ``nn.Linear`` default); the
batch loss is recorded every 1000 steps.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lse_energy import _descent, _validate, attention, core, multihop

Array = jax.Array

__all__ = [
    "MODELS",
    "TARGETS",
    "Task",
    "make_task",
    "sample",
    "init_params",
    "mixing",
    "predict",
    "self_readout_mse",
    "run",
    "run_seeds",
    "FIG3_MODELS",
    "Fig3Task",
    "make_fig3_task",
    "sample_fig3",
    "fig3_target_variance",
    "ridge_floor",
    "handset_fig3",
    "predict_fig3",
    "run_fig3",
]

#: The models, in order one-layer attention, the authors' multi-hop, the paper's multi-hop and an ablation.
MODELS = ("standard", "multihop", "multihop_paper", "self_plus_one_hop")

#: The targets, as in the authors' code (``"code"``) or as in the paper's Fig. 2 caption (``"paper"``).
TARGETS = ("code", "paper")


class Task(NamedTuple):
    r"""One draw of the authors' task.

    Attributes:
      w_y: ``(d,)``, the readout :math:`w`, entries :math:`\mathcal N(1, 1)`.
      a: ``(d, d)``, the transition :math:`A`, entries :math:`\mathcal U[0, 1)`;
        a chain step is ``x_next = x @ a + noise``.
    """

    w_y: Array
    a: Array


def make_task(d: int = 3, *, key) -> Task:
    r"""Draw :math:`w \sim \mathcal N(1, I)` and :math:`A \sim \mathcal U[0, 1)^{d \times d}`."""
    d = _validate.count("d", d, 1)
    kw, ka = jax.random.split(key)
    dtype = jnp.result_type(float)
    return Task(w_y=1.0 + core.random_normal(kw, (d,), dtype), a=core.random_uniform(ka, (d, d), dtype))


def _check_sizes(n_tokens, chain):
    chain = _validate.count("chain", chain, 1)
    n_tokens = _validate.count("n_tokens", n_tokens, 2)
    if chain > n_tokens:
        raise ValueError(f"chain must be <= n_tokens; got chain={chain}, n_tokens={n_tokens}")
    return n_tokens, chain


def sample(
    task: Task,
    batch: int,
    *,
    key,
    n_tokens: int = 5,
    chain: int = 3,
    x0_high: float = 10.0,
    noise: float = 1.0,
    target: str = "code",
):
    r"""A batch of sequences of the authors' task.

    Args:
      task: a :class:`Task`.
      batch: number of sequences.
      key: PRNG key.
      n_tokens: tokens per sequence (their ``N_SEQ = 5``).
      chain: chain length (their ``N_AUTOREGRESS = 3``).
      x0_high: :math:`x_0 \sim \mathcal U[0, x0\_high)^d` (their 10).
      noise: standard deviation :math:`\sigma` of the chain noise and the distractors (their 1).
      target: ``"code"`` (:math:`w^\top(x_0 + \sum_i x_i)`) or ``"paper"`` (:math:`w^\top \sum_{i<\text{chain}-1} x_i`).

    Returns:
      ``(x, y, pos)``: ``x (batch, n_tokens, d)``, ``y (batch,)`` and
      ``pos (chain,)``, the positions of :math:`x_0, \dots, x_{\text{chain}-1}`
      (one permutation for the whole batch, as in their code;
      ``pos[-1] == n_tokens - 1``).
    """
    batch = _validate.count("batch", batch, 1)
    n_tokens, chain = _check_sizes(n_tokens, chain)
    x0_high, noise = _validate.positive("x0_high", x0_high), _validate.positive("noise", noise)
    _check_target(target, chain)
    return _sample(task, key, batch, n_tokens, chain, x0_high, noise, target)


def _check_target(target, chain):
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}; got {target!r}")
    if target == "paper" and chain < 2:
        raise ValueError(f'target="paper" needs chain >= 2; got chain={chain}')


def _sample(task, key, batch, n_tokens, chain, x0_high, noise, target):
    d = task.a.shape[0]
    dtype = task.a.dtype
    k0, kz, kp = jax.random.split(key, 3)
    z = noise * core.random_normal(kz, (batch, n_tokens, d), dtype)  # distractors and chain noise
    xs = [x0_high * core.random_uniform(k0, (batch, d), dtype)]
    for i in range(1, chain):
        xs.append(xs[-1] @ task.a + z[:, n_tokens - chain + i])
    if target == "code":
        y = (xs[0] + sum(xs)) @ task.w_y  # x_0 twice: their loop starts from x_0 and adds every chain token
    else:
        y = sum(xs[:-1]) @ task.w_y
    tokens = jnp.concatenate([z[:, : n_tokens - chain], jnp.stack(xs, axis=1)], axis=1)
    perm = jax.random.permutation(kp, n_tokens - 1)  # the last token (the query) stays last
    x = jnp.concatenate([tokens[:, perm], tokens[:, -1:]], axis=1)
    where = jnp.argsort(perm)  # where[t]: new position of old token t
    pos = jnp.concatenate([where[n_tokens - chain :], jnp.asarray([n_tokens - 1])]).astype(jnp.int32)
    return x, y, pos


def init_params(d: int = 3, *, key) -> multihop.Params:
    r"""One head: ``wq, wk (d, d)``, ``wv (1, d)``, entries :math:`\mathcal U(-1/\sqrt d, 1/\sqrt d)`."""
    d = _validate.count("d", d, 1)
    return _init(key, d)


def _init(key, d):
    b = 1.0 / math.sqrt(d)
    w = core.random_uniform(key, (2 * d + 1, d), jnp.result_type(float), -b, b)
    return multihop.Params(wq=w[:d], wk=w[d : 2 * d], wv=w[2 * d :])


def _check_model(model):
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}; got {model!r}")


def mixing(model: str, params: multihop.Params, x) -> Array:
    r"""The mixing matrix :math:`M` of ``model`` for tokens ``x: (..., N, d)``; returns ``(..., N, N)``.

    ``"standard"``: :math:`P`; ``"multihop"``: :math:`(I + Q + Q^2)/3` with
    :math:`Q_{ab} = \mathrm{softmax}_b(k_a^\top q_b / \sqrt d)` (the authors'
    query-axis softmax, transposed); ``"multihop_paper"``: :math:`P + P^2`;
    ``"self_plus_one_hop"``: :math:`(I + Q)/2`.
    """
    _check_model(model)
    x = _validate.float_array("x", x, min_ndim=2)
    return _mixing(model, params, x)


def _mixing(model, params, x):
    q, k = x @ params.wq.T, x @ params.wk.T
    if model == "standard":
        return attention.attention_weights(q, k)
    if model == "multihop":
        return multihop.hop_matrix(attention.attention_weights(k, q), variant="code")
    if model == "self_plus_one_hop":
        return (jnp.eye(x.shape[-2], dtype=x.dtype) + attention.attention_weights(k, q)) / 2.0
    return multihop.hop_matrix(attention.attention_weights(q, k), variant="paper")


def predict(model: str, params: multihop.Params, x) -> Array:
    r"""The prediction :math:`\hat y = \sum_j M_{Nj}\, w_v^\top x_j` at the last token; returns ``(...,)``."""
    _check_model(model)
    x = _validate.float_array("x", x, min_ndim=2)
    return _predict(model, params, x)


def _predict(model, params, x):
    v = (x @ params.wv.T)[..., 0]
    return jnp.einsum("...j,...j->...", _mixing(model, params, x)[..., -1, :], v)


def self_readout_mse(task: Task, *, key, n: int = 100_000, **sizes) -> float:
    r"""MSE of the best linear readout of the query token alone, :math:`\min_u \mathbb E(y - u^\top x_{N})^2`.

    One-layer attention that attends only to the query reaches this with
    :math:`w_v = u`; estimated by least squares on ``n`` fresh samples (no
    intercept, like the models). ``sizes`` are passed to :func:`sample`.
    """
    x, y, _ = sample(task, _validate.count("n", n, 2), key=key, **sizes)
    xq, yv = np.asarray(x[:, -1], np.float64), np.asarray(y, np.float64)
    u = np.linalg.lstsq(xq, yv, rcond=None)[0]
    return float(np.mean((yv - xq @ u) ** 2))


def run(seed: int, **settings) -> dict:
    r"""Train one model on the authors' task for one seed: ``run_seeds([seed], **settings)[0]``.

    ``settings`` are the keywords of :func:`run_seeds` (``model`` and the
    task, optimiser and test sizes); every default is the authors' value.

    The seed fixes the task, the initial parameters and the data stream, and
    they are the same for every model (a paired comparison; the authors train
    their two models on different batches of the same task). The optimiser is
    ``optax.chain(add_decayed_weights(weight_decay), scale_by_adam(), scale(-lr))``,
    PyTorch's coupled-L2 Adam.

    Returns:
      a ``dict`` of plain Python values with ``settings``; ``recorded_steps`` and
      ``recorded_loss`` (the batch MSE before the update, every
      ``record_every`` steps: their training curve); ``tail_loss`` (mean batch
      MSE over the last ``record_every`` steps); ``test_mse`` on ``n_test``
      fresh sequences; ``var_y`` (test-batch variance of :math:`y`) and
      ``test_nmse = test_mse / var_y``; ``weights``, the mean mixing weight of
      the query's row on each chain token (``x_0 ...``, ``x_{chain-1}`` is the
      query itself) and on all distractors together; ``params``.
    """
    return run_seeds([seed], **settings)[0]


def run_seeds(
    seeds,
    *,
    model: str = "multihop",
    n_steps: int = 20_000,
    batch: int = 200,
    lr: float = 1e-3,
    weight_decay: float = 2.0,
    record_every: int = 1000,
    d: int = 3,
    n_tokens: int = 5,
    chain: int = 3,
    x0_high: float = 10.0,
    noise: float = 1.0,
    target: str = "code",
    n_test: int = 10_000,
) -> list:
    """:func:`run` for several seeds at once (one compiled program vmapped over seeds); a list of its dicts."""
    _check_model(model)
    seeds = _validate.seeds(seeds)
    n_steps, batch = _validate.count("n_steps", n_steps, 1), _validate.count("batch", batch, 1)
    record_every, n_test = _validate.count("record_every", record_every, 1), _validate.count("n_test", n_test, 2)
    d = _validate.count("d", d, 1)
    n_tokens, chain = _check_sizes(n_tokens, chain)
    _check_target(target, chain)
    lr, x0_high, noise = (_validate.positive(n, v) for n, v in (("lr", lr), ("x0_high", x0_high), ("noise", noise)))
    weight_decay = _validate.nonnegative("weight_decay", weight_decay)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    out = _run(keys, model, n_steps, batch, lr, weight_decay, d, n_tokens, chain, x0_high, noise, target, n_test)
    _validate.require_finite(
        f"authors_multihop.run ({model})", out[:3], steps=jnp.moveaxis(out[1], -1, 0), hint="lower lr"
    )
    params, losses, test_mse, var_y, weights = jax.tree_util.tree_map(np.asarray, out)
    steps = list(range(0, n_steps, record_every))
    names = [f"x_{i}" for i in range(chain)] + ["distractors"]
    results = []
    for i, seed in enumerate(seeds):
        settings = dict(
            model=model,
            seed=int(seed),
            n_steps=n_steps,
            batch=batch,
            lr=lr,
            weight_decay=weight_decay,
            record_every=record_every,
            d=d,
            n_tokens=n_tokens,
            chain=chain,
            x0_high=x0_high,
            noise=noise,
            target=target,
            n_test=n_test,
            dtype=str(losses.dtype),
        )
        results.append(
            dict(
                settings=settings,
                recorded_steps=steps,
                recorded_loss=[float(losses[i, j]) for j in steps],
                tail_loss=float(np.mean(losses[i, -min(record_every, n_steps) :])),
                test_mse=float(test_mse[i]),
                var_y=float(var_y[i]),
                test_nmse=float(test_mse[i] / var_y[i]),
                weights={n: float(w) for n, w in zip(names, weights[i])},
                params=jax.tree_util.tree_map(lambda a, i=i: a[i], params),
            )
        )
    return results


@partial(jax.jit, static_argnums=tuple(range(1, 13)))
def _run(keys, model, n_steps, batch, lr, weight_decay, d, n_tokens, chain, x0_high, noise, target, n_test):
    opt = optax.chain(optax.add_decayed_weights(weight_decay), optax.scale_by_adam(), optax.scale(-lr))

    def one(key):
        k_task, k_init, k_data, k_test = jax.random.split(key, 4)
        task = make_task(d, key=k_task)

        def loss_fn(p, k):
            x, y, _ = _sample(task, k, batch, n_tokens, chain, x0_high, noise, target)
            return jnp.mean((_predict(model, p, x) - y) ** 2)

        params = _init(k_init, d)
        keys = jax.random.split(k_data, n_steps)
        (params, _), losses = _descent.scan(jax.value_and_grad(loss_fn), params, opt.init(params), opt, keys)
        x, y, pos = _sample(task, k_test, n_test, n_tokens, chain, x0_high, noise, target)
        row = jnp.mean(_mixing(model, params, x)[:, -1, :], axis=0)
        on_chain = row[pos]
        weights = jnp.concatenate([on_chain, jnp.sum(row, keepdims=True) - jnp.sum(on_chain, keepdims=True)])
        return params, losses, jnp.mean((_predict(model, params, x) - y) ** 2), jnp.var(y), weights

    return jax.vmap(one)(keys)


# ---------------------------------------------------------------------------------------------------------------
# The expanding task (Fig. 3) as the authors' code defines it
# ---------------------------------------------------------------------------------------------------------------

#: The models of the authors' Fig. 3 code, one-head self-attention without the query itself, and their
#: expanding attention (:func:`predict_fig3`).
FIG3_MODELS = ("self", "expanding")


class Fig3Task(NamedTuple):
    r"""One draw of the authors' Fig. 3 task (their ``data_expanding.AutoRegression`` with two chain tokens).

    Attributes:
      w_y: ``(d,)``, the readout :math:`w`, entries :math:`\mathcal N(1, 1)`; :math:`y = w^\top x_0`.
      a: ``(d, d)``, entries :math:`\mathcal U[0, 1)`; the query is ``x_0 @ a + noise``.
    """

    w_y: Array
    a: Array


def make_fig3_task(d: int = 10, *, key) -> Fig3Task:
    r"""Draw :math:`w \sim \mathcal N(1, I)` and :math:`A \sim \mathcal U[0, 1)^{d \times d}` (as :func:`make_task`)."""
    t = make_task(d, key=key)
    return Fig3Task(w_y=t.w_y, a=t.a)


def _check_p(p):
    if not 0 < float(p) < 1:
        raise ValueError(f"p must lie strictly between 0 and 1; got {p!r}")


def sample_fig3(task: Fig3Task, n: int, batch: int, p, *, key, x0_high: float = 2.0, noise: float = 0.1):
    r"""A batch of sequences of the authors' Fig. 3 task.

    ``n - 2`` noise tokens :math:`\mathcal N(0, \sigma^2 I)`, the informative token
    :math:`x_0 \sim \mathcal U[0, s)^d` and the query :math:`x_1 = A^\top x_0 + \epsilon`
    (their row vectors: ``x_0 @ a``), :math:`\epsilon \sim \mathcal N(0, \sigma^2 I)`, always last;
    :math:`y = w^\top x_0`. :math:`x_0` sits :math:`\min(G + 1, n - 1)` tokens before the query,
    :math:`G \sim \mathrm{Geo}(p)` on :math:`\{1, 2, \dots\}` (NumPy's ``geometric``): at least one noise
    token lies between them, and a draw past the start of the sequence puts :math:`x_0` first.
    Their sizes: :math:`s = 2`, :math:`\sigma = 0.1`.

    Returns:
      ``(x, y, dist)``: ``x (batch, n, d)``, ``y (batch,)`` and ``dist (batch,)``, the distance of
      :math:`x_0` from the query (``x[:, n - 1 - dist]`` is :math:`x_0`).
    """
    n, batch = _validate.count("n", n, 3), _validate.count("batch", batch, 1)
    _check_p(p)
    x0_high, noise = _validate.positive("x0_high", x0_high), _validate.positive("noise", noise)
    return _sample_fig3(task, key, n, batch, jnp.asarray(p, task.a.dtype), x0_high, noise)


@partial(jax.jit, static_argnums=(2, 3, 5, 6))
def _sample_fig3(task, key, n, batch, p, x0_high, noise):
    d = task.a.shape[0]
    dtype = task.a.dtype
    k0, kz, kg = jax.random.split(key, 3)
    z = noise * core.random_normal(kz, (batch, n, d), dtype)
    x0 = x0_high * core.random_uniform(k0, (batch, d), dtype)
    u = 1.0 - core.random_uniform(kg, (batch,), dtype)  # in (0, 1]
    gap = jnp.floor(jnp.log(u) / jnp.log1p(-p)) + 1.0  # Geo(p) on {1, 2, ...} by inversion
    dist = jnp.minimum(gap + 1.0, n - 1).astype(jnp.int32)
    rows = jnp.arange(batch)
    x = z.at[:, -1].set(x0 @ task.a + z[:, -1]).at[rows, n - 1 - dist].set(x0)
    return x, x0 @ task.w_y, dist


def fig3_target_variance(task: Fig3Task, x0_high: float = 2.0) -> Array:
    r""":math:`\mathrm{Var}(y) = \|w\|^2 s^2 / 12` (:math:`x_0` uniform on :math:`[0, s)^d`)."""
    return task.w_y @ task.w_y * x0_high**2 / 12.0


def ridge_floor(task: Fig3Task, weight_decay: float = 2.0, x0_high: float = 2.0) -> float:
    r"""The MSE of the best readout of :math:`x_0` alone under their coupled weight decay, in closed form.

    Adam with coupled weight decay :math:`\lambda` follows the gradient of
    :math:`\mathbb E(\hat y - y)^2 + \tfrac{\lambda}{2}\|\theta\|^2`. A head that puts all its weight on
    :math:`x_0` predicts :math:`u^\top x_0` with :math:`u = w_v`; the best such :math:`u` is the ridge
    solution :math:`u^* = (\Sigma + \tfrac{\lambda}{2} I)^{-1} \Sigma w` with
    :math:`\Sigma = \mathbb E\, x_0 x_0^\top = \tfrac{s^2}{12} I + \tfrac{s^2}{4} \mathbf 1 \mathbf 1^\top`,
    and its MSE is :math:`(u^* - w)^\top \Sigma (u^* - w)` (no penalty term included). It is the floor
    their objective sets on a head that has found :math:`x_0` (its attention weights cost a penalty
    too, so a trained head can at best come close to it).
    """
    weight_decay = _validate.nonnegative("weight_decay", weight_decay)
    x0_high = _validate.positive("x0_high", x0_high)
    w = np.asarray(task.w_y, np.float64)
    d = w.size
    sigma = x0_high**2 / 12.0 * np.eye(d) + x0_high**2 / 4.0 * np.ones((d, d))
    u = np.linalg.solve(sigma + weight_decay / 2.0 * np.eye(d), sigma @ w)
    return float((u - w) @ sigma @ (u - w))


def handset_fig3(task: Fig3Task, scale: float) -> multihop.Params:
    r"""A head of the trained family set by hand: :math:`W_Q = \lambda I`, :math:`W_K = I`, :math:`w_v = w`.

    Every score is :math:`\lambda\, x_j^\top x_N / \sqrt d` in both models' orientation. :math:`x_0` and
    the query have non-negative entries of order 1 and :math:`d/2`, the noise tokens entries of order
    :math:`\sigma`, so a moderate :math:`\lambda` puts almost all the weight on :math:`x_0`, whose value
    :math:`w^\top x_0` is the target.
    """
    d = task.w_y.shape[0]
    eye = jnp.eye(d, dtype=task.w_y.dtype)
    return multihop.Params(wq=scale * eye, wk=eye, wv=task.w_y[None])


def predict_fig3(
    model: str,
    params: multihop.Params,
    x,
    *,
    alpha0: float = 0.1,
    beta0: float = 0.9,
    mass: float = 0.05,
    tol: float = 0.01,
    max_iter: int = 100,
):
    r"""Prediction at the last token of ``x: (B, n, d)`` by one of the authors' Fig. 3 models.

    Both models score the ``n - 1`` earlier tokens with :math:`W_Q, W_K` (scale :math:`1/\sqrt d`)
    and read out the scalar values :math:`v_j = w_v^\top x_j`; the query's own token gets no weight.

    * ``"self"`` (their ``CausalSelfAttention(self_attend=False)``): weights
      :math:`\mathrm{softmax}_j(q_N^\top k_j / \sqrt d)` over all earlier tokens.
    * ``"expanding"`` (their ``ExpandingAttention``). Their code scores token :math:`j` as
      :math:`q_j^\top k_N / \sqrt d` (the roles of :math:`W_Q` and :math:`W_K` exchanged, the same family).
      With :math:`\alpha = \alpha_0`, :math:`\beta = \beta_0` and token distance :math:`t \ge 1` from the
      query, each step computes :math:`\kappa = \ln(\text{mass}) / \ln(1 - \alpha/(\alpha + \beta))`
      and the window :math:`W = \lceil \kappa \rceil`; weights
      :math:`\mathrm{softmax}_t(s_t - t / \kappa)` over :math:`1 \le t \le \min(W, n) - 1`; then
      :math:`\alpha \mathrel{+}= 1`, :math:`\beta \mathrel{+}= \sum_t t\, a_t`. It stops at the first
      step where :math:`\kappa > n`, :math:`\kappa` falls, or :math:`\kappa` grows by less than ``tol``
      (at most ``max_iter`` steps), and outputs that step's weights. The log-prior slope is
      :math:`-1/\kappa`, not :math:`\ln(1 - q)`, and :math:`\beta` counts :math:`t` rather than
      :math:`t - 1`, as in their code. As there, no gradient reaches :math:`\alpha, \beta` (fixed at
      their initial 0.1, 0.9), the window or the prior: they enter their softmax as constants.

    Returns:
      ``(y_hat (B,), info)`` with ``info`` a dict of ``weights (B, n - 1)`` (on the earlier tokens, in
      token order) and, for ``"expanding"``, ``window (B,)`` (:math:`\min(W, n) - 1` tokens) and
      ``iterations (B,)`` (their loop index at the stop).
    """
    if model not in FIG3_MODELS:
        raise ValueError(f"model must be one of {FIG3_MODELS}; got {model!r}")
    x = _validate.float_array("x", x, min_ndim=3)
    if x.shape[-2] < 2:
        raise ValueError(f"x must hold at least 2 tokens; got shape {x.shape}")
    for name, v in (("alpha0", alpha0), ("beta0", beta0), ("tol", tol)):
        _validate.positive(name, v)
    mass = _validate.open_unit("mass", mass)
    max_iter = _validate.count("max_iter", max_iter, 1)
    return _predict_fig3(model, params, x, float(alpha0), float(beta0), mass, float(tol), max_iter)


@partial(jax.jit, static_argnums=(0, 3, 4, 5, 6, 7))
def _predict_fig3(model, params, x, alpha0, beta0, mass, tol, max_iter):
    n, d = x.shape[-2], x.shape[-1]
    v = (x[:, :-1] @ params.wv.T)[..., 0]
    if model == "self":
        s = (x[:, :-1] @ params.wk.T) @ (x[:, -1] @ params.wq.T)[..., None] / math.sqrt(d)
        a = jax.nn.softmax(s[..., 0], axis=-1)
        return jnp.sum(a * v, -1), dict(weights=a)
    s = (x[:, :-1] @ params.wq.T) @ (x[:, -1] @ params.wk.T)[..., None] / math.sqrt(d)
    s = s[..., 0]
    dist = jnp.arange(n - 1, 0, -1).astype(x.dtype)  # token j < n - 1 is n - 1 - j tokens back
    log_mass = math.log(mass)

    def weights(sj, kappa):
        width = jnp.minimum(jnp.ceil(kappa), n) - 1  # distances 1 .. min(W, n) - 1 are in the window
        logits = jnp.where(dist <= width, sj - dist / kappa, -jnp.inf)
        return jax.nn.softmax(logits), width

    def refine(sj):
        def body(st):
            i, al, be, k_old, _, _ = st
            kappa = log_mass / jnp.log(1.0 - al / (al + be))
            a, _ = weights(sj, kappa)
            stop = (kappa > n) | (kappa < k_old) | (kappa - k_old < tol)
            return i + 1, al + 1.0, be + a @ dist, kappa, kappa, stop

        zero = jnp.zeros((), x.dtype)
        st = (jnp.int32(0), zero + alpha0, zero + beta0, zero, zero, jnp.bool_(False))
        i, _, _, _, kappa, _ = jax.lax.while_loop(lambda st: (~st[5]) & (st[0] < max_iter), body, st)
        return kappa, i - 1

    kappa, iters = jax.vmap(refine)(jax.lax.stop_gradient(s))
    a, width = jax.vmap(weights)(s, kappa)  # gradients reach the scores, as in their code; not kappa
    return jnp.sum(a * v, -1), dict(weights=a, window=width.astype(jnp.int32), iterations=iters)


def run_fig3(
    model: str,
    seeds,
    ps,
    *,
    d: int = 10,
    n: int = 50,
    n_steps: int = 10_000,
    n_cont: int = 0,
    batch: int = 1,
    lr: float = 5e-4,
    weight_decay: float = 2.0,
    x0_high: float = 2.0,
    noise: float = 0.1,
    n_test: int = 2048,
    alpha0: float = 0.1,
    beta0: float = 0.9,
    mass: float = 0.05,
    tol: float = 0.01,
    max_iter: int = 100,
) -> dict:
    r"""Train one of the authors' Fig. 3 models on their task for every ``(p, seed)``; defaults are theirs.

    Their ``run_expanding.py``: one sequence a step (``batch = 1``), 10000 steps, MSE in raw units,
    Adam at :math:`5 \times 10^{-4}` with coupled weight decay 2 (as :func:`run`), weights
    :math:`\mathcal U(-1/\sqrt d, 1/\sqrt d)`. The seed fixes the task, the initial parameters, the
    data stream and the test sequences, the same for both models (paired); :math:`p` only changes the
    distance of :math:`x_0`. After ``n_steps`` the model is tested, then trained ``n_cont`` steps more
    at the same step size and tested again (the continuation check). Vmapped over ``ps`` and ``seeds``.

    Returns:
      a ``dict`` of NumPy arrays with leading axes ``(len(ps), len(seeds))``: ``loss``
      ``(..., n_steps + n_cont)`` (each step's batch MSE before its update, raw units), ``var_y``
      (:func:`fig3_target_variance`) and, for the test after ``n_steps`` and after the continuation
      (suffix ``_cont``): ``mse`` (raw test MSE), ``weight_x0`` (mean weight on :math:`x_0`),
      ``sq_norm`` (:math:`\|\theta\|^2`) and, for ``"expanding"``, ``window`` and ``iterations``
      (test means).
    """
    if model not in FIG3_MODELS:
        raise ValueError(f"model must be one of {FIG3_MODELS}; got {model!r}")
    seeds = _validate.seeds(seeds)
    ps = np.asarray(ps, dtype=float)
    if ps.ndim != 1 or ps.size == 0 or not np.all((ps > 0) & (ps < 1)):
        raise ValueError(f"ps must be a non-empty 1-D sequence in (0, 1); got {ps!r}")
    d, n = _validate.count("d", d, 1), _validate.count("n", n, 3)
    n_steps, n_cont = _validate.count("n_steps", n_steps, 1), _validate.count("n_cont", n_cont, 0)
    batch, n_test = _validate.count("batch", batch, 1), _validate.count("n_test", n_test, 2)
    lr, x0_high, noise = (_validate.positive(k, v) for k, v in (("lr", lr), ("x0_high", x0_high), ("noise", noise)))
    weight_decay = _validate.nonnegative("weight_decay", weight_decay)
    for name, v in (("alpha0", alpha0), ("beta0", beta0), ("tol", tol)):
        _validate.positive(name, v)
    mass, max_iter = _validate.open_unit("mass", mass), _validate.count("max_iter", max_iter, 1)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    static = dict(model=model, d=d, n=n, n_steps=n_steps, n_cont=n_cont, batch=batch, lr=lr, weight_decay=weight_decay)
    static.update(x0_high=x0_high, noise=noise, n_test=n_test, alpha0=float(alpha0), beta0=float(beta0), mass=mass)
    out = _run_fig3(keys, jnp.asarray(ps, jnp.result_type(float)), tol=float(tol), max_iter=max_iter, **static)
    _validate.require_finite(
        f"authors_multihop.run_fig3 ({model})", out["loss"], steps=jnp.moveaxis(out["loss"], -1, 0), hint="lower lr"
    )
    return {k: np.asarray(v) for k, v in out.items()}


_FIG3_STATIC = ("model", "d", "n", "n_steps", "n_cont", "batch", "lr", "weight_decay", "x0_high", "noise", "n_test")
_FIG3_STATIC += ("alpha0", "beta0", "mass", "tol", "max_iter")


@partial(jax.jit, static_argnames=_FIG3_STATIC)
def _run_fig3(
    keys,
    ps,
    *,
    model,
    d,
    n,
    n_steps,
    n_cont,
    batch,
    lr,
    weight_decay,
    x0_high,
    noise,
    n_test,
    alpha0,
    beta0,
    mass,
    tol,
    max_iter,
):
    opt = optax.chain(optax.add_decayed_weights(weight_decay), optax.scale_by_adam(), optax.scale(-lr))

    def one(p, key):
        k_task, k_init, k_data, k_test = jax.random.split(key, 4)
        task = make_fig3_task(d, key=k_task)

        def predict(prm, x):
            return _predict_fig3(model, prm, x, alpha0, beta0, mass, tol, max_iter)

        def loss_fn(prm, k):
            x, y, _ = _sample_fig3(task, k, n, batch, p, x0_high, noise)
            return jnp.mean((predict(prm, x)[0] - y) ** 2)

        def value_and_grad(prm, t):
            return jax.value_and_grad(loss_fn)(prm, jax.random.fold_in(k_data, t))

        x, y, dist = _sample_fig3(task, k_test, n, n_test, p, x0_high, noise)

        def test(prm):
            yhat, info = predict(prm, x)
            res = dict(
                mse=jnp.mean((yhat - y) ** 2),
                weight_x0=jnp.mean(info["weights"][jnp.arange(n_test), n - 1 - dist]),
                sq_norm=sum(jnp.sum(w**2) for w in prm),
            )
            for k in ("window", "iterations"):
                if k in info:
                    res[k] = jnp.mean(info[k].astype(x.dtype))
            return res

        params = _init(k_init, d)
        state, first = _descent.scan(value_and_grad, params, opt.init(params), opt, jnp.arange(n_steps))
        out = test(state[0])
        state, more = _descent.scan(value_and_grad, *state, opt, jnp.arange(n_steps, n_steps + n_cont))
        out.update({f"{k}_cont": v for k, v in test(state[0]).items()})
        out["loss"] = jnp.concatenate([first, more])
        out["var_y"] = fig3_target_variance(task, x0_high)
        return out

    return jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None))(ps, keys)
