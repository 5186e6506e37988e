"""Tests for lse_energy.gan: losses against NumPy/scikit-learn/SciPy, gradients, training, validation."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.stats import multivariate_normal, norm
from sklearn.metrics import log_loss

from lse_energy import core, gan
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, rng

SGD = optax.sgd(0.05)
ADAM = optax.adam(1e-2)


def np_forward(mlp, x):
    """The MLP in NumPy: tanh hidden layers, linear output."""
    x = np.asarray(x)
    for w, b in zip(mlp.weights[:-1], mlp.biases[:-1]):
        x = np.tanh(x @ np.asarray(w) + np.asarray(b))
    return x @ np.asarray(mlp.weights[-1]) + np.asarray(mlp.biases[-1])


def params_and_batch(seed, n=7, m=5):
    p = gan.init_params(3, 2, key=jax.random.key(seed), generator_hidden=(6, 4), discriminator_hidden=(5,))
    r = rng(seed)
    return p, jnp.asarray(r.normal(size=(n, 2))), jnp.asarray(r.normal(size=(m, 3)))


# --- losses ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_logistic_loss_is_binary_cross_entropy(seed):
    """Against scikit-learn's log_loss on D = sigma(a), and exactly at large |a|."""
    r = rng(seed)
    a = np.concatenate([[30.0, -30.0], r.normal(size=20) * 3])
    t = (r.random(22) < 0.5).astype(float)
    t[:2] = [0.0, 1.0]
    # scikit-learn clips probabilities at machine epsilon: compare on the moderate logits
    expected = log_loss(t[2:], 1 / (1 + np.exp(-a[2:])), labels=[0, 1])
    np.testing.assert_allclose(gan.logistic_loss(jnp.asarray(a[2:]), jnp.asarray(t[2:])), expected, rtol=1e-12)
    # and the saturated ones (a = +-30 with the wrong label) exactly: loss 30 each, no overflow
    np.testing.assert_allclose(gan.logistic_loss(jnp.asarray(a[:2]), jnp.asarray(t[:2])), 30.0, rtol=1e-12)
    # soft labels: -t ln s - (1 - t) ln (1 - s), with logaddexp for the logs
    ts = r.random(22)
    soft = np.mean(ts * np.logaddexp(0, -a) + (1 - ts) * np.logaddexp(0, a))
    np.testing.assert_allclose(gan.logistic_loss(jnp.asarray(a), jnp.asarray(ts)), soft, rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_logistic_loss(seed):
    r = rng(seed)
    a, t = jnp.asarray(r.normal(size=9) * 2), jnp.asarray(r.random(9))
    assert_gradient(lambda x: gan.logistic_loss(x, t), lambda x: gan.grad_logistic_loss_logits(x, t), a)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", gan.GENERATOR_LOSSES)
def test_grad_generator_loss_logits(seed, kind):
    """d/da of the generator loss as a function of the fake logits; the loss itself from the MLP path."""
    p, _, z = params_and_batch(seed)
    a = gan.logit(p, gan.generate(p, z))
    sign = 1.0 if kind == "non_saturating" else -1.0

    def loss_of_logits(x):  # written here: NS = mean -ln sigma(a), MM = mean ln(1 - sigma(a))
        return jnp.mean(jnp.logaddexp(0.0, -x)) if kind == "non_saturating" else -jnp.mean(jnp.logaddexp(0.0, x))

    np.testing.assert_allclose(gan.generator_loss(p, z, kind), loss_of_logits(a), rtol=1e-12)
    assert_gradient(loss_of_logits, lambda x: gan.grad_generator_loss_logits(x, kind), a)
    d = 1 / (1 + np.exp(-np.asarray(a)))
    expected = -(1 - d) / a.shape[0] if sign > 0 else -d / a.shape[0]
    np.testing.assert_allclose(gan.grad_generator_loss_logits(a, kind), expected, rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_losses_and_energy_against_numpy(seed):
    p, x, z = params_and_batch(seed, n=6, m=6)
    a_real = np_forward(p.discriminator, x)[:, 0]
    a_fake = np_forward(p.discriminator, np_forward(p.generator, z))[:, 0]
    d_real, d_fake = 1 / (1 + np.exp(-a_real)), 1 / (1 + np.exp(-a_fake))
    l_d = -np.mean(np.log(d_real)) - np.mean(np.log(1 - d_fake))
    np.testing.assert_allclose(gan.discriminator_loss(p, x, z), l_d, rtol=1e-12)
    np.testing.assert_allclose(gan.discriminate(p, x), d_real, rtol=1e-12)
    e = np.sum(np.log(d_real)) + np.sum(np.log(1 - d_fake))
    np.testing.assert_allclose(gan.energy(p, x, z), e, rtol=1e-12)
    np.testing.assert_allclose(gan.energy(p, x, z), -6 * gan.discriminator_loss(p, x, z), rtol=1e-12)
    sim = np.stack([np.zeros(12), np.concatenate([-a_real, a_fake])], axis=1)
    np.testing.assert_allclose(gan.energy(p, x, z), core.energy(jnp.asarray(sim)), rtol=1e-12)
    np.testing.assert_allclose(gan.generator_loss(p, z), -np.mean(np.log(d_fake)), rtol=1e-12)
    np.testing.assert_allclose(gan.generator_loss(p, z, "minimax"), np.mean(np.log(1 - d_fake)), rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_discriminator_gradient_is_softmax_weight_minus_label(seed):
    """Chain rule through the logits: grad_theta L_D = sum_n (sigma(a_n) - t_n)/N_part * grad_theta a_n."""
    p, x, z = params_and_batch(seed, n=4, m=4)
    g = gan.generate(p, z)

    def ld(th):
        return gan.discriminator_loss(p._replace(discriminator=th), x, z)

    def analytic(th):
        q = p._replace(discriminator=th)
        a_r, a_f = gan.logit(q, x), gan.logit(q, g)
        w = jnp.concatenate(
            [gan.grad_logistic_loss_logits(a_r, jnp.ones(4)), gan.grad_logistic_loss_logits(a_f, jnp.zeros(4))]
        )
        _, vjp = jax.vjp(
            lambda t: jnp.concatenate(
                [gan.logit(p._replace(discriminator=t), x), gan.logit(p._replace(discriminator=t), g)]
            ),
            th,
        )
        return vjp(w)[0]

    assert_gradient(ld, analytic, p.discriminator)


def test_optimal_logit_gives_density_ratio():
    r = rng(0)
    lp, lq = r.normal(size=10), r.normal(size=10)
    d = jax.nn.sigmoid(gan.optimal_logit(jnp.asarray(lp), jnp.asarray(lq)))
    np.testing.assert_allclose(d, np.exp(lp) / (np.exp(lp) + np.exp(lq)), rtol=1e-12)


# --- data ------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3])
def test_mixture_log_density_against_scipy(d):
    r = rng(d)
    centers, std = r.normal(size=(4, d)), 0.7
    x = r.normal(size=(9, d))
    expected = np.log(np.mean([multivariate_normal(c, std**2 * np.eye(d)).pdf(x) for c in centers], axis=0))
    np.testing.assert_allclose(
        gan.mixture_log_density(jnp.asarray(x), jnp.asarray(centers), std), expected.reshape(-1), rtol=1e-10
    )


def test_sample_mixture_moments():
    centers = jnp.asarray([[-1.0], [1.5]])
    x = np.asarray(gan.sample_mixture(centers, 0.5, 40000, key=jax.random.key(3)))[:, 0]
    # mean 0.25, variance 0.25 + 1.5625: five standard errors
    assert abs(x.mean() - 0.25) < 5 * np.sqrt(1.8125 / 40000)
    assert abs(x.var() - 1.8125) < 5 * 1.8125 * np.sqrt(2 / 40000) * 2


def test_ring_centers_and_coverage_brute_force():
    c = np.asarray(gan.ring_centers(8, 2.0))
    np.testing.assert_allclose(np.linalg.norm(c, axis=1), 2.0, rtol=1e-14)
    r = rng(1)
    s = np.concatenate(
        [c[0] + 0.01 * r.normal(size=(50, 2)), c[3] + 0.3 * r.normal(size=(30, 2)), r.normal(size=(20, 2))]
    )
    cov = gan.mode_coverage(jnp.asarray(s), jnp.asarray(c), 0.05, min_fraction=0.05)
    counts = np.zeros(8, int)
    good = 0
    for p in s:
        dist = [np.linalg.norm(p - m) for m in c]
        if min(dist) <= 0.15:
            counts[int(np.argmin(dist))] += 1
            good += 1
    np.testing.assert_array_equal(cov.counts, counts)
    assert int(cov.n_covered) == int(np.sum(counts >= 5))
    assert float(cov.high_quality) == pytest.approx(good / 100)


# --- training --------------------------------------------------------------------------------


def test_fixed_generator_discriminator_approaches_optimum():
    """Affine generator N(0, 1.5^2) against a two-Gaussian 1-D mixture: D -> p_data / (p_data + p_g)."""
    centers, std = jnp.asarray([[-1.0], [1.5]]), 0.5
    data = gan.sample_mixture(centers, std, 20000, key=jax.random.key(1))
    p0 = gan.init_params(1, 1, key=jax.random.key(0), generator_hidden=())
    p0 = p0._replace(generator=gan.MLP((jnp.asarray([[1.5]]),), (jnp.zeros(1),)))
    opt = optax.adam(optax.cosine_decay_schedule(1e-2, 2000))
    r = gan.fit(
        p0,
        data,
        key=jax.random.key(2),
        d_optimizer=opt,
        g_optimizer=opt,
        n_steps=2000,
        batch_size=256,
        train_generator=False,
    )
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), r.params.generator, p0.generator))
    xs = np.linspace(-3, 3, 121)
    pd = 0.5 * norm.pdf(xs, -1, 0.5) + 0.5 * norm.pdf(xs, 1.5, 0.5)
    pg = norm.pdf(xs, 0, 1.5)
    mask = (pd > 0.1 * pd.max()) & (pg > 0.1 * pg.max())
    err = np.abs(np.asarray(gan.discriminate(r.params, xs[:, None])) - pd / (pd + pg))[mask]
    assert err.max() < 0.05
    assert r.energies.shape == (2000,) and r.n_iter == 2000 and r.converged is None
    assert np.all(np.asarray(r.extras.generator_loss) == 0)


def small_problem(dtype=jnp.float64):
    data = gan.sample_mixture(gan.ring_centers(4, 1.0, dtype), 0.1, 64, key=jax.random.key(5))
    p = gan.init_params(2, 2, key=jax.random.key(6), generator_hidden=(8,), discriminator_hidden=(8,), dtype=dtype)
    return p, data


@pytest.mark.parametrize("kind", gan.GENERATOR_LOSSES)
def test_fit_is_deterministic_and_vmappable(kind):
    p, data = small_problem()
    kw = {
        "d_optimizer": ADAM,
        "g_optimizer": ADAM,
        "n_steps": 5,
        "batch_size": 8,
        "generator_loss": kind,
        "n_discriminator_steps": 2,
    }
    r1 = gan.fit(p, data, key=jax.random.key(0), **kw)
    r2 = gan.fit(p, data, key=jax.random.key(0), **kw)
    np.testing.assert_array_equal(r1.energies, r2.energies)
    keys = jax.random.split(jax.random.key(1), 3)
    batched = jax.vmap(lambda k: gan.fit(p, data, key=k, **kw).params)(keys)
    flat_batched = jax.vmap(lambda q: jax.flatten_util.ravel_pytree(q)[0])(batched)
    for i in range(3):
        one = gan.fit(p, data, key=keys[i], **kw).params
        np.testing.assert_allclose(flat_batched[i], jax.flatten_util.ravel_pytree(one)[0], rtol=1e-10, atol=1e-12)


def test_opt_state_continues_and_sgd_is_a_gradient_step():
    p, data = small_problem()
    r = gan.fit(p, data, key=jax.random.key(0), d_optimizer=ADAM, g_optimizer=ADAM, n_steps=3, batch_size=8)
    d_state, g_state = r.extras.opt_state
    assert int(d_state[0].count) == 3 and int(g_state[0].count) == 3
    r2 = gan.fit(
        r.params,
        data,
        key=jax.random.key(1),
        d_optimizer=ADAM,
        g_optimizer=ADAM,
        n_steps=2,
        batch_size=8,
        opt_state=r.extras.opt_state,
    )
    assert int(r2.extras.opt_state[0][0].count) == 5
    # the notes' update theta <- theta - kappa grad_theta L: with one data row and a constant generator
    # (zero weights, G(z) = c for every z) the minibatch is deterministic
    const = p._replace(generator=gan.MLP((jnp.zeros((2, 2)),), (jnp.asarray([0.3, -0.2]),)))
    row = data[:1]
    r3 = gan.fit(
        const,
        row,
        key=jax.random.key(2),
        d_optimizer=SGD,
        g_optimizer=SGD,
        n_steps=1,
        batch_size=1,
        train_generator=False,
    )
    g = jax.grad(lambda th: gan.discriminator_loss(const._replace(discriminator=th), row, jnp.zeros((1, 2))))(
        const.discriminator
    )
    expected = jax.tree.map(lambda t, gt: t - 0.05 * gt, const.discriminator, g)
    np.testing.assert_allclose(
        jax.flatten_util.ravel_pytree(r3.params.discriminator)[0],
        jax.flatten_util.ravel_pytree(expected)[0],
        rtol=1e-12,
    )


def _mlp_np_free(mlp, x):
    """The MLP written out again (tanh hidden layers, linear output), not through the package."""
    for w, b in zip(mlp.weights[:-1], mlp.biases[:-1]):
        x = jnp.tanh(x @ w + b)
    return x @ mlp.weights[-1] + mlp.biases[-1]


@pytest.mark.parametrize("kind", gan.GENERATOR_LOSSES)
def test_one_generator_step_with_frozen_discriminator_is_gradient_descent(kind):
    """The generator learns: with the discriminator frozen (its optimizer ``sgd(0)``) one step of ``fit``
    with ``g_optimizer=sgd(kappa)`` is phi <- phi - kappa grad_phi L_G, the gradient by ``jax.grad`` of L_G
    written here from its definition (-ln D(G(z)) or ln(1 - D(G(z))), D = 1 / (1 + e^-a)), on the noise
    ``fit`` draws for that step. A sign error in the generator's update or loss fails here: the step is
    ~1e-2 against a tolerance of 1e-12."""
    p, data = small_problem()
    p = p._replace(generator=gan.init_mlp((2, 6, 5, 2), key=jax.random.key(8)))
    kappa, batch, key = 0.3, 16, jax.random.key(7)
    r = gan.fit(
        p,
        data,
        key=key,
        d_optimizer=optax.sgd(0.0),
        g_optimizer=optax.sgd(kappa),
        n_steps=1,
        batch_size=batch,
        generator_loss=kind,
    )
    # fit's noise for the generator step of step 0: split(key, n_steps)[0], split in two, the second half
    z = jax.random.normal(jax.random.split(jax.random.split(key, 1)[0])[1], (batch, 2), jnp.float64)

    def loss_g(phi):
        d = 1.0 / (1.0 + jnp.exp(-_mlp_np_free(p.discriminator, _mlp_np_free(phi, z))[:, 0]))
        return jnp.mean(-jnp.log(d)) if kind == "non_saturating" else jnp.mean(jnp.log1p(-d))

    grad = jax.grad(loss_g)(p.generator)
    want = jax.flatten_util.ravel_pytree(jax.tree.map(lambda a, g: a - kappa * g, p.generator, grad))[0]
    got = jax.flatten_util.ravel_pytree(r.params.generator)[0]
    start = jax.flatten_util.ravel_pytree(p.generator)[0]
    assert float(jnp.max(jnp.abs(want - start))) > 1e-3  # the step is far above the tolerance
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # the discriminator was frozen: unchanged to the bit
    np.testing.assert_array_equal(
        jax.flatten_util.ravel_pytree(r.params.discriminator)[0], jax.flatten_util.ravel_pytree(p.discriminator)[0]
    )
    # the step lowers L_G (a small step of gradient descent), and fit's records of it
    assert float(loss_g(r.params.generator)) < float(loss_g(p.generator))
    np.testing.assert_allclose(r.extras.generator_loss[0], loss_g(p.generator), rtol=1e-12)
    np.testing.assert_allclose(
        r.extras.generator_grad_norm[0], np.linalg.norm(jax.flatten_util.ravel_pytree(grad)[0]), rtol=1e-12
    )
    d_fake = 1.0 / (1.0 + np.exp(-np_forward(p.discriminator, np_forward(p.generator, z))[:, 0]))
    np.testing.assert_allclose(r.extras.fake_prob[0], d_fake.mean(), rtol=1e-12)


def test_fit_diverges_loudly():
    """Linear discriminator and affine generator with a huge step: the weights overflow, fit raises."""
    data = gan.sample_mixture(gan.ring_centers(4, 1.0), 0.1, 64, key=jax.random.key(5))
    p = gan.init_params(2, 2, key=jax.random.key(6), generator_hidden=(), discriminator_hidden=())
    with pytest.raises(ValueError, match="diverged.*first at step"):
        gan.fit(
            p,
            data,
            key=jax.random.key(0),
            d_optimizer=optax.sgd(1e300),
            g_optimizer=optax.sgd(1e300),
            n_steps=10,
            batch_size=8,
        )


def test_float32_in_float32_out():
    p, data = small_problem(jnp.float32)
    r = gan.fit(p, data, key=jax.random.key(0), d_optimizer=ADAM, g_optimizer=ADAM, n_steps=3, batch_size=8)
    assert r.energies.dtype == jnp.float32
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(r.params))


def test_validation():
    p, data = small_problem()
    with pytest.raises(ValueError, match=r"params\.discriminator\.layers\[1\]\.weights .* with logit = 1"):
        gan.logit(gan.Params(p.generator, p.generator), data)
    with pytest.raises(ValueError, match="params.generator"):
        gan.generate(p._replace(generator=gan.MLP((jnp.ones((2, 3)),), (jnp.ones(2),))), jnp.zeros((1, 2)))
