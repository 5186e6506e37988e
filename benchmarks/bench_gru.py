"""minGRU's linear recurrence h_n = a_n h_{n-1} + b_n: parallel scan vs sequential scan (chapter 15).

Both are the package's public functions under ``jax.jit`` (so no host-side input
checks are timed): ``gru.scan_sequential`` (``lax.scan``, N dependent steps) and
``gru.scan_parallel`` (``lax.associative_scan`` on the affine maps, O(log N)
rounds and about twice the work), plus ``gru.scan_log_signed`` (log space, two
scans). For every N the inputs are random decays a in (0.5, 1) and real b, H
units; the results are checked to agree (float64, relative 1e-12) before timing.
Reported: the ratio sequential / parallel (> 1: the parallel scan is faster). No
target: on a CPU with few cores the sequential scan usually wins; the parallel
scan pays off on hardware with many lanes (GPU).
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import compare, row


def run(ns=(4096, 16384, 65536), H: int = 64, reps: int = 7):
    """Rows of the "gru scan" section and the raw timings per N."""
    import jax
    import jax.numpy as jnp

    from lse_energy import gru

    seq, par = jax.jit(gru.scan_sequential), jax.jit(gru.scan_parallel)
    logs = jax.jit(gru.scan_log_signed)
    rng = np.random.default_rng(0)
    rows, raw = [], {}
    for n in ns:
        a = jnp.asarray(rng.uniform(0.5, 1.0, (n, H)))
        b = jnp.asarray(rng.normal(size=(n, H)))
        h0 = jnp.zeros(H, a.dtype)
        ref = np.asarray(seq(a, b, h0))
        scale = np.max(np.abs(ref))
        assert np.max(np.abs(np.asarray(par(a, b, h0)) - ref)) <= 1e-12 * scale
        assert np.max(np.abs(np.asarray(logs(jnp.log(a), b, h0)) - ref)) <= 1e-12 * scale
        t = compare(
            {
                "sequential": lambda: seq(a, b, h0).block_until_ready(),
                "parallel": lambda: par(a, b, h0).block_until_ready(),
                "log": lambda: logs(jnp.log(a), b, h0).block_until_ready(),
            },
            reps=reps,
        )
        raw[n] = t
        rows.append(
            row(
                "gru scan",
                f"sequential / parallel, N = {n}, H = {H}",
                t["sequential"] / t["parallel"],
                "x",
                "",
                None,
                f"seq {1e3 * t['sequential']:.2f} ms, par {1e3 * t['parallel']:.2f} ms, "
                f"log {1e3 * t['log']:.2f} ms ({jax.default_backend()})",
            )
        )
    return rows, raw
