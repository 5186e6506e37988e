r"""Full-size runs of the chapter 09 experiments (Singh & Buckley 2023, Figs. 2 and 3).

The chapter executes a reduced run live and plots the full-size runs stored
under ``book/data/`` by ``nox -s experiments`` (:mod:`lse_energy.experiments.store`):
``structural_fig2`` (one cell per seed), ``structural_fig3`` (one cell per
dimension and model, every ``p`` and seed vmapped in it) and
``structural_authors`` (one cell per model and seed) and ``structural_authors_fig3`` (the authors'
Fig. 3 task and models, one cell per dimension and model). Each cell stores its
per-seed outcomes, its training curves as block means, and as its replay trace
the first :data:`REPLAY_STEPS` training losses of the full run next to the
losses and test error of a run stopped after that many steps (same schedule,
same keys). :func:`fig2_summary`, :func:`fig3_summary`, :func:`authors_summary` and
:func:`authors_fig3_summary` turn a stored file into per-model arrays.

**Plateau criterion.** A model has trained to a plateau when the median over
seeds of its training loss (normalised MSE on fresh batches), averaged over
the last tenth of the steps, differs from its average over the tenth before
by at most :data:`PLATEAU_TOL` (in units of :math:`\mathrm{Var}(y)`).
"""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lse_energy import _validate, expanding
from lse_energy.experiments import authors_multihop, store
from lse_energy.experiments import structural_tasks as toy

__all__ = [
    "FIG2",
    "FIG3",
    "FIG3_FLOOR",
    "AUTHORS",
    "AUTHORS_FIG3",
    "PLATEAU_TOL",
    "REPLAY_STEPS",
    "EXPERIMENTS",
    "plateau",
    "optimizer",
    "fig2_summary",
    "fig3_summary",
    "fig3_floor_summary",
    "handset_head",
    "authors_summary",
    "authors_fig3_summary",
]

#: Settings of the full Fig. 2 run (every model of ``structural_tasks.TOY_MODELS``).
FIG2 = dict(
    seeds=list(range(5)), n_steps=8000, batch=64, n_nodes=6, d=12, d_k=12, rank=6, strength=2.0, learning_rate=1e-2
)
#: Settings of the full Fig. 3 run, trained at every dimension in ``ds`` (``rank = d // 2``, ``d_k = d``).
#: Adam's step decays from ``learning_rate`` to ``lr_final_frac`` of it on a cosine over the run
#: (:func:`optimizer`); at a constant step 4 of the 24 runs at d = 50, 75 missed the plateau criterion.
FIG3 = dict(
    seeds=list(range(5)),
    ps=[1 / 2, 1 / 5, 1 / 10, 1 / 25],
    ds=[10, 50, 75],
    n_steps=8000,
    batch=32,
    n=128,
    strength=3.0,
    max_steps=60,
    learning_rate=2e-2,
    lr_schedule="cosine",
    lr_final_frac=0.01,
)
#: Settings of the hand-set reference for Fig. 3 (read by :func:`fig3_floor_summary`), with the task,
#: sizes and test sequences of ``FIG3``. The attention scale of the hand-set head is chosen per (d, p, seed,
#: model) from ``scales`` on a calibration batch of ``n_calib`` sequences drawn apart from the test batch.
FIG3_FLOOR = dict(
    seeds=FIG3["seeds"],
    ps=FIG3["ps"],
    ds=FIG3["ds"],
    n=FIG3["n"],
    strength=FIG3["strength"],
    max_steps=FIG3["max_steps"],
    n_test=1024,
    n_calib=512,
    scales=[0.3, 1.0, 3.0, 10.0, 30.0, 100.0],
)
#: Settings of Fig. 2 as the authors' public code defines it (``authors_multihop``), at their sizes.
AUTHORS = dict(
    seeds=list(range(10)),
    models=["standard", "multihop", "multihop_paper"],
    n_steps=20000,
    batch=200,
    lr=1e-3,
    weight_decay=2.0,
    record_every=1000,
    target="code",
)
#: Settings of Fig. 3 as the authors' public code defines it (``authors_multihop.run_fig3``, their values:
#: ``n = 50``, one sequence a step, 10000 steps, Adam 5e-4 with coupled weight decay 2, x_0 ~ U[0, 2)^d against
#: N(0, 0.1^2) noise), over 5 seeds instead of their one, at their d = 10 and 50. Fixed before the run: the
#: reference is the closed-form ridge floor of their objective (``authors_multihop.ridge_floor``; a model
#: reaches it when its median normalised test MSE is at most ``reach_margin`` above the median floor); the
#: hand-set head's scale is chosen from ``scales`` on ``n_calib`` calibration sequences; "roughly equivalent"
#: means the paired 95% interval of (expanding - self) lies inside +-``equivalence_margin`` (normalised MSE).
AUTHORS_FIG3 = dict(
    seeds=list(range(5)),
    ps=[1 / 2, 1 / 5, 1 / 10, 1 / 25],
    ds=[10, 50],
    models=list(authors_multihop.FIG3_MODELS),
    n=50,
    n_steps=10000,
    n_cont=0,
    batch=1,
    lr=5e-4,
    weight_decay=2.0,
    x0_high=2.0,
    noise=0.1,
    n_test=2048,
    alpha0=0.1,
    beta0=0.9,
    mass=0.05,
    tol=0.01,
    max_iter=100,
    scales=[0.1, 0.3, 1.0, 3.0, 10.0],
    n_calib=512,
    reach_margin=0.05,
    equivalence_margin=0.05,
)
#: Largest change of the median training loss between the last two tenths of a run.
PLATEAU_TOL = 0.02
_BLOCKS = 100  # curves are stored as this many block means
#: How many first training steps of every run in a cell the replay trace holds.
REPLAY_STEPS = 25
# Float64 throughout. The replayed prefix is the same program as the full run's first steps, compiled
# for a shorter scan, with or without the progress callback and XLA's fast-compile flags; these change
# the order of floating-point operations only. Each of the 25 Adam steps amplifies a relative
# perturbation by at most a few (measured: ~1e-13 after 25 steps, SSE4.2/AVX/native, with and without
# the flags), so 1e-9 leaves four orders of magnitude of room while any change of the method moves the
# losses at 1e-3 or more within a few steps.
_RTOL, _ATOL = 1e-9, 1e-12
_REASON = (
    "float64 round-off of a reordered but identical program, amplified over 25 optimizer steps "
    "(measured ~1e-13); result-changing edits move the trace by >= 1e-3"
)


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
    before = np.median(c[..., -2 * tenth : -tenth].mean(-1), axis=-1)
    return dict(last=last.tolist(), before=before.tolist(), reached=(np.abs(last - before) <= PLATEAU_TOL).tolist())


def optimizer(settings: dict) -> optax.GradientTransformation:
    """Adam at ``settings["learning_rate"]``: constant, or with ``lr_schedule="cosine"`` decayed over
    ``n_steps`` to ``lr_final_frac`` of it (:func:`optax.cosine_decay_schedule`).

    The same settings give the same object, so the training programs, which take the optimizer as a
    static argument, compile once per settings rather than once per call."""
    return _optimizer(json.dumps({k: settings.get(k) for k in _OPT_KEYS}, sort_keys=True))


_OPT_KEYS = ("learning_rate", "lr_schedule", "lr_final_frac", "n_steps")


@functools.lru_cache(maxsize=32)
def _optimizer(frozen: str) -> optax.GradientTransformation:
    settings = json.loads(frozen)
    schedule = settings.get("lr_schedule") or "constant"
    if schedule == "constant":
        return optax.adam(settings["learning_rate"])
    if schedule == "cosine":
        return optax.adam(
            optax.cosine_decay_schedule(settings["learning_rate"], settings["n_steps"], alpha=settings["lr_final_frac"])
        )
    raise ValueError(f"lr_schedule must be 'constant' or 'cosine'; got {schedule!r}")


def _block_means(curves) -> np.ndarray:
    """``(..., n_steps)`` -> ``(..., _BLOCKS)`` means of equal blocks of steps (a remainder is dropped)."""
    c = np.asarray(curves, dtype=float)
    k = min(_BLOCKS, c.shape[-1])
    n = c.shape[-1] - c.shape[-1] % k
    return c[..., :n].reshape(*c.shape[:-1], k, n // k).mean(-1)


def _curve(blocks, n_steps: int) -> dict:
    """Median, min and max over seeds (axis -2) of block means, with the blocks' mid steps."""
    b = np.asarray(blocks, dtype=float)
    k = b.shape[-1]
    n = n_steps - n_steps % k
    return dict(
        step=((np.arange(k) + 0.5) * n / k).tolist(),
        median=np.median(b, -2).tolist(),
        min=b.min(-2).tolist(),
        max=b.max(-2).tolist(),
    )


# --- Fig. 2: one cell per seed, every model of toy.TOY_MODELS ------------------------------------------------


def _fig2_run(s, seed, n_steps, progress=False):
    return toy.run_multihop_experiments(
        toy.TOY_MODELS,
        [seed],
        optimizer=optimizer(s),
        n_steps=n_steps,
        batch=s["batch"],
        n_nodes=s["n_nodes"],
        d=s["d"],
        d_k=s["d_k"],
        rank=s["rank"],
        strength=s["strength"],
        progress=progress,
    )


def _fig2_replay(s, cell):
    short = _fig2_run(s, cell["seed"], REPLAY_STEPS)
    return dict(
        loss={m: np.asarray(r.curve)[0] for m, r in short.items()},
        final={m: float(np.asarray(r.final)[0]) for m, r in short.items()},
    )


def _fig2_cell(s, cell, progress):
    runs = _fig2_run(s, cell["seed"], s["n_steps"], progress)
    trace = _fig2_replay(s, cell)
    trace["loss"] = {m: np.asarray(r.curve)[0, :REPLAY_STEPS] for m, r in runs.items()}  # the full run's own
    result = {
        m: dict(final=float(np.asarray(r.final)[0]), blocks=_block_means(np.asarray(r.curve)[0]))
        for m, r in runs.items()
    }
    for m in _FIG2_PARAMS:  # the trained heads the chapter reads its attention masses from
        result[m]["params"] = {k: np.asarray(v)[0] for k, v in runs[m].params._asdict().items()}
    return dict(result=result, trace=trace)


# The plateau criterion on the stored block means equals the one on the steps: a tenth of the run is
# exactly 10 of the 100 equal blocks, and a mean of block means of equal size is the mean of the steps.

#: Models of Fig. 2 whose trained parameters are stored (single heads, ``d * (2 d_k + 1)`` numbers a seed).
_FIG2_PARAMS = ("one_layer", "multihop_paper")
#: Fig. 3 stores the trained parameters of cells with ``d`` at most this (those the chapter reads).
_FIG3_PARAMS_MAX_D = 10


def fig2_summary(doc: dict) -> dict:
    """A stored ``structural_fig2`` document as ``{model: {final: (seeds,), curve, plateau}}`` (seeds in order),
    with ``params`` (arrays with a leading seed axis) for the models in ``_FIG2_PARAMS``."""
    cells = [doc["cells"][store.cell_key(dict(seed=s))]["result"] for s in doc["settings"]["seeds"]]
    out = {}
    for m in toy.TOY_MODELS:
        blocks = np.asarray([c[m]["blocks"] for c in cells])
        out[m] = dict(
            final=np.asarray([c[m]["final"] for c in cells]),
            curve=_curve(blocks, doc["settings"]["n_steps"]),
            plateau=plateau(blocks),
        )
        if m in _FIG2_PARAMS:
            out[m]["params"] = {k: np.asarray([c[m]["params"][k] for c in cells]) for k in ("wq", "wk", "wv")}
    return out


# --- Fig. 3: one cell per (d, model), every p and seed vmapped in it ------------------------------------------


def _fig3_run(s, d, model, n_steps, progress=False):
    return toy.run_expanding_experiment(
        model,
        s["seeds"],
        s["ps"],
        optimizer=optimizer(s),
        n_steps=n_steps,
        batch=s["batch"],
        n=s["n"],
        d=d,
        d_k=d,
        rank=d // 2,
        strength=s["strength"],
        max_iter=s["max_steps"],
        progress=progress,
    )


def _fig3_replay(s, cell):
    short, _ = _fig3_run(s, cell["d"], cell["model"], REPLAY_STEPS)
    return dict(loss=np.asarray(short.curve), final=np.asarray(short.final))


def _fig3_cell(s, cell, progress):
    _validate.count("n", s["n"], 3)
    d, m = cell["d"], cell["model"]
    run, stats = _fig3_run(s, d, m, s["n_steps"], progress)
    trace = _fig3_replay(s, cell)
    trace["loss"] = np.asarray(run.curve)[..., :REPLAY_STEPS]
    res = dict(final=np.asarray(run.final), blocks=_block_means(run.curve))
    if d <= _FIG3_PARAMS_MAX_D:  # (len(ps), seeds, ...) trained heads
        res["params"] = {k: np.asarray(v) for k, v in run.params._asdict().items()}
    if stats is not None:
        st = {k: np.asarray(v, dtype=float) for k, v in stats.items()}
        res["stats"] = st
        ideal = d * st["max_window"] + st["reweight"] + st["window"]  # (len(ps), seeds)
        res["ops_ratio"] = ideal / expanding.self_attention_ops(s["n"] - 1, d, 1)
    return dict(result=res, trace=trace)


def fig3_summary(doc: dict) -> dict:
    """A stored ``structural_fig3`` document as ``{d: {model: {final (ps, seeds), curve, plateau, stats,
    ops_ratio, params}}}`` with string keys ``d``, as the chapter reads it (``params`` only where
    ``d <= _FIG3_PARAMS_MAX_D``: ``{wq, wk, wv}`` lists with leading axes ``(ps, seeds)``)."""
    s = doc["settings"]
    out = {}
    for d in s["ds"]:
        out[str(d)] = {}
        for m in ("self", "expanding"):
            r = doc["cells"][store.cell_key(dict(d=d, model=m))]["result"]
            blocks = np.asarray(r["blocks"])
            out[str(d)][m] = dict(final=r["final"], curve=_curve(blocks, s["n_steps"]), plateau=plateau(blocks))
            for k in ("stats", "ops_ratio", "params"):
                if k in r:
                    out[str(d)][m][k] = r[k]
    return out


# --- Fig. 3's reference: hand-set heads inside the trained family, one cell per d -----------------------------


def handset_head(task, scale: float) -> expanding.Params:
    r"""A head of the trained family that reads the task's structure: :math:`W_Q = (\lambda / c) I`,
    :math:`W_K = W_r` (so :math:`W_Q^\top W_K = \lambda U V^\top` for :math:`W_r = c U V^\top`; ``d_k = d``)
    and :math:`w_v = w_y`. Its score for key :math:`x_j` is :math:`\lambda (U^\top x_2)^\top V^\top x_j`,
    largest in expectation at :math:`x_1`, whose value :math:`w_y^\top x_1` is the target."""
    d = task.w_r.shape[0]
    c = float(np.linalg.norm(np.asarray(task.w_r), 2))  # the largest singular value of W_r = c U V^T
    return expanding.Params(wq=(scale / c) * jnp.eye(d, dtype=task.w_r.dtype), wk=task.w_r, wv=task.w_y[None])


def _floor_eval(s, d, model, a, seed, n_seq, key_of):
    """Normalised MSE of the hand-set head at every scale on ``n_seq`` sequences drawn with ``key_of(keys)``."""
    keys = jax.random.split(jax.random.key(int(seed)), 4)  # (task, init, data, test): as in training
    task = toy.make_expanding_task(d, d // 2, key=keys[0], strength=s["strength"])
    x, y, _ = toy.sample_expanding(task, s["n"], n_seq, s["ps"][a], key=key_of(keys))
    var = float(task.w_y @ task.w_y)
    out = []
    for scale in s["scales"]:
        yhat = toy.predict_expanding_task(model, handset_head(task, scale), x, max_iter=s["max_steps"])[0]
        out.append(float(jnp.mean((yhat - y) ** 2)) / var)
    return np.asarray(out)


def _calib_key(keys):
    return jax.random.fold_in(keys[3], 1)  # apart from the test batch, which uses keys[3] itself


def _test_key(keys):
    return keys[3]  # the batch on which the trained models' final loss was measured


def _floor_replay(s, cell):
    return dict(calibration=_floor_eval(s, cell["d"], "expanding", 0, s["seeds"][0], 64, _calib_key))


def _floor_cell(s, cell, progress):
    d = cell["d"]
    res = {}
    for m in ("self", "expanding"):
        floor, scale = np.zeros((len(s["ps"]), len(s["seeds"]))), np.zeros((len(s["ps"]), len(s["seeds"])))
        for a in range(len(s["ps"])):
            for i, seed in enumerate(s["seeds"]):
                calib = _floor_eval(s, d, m, a, seed, s["n_calib"], _calib_key)
                best = int(np.argmin(calib))
                scale[a, i] = s["scales"][best]
                sub = dict(s, scales=[s["scales"][best]])
                floor[a, i] = _floor_eval(sub, d, m, a, seed, s["n_test"], _test_key)[0]
        res[m] = dict(floor=floor, scale=scale)
    return dict(result=res, trace=_floor_replay(s, cell))


def fig3_floor_summary(doc: dict) -> dict:
    """A stored ``structural_fig3_floor`` document as ``{d: {model: {floor, scale}}}`` (string keys ``d``;
    arrays ``(ps, seeds)``): the hand-set head's normalised test MSE on the trained models' test batch."""
    return {
        str(d): {
            m: {k: np.asarray(v) for k, v in r.items()}
            for m, r in doc["cells"][store.cell_key(dict(d=d))]["result"].items()
        }
        for d in doc["settings"]["ds"]
    }


# --- The authors' Fig. 2 task: one cell per (model, seed) ----------------------------------------------------


def _authors_run(s, model, seed, n_steps):
    return authors_multihop.run_seeds(
        [seed],
        model=model,
        n_steps=n_steps,
        batch=s["batch"],
        lr=s["lr"],
        weight_decay=s["weight_decay"],
        record_every=1,
        target=s["target"],
    )[0]


def _authors_replay(s, cell):
    r = _authors_run(s, cell["model"], cell["seed"], REPLAY_STEPS)
    return dict(loss=r["recorded_loss"], test_mse=r["test_mse"])


def _authors_cell(s, cell, progress):
    r = _authors_run(s, cell["model"], cell["seed"], s["n_steps"])
    trace = _authors_replay(s, cell)
    trace["loss"] = r["recorded_loss"][:REPLAY_STEPS]
    every = s["record_every"]
    result = {k: r[k] for k in ("test_mse", "test_nmse", "var_y", "weights")}
    result["recorded_steps"] = r["recorded_steps"][::every]
    result["recorded_loss"] = r["recorded_loss"][::every]
    return dict(result=result, trace=trace)


def authors_summary(doc: dict) -> dict:
    """A stored ``structural_authors`` document as ``{model: [per-seed result dicts]}`` (seeds in order)."""
    s = doc["settings"]
    return {
        m: [doc["cells"][store.cell_key(dict(model=m, seed=seed))]["result"] for seed in s["seeds"]]
        for m in s["models"]
    }


# --- The authors' Fig. 3 task: one cell per (d, model), every p and seed vmapped in it -----------------------

_AFIG3_KW = (
    "n",
    "batch",
    "lr",
    "weight_decay",
    "x0_high",
    "noise",
    "n_test",
    "alpha0",
    "beta0",
    "mass",
    "tol",
    "max_iter",
)


def _afig3_run(s, d, model, n_steps, n_cont):
    return authors_multihop.run_fig3(
        model, s["seeds"], s["ps"], d=d, n_steps=n_steps, n_cont=n_cont, **{k: s[k] for k in _AFIG3_KW}
    )


def _afig3_replay(s, cell):
    r = _afig3_run(s, cell["d"], cell["model"], REPLAY_STEPS, 0)
    return dict(loss=r["loss"])


def _afig3_reference(s, d, model):
    """Hand-set head (:func:`authors_multihop.handset_fig3`, scale chosen on a calibration batch) on the run's
    test sequences, and the closed-form ridge floor, both normalised by Var(y); arrays ``(ps, seeds)``."""
    kw = {k: s[k] for k in ("alpha0", "beta0", "mass", "tol", "max_iter")}
    shape = (len(s["ps"]), len(s["seeds"]))
    handset, scale, ridge = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for i, seed in enumerate(s["seeds"]):
        k_task, _, _, k_test = jax.random.split(jax.random.key(int(seed)), 4)  # as in run_fig3
        task = authors_multihop.make_fig3_task(d, key=k_task)
        var = float(authors_multihop.fig3_target_variance(task, s["x0_high"]))
        for a, p in enumerate(s["ps"]):
            ridge[a, i] = authors_multihop.ridge_floor(task, s["weight_decay"], s["x0_high"]) / var

            def nmse(scale_, key, size):
                x, y, _ = authors_multihop.sample_fig3(
                    task, s["n"], size, p, key=key, x0_high=s["x0_high"], noise=s["noise"]
                )
                yhat = authors_multihop.predict_fig3(model, authors_multihop.handset_fig3(task, scale_), x, **kw)[0]
                return float(jnp.mean((yhat - y) ** 2)) / var

            calib = [nmse(c, jax.random.fold_in(k_test, 1), s["n_calib"]) for c in s["scales"]]
            scale[a, i] = s["scales"][int(np.argmin(calib))]
            handset[a, i] = nmse(scale[a, i], k_test, s["n_test"])
    return handset, scale, ridge


def _afig3_cell(s, cell, progress):
    d, m = cell["d"], cell["model"]
    r = _afig3_run(s, d, m, s["n_steps"], s["n_cont"])
    trace = _afig3_replay(s, cell)
    trace["loss"] = r["loss"][..., :REPLAY_STEPS]
    var = r["var_y"]
    res = dict(var_y=var, blocks=_block_means(r["loss"] / var[..., None]))
    for suffix in ("", "_cont") if s["n_cont"] else ("",):
        res["nmse" + suffix] = r["mse" + suffix] / var
        for k in ("weight_x0", "sq_norm", "window", "iterations"):
            if k + suffix in r:
                res[k + suffix] = r[k + suffix]
    res["handset"], res["handset_scale"], res["ridge"] = _afig3_reference(s, d, m)
    return dict(result=res, trace=trace)


def authors_fig3_summary(doc: dict) -> dict:
    """A stored ``structural_authors_fig3`` document as ``{d: {model: {...}}}`` (string keys ``d``): arrays
    ``(ps, seeds)`` ``nmse``, ``nmse_cont``, ``handset``, ``ridge``, ``weight_x0`` (and ``window``,
    ``iterations`` for expanding), ``blocks (ps, seeds, 100)`` and ``curve`` (median, min, max over seeds)."""
    s = doc["settings"]
    out = {}
    for d in s["ds"]:
        out[str(d)] = {}
        for m in s["models"]:
            r = {k: np.asarray(v) for k, v in doc["cells"][store.cell_key(dict(d=d, model=m))]["result"].items()}
            r["curve"] = _curve(r["blocks"], s["n_steps"] + s["n_cont"])
            out[str(d)][m] = r
    return out


_CH = "09_new_attention_designs"
EXPERIMENTS = [
    store.Experiment("structural_fig2", _CH, FIG2, store.per_seed, _fig2_cell, _fig2_replay, _RTOL, _ATOL, _REASON),
    store.Experiment(
        "structural_fig3",
        _CH,
        FIG3,
        lambda s: [dict(d=d, model=m) for d in s["ds"] for m in ("self", "expanding")],
        _fig3_cell,
        _fig3_replay,
        _RTOL,
        _ATOL,
        _REASON,
    ),
    store.Experiment(
        "structural_fig3_floor",
        _CH,
        FIG3_FLOOR,
        lambda s: [dict(d=d) for d in s["ds"]],
        _floor_cell,
        _floor_replay,
        _RTOL,
        _ATOL,
        "float64 round-off of the same evaluation compiled with other XLA flags (no training: "
        "measured agreement ~1e-15); a change of the head or the task moves it by >= 1e-3",
    ),
    store.Experiment(
        "structural_authors",
        _CH,
        AUTHORS,
        lambda s: [dict(model=m, seed=k) for m in s["models"] for k in s["seeds"]],
        _authors_cell,
        _authors_replay,
        _RTOL,
        _ATOL,
        _REASON,
    ),
    store.Experiment(
        "structural_authors_fig3",
        _CH,
        AUTHORS_FIG3,
        lambda s: [dict(d=d, model=m) for d in s["ds"] for m in s["models"]],
        _afig3_cell,
        _afig3_replay,
        _RTOL,
        _ATOL,
        _REASON,
    ),
]
