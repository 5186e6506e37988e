"""The full-size experiment runner (``nox -s experiments``) and the results it stored in book/data/."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy.experiments import full_runs as fr
from lse_energy.experiments import structural_tasks as toy

jax.config.update("jax_enable_x64", True)

DATA = pathlib.Path(__file__).resolve().parents[1] / "book" / "data"


def test_plateau_criterion():
    steps = np.arange(1000)
    flat = np.broadcast_to(0.3 + 0.5 * np.exp(-steps / 50.0), (5, 1000))  # settled long before the end
    falling = np.broadcast_to(1.0 - steps / 1000.0, (5, 1000))  # still falling 0.1 per tenth
    out = fr.plateau(np.stack([flat, falling]))
    assert out["reached"] == [True, False]
    np.testing.assert_allclose(out["before"][1] - out["last"][1], 0.1, rtol=1e-12)
    with pytest.raises(ValueError, match="at least 10 steps"):
        fr.plateau(np.ones((2, 5)))


def test_the_fig3_optimizer_is_adam_on_a_cosine_decay():
    """Under a constant gradient Adam's step is exactly the learning rate, so the steps trace the
    schedule, checked against the cosine written out: lr (f + (1 - f)(1 + cos(pi t / T)) / 2)."""
    s = dict(fr.FIG3, n_steps=50)
    opt = fr.optimizer(s)
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


def test_a_small_fig2_run_has_every_model_and_setting():
    settings = dict(fr.FIG2, seeds=[0], n_steps=20)
    out = fr.fig2(settings)
    assert out["settings"] == settings and set(out["models"]) == set(toy.TOY_MODELS)
    for m in toy.TOY_MODELS:
        assert len(out["models"][m]["final"]) == 1 and np.isfinite(out["models"][m]["final"]).all()
    json.dumps(out)  # storable as it is


@pytest.mark.parametrize("name, settings", [("fig2", fr.FIG2), ("fig3", fr.FIG3), ("authors", fr.AUTHORS)])
def test_stored_results_match_the_current_settings(name, settings):
    """The chapter plots book/data/structural_<name>.json: it must come from today's settings."""
    stored = json.loads((DATA / f"structural_{name}.json").read_text())
    assert stored["settings"] == json.loads(json.dumps(settings))
    assert len(stored["commit"]) == 40 and stored["x64"]
