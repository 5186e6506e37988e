"""Propositions of chapter 13 (attention-normalised predictive coding), checked independently.

Each test checks one proposition of ``book/13_attention_normalised_pc.ipynb`` on at least
100 random networks (float64, numpy ``default_rng`` with fixed seeds: random adjacency with
self-synapses, weights, biases, per-synapse precisions, states, tanh and linear synapses)
against a computation that does not share the package's formula: brute-force enumeration
of every synapse choice, ``jax.grad`` / ``jax.hessian`` of the energies written again here
from their definitions (masked log-sum-exp written out per neuron), the dynamics written
as a numpy loop over neurons and synapses, a bisection root finder, and the curvature bound
written as a loop. Where a proposition needs a condition, the test shows it failing
without the condition.

Instances come in groups of one network size each, so that each jitted, vmapped check
compiles once per group.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from lse_energy import anpc
from tests.support import relative_error

jax.config.update("jax_enable_x64", True)

SIZES = (4, 6)  # neurons per network, one group each
PER_SIZE = 50  # 2 x 50 = 100 networks per test (x 2 activations where both are used)
TANH2_MAX = 4 / (3 * np.sqrt(3))  # max |tanh''|


def _f(v, act):
    return jnp.tanh(v) if act == "tanh" else v


def _draw(rng, N, n, *, p_edge=0.6):
    """n random networks of N neurons: adjacency (self-synapses allowed), w, b, per-synapse k, a state."""
    A = rng.random((n, N, N)) < p_edge
    W = rng.normal(0, 1.2, (n, N, N))
    B = rng.normal(0, 0.4, (n, N, N))
    K = rng.uniform(0.3, 2.5, (n, N, N))
    x = rng.normal(0, 1.2, (n, N))
    return A, W, B, K, x


def _f_att(W, B, A, K, x, act):
    """F_att = -sum_i ln sum_{j in pre(i)} exp(-1/2 k_ij eps_ij^2): each neuron's log-sum-exp written
    out, shifted by its largest present term; neurons without inputs contribute 0."""
    s = -0.5 * K * (x[:, None] - W * _f(x, act)[None, :] - B) ** 2  # s[i, j], synapse j -> i
    top = jnp.max(jnp.where(A, s, -1e300), axis=1, keepdims=True)
    lse = top[:, 0] + jnp.log(
        jnp.sum(jnp.where(A, jnp.exp(jnp.where(A, s - top, 0.0)), 0.0), axis=1) + ~jnp.any(A, axis=1)
    )  # + 1 in empty rows: log 1 = 0, no -inf
    return -jnp.sum(jnp.where(jnp.any(A, axis=1), lse, 0.0))


def _f_std(W, B, A, K, x, act):
    """F_std = sum over synapses j -> i of 1/2 k_ij eps_ij^2."""
    return jnp.sum(jnp.where(A, 0.5 * K * (x[:, None] - W * _f(x, act)[None, :] - B) ** 2, 0.0))


def _alpha_np(W, B, A, K, x, act):
    """alpha_ij = softmax over pre(i) of -1/2 k_ij eps_ij^2, in numpy, row by row."""
    f = np.tanh if act == "tanh" else (lambda v: v)
    N = x.size
    alpha, eps = np.zeros((N, N)), np.zeros((N, N))
    for i in range(N):
        pre = np.flatnonzero(A[i])
        e = x[i] - W[i, pre] * f(x[pre]) - B[i, pre]
        eps[i, pre] = e
        if pre.size:
            s = -0.5 * K[i, pre] * e**2
            p = np.exp(s - s.max())
            alpha[i, pre] = p / p.sum()
    return alpha, eps


def _jit_vmap(fun, act):
    return jax.jit(jax.vmap(lambda W, B, A, K, x: fun(W, B, A, K, x, act)))


_GRADS = {
    act: (_jit_vmap(jax.grad(_f_att, argnums=4), act), _jit_vmap(jax.grad(_f_std, argnums=4), act))
    for act in ("tanh", "linear")
}


@functools.cache
def _pkg(name, act):
    """The package function ``name`` of (Params(W, B, A), x, K), jitted and vmapped over networks."""
    fun = getattr(anpc, name)
    return jax.jit(jax.vmap(lambda W, B, A, K, x: fun(anpc.Params(W, B, A), x, K, activation=act)))


@functools.cache
def _pkg_lipschitz(act, radius):
    return jax.jit(
        jax.vmap(lambda W, B, A, K, c: anpc.lipschitz(anpc.Params(W, B, A), K, clamp=c, activation=act, radius=radius))
    )


# --- anpc-marg --------------------------------------------------------------------------------


def test_uniform_synapse_prior_marginalises_to_lse_energy():
    """ch13, anpc-marg, on 100 random networks of 3 or 5 neurons x {tanh, linear}: the sum over
    every choice c of one input per neuron of prod_i |pre(i)|^-1 exp(-F_std(c)), enumerated
    in numpy, equals exp(-F_att) / prod_i |pre(i)| (anpc.energy), and the posterior marginals
    p(c_i = j | x) equal anpc.attention. Condition (uniform prior): with a random non-uniform
    prior over each neuron's inputs the enumerated posterior marginals are not alpha."""
    rng = np.random.default_rng(1301)
    worst_Z = worst_post = 0.0
    nonuniform_gaps = []
    n_checked = 0
    for N in (3, 5):
        A, W, B, K, x = _draw(rng, N, PER_SIZE)
        for act in ("tanh", "linear"):
            F_pkg = np.asarray(_pkg("energy", act)(W, B, A, K, x))
            al_pkg = np.asarray(_pkg("attention", act)(W, B, A, K, x))
            f = np.tanh if act == "tanh" else (lambda v: v)
            for n in range(PER_SIZE):
                kids = [i for i in range(N) if A[n, i].any()]
                if not kids:
                    continue
                pres = [np.flatnonzero(A[n, i]) for i in kids]
                # per-synapse log-likelihood terms -1/2 k eps^2, then every structure at once
                S = np.full((N, N), -np.inf)
                for i, pre in zip(kids, pres):
                    S[i, pre] = -0.5 * K[n, i, pre] * (x[n, i] - W[n, i, pre] * f(x[n, pre]) - B[n, i, pre]) ** 2
                choices = np.array(list(itertools.product(*pres)))  # (n_structures, n_kids)
                log_prior = -sum(np.log(len(p)) for p in pres)
                log_terms = log_prior + S[kids, choices].sum(1)  # ln[prod |pre|^-1 exp(-F_std(c))]
                log_Z = np.logaddexp.reduce(log_terms)
                worst_Z = max(worst_Z, abs(log_Z - (log_prior - F_pkg[n])) / max(1.0, abs(F_pkg[n])))
                post = np.exp(log_terms - log_Z)
                for m, (i, pre) in enumerate(zip(kids, pres)):
                    for j in pre:
                        worst_post = max(worst_post, abs(post[choices[:, m] == j].sum() - al_pkg[n, i, j]))
                n_checked += 1
                # a non-uniform prior: Dirichlet(1) weights over each neuron's inputs
                if max(len(p) for p in pres) >= 2:
                    logp = [np.log(rng.dirichlet(np.ones(len(p)))) for p in pres]
                    lt = S[kids, choices].sum(1) + sum(
                        logp[m][np.searchsorted(pres[m], choices[:, m])] for m in range(len(kids))
                    )
                    q = np.exp(lt - np.logaddexp.reduce(lt))
                    nonuniform_gaps.append(
                        max(
                            abs(q[choices[:, m] == j].sum() - al_pkg[n, i, j])
                            for m, (i, pre) in enumerate(zip(kids, pres))
                            for j in pre
                        )
                    )
    assert n_checked >= 100
    assert worst_Z < 1e-12 and worst_post < 1e-12
    assert len(nonuniform_gaps) >= 100 and np.mean(np.array(nonuniform_gaps) > 1e-3) >= 0.95


# --- anpc-grad --------------------------------------------------------------------------------


def test_attention_normalised_dynamics_is_the_energy_gradient():
    """ch13, anpc-grad, on 100 random networks x {tanh, linear} with per-synapse precisions and
    self-synapses: the dynamics -sum_pre alpha k eps + f'(x_i) sum_post alpha k eps w, written as
    a numpy loop over neurons and synapses, equals -jax.grad of the independently written F_att;
    with every alpha = 1 it equals -jax.grad of the independent F_std. anpc.grad_x and
    anpc.grad_x_standard agree with the same autodiff gradients."""
    rng = np.random.default_rng(1302)
    worst = {"formula_att": 0.0, "formula_std": 0.0, "pkg_att": 0.0, "pkg_std": 0.0}
    for N in SIZES:
        A, W, B, K, x = _draw(rng, N, PER_SIZE)
        for act in ("tanh", "linear"):
            g_att, g_std = (np.asarray(g(W, B, A, K, x)) for g in _GRADS[act])
            pkg_att = np.asarray(_pkg("grad_x", act)(W, B, A, K, x))
            pkg_std = np.asarray(_pkg("grad_x_standard", act)(W, B, A, K, x))
            fp = (lambda v: 1 - np.tanh(v) ** 2) if act == "tanh" else np.ones_like
            for n in range(PER_SIZE):
                alpha, eps = _alpha_np(W[n], B[n], A[n], K[n], x[n], act)
                for name, a, auto in (("formula_att", alpha, g_att[n]), ("formula_std", A[n] * 1.0, g_std[n])):
                    xdot = np.zeros(N)
                    for i in range(N):
                        for j in np.flatnonzero(A[n, i]):  # errors neuron i receives
                            xdot[i] -= a[i, j] * K[n, i, j] * eps[i, j]
                        for l in np.flatnonzero(A[n, :, i]):  # errors neuron i causes at l
                            xdot[i] += fp(x[n, i]) * a[l, i] * K[n, l, i] * eps[l, i] * W[n, l, i]
                    worst[name] = max(worst[name], relative_error(-xdot, auto))
                worst["pkg_att"] = max(worst["pkg_att"], relative_error(pkg_att[n], g_att[n]))
                worst["pkg_std"] = max(worst["pkg_std"], relative_error(pkg_std[n], g_std[n]))
    assert max(worst.values()) < 1e-12, worst


# --- anpc-prec --------------------------------------------------------------------------------


def test_softmax_is_a_precision():
    """ch13, anpc-prec, on 100 random networks x {tanh, linear}: jax.grad of the independent F_att
    equals jax.grad of the independent F_std with per-synapse precisions kappa = k * alpha(x)
    (alpha from a numpy softmax, held fixed), and anpc.effective_precisions is that kappa."""
    rng = np.random.default_rng(1303)
    worst_grad = worst_kappa = 0.0
    for N in SIZES:
        A, W, B, K, x = _draw(rng, N, PER_SIZE)
        for act in ("tanh", "linear"):
            g_att, g_std = _GRADS[act]
            kappa = np.stack([K[n] * _alpha_np(W[n], B[n], A[n], K[n], x[n], act)[0] for n in range(PER_SIZE)])
            a = np.asarray(g_att(W, B, A, K, x))
            b = np.asarray(g_std(W, B, A, kappa, x))
            worst_grad = max(worst_grad, (np.abs(a - b).max(1) / np.abs(a).max(1)).max())
            eff = np.asarray(_pkg("effective_precisions", act)(W, B, A, K, x))
            worst_kappa = max(worst_kappa, np.abs(np.where(A, eff, 0.0) - kappa).max())
    assert worst_grad < 1e-12 and worst_kappa < 1e-13


KMAX = 8  # inputs of the single neuron, padded: input j is present where mask[j]


def _star_energy(v, u, k, w, b, mask, z, wz, kz):
    """F_att of a free neuron v with clamped inputs u_j (weights w_j, biases b_j, precisions k_j,
    present where mask), plus, if kz > 0, an outgoing synapse predicting a clamped neuron z = wz v."""
    s = -0.5 * k * (v - w * u - b) ** 2
    return -jax.scipy.special.logsumexp(s, b=mask) + 0.5 * kz * (z - wz * v) ** 2


_star_grad = jax.jit(jax.grad(_star_energy))
_star_grad_grid = jax.jit(jax.vmap(jax.grad(_star_energy), in_axes=(0,) + (None,) * 8))


def _stationary_points(args, lo, hi, n_grid=2000):
    """Every sign change of dF/dv on a grid of [lo, hi], refined by brentq."""
    grid = np.linspace(lo, hi, n_grid)
    d = np.asarray(_star_grad_grid(grid, *args))
    return [
        scipy.optimize.brentq(lambda v: float(_star_grad(v, *args)), grid[t], grid[t + 1], xtol=1e-14, rtol=1e-15)
        for t in np.flatnonzero(np.sign(d[:-1]) != np.sign(d[1:]))
    ]


def _weighted_mean(v, u, k, mask, w=1.0, b=0.0):
    """The statement's sum_j alpha_j k_j u_j / sum_j alpha_j k_j, with the attention at v,
    alpha = softmax over the inputs of -1/2 k (v - w u - b)^2."""
    s = np.where(mask, -0.5 * k * (v - w * u - b) ** 2, -np.inf)
    a = np.exp(s - s.max())
    a /= a.sum()
    return np.sum(a * k * u) / np.sum(a * k)


def test_clamped_input_equilibrium_is_the_weighted_mean():
    """ch13, anpc-prec (second part), on 100 random single neurons with 2 to 8 clamped linear inputs
    (w = 1, b = 0, random per-synapse precisions) and no outgoing synapse: every stationary point of
    F_att in x (all sign changes of jax.grad of the independent energy on a grid, refined by
    brentq) is the weighted mean sum alpha k u / sum alpha k. Conditions: with random w, b it is
    not (it is the weighted mean of the predictions w u + b); and when the neuron also predicts a
    clamped postsynaptic neuron (an outgoing synapse, the condition the statement had left out)
    it is not either.

    The package against the same oracle, on every instance: the star network as ``anpc.Params``
    (neuron 0 free, inputs 1..8 clamped, absent ones unconnected), ``anpc.grad_x`` vanishes at
    every root, the weighted mean built from ``anpc.effective_precisions`` at each root is that
    root, and ``anpc.infer`` (step 1/``anpc.lipschitz``), started at the mean of the inputs,
    ends on one of the roots."""
    rng = np.random.default_rng(1304)
    worst, n_roots, gaps_wb, gaps_post = 0.0, 0, [], []
    pkg_grad, pkg_mean, pkg_infer = 0.0, 0.0, 0.0
    N = KMAX + 1
    clamp = np.arange(N) > 0
    for _ in range(100):
        K = int(rng.integers(2, KMAX + 1))
        mask = np.arange(KMAX) < K
        u = np.where(mask, rng.normal(0, 1.0, KMAX) * rng.uniform(0.5, 4.0), 0.0)
        k = rng.uniform(0.3, 3.0, KMAX)
        one, zero = np.ones(KMAX), np.zeros(KMAX)

        lo, hi = u[mask].min() - 1, u[mask].max() + 1
        roots = _stationary_points((u, k, one, zero, mask, 0.0, 0.0, 0.0), lo, hi)
        assert roots
        n_roots += len(roots)
        worst = max(worst, max(abs(r - _weighted_mean(r, u, k, mask)) for r in roots) / np.abs(u).max())
        # the package on the same neuron
        params = anpc.Params(
            jnp.ones((N, N)), jnp.zeros((N, N)), jnp.zeros((N, N), bool).at[0, 1:].set(jnp.asarray(mask))
        )
        prec = jnp.ones((N, N)).at[0, 1:].set(jnp.asarray(k))
        xr = jnp.asarray([np.concatenate([[r], u]) for r in roots])
        g = np.asarray(anpc.grad_x(params, xr, prec, activation="linear"))[:, 0]
        pkg_grad = max(pkg_grad, np.abs(g).max() / (k[mask].max() * (hi - lo)))
        kappa = np.asarray(anpc.effective_precisions(params, xr, prec, activation="linear"))[:, 0, 1:]
        means = (kappa * u).sum(-1) / kappa.sum(-1)
        pkg_mean = max(pkg_mean, np.abs(means - np.asarray(roots)).max() / np.abs(u).max())
        L = float(anpc.lipschitz(params, prec, clamp=jnp.asarray(clamp), activation="linear"))
        x0 = jnp.asarray(np.concatenate([[u[mask].mean()], u]))
        end = anpc.infer(params, x0, prec, clamp=jnp.asarray(clamp), n_steps=4000, step_size=1 / L, activation="linear")
        pkg_infer = max(pkg_infer, min(abs(float(end.x[0]) - r) for r in roots) / np.abs(u).max())
        # condition w = 1, b = 0 dropped
        w, b = rng.normal(1.0, 0.5, KMAX), rng.normal(0, 0.5, KMAX)
        pred = (w * u + b)[mask]
        r = _stationary_points((u, k, w, b, mask, 0.0, 0.0, 0.0), pred.min() - 1, pred.max() + 1)
        gaps_wb.append(min(abs(v - _weighted_mean(v, u, k, mask, w, b)) for v in r))
        # condition "no outgoing synapse" dropped: v also predicts a clamped neuron z with weight wz
        z, wz, kz = rng.normal(0, 2.0), rng.normal(0, 1.0), rng.uniform(0.3, 3.0)
        # every stationary point solves (a + kz wz^2) v = a u_bar + kz wz z with a = sum alpha k >= min k
        # and u_bar within the inputs, so |v| <= max |u| + |z| sqrt(kz / min k) / 2
        edge = np.abs(u).max() + abs(z) * np.sqrt(kz / k[mask].min()) / 2 + 1
        r = _stationary_points((u, k, one, zero, mask, z, wz, kz), -edge, edge, n_grid=4000)
        gaps_post.append(min(abs(v - _weighted_mean(v, u, k, mask)) for v in r))
    assert n_roots >= 100 and worst < 1e-12
    assert pkg_grad < 1e-12 and pkg_mean < 1e-12 and pkg_infer < 1e-10
    assert np.mean(np.array(gaps_wb) > 1e-3) >= 0.9
    assert np.mean(np.array(gaps_post) > 1e-3) >= 0.9


# --- anpc-bound -------------------------------------------------------------------------------


def _bound_loop(W, B, A, K, clamp, act, R):
    """L = max over free n of 2 max_{j in pre(n)} k_nj + sum_{i in post(n)} k_in (2 w_in^2 + c_in)."""
    N = W.shape[0]
    L = 0.0
    for n in range(N):
        if clamp[n]:
            continue
        pre = np.flatnonzero(A[n])
        own = 2 * K[n, pre].max() if pre.size else 0.0
        down = 0.0
        for i in np.flatnonzero(A[:, n]):
            c = TANH2_MAX * abs(W[i, n]) * (R + abs(W[i, n]) + abs(B[i, n])) if act == "tanh" else 0.0
            down += K[i, n] * (2 * W[i, n] ** 2 + c)
        L = max(L, own + down)
    return L


_HESS = {
    act: jax.jit(jax.vmap(jax.hessian(lambda W, B, A, K, x, a=act: _f_att(W, B, A, K, x, a), argnums=4)))
    for act in ("tanh", "linear")
}
_ENERGY = {act: _jit_vmap(_f_att, act) for act in ("tanh", "linear")}


def test_step_size_bound_cannot_increase_the_energy():
    """ch13, anpc-bound, on 100 random networks x {tanh (R = 3), linear} with random clamps: the bound
    L written as a loop equals anpc.lipschitz; the largest eigenvalue of jax.hessian of the
    independent F_att on the free neurons is at most L at 3 random states each (inside the box
    |x| <= R for tanh); a gradient step with eta = 2/L does not increase F_att (tanh: only steps
    that stay in the box, at least 100). Condition eta <= 2/L: on 100 random pairs of free neurons
    joined by one linear synapse with w = +-1 (where L is the exact curvature), eta = 2/L leaves
    F_att unchanged and eta = 1.1 * 2/L increases it."""
    rng = np.random.default_rng(1305)
    R = 3.0
    worst_L, worst_eig, worst_rise, n_steps = 0.0, -np.inf, -np.inf, {"tanh": 0, "linear": 0}
    for N in SIZES:
        A, W, B, K, _ = _draw(rng, N, PER_SIZE)
        clamp = rng.random((PER_SIZE, N)) < 0.35
        for act in ("tanh", "linear"):
            L_pkg = np.asarray(_pkg_lipschitz(act, R)(W, B, A, K, clamp))
            L = np.array([_bound_loop(W[n], B[n], A[n], K[n], clamp[n], act, R) for n in range(PER_SIZE)])
            worst_L = max(worst_L, np.abs(L - L_pkg).max() / L.max())
            for _ in range(3):
                x = rng.uniform(-R, R, (PER_SIZE, N)) if act == "tanh" else rng.normal(0, 2.0, (PER_SIZE, N))
                H = np.asarray(_HESS[act](W, B, A, K, x))
                g = np.asarray(_GRADS[act][0](W, B, A, K, x)) * ~clamp
                for n in range(PER_SIZE):
                    free = ~clamp[n]
                    if free.any() and L[n] > 0:
                        lam = np.linalg.eigvalsh(H[n][np.ix_(free, free)]).max()
                        worst_eig = max(worst_eig, (lam - L[n]) / L[n])
                safe = np.where(L > 0, L, 1.0)
                x_new = x - (2 / safe)[:, None] * g
                inside = np.ones(PER_SIZE, bool) if act == "linear" else np.all(np.abs(x_new) <= R, 1)
                F0, F1 = (np.asarray(_ENERGY[act](W, B, A, K, v)) for v in (x, x_new))
                ok = inside & (L > 0)
                n_steps[act] += int(ok.sum())
                worst_rise = max(worst_rise, ((F1 - F0) / np.maximum(np.abs(F0), 1.0))[ok].max())
    assert worst_L < 1e-13
    assert worst_eig <= 1e-12  # the Hessian on the free neurons is <= L I
    assert min(n_steps.values()) >= 100 and worst_rise <= 1e-12  # a 2/L step never raised F_att

    # condition eta <= 2/L: two free neurons, j -> i, w = +-1, where the bound is the exact curvature 2k
    n = 100
    A = np.zeros((n, 2, 2), bool)
    A[:, 1, 0] = True
    W = np.zeros((n, 2, 2))
    W[:, 1, 0] = rng.choice([-1.0, 1.0], n)
    B = np.zeros((n, 2, 2))
    B[:, 1, 0] = rng.normal(0, 0.5, n)
    K = np.broadcast_to(rng.uniform(0.3, 3.0, (n, 1, 1)), (n, 2, 2)).copy()
    x = rng.normal(0, 2.0, (n, 2))
    L = np.array([_bound_loop(W[t], B[t], A[t], K[t], np.zeros(2, bool), "linear", 0.0) for t in range(n)])
    assert np.allclose(L, 2 * K[:, 1, 0], rtol=1e-14)
    g = np.asarray(_GRADS["linear"][0](W, B, A, K, x))
    F0 = np.asarray(_ENERGY["linear"](W, B, A, K, x))
    F_at = np.asarray(_ENERGY["linear"](W, B, A, K, x - (2 / L)[:, None] * g))
    F_above = np.asarray(_ENERGY["linear"](W, B, A, K, x - (2.2 / L)[:, None] * g))
    assert np.all(np.abs(F_at - F0) <= 1e-10 * F0) and np.all(F_above > 1.1 * F0)
