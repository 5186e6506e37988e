r"""Stored, resumable, replay-checked experiments: the registry behind ``nox -s experiments``.

Every full-size result that a chapter states is one :class:`Experiment`: its
settings (JSON-able, fixed before the run), the *cells* it is made of (a seed,
or a seed and a model, or one cell of a sweep), a function that runs one cell,
and a function that replays the first steps of one cell. A module under
``lse_energy.experiments`` registers its experiments by listing them in a
module-level ``EXPERIMENTS``; :func:`registry` collects them all.

**Stored.** :func:`run` writes ``<out>/<name>.json`` holding the settings, and
for every finished cell its result, the short trace of its first steps, its wall
time, and the commit, library versions and device it ran on. The file is
rewritten (atomically) after every cell.

**Resumable.** A rerun keeps the cells already stored with the same settings and
runs only the rest; a run killed part-way loses at most the cell it was on.
Before it reuses stored cells, :func:`run` replays one of them with the current
code (:func:`replay_mismatch`): if the code has changed the results since, it
starts again from nothing rather than mix results of two programs.

**Replay-checked.** Each cell's ``trace`` is the first steps of its computation:
training losses, parameter norms, or the first cell of a sweep.
``tests/integration/test_experiments.py`` replays the stored trace of one cell of every
experiment with the current code and compares them at the experiment's
``replay_rtol``. A change that alters any result fails there and names the
experiment to rerun; a refactor that leaves results alone passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import json
import os
import pathlib
import pkgutil
import platform
import subprocess
import time
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["Experiment", "registry", "cell_key", "run", "load", "replay_mismatch", "provenance"]

_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Experiment:
    r"""One stored experiment.

    Attributes:
      name: file stem under ``book/data/`` (``<name>.json``).
      chapter: the notebook that plots it, e.g. ``"09_new_attention_designs"``.
      settings: every setting, JSON-able; the stored file must match it exactly.
      cells: ``settings -> list of dict``; each dict (JSON-able, small) names one cell.
      run_cell: ``(settings, cell, progress) -> dict`` with keys ``result``
        (JSON-able) and ``trace`` (a dict of float arrays or lists: the first
        steps of the cell's computation).
      replay: ``(settings, cell) -> trace``: recompute ``trace`` alone, in seconds.
      replay_rtol: relative tolerance of the replay check, and ``replay_atol``
        its absolute floor; ``tolerance_reason`` says where they come from.
      x64: run in float64 (``jax_enable_x64``).
    """

    name: str
    chapter: str
    settings: Mapping
    cells: Callable[[dict], list]
    run_cell: Callable[[dict, dict, bool], dict]
    replay: Callable[[dict, dict], dict]
    replay_rtol: float
    replay_atol: float
    tolerance_reason: str
    x64: bool = True


def per_seed(settings: Mapping) -> list:
    """The cells of an experiment that runs once per seed: ``[{"seed": k} for k in settings["seeds"]]``."""
    return [dict(seed=k) for k in settings["seeds"]]


def cell_key(cell: Mapping) -> str:
    """A stable name for a cell: ``"d=10,model=self"`` (keys sorted)."""
    return ",".join(f"{k}={cell[k]}" for k in sorted(cell))


def registry() -> dict[str, Experiment]:
    """Every experiment listed in an ``EXPERIMENTS`` of a module of ``lse_energy.experiments``, by name."""
    import lse_energy.experiments as pkg

    found: dict[str, Experiment] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "store":
            continue
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for exp in getattr(mod, "EXPERIMENTS", ()):
            if exp.name in found:
                raise ValueError(f"experiment {exp.name!r} is registered twice")
            found[exp.name] = exp
    return found


@contextlib.contextmanager
def _precision(x64: bool):
    """Run the block with ``jax_enable_x64 = x64`` and restore the previous setting after it."""
    import jax

    before = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", bool(x64))
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def _jsonable(obj):
    """``obj`` with arrays and NumPy scalars as lists and floats (round-trips through JSON unchanged)."""
    return json.loads(json.dumps(obj, default=lambda a: np.asarray(a).tolist()))


def provenance() -> dict:
    """The commit (``+dirty`` if the tree has changes), library versions, device and host of this run."""
    import jax

    here = pathlib.Path(__file__).parent

    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=here).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        if git("status", "--porcelain", "--untracked-files=no", "--", str(here.parent)):
            commit += "+dirty"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    versions = {}
    for mod in ("jax", "jaxlib", "numpy", "optax", "scipy", "sklearn"):
        try:
            versions[mod] = importlib.import_module(mod).__version__
        except ImportError:
            pass
    dev = jax.devices()[0]
    return dict(
        commit=commit,
        versions=versions,
        device=f"{dev.platform}: {dev.device_kind}",
        n_devices=jax.device_count(),
        cpu_count=os.cpu_count(),
        machine=platform.machine(),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        x64=bool(jax.config.jax_enable_x64),
    )


def load(name: str, data_dir) -> dict:
    """The stored file ``<data_dir>/<name>.json`` (raises ``FileNotFoundError`` naming the command to make it)."""
    path = pathlib.Path(data_dir) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `nox -s experiments -- --only {name}`")
    return json.loads(path.read_text())


def _flat(trace, prefix="") -> dict:
    """A nested dict of arrays as one level, keys joined by ``/``."""
    out = {}
    for k, v in trace.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _compare(stored, fresh, rtol: float, atol: float) -> str | None:
    """``None`` if the traces agree, else a one-line description of the first disagreement."""
    stored, fresh = _flat(stored), _flat(fresh)
    if set(stored) != set(fresh):
        return f"trace fields differ: stored {sorted(stored)}, replayed {sorted(fresh)}"
    for k in sorted(stored):
        a, b = np.asarray(stored[k], dtype=float), np.asarray(fresh[k], dtype=float)
        if a.shape != b.shape:
            return f"trace {k!r}: shape {a.shape} stored, {b.shape} replayed"
        bad = ~(np.abs(a - b) <= atol + rtol * np.abs(a))
        if bad.any():
            i = np.unravel_index(np.argmax(bad), a.shape)
            return (
                f"trace {k!r} differs at {tuple(int(j) for j in i)}: stored {a[i]!r}, replayed {b[i]!r} "
                f"({int(bad.sum())} of {a.size} entries outside rtol={rtol:g}, atol={atol:g})"
            )
    return None


def replay_mismatch(exp: Experiment, stored: dict, cell: Mapping | None = None) -> str | None:
    """Replay one stored cell (default: the first stored) with the current code.

    Returns ``None`` when the replayed trace agrees with the stored one at the
    experiment's tolerance, else a message naming the experiment and the first
    differing entry.
    """
    cells = stored["cells"]
    if not cells:
        return f"{exp.name}: no stored cell to replay"
    key = cell_key(cell) if cell is not None else next(iter(cells))
    entry = cells[key]
    with _precision(exp.x64):
        fresh = _jsonable(exp.replay(dict(stored["settings"]), dict(entry["cell"])))
    why = _compare(entry["trace"], fresh, exp.replay_rtol, exp.replay_atol)
    if why is None:
        return None
    return (
        f"{exp.name} (cell {key}): the current code no longer reproduces the stored run: {why}. "
        f"Rerun it: `nox -s experiments -- --only {exp.name}`"
    )


def _write(path: pathlib.Path, doc: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def run(
    exp: Experiment,
    out_dir,
    *,
    settings: Mapping | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every cell of ``exp`` not yet stored in ``<out_dir>/<name>.json``; returns the stored document.

    ``settings`` overrides ``exp.settings`` (for tests and pilots; a chapter
    reads only a file whose settings equal the registered ones). Stored cells
    are reused only if the stored settings are these and one of them replays.
    """
    with _precision(exp.x64):
        return _run(exp, out_dir, settings, progress, log)


def _run(exp, out_dir, settings, progress, log):
    s = _jsonable(dict(exp.settings if settings is None else settings))
    path = pathlib.Path(out_dir) / f"{exp.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [_jsonable(c) for c in exp.cells(s)]
    keys = [cell_key(c) for c in cells]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{exp.name}: two cells share a key")
    doc = dict(format=_FORMAT, name=exp.name, chapter=exp.chapter, settings=s, cells={})
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("format") != _FORMAT or old.get("settings") != s:
            log(f"{exp.name}: stored settings differ from these; starting again")
        elif old["cells"]:
            why = replay_mismatch(exp, old)
            if why is None:
                doc["cells"] = {k: v for k, v in old["cells"].items() if k in keys}
                log(f"{exp.name}: resuming, {len(doc['cells'])} of {len(keys)} cells stored")
            else:
                log(f"{why}; starting again")
    todo = [(k, c) for k, c in zip(keys, cells) if k not in doc["cells"]]
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(keys), initial=len(keys) - len(todo), desc=f"{exp.name} (cells)")
    try:
        for k, c in todo:
            t0 = time.perf_counter()
            out = exp.run_cell(s, dict(c), progress)
            seconds = time.perf_counter() - t0
            doc["cells"][k] = dict(
                cell=c,
                result=_jsonable(out["result"]),
                trace=_jsonable(out["trace"]),
                seconds=seconds,
                finished=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                **provenance(),
            )
            doc["cells"] = {kk: doc["cells"][kk] for kk in keys if kk in doc["cells"]}  # registry order
            doc["seconds"] = sum(v["seconds"] for v in doc["cells"].values())
            doc["complete"] = len(doc["cells"]) == len(keys)
            _write(path, doc)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    doc["seconds"] = sum(v["seconds"] for v in doc["cells"].values())
    doc["complete"] = len(doc["cells"]) == len(keys)
    _write(path, doc)
    return doc
