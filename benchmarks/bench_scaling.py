"""Scaling: em_step time vs N (expect slope 1) and attend time vs n (expect slope 2), log-log fits."""

from __future__ import annotations

import numpy as np

from benchmarks import bench_attention, bench_gmm
from benchmarks.common import row


def slope(sizes, times) -> float:
    """Least-squares slope of log(time) against log(size)."""
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def run(gmm_sizes=(25_000, 50_000, 100_000, 200_000), attn_sizes=(1024, 2048, 4096, 8192), reps: int = 3):
    t_gmm = [bench_gmm.time_em_step(N, reps=reps) for N in gmm_sizes]
    t_att = [bench_attention.time_attend(n, reps=reps) for n in attn_sizes]
    s_gmm, s_att = slope(gmm_sizes, t_gmm), slope(attn_sizes, t_att)
    fixed = float(np.polyfit(np.asarray(gmm_sizes, float), np.asarray(t_gmm), 1)[1])  # intercept of t = a + bN
    rows = [
        row(
            "5 scaling",
            "em_step ms at N = " + ", ".join(map(str, gmm_sizes)),
            ", ".join(f"{1e3 * t:.1f}" for t in t_gmm),
            "ms",
        ),
        row(
            "5 scaling",
            "em_step log-log slope in N",
            s_gmm,
            "",
            "~1 (linear)",
            abs(s_gmm - 1) < 0.25,
            note=""
            if abs(s_gmm - 1) < 0.25
            else f"a fixed cost flattens the fit: t = a + bN fits a = {1e3 * fixed:.1f} ms; "
            f"slope over the two largest N {slope(gmm_sizes[-2:], t_gmm[-2:]):.2f}",
        ),
        row(
            "5 scaling",
            "attend ms at n = " + ", ".join(map(str, attn_sizes)),
            ", ".join(f"{1e3 * t:.2f}" for t in t_att),
            "ms",
        ),
        row(
            "5 scaling",
            "attend log-log slope in n",
            s_att,
            "",
            "~2 (quadratic)",
            abs(s_att - 2) < 0.35,
            note="" if abs(s_att - 2) < 0.35 else "small n is overhead-bound, which flattens the fit",
        ),
    ]
    raw = {
        "gmm_sizes": list(gmm_sizes),
        "gmm_times": t_gmm,
        "attn_sizes": list(attn_sizes),
        "attn_times": t_att,
        "gmm_slope": s_gmm,
        "attn_slope": s_att,
    }
    return rows, raw
