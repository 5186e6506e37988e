"""Propositions of chapter 10 (restricted Boltzmann machines), checked independently.

Each test checks one proposition on at least 100 random RBMs (float64, values drawn from
NumPy generators with fixed seeds) against a computation that does not share the
package's formula: brute-force enumeration of every hidden (and visible) state with the
joint energy written here, and complex-step derivatives of those enumerated sums (exact
to round-off, no autodiff). Where a proposition needs a condition, the test also shows
it failing without it. Sizes come from a few fixed shapes and the package's functions are
called through ``jax.jit`` (the same code, compiled once per shape); values are fresh for
every instance.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import rbm
from tests.support import complex_step, relative_error_l2

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
SHAPES = [(3, 2), (5, 4), (4, 6), (6, 3)]  # (m visible, n hidden)

# the package's functions under test, jitted once per shape
free_energy, hidden_probs, energy_gap = jax.jit(rbm.energy), jax.jit(rbm.hidden_probs), jax.jit(rbm.energy_gap)
grad_v, grad_params = jax.jit(rbm.grad_v), jax.jit(rbm.grad_params)
grad_log_likelihood = jax.jit(rbm.grad_log_likelihood_params)


def states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def joint_energy(W, b, c, v, h):
    """E(v, h) = -sum_ij v_i W_ij h_j - sum_i b_i v_i - sum_j c_j h_j, term by term."""
    m, n = W.shape
    return -(
        sum(v[i] * W[i, j] * h[j] for i in range(m) for j in range(n))
        + sum(b[i] * v[i] for i in range(m))
        + sum(c[j] * h[j] for j in range(n))
    )


def lse(z):
    top = np.max(np.real(z))
    return top + np.log(np.sum(np.exp(z - top)))


def neg_joint(W, b, c, vs, hs):
    """-E(v, h) for every pair of rows of vs and hs, as a (len(vs), len(hs)) table (complex-safe)."""
    return vs @ W @ hs.T + (vs @ b)[:, None] + (hs @ c)[None, :]


def free_energy_enum(W, b, c, v):
    """F(v) = -ln sum_h exp(-E(v, h)) over all 2^n hidden states (complex-safe)."""
    return -lse(neg_joint(W, b, c, np.atleast_2d(v), states(W.shape[1]))[0])


def mean_free_energy(W, b, c, data):
    return np.mean([free_energy_enum(W, b, c, v) for v in data])


def log_likelihood_enum(W, b, c, data):
    """Mean ln q(v_k) = mean_k [-F(v_k)] - ln Z, Z summed over all 2^(m+n) joint states."""
    hs = states(W.shape[1])
    log_z = lse(neg_joint(W, b, c, states(W.shape[0]), hs).ravel())
    per_row = [lse(row) for row in neg_joint(W, b, c, data, hs)]
    return np.mean(per_row) - log_z


def instances(seed):
    rng = np.random.default_rng(seed)
    for k, (m, n) in zip(range(N_INSTANCES), itertools.cycle(SHAPES)):
        scale = rng.uniform(0.2, 2.0)
        W = scale * rng.normal(size=(m, n))
        b, c = rng.normal(size=m), rng.normal(size=n)
        yield k, rng, W, b, c


def params(W, b, c):
    return rbm.Params(jnp.asarray(W), jnp.asarray(b), jnp.asarray(c))


# ---------------------------------------------------------------------------
# rbm-free-energy
# ---------------------------------------------------------------------------


def test_free_energy_and_posterior_match_enumeration_over_hidden_states():
    """rbm-free-energy: for 100 random RBMs and, each, a real-valued and a binary v,
    F(v) equals -ln sum_h exp(-E(v, h)) over all 2^n hidden states; P(h | v) from that
    enumeration equals prod_j P(h_j | v) with P(h_j = 1 | v) = ``hidden_probs``; and
    sigma(-Delta E(h_j)), with Delta E from flipping h_j in E, gives the same numbers."""
    worst = 0.0
    for _, rng, W, b, c in instances(1000):
        m, n = W.shape
        vs = np.stack([2.0 * rng.normal(size=m), rng.integers(0, 2, m).astype(float)])
        p = params(W, b, c)
        F_pkg = np.asarray(free_energy(p, vs))
        ph_pkg = np.asarray(hidden_probs(p, vs))
        gap_pkg = np.asarray(energy_gap(p, vs, np.zeros((2, n))).hidden)
        hs = states(n)
        for r, v in enumerate(vs):
            neg_e = np.array([-joint_energy(W, b, c, v, h) for h in hs])
            F = -lse(neg_e)
            post = np.exp(neg_e + F)
            worst = max(worst, abs(F_pkg[r] - F) / max(1.0, abs(F)))
            product = np.prod(np.where(hs == 1, ph_pkg[r], 1 - ph_pkg[r]), axis=1)
            worst = max(worst, np.max(np.abs(post - product)), np.max(np.abs(post @ hs - ph_pkg[r])))
            h0 = np.zeros(n)
            flips = np.array([joint_energy(W, b, c, v, np.eye(n)[j]) - joint_energy(W, b, c, v, h0) for j in range(n)])
            worst = max(
                worst,
                np.max(np.abs(1 / (1 + np.exp(flips)) - post @ hs)),
                np.max(np.abs(gap_pkg[r] - flips)) / max(1.0, np.max(np.abs(flips))),
            )
    assert worst < 1e-12, worst


def test_posterior_does_not_factorise_with_hidden_hidden_couplings():
    """rbm-free-energy, the condition (no hidden-hidden edges): add -h^T L h to the energy
    and, on 100 random instances, the enumerated F(v) leaves -b.v - sum_j softplus(s_j)
    and P(h | v) is no longer the product of its marginals."""
    rng = np.random.default_rng(1001)
    gaps_f, gaps_p = [], []
    for _ in range(N_INSTANCES):
        m, n = int(rng.integers(2, 6)), int(rng.integers(2, 5))
        W, b, c = rng.normal(size=(m, n)), rng.normal(size=m), rng.normal(size=n)
        L = np.triu(rng.normal(size=(n, n)), 1)
        v = rng.integers(0, 2, m).astype(float)
        hs = states(n)
        neg_e = np.array([-joint_energy(W, b, c, v, h) + h @ L @ h for h in hs])
        post = np.exp(neg_e - lse(neg_e))
        s = v @ W + c
        gaps_f.append(abs(-lse(neg_e) - (-(b @ v) - np.sum(np.logaddexp(0, s)))))
        marg = post @ hs
        gaps_p.append(np.max(np.abs(post - np.prod(np.where(hs == 1, marg, 1 - marg), axis=1))))
    assert min(gaps_f) > 1e-6 and min(gaps_p) > 1e-6, (min(gaps_f), min(gaps_p))


# ---------------------------------------------------------------------------
# rbm-gradients
# ---------------------------------------------------------------------------


def test_free_energy_and_log_likelihood_gradients_match_complex_steps():
    """rbm-gradients: on 100 random RBMs, dF/dv (real-valued v), the positive-phase
    gradients dF/dW, dF/db, dF/dc of the mean free energy of a small binary batch, and the
    exact log-likelihood gradient (Z over all 2^(m+n) joint states) equal complex-step
    derivatives of the enumerated sums; the package's positive-minus-negative-phase
    formula and the proposition's <v p(v)^T>_data - <v p(v)^T>_model agree with them
    (relative error < 1e-10)."""
    worst = 0.0
    for _, rng, W, b, c in instances(1002):
        m = W.shape[0]
        p = params(W, b, c)
        v_real = rng.normal(size=m)
        auto = complex_step(free_energy_enum, (W, b, c, v_real), 3)
        sig = 1 / (1 + np.exp(-(v_real @ W + c)))
        for got in (np.asarray(grad_v(p, v_real)), -b - W @ sig):
            worst = max(worst, relative_error_l2(got, auto))

        data = rng.integers(0, 2, (3, m)).astype(float)
        positive = grad_params(p, data)
        for argnum, name in enumerate("Wbc"):
            auto = complex_step(mean_free_energy, (W, b, c, data), argnum)
            worst = max(worst, np.linalg.norm(np.asarray(getattr(positive, name)) - auto) / np.linalg.norm(auto))

        exact = grad_log_likelihood(p, data)
        vs = states(m)
        f_all = np.array([free_energy_enum(W, b, c, v) for v in vs])
        q = np.exp(-f_all - lse(-f_all))
        p_all, p_data = 1 / (1 + np.exp(-(vs @ W + c))), 1 / (1 + np.exp(-(data @ W + c)))
        phases = {
            "W": data.T @ p_data / len(data) - (vs.T * q) @ p_all,
            "b": data.mean(0) - q @ vs,
            "c": p_data.mean(0) - q @ p_all,
        }
        for argnum, name in enumerate("Wbc"):
            auto = complex_step(log_likelihood_enum, (W, b, c, data), argnum)
            scale = max(np.linalg.norm(auto), 1e-3)
            worst = max(
                worst,
                np.linalg.norm(np.asarray(getattr(exact, name)) - auto) / scale,
                np.linalg.norm(phases[name] - auto) / scale,
            )
    assert worst < 1e-10, worst
