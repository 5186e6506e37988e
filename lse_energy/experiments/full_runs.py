r"""Full-size runs of the chapter 09 experiments (Singh & Buckley 2023, Figs. 2 and 3).

The chapter executes a reduced run live and plots the full-size run stored
under ``book/data/`` by ``nox -s experiments``, which calls::

    python -m lse_energy.experiments.full_runs --out book/data

Each result is a JSON file holding every setting (:data:`FIG2`, :data:`FIG3`),
the commit and the library versions, the per-seed outcomes and the training
curves (median and range over seeds, averaged over blocks of steps).

**Plateau criterion.** A model has trained to a plateau when the median over
seeds of its training loss (normalised MSE on fresh batches), averaged over
the last tenth of the steps, differs from its average over the tenth before
by at most :data:`PLATEAU_TOL` (in units of :math:`\mathrm{Var}(y)`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import time

import jax
import numpy as np
import optax

from lse_energy import _validate, expanding
from lse_energy.experiments import authors_multihop
from lse_energy.experiments import structural_tasks as toy

__all__ = ["FIG2", "FIG3", "AUTHORS", "PLATEAU_TOL", "plateau", "optimizer", "fig2", "fig3", "authors", "main"]

#: Settings of the full Fig. 2 run (every model of ``structural_tasks.TOY_MODELS``).
FIG2 = dict(seeds=list(range(5)), n_steps=8000, batch=64, n_nodes=6, d=12, d_k=12, rank=6, strength=2.0,
            learning_rate=1e-2)
#: Settings of the full Fig. 3 run, trained at every dimension in ``ds`` (``rank = d // 2``, ``d_k = d``).
#: Adam's step decays from ``learning_rate`` to ``lr_final_frac`` of it on a cosine over the run
#: (:func:`optimizer`); at a constant step 4 of the 24 runs at d = 50, 75 missed the plateau criterion.
FIG3 = dict(seeds=list(range(5)), ps=[1 / 2, 1 / 5, 1 / 10, 1 / 25], ds=[10, 50, 75], n_steps=8000, batch=32,
            n=128, strength=3.0, max_steps=60, learning_rate=2e-2, lr_schedule="cosine", lr_final_frac=0.01)
#: Settings of Fig. 2 as the authors' public code defines it (``authors_multihop``), at their sizes.
AUTHORS = dict(seeds=list(range(10)), models=["standard", "multihop", "multihop_paper"], n_steps=20000, batch=200,
               lr=1e-3, weight_decay=2.0, record_every=1000, target="code")
#: Largest change of the median training loss between the last two tenths of a run.
PLATEAU_TOL = 0.02
_BLOCKS = 100  # curves are stored as this many block means


def plateau(curves) -> dict:
    r"""The plateau criterion for ``curves`` ``(..., n_seeds, n_steps)``; leading axes are kept.

    Returns:
      dict with ``last`` and ``before`` (median over seeds of the mean loss over the last
      tenth of the steps, and over the tenth before) and ``reached``
      (:math:`|\text{last} - \text{before}| \le` :data:`PLATEAU_TOL`).
    """
    c = np.asarray(curves, dtype=float)
    tenth = c.shape[-1] // 10
    if tenth < 1:
        raise ValueError(f"curves need at least 10 steps; got {c.shape[-1]}")
    last = np.median(c[..., -tenth:].mean(-1), axis=-1)
    before = np.median(c[..., -2 * tenth:-tenth].mean(-1), axis=-1)
    return dict(last=last.tolist(), before=before.tolist(),
                reached=(np.abs(last - before) <= PLATEAU_TOL).tolist())


def optimizer(settings: dict) -> optax.GradientTransformation:
    """Adam at ``settings["learning_rate"]``: constant, or with ``lr_schedule="cosine"`` decayed over
    ``n_steps`` to ``lr_final_frac`` of it (:func:`optax.cosine_decay_schedule`)."""
    schedule = settings.get("lr_schedule", "constant")
    if schedule == "constant":
        return optax.adam(settings["learning_rate"])
    if schedule == "cosine":
        return optax.adam(optax.cosine_decay_schedule(settings["learning_rate"], settings["n_steps"],
                                                      alpha=settings["lr_final_frac"]))
    raise ValueError(f"lr_schedule must be 'constant' or 'cosine'; got {schedule!r}")


def _blocks(curves) -> dict:
    """Median, min and max over seeds (axis -2) of ``_BLOCKS`` block means of the steps."""
    c = np.asarray(curves, dtype=float)
    k = min(_BLOCKS, c.shape[-1])
    n = c.shape[-1] - c.shape[-1] % k
    b = c[..., :n].reshape(*c.shape[:-1], k, n // k).mean(-1)
    return dict(step=((np.arange(k) + 0.5) * n / k).tolist(), median=np.median(b, -2).tolist(),
                min=b.min(-2).tolist(), max=b.max(-2).tolist())


def _provenance() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=pathlib.Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return dict(commit=commit, jax=jax.__version__, numpy=np.__version__, x64=bool(jax.config.jax_enable_x64))


def fig2(settings: dict = FIG2, *, progress: bool = False) -> dict:
    """Train every Fig. 2 model on every seed; per-seed test MSE, curves and the plateau test."""
    s = dict(settings)
    t0 = time.perf_counter()
    runs = toy.run_multihop_experiments(toy.TOY_MODELS, s["seeds"], optimizer=optimizer(s),
                                        n_steps=s["n_steps"], batch=s["batch"], n_nodes=s["n_nodes"], d=s["d"],
                                        d_k=s["d_k"], rank=s["rank"], strength=s["strength"], progress=progress)
    out = dict(settings=s, **_provenance(), seconds=time.perf_counter() - t0, models={})
    for m, r in runs.items():
        out["models"][m] = dict(final=np.asarray(r.final).tolist(), curve=_blocks(r.curve),
                                plateau=plateau(r.curve))
    return out


def fig3(settings: dict = FIG3, *, progress: bool = False) -> dict:
    r"""Train self and expanding attention at every ``d`` and ``p``; test MSE, window statistics and
    the operation counts measured at each ``d`` (ops of the tightest cap over self-attention's)."""
    s = dict(settings)
    _validate.count("n", s["n"], 3)
    t0 = time.perf_counter()
    out = dict(settings=s, **_provenance(), by_d={})
    n_keys = s["n"] - 1
    for d in s["ds"]:
        res = {}
        for m in ("self", "expanding"):
            run, stats = toy.run_expanding_experiment(
                m, s["seeds"], s["ps"], optimizer=optimizer(s), n_steps=s["n_steps"],
                batch=s["batch"], n=s["n"], d=d, d_k=d, rank=d // 2, strength=s["strength"],
                max_steps=s["max_steps"], progress=progress)
            res[m] = dict(final=np.asarray(run.final).tolist(), curve=_blocks(run.curve),
                          plateau=plateau(run.curve))
            if stats is not None:
                st = {k: np.asarray(v, dtype=float) for k, v in stats.items()}
                res[m]["stats"] = {k: v.tolist() for k, v in st.items()}
                ideal = d * st["max_window"] + st["reweight"] + st["window"]  # (len(ps), seeds)
                res[m]["ops_ratio"] = (ideal / expanding.self_attention_ops(n_keys, d, 1)).tolist()
        out["by_d"][str(d)] = res
    out["seconds"] = time.perf_counter() - t0
    return out


def authors(settings: dict = AUTHORS) -> dict:
    """The authors' Fig. 2 task for every model and seed: test MSE, weight on each token kind and the
    recorded training loss (every ``record_every`` steps), per seed; same tasks and data for every model."""
    s = dict(settings)
    t0 = time.perf_counter()
    out = dict(settings=s, **_provenance(), models={})
    for m in s["models"]:
        runs = authors_multihop.run_seeds(s["seeds"], model=m, n_steps=s["n_steps"], batch=s["batch"], lr=s["lr"],
                                          weight_decay=s["weight_decay"], record_every=s["record_every"],
                                          target=s["target"])
        out["models"][m] = [{k: r[k] for k in ("test_mse", "test_nmse", "var_y", "weights", "recorded_steps",
                                                "recorded_loss")} for r in runs]
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv=None) -> None:
    """Command line: ``--out DIR`` (default ``book/data``), ``--only fig2|fig3|authors``, ``--progress``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="book/data")
    parser.add_argument("--only", choices=("fig2", "fig3", "authors"))
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, fn in (("fig2", fig2), ("fig3", fig3), ("authors", authors)):
        if args.only in (None, name):
            result = fn() if name == "authors" else fn(progress=args.progress)
            (out / f"structural_{name}.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"{name}: {result['seconds']:.0f} s -> {out / f'structural_{name}.json'}")


if __name__ == "__main__":
    main()
