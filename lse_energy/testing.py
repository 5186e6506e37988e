r"""Gradient checking shared by the tests and every chapter of the book, and the book's verdict rule.

:func:`check_gradient` compares an analytic gradient with ``jax.grad`` and with
central finite differences, both in float64, and returns the two errors.
:func:`assert_gradient` does the same and raises when either error exceeds its
tolerance.

Errors are *normwise relative*: :math:`\max_i |a_i - b_i| / \max_i |b_i|`,
which does not blow up at entries that happen to be near zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "GradientCheck",
    "check_gradient",
    "assert_gradient",
    "relative_error",
    "decade",
    "Interval",
    "paired_interval",
]


class GradientCheck(NamedTuple):
    """Errors of an analytic gradient.

    Attributes:
      autodiff_error: normwise relative error against ``jax.grad(f)``.
      fd_error: normwise relative error against central finite differences
        (over all coordinates, or ``n_coords`` random ones).
    """

    autodiff_error: float
    fd_error: float


def decade(err) -> str:
    """``"< 1e-07"``: the smallest power of ten above a non-negative error; ``"= 0"`` for zero.

    For printing errors whose digits depend on how XLA compiles the code
    (float32 round-off, finite-difference noise), so that a notebook's printed
    output is the same under any compiler flags while its ``assert`` checks the bound.
    """
    e = float(err)
    if not (np.isfinite(e) and e >= 0):
        raise ValueError(f"err must be finite and >= 0; got {err!r}")
    if e == 0.0:
        return "= 0"
    bound = 10.0 ** (np.floor(np.log10(e)) + 1)
    if bound <= e:  # log10 rounded down across a power of ten
        bound *= 10.0
    return f"< {bound:.0e}"


def _flat(tree) -> np.ndarray:
    """The leaves of ``tree``, raveled and concatenated in ``jax.tree_util`` order, as a NumPy array.

    ``jax.flatten_util.ravel_pytree``'s values, computed on the host: run eagerly, that function
    compiles a small XLA program for every new shape, which a chapter pays for every check.
    """
    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]
    if not leaves:
        return np.zeros(0)
    return np.concatenate([leaf.ravel() for leaf in leaves]).astype(np.result_type(*leaves), copy=False)


def _unravel(tree) -> Callable[[Any], Any]:
    """Maps a flat vector back to ``tree``'s structure, shapes and dtypes (traceable; for ``jax.jit``)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shapes = [np.shape(leaf) for leaf in leaves]
    dtypes = [np.asarray(leaf).dtype for leaf in leaves]
    ends = np.cumsum([int(np.prod(s, dtype=np.int64)) for s in shapes])
    starts = np.concatenate([[0], ends[:-1]]).astype(int)

    def unravel(v):
        return jax.tree_util.tree_unflatten(
            treedef, [v[int(a) : int(b)].reshape(s).astype(dt) for a, b, s, dt in zip(starts, ends, shapes, dtypes)]
        )

    return unravel


def relative_error(a, b) -> float:
    r"""Normwise relative error :math:`\|a - b\|_\infty / \|b\|_\infty` (pytrees allowed)."""
    fa, fb = _flat(a).astype(np.float64), _flat(b).astype(np.float64)
    if fa.shape != fb.shape:
        raise ValueError(f"shapes differ: {fa.shape} vs {fb.shape}")
    scale = np.max(np.abs(fb)) if fb.size else 0.0
    diff = np.max(np.abs(fa - fb)) if fa.size else 0.0
    if scale == 0.0:
        return float(diff)
    return float(diff / scale)


_TRACER_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _compiled(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` compiled once with ``jax.jit``, or run eagerly if it cannot be.

    Run eagerly, a gradient compiles each of its primitives separately on
    first use, which costs seconds; compiled whole it costs a fraction of
    that. Functions that inspect values on the host (input validation) cannot
    be traced and are run as they are.
    """

    def call(x):
        try:
            return jax.jit(fn)(x)
        except _TRACER_ERRORS:
            return fn(x)

    return call


def check_gradient(
    f: Callable[[Any], jax.Array],
    grad_fn: Callable[[Any], Any],
    x: Any,
    *,
    eps: float = 1e-5,
    n_coords: int | None = 64,
    seed: int = 0,
) -> GradientCheck:
    r"""Compare ``grad_fn(x)`` with ``jax.grad(f)(x)`` and with finite differences.

    Args:
      f: scalar function of ``x`` (an array or a pytree of arrays).
      grad_fn: the analytic gradient; returns the same structure as ``x``.
      x: the point, in float64 (enable ``jax_enable_x64`` first).
      eps: relative step :math:`h_i = \epsilon \max(1, |x_i|)` of the central
        difference :math:`(f(x + h_i e_i) - f(x - h_i e_i)) / 2h_i`.
      n_coords: check this many randomly chosen coordinates when ``x`` has
        more; ``None`` checks all.
      seed: chooses the coordinates.

    Returns:
      :class:`GradientCheck` with both normwise relative errors.

    Raises:
      ValueError: if ``x`` is not float64, or ``grad_fn`` returns the wrong
        shape.
    """
    flat, unravel = _flat(x), _unravel(x)
    if flat.dtype != np.float64:
        raise ValueError(
            f"check_gradient needs float64 inputs, got {flat.dtype}; call "
            "jax.config.update('jax_enable_x64', True) before creating arrays"
        )
    analytic = _flat(_compiled(grad_fn)(x))
    if analytic.shape != flat.shape:
        raise ValueError(f"grad_fn returned {analytic.size} values but x has {flat.size}")
    auto = _flat(_compiled(jax.grad(f))(x))
    analytic = np.asarray(analytic, np.float64)

    n = flat.size
    if n_coords is None or n <= n_coords:
        idx = np.arange(n)
    else:
        idx = np.sort(np.random.default_rng(seed).choice(n, size=n_coords, replace=False))
    f_flat = jax.jit(lambda v: f(unravel(v)))
    base = np.asarray(flat, np.float64)
    fd = np.empty(idx.size)
    for j, i in enumerate(idx):
        h = eps * max(1.0, abs(base[i]))
        up, down = base.copy(), base.copy()
        up[i] += h
        down[i] -= h
        fd[j] = (float(f_flat(jnp.asarray(up))) - float(f_flat(jnp.asarray(down)))) / (2 * h)
    return GradientCheck(autodiff_error=relative_error(analytic, auto), fd_error=relative_error(analytic[idx], fd))


def assert_gradient(
    f: Callable[[Any], jax.Array],
    grad_fn: Callable[[Any], Any],
    x: Any,
    *,
    rtol: float = 1e-10,
    fd_rtol: float = 1e-6,
    **kwargs,
) -> GradientCheck:
    """Run :func:`check_gradient` and raise ``AssertionError`` past tolerance.

    ``rtol`` bounds the error against ``jax.grad``; ``fd_rtol`` the error
    against finite differences (whose own truncation and round-off errors
    are of order ``eps**2`` and ``1e-16 |f| / eps``).
    """
    result = check_gradient(f, grad_fn, x, **kwargs)
    if not result.autodiff_error <= rtol:
        raise AssertionError(
            f"analytic gradient differs from jax.grad: relative error {result.autodiff_error:.3e} > {rtol:.1e}"
        )
    if not result.fd_error <= fd_rtol:
        raise AssertionError(
            f"analytic gradient differs from finite differences: relative error {result.fd_error:.3e} > {fd_rtol:.1e}"
        )
    return result


class Interval(NamedTuple):
    """A mean difference with its two-sided t interval.

    Attributes:
      mean: the mean of the paired differences.
      low: the interval's lower end.
      high: the interval's upper end.
      n: the number of pairs.
    """

    mean: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or wholly below 0 (a verdict, not a tie)."""
        return self.low > 0 or self.high < 0


def paired_interval(a, b=0.0, level: float = 0.95) -> Interval:
    """The book's verdict rule: the mean of the per-seed differences ``a - b``, with its t interval.

    ``a`` and ``b`` are results of two methods on the same seeds (pair ``i`` shares seed ``i``);
    without ``b``, ``a`` holds the per-seed differences themselves. "A beats B" is claimed only
    when the interval excludes 0. Needs SciPy (the t quantile).

    Examples:
      >>> from lse_energy.testing import paired_interval
      >>> iv = paired_interval([0.91, 0.93, 0.90, 0.94], [0.88, 0.90, 0.89, 0.90])
      >>> f"{iv.mean:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]", iv.excludes_zero()
      ('+0.027 [+0.007, +0.048]', True)
      >>> d = [0.03, 0.03, 0.01, 0.04]  # the differences themselves
      >>> paired_interval(d) == paired_interval(d, [0.0, 0.0, 0.0, 0.0])
      True
    """
    from scipy import stats

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"a and b must be 1-D of the same length >= 2 (pairs), got differences of shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("a and b must be finite")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    half = stats.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    m = float(d.mean())
    return Interval(m, m - float(half), m + float(half), int(d.size))
