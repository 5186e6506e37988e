"""Tests for lse_energy.adversarial: gradients (jax.grad, finite differences, a NumPy oracle),
attacks (ball, box, sign direction), the monotone inner maximisation, training."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree
from scipy.special import log_softmax, softmax
from sklearn.datasets import load_digits

from lse_energy import adversarial as adv
from lse_energy import core
from lse_energy.testing import assert_gradient
from tests.support import SEEDS

D, H, K, N = 7, 5, 4, 6
BOX = (0.0, 1.0)


def random_params(seed, k=K, scale=1.5):
    ks = jax.random.split(jax.random.key(seed), 3)
    p = adv.init_params(D, H, k, key=ks[0], scale=scale)
    return p._replace(b1=0.3 * jax.random.normal(ks[1], (H,)), b2=0.3 * jax.random.normal(ks[2], (k,)))


def random_data(seed, k=K):
    rng = np.random.default_rng(100 + seed)
    x = jnp.asarray(rng.uniform(0.05, 0.95, (N, D)))
    t = jnp.asarray(rng.choice([-1, 1], N) if k == 1 else rng.integers(0, k, N))
    return x, t


def numpy_logits(p, x):
    W1, b1, W2, b2 = (np.asarray(a) for a in p)
    return np.tanh(np.asarray(x) @ W1 + b1) @ W2 + b2


# --- loss and its gradients ---------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_loss_is_cross_entropy(seed):
    p, (x, t) = random_params(seed), random_data(seed)
    z = numpy_logits(p, x)
    expected = -log_softmax(z, axis=1)[np.arange(N), np.asarray(t)]
    np.testing.assert_allclose(adv.example_losses(p, x, t), expected, rtol=1e-12)
    np.testing.assert_allclose(adv.loss(p, x, t), expected.mean(), rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_input_gradient_eq4_form(seed):
    """sum_j softmax_j grad z_j - grad z_t = jax.grad and finite differences, and a NumPy Jacobian."""
    p, (x, t) = random_params(seed), random_data(seed)
    assert_gradient(lambda y: jnp.sum(adv.example_losses(p, y, t)), lambda y: adv.grad_x(p, y, t), x, n_coords=None)
    W1, b1, W2, _ = (np.asarray(a) for a in p)
    g = adv.grad_x(p, x, t)
    for n in range(N):
        h = np.tanh(np.asarray(x[n]) @ W1 + b1)
        jac = (W1 * (1 - h**2)) @ W2  # (D, K): column j is grad_x z_j
        w = softmax(numpy_logits(p, x[n : n + 1])[0])
        np.testing.assert_allclose(g[n], jac @ w - jac[:, int(t[n])], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_loss_params(seed):
    p, (x, t) = random_params(seed), random_data(seed)
    assert_gradient(lambda q: adv.loss(q, x, t), lambda q: adv.grad_params(q, x, t), p, n_coords=None)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_trades_params(seed):
    p, (x, t) = random_params(seed), random_data(seed)
    xa = x + 0.1 * jax.random.normal(jax.random.key(seed), x.shape)
    assert_gradient(
        lambda q: adv.trades_loss(q, x, t, xa, 2.5),
        lambda q: adv.grad_trades_loss_params(q, x, t, xa, 2.5),
        p,
        n_coords=None,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_binary_trades_params(seed):
    p, (x, t) = random_params(seed, k=1), random_data(seed, k=1)
    xa = x + 0.1 * jax.random.normal(jax.random.key(seed), x.shape)
    assert_gradient(
        lambda q: adv.binary_trades_loss(q, x, t, xa, 1.7),
        lambda q: adv.grad_binary_trades_loss_params(q, x, t, xa, 1.7),
        p,
        n_coords=None,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_trades_losses_against_numpy(seed):
    p, (x, t) = random_params(seed), random_data(seed)
    xa = x + 0.1
    z, za = numpy_logits(p, x), numpy_logits(p, xa)
    lp, lq = log_softmax(z, axis=1), log_softmax(za, axis=1)
    kl = np.sum(np.exp(lp) * (lp - lq), axis=1)
    ce = -lp[np.arange(N), np.asarray(t)]
    np.testing.assert_allclose(adv.kl_softmax(z, za), kl, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(adv.trades_loss(p, x, t, xa, 3.0), np.mean(ce + 3.0 * kl), rtol=1e-12)
    pb, (xb, tb) = random_params(seed, k=1), random_data(seed, k=1)
    f, fa = numpy_logits(pb, xb)[:, 0], numpy_logits(pb, xb + 0.1)[:, 0]
    expected = np.mean(np.logaddexp(0, -f * np.asarray(tb)) + 0.5 * np.logaddexp(0, -f * fa))
    np.testing.assert_allclose(adv.binary_trades_loss(pb, xb, tb, xb + 0.1, 0.5), expected, rtol=1e-12)


def test_softplus_surrogate():
    u = jnp.linspace(-40.0, 40.0, 161)
    np.testing.assert_allclose(adv.softplus_surrogate(u), np.logaddexp(0.0, -np.asarray(u)), rtol=1e-13)
    two_term = core.logsumexp(jnp.stack([jnp.zeros_like(u), -u], axis=-1))
    np.testing.assert_allclose(adv.softplus_surrogate(u), two_term, rtol=1e-15, atol=1e-15)


# --- attacks -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_fgsm_direction_and_ball(seed):
    p, (x, t) = random_params(seed), random_data(seed)
    g = jax.grad(lambda y: jnp.sum(adv.example_losses(p, y, t)))(x)
    eps = 0.1
    xa = adv.fgsm(p, x, t, eps)
    np.testing.assert_array_equal(np.sign(np.asarray(xa - x)), np.sign(np.asarray(g)))
    np.testing.assert_allclose(np.abs(xa - x), eps, rtol=1e-12)
    xt = adv.fgsm(p, x, t, eps, targeted=True)
    np.testing.assert_allclose(xt - x, -(xa - x), rtol=1e-12)
    xb = adv.fgsm(p, x, t, 0.3, box=BOX)
    assert np.all(np.abs(xb - x) <= 0.3 + 1e-15) and np.all((xb >= 0) & (xb <= 1))


@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_attacks(seed):
    p, (x, t) = random_params(seed), random_data(seed)
    g = adv.grad_x(p, x, t)
    np.testing.assert_allclose(adv.gradient_attack(p, x, t, 0.01), x + 0.01 * g, rtol=1e-13)
    np.testing.assert_allclose(adv.gradient_attack(p, x, t, 0.01, targeted=True), x - 0.01 * g, rtol=1e-13)
    xa = adv.gradient_attack(p, x, t, 10.0, epsilon=0.05, box=BOX)
    assert np.all(np.abs(xa - x) <= 0.05 + 1e-15) and np.all((xa >= 0) & (xa <= 1))
    # a small untargeted step raises, a small targeted step lowers the loss
    small = adv.gradient_attack(p, x, t, 1e-4)
    assert np.all(adv.example_losses(p, small, t) > adv.example_losses(p, x, t))


@pytest.mark.parametrize("seed", SEEDS)
def test_pgd_ball_and_monotone(seed):
    p, (x, t) = random_params(seed, scale=4.0), random_data(seed)
    for monotone in (False, True):
        a = adv.pgd(p, x, t, 0.2, step_size=0.15, n_steps=15, monotone=monotone, box=BOX)
        assert np.all(np.abs(a.x_adv - x) <= 0.2 + 1e-15) and np.all((a.x_adv >= 0) & (a.x_adv <= 1))
        np.testing.assert_allclose(a.losses[-1], adv.example_losses(p, a.x_adv, t), rtol=1e-12)
    assert np.all(np.diff(np.asarray(a.losses), axis=0) >= 0)


@pytest.mark.parametrize("seed", SEEDS)
def test_inner_maximize_monotone(seed):
    for k in (1, K):
        p, (x, _) = random_params(seed, k=k, scale=4.0), random_data(seed, k=k)
        a = adv.inner_maximize(p, x, 0.2, key=jax.random.key(seed), step_size=0.15, n_steps=12, box=BOX)
        assert np.all(np.diff(np.asarray(a.losses), axis=0) >= 0)
        assert np.all(np.abs(a.x_adv - x) <= 0.2 + 1e-15)
        z, za = numpy_logits(p, x), numpy_logits(p, a.x_adv)
        if k == 1:
            expected = np.logaddexp(0, -z[:, 0] * za[:, 0])
        else:
            lp, lq = log_softmax(z, axis=1), log_softmax(za, axis=1)
            expected = np.sum(np.exp(lp) * (lp - lq), axis=1)
        np.testing.assert_allclose(a.losses[-1], expected, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_minimal_perturbation_bracket(seed):
    """The returned radius misclassifies, and a slightly smaller one on the ray does not (bisection bracket)."""
    p, (x, t) = random_params(seed, scale=3.0), random_data(seed)
    m = adv.minimal_perturbation(p, x, t, eps_max=1.0, n_bisect=40)
    g = np.sign(np.asarray(adv.grad_x(p, x, t)))
    for n in range(N):
        eps = float(m.epsilon[n])
        wrong = int(np.argmax(numpy_logits(p, np.asarray(x[n]) + eps * g[n]))) != int(t[n])
        assert wrong == bool(m.fooled[n])
        if m.fooled[n] and eps > 0:
            below = np.asarray(x[n]) + (eps - 1e-9) * g[n]
            assert int(np.argmax(numpy_logits(p, below))) == int(t[n])


# --- training ----------------------------------------------------------------------


def digits(n_train=400):
    X, y = load_digits(return_X_y=True)
    return jnp.asarray(X[:n_train] / 16.0), jnp.asarray(y[:n_train])


def test_fit_standard_and_trades():
    x, t = digits()
    p0 = adv.init_params(64, 16, 10, key=jax.random.key(0))
    opt = optax.adam(1e-2)
    std = adv.fit(p0, x, t, key=jax.random.key(1), optimizer=opt, n_epochs=10, batch_size=50)
    assert std.energies.shape == (10,) and std.n_iter == 10 and std.converged is None
    assert std.extras.batch_losses.shape == (10, 8)
    np.testing.assert_allclose(std.energies, np.mean(np.asarray(std.extras.batch_losses), axis=1), rtol=1e-12)
    assert float(adv.accuracy(std.params, x, t)) > 0.9
    assert float(jnp.mean(std.energies[-1])) < float(jnp.mean(std.energies[0]))
    tr = adv.fit(
        p0,
        x,
        t,
        key=jax.random.key(1),
        optimizer=opt,
        n_epochs=10,
        batch_size=50,
        trades_weight=3.0,
        epsilon=0.1,
        n_inner_steps=3,
        box=BOX,
    )
    assert float(adv.accuracy(tr.params, x, t)) > 0.8
    again = adv.fit(
        p0,
        x,
        t,
        key=jax.random.key(1),
        optimizer=opt,
        n_epochs=10,
        batch_size=50,
        trades_weight=3.0,
        epsilon=0.1,
        n_inner_steps=3,
        box=BOX,
    )
    np.testing.assert_array_equal(ravel_pytree(again.params)[0], ravel_pytree(tr.params)[0])


def test_fit_binary():
    x, y = digits()
    t = jnp.where(y >= 5, 1, -1)
    p0 = adv.init_params(64, 16, 1, key=jax.random.key(0))
    r = adv.fit(
        p0,
        x,
        t,
        key=jax.random.key(1),
        optimizer=optax.adam(1e-2),
        n_epochs=20,
        batch_size=50,
        trades_weight=1.0,
        epsilon=0.05,
        n_inner_steps=3,
        box=BOX,
    )
    assert r.energies.dtype == jnp.float64
    assert float(adv.accuracy(r.params, x, t)) > 0.9


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_dtypes(dtype):
    p = jax.tree_util.tree_map(lambda a: a.astype(dtype), random_params(0))
    x, t = random_data(0)
    x = x.astype(dtype)
    assert adv.fgsm(p, x, t, 0.1, box=BOX).dtype == dtype
    assert adv.pgd(p, x, t, 0.1, step_size=0.05, n_steps=2).x_adv.dtype == dtype
    assert adv.minimal_perturbation(p, x, t, eps_max=0.5).epsilon.dtype == dtype
    assert adv.inner_maximize(p, x, 0.1, key=jax.random.key(0), step_size=0.05, n_steps=2).x_adv.dtype == dtype


# --- binary PGD with random restarts, and plain adversarial training (§25's first line) ---------------


@pytest.mark.parametrize("seed", SEEDS)
def test_pgd_binary_loss_and_random_start(seed):
    """PGD on a binary model ascends g(f(x')T) (recomputed in NumPy); a key starts it at a random point
    of the ball (inside the box), and different keys give different starts."""
    p, (x, t) = random_params(seed, k=1, scale=4.0), random_data(seed, k=1)
    a = adv.pgd(p, x, t, 0.2, step_size=0.05, n_steps=6, box=BOX)
    expected0 = np.logaddexp(0.0, -numpy_logits(p, x)[:, 0] * np.asarray(t))
    np.testing.assert_allclose(a.losses[0], expected0, rtol=1e-12)  # from x' = x
    expected = np.logaddexp(0.0, -numpy_logits(p, a.x_adv)[:, 0] * np.asarray(t))
    np.testing.assert_allclose(a.losses[-1], expected, rtol=1e-12)
    assert np.all(np.asarray(a.losses[-1]) >= np.asarray(a.losses[0]))  # the loss of the true class rose
    starts = []
    for r in range(2):
        b = adv.pgd(p, x, t, 0.2, step_size=0.05, n_steps=1, key=jax.random.key(r), box=BOX)
        assert np.all(np.abs(b.x_adv - x) <= 0.2 + 1e-15) and np.all((b.x_adv >= 0) & (b.x_adv <= 1))
        starts.append(np.asarray(b.losses[0]))
    assert not np.allclose(starts[0], expected0) and not np.allclose(starts[0], starts[1])
    # multi-class PGD is unchanged by the new argument's default
    pm, (xm, tm) = random_params(seed), random_data(seed)
    np.testing.assert_allclose(
        adv.pgd(pm, xm, tm, 0.2, step_size=0.05, n_steps=3).losses[0], adv.example_losses(pm, xm, tm), rtol=1e-12
    )


@pytest.mark.parametrize("k", [1, K])
def test_fit_augment_is_standard_training_at_zero_radius(k):
    """With a radius far below round-off of the loss, X' = X and plain adversarial training's loss
    (l(X) + l(X'))/2 is l(X): one SGD step equals standard training's. At a real radius the first
    minibatch's loss is at least l(X) (X' ascends the loss of the true class) and the step differs."""
    p, (x, t) = random_params(0, k=k), random_data(0, k=k)
    kw = dict(key=jax.random.key(3), optimizer=optax.sgd(0.1), n_epochs=1, batch_size=N, box=BOX)
    std = adv.fit(p, x, t, **kw)
    tiny = adv.fit(p, x, t, epsilon=1e-13, defence="augment", **kw)
    np.testing.assert_allclose(ravel_pytree(tiny.params)[0], ravel_pytree(std.params)[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tiny.energies, std.energies, rtol=1e-9)
    real = adv.fit(p, x, t, epsilon=0.2, defence="augment", **kw)
    assert float(real.extras.batch_losses[0, 0]) > float(std.extras.batch_losses[0, 0]) + 1e-3
    assert not np.allclose(ravel_pytree(real.params)[0], ravel_pytree(std.params)[0])


def test_fit_augment_binary_learns():
    x, y = digits()
    t = jnp.where(y >= 5, 1, -1)
    p0 = adv.init_params(64, 16, 1, key=jax.random.key(0))
    r = adv.fit(
        p0,
        x,
        t,
        key=jax.random.key(1),
        optimizer=optax.adam(1e-2),
        n_epochs=20,
        batch_size=50,
        epsilon=0.05,
        n_inner_steps=3,
        box=BOX,
        defence="augment",
    )
    assert float(adv.accuracy(r.params, x, t)) > 0.9
