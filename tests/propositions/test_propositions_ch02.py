"""Chapter 02 (Gaussian mixtures): its propositions, checked independently.

Each test checks one proposition on at least 100 random mixtures (numpy
``default_rng`` with fixed seeds) against a computation that does not share
its formula: densities from ``scipy.stats.multivariate_normal``, KL
divergences from ``scipy.stats.entropy``, and derivatives of an energy written
here from the definition (``np.linalg.solve`` and ``np.linalg.det``, no
Cholesky), taken by the complex-step method
:math:`\\partial_j f(x) = \\mathrm{Im}\\, f(x + i h e_j) / h`, which is exact to
float64 round-off. Where a proposition needs a condition, the test also shows
it failing without it. The chapter's proofs name these tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp
from scipy.stats import entropy, multivariate_normal

from lse_energy import gmm
from tests.support import complex_step_grad, relative_error

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100


# (K, d, N) of the random instances. A few fixed shapes, so that the package's jitted
# functions compile once per shape; the values are drawn afresh for every instance.
SHAPES = [(1, 2, 6), (2, 1, 8), (3, 2, 12), (4, 3, 15)]


def _instance(rng, *, shared=False, shapes=SHAPES, n_from_model=False, concentration=2.0):
    """A random mixture ``(pi, mu, Sigma)`` and data ``x`` of a shape drawn from ``shapes``.

    ``n_from_model``: draw x from the mixture itself (else standard normal x 1.5);
    pi is Dirichlet(``concentration``).
    """
    K, d, N = shapes[int(rng.integers(len(shapes)))]
    pi = rng.dirichlet(concentration * np.ones(K))
    mu = 1.5 * rng.normal(size=(K, d))
    M = rng.normal(size=(K, d, d))
    Sigma = np.einsum("kij,klj->kil", M, M) / d + 0.3 * np.eye(d)
    if shared:
        Sigma = np.broadcast_to(Sigma[0], (K, d, d)).copy()
    if n_from_model:
        z = rng.choice(K, size=N, p=pi)
        x = mu[z] + np.einsum("nij,nj->ni", np.linalg.cholesky(Sigma)[z], rng.normal(size=(N, d)))
    else:
        x = 1.5 * rng.normal(size=(N, d))
    return pi, mu, Sigma, x


def _params(pi, mu, Sigma):
    return gmm.Params(jnp.asarray(pi), jnp.asarray(mu), jnp.asarray(Sigma))


def _log_joint_scipy(pi, mu, Sigma, x):
    """(N, K): ln pi_k + ln N(x_i | mu_k, Sigma_k) from scipy."""
    return np.stack(
        [np.log(pi[k]) + multivariate_normal(mu[k], Sigma[k]).logpdf(x).reshape(-1) for k in range(len(pi))], axis=1
    )


def _energy_scipy(pi, mu, Sigma, x) -> float:
    return -float(np.sum(logsumexp(_log_joint_scipy(pi, mu, Sigma, x), axis=1)))


def _posterior_scipy(pi, mu, Sigma, x):
    """Bayes' rule with scipy densities: pi_k N_k(x_i) / sum_j pi_j N_j(x_i)."""
    joint = np.stack([pi[k] * multivariate_normal(mu[k], Sigma[k]).pdf(x).reshape(-1) for k in range(len(pi))], axis=1)
    return joint / joint.sum(axis=1, keepdims=True)


def _sim_cs(pi, mu, Sigma, x, normalised=True):
    """(N, K) similarity from its definition; complex-analytic in every argument."""
    cols = []
    for k in range(len(pi)):
        diff = x - mu[k]
        quad = np.sum(diff * np.linalg.solve(Sigma[k], diff.T).T, axis=1)
        s = np.log(pi[k]) - 0.5 * quad
        if normalised:
            s = s - 0.5 * np.log(np.linalg.det(2 * np.pi * Sigma[k]))
        cols.append(s)
    return np.stack(cols, axis=1)


def _lse_rows(s):
    m = np.max(s.real, axis=1, keepdims=True)  # a constant shift: exact under the complex step
    return m[:, 0] + np.log(np.sum(np.exp(s - m), axis=1))


def _energy_cs(pi, mu, Sigma, x, normalised=True):
    return -np.sum(_lse_rows(_sim_cs(pi, mu, Sigma, x, normalised)))


def _free_energy_def(q, pi, mu, Sigma, x):
    """F(q, theta) = -sum q (sim - ln q), 0 ln 0 = 0, with sim from scipy."""
    s = _log_joint_scipy(pi, mu, Sigma, x)
    logq = np.log(np.where(q > 0, q, 1.0))
    return -float(np.sum(q * (s - logq)))


def _free_energy_cs(q, pi, mu, Sigma, x):
    """The same F, complex-analytic in theta (q is held fixed)."""
    s = _sim_cs(pi, mu, Sigma, x)
    logq = np.log(np.where(q > 0, q, 1.0))
    return -np.sum(q * (s - logq))


def _m_step_loop(q, x):
    """The M-step of the chapter, written from its equations with explicit loops."""
    N, d = x.shape
    K = q.shape[1]
    Nk = q.sum(axis=0)
    mu = np.zeros((K, d))
    Sigma = np.zeros((K, d, d))
    for k in range(K):
        for i in range(N):
            mu[k] += q[i, k] * x[i]
        mu[k] /= Nk[k]
        for i in range(N):
            Sigma[k] += q[i, k] * np.outer(x[i] - mu[k], x[i] - mu[k])
        Sigma[k] /= Nk[k]
    return Nk / N, mu, Sigma


# ---------------------------------------------------------------------------
# gmm-resp
# ---------------------------------------------------------------------------


def test_responsibilities_are_bayes_posterior():
    """ch02, gmm-resp: r = softmax_k sim is Bayes' posterior, and -dE/d sim = r.

    The posterior is pi_k N(x|mu_k, Sigma_k) / sum_j (...) with scipy's density;
    -dE/d sim is the complex-step derivative of -sum_i ln sum_k exp s_ik at s =
    ln pi + scipy's log-density.
    """
    rng = np.random.default_rng(201)
    worst_post = worst_grad = 0.0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng)
        r = np.asarray(gmm.responsibilities(_params(pi, mu, Sigma), jnp.asarray(x)))
        worst_post = max(worst_post, relative_error(r, _posterior_scipy(pi, mu, Sigma, x)))
        s = _log_joint_scipy(pi, mu, Sigma, x)
        dE_ds = complex_step_grad(lambda z: -np.sum(np.log(np.sum(np.exp(z), axis=1))), s)
        worst_grad = max(worst_grad, relative_error(r, -dE_ds))
    assert worst_post < 1e-10, worst_post
    assert worst_grad < 1e-12, worst_grad


# ---------------------------------------------------------------------------
# gmm-grads
# ---------------------------------------------------------------------------


def test_energy_gradients_match_complex_step():
    """ch02, gmm-grads: the four gradients of E, against complex-step derivatives.

    The energy is written from its definition with ``solve`` and ``det`` (no
    Cholesky, no symmetrisation); each entry of Sigma_k is perturbed on its
    own, so the covariance gradient is the unconstrained one the chapter
    states. The chapter's formulas are evaluated in numpy with scipy
    responsibilities and compared too, as is the package.
    """
    rng = np.random.default_rng(202)
    worst = {"mu": 0.0, "x": 0.0, "Sigma": 0.0, "pi": 0.0}
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng)
        params, xj = _params(pi, mu, Sigma), jnp.asarray(x)
        cs = {
            "mu": complex_step_grad(lambda m: _energy_cs(pi, m, Sigma, x), mu),
            "x": complex_step_grad(lambda v: _energy_cs(pi, mu, Sigma, v), x),
            "Sigma": complex_step_grad(lambda S: _energy_cs(pi, mu, S, x), Sigma),
            "pi": complex_step_grad(lambda p: _energy_cs(p, mu, Sigma, x), pi),
        }
        r = _posterior_scipy(pi, mu, Sigma, x)
        P = np.linalg.inv(Sigma)
        u = np.einsum("kab,kib->kia", P, x[None] - mu[:, None])  # u_ik = Sigma_k^-1 (x_i - mu_k)
        formula = {
            "mu": -np.einsum("ik,kia->ka", r, u),
            "x": np.einsum("ik,kia->ia", r, u),
            "Sigma": 0.5 * (r.sum(0)[:, None, None] * P - np.einsum("ik,kia,kib->kab", r, u, u)),
            "pi": -r.sum(0) / pi,
        }
        package = {
            "mu": gmm.grad_means(params, xj),
            "x": gmm.grad_x(params, xj),
            "Sigma": gmm.grad_covariances(params, xj),
            "pi": gmm.grad_weights(params, xj),
        }
        for key in worst:
            worst[key] = max(worst[key], relative_error(formula[key], cs[key]), relative_error(package[key], cs[key]))
    assert max(worst.values()) < 1e-9, worst


# ---------------------------------------------------------------------------
# gmm-bound
# ---------------------------------------------------------------------------


def test_free_energy_is_energy_plus_kl():
    """ch02, gmm-bound: F(q, theta) = E(theta) + sum_i KL(q_i || r_i) >= E, equality iff q = r.

    F from its definition with scipy log-densities; E and the posterior from
    scipy; KL from ``scipy.stats.entropy``. q is a random point of the simplex,
    a third of the rows with an exact zero (0 ln 0 = 0).
    """
    rng = np.random.default_rng(203)
    worst = 0.0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng, shapes=SHAPES[1:])
        N, K = x.shape[0], len(pi)
        q = rng.dirichlet(np.ones(K), size=N)
        zero = rng.random(N) < 1 / 3
        q[zero, rng.integers(K, size=zero.sum())] = 0.0
        q /= q.sum(axis=1, keepdims=True)
        r = _posterior_scipy(pi, mu, Sigma, x)
        E = _energy_scipy(pi, mu, Sigma, x)
        kl = sum(entropy(q[i], r[i]) for i in range(N))
        F = _free_energy_def(q, pi, mu, Sigma, x)
        worst = max(worst, abs(F - (E + kl)) / abs(E + kl))
        assert kl > 1e-6 and F > E  # q != r: the bound is strict
        F_r = _free_energy_def(r, pi, mu, Sigma, x)
        worst = max(worst, abs(F_r - E) / abs(E))  # q = r: the bound is tight
        F_pkg = float(gmm.free_energy(_params(pi, mu, Sigma), jnp.asarray(x), jnp.asarray(q)))
        worst = max(worst, abs(F_pkg - F) / abs(F))
    assert worst < 1e-10, worst


def test_em_never_increases_energy_and_needs_the_exact_e_step():
    """ch02, gmm-bound: E(theta') <= F(r(theta), theta') <= F(r(theta), theta) = E(theta).

    Five EM steps of ``gmm.em_step`` on each of 100 mixtures, from the
    parameters that generated the data (every component with enough points that
    no covariance collapses); E and F from scipy. Condition: the E-step must set q = r(theta). An M-step from random
    responsibilities q (the exact minimiser of F(q, .), from the M-step's
    equations) still lowers F(q, .) but raises E on most instances.
    """
    rng = np.random.default_rng(204)
    worst_violation = 0.0
    raised = 0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(
            rng, shapes=[(2, 1, 40), (3, 2, 90)], n_from_model=True, concentration=10.0
        )  # no component of a handful of points
        theta = (pi, mu, Sigma)
        for _ in range(5):
            r = _posterior_scipy(*theta, x)
            new = gmm.em_step(_params(*theta), jnp.asarray(x))
            new = tuple(np.asarray(a) for a in new)
            E_old, E_new = _energy_scipy(*theta, x), _energy_scipy(*new, x)
            F_old, F_new = _free_energy_def(r, *theta, x), _free_energy_def(r, *new, x)
            scale = abs(E_old)
            worst_violation = max(
                worst_violation, (E_new - F_new) / scale, (F_new - F_old) / scale, abs(F_old - E_old) / scale
            )
            theta = new
        # Without the exact E-step: q random, theta'' = argmin F(q, .).
        q = rng.dirichlet(np.ones(len(pi)), size=x.shape[0])
        other = _m_step_loop(q, x)
        assert _free_energy_def(q, *other, x) <= _free_energy_def(q, *theta, x)
        raised += _energy_scipy(*other, x) > _energy_scipy(*theta, x)
    assert worst_violation < 1e-12, worst_violation
    assert raised >= 0.9 * N_INSTANCES, raised


def test_free_energy_gradient_equals_energy_gradient_at_the_e_step():
    """ch02, gmm-bound: d/dtheta F(r(theta), theta) = dE/dtheta, with r held fixed.

    Both sides by the complex step (in the means, covariances and weights),
    F with q frozen at scipy's posterior. With any other q the identity fails.
    """
    rng = np.random.default_rng(205)
    worst = 0.0
    fails = 0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng, shapes=SHAPES[1:])
        r = _posterior_scipy(pi, mu, Sigma, x)
        q = rng.dirichlet(np.ones(len(pi)), size=x.shape[0])
        for theta_index in range(3):
            theta = [pi, mu, Sigma]

            def at(v, i=theta_index):
                t = list(theta)
                t[i] = v
                return t

            gE = complex_step_grad(lambda v: _energy_cs(*at(v), x), theta[theta_index])
            gF = complex_step_grad(lambda v: _free_energy_cs(r, *at(v), x), theta[theta_index])
            gFq = complex_step_grad(lambda v: _free_energy_cs(q, *at(v), x), theta[theta_index])
            worst = max(worst, relative_error(gF, gE))
            fails += relative_error(gFq, gE) > 1e-3
    assert worst < 1e-10, worst
    assert fails >= 0.95 * 3 * N_INSTANCES, fails


# ---------------------------------------------------------------------------
# gmm-mstep
# ---------------------------------------------------------------------------


def test_m_step_minimises_the_free_energy():
    """ch02, gmm-mstep: the closed-form M-step minimises F(r, .) over means, covariances, weights.

    At the package's M-step (checked against the equations written as loops):
    the complex-step gradient of F(r, .) vanishes in the means, in every entry
    of the covariances and in the logits of pi = softmax(eta) (the simplex);
    and 20 random feasible perturbations of each instance raise F.
    """
    rng = np.random.default_rng(206)
    worst_formula = worst_stationary = 0.0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng, shapes=[(1, 2, 10), (2, 1, 12), (3, 2, 20), (2, 3, 25)])
        r = _posterior_scipy(pi, mu, Sigma, x)
        new = tuple(np.asarray(a) for a in gmm.em_step(_params(pi, mu, Sigma), jnp.asarray(x)))
        loop = _m_step_loop(r, x)
        worst_formula = max(worst_formula, *(relative_error(a, b) for a, b in zip(new, loop)))
        pi1, mu1, S1 = loop
        F1 = _free_energy_def(r, pi1, mu1, S1, x)
        eta = np.log(pi1)
        grads = [
            complex_step_grad(lambda m: _free_energy_cs(r, pi1, m, S1, x), mu1),
            complex_step_grad(lambda S: _free_energy_cs(r, pi1, mu1, S, x), S1),
            complex_step_grad(lambda e: _free_energy_cs(r, np.exp(e) / np.sum(np.exp(e)), mu1, S1, x), eta),
        ]
        # scale: the size of each gradient term at the start of the step
        scale = np.sum(r) * max(1.0, np.max(np.abs(np.linalg.inv(S1))))
        worst_stationary = max(worst_stationary, max(np.max(np.abs(g)) for g in grads) / scale)
        for size in np.geomspace(1e-3, 1.0, 20):
            K, d = mu.shape
            B = rng.normal(size=(K, d, d)) * size
            B = 0.5 * (B + np.swapaxes(B, 1, 2))
            expB = np.stack([np.linalg.matrix_power(np.eye(d) + B[k] / 64, 64) for k in range(K)])
            S2 = np.einsum("kab,kbc,kdc->kad", expB, S1, expB)  # stays positive definite
            mu2 = mu1 + size * rng.normal(size=mu1.shape)
            e2 = eta + size * rng.normal(size=eta.shape)
            pi2 = np.exp(e2) / np.exp(e2).sum()
            assert _free_energy_def(r, pi2, mu2, S2, x) > F1
    assert worst_formula < 1e-10, worst_formula
    assert worst_stationary < 1e-10, worst_stationary


def test_m_step_needs_nonsingular_covariances():
    """ch02, gmm-mstep, condition: without a nonsingular Sigma_k', F(r, .) has no minimiser.

    Data on a line in 2-D: every weighted scatter S_k is singular, and
    F(r, pi', mu', S_k + eps I) decreases without bound as eps -> 0.
    """
    rng = np.random.default_rng(207)
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, _ = _instance(rng, shapes=[(1, 2, 1), (2, 2, 1), (3, 2, 1)])
        N = int(rng.integers(5, 20))
        direction = rng.normal(size=2)
        x = rng.normal(size=2) + rng.normal(size=N)[:, None] * direction
        r = _posterior_scipy(pi, mu, Sigma, x)
        pi1, mu1, S1 = _m_step_loop(r, x)
        assert np.all(np.abs(np.linalg.det(S1)) < 1e-12 * np.linalg.norm(S1, axis=(1, 2)) ** 2)
        F = [_free_energy_cs(r, pi1, mu1, S1 + eps * np.eye(2), x).real for eps in (1e-2, 1e-4, 1e-6, 1e-8)]
        steps = -np.diff(F)
        # each factor 100 in eps lowers F by about (N/2) ln 100
        assert np.all(steps > 0.4 * N * np.log(100.0)), steps


# ---------------------------------------------------------------------------
# gmm-precond
# ---------------------------------------------------------------------------


def test_em_mean_update_is_preconditioned_gradient_step():
    """ch02, gmm-precond: mu' = mu - (Sigma_k / N_k) dE/dmu_k, and d^2 F(r, .)/dmu_k^2 = N_k Sigma_k^-1.

    mu' is the package's EM step; dE/dmu by the complex step; N_k from scipy's
    posterior. F(r, .) is quadratic in mu_k, so its Hessian is computed
    exactly (to round-off) by central second differences with step 1.
    """
    rng = np.random.default_rng(208)
    worst_step = worst_hess = 0.0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng)
        d = mu.shape[1]
        r = _posterior_scipy(pi, mu, Sigma, x)
        Nk = r.sum(axis=0)
        mu_em = np.asarray(gmm.em_step(_params(pi, mu, Sigma), jnp.asarray(x)).means)
        g = complex_step_grad(lambda m: _energy_cs(pi, m, Sigma, x), mu)
        step = mu - np.einsum("kab,kb->ka", Sigma, g) / Nk[:, None]
        worst_step = max(worst_step, relative_error(step, mu_em))
        k = int(np.argmax(Nk))  # the best-determined component: its Hessian is largest
        I = np.eye(d)

        def F_at(m, k=k):
            mm = mu.copy()
            mm[k] = m
            return _free_energy_def(r, pi, mm, Sigma, x)

        hess = np.array(
            [
                [
                    (
                        F_at(mu[k] + I[a] + I[b])
                        - F_at(mu[k] + I[a] - I[b])
                        - F_at(mu[k] - I[a] + I[b])
                        + F_at(mu[k] - I[a] - I[b])
                    )
                    / 4
                    for b in range(d)
                ]
                for a in range(d)
            ]
        )
        worst_hess = max(worst_hess, relative_error(hess, Nk[k] * np.linalg.inv(Sigma[k])))
    assert worst_step < 1e-10, worst_step
    assert worst_hess < 1e-8, worst_hess


# ---------------------------------------------------------------------------
# gmm-normaliser
# ---------------------------------------------------------------------------


def test_seed_energy_with_shared_covariance_differs_by_a_constant():
    """ch02, gmm-normaliser (1): one shared Sigma: E = E_seed + (N/2) ln|2 pi Sigma|, same r.

    E and the posterior from scipy; E_seed and its responsibilities written
    from the seed's formula. Condition: with unequal covariances the
    responsibilities differ and E - E_seed is not that constant for any k.
    """
    rng = np.random.default_rng(209)
    worst = 0.0
    unequal_differs = 0
    for _ in range(N_INSTANCES):
        for shared in (True, False):
            pi, mu, Sigma, x = _instance(rng, shared=shared, shapes=SHAPES[1:])
            N = x.shape[0]
            s_seed = _sim_cs(pi, mu, Sigma, x, normalised=False).real
            E_seed = -np.sum(logsumexp(s_seed, axis=1))
            r_seed = np.exp(s_seed - logsumexp(s_seed, axis=1, keepdims=True))
            E, r = _energy_scipy(pi, mu, Sigma, x), _posterior_scipy(pi, mu, Sigma, x)
            consts = [0.5 * N * np.linalg.slogdet(2 * np.pi * Sigma[k])[1] for k in range(len(pi))]
            pkg = float(gmm.seed_energy(_params(pi, mu, Sigma), jnp.asarray(x)))
            worst = max(worst, abs(pkg - E_seed) / abs(E_seed))
            if shared:
                worst = max(worst, abs(E - (E_seed + consts[0])) / abs(E), relative_error(r_seed, r))
            else:
                unequal_differs += relative_error(r_seed, r) > 1e-6 and min(
                    abs(E - E_seed - c) for c in consts
                ) > 1e-6 * abs(E)
    assert worst < 1e-10, worst
    assert unequal_differs == N_INSTANCES, unequal_differs


def test_seed_energy_reweights_components_by_volume():
    """ch02, gmm-normaliser (2): E_seed(pi, mu, Sigma) = E(pi~, mu, Sigma) - N ln sum_j pi_j c_j.

    pi~_k = pi_k c_k / sum_j pi_j c_j with c_k = |2 pi Sigma_k|^(1/2); E from scipy.
    """
    rng = np.random.default_rng(210)
    worst = 0.0
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng)
        N = x.shape[0]
        c = np.sqrt(np.linalg.det(2 * np.pi * Sigma))
        pi_t = pi * c / np.sum(pi * c)
        E_seed = float(gmm.seed_energy(_params(pi, mu, Sigma), jnp.asarray(x)))
        E_seed_def = -np.sum(logsumexp(_sim_cs(pi, mu, Sigma, x, normalised=False).real, axis=1))
        rhs = _energy_scipy(pi_t, mu, Sigma, x) - N * np.log(np.sum(pi * c))
        worst = max(worst, abs(E_seed - rhs) / abs(rhs), abs(E_seed_def - rhs) / abs(rhs))
    assert worst < 1e-10, worst


def test_seed_energy_has_no_covariance_minimiser():
    """ch02, gmm-normaliser (3): dE_seed/dSigma_k = -1/2 sum_i r_ik u u^T <= 0; E_seed -> 0 as Sigma -> inf.

    The gradient by the complex step of the seed energy written from its
    definition; E_seed along Sigma -> s Sigma decreases strictly for
    s = 1, 10, ..., 1e8 and ends below 1e-6 of its start, while the
    normalised E (scipy) grows there: the normaliser supplies the minimiser.
    """
    rng = np.random.default_rng(211)
    worst = 0.0
    scales = 10.0 ** np.arange(0, 9)
    for _ in range(N_INSTANCES):
        pi, mu, Sigma, x = _instance(rng)
        s = _sim_cs(pi, mu, Sigma, x, normalised=False).real
        r_seed = np.exp(s - logsumexp(s, axis=1, keepdims=True))
        u = np.einsum("kab,kib->kia", np.linalg.inv(Sigma), x[None] - mu[:, None])
        formula = -0.5 * np.einsum("ik,kia,kib->kab", r_seed, u, u)
        cs = complex_step_grad(lambda S: _energy_cs(pi, mu, S, x, normalised=False), Sigma)
        pkg = np.asarray(gmm.grad_covariances(_params(pi, mu, Sigma), jnp.asarray(x), normalised=False))
        worst = max(worst, relative_error(formula, cs), relative_error(pkg, cs))
        assert np.all(np.linalg.eigvalsh(formula) <= 1e-12 * np.max(np.abs(formula)))
        E_seed = np.array(
            [-np.sum(logsumexp(_sim_cs(pi, mu, a * Sigma, x, normalised=False).real, axis=1)) for a in scales]
        )
        assert np.all(E_seed >= 0) and np.all(np.diff(E_seed) < 0)
        assert E_seed[-1] < 1e-6 * E_seed[0]
        E = [_energy_scipy(pi, mu, a * Sigma, x) for a in scales[-3:]]
        assert np.all(np.diff(E) > 0)  # the exact E grows without bound along the same ray
    assert worst < 1e-9, worst
