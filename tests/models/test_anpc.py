"""Tests for lse_energy.anpc, attention-normalised predictive coding (Singh & Buckley 2023, §4.4)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lse_energy import anpc, core, pcn
from lse_energy.testing import assert_gradient
from tests.support import SEEDS, relative_error

ACTIVATIONS = ["tanh", "linear"]
N = 6


def _params(seed, n=N, p_edge=0.5, one_parent=False):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    if one_parent:
        # a random forest: neuron i > 0 has exactly one presynaptic neuron j < i (neuron 0 is a root)
        parents = [int(jax.random.randint(jax.random.fold_in(k1, i), (), 0, i)) for i in range(1, n)]
        A = np.zeros((n, n), bool)
        A[np.arange(1, n), parents] = True
    else:
        A = np.array(jax.random.bernoulli(k1, p_edge, (n, n)))
        A[0, :] = False  # a root
        A[1, :] = False
        A[1, 0] = True  # a neuron with exactly one input
        A[2, :] = True  # a neuron with every input (a self-synapse included)
    W = 1.2 * jax.random.normal(k2, (n, n))
    B = 0.3 * jax.random.normal(k3, (n, n))
    return anpc.Params(weights=W, biases=B, adjacency=jnp.asarray(A))


def _problem(seed, batch=3, **kw):
    p = _params(seed, **kw)
    n = p.weights.shape[0]
    x = jax.random.normal(jax.random.key(100 + seed), (batch, n))
    k = 0.5 + jax.random.uniform(jax.random.key(200 + seed), (n,))
    return p, x, k


def _numpy_energies(p, x, k, activation):
    W, B, A = (np.asarray(a) for a in p)
    x, k = np.asarray(x), np.asarray(k)
    f = np.tanh if activation == "tanh" else (lambda v: v)
    F_att = F_std = 0.0
    for xb in x:
        for i in range(W.shape[0]):
            pre = np.flatnonzero(A[i])
            if pre.size == 0:
                continue
            s = -0.5 * k[i] * (xb[i] - W[i, pre] * f(xb[pre]) - B[i, pre]) ** 2
            F_att -= np.log(np.sum(np.exp(s)))
            F_std -= np.sum(s)
    return F_att, F_std


# --- energy -----------------------------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_energies_match_numpy_loops(seed, activation):
    p, x, k = _problem(seed)
    F_att, F_std = _numpy_energies(p, x, k, activation)
    np.testing.assert_allclose(float(anpc.energy(p, x, k, activation=activation)), F_att, rtol=1e-12)
    np.testing.assert_allclose(float(anpc.standard_energy(p, x, k, activation=activation)), F_std, rtol=1e-12)
    # LSE >= max, so F_att <= F_std, and F_att >= -sum_i ln |pre(i)| per example.
    assert F_att <= F_std
    n_pre = np.sum(np.asarray(p.adjacency), axis=1)
    assert F_att >= -x.shape[0] * np.sum(np.log(n_pre[n_pre > 0]))


@pytest.mark.parametrize("seed", SEEDS)
def test_attention_rows_and_effective_precisions(seed):
    p, x, k = _problem(seed)
    a = np.asarray(anpc.attention(p, x, k))
    A = np.asarray(p.adjacency)
    has = A.any(axis=1)
    np.testing.assert_allclose(a.sum(-1)[:, has], 1.0, rtol=1e-14)
    assert np.all(a[:, ~has] == 0) and np.all(a[:, ~A] == 0)
    eff = np.asarray(anpc.effective_precisions(p, x, k))
    np.testing.assert_allclose(eff, np.asarray(k)[None, :, None] * a, rtol=1e-14)
    # the neuron with a single input always gives it weight 1
    assert np.all(a[:, 1, 0] == 1.0)


# --- gradients -----------------------------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_grad_x_matches_autodiff_and_fd(seed, activation):
    p, x, k = _problem(seed)
    assert_gradient(
        lambda v: anpc.energy(p, v, k, activation=activation),
        lambda v: anpc.grad_x(p, v, k, activation=activation),
        x,
        n_coords=None,
    )
    assert_gradient(
        lambda v: anpc.standard_energy(p, v, k, activation=activation),
        lambda v: anpc.grad_x_standard(p, v, k, activation=activation),
        x,
        n_coords=None,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_x_with_per_synapse_precisions(seed):
    p, x, _ = _problem(seed)
    K = 0.2 + jax.random.uniform(jax.random.key(300 + seed), (N, N))
    assert_gradient(lambda v: anpc.energy(p, v, K), lambda v: anpc.grad_x(p, v, K), x, n_coords=None)


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_grad_params_matches_autodiff_and_fd(seed, normalised):
    p, x, k = _problem(seed)
    energy = anpc.energy if normalised else anpc.standard_energy

    def f(wb):
        return energy(p._replace(weights=wb[0], biases=wb[1]), x, k)

    def g(wb):
        out = anpc.grad_params(p._replace(weights=wb[0], biases=wb[1]), x, k, normalised=normalised)
        assert out.adjacency is not None and np.array_equal(out.adjacency, p.adjacency)
        return (out.weights, out.biases)

    assert_gradient(f, g, (p.weights, p.biases), n_coords=None)


@pytest.mark.parametrize("seed", SEEDS)
def test_grad_is_paper_display_with_softmax_over_k_eps2(seed):
    """The second display of §4.4, written out neuron by neuron, equals the gradient. Both
    precision-free readings of the transcribed softmax(-eps^2) (chapter 13), -eps^2 and
    -eps^2/2, do not: they need every k = 2 or every k = 1, and here k ~ U(0.5, 1.5)."""
    p, x, k = _problem(seed, batch=1)
    x = x[0]
    W, A = np.asarray(p.weights), np.asarray(p.adjacency)
    e = np.asarray(anpc.errors(p, x))
    kk = np.asarray(k)
    fp = 1 - np.tanh(np.asarray(x)) ** 2

    def dynamics(alpha):
        return np.array(
            [
                -np.sum(alpha[i, A[i]] * kk[i] * e[i, A[i]])
                + fp[i] * np.sum([alpha[l, i] * kk[l] * e[l, i] * W[l, i] for l in range(N) if A[l, i]])
                for i in range(N)
            ]
        )

    alpha = np.asarray(anpc.attention(p, x, k))
    assert relative_error(dynamics(alpha), -np.asarray(jax.grad(anpc.energy, argnums=1)(p, x, k))) < 1e-12
    for scale in (1.0, 0.5):
        no_precision = np.asarray(core.weights(jnp.asarray(-scale * e**2), p.adjacency, allow_empty=True))
        assert relative_error(dynamics(no_precision), -np.asarray(anpc.grad_x(p, x, k))) > 1e-3


# --- reductions and the marginalisation ---------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_one_input_per_neuron_is_standard_pc(seed, activation):
    p, x, k = _problem(seed, one_parent=True)
    Fa = anpc.energy(p, x, k, activation=activation)
    Fs = anpc.standard_energy(p, x, k, activation=activation)
    np.testing.assert_allclose(float(Fa), float(Fs), rtol=1e-14)
    np.testing.assert_allclose(
        anpc.grad_x(p, x, k, activation=activation),
        anpc.grad_x_standard(p, x, k, activation=activation),
        rtol=1e-14,
        atol=0,
    )
    a = np.asarray(anpc.attention(p, x, k, activation=activation))
    np.testing.assert_array_equal(a, np.broadcast_to(np.asarray(p.adjacency, float), a.shape))
    clamp = jnp.arange(N) == 0
    ra = anpc.infer(p, x, k, clamp=clamp, n_steps=20, step_size=0.05, activation=activation)
    rs = anpc.infer(p, x, k, clamp=clamp, n_steps=20, step_size=0.05, activation=activation, normalised=False)
    np.testing.assert_allclose(ra.x, rs.x, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_scalar_chain_equals_hierarchical_pcn(seed):
    """One input per neuron on a chain x_0 -> x_1 -> x_2 -> x_3 is the pcn_ network with
    scalar layers (tanh, per-layer precisions, no root prior)."""
    L = 4
    key = jax.random.key(seed)
    w = 1.5 * jax.random.normal(jax.random.fold_in(key, 0), (L - 1,))
    b = 0.3 * jax.random.normal(jax.random.fold_in(key, 1), (L - 1,))
    W = jnp.zeros((L, L)).at[jnp.arange(1, L), jnp.arange(L - 1)].set(w)
    B = jnp.zeros((L, L)).at[jnp.arange(1, L), jnp.arange(L - 1)].set(b)
    A = jnp.zeros((L, L), bool).at[jnp.arange(1, L), jnp.arange(L - 1)].set(True)
    p = anpc.Params(W, B, A)
    prec = jnp.asarray([0.0, 1.0, 2.0, 0.5])
    chain = pcn.Params(
        weights=tuple(w[l].reshape(1, 1) for l in range(L - 1)),
        biases=tuple(b[l].reshape(1) for l in range(L - 1)),
        prior_mean=jnp.zeros(1),
    )
    x = jax.random.normal(jax.random.fold_in(key, 2), (5, L))
    xs = tuple(x[:, l : l + 1] for l in range(L))
    k = prec.at[0].set(1.0)  # neuron 0 has no input: its precision is unused
    np.testing.assert_allclose(float(anpc.energy(p, x, k)), float(pcn.energy(chain, xs, prec)), rtol=1e-13)
    g_pcn = jnp.concatenate(pcn.grad_x(chain, xs, prec), axis=-1)
    np.testing.assert_allclose(anpc.grad_x(p, x, k), g_pcn, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_brute_force_marginalisation_over_synapse_choices(seed, activation):
    """sum_c prod_i (1/|pre(i)|) exp(-F_std(c)) = exp(-F_att) / prod_i |pre(i)|, and the
    posterior marginal p(c_i = j | x) is the softmax alpha_ij."""
    n = 4
    p, x, k = _problem(seed, batch=1, n=n, p_edge=0.6)
    x = x[0]
    A = np.array(p.adjacency)
    A[3, :2] = True  # neuron 3 has at least two inputs, so there are >= 1 * 4 * 2 choices
    p = p._replace(adjacency=jnp.asarray(A))
    sim = np.asarray(anpc.sim(p, x, k, activation=activation))
    kids = [i for i in range(n) if A[i].any()]
    pres = [np.flatnonzero(A[i]) for i in kids]
    log_terms, choices = [], []
    for c in itertools.product(*pres):
        # F_std of the network in which neuron kids[m] keeps only synapse c[m]
        A_c = np.zeros_like(A)
        A_c[kids, list(c)] = True
        F_c = float(anpc.standard_energy(p._replace(adjacency=jnp.asarray(A_c)), x, k, activation=activation))
        np.testing.assert_allclose(F_c, -sum(sim[i, j] for i, j in zip(kids, c)), rtol=1e-13)
        log_terms.append(-F_c - np.sum(np.log([len(q) for q in pres])))
        choices.append(c)
    log_terms = np.array(log_terms)
    assert len(log_terms) == np.prod([len(q) for q in pres]) >= 8
    log_marginal = np.logaddexp.reduce(log_terms)
    F_att = float(anpc.energy(p, x, k, activation=activation))
    np.testing.assert_allclose(log_marginal, -F_att - np.sum(np.log([len(q) for q in pres])), rtol=1e-12)
    post = np.exp(log_terms - log_marginal)
    alpha = np.asarray(anpc.attention(p, x, k, activation=activation))
    for m, i in enumerate(kids):
        for j in pres[m]:
            marg = sum(pw for pw, c in zip(post, choices) if c[m] == j)
            np.testing.assert_allclose(marg, alpha[i, j], rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_is_standard_pc_with_effective_precisions(seed):
    p, x, k = _problem(seed)
    for activation in ACTIVATIONS:
        eff = anpc.effective_precisions(p, x[0], k, activation=activation)
        g_std = anpc.grad_x_standard(p, x[0], eff, activation=activation)
        g_att = anpc.grad_x(p, x[0], k, activation=activation)
        assert relative_error(g_std, g_att) < 1e-13


# --- inference -------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_non_increasing_below_the_bound_linear(seed):
    p, x, k = _problem(seed)
    clamp = jnp.asarray([True, False, False, True, False, False])
    for normalised in (True, False):
        L = float(anpc.lipschitz(p, k, clamp=clamp, activation="linear", normalised=normalised))
        res = anpc.infer(
            p, x, k, clamp=clamp, n_steps=300, step_size=1.99 / L, activation="linear", normalised=normalised
        )
        E = np.asarray(res.energy)
        assert np.all(np.diff(E) <= 1e-12 * np.abs(E).max()), normalised
        assert E[-1] < E[0]
        np.testing.assert_array_equal(res.x[:, np.asarray(clamp)], x[:, np.asarray(clamp)])
    L_att = anpc.lipschitz(p, k, clamp=clamp, activation="linear")
    L_std = anpc.lipschitz(p, k, clamp=clamp, activation="linear", normalised=False)
    assert L_att <= L_std


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_non_increasing_below_the_bound_tanh(seed):
    p, x, k = _problem(seed)
    clamp = jnp.asarray([True, False, False, True, False, False])
    R = 10.0
    L = float(anpc.lipschitz(p, k, clamp=clamp, activation="tanh", radius=R))
    res = anpc.infer(p, x, k, clamp=clamp, n_steps=300, step_size=1.99 / L)
    E = np.asarray(res.energy)
    assert float(res.max_abs.max()) <= R  # the box in which the bound holds was never left
    assert np.all(np.diff(E) <= 1e-12 * np.abs(E).max()) and E[-1] < E[0]


def test_bound_is_an_upper_curvature_bound():
    """Largest Hessian eigenvalue of F_att (free block) at random points stays below L."""
    for seed in SEEDS:
        p, x, k = _problem(seed, batch=1)
        clamp = jnp.asarray([True, False, False, True, False, False])
        free = ~np.asarray(clamp)
        for activation in ACTIVATIONS:
            L = float(anpc.lipschitz(p, k, clamp=clamp, activation=activation, radius=4.0))
            for t in range(5):
                v = 1.3 * jax.random.normal(jax.random.key(10 * seed + t), (N,))
                v = jnp.clip(v, -4.0, 4.0)
                H = np.asarray(jax.hessian(lambda z: anpc.energy(p, z, k, activation=activation))(v))
                assert np.linalg.eigvalsh(H[np.ix_(free, free)]).max() <= L


def test_step_above_the_bound_can_increase_the_energy():
    """The bound is not vacuous: on one neuron with one input (F = k/2 (x - u)^2, L = 2k),
    eta = 2/k overshoots to the mirror point and eta > 2/k increases F."""
    W = jnp.zeros((2, 2)).at[1, 0].set(1.0)
    A = jnp.zeros((2, 2), bool).at[1, 0].set(True)
    p = anpc.Params(W, jnp.zeros((2, 2)), A)
    clamp = jnp.asarray([True, False])
    k = jnp.asarray([1.0, 2.0])
    L = float(anpc.lipschitz(p, k, clamp=clamp, activation="linear"))
    assert L == 4.0
    x0 = jnp.asarray([0.5, 2.0])
    ok = anpc.infer(p, x0, k, clamp=clamp, n_steps=5, step_size=2 / L, activation="linear")
    bad = anpc.infer(p, x0, k, clamp=clamp, n_steps=5, step_size=1.1 * 2 / k[1], activation="linear")
    assert np.all(np.diff(np.asarray(ok.energy)) <= 0)
    assert np.all(np.diff(np.asarray(bad.energy)) > 0)


def test_outlier_equilibria_standard_mean_vs_attention():
    """One neuron, 7 clean inputs around 0 and one outlier at 20: standard PC settles on the mean,
    attention-normalised PC on a point where the outlier's weight is negligible."""
    K = 8
    u = jnp.concatenate([0.5 * jax.random.normal(jax.random.key(0), (K - 1,)), jnp.asarray([20.0])])
    A = jnp.zeros((K + 1, K + 1), bool).at[0, 1:].set(True)
    p = anpc.Params(jnp.ones((K + 1, K + 1)), jnp.zeros((K + 1, K + 1)), A)
    clamp = jnp.arange(K + 1) > 0
    x0 = jnp.concatenate([jnp.mean(u)[None], u])
    L = float(anpc.lipschitz(p, clamp=clamp, activation="linear"))
    att = anpc.infer(p, x0, clamp=clamp, n_steps=300, step_size=1 / L, activation="linear")
    std = anpc.infer(
        p,
        x0 * 0 + jnp.concatenate([jnp.zeros(1), u]),
        clamp=clamp,
        n_steps=300,
        step_size=1 / K,
        activation="linear",
        normalised=False,
    )
    np.testing.assert_allclose(float(std.x[0]), float(jnp.mean(u)), rtol=1e-12)
    a = anpc.attention(p, att.x, activation="linear")[0]
    assert float(a[-1]) < 1e-30
    clean_mean = float(jnp.mean(u[:-1]))
    assert abs(float(att.x[0]) - clean_mean) < 0.5 < abs(float(std.x[0]) - clean_mean)
    # the fixed point is the standard-PC equilibrium with precisions k * alpha (the weighted mean)
    np.testing.assert_allclose(float(att.x[0]), float(jnp.sum(a[1:] * u) / jnp.sum(a[1:])), rtol=1e-12)


def test_same_inputs_same_result_and_batch_independence():
    p, x, k = _problem(0, batch=4)
    clamp = jnp.asarray([True, False, False, False, False, True])
    r1 = anpc.infer(p, x, k, clamp=clamp, n_steps=50, step_size=0.02)
    r2 = anpc.infer(p, x, k, clamp=clamp, n_steps=50, step_size=0.02)
    np.testing.assert_array_equal(r1.x, r2.x)
    np.testing.assert_array_equal(r1.energy, r2.energy)
    one = anpc.infer(p, x[2], k, clamp=clamp, n_steps=50, step_size=0.02)
    np.testing.assert_allclose(one.x, r1.x[2], rtol=1e-13, atol=1e-15)
    # and a keyed random problem is reproducible
    pa, pb = _params(5), _params(5)
    for a, b in zip(pa, pb):
        np.testing.assert_array_equal(a, b)


# --- validation --------------------------------------------------------------------


def test_validation_errors():
    p, x, k = _problem(0)
    clamp = jnp.zeros(N, bool)
    with pytest.raises(ValueError, match="params.weights"):
        anpc.energy(p._replace(weights=p.weights[:, :3]), x)
    with pytest.raises(ValueError, match="params.biases"):
        anpc.energy(p._replace(biases=p.biases.at[0, 0].set(jnp.nan)), x)
    with pytest.raises(ValueError, match="x must be finite"):
        anpc.grad_x(p, x.at[0, 0].set(jnp.inf))
    with pytest.raises(ValueError, match="activation"):
        anpc.energy(p, x, activation="relu")
    with pytest.raises(ValueError, match="clamp"):
        anpc.infer(p, x, clamp=jnp.zeros(N), n_steps=3, step_size=0.1)
    with pytest.raises(ValueError, match="clamp"):
        anpc.infer(p, x, clamp=jnp.zeros(N - 1, bool), n_steps=3, step_size=0.1)
    with pytest.raises(ValueError, match="normalised"):
        anpc.infer(p, x, clamp=clamp, n_steps=3, step_size=0.1, normalised="yes")


def test_names_exported():
    for name in [
        "Params",
        "energy",
        "standard_energy",
        "grad_x",
        "grad_x_standard",
        "grad_params",
        "attention",
        "effective_precisions",
        "lipschitz",
        "infer",
        "Inference",
        "errors",
        "sim",
        "predictions",
    ]:
        assert name in anpc.__all__ and hasattr(anpc, name)
