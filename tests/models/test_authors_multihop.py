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


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model="two_layer"), "model must be one of"),
        (dict(target="both"), "target must be one of"),
        (dict(chain=6), "chain must be <= n_tokens"),
        (dict(n_steps=0), "n_steps must be an integer >= 1"),
        (dict(lr=-1.0), "lr must be a finite scalar > 0"),
        (dict(weight_decay=-1.0), "weight_decay must be a finite scalar >= 0"),
    ],
)
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


# --- the authors' Fig. 3 task and models ------------------------------------------------------------------------


def _fig3_setup(seed=0, d=4, n=12, batch=8, p=0.2):
    ks = jax.random.split(jax.random.key(seed), 3)
    task = am.make_fig3_task(d, key=ks[0])
    x, y, dist = am.sample_fig3(task, n, batch, p, key=ks[1])
    return task, am.init_params(d, key=ks[2]), x, y, dist


def _their_positions(n, p, draws, rng):
    """Distance of x_0 from the query by their index procedure: the n - 2 noise indices shuffled, a
    geometric draw g >= 1 (NumPy's), x_0 inserted after idx[g:], the query appended last."""
    out = np.empty(draws, int)
    for i in range(draws):
        idx = list(rng.permutation(n - 2))
        g = int(rng.geometric(p))
        order = idx[g:] + ["x0"] + idx[:g] + ["query"]
        out[i] = (n - 1) - order.index("x0")
    return out


@pytest.mark.parametrize("p", [0.5, 0.1, 0.04])
def test_fig3_sample_follows_their_generative_model(p):
    n, d = 50, 10
    task, _, x, y, dist = _fig3_setup(1, d=d, n=n, batch=20_000, p=p)
    x, y, dist = np.asarray(x), np.asarray(y), np.asarray(dist)
    rows = np.arange(len(y))
    x0 = x[rows, n - 1 - dist]
    w, a = np.asarray(task.w_y), np.asarray(task.a)
    np.testing.assert_allclose(y, x0 @ w, rtol=1e-12)
    assert np.all((x0 >= 0) & (x0 < 2)) and abs(x0.var() - 1 / 3) < 0.01
    assert 0.098 < np.std(x[:, -1] - x0 @ a) < 0.102  # the query: x_0 A plus N(0, 0.1^2) noise
    mask = np.ones(x.shape[:2], bool)
    mask[rows, n - 1 - dist] = False
    mask[:, -1] = False
    assert abs(np.std(x[mask]) - 0.1) < 0.001 and abs(np.mean(x[mask])) < 0.001
    # the distance distribution against a direct simulation of their shuffle (total variation)
    theirs = _their_positions(n, p, 20_000, np.random.default_rng(0))
    ours, ref = np.bincount(dist, minlength=n) / dist.size, np.bincount(theirs, minlength=n) / theirs.size
    assert dist.min() >= 2 and dist.max() <= n - 1 and 0.5 * np.abs(ours - ref).sum() < 0.03
    assert abs(float(am.fig3_target_variance(task)) - y.var()) < 0.05 * y.var()


def test_fig3_ridge_floor_against_scikit_learn():
    from sklearn.linear_model import Ridge

    task = am.make_fig3_task(6, key=jax.random.key(3))
    w = np.asarray(task.w_y)
    rng = np.random.default_rng(1)
    x0 = rng.uniform(0, 2, (200_000, 6))
    # scikit-learn minimises |y - X u|^2 + alpha |u|^2 (sums): alpha = N lambda / 2 is the mean loss + |u|^2
    u = Ridge(alpha=x0.shape[0] * 2.0 / 2, fit_intercept=False).fit(x0, x0 @ w).coef_
    fresh = rng.uniform(0, 2, (200_000, 6))
    mse = np.mean((fresh @ u - fresh @ w) ** 2)
    floor = am.ridge_floor(task, 2.0)
    assert abs(mse - floor) < 0.02 * floor and floor > 0.1
    assert am.ridge_floor(task, 0.0) < 1e-20  # no decay: the readout w itself


def test_fig3_self_attention_against_numpy():
    _, params, x, _, _ = _fig3_setup(2)
    xn = np.asarray(x)
    wq, wk, wv = (np.asarray(w) for w in params)
    s = np.einsum("bjd,bd->bj", xn @ wk.T, xn[:, -1] @ wq.T) / math.sqrt(xn.shape[-1])
    s[:, -1] = -np.inf  # their self_attend=False: the query gets no weight
    a = _softmax(s, axis=-1)
    yhat, info = am.predict_fig3("self", params, x)
    np.testing.assert_allclose(yhat, (a * (xn @ wv.T)[..., 0]).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(info["weights"], a[:, :-1], atol=1e-15)


def _their_expanding(s_row, v_row, alpha=0.1, beta=0.9, mass=0.05, tol=0.01, max_iter=100):
    """Their ExpandingAttention for one sequence, step by step in their index arithmetic: ``s_row (T,)``
    scores in token order (the query last), windows sliced from the end, prior offsets -i/k flipped."""
    t_len = s_row.size
    att = np.array(s_row, float)
    att[-1] = -np.inf
    k_old = 0.0
    for i in range(max_iter):  # noqa: B007 (the iteration count is returned)
        k = math.log(mass) / math.log(1 - alpha / (alpha + beta))
        window = int(math.ceil(k))
        part = att[-window:]
        geo = np.array([-1 / k * j for j in range(part.size)])[::-1]
        a = _softmax(part + geo, axis=-1)
        alpha, beta = alpha + 1, beta + a @ np.arange(part.size - 1, -1, -1)
        if k > t_len or k < k_old or k - k_old < tol:
            break
        k_old = k
    return a @ v_row[-window:], window, i


@pytest.mark.parametrize("seed, scale", [(0, None), (1, 0.3), (2, None), (3, 0.05), (4, 3.0)])
def test_fig3_expanding_attention_against_their_procedure(seed, scale):
    task, params, x, _, _ = _fig3_setup(seed, d=4, n=40, batch=16, p=0.1)
    if scale is not None:  # a head that finds x_0 (sharp or soft) instead of the random initial one
        params = am.handset_fig3(task, scale)
    xn = np.asarray(x)
    wq, wk, wv = (np.asarray(w) for w in params)
    s = np.einsum("bjd,bd->bj", xn @ wq.T, xn[:, -1] @ wk.T) / 2.0  # their orientation, 1/sqrt(d) = 1/2
    v = (xn @ wv.T)[..., 0]
    yhat, info = am.predict_fig3("expanding", params, x)
    for b in range(xn.shape[0]):
        ref, window, iters = _their_expanding(s[b], v[b])
        assert math.isclose(float(yhat[b]), ref, rel_tol=1e-10, abs_tol=1e-12)
        assert int(info["window"][b]) == min(window, 40) - 1 and int(info["iterations"][b]) == iters


def test_fig3_expanding_gradient_holds_the_window_and_prior_fixed():
    # Their prior offsets are rebuilt with torch.tensor (no gradient) and the window is an integer: the
    # gradient is that of the last step's softmax with kappa held at its value. Oracle: central
    # differences of that function.
    _, params, x, _, _ = _fig3_setup(4, d=3, n=10, batch=4, p=0.3)
    _, info = am.predict_fig3("expanding", params, x)
    n, d = x.shape[1], x.shape[2]
    dist = np.arange(n - 1, 0, -1)
    width = np.asarray(info["window"])
    kappa = {}
    for b in range(x.shape[0]):  # recover kappa from the window of their last step via the procedure
        xn = np.asarray(x[b])
        s = (xn @ np.asarray(params.wq).T) @ (xn[-1] @ np.asarray(params.wk).T) / math.sqrt(d)
        alpha, beta, k_old = 0.1, 0.9, 0.0
        for _ in range(100):
            k = math.log(0.05) / math.log(1 - alpha / (alpha + beta))
            lg = np.where(dist <= min(math.ceil(k), n) - 1, s[:-1] - dist / k, -np.inf)
            a = _softmax(lg, axis=-1)
            alpha, beta = alpha + 1, beta + a @ dist
            if k > n or k < k_old or k - k_old < 0.01:
                break
            k_old = k
        kappa[b] = k
        assert min(math.ceil(k), n) - 1 == width[b]

    def fixed(flat):
        wq, wk, wv = flat[: d * d].reshape(d, d), flat[d * d : 2 * d * d].reshape(d, d), flat[2 * d * d :]
        out = 0.0
        for b in range(x.shape[0]):
            xn = np.asarray(x[b])
            s = (xn[:-1] @ wq.T) @ (xn[-1] @ wk.T) / math.sqrt(d)
            lg = np.where(dist <= width[b], s - dist / kappa[b], -np.inf)
            out += _softmax(lg, axis=-1) @ (xn[:-1] @ wv)
        return out

    flat = np.concatenate([np.asarray(w).ravel() for w in params])
    h = 1e-6
    fd = np.array([(fixed(flat + h * e) - fixed(flat - h * e)) / (2 * h) for e in np.eye(flat.size)])
    g = jax.grad(lambda p: jnp.sum(am.predict_fig3("expanding", p, x)[0]))(params)
    got = np.concatenate([np.asarray(w).ravel() for w in g])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def test_fig3_handset_head_finds_x0():
    task, _, x, y, _ = _fig3_setup(5, d=10, n=50, batch=512, p=0.2)
    var = float(am.fig3_target_variance(task))
    for model in am.FIG3_MODELS:
        yhat, info = am.predict_fig3(model, am.handset_fig3(task, 1.0), x)
        assert float(jnp.mean((yhat - y) ** 2)) / var < 0.02, model
        assert float(jnp.mean(jnp.max(info["weights"], -1))) > 0.95


def test_fig3_tiny_run_trains_and_is_deterministic():
    kw = dict(d=4, n=12, n_steps=300, n_cont=100, lr=1e-2, n_test=128)
    for model in am.FIG3_MODELS:
        r = am.run_fig3(model, [0, 1], [0.5, 0.2], **kw)
        assert r["loss"].shape == (2, 2, 400) and r["mse"].shape == (2, 2)
        assert np.all(r["mse_cont"] < 0.2 * r["loss"][..., :10].mean(-1))
        assert np.all(r["weight_x0_cont"] > 0.5)
        np.testing.assert_array_equal(am.run_fig3(model, [0, 1], [0.5, 0.2], **kw)["loss"], r["loss"])
        r2 = am.run_fig3(model, [1], [0.2], **kw)  # same seed and p, vmapped alone: round-off only
        np.testing.assert_allclose(r2["loss"][0, 0], r["loss"][1, 1], rtol=1e-9)
    assert "window" in r and "window" not in am.run_fig3("self", [0], [0.5], d=4, n=12, n_steps=2, n_test=4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model="two_layer"), "model must be one of"),
        (dict(ps=[1.0]), "ps must be a non-empty"),
        (dict(n=2), "n must be an integer >= 3"),
        (dict(n_cont=-1), "n_cont must be an integer >= 0"),
        (dict(mass=1.5), "mass"),
    ],
)
def test_run_fig3_rejects_bad_arguments(kwargs, match):
    args = {**dict(model="self", seeds=[0], ps=[0.5], d=3, n=6, n_steps=2, n_test=2), **kwargs}
    with pytest.raises(ValueError, match=match):
        am.run_fig3(args.pop("model"), args.pop("seeds"), args.pop("ps"), **args)
