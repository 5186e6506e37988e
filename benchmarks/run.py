"""Run every comparison side by side and print one table of ratios; also write ``_build/bench.json``.

Usage: ``python benchmarks/run.py [--scale S] [--only SECTIONS]``, SECTIONS a comma-separated subset of
``gmm,attention,rbm,structural,scaling,gru,first_call,compile_once``.
``--scale`` (default 1) multiplies the data sizes of the GMM and RBM rows, for quick runs.
Timings are medians of alternating repetitions within this one process; the
load average is printed with them, since they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from benchmarks import (  # noqa: E402
    bench_attention,
    bench_compile_once,
    bench_first_call,
    bench_gmm,
    bench_gru,
    bench_rbm,
    bench_scaling,
    bench_structural,
)
from benchmarks.common import load_average, row  # noqa: E402


def fmt(value) -> str:
    if isinstance(value, str):
        return value
    v = float(value)
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
        return f"{v:.2e}"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def table(rows) -> str:
    head = ("section", "measurement", "value", "unit", "target", "met", "note")
    lines = [
        [
            r["section"],
            r["name"],
            fmt(r["value"]),
            r["unit"],
            r["target"],
            {True: "yes", False: "NO", None: ""}[r["met"]],
            r["note"],
        ]
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    out = [" | ".join(h.ljust(w) for h, w in zip(head, widths)), "-+-".join("-" * w for w in widths)]
    out += [" | ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def _attention_sizes():
    """bench_attention.run at each of its SIZES (N = M, d = 64): rows of all, raw timings keyed by N."""
    rows, raw = [], {}
    for n, reps in bench_attention.SIZES:
        r, x = bench_attention.run(N=n, M=n, reps=reps)
        rows += r
        raw[f"N={n}"] = x
    return rows, raw


def _gmm_sizes(N: int):
    """The GMM rows at K = 16 (target 10x) and K = 64 (target 20x), d = 16."""
    rows, raw = [], {}
    for K in (16, 64):
        r, x = bench_gmm.run(N=N, K=K)
        rows += r
        raw[f"K={K}"] = x
    return rows, raw


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", default="gmm,attention,rbm,structural,scaling,gru,first_call,compile_once")
    ap.add_argument("--out", default=str(ROOT / "_build" / "bench.json"))
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    s = args.scale
    load_before = load_average()
    t0 = time.time()
    rows, raw = [], {}
    jobs = {
        "gmm": lambda: _gmm_sizes(max(1000, int(200_000 * s))),
        "attention": lambda: _attention_sizes(),
        "rbm": lambda: bench_rbm.run(tiles=max(1, round(10 * s))),
        "structural": lambda: bench_structural.run(),
        "scaling": lambda: bench_scaling.run(),
        "gru": lambda: bench_gru.run(ns=tuple(max(1024, int(n * s)) for n in (4096, 16384, 65536))),
        # every public fit's first call in a new process, cold and with a warm compilation cache
        "first_call": lambda: bench_first_call.run(),
        # every trainer's second call with a fresh but equal optimizer, beside the same object's
        "compile_once": lambda: bench_compile_once.run(),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, job in jobs.items():
        if name in only:
            print(f"[bench] {name} ...", flush=True)
            try:
                r, x = job()
            except Exception as e:  # one broken section must not lose the others' figures
                traceback.print_exc()
                failed.append(name)
                r, x = [row(name, "FAILED", type(e).__name__, "", "", False, str(e).splitlines()[0][:200])], {}
            rows += r
            raw[name] = x
            _write(out, load_before, load_average(), rows, raw)  # after each section, so a cut-off run keeps them
    load_after = load_average()
    print()
    print(describe(load_before, load_after, time.time() - t0))
    print(table(rows))
    _write(out, load_before, load_after, rows, raw)
    print(f"written {out}")
    return 1 if failed else 0


def device() -> str:
    """The device JAX runs on: the CPU's name, or the accelerator's kind."""
    d = jax.devices()[0]
    if d.platform == "cpu":
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    return f"{d.device_kind} ({d.platform}; host {os.cpu_count()} CPUs)"


def describe(load_before, load_after, seconds: float) -> str:
    """The table's heading line: device, versions, float32 matmul precision, load."""
    precision = jax.config.jax_default_matmul_precision or "default"
    return (
        f"lse_energy benchmarks on {device()}, jax {jax.__version__}, JAX float32 matmul precision "
        f"{precision}; load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min); "
        f"{seconds:.0f} s"
    )


def _torch_version() -> str | None:
    """PyTorch's version where the peer rows could run (it is not in the lock), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


def _write(out: pathlib.Path, load_before, load_after, rows, raw) -> None:
    out.write_text(
        json.dumps(
            {
                "device": device(),
                "platform": jax.default_backend(),
                "matmul_precision": jax.config.jax_default_matmul_precision,
                "load_average_before": load_before,
                "load_average_after": load_after,
                "cpus": os.cpu_count(),
                "jax": jax.__version__,
                "torch": _torch_version(),
                "rows": rows,
                "table": table(rows),
                "raw": raw,
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
