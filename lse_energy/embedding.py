r"""Vector embeddings: skip-gram with a full softmax and with negative sampling.

This module implements §20 of the lecture notes ("Vector
Embeddings"). A word :math:`c` of a vocabulary of size :math:`n` enters as a
one-hot vector :math:`e_c`; a 3-layer network maps it to the hidden layer
:math:`e_c^\top U = U_c \in \mathbb{R}^d` (the *embedding*, :math:`d < n`) and
then to one score per candidate context word,
:math:`s_{cw} = V_w^\top U_c`, i.e. the score matrix :math:`S = U V^\top`.
Training data are the pairs (centre :math:`c`, context :math:`o`) that occur
within a fixed window of each other in a corpus, summarised by the
co-occurrence counts :math:`N_{co}` (:func:`cooccurrence`); every loss below is
a sum over pairs, so it depends on the corpus only through :math:`N`.

**Full softmax** (skip-gram with the softmax output of §20, "output is
probability of each word's co-occurrence"):

.. math::

    L_{\rm sm}(U, V) = -\sum_{\text{pairs }(c, o)} \ln p(o \mid c)
      = \sum_{c, o} N_{co}\Big[\ln \sum_w e^{s_{cw}} - s_{co}\Big].

The log-partition :math:`\ln \sum_w e^{s_{cw}}` is a log-sum-exp whose
*children* are the centre words (each weighted by its count
:math:`N_c = \sum_o N_{co}`) and whose *parents* are all candidate context
words. With the book's energy :math:`E = -\sum_c N_c \ln \sum_w e^{s_{cw}}`
(:func:`energy`) the loss is

.. math:: L_{\rm sm} = -\sum_{c,o} N_{co} s_{co} - E,

so the LSE enters with the *opposite* sign to the book's descended energy:
training pushes the log-partition down (``E`` up), while the data term pulls
the observed scores up. The gradient keeps the softmax-weighted form,
:math:`\partial L_{\rm sm} / \partial s_{cw} = N_c\,p_{cw} - N_{cw}` with
:math:`p_{cw} = \mathrm{softmax}_w(s_{cw})`.

**Negative sampling** (word2vec, "backpropagates only some negative cases"):
each observed pair is contrasted with :math:`k` noise words drawn from a noise
distribution :math:`q` (:func:`noise_distribution`, the unigram to the power
3/4 in word2vec):

.. math::

    L_{\rm ns} = \sum_{c,o} N_{co}\,\mathrm{softplus}(-s_{co})
      + k \sum_c N_c \sum_w q_w\, \mathrm{softplus}(s_{cw}),

the expectation over the noise draws of the sampled loss
(:func:`sampled_negative_sampling_loss`). Every
:math:`\mathrm{softplus}(x) = \ln(e^0 + e^x)` is a *two-term* LSE: the one
LSE over the vocabulary is replaced by independent two-way (real vs noise)
log-partitions. Its unconstrained optimum is the shifted PMI
:math:`s_{co} = \ln \frac{N_{co}}{k N_c q_o}`, i.e.
:math:`\mathrm{PMI}(c, o) - \ln k` for the unigram :math:`q` (Levy and
Goldberg 2014), where the full softmax's is :math:`\ln p(o \mid c)` up to a
per-centre constant.

Everything works on dense :math:`n \times n` score matrices: the vocabularies
here are small. Co-occurrence counts and token ids are discrete data: integer
arrays are accepted (counts are cast to the parameters' dtype); embeddings,
noise distributions and transition matrices must be floating.
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
    "FitExtras",
    "Params",
    "analogy",
    "cooccurrence",
    "cosine",
    "energy",
    "fit",
    "grad_params",
    "grad_negative_sampling_loss_params",
    "grad_softmax_loss_params",
    "init_params",
    "log_partition",
    "negative_sampling_loss",
    "noise_distribution",
    "pmi",
    "ring_transition",
    "sample_chain",
    "sampled_negative_sampling_loss",
    "scores",
    "skipgram_pairs",
    "softmax_loss",
]

OBJECTIVES = ("softmax", "negative")


class Params(NamedTuple):
    r"""Input and output embeddings of the skip-gram network (§20).

    .. math:: s_{cw} = V_w^\top U_c, \qquad S = U V^\top

    Attributes:
      U: ``(n_vocab, dim)`` input (centre-word) embeddings: row :math:`c` is the
        hidden layer for the one-hot input :math:`e_c`. This is "the embedding".
      V: ``(n_vocab, dim)`` output (context-word) embeddings: the weights of
        the output layer.
    """

    U: Array
    V: Array


class FitExtras(NamedTuple):
    r"""The ``extras`` of :func:`fit`'s :class:`~lse_energy.core.FitResult`.

    Attributes:
      opt_state: the optimizer state after the last step (to continue training).
    """

    opt_state: Any


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _check_params(params) -> Params:
    return _validate.params(params, Params, {"U": "n_vocab dim", "V": "n_vocab dim"})[0]


def _check_counts(counts, n: int, dtype, name: str = "x") -> Array:
    # counts are discrete data: integer arrays keep their natural dtype and are cast (exactly) here
    counts = jnp.asarray(counts)
    if jnp.issubdtype(counts.dtype, jnp.integer):
        counts = counts.astype(dtype)
    counts = _validate.array(name, counts, 2)
    if counts.shape != (n, n):
        raise ValueError(f"{name} must have shape (n_vocab, n_vocab) = ({n}, {n}); got {counts.shape}")
    if _validate.is_concrete(counts):
        c = np.asarray(counts)
        if np.any(c < 0):
            raise ValueError(f"{name} must be non-negative")
        if not c.sum() > 0:
            raise ValueError(f"{name} must have a positive total (at least one pair)")
    return counts.astype(dtype)


def _float_of(a) -> jnp.dtype:
    """``a``'s dtype if floating, else JAX's default float (for integer counts)."""
    return a.dtype if jnp.issubdtype(a.dtype, jnp.floating) else jnp.result_type(float)


def _check_noise(noise, n: int, dtype) -> Array:
    noise = _validate.array("noise", noise, 1)
    if noise.shape != (n,):
        raise ValueError(f"noise must have shape (n_vocab,) = ({n},); got {noise.shape}")
    if _validate.is_concrete(noise):
        q = np.asarray(noise, np.float64)
        if np.any(q < 0) or abs(q.sum() - 1.0) > 1e-5:
            raise ValueError(f"noise must be a probability vector (entries >= 0, sum 1); got sum {q.sum():.6g}")
    return noise.astype(dtype)


def _check_tokens(name: str, tokens, n_vocab: int, ndim: int = 1) -> Array:
    tokens = jnp.asarray(tokens)
    if tokens.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s); got shape {tokens.shape}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(f"{name} must hold integer token ids; got dtype {tokens.dtype}")
    if _validate.is_concrete(tokens) and tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= n_vocab):
        raise ValueError(
            f"{name} must hold token ids in 0..{n_vocab - 1}; got {int(tokens.min())}..{int(tokens.max())}"
        )
    return tokens


# ---------------------------------------------------------------------------
# Scores, energy and the full-softmax loss
# ---------------------------------------------------------------------------


def init_params(n_vocab: int, dim: int, *, key: Array, scale: float = 0.1, dtype=None) -> Params:
    r"""Random embeddings :math:`U, V` with i.i.d. :math:`\mathcal{N}(0, \text{scale}^2)` entries.

    Args:
      n_vocab, dim: vocabulary size :math:`n \ge 1` and embedding dimension :math:`d \ge 1`.
      key: a ``jax.random`` key.
      scale: standard deviation, ``> 0``.
      dtype: a floating dtype (default: JAX's default float).

    Returns:
      a :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.init_params(5, 2, key=jax.random.key(0))
      >>> params.U.shape, embedding.scores(params).shape
      ((5, 2), (5, 5))
    """
    _validate.key("key", key)
    n_vocab = _validate.count("n_vocab", n_vocab)
    dim = _validate.count("dim", dim)
    scale = _validate.positive("scale", scale)
    dtype = _validate.float_dtype("dtype", dtype)
    ku, kv = jax.random.split(key)
    return Params(
        scale * core.random_normal(ku, (n_vocab, dim), dtype), scale * core.random_normal(kv, (n_vocab, dim), dtype)
    )


def scores(params: Params) -> Array:
    r"""The score (similarity) matrix :math:`S = U V^\top`, :math:`s_{cw} = V_w^\top U_c`, ``(n_vocab, n_vocab)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.init_params(5, 2, key=jax.random.key(0))
      >>> embedding.scores(params).shape
      (5, 5)
    """
    U, V = _check_params(params)
    return U @ V.T


def log_partition(params: Params) -> Array:
    r"""Per-centre log-partition :math:`\ln \sum_w \exp s_{cw}` (an LSE over candidate contexts), ``(n_vocab,)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.Params(jnp.zeros((4, 2)), jnp.zeros((4, 2)))
      >>> [round(v, 3) for v in embedding.log_partition(params).tolist()]  # ln 4
      [1.386, 1.386, 1.386, 1.386]
    """
    return core.logsumexp(scores(params))


def energy(params: Params, x) -> Array:
    r"""The book's LSE energy of the skip-gram softmax, :math:`E = -\sum_c N_c \ln \sum_w e^{s_{cw}}` (§20).

    Children are the centre words, weighted by their pair counts
    :math:`N_c = \sum_o N_{co}`; parents are all candidate context words; the
    similarity is :math:`V_w^\top U_c`. It enters the full-softmax loss with
    the opposite sign: :math:`L_{\rm sm} = -\sum_{c,o} N_{co} s_{co} - E`.

    Args:
      params: :class:`Params`.
      x: ``(n_vocab, n_vocab)`` non-negative co-occurrence counts :math:`N_{co}` (integer counts are cast).

    Returns:
      the scalar :math:`E`.

    Examples:
      With all scores 0 every centre word spreads its weight over the 4 candidate contexts:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.Params(jnp.zeros((4, 2)), jnp.zeros((4, 2)))
      >>> # -16 ln 4: 16 pairs
      >>> round(float(embedding.energy(params, jnp.ones((4, 4)))), 3)
      -22.181
    """
    U, V = _check_params(params)
    x = _check_counts(x, U.shape[0], U.dtype)
    return -jnp.sum(x.sum(axis=1) * core.logsumexp(U @ V.T))


def _sm_score_grad(S: Array, counts: Array) -> Array:
    """dL_sm/dS = N_c softmax_w(S)_cw - N_cw."""
    return counts.sum(axis=1, keepdims=True) * jax.nn.softmax(S, axis=1) - counts


def grad_params(params: Params, x) -> Params:
    r"""Analytic gradient of :func:`energy`: the softmax-weighted sum of sim-gradients (eq. 4 of Tschantz 2025).

    .. math::

        \begin{aligned}
        \frac{\partial E}{\partial U_c} &= -N_c \sum_w p_{cw} V_w, \\
        \frac{\partial E}{\partial V_w} &= -\sum_c N_c\, p_{cw} U_c, \\
        p_{cw} &= \mathrm{softmax}_w(s_{cw}).
        \end{aligned}

    Returns:
      a :class:`Params` holding the two gradients.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.init_params(4, 2, key=jax.random.key(0))
      >>> g = embedding.grad_params(params, jnp.ones((4, 4)))
      >>> g.U.shape, g.V.shape
      ((4, 2), (4, 2))
    """
    U, V = _check_params(params)
    x = _check_counts(x, U.shape[0], U.dtype)
    G = -x.sum(axis=1, keepdims=True) * jax.nn.softmax(U @ V.T, axis=1)
    return Params(G @ V, G.T @ U)


def softmax_loss(params: Params, x) -> Array:
    r"""Full-softmax skip-gram loss :math:`L_{\rm sm} = \sum_{c,o} N_{co}[\ln\sum_w e^{s_{cw}} - s_{co}]` (§20).

    The negative log-likelihood of every (centre, context) pair under
    :math:`p(o \mid c) = \mathrm{softmax}_o(s_{co})`, summed over pairs
    (:math:`N_{co}` of them for each cell). Equal to
    :math:`-\sum N_{co}s_{co} - E` with :math:`E` = :func:`energy`.

    Args:
      params: :class:`Params`.
      x: ``(n_vocab, n_vocab)`` non-negative co-occurrence counts (integer counts are cast).

    Returns:
      the scalar loss.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.Params(jnp.zeros((4, 2)), jnp.zeros((4, 2)))
      >>> round(float(embedding.softmax_loss(params, jnp.ones((4, 4)))), 3)  # 16 ln 4
      22.181
    """
    U, V = _check_params(params)
    x = _check_counts(x, U.shape[0], U.dtype)
    S = U @ V.T
    return jnp.sum(x.sum(axis=1) * core.logsumexp(S)) - jnp.sum(x * S)


def grad_softmax_loss_params(params: Params, x) -> Params:
    r"""Analytic gradient of :func:`softmax_loss`.

    With :math:`G_{cw} = \partial L_{\rm sm}/\partial s_{cw} = N_c p_{cw} - N_{cw}`:
    :math:`\partial L/\partial U = G V`, :math:`\partial L/\partial V = G^\top U`.
    The :math:`N_c p_{cw}` part is minus :func:`grad_params`'s softmax-weighted form.

    Returns:
      a :class:`Params` holding the two gradients.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.init_params(4, 2, key=jax.random.key(0))
      >>> embedding.grad_softmax_loss_params(params, jnp.ones((4, 4))).V.shape
      (4, 2)
    """
    U, V = _check_params(params)
    x = _check_counts(x, U.shape[0], U.dtype)
    G = _sm_score_grad(U @ V.T, x)
    return Params(G @ V, G.T @ U)


# ---------------------------------------------------------------------------
# Negative sampling
# ---------------------------------------------------------------------------


def noise_distribution(x, power: float = 0.75) -> Array:
    r"""word2vec's noise distribution :math:`q_w \propto (N_w)^{\text{power}}` over context words.

    :math:`N_w = \sum_c N_{cw}` is the context count of word :math:`w`;
    ``power = 1`` is the unigram distribution (for which the negative-sampling
    optimum is :math:`\mathrm{PMI} - \ln k`), word2vec uses 3/4.

    Args:
      x: ``(n_vocab, n_vocab)`` non-negative co-occurrence counts.
      power: exponent, ``> 0``.

    Returns:
      ``(n_vocab,)`` probabilities.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> q = embedding.noise_distribution(
      ...     jnp.array([[1.0, 3.0], [0.0, 4.0]]), power=1.0
      ... )
      >>> q.shape, bool(jnp.isclose(q.sum(), 1.0))
      ((2,), True)
    """
    x = jnp.asarray(x)
    x = _check_counts(x, x.shape[0] if x.ndim == 2 else -1, _float_of(x))
    return _noise_distribution(x, _validate.positive("power", power))


def _noise_distribution(x, power=0.75):
    """:func:`noise_distribution` of checked counts (:func:`fit` checks them once)."""
    w = x.sum(axis=0) ** power
    return w / w.sum()


def _ns_score_grad(S: Array, counts: Array, noise: Array, k) -> Array:
    """dL_ns/dS = -N_cw sigma(-s_cw) + k N_c q_w sigma(s_cw)."""
    return -counts * jax.nn.sigmoid(-S) + k * counts.sum(axis=1, keepdims=True) * noise[None, :] * jax.nn.sigmoid(S)


def _ns_loss(S, counts, noise, k):
    return jnp.sum(counts * jax.nn.softplus(-S)) + k * jnp.sum(
        counts.sum(axis=1, keepdims=True) * noise[None, :] * jax.nn.softplus(S)
    )


def negative_sampling_loss(params: Params, x, noise, n_negatives: int = 5) -> Array:
    r"""Expected negative-sampling loss (word2vec SGNS, §20), summed over pairs.

    .. math::

        L_{\rm ns} = \sum_{c,o} N_{co}\,\mathrm{softplus}(-s_{co})
          + k \sum_c N_c \sum_w q_w\,\mathrm{softplus}(s_{cw}),

    :math:`\mathrm{softplus}(x) = \ln(1 + e^x)`, a two-term LSE
    :math:`\ln(e^0 + e^x)`. It is the expectation, over :math:`k` noise words
    per pair drawn i.i.d. from :math:`q`, of :func:`sampled_negative_sampling_loss`.

    Args:
      params: :class:`Params`.
      x: ``(n_vocab, n_vocab)`` non-negative co-occurrence counts.
      noise: ``(n_vocab,)`` noise distribution :math:`q` (e.g. :func:`noise_distribution`).
      n_negatives: :math:`k`, the number of negatives per pair, an integer ``>= 1``.

    Returns:
      the scalar loss.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.Params(jnp.zeros((4, 2)), jnp.zeros((4, 2)))
      >>> counts, noise = jnp.ones((4, 4)), jnp.full(4, 0.25)
      >>> loss = embedding.negative_sampling_loss(
      ...     params, counts, noise, n_negatives=1
      ... )
      >>> round(float(loss), 3)  # 16 pairs, 2 ln 2 each
      22.181
    """
    U, V = _check_params(params)
    x = _check_counts(x, U.shape[0], U.dtype)
    noise = _check_noise(noise, U.shape[0], U.dtype)
    k = _validate.count("n_negatives", n_negatives)
    return _ns_loss(U @ V.T, x, noise, k)


def grad_negative_sampling_loss_params(params: Params, x, noise, n_negatives: int = 5) -> Params:
    r"""Analytic gradient of :func:`negative_sampling_loss`.

    With :math:`G_{cw} = -N_{cw}\sigma(-s_{cw}) + k N_c q_w \sigma(s_{cw})`:
    :math:`\partial L/\partial U = G V`, :math:`\partial L/\partial V = G^\top U`.
    :math:`\sigma(s) = e^s/(e^0 + e^s)` is the softmax weight of the two-term LSE.

    Returns:
      a :class:`Params` holding the two gradients.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.init_params(4, 2, key=jax.random.key(0))
      >>> counts, noise = jnp.ones((4, 4)), jnp.full(4, 0.25)
      >>> embedding.grad_negative_sampling_loss_params(params, counts, noise).U.shape
      (4, 2)
    """
    U, V = _check_params(params)
    x = _check_counts(x, U.shape[0], U.dtype)
    noise = _check_noise(noise, U.shape[0], U.dtype)
    k = _validate.count("n_negatives", n_negatives)
    G = _ns_score_grad(U @ V.T, x, noise, k)
    return Params(G @ V, G.T @ U)


def _sampled_ns(U, V, centres, contexts, negatives):
    pos = jnp.sum(U[centres] * V[contexts], axis=-1)
    neg = jnp.einsum("bd,bkd->bk", U[centres], V[negatives])
    return jnp.sum(jax.nn.softplus(-pos)) + jnp.sum(jax.nn.softplus(neg))


def sampled_negative_sampling_loss(params: Params, centres, contexts, negatives) -> Array:
    r"""word2vec's negative-sampling loss on sampled pairs and negatives (§20).

    .. math::

        \sum_i \Big[\mathrm{softplus}(-s_{c_i o_i})
          + \sum_{j=1}^k \mathrm{softplus}(s_{c_i n_{ij}})\Big]

    Only the observed context and the :math:`k` sampled negatives of each pair
    get a gradient ("backpropagates only some negative cases").

    Args:
      params: :class:`Params`.
      centres, contexts: ``(B,)`` integer token ids of the pairs.
      negatives: ``(B, k)`` integer token ids of the noise words.

    Returns:
      the scalar loss.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> params = embedding.Params(jnp.zeros((4, 2)), jnp.zeros((4, 2)))
      >>> centres, contexts = jnp.array([0, 1]), jnp.array([1, 2])
      >>> negatives = jnp.array([[3], [0]])  # one negative per pair
      >>> round(
      ...     float(
      ...         embedding.sampled_negative_sampling_loss(
      ...             params, centres, contexts, negatives
      ...         )
      ...     ),
      ...     3,
      ... )
      2.773
    """
    U, V = _check_params(params)
    n = U.shape[0]
    centres = _check_tokens("centres", centres, n)
    contexts = _check_tokens("contexts", contexts, n)
    negatives = _check_tokens("negatives", negatives, n, ndim=2)
    if contexts.shape != centres.shape or negatives.shape[0] != centres.shape[0]:
        raise ValueError(
            f"centres {centres.shape}, contexts {contexts.shape} and negatives {negatives.shape} "
            "must share their first dimension (B,)"
        )
    return _sampled_ns(U, V, centres, contexts, negatives)


def pmi(x) -> Array:
    r"""Pointwise mutual information :math:`\ln \frac{N_{co} N}{N_c N_o}` of the pair counts (``-inf`` where
    :math:`N_{co} = 0`).

    :math:`N_c` are row sums, :math:`N_o` column sums and :math:`N` the total.

    Returns:
      the ``(n_vocab, n_vocab)`` PMI matrix.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> p = embedding.pmi(jnp.ones((3, 3)))  # independent: zero everywhere
      >>> p.shape, bool(jnp.allclose(p, 0.0))
      ((3, 3), True)
    """
    x = jnp.asarray(x)
    x = _check_counts(x, x.shape[0] if x.ndim == 2 else -1, _float_of(x))
    total = x.sum()
    return jnp.log(x) + jnp.log(total) - jnp.log(x.sum(axis=1, keepdims=True)) - jnp.log(x.sum(axis=0, keepdims=True))


# ---------------------------------------------------------------------------
# Corpora: pairs, co-occurrence counts, a planted Markov chain
# ---------------------------------------------------------------------------


def skipgram_pairs(tokens, window: int) -> tuple[Array, Array]:
    r"""All (centre, context) pairs within ``window`` positions of each other (§20), both directions.

    For each position :math:`t` and offset :math:`1 \le |j| \le` ``window``
    inside the sequence, the pair ``(tokens[t], tokens[t + j])``.

    Args:
      tokens: ``(T,)`` integer token ids.
      window: half-width, an integer ``>= 1``.

    Returns:
      ``(centres, contexts)``, two integer arrays of equal length.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> c, o = embedding.skipgram_pairs(jnp.array([0, 1, 2]), 1)
      >>> c.tolist(), o.tolist()
      ([0, 1, 1, 2], [1, 2, 0, 1])
    """
    tokens = jnp.asarray(tokens)
    tokens = _check_tokens("tokens", tokens, np.iinfo(np.int64).max)
    window = _validate.count("window", window)
    T = tokens.shape[0]
    cs, os = [], []
    for j in range(1, min(window, T - 1) + 1):
        cs += [tokens[:-j], tokens[j:]]
        os += [tokens[j:], tokens[:-j]]
    if not cs:
        empty = jnp.zeros((0,), tokens.dtype)
        return empty, empty
    return jnp.concatenate(cs), jnp.concatenate(os)


def cooccurrence(tokens, n_vocab: int, window: int, dtype=None) -> Array:
    r"""Co-occurrence counts :math:`N_{co}` = number of :func:`skipgram_pairs` equal to :math:`(c, o)`.

    Symmetric, with row sums :math:`N_c` = number of pairs centred on :math:`c`.

    Args:
      tokens: ``(T,)`` integer token ids in ``0..n_vocab-1``.
      n_vocab: vocabulary size ``>= 1``.
      window: half-width, an integer ``>= 1``.
      dtype: floating dtype of the result (default: JAX's default float).

    Returns:
      ``(n_vocab, n_vocab)`` floating counts.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> counts = embedding.cooccurrence(jnp.array([0, 1, 2, 1]), 3, 1)
      >>> counts.astype(int).tolist()
      [[0, 1, 0], [1, 0, 2], [0, 2, 0]]
    """
    n_vocab = _validate.count("n_vocab", n_vocab)
    tokens = _check_tokens("tokens", tokens, n_vocab)
    dtype = _validate.float_dtype("dtype", dtype)
    c, o = skipgram_pairs(tokens, window)
    return jnp.zeros((n_vocab, n_vocab), dtype).at[c, o].add(1)


def ring_transition(n_vocab: int, stay: float = 0.0, dtype=None) -> Array:
    r"""Transition matrix of a lazy random walk on a ring of ``n_vocab`` tokens (the planted structure).

    :math:`P_{i,i} = \text{stay}`, :math:`P_{i,i\pm1 \bmod n} = (1 - \text{stay})/2`.

    Returns:
      ``(n_vocab, n_vocab)`` row-stochastic matrix.

    Examples:
      >>> from lse_energy import embedding
      >>> t = embedding.ring_transition(4)
      >>> t.shape, t[0].tolist()  # token 0 steps to its two neighbours
      ((4, 4), [0.0, 0.5, 0.0, 0.5])
    """
    n_vocab = _validate.count("n_vocab", n_vocab, 3)
    stay = _validate.nonnegative("stay", stay, below=1)
    dtype = _validate.float_dtype("dtype", dtype)
    eye = jnp.eye(n_vocab, dtype=dtype)
    move = (1.0 - stay) / 2.0
    return stay * eye + move * (jnp.roll(eye, 1, axis=1) + jnp.roll(eye, -1, axis=1))


@partial(jax.jit, static_argnames=("n_tokens",))
def _chain(log_p, key, n_tokens):
    k0, ks = jax.random.split(key)
    x0 = jax.random.randint(k0, (), 0, log_p.shape[0])

    def step(x, k):
        nxt = jax.random.categorical(k, log_p[x])
        return nxt, nxt

    _, xs = jax.lax.scan(step, x0, jax.random.split(ks, n_tokens - 1))
    return jnp.concatenate([x0[None], xs])


def sample_chain(transition, n_tokens: int, *, key: Array) -> Array:
    r"""A token sequence from the Markov chain ``transition``, started uniformly (a planted corpus).

    Args:
      transition: ``(n, n)`` row-stochastic matrix.
      n_tokens: length ``>= 1``.
      key: a ``jax.random`` key.

    Returns:
      ``(n_tokens,)`` int32 token ids.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> t = embedding.ring_transition(5)
      >>> tokens = embedding.sample_chain(t, 8, key=jax.random.key(0))
      >>> tokens.shape, bool(jnp.all((tokens >= 0) & (tokens < 5)))
      ((8,), True)
    """
    _validate.key("key", key)
    P = _validate.array("transition", transition, 2)
    if P.shape[0] != P.shape[1] or P.shape[0] < 1:
        raise ValueError(f"transition must be a square (n, n) matrix; got {P.shape}")
    if _validate.is_concrete(P):
        p = np.asarray(P, np.float64)
        if np.any(p < 0) or np.max(np.abs(p.sum(axis=1) - 1.0)) > 1e-5:
            raise ValueError("transition must be row-stochastic (entries >= 0, rows sum to 1)")
    n_tokens = _validate.count("n_tokens", n_tokens)
    log_p = jnp.log(P)
    return _chain(log_p, key, n_tokens).astype(jnp.int32)


# ---------------------------------------------------------------------------
# Cosine similarity and vector arithmetic
# ---------------------------------------------------------------------------


def cosine(a, b=None) -> Array:
    r"""Cosine similarity :math:`\frac{a_i^\top b_j}{\|a_i\| \|b_j\|}` between the rows of ``a`` and ``b`` (§20).

    Args:
      a: ``(n, d)``, rows non-zero.
      b: ``(m, d)``, rows non-zero, or ``None`` (then ``b = a``).

    Returns:
      ``(n, m)`` matrix of cosines in ``[-1, 1]``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> c = embedding.cosine(jnp.array([[1.0, 0.0], [1.0, 1.0]]))
      >>> c.shape, round(float(c[0, 1]), 3)  # cos 45 degrees
      ((2, 2), 0.707)
    """
    a = _validate.points("a", a)
    b = a if b is None else _validate.points("b", b, a.shape[1], "a")
    na = jnp.linalg.norm(a, axis=1, keepdims=True)
    nb = jnp.linalg.norm(b, axis=1, keepdims=True)
    if _validate.is_concrete(na, nb) and (np.any(np.asarray(na) == 0) or np.any(np.asarray(nb) == 0)):
        raise ValueError("a and b must have non-zero rows (the cosine of a zero vector is undefined)")
    return (a / na) @ (b / nb).T


def analogy(emb, a, b, c) -> Array:
    r"""Vector arithmetic (§20): the word nearest in cosine to :math:`x_b - x_a + x_c`, excluding a, b and c.

    "King - Man + Woman = Queen" is ``analogy(emb, man, king, woman) == queen``.

    Args:
      emb: ``(n, d)`` embeddings (rows non-zero).
      a, b, c: integer token ids, scalars or ``(Q,)`` arrays of queries.

    Returns:
      the predicted token ids, the broadcast shape of ``a, b, c``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import embedding
      >>> emb = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.1, 1.0]])
      >>> a, b, c = jnp.array([0, 1]), jnp.array([1, 0]), jnp.array([2, 3])
      >>> embedding.analogy(emb, a, b, c).tolist()  # two queries
      [3, 2]
    """
    emb = _validate.points("emb", emb)
    n = emb.shape[0]
    shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b), jnp.shape(c))  # of the answer: () for scalars
    a, b, c = (_check_tokens(nm, jnp.atleast_1d(t), n) for nm, t in (("a", a), ("b", b), ("c", c)))
    a, b, c = (t.reshape(-1) for t in jnp.broadcast_arrays(a, b, c))
    target = emb[b] - emb[a] + emb[c]
    tn = jnp.linalg.norm(target, axis=1, keepdims=True)
    cos = (target / jnp.where(tn > 0, tn, 1)) @ (emb / jnp.linalg.norm(emb, axis=1, keepdims=True)).T
    idx = jnp.arange(n)[None, :]
    excluded = (idx == a[:, None]) | (idx == b[:, None]) | (idx == c[:, None])
    return jnp.argmax(jnp.where(excluded, -jnp.inf, cos), axis=1).reshape(shape)


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def _full_objective(objective, S, counts, noise, k):
    if objective == "softmax":
        return jnp.sum(counts.sum(axis=1) * jax.nn.logsumexp(S, axis=1)) - jnp.sum(counts * S)
    return _ns_loss(S, counts, noise, k)


def _setup(args):
    # once per fit, inside the compiled program: the inverse-CDF tables of pairs (cells of counts) and negatives
    counts, noise = args
    total = counts.sum()
    return counts, noise, total, jnp.cumsum(counts.ravel()) / total, jnp.cumsum(noise) / noise.sum()


def _draw(kk, cdf, shape):
    u = core.random_uniform(kk, shape, cdf.dtype)
    return jnp.minimum(jnp.searchsorted(cdf, u, side="right"), cdf.shape[0] - 1)


def _value_and_grad(p, kk, args, objective, k, batch_size):
    # one step of the driver (_descent.steps): the full objective, and the full or sampled gradient
    counts, noise, total, cdf_pairs, cdf_noise = args
    n = counts.shape[0]

    def full_grad(p):
        S = p.U @ p.V.T
        G = _sm_score_grad(S, counts) if objective == "softmax" else _ns_score_grad(S, counts, noise, k)
        G = G / total
        return Params(G @ p.V, G.T @ p.U)

    def minibatch_loss(p, kk):
        kp, kn = jax.random.split(kk)
        cell = _draw(kp, cdf_pairs, (batch_size,))
        ce, co = cell // n, cell % n
        if objective == "softmax":
            Uc = p.U[ce]
            return jnp.mean(jax.nn.logsumexp(Uc @ p.V.T, axis=1) - jnp.sum(Uc * p.V[co], axis=1))
        neg = _draw(kn, cdf_noise, (batch_size, k))
        return _sampled_ns(p.U, p.V, ce, co, neg) / batch_size

    value = _full_objective(objective, p.U @ p.V.T, counts, noise, k) / total
    return value, (full_grad(p) if batch_size == 0 else jax.grad(minibatch_loss)(p, kk))


def _result(opt_state, values):
    return values, FitExtras(opt_state), values


def fit(
    params: Params,
    x,
    *,
    optimizer: Any,
    n_steps: int,
    objective: str = "softmax",
    n_negatives: int = 5,
    noise=None,
    batch_size: int | None = None,
    key: Array | None = None,
    opt_state=None,
    progress: bool = False,
) -> core.FitResult:
    r"""Train the embeddings on co-occurrence counts (§20) with an optax optimizer.

    The objective, divided by the number of pairs :math:`N = \sum N_{co}`, is
    :func:`softmax_loss` (``objective="softmax"``) or
    :func:`negative_sampling_loss` (``"negative"``). With ``batch_size=None``
    each step takes the exact full-batch gradient (:func:`grad_softmax_loss_params`,
    :func:`grad_negative_sampling_loss_params`: negatives in expectation). With an
    integer ``batch_size`` each step samples that many pairs from the counts
    and, for ``"negative"``, ``n_negatives`` negatives per pair from ``noise``, as
    word2vec's SGD does ("backpropagates only some negative cases"); ``key``
    is then required. Jitted; ``lax.scan`` over the steps.

    Args:
      params: initial :class:`Params`.
      x: ``(n_vocab, n_vocab)`` non-negative co-occurrence counts :math:`N_{co}` (:func:`cooccurrence`).
      optimizer: an optax ``GradientTransformation`` (a fresh but equal one reuses the compiled program).
      n_steps: number of optimizer steps, ``>= 1``.
      objective: ``"softmax"`` or ``"negative"``.
      n_negatives: :math:`k`, the negatives per pair (``"negative"`` only), ``>= 1``.
      noise: ``(n_vocab,)`` noise distribution; default :func:`noise_distribution` ``(x, 0.75)``.
      batch_size: ``None`` (full batch) or pairs per step ``>= 1``.
      key: a ``jax.random`` key, required with ``batch_size``.
      opt_state: optimizer state from a previous fit, or ``None`` to initialise.
      progress: show a ``tqdm.auto`` bar of the steps (results agree with ``progress=False`` to round-off).

    Returns:
      :class:`~lse_energy.core.FitResult`: the trained :class:`Params`;
      ``energies``, ``(n_steps,)``, the full objective per pair before each
      step (the loss, not the book's energy :func:`energy`); ``n_iter = n_steps``;
      ``converged = None``; ``extras`` a :class:`FitExtras`.

    Raises:
      ValueError: on bad arguments, or when training diverged.

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import embedding
      >>> counts = embedding.cooccurrence(
      ...     jnp.array([0, 1, 2, 3, 0, 1, 2, 3]), 4, window=1
      ... )  # a ring
      >>> params = embedding.init_params(4, 2, key=jax.random.key(0))
      >>> result = embedding.fit(
      ...     params, counts, optimizer=optax.adam(0.1), n_steps=10
      ... )
      >>> result.energies.shape, bool(result.energies[-1] < result.energies[0])
      ((10,), True)
    """
    if key is not None:
        _validate.key("key", key)
    U, V = _check_params(params)
    counts = _check_counts(x, U.shape[0], U.dtype, name="x")
    _validate.optimizer(optimizer)
    n_steps = _validate.count("n_steps", n_steps)
    _validate.choice("objective", objective, OBJECTIVES)
    k = _validate.count("n_negatives", n_negatives)
    noise = _noise_distribution(counts) if noise is None else _check_noise(noise, U.shape[0], U.dtype)
    if batch_size is None:
        batch = 0
        key = jax.random.PRNGKey(0) if key is None else key
    else:
        batch = _validate.count("batch_size", batch_size)
        if key is None:
            raise ValueError("key is required when batch_size is given (pairs and negatives are sampled)")
    params = Params(U, V)
    return _descent.steps(
        "embedding.fit",
        partial(_value_and_grad, objective=objective, k=k, batch_size=batch),
        params,
        optimizer=optimizer,
        n_steps=n_steps,
        key=key,
        args=(counts, noise),
        opt_state=opt_state,
        setup=_setup,
        result=_result,
        progress=progress,
    )
