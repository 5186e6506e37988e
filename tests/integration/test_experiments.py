"""The stored experiments (``nox -s experiments``, lse_energy.experiments.store) and the files in book/data/.

For every registered experiment: the stored file exists, is complete, was made with today's settings
at a committed tree, and one of its cells replays with today's code (the replay check). The machinery
itself is tested on a small experiment defined here: resuming after a kill gives the same file as an
uninterrupted run, and the replay check fires on a result-changing edit.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy.experiments import full_runs as fr
from lse_energy.experiments import store

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "book" / "data"
REGISTRY = store.registry()


# --- every registered experiment ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_stored_file_is_complete_and_made_with_todays_settings(name):
    exp = REGISTRY[name]
    doc = store.load(name, DATA)
    assert doc["settings"] == json.loads(json.dumps(dict(exp.settings))), f"rerun {name}: its settings changed"
    keys = [store.cell_key(c) for c in exp.cells(doc["settings"])]
    assert doc["complete"] and list(doc["cells"]) == keys, f"{name}: stored cells {list(doc['cells'])} != {keys}"
    for key, cell in doc["cells"].items():
        assert len(cell["commit"]) == 40, f"{name} {key}: made at {cell['commit']!r}, not at a clean commit"
        assert cell["seconds"] > 0 and cell["versions"]["jax"] and cell["device"]
        assert cell["x64"] == exp.x64
    assert (ROOT / "book" / f"{exp.chapter}.ipynb").exists()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_stored_run_replays_with_todays_code(name):
    """The first steps of one stored cell, recomputed now, agree with the stored ones at the
    experiment's stated round-off tolerance; a failure names the experiment to rerun."""
    exp = REGISTRY[name]
    assert exp.tolerance_reason and 0 < exp.replay_rtol <= 1e-6
    doc = store.load(name, DATA)
    why = store.replay_mismatch(exp, doc)
    assert why is None, why


def test_every_chapter_reading_book_data_reads_a_registered_experiment():
    """A chapter that opens book/data/<name>.json (other than the benchmark tables) reads a registered run."""
    names = set()
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        src = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        names |= {n for n in _data_names(src) if not n.startswith("bench_")}
    assert names <= set(REGISTRY), sorted(names - set(REGISTRY))


def _data_names(src: str) -> set:
    import re

    return set(re.findall(r'data/([A-Za-z0-9_]+)\.json', src)) | set(re.findall(r'load\(\s*"([A-Za-z0-9_]+)"', src))


# --- the machinery, on a small experiment defined here --------------------------------------------------------

_TINY = textwrap.dedent('''
    import sys, time
    import jax, jax.numpy as jnp, numpy as np, optax
    from lse_energy.experiments import store

    def fit(settings, seed, n_steps):
        """Adam on a least-squares problem drawn from the seed; the losses of every step."""
        kx, kw = jax.random.split(jax.random.key(seed))
        x = jax.random.normal(kx, (64, 5))
        y = x @ jax.random.normal(kw, (5,))
        opt = optax.adam(settings["lr"])

        def step(carry, _):
            w, s = carry
            loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
            u, s = opt.update(g, s)
            return (w + u, s), loss

        (w, _), losses = jax.lax.scan(step, (jnp.zeros(5), opt.init(jnp.zeros(5))), None, n_steps)
        return w, losses

    def replay(settings, cell):
        return dict(loss=fit(settings, cell["seed"], 5)[1])

    def run_cell(settings, cell, progress):
        w, losses = fit(settings, cell["seed"], settings["n_steps"])
        time.sleep(float(settings["sleep"]))
        return dict(result=dict(w=w, last=losses[-1]), trace=dict(loss=losses[:5]))

    TINY = store.Experiment("tiny", "none", dict(seeds=[0, 1, 2, 3], n_steps=200, lr=0.05, sleep=0.0),
                            lambda s: [dict(seed=k) for k in s["seeds"]], run_cell, replay, 1e-9, 1e-12,
                            "float64 round-off over 5 Adam steps")
''')


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    (d / "tiny_exp.py").write_text(_TINY)
    sys.path.insert(0, str(d))
    try:
        import tiny_exp
    finally:
        sys.path.remove(str(d))
    return d, tiny_exp


def _strip(doc):
    """A stored document without what differs between two runs of the same program (times, dates)."""
    return {
        k: {kk: {f: v for f, v in c.items() if f not in ("seconds", "finished")} for kk, c in doc[k].items()}
        if k == "cells"
        else doc[k]
        for k in doc
        if k != "seconds"
    }


def test_a_killed_run_resumes_to_the_same_file(tiny, tmp_path):
    d, mod = tiny
    whole = store.run(mod.TINY, tmp_path / "whole", log=lambda _: None)
    assert whole["complete"] and len(whole["cells"]) == 4
    script = (
        "import sys; sys.path.insert(0, %r); import tiny_exp; from lse_energy.experiments import store; "
        "store.run(tiny_exp.TINY, %r, settings=dict(tiny_exp.TINY.settings, sleep=%s))"
    )
    out = tmp_path / "killed"
    path = out / "tiny.json"
    # each cell sleeps 3 s after its work; kill the run once two cells are stored
    proc = subprocess.Popen([sys.executable, "-c", script % (str(d), str(out), 3.0)], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists() and len(json.loads(path.read_text())["cells"]) >= 2:
                break
            assert proc.poll() is None, "the run ended before it was killed"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    part = json.loads(path.read_text())
    assert not part["complete"] and 2 <= len(part["cells"]) < 4
    logs = []
    # resume with the settings of the whole run but for the sleep: a changed setting starts again ...
    again = store.run(mod.TINY, out, settings=dict(mod.TINY.settings, n_steps=201), log=logs.append)
    assert "starting again" in logs[-1] and again["settings"]["n_steps"] == 201
    # ... and the same settings resume: only the missing cells run, the result is the uninterrupted run's
    path.write_text(json.dumps(part))
    logs.clear()
    resumed = store.run(mod.TINY, out, settings=dict(mod.TINY.settings, sleep=3.0), log=logs.append)
    assert logs == [f"tiny: resuming, {len(part['cells'])} of 4 cells stored"]
    assert {k: v["finished"] for k, v in resumed["cells"].items() if k in part["cells"]} == {
        k: v["finished"] for k, v in part["cells"].items()
    }  # stored cells were kept, not rerun
    want, got = _strip(whole), _strip(resumed)
    want["settings"]["sleep"] = got["settings"]["sleep"]
    assert got["cells"].keys() == want["cells"].keys()
    for k in want["cells"]:
        np.testing.assert_array_equal(got["cells"][k]["result"]["w"], want["cells"][k]["result"]["w"])
        assert got["cells"][k]["trace"] == want["cells"][k]["trace"]


def test_the_replay_check_fires_on_a_result_changing_edit(tiny, tmp_path):
    _, mod = tiny
    doc = store.run(mod.TINY, tmp_path, log=lambda _: None)
    assert store.replay_mismatch(mod.TINY, doc) is None
    # a changed learning rate in the code (the stored settings still say 0.05)
    import dataclasses

    edited = dataclasses.replace(mod.TINY, replay=lambda s, c: mod.replay(dict(s, lr=0.0505), c))
    why = store.replay_mismatch(edited, doc)
    assert why is not None and "tiny (cell seed=0)" in why and "--only tiny" in why
    # a sign flip in the gradient step
    flipped = dataclasses.replace(mod.TINY, replay=lambda s, c: dict(loss=-jnp.asarray(mod.replay(s, c)["loss"])))
    assert store.replay_mismatch(flipped, doc) is not None
    # a stored trace nudged beyond the tolerance is caught, one within it is not
    for factor, caught in ((1 + 1e-7, True), (1 + 1e-11, False)):
        nudged = json.loads(json.dumps(doc))
        nudged["cells"]["seed=0"]["trace"]["loss"][3] *= factor
        assert (store.replay_mismatch(mod.TINY, nudged) is not None) == caught
    # a rerun of a changed program does not resume from the stale cells
    logs = []
    store.run(edited, tmp_path, log=logs.append)
    assert "no longer reproduces" in logs[0] and "starting again" in logs[0]


# --- ch09's settings and helpers ------------------------------------------------------------------------------


def test_plateau_criterion():
    steps = np.arange(1000)
    flat = np.broadcast_to(0.3 + 0.5 * np.exp(-steps / 50.0), (5, 1000))  # settled long before the end
    falling = np.broadcast_to(1.0 - steps / 1000.0, (5, 1000))  # still falling 0.1 per tenth
    out = fr.plateau(np.stack([flat, falling]))
    assert out["reached"] == [True, False]
    np.testing.assert_allclose(out["before"][1] - out["last"][1], 0.1, rtol=1e-12)
    with pytest.raises(ValueError, match="at least 10 steps"):
        fr.plateau(np.ones((2, 5)))
    # on 100 equal block means the criterion is the one on the steps
    rng = np.random.default_rng(0)
    c = rng.normal(size=(3, 5, 8000)).cumsum(-1) * 1e-3
    blocks = c.reshape(3, 5, 100, 80).mean(-1)
    np.testing.assert_allclose(fr.plateau(blocks)["last"], fr.plateau(c)["last"], rtol=1e-12)
    np.testing.assert_allclose(fr.plateau(blocks)["before"], fr.plateau(c)["before"], rtol=1e-12)


def test_the_fig3_optimizer_is_adam_on_a_cosine_decay():
    """Under a constant gradient Adam's step is exactly the learning rate, so the steps trace the
    schedule, checked against the cosine written out: lr (f + (1 - f)(1 + cos(pi t / T)) / 2)."""
    s = dict(fr.FIG3, n_steps=50)
    opt = fr.optimizer(s)
    assert fr.optimizer(dict(s)) is opt  # one object per settings: the training programs compile once
    params = jnp.zeros(3)
    state = opt.init(params)
    steps = []
    for _ in range(s["n_steps"] + 5):
        upd, state = opt.update(jnp.ones(3), state, params)
        steps.append(-float(upd[0]))
    t = np.minimum(np.arange(s["n_steps"] + 5), s["n_steps"])
    f = s["lr_final_frac"]
    want = s["learning_rate"] * (f + (1 - f) * 0.5 * (1 + np.cos(np.pi * t / s["n_steps"])))
    np.testing.assert_allclose(steps, want, rtol=1e-6)  # Adam's eps = 1e-8 against |g| = 1
    const = fr.optimizer(dict(s, lr_schedule="constant"))
    upd, _ = const.update(jnp.ones(3), const.init(params), params)
    np.testing.assert_allclose(-np.asarray(upd), s["learning_rate"], rtol=1e-6)
    with pytest.raises(ValueError, match="lr_schedule"):
        fr.optimizer(dict(s, lr_schedule="linear"))


def test_the_handset_fig3_head_reads_the_task_and_solves_it():
    """W_Q^T W_K = scale * U V^T for W_r = c U V^T, and at d = 50 self-attention with it predicts y to
    within 2% of Var(y); the same head with keys that ignore W_r (W_K = I) does not."""
    from lse_energy.experiments import structural_tasks as toy

    task = toy.make_expanding_task(50, 25, key=jax.random.key(0), strength=3.0)
    head = fr.handset_head(task, 10.0)
    u, sv, vt = np.linalg.svd(np.asarray(task.w_r))
    np.testing.assert_allclose(sv[:25], 3.0, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(head.wq.T @ head.wk), 10.0 * u[:, :25] @ vt[:25], atol=1e-12)
    x, y, _ = toy.sample_expanding(task, 128, 256, 0.5, key=jax.random.key(1))
    var = float(task.w_y @ task.w_y)

    def nmse(h):
        return float(jnp.mean((toy.predict_expanding_task("self", h, x)[0] - y) ** 2)) / var

    assert nmse(head) < 0.02
    assert nmse(head._replace(wk=jnp.eye(50))) > 0.5
