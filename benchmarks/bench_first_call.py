"""The first call of every public fit in a new process: without a compilation cache, then with a warm one.

A reader's first ``fit`` in a new kernel pays for compiling its programs; with
``lse_energy.compile_cache`` on, a second process loads them from disk instead. Each row here
is measured in fresh interpreters, one after another:

- ``cold``: an empty cache directory (the process compiles everything and writes the cache);
- ``warm``: a new process on the directory the cold one filled;
- where scikit-learn has a peer on the same data (GaussianMixture on iris, BernoulliRBM on the
  binarised digits, PCA beside the linear autoencoder on the digits), its first ``fit`` in a new
  process, timed the same way.

Only the call is timed (imports, data loading and the random key are outside), until its result
is ready. ``python benchmarks/bench_first_call.py`` prints the table; ``run.py --only first_call``
adds it to the benchmark table. A child process runs ``--case NAME``.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _data():
    import numpy as np
    from sklearn.datasets import load_digits, load_iris

    iris = load_iris().data
    iris = (iris - iris.mean(0)) / iris.std(0)
    digits, labels = load_digits(return_X_y=True)
    digits = digits / 16.0
    return np.asarray(iris), np.asarray(digits), np.asarray(labels)


def _ours(name: str):
    """A thunk for the public fit ``name`` on real data (the registry's fits, at a reader's size)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from lse_energy import (
        adversarial,
        autoencoder,
        diffusion,
        embedding,
        gan,
        gmm,
        gru,
        mixture_pc,
        pcn,
        rbm,
        sharding,
        slds,
        slot_attention,
        vae,
    )
    from lse_energy.experiments import diffusion_mlp

    iris, digits, labels = _data()
    x_iris = jnp.asarray(iris)
    x_dig = jnp.asarray(digits[:512])
    y_dig = jnp.asarray(labels[:512])
    binary = jnp.asarray((digits[:512] > 0.5).astype(np.float64))
    key = jax.random.key(0)
    adam = optax.adam(1e-3)
    rng = np.random.default_rng(0)
    traj = jnp.asarray(np.cumsum(rng.normal(size=(200, 2)), axis=0) * 0.3)
    ring = jnp.asarray(np.c_[np.cos(t := rng.uniform(0, 2 * np.pi, 512)), np.sin(t)] + 0.05 * rng.normal(size=(512, 2)))
    shift = jnp.mean(x_iris, axis=0)
    cases = {
        "gmm.fit": lambda: gmm.fit(x_iris, 3, key=key),
        "gmm.em": lambda: gmm.em(
            gmm.init_params(x_iris, 3, key=key),
            gmm.sufficient_statistics,
            (x_iris, shift),
            n=x_iris.shape[0],
            shift=shift,
        ),
        "sharding.sharded_fit": lambda: sharding.sharded_fit(x_iris, 3, sharding.data_mesh(1), key=key),
        "slds.fit": lambda: slds.fit(traj, 2, key=key),
        "mixture_pc.fit": lambda: mixture_pc.fit(
            mixture_pc.init_params(2, 8, 4, key=key),
            x_iris,
            jnp.zeros((2, 2)),
            optimizer=adam,
            n_steps=50,
            n_infer_steps=10,
            n_learn_steps=5,
        ),
        "slot_attention.fit": lambda: slot_attention.fit(
            slot_attention.Params(jnp.eye(4), jnp.eye(4)), x_iris, x_iris[:3], n_steps=20
        ),
        "adversarial.fit": lambda: adversarial.fit(
            adversarial.init_params(64, 32, 10, key=key),
            x_dig,
            y_dig,
            key=key,
            optimizer=adam,
            n_epochs=2,
            batch_size=64,
            trades_weight=1.0,
            epsilon=0.1,
            n_inner_steps=5,
        ),
        "rbm.fit": lambda: rbm.fit(
            rbm.init_params(64, 32, key=key, scale=0.01),
            binary,
            key=key,
            optimizer=optax.sgd(0.05),
            n_epochs=2,
            batch_size=64,
        ),
        "embedding.fit": lambda: embedding.fit(
            embedding.init_params(50, 8, key=key),
            jnp.asarray(rng.integers(0, 5, size=(50, 50)).astype(np.float64)),
            optimizer=adam,
            n_steps=100,
        ),
        "gru.fit": lambda: gru.fit(
            gru.init_params(8, 16, 10, key=key),
            x_dig.reshape(-1, 8, 8),
            y_dig,
            key=key,
            optimizer=adam,
            n_epochs=2,
            batch_size=64,
        ),
        "pcn.fit": lambda: pcn.fit(
            pcn.init_params((64, 32, 64), key=key),
            x_dig,
            x_dig,
            key=key,
            optimizer=adam,
            n_epochs=2,
            batch_size=64,
            n_infer_steps=20,
        ),
        "gan.fit": lambda: gan.fit(
            gan.init_params(2, 2, key=key), ring, key=key, d_optimizer=adam, g_optimizer=adam, n_steps=100
        ),
        "diffusion_mlp.fit": lambda: diffusion_mlp.fit(
            diffusion_mlp.init_params(2, key=key), ring, diffusion.linear_schedule(50), adam, key=key, n_steps=100
        ),
        "vae.fit": lambda: vae.fit(
            vae.init_params(64, 4, 32, key=key), x_dig, key=key, optimizer=adam, n_epochs=2, batch_size=64
        ),
        "autoencoder.fit": lambda: autoencoder.fit(
            autoencoder.init_params(64, 8, key=key), x_dig, optimizer=adam, n_steps=100
        ),
    }
    return cases[name]


def _peer(name: str):
    from sklearn.decomposition import PCA
    from sklearn.mixture import GaussianMixture
    from sklearn.neural_network import BernoulliRBM

    iris, digits, _ = _data()
    return {
        "gmm.fit": lambda: GaussianMixture(3, random_state=0).fit(iris),
        "rbm.fit": lambda: BernoulliRBM(32, n_iter=2, random_state=0).fit((digits[:512] > 0.5).astype(float)),
        "autoencoder.fit": lambda: PCA(8).fit(digits[:512]),
    }[name]


PEERS = {"gmm.fit": "GaussianMixture", "rbm.fit": "BernoulliRBM", "autoencoder.fit": "PCA"}
NAMES = (
    "gmm.fit",
    "gmm.em",
    "sharding.sharded_fit",
    "slds.fit",
    "mixture_pc.fit",
    "slot_attention.fit",
    "adversarial.fit",
    "rbm.fit",
    "embedding.fit",
    "gru.fit",
    "pcn.fit",
    "gan.fit",
    "diffusion_mlp.fit",
    "vae.fit",
    "autoencoder.fit",
)


def _child(name: str, peer: bool) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    if not peer:
        from lse_energy import compile_cache

        compile_cache.enable()  # LSE_JAX_CACHE, set by the parent
    thunk = _peer(name) if peer else _ours(name)
    t0 = time.perf_counter()
    jax.block_until_ready(thunk())
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def _spawn(name: str, env: dict, peer: bool = False) -> float:
    args = [sys.executable, __file__, "--case", name] + (["--peer"] if peer else [])
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT"))}
    out = subprocess.run(
        args, env={**base, "JAX_PLATFORMS": "cpu", "TQDM_DISABLE": "1", **env}, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(f"{name}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def run(names=NAMES):
    """Rows (section ``first_call``) and raw seconds: cold and warm first call of each fit, and its peer's."""
    from benchmarks.common import row

    rows, raw = [], {}
    for name in names:
        try:
            with tempfile.TemporaryDirectory() as d:
                cold = _spawn(name, {"LSE_JAX_CACHE": d})
                warm = _spawn(name, {"LSE_JAX_CACHE": d})
                size = sum(p.stat().st_size for p in pathlib.Path(d).rglob("*") if p.is_file())
        except RuntimeError as e:  # one broken case must not lose the others' rows
            rows.append(row("first_call", name, "FAILED", "", "", False, str(e)[:200]))
            continue
        entry = {"cold_s": cold, "warm_s": warm, "cache_bytes": size}
        note = f"cold {cold:.2f} s, warm {warm:.2f} s, cache {size / 1e6:.2f} MB"
        if name in PEERS:
            entry["peer"] = PEERS[name]
            entry["peer_s"] = _spawn(name, {}, peer=True)
            note += f"; {PEERS[name]} {entry['peer_s']:.3f} s"
        raw[name] = entry
        rows.append(row("first_call", f"{name} warm / cold", warm / cold, "x", "", None, note))
    return rows, raw


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--case"]:
        _child(argv[1], peer="--peer" in argv)
        return 0
    sys.path.insert(0, str(ROOT))
    rows, raw = run(tuple(argv) or NAMES)
    for r in rows:
        if r["value"] == "FAILED":
            print(f"{r['name']}: FAILED {r['note']}")
    print(f"{'fit':<22} {'cold s':>7} {'warm s':>7} {'warm/cold':>9} {'cache MB':>8}  peer")
    for name, e in raw.items():  # a failed case has no entry (run() printed nothing for it)
        peer = f"{e['peer']} {e['peer_s']:.3f} s" if "peer" in e else ""
        print(
            f"{name:<22} {e['cold_s']:7.2f} {e['warm_s']:7.2f} {e['warm_s'] / e['cold_s']:9.2f} "
            f"{e['cache_bytes'] / 1e6:8.2f}  {peer}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
