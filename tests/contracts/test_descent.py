"""The fit drivers of ``lse_energy._descent`` against loops written out by hand.

Each driver runs a least-squares problem (or a one-dimensional two-component mixture for EM),
and a plain Python loop does the same steps one by one, with the same keys: the results agree
to round-off (the driver's loop is one compiled program, the reference many small ones).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import _descent, core

jax.config.update("jax_enable_x64", True)


def _lsq(w, xb, yb):
    return 0.5 * jnp.mean((xb @ w - yb) ** 2)


def _vg(w, batch, args):
    (xb, yb), scale = batch, args
    value, g = jax.value_and_grad(_lsq)(w, xb, yb)
    return value, g * scale


def _vg_keyed(w, batch, args):
    ((xb, yb), k), scale = batch, args
    noise = jax.random.normal(k, xb.shape, xb.dtype) * 0.01
    value, g = jax.value_and_grad(_lsq)(w, xb + noise, yb)
    return value, g * scale


def _data(n=10, d=3):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(n, d)))
    return x, x @ jnp.arange(1.0, d + 1) + 0.1 * jnp.asarray(rng.normal(size=n))


def _result(opt_state, values, ends):
    return jnp.mean(values, axis=1), None, values


def _by_hand(x, y, key, lr, n_epochs, batch_size, keyed):
    w, out = jnp.zeros(x.shape[1]), []
    nb = x.shape[0] // batch_size
    for ek in jax.random.split(key, n_epochs):
        kp, kb = jax.random.split(ek) if keyed else (ek, None)
        perm = np.asarray(jax.random.permutation(kp, x.shape[0]))[: nb * batch_size]
        keys = jax.random.split(kb, nb) if keyed else [None] * nb
        values = []
        for b in range(nb):
            rows = perm[b * batch_size : (b + 1) * batch_size]
            xb = x[rows] + (jax.random.normal(keys[b], (batch_size, x.shape[1])) * 0.01 if keyed else 0)
            value, g = jax.value_and_grad(_lsq)(w, xb, y[rows])
            w = w - lr * 2.0 * g
            values.append(value)
        out.append(np.mean(values))
    return w, np.array(out)


@pytest.mark.parametrize("keyed", [False, True])
def test_minibatch_is_the_loop_written_out(keyed):
    x, y = _data()
    key = jax.random.key(1)
    r = _descent.minibatch(
        "test",
        _vg_keyed if keyed else _vg,
        jnp.zeros(3),
        (x, y),
        key=key,
        optimizer=optax.sgd(0.05),
        n_epochs=4,
        batch_size=3,
        args=jnp.asarray(2.0),
        batch_keys=keyed,
        result=_result,
    )
    w, energies = _by_hand(x, y, key, 0.05, 4, 3, keyed)
    assert type(r) is core.FitResult and r.n_iter == 4 and r.converged is None
    np.testing.assert_allclose(r.params, w, rtol=1e-12)
    np.testing.assert_allclose(r.energies, energies, rtol=1e-12)


def _full(w, k, args):
    x, y = args
    if k is not None:  # a sampled row per step
        i = jax.random.randint(k, (1,), 0, x.shape[0])
        return jax.value_and_grad(_lsq)(w, x[i], y[i])
    return jax.value_and_grad(_lsq)(w, x, y)


@pytest.mark.parametrize("sampled", [False, True])
def test_steps_is_the_loop_written_out(sampled):
    x, y = _data()
    key = jax.random.key(2) if sampled else None
    r = _descent.steps(
        "test",
        _full,
        jnp.zeros(3),
        optimizer=optax.sgd(0.1),
        n_steps=5,
        key=key,
        args=(x, y),
        result=lambda s, values: (values, None, values),
    )
    w, values = jnp.zeros(3), []
    for k in jax.random.split(key, 5) if sampled else [None] * 5:
        value, g = _full(w, k, (x, y))
        w, values = w - 0.1 * g, [*values, value]
    np.testing.assert_allclose(r.params, w, rtol=1e-12)
    np.testing.assert_allclose(r.energies, values, rtol=1e-12)
    assert r.n_iter == 5 and r.converged is None


def test_a_progress_bar_agrees_to_round_off():
    x, y = _data()
    run = functools.partial(
        _descent.minibatch, "test", _vg, jnp.zeros(3), (x, y), key=jax.random.key(1), optimizer=optax.sgd(0.05),
        n_epochs=3, batch_size=3, args=jnp.asarray(1.0), result=_result,
    )  # fmt: skip
    np.testing.assert_allclose(run(progress=True).params, run(progress=False).params, rtol=1e-12)


def test_a_diverging_run_names_its_first_bad_epoch():
    x, y = _data()
    with pytest.raises(ValueError, match="test.*first at step"):
        _descent.minibatch(
            "test", _vg, jnp.zeros(3), (x, y * 1e200), key=jax.random.key(1), optimizer=optax.sgd(10.0),
            n_epochs=6, batch_size=3, args=jnp.asarray(1.0), result=_result,
        )  # fmt: skip


# --- EM: a one-dimensional mixture of two unit-variance Gaussians with equal weights (means only) ----


def _init(x, K, key, n_init):
    keys = _descent.restart_keys(key, n_init)
    return jax.vmap(lambda k: jax.random.choice(k, x, (K,), replace=False))(keys)


def _e_step(means, x):
    logp = -0.5 * (x[:, None] - means[None]) ** 2 - 0.5 * jnp.log(2 * jnp.pi) - jnp.log(2.0)
    ll = jax.nn.logsumexp(logp, axis=1)
    r = jnp.exp(logp - ll[:, None])
    return jnp.sum(ll), (r.sum(0), r.T @ x)


def _m_step(stats, n, args):
    nk, sx = stats
    return sx / nk, nk <= 0


def _em_by_hand(x, means, max_iter, tol):
    ll, stats = _e_step(means, x)
    trace = [-float(ll)]
    for _ in range(max_iter):
        means, _ = _m_step(stats, x.shape[0], None)
        ll, stats = _e_step(means, x)
        trace.append(-float(ll))
        if abs(trace[-2] - trace[-1]) < tol * x.shape[0]:
            return means, trace, True
    return means, trace, False


def _fail(failed):
    if int(failed[0]) >= 0:
        raise ValueError("a component emptied")


@pytest.mark.parametrize("n_init", [1, 3])
def test_em_is_the_loop_written_out_and_keeps_the_best_restart(n_init):
    rng = np.random.default_rng(3)
    x = jnp.asarray(np.r_[rng.normal(-2, 1, 40), rng.normal(2, 1, 40)])
    key = jax.random.key(4)
    r = _descent.em(_init, _e_step, _m_step, x, 2, key=key, max_iter=50, tol=1e-8, n_init=n_init, on_failure=_fail)
    runs = [_em_by_hand(x, s, 50, 1e-8) for s in _init(x, 2, key, n_init)]
    means, trace, done = min(runs, key=lambda run: run[1][-1])
    np.testing.assert_allclose(r.params, means, rtol=1e-10)
    np.testing.assert_allclose(r.energies, trace, rtol=1e-12)
    assert r.n_iter == len(trace) - 1 and r.converged is done


# --- rounds: a round of two inner steps with two optimizers (as gan's players) ----------------------


def _two_player_round(carry, k, args, *, first, second):
    (w, v), (s1, s2) = carry
    x, y = args
    rows = jax.random.randint(k, (4,), 0, x.shape[0]) if k is not None else jnp.arange(4)
    loss_w, gw = jax.value_and_grad(_lsq)(w, x[rows], y[rows] - x[rows] @ v)
    w, s1 = _descent.step(first, gw, s1, w)
    loss_v, gv = jax.value_and_grad(_lsq)(v, x[rows], y[rows] - x[rows] @ w)
    v, s2 = _descent.step(second, gv, s2, v)
    return ((w, v), (s1, s2)), (loss_w, loss_v)


def _rounds_result(carry, values):
    loss_w, loss_v = values
    return carry[0], loss_w, loss_v, loss_w + loss_v


@pytest.mark.parametrize("keyed", [False, True])
def test_rounds_is_the_loop_written_out(keyed):
    x, y = _data()
    first, second = optax.sgd(0.1), optax.adam(0.05)
    params = (jnp.zeros(3), jnp.zeros(3))
    start = (params, (first.init(params[0]), second.init(params[1])))
    key = jax.random.key(5) if keyed else None
    round_ = functools.partial(_two_player_round, first=first, second=second)
    r = _descent.rounds(
        "test", round_, start, n_rounds=6, key=key, args=(x, y), result=_rounds_result, hint="lower the rates"
    )
    carry, losses = start, []
    for k in jax.random.split(key, 6) if keyed else [None] * 6:
        carry, (loss_w, _) = round_(carry, k, (x, y))
        losses.append(loss_w)
    np.testing.assert_allclose(r.params[0], carry[0][0], rtol=1e-12)
    np.testing.assert_allclose(r.params[1], carry[0][1], rtol=1e-12)
    np.testing.assert_allclose(r.energies, losses, rtol=1e-12)
    assert r.n_iter == 6 and r.converged is None


def test_a_diverging_round_is_named():
    x, y = _data()
    first = second = optax.sgd(50.0)
    params = (jnp.zeros(3), jnp.zeros(3))
    start = (params, (first.init(params[0]), second.init(params[1])))
    round_ = functools.partial(_two_player_round, first=first, second=second)
    with pytest.raises(ValueError, match="test.*first at step.*lower the rates"):
        _descent.rounds(
            "test", round_, start, n_rounds=400, args=(x, y * 1e100), result=_rounds_result, hint="lower the rates"
        )


# --- the EM stopping rules, and a restart whose energy is not finite --------------------------------
# A scalar parameter walking up by one per M-step, its energy (p - 3)^2 per point: it falls to p = 3,
# then rises. "change" stops on a small change only (never here: each step changes E by >= 1 per point);
# "decrease" stops on the first step that does not lower E by more than tol per point, the rise.


def _walk_init(x, K, key, n_init):
    return jnp.arange(n_init, dtype=x.dtype) * -1.0  # starts 0, -1, -2, ...


def _walk_e(p, x):
    return -x.shape[0] * (p - 3.0) ** 2 + jnp.where(p > 100.0, jnp.inf, 0.0), p


def _walk_m(p, n, args):
    return p + 1.0, jnp.zeros(1, bool)


@pytest.mark.parametrize("stop, n_iter", [("decrease", 4), ("change", 10)])
def test_em_stopping_rules(stop, n_iter):
    x = jnp.zeros(5)
    r = _descent.em(
        _walk_init, _walk_e, _walk_m, x, 1, key=jax.random.key(0), max_iter=10, tol=1e-3, stop=stop, on_failure=_fail
    )
    assert r.n_iter == n_iter and r.converged is (stop == "decrease")
    np.testing.assert_allclose(r.energies, 5 * (np.arange(n_iter + 1) - 3.0) ** 2)


def test_em_tol_is_per_point_of_n():
    # tol * n with n = 4 points (not the 5 rows): E = 5 (p - 3)^2 walks 45, 20, 5, 0, falling by 25, 15, 5
    x = jnp.zeros(5)
    run = functools.partial(
        _descent.em, _walk_init, _walk_e, _walk_m, x, 1, key=jax.random.key(0), max_iter=10, stop="decrease",
        on_failure=_fail,
    )  # fmt: skip
    assert run(tol=15 / 4 + 1e-9, n=4).n_iter == 2  # stops on 20 -> 5, a decrease of 15 <= tol * 4
    assert run(tol=15 / 4 - 1e-9, n=4).n_iter == 3  # control: just below, it goes on to 5 -> 0


def test_em_drops_a_restart_whose_energy_is_not_finite():
    # Three starts 0, -1, -2 over 104 steps: start 0 walks past p = 100, where E = inf; the others stop
    # at p = 98 and 99. The lowest finite final energy is start -2's (p = 98, nearer 3).
    x = jnp.zeros(5)
    r = _descent.em(
        _walk_init, _walk_e, _walk_m, x, 1, key=jax.random.key(0), max_iter=101, tol=1e-3, n_init=3, stop="change",
        on_failure=_fail,
    )  # fmt: skip
    assert np.isfinite(r.energies[-1]) and float(r.params) == 99.0
