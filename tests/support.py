r"""Helpers shared by the tests (not a test module): errors, complex-step derivatives, seeds and draws.

Errors of ``a`` against the reference ``b``, over every entry of two pytrees of arrays (an array, a
list of arrays, a ``Params``), computed in float64. A test uses the one its tolerance was set for:

* :func:`relative_error`: normwise in the max norm, :math:`\max_i |a_i - b_i| / \max_i |b_i|`
  (``lse_energy.testing.relative_error``, the error the package's gradient checks report). The default.
* :func:`relative_error_l2`: normwise in the Euclidean norm (Frobenius for a matrix),
  :math:`\|a - b\|_2 / \|b\|_2`; ``batched=True`` gives one error per instance along the leading axis.
* :func:`mixed_error`: :math:`\max_i |a_i - b_i| / (1 + \max_i |b_i|)`, absolute where the reference is
  below 1 and relative above, for references that may be near zero.

Both relative errors of a zero reference are the absolute error (the norm of ``a - b``).

Derivatives by complex steps, exact to round-off and sharing no formula with the package:
:func:`complex_step_grad` and :func:`complex_step` (from ``tests/oracles.py``).

Seeds and draws: :data:`SEEDS` (the seeds every per-model test is parametrized over), :func:`rng` (a NumPy
generator) and :func:`normal` (float64 standard normals from a JAX key).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy.testing import relative_error
from tests.oracles import complex_step, complex_step_grad

__all__ = [
    "SEEDS",
    "complex_step",
    "complex_step_grad",
    "mixed_error",
    "normal",
    "relative_error",
    "relative_error_l2",
    "rng",
]

#: The seeds of ``pytest.mark.parametrize("seed", SEEDS)``: every analytic gradient is checked on at least three.
SEEDS = (0, 1, 2)


def rng(seed: int = 0) -> np.random.Generator:
    """NumPy's default generator with a fixed seed."""
    return np.random.default_rng(seed)


def normal(key, shape, scale: float = 1.0) -> jax.Array:
    """``scale`` times float64 standard normals of ``shape`` drawn with the JAX ``key``."""
    return scale * jax.random.normal(key, shape, dtype=jnp.float64)


def _entries(tree, batched: bool) -> np.ndarray:
    """The leaves of ``tree`` in float64 (complex stays complex), raveled and concatenated: one row per
    instance of the leading axis if ``batched``, else one vector."""
    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]
    leaves = [leaf.astype(np.promote_types(leaf.dtype, np.float64)) for leaf in leaves]
    if batched:
        n = leaves[0].shape[0]
        return np.concatenate([leaf.reshape(n, -1) for leaf in leaves], axis=1)
    return np.concatenate([leaf.ravel() for leaf in leaves])


def relative_error_l2(a, b, *, batched: bool = False):
    """Normwise relative error in the Euclidean norm, ``||a - b||_2 / ||b||_2`` over every entry of the
    pytrees ``a`` and ``b`` (a float); with ``batched=True``, one error per index of the leading axis,
    which every leaf has (an array). A zero reference gives ``||a - b||_2``."""
    fa, fb = _entries(a, batched), _entries(b, batched)
    if fa.shape != fb.shape:
        raise ValueError(f"shapes differ: {fa.shape} vs {fb.shape}")
    diff = np.linalg.norm(fa - fb, axis=-1)
    scale = np.linalg.norm(fb, axis=-1)
    err = np.where(scale == 0.0, diff, diff / np.where(scale == 0.0, 1.0, scale))
    return err if batched else float(err)


def mixed_error(a, b) -> float:
    """``max|a - b| / (1 + max|b|)`` over every entry of the pytrees ``a`` and ``b``: the absolute error
    where the reference is small, the relative error where it is large."""
    fa, fb = _entries(a, False), _entries(b, False)
    if fa.shape != fb.shape:
        raise ValueError(f"shapes differ: {fa.shape} vs {fb.shape}")
    return float(np.max(np.abs(fa - fb)) / (1.0 + np.max(np.abs(fb))))
