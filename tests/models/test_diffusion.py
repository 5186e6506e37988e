"""Tests for lse_energy.diffusion: DDPM (§22 of the notes) and the ideal denoiser."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp as np_logsumexp

from lse_energy import core
from lse_energy import diffusion as df
from lse_energy.experiments import diffusion_mlp as dmlp
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def instance(seed, n=7, b=5, d=3, num_steps=50):
    sch = df.linear_schedule(num_steps, 1e-4, 0.2)
    kd, kx, kt = jax.random.split(jax.random.key(seed), 3)
    data = jax.random.normal(kd, (n, d))
    x = jax.random.normal(kx, (b, d))
    t = jax.random.randint(kt, (b,), 1, num_steps + 1)
    return sch, data, x, t


# --- schedule -----------------------------------------------------------------


def test_linear_schedule_properties():
    sch = df.linear_schedule()
    b = np.asarray(sch.betas)
    np.testing.assert_allclose(b[[0, -1]], [1e-4, 0.02], rtol=1e-14)
    np.testing.assert_allclose(np.diff(b), (0.02 - 1e-4) / 999, rtol=1e-9)
    ab = np.asarray(sch.alpha_bars)
    assert np.all((ab > 0) & (ab < 1))
    assert np.all(np.diff(ab) < 0)
    np.testing.assert_allclose(ab, np.cumprod(1.0 - b), rtol=1e-12)
    np.testing.assert_allclose(sch.alphas, 1.0 - b, rtol=0, atol=0)
    # "the final state is pure noise": sqrt(abar_T) is small but not zero
    assert 0 < ab[-1] < 1e-4


@pytest.mark.parametrize("bad", [[0.1, 0.0], [0.5, 1.0], [0.1, np.nan], [[0.1]], []])
def test_schedule_validation(bad):
    with pytest.raises(ValueError, match="n_steps"):
        df.linear_schedule(0)


# --- forward process ----------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_forward_marginal_moments(seed):
    """q_sample matches N(sqrt(abar) x0, (1 - abar) I) within 5 standard errors."""
    sch = df.linear_schedule(100, 1e-3, 0.05)
    t, m, d = 37, 20000, 3
    x0 = jnp.broadcast_to(jnp.array([1.5, -0.5, 2.0]), (m, d))
    xt, eps = df.q_sample(sch, x0, t, key=jax.random.key(seed))
    ab = float(sch.alpha_bars[t - 1])
    mean, var = np.asarray(xt).mean(0), np.asarray(xt).var(0, ddof=1)
    # SE of the mean: sqrt(var/m); SE of the sample variance of a Gaussian: var sqrt(2/(m-1))
    assert np.all(np.abs(mean - np.sqrt(ab) * np.asarray(x0[0])) < 5 * np.sqrt((1 - ab) / m))
    assert np.all(np.abs(var - (1 - ab)) < 5 * (1 - ab) * np.sqrt(2 / (m - 1)))
    np.testing.assert_allclose(xt, np.sqrt(ab) * x0 + np.sqrt(1 - ab) * eps, rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_chain_of_steps_has_closed_form_marginal(seed):
    """t one-step transitions q(x_s | x_{s-1}) give the marginal q(x_t | x_0) (moments, 5 SE)."""
    sch = df.linear_schedule(30, 1e-2, 0.1)
    m, d, t = 20000, 2, 30
    x0 = jnp.broadcast_to(jnp.array([1.0, -2.0]), (m, d))
    x = x0
    for s, k in zip(range(1, t + 1), jax.random.split(jax.random.key(seed), t)):
        x = df.q_step(sch, x, s, key=k)
    mean_ref, var_ref = df.forward_marginal(sch, x0[:1], t)
    mean, var = np.asarray(x).mean(0), np.asarray(x).var(0, ddof=1)
    v = float(var_ref[0])
    assert np.all(np.abs(mean - np.asarray(mean_ref[0])) < 5 * np.sqrt(v / m))
    assert np.all(np.abs(var - v) < 5 * v * np.sqrt(2 / (m - 1)))


@pytest.mark.parametrize("seed", SEEDS)
def test_reverse_mean_with_true_noise_is_posterior_mean(seed):
    sch, data, _, t = instance(seed)
    t = jnp.maximum(t, 2)
    x0 = data[:5]
    xt, eps = df.q_sample(sch, x0, t, key=jax.random.key(seed + 10))
    mu_post, var_post = df.q_posterior(sch, x0, xt, t)
    np.testing.assert_allclose(df.reverse_mean(sch, xt, t, eps), mu_post, rtol=1e-11, atol=1e-12)
    # Bayes for one coordinate in NumPy: q(x_{t-1}|x0) q(x_t|x_{t-1}) is Gaussian in x_{t-1}
    ab = np.concatenate([[1.0], np.asarray(sch.alpha_bars)])
    tt = np.asarray(t)
    a, bt = np.asarray(sch.alphas)[tt - 1], np.asarray(sch.betas)[tt - 1]
    prec = 1 / (1 - ab[tt - 1]) + a / bt
    mean = (
        np.sqrt(ab[tt - 1])[:, None] * np.asarray(x0) / (1 - ab[tt - 1])[:, None]
        + (np.sqrt(a) / bt)[:, None] * np.asarray(xt)
    ) / prec[:, None]
    np.testing.assert_allclose(mu_post, mean, rtol=1e-10)
    np.testing.assert_allclose(var_post, 1 / prec, rtol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_kl_weight_is_the_gaussian_kl(seed):
    """KL(N(mu~, s2 I) || N(mu_theta, s2 I)) = lambda_t ||eps - eps_theta||^2."""
    sch, data, _, t = instance(seed)
    t = jnp.maximum(t, 2)
    x0 = data[:5]
    xt, eps = df.q_sample(sch, x0, t, key=jax.random.key(seed))
    eps_hat = eps + jax.random.normal(jax.random.key(seed + 1), eps.shape)
    mu, s2 = df.q_posterior(sch, x0, xt, t)
    kl = np.sum((np.asarray(mu - df.reverse_mean(sch, xt, t, eps_hat))) ** 2, 1) / (2 * np.asarray(s2))
    lam = df.kl_weight(sch, t, s2)
    np.testing.assert_allclose(kl, lam * np.sum(np.asarray(eps - eps_hat) ** 2, 1), rtol=1e-10)


# --- the ideal denoiser as a log-sum-exp energy ---------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_ideal_energy_is_minus_log_density(seed):
    sch, data, x, t = instance(seed)
    ab = np.asarray(sch.alpha_bars)[np.asarray(t) - 1]
    n, d = data.shape
    diff = np.asarray(x)[:, None, :] - np.sqrt(ab)[:, None, None] * np.asarray(data)[None]
    logpdf = -np.sum(diff**2, -1) / (2 * (1 - ab))[:, None] - 0.5 * d * np.log(2 * np.pi * (1 - ab))[:, None]
    log_p = np_logsumexp(logpdf, axis=1) - np.log(n)
    np.testing.assert_allclose(df.ideal_log_density(data, sch, x, t), log_p, rtol=1e-12)
    const = np.sum(np.log(n) + 0.5 * d * np.log(2 * np.pi * (1 - ab)))
    np.testing.assert_allclose(df.energy(data, sch, x, t), -log_p.sum() - const, rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_ideal_score_is_minus_gradient_of_energy(seed):
    sch, data, x, t = instance(seed)
    assert_gradient(
        lambda y: df.energy(data, sch, y, t), lambda y: -df.ideal_score(data, sch, y, t), x, rtol=1e-10, fd_rtol=1e-6
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_ideal_denoiser_is_bayes_posterior_mean(seed):
    """E[x0 | x_t] by explicit Bayes over the N points (uniform prior) in NumPy."""
    sch, data, x, t = instance(seed)
    X, D = np.asarray(x), np.asarray(data)
    ab = np.asarray(sch.alpha_bars)[np.asarray(t) - 1]
    out = np.empty_like(X)
    for b in range(X.shape[0]):
        loglik = np.array([-np.sum((X[b] - np.sqrt(ab[b]) * xi) ** 2) / (2 * (1 - ab[b])) for xi in D])
        post = np.exp(loglik - loglik.max())
        post /= post.sum()
        out[b] = post @ D
    np.testing.assert_allclose(df.ideal_denoiser(data, sch, x, t), out, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_tweedie_and_epsilon(seed):
    sch, data, x, t = instance(seed)
    ab = sch.alpha_bars[t - 1][:, None]
    score = df.ideal_score(data, sch, x, t)
    den = df.ideal_denoiser(data, sch, x, t)
    np.testing.assert_allclose((x + (1 - ab) * score) / jnp.sqrt(ab), den, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(df.ideal_epsilon(data, sch, x, t), -jnp.sqrt(1 - ab) * score, rtol=1e-10, atol=1e-12)
    # built on core.weights with the documented similarity
    sim = -jnp.sum((x[:, None] - jnp.sqrt(ab)[:, :, None] * data[None]) ** 2, -1) / (2 * (1 - ab))
    np.testing.assert_allclose(den, core.weights(sim) @ data, rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_ideal_epsilon_minimises_simplified_loss(seed):
    """Orthogonality: E[(eps - eps*) . g(x_t, t)] = 0 for any g, so perturbing eps* raises the loss.

    The loss is quadratic in the predictor: L(eps* + delta g) - L(eps*) = delta^2 E|g|^2 -
    2 delta E[(eps - eps*) . g]. We check the cross term is within 5 standard errors of 0
    and that, at a delta where delta^2 E|g|^2 exceeds 10 standard errors of the cross
    term, both signs of the perturbation give a larger Monte-Carlo loss.
    """
    sch, data, _, _ = instance(seed, num_steps=50)
    m = 40000
    k1, k2, k3 = jax.random.split(jax.random.key(100 + seed), 3)
    x0 = data[jax.random.randint(k1, (m,), 0, data.shape[0])]
    t = jax.random.randint(k2, (m,), 1, 51)
    eps = jax.random.normal(k3, x0.shape)
    ab = sch.alpha_bars[t - 1][:, None]
    xt = jnp.sqrt(ab) * x0 + jnp.sqrt(1 - ab) * eps
    r = np.asarray(eps - df.ideal_epsilon(data, sch, xt, t))
    g = np.asarray(jnp.tanh(xt @ jnp.ones((3, 3)) + 0.1 * t[:, None]))  # an arbitrary g(x_t, t)
    cross = np.sum(r * g, 1)
    se = cross.std(ddof=1) / np.sqrt(m)
    assert abs(cross.mean()) < 5 * se
    g2 = np.mean(np.sum(g**2, 1))
    delta = 10 * se / g2 * 2
    base = float(df.denoising_loss(df.ideal_epsilon, data, sch, x0, t, eps))
    for s in (+1, -1):

        def pert(p, sc, y, tt, s=s):
            return df.ideal_epsilon(p, sc, y, tt) + s * delta * jnp.tanh(y @ jnp.ones((3, 3)) + 0.1 * tt[:, None])

        assert float(df.denoising_loss(pert, data, sch, x0, t, eps)) > base


def test_effective_beta_hopfield_form():
    """For equal-norm data the denoiser is softmax(beta_eff x.x_i) x_i (a Hopfield update)."""
    sch = df.linear_schedule(100)
    ang = 2 * np.pi * np.arange(6) / 6
    data = jnp.asarray(np.stack([np.cos(ang), np.sin(ang)], 1))
    x = jax.random.normal(jax.random.key(0), (4, 2))
    for t in (1, 10, 100):
        ab = float(sch.alpha_bars[t - 1])
        be = float(df.effective_beta(sch, t))
        np.testing.assert_allclose(be, np.sqrt(ab) / (1 - ab), rtol=1e-14)
        hop = core.weights(be * x @ data.T) @ data
        np.testing.assert_allclose(df.ideal_denoiser(data, sch, x, t), hop, rtol=1e-10, atol=1e-14)


# --- sampling -----------------------------------------------------------------


def test_same_key_same_samples_and_memorisation():
    sch = df.linear_schedule(200, 1e-4, 0.05)
    data = jax.random.normal(jax.random.key(0), (5, 2))
    a = df.ideal_sample(data, sch, 64, key=jax.random.key(1))
    b = df.ideal_sample(data, sch, 64, key=jax.random.key(1))
    c = df.ideal_sample(data, sch, 64, key=jax.random.key(2))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    # at t = 1 the softmax has inverse temperature ~ 1/beta_1 = 1e4: every sample is a data point
    dist, _ = dmlp.nearest_training_point(a, data)
    spacing = float(jnp.min(dmlp.nearest_neighbour_spacing(data)))
    assert float(jnp.max(dist)) < 1e-6 * spacing


def test_sample_path_and_generic_eps_fn():
    sch = df.linear_schedule(20, 1e-3, 0.2)
    data = jax.random.normal(jax.random.key(3), (4, 3))
    x0, path = df.sample(df.ideal_epsilon, data, sch, 8, 3, key=jax.random.key(5), return_path=True)
    assert path.shape == (21, 8, 3)
    np.testing.assert_array_equal(path[-1], x0)
    np.testing.assert_array_equal(x0, df.ideal_sample(data, sch, 8, key=jax.random.key(5)))
    # the last step (z = 0) is exactly the ideal denoiser at t = 1
    np.testing.assert_allclose(x0, df.ideal_denoiser(data, sch, path[-2], 1), rtol=1e-10, atol=1e-12)


def test_mlp_training_reduces_loss_and_is_deterministic():
    optax = pytest.importorskip("optax")
    sch = df.linear_schedule(100, 1e-3, 0.1)
    data = jax.random.normal(jax.random.key(0), (6, 2))
    p0 = dmlp.init_params(2, key=jax.random.key(1), hidden=(32, 32), n_freqs=4)
    fit1 = dmlp.fit(p0, data, sch, optax.adam(3e-3), key=jax.random.key(2), n_steps=300, batch_size=64)
    fit2 = dmlp.fit(p0, data, sch, optax.adam(3e-3), key=jax.random.key(2), n_steps=300, batch_size=64)
    np.testing.assert_array_equal(fit1.energies, fit2.energies)
    assert fit1.energies.shape == (300,)  # n_steps optimizer steps, not the schedule's T = 100
    k = jax.random.key(7)
    before = float(df.simplified_loss(dmlp.epsilon, p0, sch, jnp.tile(data, (500, 1)), key=k))
    after = float(df.simplified_loss(dmlp.epsilon, fit1.params, sch, jnp.tile(data, (500, 1)), key=k))
    ideal = float(df.simplified_loss(df.ideal_epsilon, data, sch, jnp.tile(data, (500, 1)), key=k))
    assert after < before
    assert ideal < after  # same (x0, t, eps) draws; the ideal predictor is the minimiser


def test_nearest_helpers():
    data = jnp.array([[0.0, 0.0], [3.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(dmlp.nearest_neighbour_spacing(data), [1.0, 3.0, 1.0])
    dist, idx = dmlp.nearest_training_point(jnp.array([[2.5, 0.0], [0.0, 0.4]]), data)
    np.testing.assert_allclose(dist, [0.5, 0.4])
    np.testing.assert_array_equal(idx, [1, 0])


def test_sigmas_and_single_point():
    sch = df.linear_schedule(40, 1e-3, 0.2)
    np.testing.assert_allclose(df.sigmas(sch, "beta") ** 2, sch.betas, rtol=1e-14)
    x0 = jnp.zeros((40, 2))
    t = jnp.arange(1, 41)
    _, var = df.q_posterior(sch, x0, x0, t)
    np.testing.assert_allclose(df.sigmas(sch, "posterior") ** 2, var, rtol=1e-12, atol=1e-300)
    assert float(var[0]) == 0.0  # q(x_0 | x_1, x_0) is a point mass
    # N = 1: the softmax weight is 1, so every sample is the point, for both sigma choices
    x1 = jnp.array([[0.3, -0.7, 1.2]])
    for kind in ("beta", "posterior"):
        out = df.ideal_sample(x1, sch, 10, key=jax.random.key(4), sigma=kind)
        np.testing.assert_allclose(out, jnp.broadcast_to(x1, (10, 3)), rtol=0, atol=1e-12)


# --- validation ---------------------------------------------------------------


def test_validation_errors():
    sch, data, x, t = instance(0)
    with pytest.raises(ValueError, match="t must lie"):
        df.ideal_denoiser(data, sch, x, 51)
    with pytest.raises(ValueError, match="integer"):
        df.energy(data, sch, x, 1.0)
    with pytest.raises(ValueError, match="t must be a scalar or have shape"):
        df.ideal_epsilon(data, sch, x, jnp.ones(3, int))
    with pytest.raises(ValueError, match="x has dimension"):
        df.ideal_score(data, sch, x[:, :2], 1)
    with pytest.raises(ValueError, match="x must be finite"):
        df.ideal_score(data, sch, x.at[0, 0].set(jnp.nan), 1)
    with pytest.raises(ValueError, match=r"x0 must have shape \(rows, d\)"):
        df.q_sample(sch, x[0], 1, key=jax.random.key(0))
    with pytest.raises(ValueError, match="eps must have the shape of xt"):
        df.reverse_mean(sch, x, 2, x[:2])
    with pytest.raises(ValueError, match="sigma"):
        df.sample(df.ideal_epsilon, data, sch, 4, 3, key=jax.random.key(0), sigma="bogus")
    with pytest.raises(ValueError, match="n_samples"):
        df.ideal_sample(data, sch, 0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="t must lie"):
        df.effective_beta(sch, jnp.array([1, 60]))
    with pytest.raises(ValueError, match="kind"):
        df.sigmas(sch, "ddim")
    with pytest.raises(ValueError, match="optimizer"):
        dmlp.fit(dmlp.init_params(3, key=jax.random.key(0)), data, sch, object(), key=jax.random.key(0), n_steps=2)


@pytest.mark.parametrize("seed", SEEDS)
def test_sim_is_the_gaussian_exponent_of_the_noised_data(seed):
    rng = np.random.default_rng(seed)
    data, x = rng.normal(size=(5, 2)), rng.normal(size=(3, 2))
    sch = df.linear_schedule(20)
    t = np.array([1, 7, 20])
    abar = np.cumprod(1.0 - np.asarray(sch.betas))[t - 1]
    want = -(((x[:, None, :] - np.sqrt(abar)[:, None, None] * data[None]) ** 2).sum(-1)) / (2 * (1 - abar))[:, None]
    np.testing.assert_allclose(
        np.asarray(df.sim(jnp.asarray(data), sch, jnp.asarray(x), jnp.asarray(t))), want, rtol=1e-12
    )
