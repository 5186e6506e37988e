"""Propositions of chapter 21 (generative adversarial networks), checked independently.

Each test checks one proposition on at least 100 random instances (float64, NumPy generators
with fixed seeds) against a computation that does not share the package's formula: numerical
maximisation with ``scipy.optimize``, ``scipy.spatial.distance.jensenshannon``, numerical
integration with ``scipy.integrate.quad`` of ``scipy.stats`` densities, 50-digit ``mpmath``.
Where a proposition needs a condition, the test also shows it failing without it.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
from scipy.optimize import minimize_scalar
from scipy.spatial.distance import jensenshannon
from scipy.special import expit
from scipy.stats import norm

from lse_energy import gan

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
LN4 = np.log(4.0)

optimal_logit = jax.jit(gan.optimal_logit)
logistic_loss, grad_logistic_loss = jax.jit(gan.logistic_loss), jax.jit(gan.grad_logistic_loss_logits)


def d_star(p, q, pad=16):
    """The package's optimal discriminator at densities p, q (through its logit); vectors shorter than
    ``pad`` are padded with ones (and cut back after) so that one compiled program serves every length."""
    p, q = np.atleast_1d(np.asarray(p, float)), np.atleast_1d(np.asarray(q, float))
    k = p.size
    if k < pad:
        p, q = np.r_[p, np.ones(pad - k)], np.r_[q, np.ones(pad - k)]
    return expit(np.asarray(optimal_logit(jnp.log(jnp.asarray(p)), jnp.log(jnp.asarray(q)))))[:k]


def test_optimal_discriminator():
    """Pointwise, a ln D + b ln(1 - D) (a, b > 0) is maximised at D = a / (a + b) = sigma(ln a - ln b)."""
    r = np.random.default_rng(0)
    for _ in range(N_INSTANCES):
        a, b = np.exp(r.normal(size=2) * 2)
        res = minimize_scalar(
            lambda d, a=a, b=b: -(a * np.log(d) + b * np.log1p(-d)),
            bounds=(1e-12, 1 - 1e-12),
            method="bounded",
            options={"xatol": 1e-12},
        )
        assert abs(res.x - d_star([a], [b])[0]) < 1e-6
    # without the condition a + b > 0 (both densities zero) the objective is flat: no unique maximiser
    flat = [0.0 * np.log(d) + 0.0 * np.log1p(-d) for d in (0.1, 0.5, 0.9)]
    assert flat[0] == flat[1] == flat[2]


def test_value_at_optimal_discriminator_is_jsd():
    """V(D*, G) = E_data ln D* + E_g ln(1 - D*) = 2 JSD(p_data || p_g) - ln 4, minimal (-ln 4) iff p_g = p_data."""
    r = np.random.default_rng(1)
    # discrete distributions: against scipy's Jensen-Shannon distance (natural log)
    for _ in range(N_INSTANCES):
        k = r.integers(2, 12)
        p, q = r.dirichlet(np.ones(k)), r.dirichlet(np.ones(k))
        d = d_star(p, q)
        v = np.sum(p * np.log(d)) + np.sum(q * np.log1p(-d))
        assert abs(v - (2 * jensenshannon(p, q) ** 2 - LN4)) < 1e-10
        assert abs(np.sum(p * np.log(d_star(p, p))) + np.sum(p * np.log1p(-d_star(p, p))) + LN4) < 1e-12
        # the condition D = D*: any other discriminator gives less (here D* shifted by a random logit)
        off = expit(np.log(p) - np.log(q) + r.normal(size=k))
        v_off = np.sum(p * np.log(off)) + np.sum(q * np.log1p(-off))
        assert v_off < v
    # 1-D densities: a random two-Gaussian mixture against a random Gaussian, by quadrature
    for _ in range(N_INSTANCES):
        m = r.normal(size=3) * 1.5
        s = np.exp(r.normal(size=3) * 0.3)
        w = r.uniform(0.2, 0.8)
        v, jsd = value_and_jsd_1d(m, s, w)
        assert abs(v - (2 * jsd - LN4)) < 1e-7


def _composite_gauss_legendre(a, b, panels, order=20):
    """Nodes and weights of the composite ``order``-point Gauss-Legendre rule on ``panels`` equal panels of [a, b]."""
    t, wt = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, b, panels + 1)
    mid, half = (edges[:-1] + edges[1:]) / 2, np.diff(edges) / 2
    return (mid[:, None] + half[:, None] * t).ravel(), (half[:, None] * wt).ravel()


# [-40, 40] in 400 panels of width 0.2, 20 nodes each (8000 nodes): every density below has a standard
# deviation >= 0.2 and lies 10 standard deviations inside the interval (asserted), so a panel spans at most
# one standard deviation, where a 20-point rule is exact to round-off for these smooth integrands, and the
# tails left out are below 1e-22; each instance checks the rule on integrals known in closed form.
QX, QW = _composite_gauss_legendre(-40.0, 40.0, 400)


def value_and_jsd_1d(m, s, w):
    """V(D*, G) by quadrature with the package's D* (one call on all nodes), and JSD by quadrature of KL
    to the mixture (no D*). The quadrature rule is checked on this instance's closed-form integrals."""
    assert s.min() >= 0.2 and np.all(np.abs(m) + 10 * s < 40)  # the rule resolves and spans the densities
    pd = w * norm.pdf(QX, m[0], s[0]) + (1 - w) * norm.pdf(QX, m[1], s[1])
    pg = norm.pdf(QX, m[2], s[2])
    # the rule integrates this instance's densities, and p_g's entropy, to round-off
    assert abs(QW @ pd - 1) < 1e-12 and abs(QW @ pg - 1) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -QW @ np.where(pg > 0, pg * np.log(pg), 0.0)
    assert abs(ent - 0.5 * np.log(2 * np.pi * np.e * s[2] ** 2)) < 1e-10
    # elsewhere (far tails, below the normal float range) D* = 1 or 0 and the other term vanishes: the
    # terms left out are < 1e-290; subnormal densities are left out because XLA may flush them to 0
    tiny = 1e-300
    both = (pd > tiny) & (pg > tiny)
    a = np.asarray(
        optimal_logit(jnp.log(jnp.asarray(np.where(both, pd, 1.0))), jnp.log(jnp.asarray(np.where(both, pg, 1.0))))
    )
    v = QW @ np.where(both, -pd * np.logaddexp(0.0, -a) - pg * np.logaddexp(0.0, a), 0.0)  # p ln D* + q ln(1-D*)
    mix = 0.5 * (pd + pg)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = [QW @ np.where(f > tiny, f * (np.log(f) - np.log(mix)), 0.0) for f in (pd, pg)]  # KL(f || mix)
    return v, 0.5 * kl[0] + 0.5 * kl[1]


def test_softplus_is_two_term_lse():
    """-ln sigma(a) = softplus(-a) = LSE(0, -a); the loss is LSE(0, a) - t a; its gradient sigma(a) - t."""
    r = np.random.default_rng(2)
    mpmath.mp.dps = 50
    for _ in range(N_INSTANCES):
        n = r.integers(1, 6)
        a = r.normal(size=n) * np.exp(r.uniform(-2, 3.5))  # up to |a| ~ 100
        t = r.random(n)
        loss = float(logistic_loss(jnp.asarray(a), jnp.asarray(t)))

        def exact(aa, tt):
            sig = [1 / (1 + mpmath.e ** (-mpmath.mpf(x))) for x in aa]
            return sum(
                -mpmath.mpf(ti) * mpmath.log(si) - (1 - mpmath.mpf(ti)) * mpmath.log(1 - si) for si, ti in zip(sig, tt)
            ) / len(aa)

        ref = exact(a, t)
        assert abs(loss - float(ref)) <= 1e-13 * max(1.0, abs(float(ref)))
        # -ln sigma(a) = ln(e^0 + e^-a), in mpmath
        for x in a:
            x = mpmath.mpf(x)
            assert (
                abs(-mpmath.log(1 / (1 + mpmath.e ** (-x))) - mpmath.log(1 + mpmath.e ** (-x))) < mpmath.mpf(10) ** -40
            )
        # the gradient, by mpmath differentiation of the exact loss, one coordinate at a time
        g = np.asarray(grad_logistic_loss(jnp.asarray(a), jnp.asarray(t)))
        for i in range(n):
            assert abs(g[i] - float(mpmath.diff(partial(exact_coordinate, exact, a, t, i), mpmath.mpf(a[i])))) < 1e-13
    # without the two-term form: a one-term "LSE" (just -a) is -ln sigma(a) only asymptotically
    assert abs(float(-mpmath.log(1 / (1 + mpmath.e**2))) - 2.0) > 0.1


def exact_coordinate(exact, a, t, i, x):
    aa = [mpmath.mpf(v) for v in a]
    aa[i] = x
    return exact(aa, t)


def test_minimax_generator_gradient_saturates():
    """d/da of ln(1 - sigma(a)) is -sigma(a) -> 0 as a -> -inf; of -ln sigma(a) it is -(1 - sigma(a)) -> -1."""
    r = np.random.default_rng(3)
    mpmath.mp.dps = 50
    for _ in range(N_INSTANCES):
        a = -np.exp(r.uniform(0, 3, size=3))  # a fake the discriminator rejects: D < 1/2
        mm = np.asarray(gan.grad_generator_loss_logits(jnp.asarray(a), "minimax")) * 3
        ns = np.asarray(gan.grad_generator_loss_logits(jnp.asarray(a), "non_saturating")) * 3
        for i, x in enumerate(a):
            x = mpmath.mpf(x)
            d_mm = mpmath.diff(lambda y: mpmath.log(1 - 1 / (1 + mpmath.e ** (-y))), x)
            d_ns = mpmath.diff(lambda y: -mpmath.log(1 / (1 + mpmath.e ** (-y))), x)
            assert abs(mm[i] - float(d_mm)) < 1e-13 and abs(ns[i] - float(d_ns)) < 1e-13
            assert abs(mm[i]) < 0.5 < abs(ns[i])
    # the condition D < 1/2 matters: for an accepted fake (a > 0) the order is reversed
    a = jnp.asarray([2.0])
    assert abs(float(gan.grad_generator_loss_logits(a, "minimax")[0])) > abs(
        float(gan.grad_generator_loss_logits(a, "non_saturating")[0])
    )


def test_rate_interval_is_clopper_pearson():
    """``gan_ring.rate_interval``, which states the chapter's coverage rate, against scipy's exact
    binomial interval on 100 random (k, n), the edges k = 0 and k = n included (and bad input)."""
    import pytest
    from scipy.stats import binomtest

    from lse_energy.experiments import gan_ring

    rng = np.random.default_rng(21)
    cases = [(0, 40), (40, 40), (1, 1)] + [
        (int(k), int(n)) for n in rng.integers(1, 200, 97) for k in [rng.integers(0, n + 1)]
    ]
    for k, n in cases:
        r, lo, hi = gan_ring.rate_interval(k, n)
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        np.testing.assert_allclose([r, lo, hi], [k / n, ci.low, ci.high], rtol=1e-9, atol=1e-12)
    for bad in ((3, 2), (-1, 5), (1.5, 4)):
        with pytest.raises(ValueError, match="integers"):
            gan_ring.rate_interval(*bad)
