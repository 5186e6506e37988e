"""Attention and Hopfield steps against PyTorch's scaled_dot_product_attention (float32), at its fastest
configuration."""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from benchmarks.common import compare, matmul_callable, row


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# Every documented configuration of PyTorch's scaled_dot_product_attention that could
# be the fastest: on a CPU the tensor layout and the intra-op thread count (1, 2 and all
# cores); on a CUDA device the layout and each SDPA backend (PyTorch's own dispatch, and
# each kernel forced; a kernel that refuses the inputs, e.g. flash for float32, is left
# out and named). Only the 4-D (batch, heads, L, E) layout dispatches to the CPU's fused
# flash kernel (aten::_scaled_dot_product_flash_attention_for_cpu); 3-D inputs take the
# unfused math path. The benchmark times all of them side by side and compares against
# the fastest; tests/integration/test_benchmarks.py checks the layouts and, with torch installed,
# the kernel each one dispatches to.
TORCH_LAYOUTS = {"4-D (B, H, L, E)": 4, "3-D (B, L, E)": 3}
TORCH_THREADS = tuple(sorted({1, 2, os.cpu_count() or 1}))
TORCH_CUDA_BACKENDS = ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "FLASH_ATTENTION", "MATH")
FUSED_KERNEL = "aten::_scaled_dot_product_flash_attention_for_cpu"


def sdpa_layout(a: np.ndarray, ndim: int) -> np.ndarray:
    """An ``(L, E)`` array in the ``ndim``-D layout: ``(1, 1, L, E)`` or ``(1, L, E)``."""
    if ndim not in (3, 4):
        raise ValueError(f"ndim must be 3 or 4; got {ndim!r}")
    return a.reshape((1,) * (ndim - 2) + a.shape)


def _torch_variants(torch, device: str):
    """``[(label, threads or None, context factory)]``: thread counts on a CPU, SDPA backends on CUDA."""
    if device == "cpu":
        return [(f"{n} thread{'s' if n > 1 else ''}", n, contextlib.nullcontext) for n in TORCH_THREADS]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = [("default dispatch", None, contextlib.nullcontext)]
    for name in TORCH_CUDA_BACKENDS:
        if hasattr(SDPBackend, name):
            out.append((name.lower(), None, lambda b=getattr(SDPBackend, name): sdpa_kernel(b)))  # noqa: B008 (binds this backend)
    return out


def torch_configs(torch, qn, kn, vn, gn, device: str = "cpu", skipped: list | None = None):
    """``{label: (forward, forward+grad, forward+grad with k = v)}`` for every layout x variant.

    ``device`` is ``"cpu"`` (variants: thread counts) or ``"cuda"`` (variants: SDPA
    backends; each call synchronises). On CUDA a configuration whose first call raises
    is left out and ``(label, first line of the error)`` is appended to ``skipped``.
    """
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    configs = {}
    for layout, ndim in TORCH_LAYOUTS.items():
        tq, tk, tv, tg = (
            torch.from_numpy(np.ascontiguousarray(sdpa_layout(a, ndim))).to(device) for a in (qn, kn, vn, gn)
        )
        for variant, threads, ctx in _torch_variants(torch, device):

            def fwd(tq=tq, tk=tk, tv=tv, threads=threads, ctx=ctx):
                if threads is not None:
                    torch.set_num_threads(threads)
                with torch.no_grad(), ctx():
                    sdpa(tq, tk, tv)
                sync()

            def fwd_bwd(keys_are_values=False, tq=tq, tk=tk, tv=tv, tg=tg, threads=threads, ctx=ctx):
                if threads is not None:
                    torch.set_num_threads(threads)
                a = tq.clone().requires_grad_(True)
                b = tk.clone().requires_grad_(True)
                c = b if keys_are_values else tv.clone().requires_grad_(True)
                with ctx():
                    sdpa(a, b, c).backward(tg)
                sync()

            label = f"{layout}, {variant}"
            if device != "cpu":
                try:
                    fwd()
                    fwd_bwd()
                except RuntimeError as e:  # e.g. "No available kernel" for flash with float32
                    if skipped is not None:
                        skipped.append((label, str(e).splitlines()[0][:120]))
                    continue
            configs[label] = (fwd, fwd_bwd, lambda f=fwd_bwd: f(True))
    return configs


def fastest(t: dict[str, float], prefix: str, labels) -> tuple[float, str]:
    """The smallest time among ``prefix + label`` and the label it belongs to."""
    best = min(labels, key=lambda c: t[prefix + c])
    return t[prefix + best], best


def attention_flops(N: int, M: int, d: int) -> float:
    """2NMd for q k', 2NMd for weights @ v, plus NM exponentials (counted as one FLOP each)."""
    return 4.0 * N * M * d + N * M


def run(N: int = 2048, M: int = 2048, d: int = 64, reps: int = 7) -> tuple[list[dict], dict]:
    import jax
    import jax.numpy as jnp

    from lse_energy import attention, hopfield

    rng = np.random.default_rng(0)
    qn, kn, vn, gn = (rng.normal(size=s).astype(np.float32) for s in ((N, d), (M, d), (M, d), (N, d)))
    q, k, v, g = (jnp.asarray(a) for a in (qn, kn, vn, gn))
    beta = 1.0 / math.sqrt(d)

    def block(x):
        return jax.block_until_ready(x)

    attend_grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(attention.attend(q, k, v) * g), argnums=(0, 1, 2)))
    update_grad = jax.jit(jax.grad(lambda m, x: jnp.sum(hopfield.update(m, x, beta=beta) * g), argnums=(0, 1)))
    dpa = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q[None, :, None], k[None, :, None], v[None, :, None]))
    plain = jax.jit(lambda q, k, v: jax.nn.softmax(beta * q @ k.T, axis=-1) @ v)
    # The floor: the two matrix products of attention alone, (q k') v, with nothing between them;
    # also in the kernel's 512-query blocks (the N x M matrix never leaves cache), and the six
    # products of forward + gradient (S = q k', S v; dP = g v', dv = S' g, dq = dP k, dk = dP' q)
    # in the same blocks, which any attention gradient that stores or recomputes S must do.
    gemms = jax.jit(lambda q, k, v: (q @ k.T) @ v)
    n_blk = max(1, N // 512)
    qb, gb = q[: n_blk * (N // n_blk)].reshape(n_blk, -1, d), g[: n_blk * (N // n_blk)].reshape(n_blk, -1, d)
    gemms_blocked = jax.jit(lambda qb, k, v: jax.lax.map(lambda qc: (qc @ k.T) @ v, qb))

    @jax.jit
    def grad_gemms_blocked(qb, gb, k, v):
        def step(acc, inp):
            qc, gc = inp
            s_ = qc @ k.T
            o, dp = s_ @ v, gc @ v.T
            return (acc[0] + s_.T @ gc, acc[1] + dp.T @ qc), (o, dp @ k)

        return jax.lax.scan(step, (jnp.zeros_like(v), jnp.zeros_like(k)), (qb, gb))

    # The elementwise work no XLA program can skip, each pass timed alone on one cache-resident
    # block of similarities (512 x M, as in the kernel), once per block, with a shift that
    # changes per block so that nothing is hoisted: forward, exp fused with the row sum;
    # backward, dS = P o (dP - delta) with P recomputed by exp, written out for the dS GEMMs.
    s_blk = (beta * q[: N // n_blk]) @ k.T
    dp_blk = g[: N // n_blk] @ v.T
    shifts = 10.0 + 1e-3 * jnp.arange(n_blk, dtype=q.dtype)
    exp_pass = jax.jit(lambda s_, c: jax.lax.map(lambda c_: jnp.sum(jnp.exp(s_ - c_), axis=-1), c))
    ds_pass = jax.jit(lambda s_, dp_, c: jax.lax.map(lambda c_: jnp.exp(s_ - c_) * (dp_ - c_), c))
    fns = {
        "attend kernel (jit)": lambda: block(attention._attend_jit(q, k, v, jnp.asarray(beta, q.dtype), None)),
        "exp pass": lambda: block(exp_pass(s_blk, shifts)),
        "dS pass": lambda: block(ds_pass(s_blk, dp_blk, shifts)),
        "attend": lambda: block(attention.attend(q, k, v)),
        "update": lambda: block(hopfield.update(k, q, beta=beta)),
        "attend+grad": lambda: block(attend_grad(q, k, v)),
        "update+grad": lambda: block(update_grad(k, q)),
        "jax.nn.dot_product_attention": lambda: block(dpa(q, k, v)),
        "plain softmax(qk')v (jit)": lambda: block(plain(q, k, v)),
        "floor": lambda: block(gemms(q, k, v)),
        "floor blocked": lambda: block(gemms_blocked(qb, k, v)),
        "grad floor blocked": lambda: block(grad_gemms_blocked(qb, gb, k, v)),
    }
    peak, peak_flops = matmul_callable(1024, "float32")
    fns["dot"] = peak
    torch = _torch()
    labels, skipped = [], []
    on_gpu = jax.default_backend() == "gpu"
    torch_device = "cuda" if on_gpu and torch is not None and torch.cuda.is_available() else "cpu"
    if torch is not None:
        for label, (fwd, fwd_bwd, fwd_bwd_kv) in torch_configs(torch, qn, kn, vn, gn, torch_device, skipped).items():
            labels.append(label)
            fns["torch sdpa " + label] = fwd
            fns["torch sdpa+grad " + label] = fwd_bwd
            fns["torch sdpa+grad (k=v) " + label] = fwd_bwd_kv
    t = compare(fns, reps=reps)
    if torch is not None:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
        best = {kind: fastest(t, f"torch {kind} ", labels) for kind in ("sdpa", "sdpa+grad", "sdpa+grad (k=v)")}
        for kind, (sec, label) in best.items():
            t[f"torch {kind}"] = sec
            t[f"torch {kind} config"] = label

    # correctness of what is timed
    ref = np.asarray(
        jax.nn.softmax(beta * np.asarray(q, np.float64) @ np.asarray(k, np.float64).T, -1) @ np.asarray(v, np.float64)
    )
    err_attend = float(np.max(np.abs(np.asarray(attention.attend(q, k, v)) - ref)))

    fl = attention_flops(N, M, d)
    peak_gf = peak_flops / t["dot"] / 1e9
    rows = []
    size = f"N=M={N}, d={d}, float32" if N == M else f"N={N}, M={M}, d={d}, float32"
    tag = f"N=M={N}: " if N == M else f"N={N}, M={M}: "
    rows.append(row("2 attention", f"{tag}matmul peak: jnp.dot 1024^3 float32 ({size})", peak_gf, "GFLOP/s"))
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: two GEMMs alone, (q k') v",
            1e3 * t["floor"],
            "ms",
            note=f"{fl / t['floor'] / 1e9 / peak_gf:.2f} of matmul peak",
        )
    )
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: the same in 512-query blocks",
            1e3 * t["floor blocked"],
            "ms",
            note="the kernel's blocking, no exp or sums",
        )
    )
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: forward+grad's six GEMMs in 512-query blocks",
            1e3 * t["grad floor blocked"],
            "ms",
            note="S = qk', Sv, gv', S'g, dP k, dP'q; no exp",
        )
    )
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: exp + row sum over the N x M similarities alone",
            1e3 * t["exp pass"],
            "ms",
            note="one fused pass per 512-query block, block in cache, no GEMMs",
        )
    )
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: backward's dS = P o (dP - delta) alone",
            1e3 * t["dS pass"],
            "ms",
            note="P recomputed by exp; one pass per block, written out",
        )
    )
    fwd_floor = t["floor blocked"] + t["exp pass"]
    grad_floor = t["grad floor blocked"] + t["exp pass"] + t["dS pass"]
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: forward, blocked GEMMs + exp pass",
            1e3 * fwd_floor,
            "ms",
            note="the sum of the parts timed alone",
        )
    )
    rows.append(
        row(
            "2 attention",
            f"{tag}floor: forward+grad, six blocked GEMMs + exp + dS passes",
            1e3 * grad_floor,
            "ms",
            note="the sum of the parts timed alone",
        )
    )
    rows.append(
        row(
            "2 attention",
            f"{tag}attend forward, the jitted kernel without the public call's checks",
            1e3 * t["attend kernel (jit)"],
            "ms",
            note=f"{t['attend kernel (jit)'] / fwd_floor:.2f} x the forward floor",
        )
    )
    best_floor = min(t["floor"], t["floor blocked"])
    for name in ("attend", "update"):
        frac = fl / t[name] / 1e9 / peak_gf
        rows.append(row("2 attention", f"{tag}{name} forward", 1e3 * t[name], "ms"))
        rows.append(
            row(
                "2 attention",
                f"{tag}{name} forward fraction of the GEMM floor",
                t["floor"] / t[name],
                "",
                note="time of the two GEMMs alone / time of the forward",
            )
        )
        if torch is not None:
            ratio = t["torch sdpa"] / t[name]
            cap = t["torch sdpa"] / best_floor
            rows.append(
                row(
                    "2 attention",
                    f"{tag}{name} speed vs torch sdpa (forward)",
                    ratio,
                    "x",
                    ">= 1",
                    ratio >= 1,
                    f"torch at {t['torch sdpa config']}"
                    + (
                        ""
                        if ratio >= 1
                        else f"; the faster GEMM floor alone would be {cap:.2f}x, "
                        f"GEMMs + exp pass {t['torch sdpa'] / fwd_floor:.2f}x; {name} takes "
                        f"{t[name] / fwd_floor:.2f} x that floor"
                    ),
                )
            )
        rows.append(
            row(
                "2 attention",
                f"{tag}{name} forward fraction of matmul peak",
                frac,
                "",
                ">= 0.70",
                frac >= 0.70,
                ""
                if frac >= 0.70
                else f"the forward floor (blocked GEMMs + exp pass) reaches {fl / fwd_floor / 1e9 / peak_gf:.2f}",
            )
        )
        tg_name = f"{name}+grad"
        rows.append(row("2 attention", f"{tag}{tg_name}", 1e3 * t[tg_name], "ms"))
        if torch is not None:
            tref = t["torch sdpa+grad"] if name == "attend" else t["torch sdpa+grad (k=v)"]
            ratio = tref / t[tg_name]
            cfg = t["torch sdpa+grad config"] if name == "attend" else t["torch sdpa+grad (k=v) config"]
            cap = tref / t["grad floor blocked"]
            rows.append(
                row(
                    "2 attention",
                    f"{tag}{tg_name} speed vs torch sdpa+grad",
                    ratio,
                    "x",
                    ">= 1",
                    ratio >= 1,
                    f"torch at {cfg}"
                    + (
                        ""
                        if ratio >= 1
                        else f"; the six GEMMs alone (blocked floor) would be {cap:.2f}x, "
                        f"with the exp and dS passes {tref / grad_floor:.2f}x; "
                        f"{tg_name} takes {t[tg_name] / grad_floor:.2f} x that floor"
                    ),
                )
            )
    if torch is None:
        rows.append(
            row(
                "2 attention",
                f"{tag}torch sdpa",
                "skipped",
                "",
                "",
                None,
                "PyTorch not installed (optional: pip install torch==2.13.0)",
            )
        )
    else:
        for kind, what in (("sdpa", "forward"), ("sdpa+grad", "forward+grad")):
            rows.append(
                row(
                    "2 attention",
                    f"{tag}torch sdpa {what}, fastest configuration",
                    1e3 * t[f"torch {kind}"],
                    "ms",
                    note=t[f"torch {kind} config"],
                )
            )
            for label in labels:
                rows.append(
                    row(
                        "2 attention",
                        f"{tag}torch sdpa {what}, {label}",
                        1e3 * t[f"torch {kind} {label}"],
                        "ms",
                        note="reported only",
                    )
                )
        rows.append(
            row(
                "2 attention",
                f"{tag}torch device",
                torch_device,
                "",
                note=("JAX on " + jax.devices()[0].device_kind) if on_gpu else "",
            )
        )
        for label, error in skipped:
            rows.append(row("2 attention", f"{tag}torch sdpa configuration left out", label, "", note=error))
    rows.append(
        row(
            "2 attention",
            f"{tag}jax.nn.dot_product_attention forward",
            1e3 * t["jax.nn.dot_product_attention"],
            "ms",
            note="reported only, no target",
        )
    )
    rows.append(
        row("2 attention", f"{tag}plain softmax(qk')v forward (jit)", 1e3 * t["plain softmax(qk')v (jit)"], "ms")
    )
    rows.append(row("2 attention", f"{tag}attend vs float64 softmax(qk')v (max abs)", err_attend, ""))
    return rows, {k_: (v_ if isinstance(v_, str) else float(v_)) for k_, v_ in t.items()} | {"peak_gflops": peak_gf}


def time_attend(n: int, d: int = 64, reps: int = 3) -> float:
    """Median seconds of attention.attend at N = M = n (for the scaling fit)."""
    import jax
    import jax.numpy as jnp

    from lse_energy import attention

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(n, d)).astype(np.float32)) for _ in range(3))
    return compare({"s": lambda: jax.block_until_ready(attention.attend(q, k, v))}, reps=reps)["s"]


# The sizes `benchmarks/run.py` times, with the repetitions of each (N = M = 8192 is 16x the work).
SIZES = ((2048, 9), (8192, 5))


if __name__ == "__main__":
    for n, reps in SIZES:
        for r in run(N=n, M=n, reps=reps)[0]:
            print(r)
