r"""The log-sum-exp energy and its general children/parents graph.

This module implements §1 and Appendix A of Tschantz (2025), *Attention via
log-sum-exp energy*. A set of nodes :math:`v_a \in \mathbb{R}^d` is related by
energy terms :math:`E_m`, each with its own children :math:`C_m`, parents
:math:`P_m` (the two may overlap) and similarity function
:math:`\mathrm{sim}_m`:

.. math::

    E_m = -\sum_{c \in C_m} \ln \sum_{p \in P_m} \exp \mathrm{sim}_m(v_c, v_p)
    \qquad \text{(eq. 2)}, \qquad
    E = \sum_m E_m \qquad \text{(eq. 3)}.

Its gradient is a softmax-weighted sum of sim-gradients (eq. 4). Every model
module in the package builds on :func:`energy` and :func:`weights`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate
from lse_energy._validate import all_finite, is_concrete

Array = jax.Array

__all__ = [
    "random_normal",
    "random_uniform",
    "prefix_stable",
    "energy",
    "weights",
    "logsumexp",
    "EnergyTerm",
    "sim_matrix",
    "graph_energy",
    "grad_graph_energy_nodes",
    "grad_graph_terms",
    "GradientTerms",
    "softmax_average",
    "FitResult",
]


def _check_sim(sim, mask, allow_empty: bool):
    """Check ``sim``/``mask`` at the public boundary and return them as arrays."""
    sim = jnp.asarray(sim)
    if sim.ndim < 2:
        raise ValueError(f"sim must have shape (..., C, P) with at least 2 dimensions; got shape {sim.shape}")
    if not jnp.issubdtype(sim.dtype, jnp.floating):
        raise ValueError(f"sim must have a floating dtype; got {sim.dtype}")
    if sim.shape[-1] == 0:
        raise ValueError(f"sim must have at least one parent (P >= 1); got shape {sim.shape}")
    if is_concrete(sim) and not all_finite(sim):
        raise ValueError("sim must be finite; use `mask` (not -inf) to forbid an edge")
    if mask is None:
        return sim, None
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_:
        raise ValueError(f"mask must be boolean (True marks an allowed edge); got dtype {mask.dtype}")
    try:
        mask = jnp.broadcast_to(mask, sim.shape)
    except ValueError as err:
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to sim of shape {sim.shape}") from err
    if not allow_empty and is_concrete(mask):
        empty = ~np.any(np.asarray(mask), axis=-1)
        if np.any(empty):
            first = tuple(int(i) for i in np.argwhere(empty)[0])
            raise ValueError(
                f"mask: child {first} (index into sim.shape[:-1]) has no allowed parent, "
                "so its log-sum-exp is ln 0 = -inf; pass allow_empty=True to drop such children"
            )
    return sim, mask


# The bodies of the public functions below are compiled as one program each, after the
# checks on the host: called eagerly (as the chapters do), one compile per shape instead
# of one per primitive, which at XLA's default flags is most of a chapter's time.
@jax.jit
def _lse(sim: Array, mask: Array | None) -> Array:
    """Stable masked log-sum-exp over the last axis; empty rows give 0."""
    if mask is None:
        m = jax.lax.stop_gradient(jnp.max(sim, axis=-1, keepdims=True))
        return jnp.log(jnp.sum(jnp.exp(sim - m), axis=-1)) + m[..., 0]
    has = jnp.any(mask, axis=-1)
    m = jnp.max(jnp.where(mask, sim, -jnp.inf), axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(has[..., None], m, 0.0))
    # Double `where`: masked entries never reach exp, so no NaN leaks into gradients.
    z = jnp.where(mask, sim - m, 0.0)
    total = jnp.sum(jnp.where(mask, jnp.exp(z), 0.0), axis=-1)
    total = jnp.where(has, total, 1.0)
    return jnp.where(has, jnp.log(total) + m[..., 0], 0.0)


def logsumexp(sim, mask=None, *, allow_empty: bool = False) -> Array:
    r"""Per-child log-partition :math:`\ln \sum_p \exp \mathrm{sim}[c, p]`.

    Args:
      sim: ``(..., C, P)`` similarities of child ``c`` to parent ``p``.
      mask: optional boolean, broadcastable to ``sim``; ``True`` marks an
        allowed edge.
      allow_empty: if ``True``, a child with no allowed parent contributes 0
        instead of raising.

    Returns:
      ``(..., C)`` array.
    """
    sim, mask = _check_sim(sim, mask, allow_empty)
    return _lse(sim, mask)


def energy(sim, mask=None, *, allow_empty: bool = False) -> Array:
    r"""The log-sum-exp energy, eq. (2): :math:`-\sum_c \ln \sum_p \exp \mathrm{sim}[c, p]`.

    All leading batch axes are summed too, so the result is a scalar. The
    computation subtracts the per-child maximum before exponentiating, so it
    is stable in float32 for similarities of magnitude up to ``1e4`` and
    beyond.

    Args:
      sim: ``(..., C, P)`` similarities, floating point and finite.
      mask: optional boolean ``(..., C, P)`` (broadcastable); ``True`` marks
        an allowed edge ``c <- p``.
      allow_empty: a child whose mask row has no allowed parent has
        :math:`\ln 0 = -\infty` and makes the energy infinite, so by default
        it raises ``ValueError``. With ``allow_empty=True`` such a child is
        dropped from the sum (it contributes 0).

    Returns:
      Scalar energy.

    Raises:
      ValueError: bad shape or dtype, non-finite ``sim``, non-boolean or
        non-broadcastable ``mask``, or a child with no allowed parent. Checks
        on values are made only when the inputs are concrete (not traced).

    Examples:
      Two children with three equally similar parents each: :math:`E = -2 \ln 3`.

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import core
      >>> round(float(core.energy(jnp.zeros((2, 3)))), 3)
      -2.197
      >>> mask = jnp.array([[True, False, False], [True, True, True]])
      >>> round(float(core.energy(jnp.zeros((2, 3)), mask)), 3)  # -ln 1 - ln 3
      -1.099
    """
    sim, mask = _check_sim(sim, mask, allow_empty)
    return _energy(sim, mask)


@jax.jit
def _energy(sim: Array, mask: Array | None) -> Array:
    return -jnp.sum(_lse(sim, mask))


def weights(sim, mask=None, *, allow_empty: bool = False) -> Array:
    r"""Softmax over parents: the posterior over edges :math:`p(c \leftarrow p)`.

    .. math:: w[c, p] = \frac{\exp \mathrm{sim}[c, p]}{\sum_{p'} \exp \mathrm{sim}[c, p']}

    This is the factor that multiplies every sim-gradient in eq. (4), and
    :math:`-\partial E / \partial\, \mathrm{sim} = w`.

    Args:
      sim: ``(..., C, P)``.
      mask: optional boolean; disallowed edges get weight exactly 0.
      allow_empty: rows with no allowed parent get all-zero weights instead
        of raising.

    Returns:
      ``(..., C, P)`` array whose rows sum to 1 (or 0 for dropped children).
    """
    sim, mask = _check_sim(sim, mask, allow_empty)
    return _weights(sim, mask)


@jax.jit
def _weights(sim: Array, mask: Array | None) -> Array:
    if mask is None:
        m = jax.lax.stop_gradient(jnp.max(sim, axis=-1, keepdims=True))
        e = jnp.exp(sim - m)
        return e / jnp.sum(e, axis=-1, keepdims=True)
    has = jnp.any(mask, axis=-1, keepdims=True)
    m = jnp.max(jnp.where(mask, sim, -jnp.inf), axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(has, m, 0.0))
    e = jnp.where(mask, jnp.exp(jnp.where(mask, sim - m, 0.0)), 0.0)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(has, total, 1.0)


def _softmax_average_dense(q, k, v, beta, bias):
    s = jnp.einsum("...cd,...pd->...cp", beta * q, k)
    if bias is not None:
        s = s + bias
    m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    e = jnp.exp(s - m)
    return jnp.einsum("...cp,...pe->...ce", e, v) / jnp.sum(e, axis=-1, keepdims=True)


def _sum_floor(dtype):
    """The smallest row sum the bounded shift may leave before the exact branch is used: sqrt(tiny)."""
    return jnp.sqrt(jnp.finfo(dtype).tiny)


def _softmax_average_bounded(qs, k, v, k_norm):
    r"""One query block of :func:`softmax_average`, shifted by a bound instead of the row maximum.

    ``qs`` holds the queries already scaled by ``beta``. By Cauchy-Schwarz
    :math:`s_{cp} = q_c^\top k_p \le m_c = |q_c| \max_p |k_p|`, so
    :math:`e = \exp(s - m)` cannot overflow, and the shift costs ``O(block d)``
    instead of a max pass over the ``block x N_K`` similarities. The shift
    cancels in the ratio; it is constant (no gradient flows through it).
    Returns the block's result and its smallest row sum, which tells the caller
    whether the bound was so loose that the sums lost precision to underflow.
    """
    s = qs @ k.T
    m = jax.lax.stop_gradient(jnp.sqrt(jnp.sum(qs * qs, axis=-1, keepdims=True)) * k_norm)
    e = jnp.exp(s - m)
    total = jnp.sum(e, axis=-1, keepdims=True)
    # A row whose sum fell below the threshold sends the caller to the exact branch; dividing it
    # by 1 instead keeps this (then discarded) branch finite, so its zero cotangent stays zero
    # instead of becoming 0 * inf = NaN in the gradient.
    ok = total >= _sum_floor(total.dtype)
    return (e @ v) / jnp.where(ok, total, 1.0), jnp.min(total)


def softmax_average(q, k, v, beta, bias=None, *, block: int = 512) -> Array:
    r"""The weighted sum of eq. (4), :math:`\sum_p \mathrm{softmax}_p(\beta q_c^\top k_p + b_{cp})\, v_p`.

    A kernel, not a public model: it does no validation (the callers,
    ``attention.attend`` and ``hopfield.update``, validate once at their
    boundary) and is jittable and differentiable. Three choices make it fast
    on a CPU:

    * the normalisation is applied after the product with ``v``,
      :math:`(\sum_p e_{cp} v_p) / \sum_p e_{cp}` with
      :math:`e_{cp} = \exp(s_{cp} - m_c)`, one pass over the
      :math:`N_Q \times N_K` matrix fewer than forming the weights;
    * for un-batched inputs with many queries, the queries are processed in
      blocks of ``block`` rows (``lax.map``), so each block's
      :math:`\mathrm{block} \times N_K` similarity matrix stays in cache
      through its exp, sum and product passes. Rows are independent, so
      the result is the same as the one-shot computation up to the
      summation order inside the matrix products;
    * on that blocked path the shift :math:`m_c` is the Cauchy-Schwarz bound
      :math:`\beta |q_c| \max_p |k_p|` rather than the row maximum, which saves
      the max pass over each block (the exp fuses with the row sum). Any shift
      no smaller than the maximum gives the same ratio; if the bound is so
      loose that some row sum falls below :math:`\sqrt{\text{tiny}}` of the
      dtype (e.g. a very large ``beta``), the whole result is recomputed with
      the exact row maximum (``lax.cond``), so no row loses precision to
      underflow. Gradients are those of this computation (autodiff, forward
      and reverse mode); every block, of either branch, is rematerialised,
      so reverse mode keeps no ``N_Q x N_K`` residuals: it recomputes each
      block's weights, as a flash kernel's backward does.


    Args:
      q: ``(..., N_Q, d)``; k: ``(..., N_K, d)``; v: ``(..., N_K, d_v)``.
      beta: scalar inverse temperature.
      bias: ``None`` or an additive log-prior broadcastable to ``(..., N_Q, N_K)``.
      block: query block size (static); blocking is used only when ``q``,
        ``k`` and ``v`` are 2-D, ``bias`` is ``None``, ``N_Q >= 2 * block``
        and JAX's default backend is the CPU. On an accelerator the one-shot
        form is used: XLA fuses its passes there, and the serial block loop
        and ``lax.cond`` only cost time (on an H200, forward and gradient at
        N = 2048 took 0.79 ms blocked and 0.30 ms one-shot; Performance chapter).

    Returns:
      ``(..., N_Q, d_v)``.
    """
    block = _validate.count("block", block)
    n_q = q.shape[-2]
    if (
        bias is not None
        or q.ndim != 2
        or k.ndim != 2
        or v.ndim != 2
        or n_q < 2 * block
        or jax.default_backend() != "cpu"
    ):
        return _softmax_average_dense(q, k, v, beta, bias)
    n_blocks = -(-n_q // block)
    pad = n_blocks * block - n_q
    # Padded rows are zero queries: their shift is 0 and their row sum N_K, never below the threshold.
    qb = jnp.pad(beta * q, ((0, pad), (0, 0))).reshape(n_blocks, block, q.shape[-1])
    k_norm = jax.lax.stop_gradient(jnp.sqrt(jnp.max(jnp.sum(k * k, axis=-1))))
    # Each block is rematerialised: reverse mode recomputes its block x N_K weights instead of storing
    # all N_Q x N_K of them (benchmarks/sweep_attention.py: stacking those residuals took about a
    # quarter of the gradient's time at N = M = 4096 and 8192).
    out, low = jax.lax.map(jax.checkpoint(lambda qc: _softmax_average_bounded(qc, k, v, k_norm)), qb)
    out = jax.lax.cond(
        jnp.min(low) >= _sum_floor(out.dtype),
        lambda: out,
        # Each fallback block is rematerialised (jax.checkpoint): under reverse mode the branch
        # not taken then keeps only its block inputs as residuals, not its block x N_K weights.
        # Without it the gradient, even when the fallback is not taken, was 10-25% slower.
        lambda: jax.lax.map(jax.checkpoint(lambda qc: _softmax_average_dense(qc, k, v, 1.0, None)), qb),
    )
    return out.reshape(n_blocks * block, v.shape[-1])[:n_q]


# ---------------------------------------------------------------------------
# The general multi-term graph (eqs. 1-4)
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EnergyTerm:
    r"""One energy term :math:`E_m` of the global energy (eq. 2).

    Attributes:
      children: ``(C_m,)`` integer indices of the child nodes.
      parents: ``(P_m,)`` integer indices of the parent nodes; may overlap
        with ``children`` (as in self-attention).
      sim: pairwise similarity ``sim(v_c, v_p) -> scalar`` for ``v: (d,)``
        (eq. 1). It may close over parameters such as :math:`W^Q, W^K`.
      mask: optional boolean ``(C_m, P_m)``; ``True`` marks an allowed edge.
      allow_empty: drop children with no allowed parent instead of raising.
      name: label used in error messages and plots.
    """

    children: Sequence[int]
    parents: Sequence[int]
    sim: Callable[[Array, Array], Array]
    mask: Array | None = None
    allow_empty: bool = False
    name: str = ""

    def __post_init__(self):
        for field in ("children", "parents"):
            idx = np.asarray(getattr(self, field))
            if idx.ndim != 1 or idx.size == 0:
                raise ValueError(f"{field} must be a non-empty 1-D index array; got shape {idx.shape}")
            if not np.issubdtype(idx.dtype, np.integer):
                raise ValueError(f"{field} must hold integer node indices; got dtype {idx.dtype}")
            if np.any(idx < 0):
                raise ValueError(f"{field} must hold non-negative node indices")
            object.__setattr__(self, field, idx)
        if not callable(self.sim):
            raise ValueError("sim must be a callable sim(v_c, v_p) -> scalar")
        if self.mask is not None:
            mask = np.asarray(self.mask)
            shape = (self.children.size, self.parents.size)
            if mask.shape != shape or mask.dtype != np.bool_:
                raise ValueError(f"mask must be boolean of shape (C_m, P_m) = {shape}; got {mask.dtype}{mask.shape}")
            if not self.allow_empty and not np.all(mask.any(axis=1)):
                raise ValueError(
                    f"mask of term {self.name!r}: child row {int(np.argmin(mask.any(axis=1)))} "
                    "has no allowed parent; pass allow_empty=True to drop it"
                )
            object.__setattr__(self, "mask", mask)


def _pairwise(sim: Callable) -> Callable[[Array, Array], Array]:
    """Lift ``sim(v_c, v_p)`` to ``(C, d), (P, d) -> (C, P)``."""
    return jax.vmap(jax.vmap(sim, in_axes=(None, 0)), in_axes=(0, None))


def _check_nodes(nodes, terms):
    nodes = _validate.array("nodes", nodes, 2)
    for term in terms:
        if not isinstance(term, EnergyTerm):
            raise ValueError(f"terms must be EnergyTerm instances; got {type(term).__name__}")
        top = max(term.children.max(), term.parents.max())
        if top >= nodes.shape[0]:
            raise ValueError(f"term {term.name!r} refers to node {top} but nodes has only {nodes.shape[0]} rows")
    return nodes


def sim_matrix(term: EnergyTerm, nodes) -> Array:
    r"""The ``(C_m, P_m)`` matrix :math:`\mathrm{sim}_m(v_c, v_p)` of one term."""
    nodes = _check_nodes(nodes, [term])
    return _pairwise(term.sim)(nodes[term.children], nodes[term.parents])


def graph_energy(terms: Sequence[EnergyTerm], nodes) -> Array:
    r"""Global energy :math:`E = \sum_m E_m` (eq. 3) for ``nodes: (A, d)``."""
    nodes = _check_nodes(nodes, terms)
    total = jnp.zeros((), nodes.dtype)
    for term in terms:
        s = _pairwise(term.sim)(nodes[term.children], nodes[term.parents])
        total = total + energy(s, term.mask, allow_empty=term.allow_empty)
    return total


class FitResult(NamedTuple):
    r"""What every ``fit`` in the package returns.

    Attributes:
      params: the fitted parameters (the model's ``Params``).
      energies: the objective the fit descends, recorded along the run; the
        leading axis is the iteration. Each ``fit`` says what it records (for
        EM: the energy before the first step and after each step, so
        ``n_iter + 1`` values).
      n_iter: the number of iterations (EM steps, rounds or epochs) taken.
      converged: ``True`` when the fit's stopping rule ended the loop before
        ``max_iter``, ``False`` when it ran out of iterations, and ``None``
        for a fit that runs a fixed number of steps (no stopping rule).
      extras: the model's other results (latents, optimizer state,
        diagnostic traces) as a small ``NamedTuple``, or ``None``.
    """

    params: object
    energies: Array
    n_iter: int
    converged: bool | None
    extras: object = None


class GradientTerms(NamedTuple):
    r"""The two parts of :math:`-\partial E / \partial v_a` in eq. (4).

    Attributes:
      child: ``(A, d)``, :math:`\sum_{m \in M_c(a)} \sum_p w^m_{ap}\, \partial_{v_a} \mathrm{sim}_m(v_a, v_p)`,
        node ``a`` being explained by its parents.
      parent: ``(A, d)``, :math:`\sum_{m \in M_p(a)} \sum_c w^m_{ca}\, \partial_{v_a} \mathrm{sim}_m(v_c, v_a)`,
        node ``a`` explaining its children.
    """

    child: Array
    parent: Array


def grad_graph_terms(terms: Sequence[EnergyTerm], nodes) -> GradientTerms:
    r"""Assemble eq. (4): the child and parent parts of :math:`-\partial E/\partial v_a`.

    For each term the softmax weights :math:`w = \mathrm{softmax}_p\,\mathrm{sim}`
    are formed, and the weighted sim-partials
    :math:`\sum_p w_{cp}\,\partial_{v_c}\mathrm{sim}(v_c, v_p)` and
    :math:`\sum_c w_{cp}\,\partial_{v_p}\mathrm{sim}(v_c, v_p)` are obtained in
    one reverse pass of the *pairwise similarity* (``jax.vjp`` with cotangent
    ``w``), never by differentiating the total energy. Child and parent
    occurrences are kept as separate arguments, so a node that is both (as in
    self-attention) receives both parts.

    Args:
      terms: the energy terms.
      nodes: ``(A, d)``.

    Returns:
      :class:`GradientTerms` with ``child`` and ``parent``, each ``(A, d)``.
    """
    nodes = _check_nodes(nodes, terms)
    child = jnp.zeros_like(nodes)
    parent = jnp.zeros_like(nodes)
    for term in terms:
        vc, vp = nodes[term.children], nodes[term.parents]
        s, pullback = jax.vjp(_pairwise(term.sim), vc, vp)
        w = weights(s, term.mask, allow_empty=term.allow_empty)
        dc, dp = pullback(w)
        child = child.at[term.children].add(dc)
        parent = parent.at[term.parents].add(dp)
    return GradientTerms(child=child, parent=parent)


def grad_graph_energy_nodes(terms: Sequence[EnergyTerm], nodes) -> Array:
    r""":math:`\partial E / \partial v` for every node, assembled by eq. (4).

    Equals ``jax.grad(graph_energy, argnums=1)(terms, nodes)``; it is computed
    from the softmax weights and sim-partials only (see
    :func:`grad_graph_terms`).

    Returns:
      ``(A, d)`` gradient of the global energy (eq. 3).
    """
    parts = grad_graph_terms(terms, nodes)
    return -(parts.child + parts.parent)


def random_normal(key: jax.Array, shape: Sequence[int] = (), dtype=None) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``: the same numbers, compiled in a fraction of the time.

    JAX's default generator (threefry) gives entry ``i`` of a draw the
    ``i``-th number of the key's stream, in row-major order, whatever the
    shape. So a flat draw, reshaped, is the same array (``tests/models/test_core.py``
    asserts it), and XLA on CPU compiles a flat draw far faster at its default
    flags: with jax 0.10 on a 2-core machine, about 0.5 s against 2 s for a 2-D
    draw and 5 to 7 s for a 3-D one (without the fusion emitters both take
    under 0.2 s). Called on a concrete key the draw is also rounded up to a
    power-of-two size and sliced, so that every size up to it shares one
    compiled generator; under ``jit`` or ``vmap`` (a traced key) it draws
    exactly ``prod(shape)`` numbers. Other generators are called as they are.
    """
    _validate.key("key", key)
    return _flat_draw(jax.random.normal, key, shape, () if dtype is None else (dtype,))


def random_uniform(key: jax.Array, shape: Sequence[int] = (), dtype=None, minval=0.0, maxval=1.0) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``, drawn as :func:`random_normal` draws.

    The same numbers; bounds that are arrays (not scalars) are passed to ``jax.random.uniform`` as they are.
    """
    _validate.key("key", key)
    if np.ndim(minval) or np.ndim(maxval):
        return jax.random.uniform(key, shape, *(() if dtype is None else (dtype,)), minval=minval, maxval=maxval)
    return _flat_draw(jax.random.uniform, key, shape, () if dtype is None else (dtype,), minval=minval, maxval=maxval)


def _flat_draw(draw, key, shape, args, **kwargs):
    shape = tuple(int(n) for n in shape)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0 or not prefix_stable(key):
        return draw(key, shape, *args, **kwargs)
    n = 1 << max(4, (size - 1).bit_length()) if _validate.is_concrete(key) else size
    flat = draw(key, (n,), *args, **kwargs)
    return (flat if n == size else flat[:size]).reshape(shape)


def prefix_stable(key) -> bool:
    """Whether ``key``'s draws number their entries independently of the draw's size.

    True for JAX's default generator (threefry, partitionable), typed or raw
    keys: then ``jax.random.normal(key, (n,))`` is the first ``n`` entries of
    ``jax.random.normal(key, (m,))`` for any ``m >= n``, and likewise for
    ``jax.random.split``.
    """
    _validate.key("key", key)
    if not jax.config.jax_threefry_partitionable:
        return False
    try:
        return str(jax.random.key_impl(key)) == "threefry2x32"
    except (TypeError, ValueError):
        return False
