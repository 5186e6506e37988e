"""Compile once per optimizer configuration: every trainer's first call, then a second with a fresh optimizer.

Per trainer, in this one process: the first call (it compiles), a second call with a fresh but
equal optimizer (``optax.adam(1e-3)`` again: a new object, the same configuration, so the same
program; ``tests/contracts/test_compile_once.py`` checks that it traces nothing), and a third
call with the same optimizer object. Before ``_descent.Static`` the fresh optimizer recompiled
(``vae.fit``, 5 epochs on 256 x 16 rows: 1.3-1.7 s fresh, 0.01 s same object, issue 48).
``python benchmarks/bench_compile_once.py`` prints the table; ``run.py --only compile_once`` adds it.
"""

from __future__ import annotations

import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _cases():
    """``name -> call(optimizer)``: every fit that takes an optax optimizer, at a reader's size (256 rows)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from lse_energy import adversarial, autoencoder, diffusion, embedding, gan, gru, mixture_pc, pcn, rbm, vae
    from lse_energy.experiments import diffusion_mlp

    rng = np.random.default_rng(0)
    key = jax.random.key(0)
    n, d = 256, 16
    dt = jnp.result_type(float)
    x = jnp.asarray(rng.normal(size=(n, d)), dt)
    unit = jnp.asarray(rng.random((n, d)) < 0.5, dt)
    y = jnp.asarray(np.arange(n) % 4)
    seqs = jnp.asarray(rng.normal(size=(n, 8, 4)), dt)
    counts = jnp.asarray(rng.integers(1, 20, size=(64, 64)), dt)
    ring = jnp.asarray(rng.normal(size=(n, 2)), dt)
    p = {
        "vae": vae.init_params(d, 4, 8, key=key),
        "adversarial": adversarial.init_params(d, 16, 4, key=key),
        "pcn": pcn.init_params((d, 16, 4), key=key),
        "gru": gru.init_min_params(4, 16, 4, key=key),
        "rbm": rbm.init_params(d, 8, key=key, scale=0.1),
        "autoencoder": autoencoder.init_params(d, 4, key=key),
        "embedding": embedding.init_params(64, 8, key=key),
        "gan": gan.init_params(2, 2, key=key, generator_hidden=(16,), discriminator_hidden=(16,)),
        "mixture_pc": mixture_pc.init_params(2, 4, d, key=key),
        "diffusion_mlp": diffusion_mlp.init_params(2, key=key, hidden=(32,), n_freqs=4),
    }
    p = {k: jax.tree.map(lambda a: jnp.asarray(a, dt) if jnp.issubdtype(a.dtype, jnp.floating) else a, v)
         for k, v in p.items()}  # fmt: skip
    schedule = diffusion.linear_schedule(50)
    onehot = jax.nn.one_hot(y, 4, dtype=dt)
    return {
        "vae.fit": lambda o: vae.fit(p["vae"], unit, key=key, optimizer=o, n_epochs=5, batch_size=32),
        "adversarial.fit": lambda o: adversarial.fit(
            p["adversarial"], x, y, key=key, optimizer=o, n_epochs=5, batch_size=32, trades_weight=1.0
        ),
        "pcn.fit": lambda o: pcn.fit(
            p["pcn"], x, onehot, key=key, optimizer=o, n_epochs=5, batch_size=32, n_infer_steps=10
        ),
        "gru.fit": lambda o: gru.fit(p["gru"], seqs, y, key=key, optimizer=o, n_epochs=5, batch_size=32),
        "rbm.fit": lambda o: rbm.fit(p["rbm"], unit, key=key, optimizer=o, n_epochs=5, batch_size=32),
        "autoencoder.fit": lambda o: autoencoder.fit(p["autoencoder"], x, optimizer=o, n_steps=100),
        "embedding.fit": lambda o: embedding.fit(p["embedding"], counts, optimizer=o, n_steps=100),
        "diffusion_mlp.fit": lambda o: diffusion_mlp.fit(
            p["diffusion_mlp"], ring, schedule, o, key=key, n_steps=100, batch_size=64
        ),
        "gan.fit": lambda o: gan.fit(p["gan"], ring, key=key, d_optimizer=o, g_optimizer=o, n_steps=100, batch_size=64),
        "mixture_pc.fit": lambda o: mixture_pc.fit(
            p["mixture_pc"], x[:64], jnp.zeros((64, 2), dt), optimizer=o, n_steps=2, n_infer_steps=5, n_learn_steps=5
        ),
    }  # fmt: skip


def _time(call, optimizer) -> float:
    import jax

    t = time.perf_counter()
    jax.block_until_ready(call(optimizer))
    return time.perf_counter() - t


def run():
    """Rows (first call, fresh optimizer, same object; seconds) and the raw timings."""
    import optax

    from benchmarks.common import row

    rows, raw = [], {}
    for name, call in _cases().items():
        first = _time(call, optax.adam(1e-3))
        fresh = _time(call, optax.adam(1e-3))
        same_object = optax.adam(1e-3)
        _time(call, same_object)  # compiled already: the same configuration
        same = _time(call, same_object)
        raw[name] = {"first": first, "fresh": fresh, "same": same}
        rows += [
            row("compile once", f"{name}: first call", first, "s"),
            row("compile once", f"{name}: second call, fresh optax.adam(1e-3)", fresh, "s"),
            row("compile once", f"{name}: second call, same optimizer object", same, "s"),
        ]
    return rows, raw


if __name__ == "__main__":
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from benchmarks.run import table

    rows, _ = run()
    print(table(rows))
