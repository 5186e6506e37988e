"""Independent oracles shared by the proposition tests (not a test module)."""

import numpy as np


def relative_error(a, b) -> float:
    """Normwise relative error ``max|a - b| / max|b|``."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def complex_step_grad(f, x, h: float = 1e-30) -> np.ndarray:
    """Gradient of a real-analytic scalar ``f`` at real ``x`` by complex steps,
    ``f(x + i h e_k).imag / h``: exact to round-off (no subtraction), no autodiff."""
    x = np.asarray(x, dtype=complex)
    g = np.empty(x.shape)
    for j in np.ndindex(x.shape):
        xp = x.copy()
        xp[j] += 1j * h
        g[j] = np.imag(f(xp)) / h
    return g


def complex_step(f, args, argnum, h: float = 1e-30) -> np.ndarray:
    """``d f(*args) / d args[argnum]`` by complex steps (see :func:`complex_step_grad`)."""
    args = tuple(args)
    x = np.asarray(args[argnum], dtype=float)
    return complex_step_grad(lambda z: f(*args[:argnum], z, *args[argnum + 1 :]), x, h)
