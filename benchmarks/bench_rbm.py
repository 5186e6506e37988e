"""RBM: one CD-1 epoch of lse_energy.rbm.fit against sklearn's BernoulliRBM (same sizes and dtype).

Besides the two epochs, the benchmark times the *floor* of any CD-1 epoch on
this machine in the same run: a jitted ``lax.scan`` over the same number of
minibatches that does only the step's matrix products (the five GEMMs of one
CD-1 update at the same shapes), then the same with its three sigmoids. No
CD-1 implementation in JAX can beat that floor, so ``sklearn / floor`` is the
largest speed-up attainable here; where it is below the target, the target
cannot be met on this machine, whatever the sampler or the loop.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import compare, row


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


def _random_words(n_batches: int, batch_size: int, n_visible: int, n_hidden: int):
    """A jitted draw of one epoch's random 32-bit words with JAX's default PRNG (threefry)."""
    import jax
    import jax.numpy as jnp

    draw = jax.jit(lambda k: jax.random.bits(k, (n_batches, batch_size, n_visible + n_hidden), jnp.uint32))
    return lambda: draw(jax.random.key(2)).block_until_ready()


def run(tiles: int = 10, n_hidden: int = 256, batch_size: int = 64, lr: float = 0.05, reps: int = 5):
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

        def ours():
            # monitor=False: sklearn's fit computes no per-epoch diagnostics either
            jax.block_until_ready(
                rbm.fit(
                    p0,
                    xj,
                    key=jax.random.key(1),
                    n_epochs=1,
                    batch_size=batch_size,
                    optimizer=sgd,
                    monitor=False,
                )
            )

        def sk():
            BernoulliRBM(n_components=n_hidden, batch_size=batch_size, learning_rate=lr, n_iter=1, random_state=0).fit(
                x
            )

        gemm, gemm_sig = _floors(n_batches, batch_size, x.shape[1], n_hidden, jnp.dtype(dtype))
        rng = _random_words(n_batches, batch_size, x.shape[1], n_hidden)
        t = compare({"ours": ours, "sklearn": sk, "gemm": gemm, "gemm_sig": gemm_sig, "rng": rng}, reps=reps)
        ratio, ceiling = t["sklearn"] / t["ours"], t["sklearn"] / t["gemm_sig"]
        frac = t["gemm_sig"] / t["ours"]  # = (sklearn / ours) / (sklearn / floor): the share of the ceiling
        size = f"N={x.shape[0]}, 64 visible, {n_hidden} hidden, batch {batch_size}, {name}"
        met = frac >= 0.8
        # What the floor leaves out: CD-1 samples every visible and hidden unit, one uniform word each.
        with_words = t["gemm_sig"] + t["rng"]
        reason = (
            ""
            if met
            else (
                f"the floor ({1e3 * t['gemm_sig']:.1f} ms) has no sampling; the epoch's random words alone take "
                f"{1e3 * t['rng']:.1f} ms with JAX's threefry (kept, as the issue asks), so floor + words = "
                f"{1e3 * with_words:.1f} ms caps this share at {t['gemm_sig'] / with_words:.2f}"
            )
        )
        rows += [
            row("3 RBM", f"rbm.fit 1 CD-1 epoch ({size})", 1e3 * t["ours"], "ms"),
            row(
                "3 RBM",
                f"sklearn BernoulliRBM 1 epoch (PCD-1), {name}",
                1e3 * t["sklearn"],
                "ms",
                note="sklearn uses persistent chains; same sizes, batch and dtype",
            ),
            row(
                "3 RBM",
                f"floor: the epoch's GEMMs only / with sigmoids, {name}",
                f"{1e3 * t['gemm']:.1f} / {1e3 * t['gemm_sig']:.1f}",
                "ms",
                note=f"{n_batches} steps of 5 GEMMs (+3 sigmoids), jitted scan, no sampling",
            ),
            row(
                "3 RBM",
                f"the epoch's random words ({n_batches} x {batch_size} x {x.shape[1] + n_hidden}, threefry)",
                1e3 * t["rng"],
                "ms",
                note="jax.random.bits, uint32: one word per Bernoulli draw",
            ),
            row("3 RBM", f"speed-up over sklearn, {name}", ratio, "x"),
            row("3 RBM", f"ceiling: largest attainable speed-up (sklearn / floor), {name}", ceiling, "x"),
            row("3 RBM", f"share of the ceiling reached (floor / ours), {name}", frac, "", ">= 0.80", met, reason),
        ]
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
