"""RBM: one CD-1 epoch of lse_energy.rbm.fit against sklearn's BernoulliRBM (same sizes, float64)."""

from __future__ import annotations

import numpy as np

from benchmarks.common import compare, row


def digits(tiles: int = 10) -> np.ndarray:
    """Binarised 8x8 digits (pixel > 7), tiled to ``1797 * tiles`` rows (10 -> 17 970)."""
    from sklearn.datasets import load_digits

    x = (load_digits().data > 7).astype(np.float64)
    return np.tile(x, (tiles, 1))


def run(tiles: int = 10, n_hidden: int = 256, batch_size: int = 64, lr: float = 0.05, reps: int = 3):
    try:
        from lse_energy import rbm
    except ImportError:
        return [row("3 RBM", "rbm module not available", "n/a", "", ">= 5", None, "lse_energy.rbm missing")], {}
    import jax
    import jax.numpy as jnp
    from sklearn.neural_network import BernoulliRBM

    x = digits(tiles)
    xj = jnp.asarray(x)
    p0 = rbm.init_params(x.shape[1], n_hidden, key=jax.random.key(0), scale=0.01)

    def ours():
        jax.block_until_ready(rbm.fit(p0, xj, key=jax.random.key(1), n_epochs=1, batch_size=batch_size,
                                      learning_rate=lr, k=1))

    def sk():
        BernoulliRBM(n_components=n_hidden, batch_size=batch_size, learning_rate=lr, n_iter=1,
                     random_state=0).fit(x)

    t = compare({"ours": ours, "sklearn": sk}, reps=reps)
    # sanity: the epoch lowers the reconstruction error from its starting value
    p1, trace = rbm.fit(p0, xj, key=jax.random.key(1), n_epochs=2, batch_size=batch_size, learning_rate=lr, k=1)
    ratio = t["sklearn"] / t["ours"]
    size = f"N={x.shape[0]}, 64 visible, {n_hidden} hidden, batch {batch_size}, float64"
    rows = [
        row("3 RBM", f"rbm.fit 1 CD-1 epoch ({size})", 1e3 * t["ours"], "ms"),
        row("3 RBM", "sklearn BernoulliRBM 1 epoch (PCD-1)", 1e3 * t["sklearn"], "ms",
            note="sklearn uses persistent chains; same sizes and batch"),
        row("3 RBM", "speed-up over sklearn", ratio, "x", ">= 5", ratio >= 5, "" if ratio >= 5 else "one epoch is 280 small (64 x 64)(64 x 256) GEMM steps; overhead-bound"),
        row("3 RBM", "reconstruction error after epochs 1, 2",
            f"{float(trace.reconstruction_error[0]):.4f}, {float(trace.reconstruction_error[1]):.4f}", ""),
    ]
    return rows, {k: float(v) for k, v in t.items()}
