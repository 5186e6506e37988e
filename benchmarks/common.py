"""Shared helpers: side-by-side timing, the machine's matmul peak, one result row."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (0 where the OS does not report them)."""
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def compare(fns: dict[str, Callable[[], object]], reps: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median wall-clock seconds of each callable, timed side by side.

    Every callable is warmed up (compilation, caches), then the callables are
    run in turn, ``reps`` rounds, with the order reversed on every other round
    so that a slow phase of the machine hits all of them alike. Each callable
    must block until its result is ready.
    """
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return {n: float(np.median(v)) for n, v in times.items()}


def matmul_callable(n: int, dtype) -> tuple[Callable[[], object], float]:
    """A jitted ``jnp.dot`` of two ``(n, n)`` matrices and its FLOP count ``2 n^3``."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(n, n)), dtype)
    b = jnp.asarray(rng.normal(size=(n, n)), dtype)
    dot = jax.jit(jnp.dot)
    return (lambda: dot(a, b).block_until_ready()), 2.0 * n**3


def row(section: str, name: str, value, unit: str = "", target: str = "", met=None, note: str = "") -> dict:
    """One line of the results table (``met``: True/False, or None when there is no target)."""
    return {"section": section, "name": name, "value": value, "unit": unit, "target": target, "met": met, "note": note}
