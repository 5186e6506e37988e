r"""The multi-hop toy task (Fig. 2) of Singh & Buckley (2023) as the authors' public code defines it.

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

from lse_energy import _validate, attention, multihop

Array = jax.Array

__all__ = ["MODELS", "TARGETS", "Task", "make_task", "sample", "init_params", "mixing", "predict",
           "self_readout_mse", "run", "run_seeds"]

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
    return Task(w_y=1.0 + jax.random.normal(kw, (d,), dtype), a=jax.random.uniform(ka, (d, d), dtype))


def _check_sizes(n_tokens, chain):
    chain = _validate.count("chain", chain, 1)
    n_tokens = _validate.count("n_tokens", n_tokens, 2)
    if chain > n_tokens:
        raise ValueError(f"chain must be <= n_tokens; got chain={chain}, n_tokens={n_tokens}")
    return n_tokens, chain


def sample(task: Task, batch: int, *, key, n_tokens: int = 5, chain: int = 3, x0_high: float = 10.0,
           noise: float = 1.0, target: str = "code"):
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
    z = noise * jax.random.normal(kz, (batch, n_tokens, d), dtype)  # distractors and chain noise
    xs = [x0_high * jax.random.uniform(k0, (batch, d), dtype)]
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
    pos = jnp.concatenate([where[n_tokens - chain:], jnp.asarray([n_tokens - 1])]).astype(jnp.int32)
    return x, y, pos


def init_params(d: int = 3, *, key) -> multihop.Params:
    r"""One head: ``wq, wk (d, d)``, ``wv (1, d)``, entries :math:`\mathcal U(-1/\sqrt d, 1/\sqrt d)`."""
    d = _validate.count("d", d, 1)
    return _init(key, d)


def _init(key, d):
    b = 1.0 / math.sqrt(d)
    w = jax.random.uniform(key, (2 * d + 1, d), jnp.result_type(float), -b, b)
    return multihop.Params(wq=w[:d], wk=w[d:2 * d], wv=w[2 * d:])


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


def run(seed: int, *, model: str = "multihop", n_steps: int = 20_000, batch: int = 200, lr: float = 1e-3,
        weight_decay: float = 2.0, record_every: int = 1000, d: int = 3, n_tokens: int = 5, chain: int = 3,
        x0_high: float = 10.0, noise: float = 1.0, target: str = "code", n_test: int = 10_000) -> dict:
    r"""Train ``model`` on the authors' task for one seed; every default is their value.

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
    return run_seeds([seed], model=model, n_steps=n_steps, batch=batch, lr=lr, weight_decay=weight_decay,
                     record_every=record_every, d=d, n_tokens=n_tokens, chain=chain, x0_high=x0_high,
                     noise=noise, target=target, n_test=n_test)[0]


def run_seeds(seeds, *, model: str = "multihop", n_steps: int = 20_000, batch: int = 200, lr: float = 1e-3,
              weight_decay: float = 2.0, record_every: int = 1000, d: int = 3, n_tokens: int = 5, chain: int = 3,
              x0_high: float = 10.0, noise: float = 1.0, target: str = "code", n_test: int = 10_000) -> list:
    """:func:`run` for several seeds at once (one compiled program vmapped over seeds); a list of its dicts."""
    _check_model(model)
    seeds = np.asarray(seeds)
    if seeds.ndim != 1 or seeds.size == 0 or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be a non-empty 1-D sequence of integers; got {seeds!r}")
    n_steps, batch = _validate.count("n_steps", n_steps, 1), _validate.count("batch", batch, 1)
    record_every, n_test = _validate.count("record_every", record_every, 1), _validate.count("n_test", n_test, 2)
    d = _validate.count("d", d, 1)
    n_tokens, chain = _check_sizes(n_tokens, chain)
    _check_target(target, chain)
    lr, x0_high, noise = (_validate.positive(n, v) for n, v in (("lr", lr), ("x0_high", x0_high),
                                                                  ("noise", noise)))
    weight_decay = _validate.nonnegative("weight_decay", weight_decay)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    out = _run(keys, model, n_steps, batch, lr, weight_decay, d, n_tokens, chain, x0_high, noise, target, n_test)
    _validate.require_finite(f"authors_multihop.run ({model})", out[:3], steps=jnp.moveaxis(out[1], -1, 0),
                             hint="lower lr")
    params, losses, test_mse, var_y, weights = jax.tree_util.tree_map(np.asarray, out)
    steps = list(range(0, n_steps, record_every))
    names = [f"x_{i}" for i in range(chain)] + ["distractors"]
    results = []
    for i, seed in enumerate(seeds):
        settings = dict(model=model, seed=int(seed), n_steps=n_steps, batch=batch, lr=lr, weight_decay=weight_decay,
                        record_every=record_every, d=d, n_tokens=n_tokens, chain=chain, x0_high=x0_high,
                        noise=noise, target=target, n_test=n_test, dtype=str(losses.dtype))
        results.append(dict(settings=settings, recorded_steps=steps,
                            recorded_loss=[float(losses[i, j]) for j in steps],
                            tail_loss=float(np.mean(losses[i, -min(record_every, n_steps):])),
                            test_mse=float(test_mse[i]), var_y=float(var_y[i]),
                            test_nmse=float(test_mse[i] / var_y[i]),
                            weights={n: float(w) for n, w in zip(names, weights[i])},
                            params=jax.tree_util.tree_map(lambda a, i=i: a[i], params)))
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

        def step(carry, k):
            p, s = carry
            loss, g = jax.value_and_grad(loss_fn)(p, k)
            updates, s = opt.update(g, s, p)
            return (optax.apply_updates(p, updates), s), loss

        params = _init(k_init, d)
        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(k_data, n_steps))
        x, y, pos = _sample(task, k_test, n_test, n_tokens, chain, x0_high, noise, target)
        row = jnp.mean(_mixing(model, params, x)[:, -1, :], axis=0)
        on_chain = row[pos]
        weights = jnp.concatenate([on_chain, jnp.sum(row, keepdims=True) - jnp.sum(on_chain, keepdims=True)])
        return params, losses, jnp.mean((_predict(model, params, x) - y) ** 2), jnp.var(y), weights

    return jax.vmap(one)(keys)
