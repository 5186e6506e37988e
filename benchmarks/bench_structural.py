"""Expanding vs full self-attention on the geometric toy (p = 1/5), at equal loss.

Both models ("self": uniform prior over all earlier tokens; "expanding": the
geometric prior of ``expanding.attend``) are trained on short
sequences (``n_train`` tokens, a few seeds, optax Adam) with
``toy.run_expanding_experiment``. Then, for every ``n`` in ``ns``, each
trained model is evaluated on fresh sequences of ``n`` tokens (normalised
test MSE, mean over seeds) and its forward pass is timed side by side
(``common.compare``: alternating, medians).

Timed forward passes, both jitted (no host-side input validation inside the
timing):

* ``self``: ``predict_expanding_task("self", ...)`` (keys and values for all
  ``n - 1`` tokens);
* ``expanding``: ``predict_expanding_task("expanding", ..., max_window=cap)``,
  the exact truncated path with a static cap. The cap is chosen by
  ``max_window="auto"`` on a separate calibration batch, and the timed batch is
  checked to have no overflow, so the timed output equals the dense one.

The operation-count ratio uses ``ExpandingResult.ops``, which counts the
``cap`` dot products actually computed. A third timing, the public
``max_window="auto"`` call (cap search on the host and input validation
included), is reported as a row of its own.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import compare, row

P = 0.2


def run(
    ns=(256, 1024, 4096),
    batch: int = 32,
    d: int = 10,
    d_k: int = 10,
    reps: int = 15,
    *,
    n_train: int = 64,
    seeds=(0, 1, 2),
    n_steps: int = 300,
    n_test: int = 256,
    rank: int = 5,
    max_iter: int = 60,
):
    """Rows of section 4 and the raw figures per ``n``; the task is chapter 09's (d = 10, rank 5, p = 1/5)."""
    try:
        from lse_energy import expanding
        from lse_energy.experiments import structural_tasks as toy
    except ImportError:
        return [
            row(
                "4 expanding",
                "structural module not available",
                "n/a",
                "",
                ">= 3",
                None,
                "lse_energy.structural missing",
            )
        ], {}
    import jax
    import jax.numpy as jnp
    import optax

    opt = optax.adam(2e-2)
    train = dict(n_steps=n_steps, batch=32, n=n_train, d=d, d_k=d_k, rank=rank, n_test=n_test, max_iter=max_iter)
    trained = {
        m: toy.run_expanding_experiment(m, list(seeds), [P], optimizer=opt, **train)[0] for m in ("self", "expanding")
    }
    tasks = []
    for s in seeds:
        kt = jax.random.split(jax.random.key(int(s)), 4)[0]  # the task drawn by run_expanding_experiment
        tasks.append(toy.make_expanding_task(d, rank, key=kt))

    def params_of(model, i):
        return jax.tree_util.tree_map(lambda a: a[0, i], trained[model].params)

    f_self = jax.jit(lambda p, x: toy.predict_expanding_task("self", p, x)[0])
    rows, raw = [], {}
    target_n = 4096  # the target of issue 7 is stated at n = 4096; smaller runs report without a target
    for n in ns:
        # Test loss of every seed's trained model on fresh length-n sequences (exact truncated path).
        loss = {"self": [], "expanding": []}
        for i, task in enumerate(tasks):
            x, y, _ = toy.sample_expanding(task, n, n_test, P, key=jax.random.key(1000 + i))
            var = float(task.w_y @ task.w_y)
            loss["self"].append(float(jnp.mean((f_self(params_of("self", i), x) - y) ** 2)) / var)
            yh, res = toy.predict_expanding_task(
                "expanding", params_of("expanding", i), x, max_iter=max_iter, max_window="auto"
            )
            assert not bool(jnp.any(res.overflow))
            loss["expanding"].append(float(jnp.mean((yh - y) ** 2)) / var)
        loss = {m: float(np.mean(v)) for m, v in loss.items()}

        # Timing on seed 0's models; the cap comes from a calibration batch, not the timed one.
        ps, pe = params_of("self", 0), params_of("expanding", 0)
        xc, _, _ = toy.sample_expanding(tasks[0], n, batch, P, key=jax.random.key(7))
        cap = toy.predict_expanding_task("expanding", pe, xc, max_iter=max_iter, max_window="auto")[1].weights.shape[-1]
        x, _, _ = toy.sample_expanding(tasks[0], n, batch, P, key=jax.random.key(8))
        while True:
            f_exp = jax.jit(
                lambda p, xx, cap=cap: toy.predict_expanding_task("expanding", p, xx, max_iter=max_iter, max_window=cap)
            )
            _, res = f_exp(pe, x)
            if cap >= n - 1 or not bool(jnp.any(res.overflow)):
                break
            cap = min(2 * cap, n - 1)  # the calibration cap was too small for this batch: stay exact
        t = compare(
            {
                "self": lambda: f_self(ps, x).block_until_ready(),
                "expanding": lambda: f_exp(pe, x)[0].block_until_ready(),
                "auto": lambda: toy.predict_expanding_task("expanding", pe, x, max_iter=max_iter, max_window="auto")[
                    0
                ].block_until_ready(),
            },
            reps=reps,
        )
        ops_ratio = expanding.self_attention_ops(n - 1, d_k, 1) / float(jnp.mean(res.ops))
        ratio, ratio_auto = t["self"] / t["expanding"], t["self"] / t["auto"]
        raw[n] = {
            "t_self": t["self"],
            "t_expanding": t["expanding"],
            "t_auto": t["auto"],
            "cap": cap,
            "ops_ratio": ops_ratio,
            "loss_self": loss["self"],
            "loss_expanding": loss["expanding"],
            "mean_window": float(jnp.mean(res.window)),
            "max_window": int(jnp.max(res.max_window)),
        }
        is_target = n == target_n
        equal = loss["expanding"] <= loss["self"]
        met = (ratio >= 3 and equal) if is_target else None
        note = (
            f"jitted forwards, batch {batch}; static cap {cap} (max window {raw[n]['max_window']}), "
            f"no overflow: output = dense path"
        )
        if is_target and not met:
            note += (
                "; target missed: "
                + ("speed-up < 3" if ratio < 3 else "")
                + ("" if equal else " expanding loss > self loss")
            )
        rows.append(
            row(
                "4 expanding",
                f"n={n}: wall-clock speed-up of expanding over full",
                ratio,
                "x",
                ">= 3 at equal loss" if is_target else "",
                met,
                note,
            )
        )
        rows.append(
            row(
                "4 expanding",
                f"n={n}: speed-up with max_window='auto' (public call)",
                ratio_auto,
                "x",
                note="cap search on the host and input validation included",
            )
        )
        rows.append(
            row(
                "4 expanding",
                f"n={n}: operation-count ratio full/expanding",
                ops_ratio,
                "x",
                note=f"ops count the {cap} dot products computed; mean window "
                f"{raw[n]['mean_window']:.1f} of {n - 1} keys",
            )
        )
        rows.append(
            row(
                "4 expanding",
                f"n={n}: test MSE/Var(y), self | expanding",
                f"{loss['self']:.3f} | {loss['expanding']:.3f}",
                "",
                "expanding <= self" if is_target else "",
                equal if is_target else None,
                f"trained at n={n_train}, p={P}, {len(seeds)} seeds x {n_steps} steps; mean over seeds",
            )
        )
    return rows, raw
