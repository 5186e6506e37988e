"""Tests for lse_energy.experiments.authors_multihop (the authors' own Fig. 2 task of Singh & Buckley 2023)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy.experiments import authors_multihop as am

TINY = dict(n_steps=300, batch=32, lr=1e-2, weight_decay=0.0, record_every=50, x0_high=2.0, n_test=256)


def _setup(seed=0, batch=6, **sizes):
    ks = jax.random.split(jax.random.key(seed), 3)
    task = am.make_task(3, key=ks[0])
    x, y, pos = am.sample(task, batch, key=ks[1], **sizes)
    return task, am.init_params(3, key=ks[2]), x, y, pos


def _softmax(s, axis):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_shapes_and_parameter_ranges():
    task, params, x, y, pos = _setup()
    assert task.w_y.shape == (3,) and task.a.shape == (3, 3)
    assert np.all((np.asarray(task.a) >= 0) & (np.asarray(task.a) < 1))
    assert x.shape == (6, 5, 3) and y.shape == (6,) and pos.shape == (3,)
    assert params.wq.shape == (3, 3) and params.wk.shape == (3, 3) and params.wv.shape == (1, 3)
    bound = 1 / math.sqrt(3)
    assert all(float(jnp.max(jnp.abs(w))) <= bound for w in params)
    for model in am.MODELS:
        assert am.mixing(model, params, x).shape == (6, 5, 5)
        assert am.predict(model, params, x).shape == (6,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sample_follows_the_generative_model(seed):
    task, _, x, y, pos = _setup(seed, batch=50)
    pos = np.asarray(pos)
    assert pos[-1] == 4 and len(set(pos.tolist())) == 3  # the query stays last
    x0, x1, x2 = (np.asarray(x[:, p]) for p in pos)
    w, a = np.asarray(task.w_y), np.asarray(task.a)
    np.testing.assert_allclose(y, (2 * x0 + x1 + x2) @ w, rtol=1e-10)  # x_0 counts twice, the query once
    assert np.all((x0 >= 0) & (x0 < 10))
    for prev, nxt in ((x0, x1), (x1, x2)):  # the chain noise is N(0, 1)
        assert 0.5 < np.std(nxt - prev @ a) < 1.5
    distractors = np.asarray(x[:, [i for i in range(5) if i not in pos]])
    assert abs(np.mean(distractors)) < 0.3 and 0.7 < np.std(distractors) < 1.3
    _, _, xp, yp, posp = _setup(seed, batch=50, target="paper")
    np.testing.assert_allclose(yp, (np.asarray(xp[:, posp[0]]) + np.asarray(xp[:, posp[1]])) @ w, rtol=1e-10)


def test_sampling_and_training_are_deterministic_for_a_fixed_key():
    task, _, x, y, pos = _setup(4)
    x2, y2, pos2 = am.sample(task, 6, key=jax.random.split(jax.random.key(4), 3)[1])
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and np.array_equal(pos, pos2)
    r1, r2 = am.run(3, model="multihop", **TINY), am.run(3, model="multihop", **TINY)
    assert r1["recorded_loss"] == r2["recorded_loss"] and r1["test_mse"] == r2["test_mse"]


@pytest.mark.parametrize("seed", [0, 1])
def test_hop_matrix_against_path_enumeration_in_the_authors_orientation(seed):
    # Their LongAttention: softmax over the *query* axis, (I + P + P P)/3, then transposed.
    _, params, x, _, _ = _setup(seed, batch=2)
    xn = np.asarray(x)
    s = (xn @ np.asarray(params.wq).T) @ np.swapaxes(xn @ np.asarray(params.wk).T, -1, -2) / math.sqrt(3)
    p_col = _softmax(s, axis=-2)
    q = np.swapaxes(p_col, -1, -2)  # q[a, b] = p_col[b, a], a row-stochastic matrix
    got = np.asarray(am.mixing("multihop", params, x))
    n = xn.shape[1]
    for b in range(xn.shape[0]):
        brute = np.zeros((n, n))
        for i, k in itertools.product(range(n), repeat=2):  # paths of length 0, 1 and 2 from i to k
            brute[i, k] = ((i == k) + q[b, i, k] + sum(q[b, i, j] * q[b, j, k] for j in range(n))) / 3
        np.testing.assert_allclose(got[b], brute, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, np.swapaxes((np.eye(n) + p_col + p_col @ p_col) / 3, -1, -2), atol=1e-14)
    p_row = _softmax(s, axis=-1)
    np.testing.assert_allclose(am.mixing("standard", params, x), p_row, atol=1e-14)
    np.testing.assert_allclose(am.mixing("multihop_paper", params, x), p_row + p_row @ p_row, atol=1e-14)
    np.testing.assert_allclose(am.mixing("self_plus_one_hop", params, x), (np.eye(n) + q) / 2, atol=1e-14)
    v = xn @ np.asarray(params.wv).T
    np.testing.assert_allclose(am.predict("multihop", params, x), (got @ v)[:, -1, 0], rtol=1e-12)


def test_prediction_ignores_the_order_of_the_other_tokens():
    _, params, x, _, _ = _setup(5)
    perm = jnp.asarray([2, 0, 3, 1, 4])  # the query stays last
    for model in am.MODELS:
        np.testing.assert_allclose(am.predict(model, params, x[:, perm]), am.predict(model, params, x), rtol=1e-12)


def test_self_readout_mse_is_zero_when_the_query_carries_the_target():
    task = am.make_task(3, key=jax.random.key(0))
    # chain = 1: the query is x_0 and y = 2 w'x_0, a linear function of the query
    assert am.self_readout_mse(task, key=jax.random.key(1), n=500, chain=1) < 1e-18
    assert am.self_readout_mse(task, key=jax.random.key(1), n=500) > 1.0


@pytest.mark.parametrize("model", ["standard", "multihop"])
def test_a_tiny_run_decreases_its_loss(model):
    r = am.run(0, model=model, **TINY)
    assert r["recorded_steps"] == list(range(0, 300, 50)) and len(r["recorded_loss"]) == 6
    assert r["tail_loss"] < 0.5 * r["recorded_loss"][0]
    assert r["test_mse"] < 0.5 * r["recorded_loss"][0]
    assert set(r["weights"]) == {"x_0", "x_1", "x_2", "distractors"}
    assert math.isclose(sum(r["weights"].values()), 1.0, rel_tol=1e-9)
    assert r["settings"]["model"] == model and r["settings"]["lr"] == 1e-2


def test_run_seeds_returns_one_result_per_seed():
    rs = am.run_seeds([0, 1], model="standard", n_steps=5, batch=4, record_every=2, n_test=8)
    assert [r["settings"]["seed"] for r in rs] == [0, 1] and rs[0]["recorded_steps"] == [0, 2, 4]
    assert rs[0]["test_mse"] != rs[1]["test_mse"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="two_layer"), "model must be one of"),
    (dict(target="both"), "target must be one of"),
    (dict(chain=6), "chain must be <= n_tokens"),
    (dict(n_steps=0), "n_steps must be an integer >= 1"),
    (dict(lr=-1.0), "lr must be a finite scalar > 0"),
    (dict(weight_decay=-1.0), "weight_decay must be a finite scalar >= 0"),
])
def test_run_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        am.run(0, **{**dict(n_steps=2, batch=2, n_test=2), **kwargs})


def test_sample_rejects_bad_arguments():
    task = am.make_task(3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="batch must be an integer"):
        am.sample(task, 0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="x0_high must be a finite scalar > 0"):
        am.sample(task, 2, key=jax.random.key(0), x0_high=0.0)
    with pytest.raises(ValueError, match="model must be one of"):
        am.predict("nope", am.init_params(3, key=jax.random.key(0)), jnp.zeros((1, 5, 3)))


def test_a_diverging_run_raises():
    with pytest.raises(ValueError, match="the run diverged"):
        am.run(0, model="standard", n_steps=3, batch=2, n_test=2, lr=1e300)
