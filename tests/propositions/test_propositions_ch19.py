"""Propositions of chapter 19 (adversarial attacks and TRADES), checked independently.

Each test checks one proposition on at least 100 random instances (float64, NumPy
generators with fixed seeds) against a computation that does not share the package's
formula: brute-force enumeration of the vertices of an L-infinity ball, complex-step
derivatives of a NumPy cross-entropy, mpmath at 50 digits. Where a proposition needs a
condition, the test also shows it failing without it. The package's functions are called
through ``jax.jit`` (compiled once per shape); values are fresh for every instance.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np

from lse_energy import adversarial as adv
from tests.support import complex_step_grad

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
D, H, K = 6, 5, 4

fgsm = jax.jit(adv.fgsm, static_argnames=("targeted", "box"))
grad_x = jax.jit(adv.grad_x)
kl_softmax = jax.jit(adv.kl_softmax)
inner_maximize = jax.jit(adv.inner_maximize, static_argnames=("n_steps", "monotone", "box"))


def random_instance(rng, k=K, n=1):
    s = rng.uniform(0.5, 4.0)
    p = adv.Params(
        W1=jnp.asarray(s * rng.normal(size=(D, H)) / np.sqrt(D)),
        b1=jnp.asarray(rng.normal(size=H)),
        W2=jnp.asarray(s * rng.normal(size=(H, k)) / np.sqrt(H)),
        b2=jnp.asarray(rng.normal(size=k)),
    )
    x = rng.uniform(0.0, 1.0, (n, D))
    t = rng.choice([-1, 1], n) if k == 1 else rng.integers(0, k, n)
    return p, jnp.asarray(x), jnp.asarray(t)


def np_logits(p, x):
    """Logits in plain NumPy (complex-safe)."""
    W1, b1, W2, b2 = (np.asarray(a) for a in p)
    return np.tanh(x @ W1 + b1) @ W2 + b2


def np_cross_entropy(p, x, t):
    z = np_logits(p, x)
    top = np.max(np.real(z))
    return top + np.log(np.sum(np.exp(z - top))) - z[t]


VERTICES = np.array(list(itertools.product([-1.0, 1.0], repeat=D)))


def test_fgsm_maximises_linearised_loss():
    """FGSM's step eps*sign(grad) maximises the linearised loss g.delta over ||delta||_inf <= eps.

    Oracle: the gradient by complex steps of a NumPy cross-entropy, and the maximum of
    g.delta over all 2^D vertices of the ball (a linear function's maximum over a box is at
    a vertex), plus random points of the ball, which never exceed it. Without the condition
    (the L2 ball of the same radius) the sign step is not the maximiser: eps*g/||g||_2 beats it.
    """
    rng = np.random.default_rng(0)
    for _ in range(N_INSTANCES):
        p, x, t = random_instance(rng)
        eps = rng.uniform(0.01, 0.5)
        g = complex_step_grad(lambda y, p=p, t=t: np_cross_entropy(p, y, int(t[0])), np.asarray(x[0]))
        delta = np.asarray(fgsm(p, x, t, eps))[0] - np.asarray(x[0])
        best = np.max(eps * VERTICES @ g)
        assert np.isclose(g @ delta, best, rtol=1e-12)
        interior = rng.uniform(-eps, eps, (500, D))
        assert np.all(interior @ g <= g @ delta + 1e-15)
        # without the L-infinity condition: over the L2 ball the maximiser is eps g / ||g||_2
        sign_l2 = eps * np.sign(g) / np.linalg.norm(np.sign(g))
        assert eps * np.linalg.norm(g) >= g @ sign_l2 - 1e-15
        if np.count_nonzero(np.abs(g) > 1e-8 * np.max(np.abs(g))) > 1 and np.ptp(np.abs(g)) > 1e-6:
            assert eps * np.linalg.norm(g) > g @ sign_l2


def test_input_gradient_is_softmax_weighted_sum():
    """grad_x CE = sum_j softmax_j grad_x z_j - grad_x z_t equals the complex-step gradient of
    ln sum_j exp z_j - z_t computed in NumPy."""
    rng = np.random.default_rng(1)
    for _ in range(N_INSTANCES):
        p, x, t = random_instance(rng)
        g = complex_step_grad(lambda y, p=p, t=t: np_cross_entropy(p, y, int(t[0])), np.asarray(x[0]))
        np.testing.assert_allclose(np.asarray(grad_x(p, x, t))[0], g, rtol=1e-10, atol=1e-13)


def test_softplus_is_two_term_lse():
    """g(u) = ln(1 + e^{-u}) = ln(e^0 + e^{-u}) (mpmath, 50 digits), and g(u) >= ln 2 * 1[u <= 0]."""
    rng = np.random.default_rng(2)
    u = np.concatenate([rng.normal(scale=5.0, size=N_INSTANCES), rng.uniform(-60, 60, N_INSTANCES)])
    got = np.asarray(adv.softplus_surrogate(jnp.asarray(u)))
    with mpmath.workdps(50):
        ref = np.array([float(mpmath.log(mpmath.exp(0) + mpmath.exp(-mpmath.mpf(v)))) for v in u])
    np.testing.assert_allclose(got, ref, rtol=1e-14)
    assert np.all(got >= np.log(2.0) * (u <= 0))


def test_kl_form_nonnegative_zero_iff_shift():
    """KL(softmax z || softmax z') >= 0 (mpmath), = 0 for z' = z + c, and > 0 when z' is not a shift of z."""
    rng = np.random.default_rng(3)
    for _ in range(N_INSTANCES):
        z = rng.normal(scale=rng.uniform(0.1, 5.0), size=(1, K))
        za = z + rng.normal(scale=rng.uniform(0.01, 3.0), size=(1, K))
        with mpmath.workdps(50):
            lz = [mpmath.mpf(v) for v in z[0]]
            lq = [mpmath.mpf(v) for v in za[0]]
            lse_z, lse_q = mpmath.log(sum(mpmath.exp(v) for v in lz)), mpmath.log(sum(mpmath.exp(v) for v in lq))
            ref = float(sum(mpmath.exp(a - lse_z) * ((a - lse_z) - (b - lse_q)) for a, b in zip(lz, lq)))
        got = float(kl_softmax(jnp.asarray(z), jnp.asarray(za))[0])
        assert ref > 0 and got >= 0
        assert np.isclose(got, ref, rtol=1e-9, atol=1e-15)
        c = rng.normal(scale=10.0)
        assert abs(float(kl_softmax(jnp.asarray(z), jnp.asarray(z + c))[0])) < 1e-13


def test_monotone_inner_ascent():
    """The accept-if-improves ascent never lowers the inner loss and stays in the ball and box;
    plain projected sign ascent (the condition dropped) lowers it on some instances.

    Oracle: the inner loss recomputed in NumPy at the returned X' (KL for K >= 2, g(f f') for K = 1),
    and the ball/box checked coordinatewise.
    """
    rng = np.random.default_rng(4)
    plain_decreases = 0
    for i in range(N_INSTANCES):
        k = 1 if i % 2 else K
        p, x, _ = random_instance(rng, k=k, n=8)
        eps, step = rng.uniform(0.05, 0.4), rng.uniform(0.05, 0.5)
        key = jax.random.key(i)
        mono = inner_maximize(p, x, eps, key=key, step_size=step, n_steps=10, box=(0.0, 1.0))
        assert np.all(np.diff(np.asarray(mono.losses), axis=0) >= 0)
        xa = np.asarray(mono.x_adv)
        assert np.all(np.abs(xa - np.asarray(x)) <= eps + 1e-15) and np.all((xa >= 0) & (xa <= 1))
        z, za = np_logits(p, np.asarray(x)), np_logits(p, xa)
        if k == 1:
            ref = np.logaddexp(0.0, -z[:, 0] * za[:, 0])
        else:
            lp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
            lq = za - np.log(np.sum(np.exp(za), axis=1, keepdims=True))
            ref = np.sum(np.exp(lp) * (lp - lq), axis=1)
        np.testing.assert_allclose(np.asarray(mono.losses[-1]), ref, rtol=1e-9, atol=1e-14)
        plain = inner_maximize(p, x, eps, key=key, step_size=step, n_steps=10, monotone=False, box=(0.0, 1.0))
        plain_decreases += int(np.any(np.diff(np.asarray(plain.losses), axis=0) < 0))
    assert plain_decreases > 0


def test_paired_interval_of_the_stored_run_is_students_t():
    """``adversarial_digits.mean_interval``, which decides the chapter's paired verdicts, against
    scipy's one-sample t-test confidence interval on 100 random samples (and its bad input)."""
    import pytest
    from scipy.stats import ttest_1samp

    from lse_energy.experiments import adversarial_digits as ad

    rng = np.random.default_rng(19)
    for _ in range(N_INSTANCES):
        v = rng.normal(rng.normal(), rng.uniform(0.01, 2.0), size=rng.integers(2, 30))
        m, lo, hi = ad.mean_interval(v)
        ci = ttest_1samp(v, 0.0).confidence_interval(0.95)
        np.testing.assert_allclose([m, lo, hi], [v.mean(), ci.low, ci.high], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="at least 2"):
        ad.mean_interval([1.0])


def test_binary_trades_prices_every_decision_boundary():
    """adv-binary-boundary. (i) Where the score changes sign inside the ball, the inner maximum of
    g(f(X) f(X')) is at least g(0) = ln 2. (ii) A constant score f = c makes the notes' joint loss
    pi g(c) + (1 - pi) g(-c) + beta g(c^2) whatever X' is. (iii) Its minimum over c is at most
    1 + ln 2 + sqrt(ln beta) for beta >= 1, so it grows slower than any beta q ln 2.

    Oracles: (i) bisection in NumPy along the segment from X to a vertex of the ball where the sign
    differs (found by enumerating the 2^6 vertices); (ii) mpmath at 50 digits; (iii) scipy's bounded
    scalar minimiser.
    """
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(33)
    crossings = 0
    for _ in range(N_INSTANCES):
        p, x, _ = random_instance(rng, k=1, n=1)
        x0, eps = np.asarray(x[0]), rng.uniform(0.05, 0.5)
        f0 = np_logits(p, x0[None])[0, 0]
        verts = x0 + eps * VERTICES
        fv = np_logits(p, verts)[:, 0]
        other = np.flatnonzero(np.sign(fv) != np.sign(f0))
        if other.size == 0:
            continue
        crossings += 1
        lo, hi = x0, verts[other[0]]
        for _ in range(200):  # bisection for the boundary on the segment (inside the convex ball)
            mid = 0.5 * (lo + hi)
            if np.sign(np_logits(p, mid[None])[0, 0]) == np.sign(f0):
                lo = mid
            else:
                hi = mid
        assert np.max(np.abs(hi - x0)) <= eps + 1e-12
        best = max(np.logaddexp(0.0, -f0 * np_logits(p, z[None])[0, 0]) for z in (lo, hi))
        assert best >= np.log(2.0) - 1e-12
    assert crossings >= 20
    g = jax.jit(adv.binary_trades_loss)
    for _ in range(N_INSTANCES):
        c, beta, n = rng.normal(0, 3), rng.uniform(0, 10), int(rng.integers(2, 12))
        t = rng.choice([-1, 1], n)
        p = adv.Params(
            W1=jnp.asarray(rng.normal(size=(D, H))),
            b1=jnp.asarray(rng.normal(size=H)),
            W2=jnp.zeros((H, 1)),
            b2=jnp.asarray([c]),
        )
        x, xa = jnp.asarray(rng.uniform(0, 1, (n, D))), jnp.asarray(rng.uniform(0, 1, (n, D)))
        pi = mpmath.mpf(int(np.sum(t == 1))) / n
        gm = lambda u: mpmath.log(1 + mpmath.exp(-u))  # noqa: E731
        mc = mpmath.mpf(c)
        ref = pi * gm(mc) + (1 - pi) * gm(-mc) + beta * gm(mc * mc)
        np.testing.assert_allclose(float(g(p, x, jnp.asarray(t), xa, beta)), float(ref), rtol=1e-12)
    for _ in range(N_INSTANCES):
        pi, beta = rng.uniform(0.01, 0.99), 10 ** rng.uniform(0, 6)
        res = minimize_scalar(
            lambda c: pi * np.logaddexp(0, -c) + (1 - pi) * np.logaddexp(0, c) + beta * np.logaddexp(0, -c * c),
            bounds=(0, 50),
            method="bounded",
            options={"xatol": 1e-10},
        )
        assert res.fun <= 1 + np.log(2) + np.sqrt(np.log(beta)) + 1e-9
