"""Issue 36, point 2: block sizes and layouts of the attention kernel against PyTorch SDPA, with profiles.

Usage: ``python benchmarks/sweep_attention.py [--sizes 2048 8192] [--reps 5] [--out _build/attention_sweep.json]``.

Every variant computes ``softmax(beta q k') v`` (float32, N = M, d = 64) and is checked against a
float64 reference before it is timed. Timings are medians of alternating repetitions in this one
process (``benchmarks.common.compare``), side by side with PyTorch's fused SDPA kernel (4-D layout,
the fastest CPU configuration of ``bench_attention``) when torch is installed. The variants:

* ``core.softmax_average`` at query blocks of 128 .. 2048 rows (512 is the package's default), and
  one-shot (no blocking); its blocks are rematerialised (``jax.checkpoint``);
* 512-row blocks without the underflow check and its ``lax.cond`` (the control for the variants below,
  which leave it out too);
* the same 512-row blocks with the keys stored transposed, ``(d, M)``, so the similarity GEMM reads
  both operands along rows;
* 256- and 512-row blocks under ``jax.checkpoint`` (no underflow check): the gradient recomputes each
  block's weights instead of storing all ``N x M`` of them (as a flash kernel's backward does);
* query blocks x key blocks: each 256-query block scans the keys in blocks of 1024 and accumulates
  ``sum_p e_cp v_p`` and ``sum_p e_cp``; the Cauchy-Schwarz shift of ``core.softmax_average`` is the
  same for every key block, so no running-maximum rescaling is needed.

Then the profile of the compiled program of the package's kernel and of the fastest variant (time
per XLA thunk, from ``jax.profiler``), and PyTorch's operator profile, forward and forward+grad.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import math
import os
import pathlib
import re
import sys
import tempfile
from functools import partial

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.bench_attention import _torch, sdpa_layout  # noqa: E402
from benchmarks.common import compare, load_average  # noqa: E402
from lse_energy import core  # noqa: E402

BLOCKS = (128, 256, 512, 1024, 2048)


def _blocked(q, k, v, beta, block=512, transposed=False, remat=False):
    """``core.softmax_average``'s blocked path (no underflow fallback; these inputs never need it).

    ``transposed``: the keys stored once as ``(d, M)``, so the similarity GEMM reads both operands
    along rows. ``remat``: each block under ``jax.checkpoint``, so reverse mode recomputes the
    block's ``block x M`` weights instead of storing all ``N x M`` of them as residuals.
    """
    n_q, d = q.shape
    n_blocks = -(-n_q // block)
    qb = jnp.pad(beta * q, ((0, n_blocks * block - n_q), (0, 0))).reshape(n_blocks, block, d)
    kt = k.T
    k_norm = jax.lax.stop_gradient(jnp.sqrt(jnp.max(jnp.sum(k * k, axis=-1))))

    def one(qs):
        s = qs @ kt if transposed else qs @ k.T
        e = jnp.exp(s - jax.lax.stop_gradient(jnp.sqrt(jnp.sum(qs * qs, -1, keepdims=True)) * k_norm))
        return (e @ v) / jnp.sum(e, axis=-1, keepdims=True)

    return jax.lax.map(jax.checkpoint(one) if remat else one, qb).reshape(-1, v.shape[-1])[:n_q]


def _two_level(q, k, v, beta, block_q=256, block_k=1024):
    """Query blocks x key blocks with the fixed Cauchy-Schwarz shift (no rescaling between key blocks)."""
    n_q, d = q.shape
    n_k = k.shape[0]
    assert n_q % block_q == 0 and n_k % block_k == 0
    qb = (beta * q).reshape(n_q // block_q, block_q, d)
    kb, vb = k.reshape(-1, block_k, d), v.reshape(-1, block_k, v.shape[-1])
    k_norm = jax.lax.stop_gradient(jnp.sqrt(jnp.max(jnp.sum(k * k, axis=-1))))

    def one(qs):
        m = jax.lax.stop_gradient(jnp.sqrt(jnp.sum(qs * qs, -1, keepdims=True)) * k_norm)

        def step(acc, kv):
            e = jnp.exp(qs @ kv[0].T - m)
            return (acc[0] + e @ kv[1], acc[1] + jnp.sum(e, -1, keepdims=True)), None

        init = (jnp.zeros((block_q, v.shape[-1]), q.dtype), jnp.zeros((block_q, 1), q.dtype))
        (num, den), _ = jax.lax.scan(step, init, (kb, vb))
        return num / den

    return jax.lax.map(one, qb).reshape(n_q, v.shape[-1])


def variants():
    """``{name: f(q, k, v, beta)}``, each jittable and differentiable."""
    out = {f"core, query block {b}": partial(core.softmax_average, block=b) for b in BLOCKS}
    out["core, one-shot (no blocking)"] = partial(core.softmax_average, block=1 << 30)
    out["blocks of 512, no fallback check"] = _blocked
    out["keys transposed (d, M), block 512"] = partial(_blocked, transposed=True)
    for b in (256, 512):
        out[f"rematerialised blocks, block {b}"] = partial(_blocked, block=b, remat=True)
    out["query 256 x key 1024 blocks"] = _two_level
    return out


def _jax_profile(fn, *args, reps=3, top=8):
    """``[(thunk and its result shape, share of the thunks' time)]`` of ``fn(*args)``'s compiled program.

    From ``jax.profiler``'s trace: the time of each XLA thunk, runtime and control-flow events left
    out; the result shape comes from the compiled HLO text (``ynn_fusion`` thunks are the GEMMs).
    """
    hlo = fn.lower(*args).compile().as_text()
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(reps):
                jax.block_until_ready(fn(*args))
        (path,) = glob.glob(d + "/**/perfetto_trace.json.gz", recursive=True)
        events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    times = collections.Counter()
    for e in events:
        name = e.get("name", "")
        container = name.startswith(("while", "cond", "call"))  # spans the thunks of its body
        if e.get("ph") == "X" and not container and re.search(rf"^\s*(ROOT )?%?{re.escape(name)} = ", hlo, re.M):
            times[name] += e.get("dur", 0)
    total = sum(times.values()) or 1

    def shape(name):
        m = re.search(rf"^\s*(?:ROOT )?%?{re.escape(name)} = (\S+)", hlo, re.M)
        return f"{name} -> {m.group(1)}" if m else name

    return [(shape(name), t / total) for name, t in times.most_common(top)]


def _torch_profile(fn, reps=3, top=6):
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
    rows = sorted(prof.key_averages(), key=lambda r: -r.self_cpu_time_total)
    total = sum(r.self_cpu_time_total for r in rows) or 1
    del torch
    return [(r.key, r.self_cpu_time_total / total) for r in rows[:top]]


def run(n: int, reps: int) -> dict:
    rng = np.random.default_rng(0)
    d = 64
    qn, kn, vn, gn = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(4))
    q, k, v, g = (jnp.asarray(a) for a in (qn, kn, vn, gn))
    beta = jnp.float32(1.0 / math.sqrt(d))
    ref = jax.nn.softmax((qn.astype(np.float64) / math.sqrt(d)) @ kn.T.astype(np.float64), axis=-1) @ vn
    fns, errors = {}, {}
    for name, f in variants().items():
        fwd = jax.jit(f)
        grad = jax.jit(jax.grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v, beta) * g), argnums=(0, 1, 2)))
        errors[name] = float(np.max(np.abs(np.asarray(fwd(q, k, v, beta)) - ref)))
        assert errors[name] < 1e-4, (name, errors[name])
        fns[f"fwd {name}"] = lambda fwd=fwd: jax.block_until_ready(fwd(q, k, v, beta))
        fns[f"grad {name}"] = lambda grad=grad: jax.block_until_ready(grad(q, k, v))
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
        tq, tk, tv, tg = (torch.from_numpy(np.ascontiguousarray(sdpa_layout(a, 4))) for a in (qn, kn, vn, gn))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        out = sdpa(tq, tk, tv).numpy().reshape(n, d)
        assert np.max(np.abs(out - ref)) < 1e-4

        def t_fwd():
            with torch.no_grad():
                sdpa(tq, tk, tv)

        def t_grad():
            a, b, c = (x.clone().requires_grad_(True) for x in (tq, tk, tv))
            sdpa(a, b, c).backward(tg)

        fns["fwd torch sdpa (4-D, 2 threads)"] = t_fwd
        fns["grad torch sdpa (4-D, 2 threads)"] = t_grad
    t = compare(fns, reps=reps)
    res = {"n": n, "d": d, "load_average": load_average(), "max_abs_error": errors, "seconds": t}
    for kind in ("fwd", "grad"):
        ours = {k[len(kind) + 1 :]: s for k, s in t.items() if k.startswith(kind) and "torch" not in k}
        best = min(ours, key=ours.get)
        res[f"best {kind}"] = best
        if torch is not None:
            ref_t = t[f"{kind} torch sdpa (4-D, 2 threads)"]
            res[f"{kind} speed vs torch"] = {name: ref_t / s for name, s in ours.items()}
    best = variants()[res["best fwd"]]
    res["profile"] = {
        "fwd core, query block 512": _jax_profile(jax.jit(variants()["core, query block 512"]), q, k, v, beta),
        f"fwd {res['best fwd']}": _jax_profile(jax.jit(best), q, k, v, beta),
        "grad core, query block 512": _jax_profile(
            jax.jit(jax.grad(lambda q: jnp.sum(core.softmax_average(q, k, v, beta) * g))), q
        ),
    }
    if torch is not None:
        res["profile"]["fwd torch sdpa"] = _torch_profile(fns["fwd torch sdpa (4-D, 2 threads)"])
        res["profile"]["grad torch sdpa"] = _torch_profile(fns["grad torch sdpa (4-D, 2 threads)"])
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "_build" / "attention_sweep.json"))
    args = ap.parse_args(argv)
    results = []
    for n in args.sizes:
        r = run(n, args.reps)
        results.append(r)
        print(f"\nN = M = {n}, d = 64, float32; load average {r['load_average'][0]:.2f}")
        for kind in ("fwd", "grad"):
            for name, s in sorted((k, v) for k, v in r["seconds"].items() if k.startswith(kind)):
                vs = r.get(f"{kind} speed vs torch", {}).get(name[len(kind) + 1 :])
                print(f"  {name:50s} {1e3 * s:9.2f} ms" + (f"   {vs:5.2f}x torch" if vs else ""))
        for what, prof in r["profile"].items():
            print(f"  profile, {what}: " + ", ".join(f"{name} {share:.0%}" for name, share in prof))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps({"device": jax.devices()[0].device_kind, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
