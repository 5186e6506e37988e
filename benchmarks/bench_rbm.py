"""RBM: one CD-1 epoch of lse_energy.rbm.fit against sklearn's BernoulliRBM (same sizes and dtype).

``rbm.fit`` is timed with both of its Bernoulli samplers: the default (``jax.random.uniform``'s draws, one
threefry block per draw, the stream stored runs replay) and ``uniform_bits=16`` (four 16-bit uniforms per
threefry block, another stream, opt-in); and, with the default draws, with keys of JAX's two other
generators, ``rbg`` and ``unsafe_rbg`` (``jax.random.key(1, impl=...)``). The target row takes the fastest.

Besides the epochs, the benchmark times the *floor* of any CD-1 epoch on this machine in the same run: a
jitted ``lax.scan`` over the same number of minibatches that does only the step's matrix products (the five
GEMMs of one CD-1 update at the same shapes), then the same with its three sigmoids. No CD-1 implementation in
JAX can beat that floor, so ``sklearn / floor`` is the largest speed-up attainable here, and ``floor / ours`` the
share of that ceiling reached.

Where the share misses its target, the note cites a profile of the real call (``jax.profiler`` on one jitted
epoch, :func:`epoch_profile`): the self time of XLA's operations, grouped by what they do. XLA runs the epoch's
operations one after another on one thread, splitting the larger elementwise fusions in two; on a loaded machine
those splits wait for a busy core, so the profile (and the floor, whose GEMMs also use both cores) is only
meaningful with the load average well below the number of cores.

Not tried, because the maths forbids it: drawing the visible and hidden units of a sweep from the same random
bits. Block Gibbs needs ``h ~ P(h | v)`` and then ``v' ~ P(v' | h)`` drawn independently of the uniforms behind
``h``; shared uniforms would couple ``v'_i`` to ``h_j`` beyond their conditional, so the chain's kernel would no
longer be the Gibbs kernel and CD would follow another stationary distribution than the model's.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re
import tempfile

import numpy as np

from benchmarks.common import compare, row

# label -> (rbm.fit's uniform_bits, the key's implementation). The rbg keys are JAX's other generators
# (XLA's RngBitGenerator, which XLA's CPU compiler expands into integer operations); rbm.fit draws
# from them with jax.random.uniform (its 16-bit blocks are threefry's).
SAMPLERS = {
    "default draws": (None, "threefry2x32"),
    "uniform_bits=16": (16, "threefry2x32"),
    "rbg key": (None, "rbg"),
    "unsafe_rbg key": (None, "unsafe_rbg"),
}


def digits(tiles: int = 10) -> np.ndarray:
    """Binarised 8x8 digits (pixel > 7), tiled to ``1797 * tiles`` rows (10 -> 17 970)."""
    from sklearn.datasets import load_digits

    x = (load_digits().data > 7).astype(np.float64)
    return np.tile(x, (tiles, 1))


def _floors(n_batches: int, batch_size: int, n_visible: int, n_hidden: int, dtype):
    """Two jitted epochs that do only a CD-1 step's GEMMs (then also its sigmoids)."""
    import jax

    V = (jax.random.uniform(jax.random.key(0), (n_batches, batch_size, n_visible)) < 0.3).astype(dtype)
    W0 = 0.01 * jax.random.normal(jax.random.key(1), (n_visible, n_hidden), dtype)

    def make(act):
        @jax.jit
        def epoch(W):
            def step(W, v):
                s = act(v @ W)  # positive phase, hidden
                t = act(s @ W.T)  # reconstruction, visible
                u = act(t @ W)  # negative phase, hidden
                return W + 1e-6 * (v.T @ s - t.T @ u), None

            return jax.lax.scan(step, W, V)[0]

        return lambda: epoch(W0).block_until_ready()

    return make(lambda a: a), make(jax.nn.sigmoid)


# --- profile of the real call --------------------------------------------------------------------------------

CATEGORIES = (
    "GEMMs",
    "Bernoulli draws (hashing or 16-bit split, compare; with any sigmoid XLA fused in)",
    "sigmoids",
    "hashing per epoch (16-bit uniforms' blocks, the shuffle's words)",
    "shuffle (sorts, gather)",
    "keys, optimizer update, other",
)


def instruction_categories(hlo_text: str) -> dict[str, str]:
    """Each instruction of a compiled HLO module -> one of :data:`CATEGORIES`, by the operations it fuses."""
    bodies, current = {}, None
    for line in hlo_text.splitlines():
        m = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        if m:
            current = bodies.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    out = {}
    for lines in bodies.values():
        for line in lines:
            m = re.match(r"\s*(?:ROOT )?%(\S+) = .*? ([a-z-]+)\(", line)
            if not m:
                continue
            name, op = m.groups()
            calls = re.search(r"calls=%([^,\s]+)", line)
            ops = {op} | set(
                re.findall(r" = \S+ ([a-z-]+)\(", "\n".join(bodies.get(calls.group(1), [])) if calls else "")
            )
            out[name] = _category(ops, name)
    return out


def _category(ops: set[str], name: str) -> str:
    if "dot" in ops or name.startswith("ynn_fusion"):
        return CATEGORIES[0]
    if "exponential" in ops:
        return CATEGORIES[1] if "compare" in ops else CATEGORIES[2]
    if "sort" in ops or "gather" in ops:
        return CATEGORIES[4]
    if "compare" in ops and "convert" in ops:  # a draw whose sigmoid XLA fused elsewhere
        return CATEGORIES[1]
    if {"shift-left", "xor"} <= ops and "while" not in ops:
        return CATEGORIES[3]
    return CATEGORIES[5]


def epoch_profile(fn, hlo_text: str, reps: int = 3) -> dict[str, float]:
    """Shares of XLA's operations' self time in ``reps`` calls of ``fn`` (a jitted epoch), by category.

    A trace of the real call (``jax.profiler``); a thunk's self time excludes the thunks nested in it (the bodies
    of while loops). The profiler adds a little to every thunk, so small operations weigh slightly more than in
    an untraced epoch.
    """
    import jax

    cats = instruction_categories(hlo_text)
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(reps):
                fn()
        (path,) = glob.glob(f"{d}/**/perfetto_trace.json.gz", recursive=True)
        trace = json.load(gzip.open(path))
    events = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace) if e.get("ph") == "X"]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e.get("pid"), e.get("tid")].append(e)
    total = collections.Counter()
    for es in by_thread.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, child = [], collections.Counter()
        for i, e in enumerate(es):
            while stack and es[stack[-1]]["ts"] + es[stack[-1]]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                child[stack[-1]] += e["dur"]
            stack.append(i)
        for i, e in enumerate(es):
            if e["name"] in cats:
                total[cats[e["name"]]] += e["dur"] - child[i]
    s = sum(total.values())
    return {c: total[c] / s for c in CATEGORIES if total[c]}


def _profile_note(shares: dict[str, float]) -> str:
    return "profile of the epoch (XLA self time): " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items())


# --- the rows ------------------------------------------------------------------------------------------------


def run(tiles: int = 10, n_hidden: int = 256, batch_size: int = 64, lr: float = 0.05, reps: int = 7):
    try:
        from lse_energy import rbm
    except ImportError:
        return [
            row("3 RBM", "rbm module not available", "n/a", "", ">= 0.80 of ceiling", None, "lse_energy.rbm missing")
        ], {}
    import jax
    import jax.numpy as jnp
    import optax
    from sklearn.neural_network import BernoulliRBM

    sgd = optax.sgd(lr)  # theta <- theta + lr g_CD: the update sklearn's BernoulliRBM takes

    x64 = digits(tiles)
    n_batches = x64.shape[0] // batch_size
    rows, out = [], {}
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        x = x64.astype(dtype)
        xj = jnp.asarray(x)
        p0 = rbm.init_params(x.shape[1], n_hidden, key=jax.random.key(0), scale=0.01, dtype=jnp.dtype(dtype))

        def ours(bits, impl):
            # monitor=False: sklearn's fit computes no per-epoch diagnostics either
            kw = dict(key=jax.random.key(1, impl=impl), n_epochs=1, batch_size=batch_size, optimizer=sgd, monitor=False)
            return lambda: jax.block_until_ready(rbm.fit(p0, xj, uniform_bits=bits, **kw))

        def sk():
            BernoulliRBM(n_components=n_hidden, batch_size=batch_size, learning_rate=lr, n_iter=1, random_state=0).fit(
                x
            )

        gemm, gemm_sig = _floors(n_batches, batch_size, x.shape[1], n_hidden, jnp.dtype(dtype))
        fns = {label: ours(*sampler) for label, sampler in SAMPLERS.items()}
        t = compare({**fns, "sklearn": sk, "gemm": gemm, "gemm_sig": gemm_sig}, reps=reps)
        best = min(SAMPLERS, key=lambda label: t[label])
        ratio, ceiling = t["sklearn"] / t[best], t["sklearn"] / t["gemm_sig"]
        size = f"N={x.shape[0]}, 64 visible, {n_hidden} hidden, batch {batch_size}, {name}"
        rows += [row("3 RBM", f"rbm.fit 1 CD-1 epoch, {label} ({size})", 1e3 * t[label], "ms") for label in SAMPLERS]
        rows += [
            row(
                "3 RBM",
                f"sklearn BernoulliRBM 1 epoch (PCD-1), {name}",
                1e3 * t["sklearn"],
                "ms",
                note="sklearn uses persistent chains and no shuffle; same sizes, batch and dtype",
            ),
            row(
                "3 RBM",
                f"floor: the epoch's GEMMs only / with sigmoids, {name}",
                f"{1e3 * t['gemm']:.1f} / {1e3 * t['gemm_sig']:.1f}",
                "ms",
                note=f"{n_batches} steps of 5 GEMMs (+3 sigmoids), jitted scan, no sampling, no shuffle",
            ),
            row("3 RBM", f"speed-up over sklearn ({best}), {name}", ratio, "x"),
            row("3 RBM", f"ceiling: largest attainable speed-up (sklearn / floor), {name}", ceiling, "x"),
        ]
        for label, (bits, impl) in SAMPLERS.items():
            frac = t["gemm_sig"] / t[label]  # = (sklearn / ours) / (sklearn / floor): the share of the ceiling
            target = label == best
            met = frac >= 0.8 if target else None
            note = (
                ""
                if target
                else f"{best} is faster"
                + ("; this is the stream stored runs replay" if label == "default draws" else "")
            )
            if target and not met:
                lowered = rbm._lower(
                    p0, sgd.init(p0), xj, jax.random.key(1, impl=impl), sgd, 1, batch_size, 1, False, bits or 0
                )
                shares = epoch_profile(fns[label], lowered.compile().as_text())
                out[f"profile_{name}"] = shares
                note = _profile_note(shares)
            rows.append(
                row(
                    "3 RBM",
                    f"share of the ceiling reached (floor / ours), {label}, {name}",
                    frac,
                    "",
                    ">= 0.80" if target else "",
                    met,
                    note,
                )
            )
        out.update({f"{k}_{name}": float(v) for k, v in t.items()})
    # sanity: training lowers the reconstruction error (the monitored run, float64)
    xj = jnp.asarray(x64)
    p0 = rbm.init_params(x64.shape[1], n_hidden, key=jax.random.key(0), scale=0.01)
    trace = rbm.fit(p0, xj, key=jax.random.key(1), optimizer=sgd, n_epochs=2, batch_size=batch_size).extras
    rows.append(
        row(
            "3 RBM",
            "reconstruction error after epochs 1, 2 (float64)",
            f"{float(trace.reconstruction_error[0]):.4f}, {float(trace.reconstruction_error[1]):.4f}",
            "",
        )
    )
    return rows, out
