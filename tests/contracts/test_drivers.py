"""lse_energy.drivers, the public face of the fit drivers for a reader's own model (issue 48, point 6)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import _descent, core, drivers


def _energy(mu, batch):
    return core.energy(-0.5 * jnp.sum((batch[:, None] - mu[None]) ** 2, -1))


X = jax.random.normal(jax.random.key(0), (64, 2))
MU0 = jnp.array([[-1.0, 0.0], [1.0, 0.0]])


def test_descend_is_the_minibatch_driver_on_the_mean_energy():
    with _descent.record() as used:
        fit = drivers.descend(
            _energy, MU0, X, key=jax.random.key(1), optimizer=optax.sgd(0.1), n_epochs=3, batch_size=16
        )
    assert used == ["minibatch"]
    # the same epochs written out: each epoch's permutation, four minibatches, one SGD step each
    mu = MU0
    means = []
    for k in jax.random.split(jax.random.key(1), 3):
        perm = jax.random.permutation(k, 64)
        vals = []
        for b in range(4):
            batch = X[perm[16 * b : 16 * (b + 1)]]
            v, g = jax.value_and_grad(lambda m: _energy(m, batch) / 16)(mu)
            mu, vals = mu - 0.1 * g, vals + [v]
        means.append(np.mean(vals))
    np.testing.assert_allclose(fit.params, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fit.energies, means, rtol=1e-5)


def test_descend_compiles_once_for_an_equal_energy_and_optimizer():
    kw = dict(key=jax.random.key(1), n_epochs=2, batch_size=16)
    drivers.descend(_energy, MU0, X, optimizer=optax.adam(1e-2), **kw)
    before = _descent._minibatch_jit._cache_size()
    drivers.descend(_energy, MU0, X, optimizer=optax.adam(1e-2), **kw)  # a fresh, equal optimizer
    assert _descent._minibatch_jit._cache_size() == before
    drivers.descend(_energy, MU0, X, optimizer=optax.adam(2e-2), **kw)  # control: another rate
    assert _descent._minibatch_jit._cache_size() == before + 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(key=0), "PRNG key"),
        (dict(n_epochs=True), "n_epochs"),
        (dict(batch_size=65), "batch_size"),
        (dict(optimizer="adam"), "optimizer"),
    ],
)
def test_descend_refuses_bad_input_with_the_package_message(kwargs, match):
    kw = dict(key=jax.random.key(1), optimizer=optax.adam(1e-2), n_epochs=1, batch_size=16) | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        drivers.descend(_energy, MU0, X, **kw)


def _e_step(mu, x):
    s = -0.5 * jnp.sum((x[:, None] - mu[None]) ** 2, -1)
    r = core.weights(s)
    return -core.energy(s), (r.sum(0), r.T @ x)


def _m_step(stats, n, args):
    counts, sums = stats
    return sums / counts[:, None], ~(counts > 0)


def _init(x, k, key, n_init):
    return jax.vmap(lambda kk: x[jax.random.choice(kk, x.shape[0], (k,), replace=False)])(
        drivers.restart_keys(key, n_init)
    )


def test_em_descends_and_keeps_the_best_start():
    with _descent.record() as used:
        fit = drivers.em(_init, _e_step, _m_step, X, 2, key=jax.random.key(2), max_iter=50, tol=1e-9, n_init=3)
    assert used == ["em"]
    assert np.all(np.diff(np.asarray(fit.energies)) <= 1e-4)
    singles = [
        drivers.em(_init, _e_step, _m_step, X, 2, key=k, max_iter=50, tol=1e-9).energies[-1]
        for k in jax.random.split(jax.random.key(2), 3)
    ]
    assert float(fit.energies[-1]) <= min(float(e) for e in singles) + 1e-4


def test_em_names_a_failed_m_step():
    def bad_m_step(stats, n, args):
        counts, sums = stats
        return sums / counts[:, None], jnp.array([False, True])

    with pytest.raises(ValueError, match="component 1"):
        drivers.em(_init, _e_step, bad_m_step, X, 2, key=jax.random.key(2), max_iter=5, tol=1e-9)


@pytest.mark.parametrize("kwargs, match", [(dict(key=None), "PRNG key"), (dict(n_init=True), "n_init")])
def test_em_refuses_bad_input(kwargs, match):
    kw = dict(key=jax.random.key(2), max_iter=5, tol=1e-9) | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        drivers.em(_init, _e_step, _m_step, X, 2, **kw)
