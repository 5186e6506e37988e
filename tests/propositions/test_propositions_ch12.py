"""Propositions of chapter 12 (predictive coding networks), checked independently.

Each test checks one proposition of ``book/12_predictive_coding_networks.ipynb`` on at
least 100 random instances (float64, numpy ``default_rng`` with fixed seeds) against a
computation that does not share the package's formula: ``jax.grad`` / ``jax.hessian`` of
the energy written again here from its definition, the feed-forward pass written as a
numpy loop, scipy's root finder or Newton's method instead of the package's gradient
descent, and backpropagation by ``jax.grad`` of the feed-forward loss. Where a
proposition needs a condition, the same test shows the statement failing without it.

Instances come in groups of one architecture each (random weights, biases, states and
precisions within a group), so that each jitted, vmapped check compiles once per group.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from lse_energy import pcn
from tests.support import relative_error_l2

jax.config.update("jax_enable_x64", True)

# Layer sizes (n_1, ..., n_L) of the instance groups: 2 to 5 layers, widths 1 to 5.
ARCHS = ((3, 2), (4, 1, 3), (3, 5, 2, 4), (5, 4, 3, 2, 1))
PER_ARCH = 25  # 4 x 25 = 100 instances per test
BATCH = 2


# --- an independent PCN, written from the chapter's definitions ---------------------------


def _energy(Ws, bs, m, xs, prec):
    """F = 1/2 pi_1 |x^1 - m|^2 + 1/2 sum_{l>=2} pi_l |x^l - W^{l-1} tanh(x^{l-1}) - b^{l-1}|^2,
    summed over the examples (xs[l]: (B, n_l)); column convention, written with einsum."""
    F = 0.5 * prec[0] * jnp.sum((xs[0] - m) ** 2)
    for l in range(1, len(xs)):
        mu = jnp.einsum("ij,bj->bi", Ws[l - 1], jnp.tanh(xs[l - 1])) + bs[l - 1]
        F = F + 0.5 * prec[l] * jnp.sum((xs[l] - mu) ** 2)
    return F


def _feedforward(Ws, bs, x1):
    """x^{l+1} = W^l tanh(x^l) + b^l for one example, a numpy loop over layers and units."""
    out = [np.asarray(x1, float)]
    for W, b in zip(Ws, bs):
        v = out[-1]
        out.append(np.array([sum(W[i, j] * np.tanh(v[j]) for j in range(v.size)) + b[i] for i in range(b.size)]))
    return out


def _draw(rng, sizes, n, batch=BATCH):
    """n random instances of one architecture, stacked on a leading axis."""
    L = len(sizes)
    Ws = tuple(rng.normal(0, 1.2, (n, sizes[l + 1], sizes[l])) for l in range(L - 1))
    bs = tuple(rng.normal(0, 0.5, (n, sizes[l + 1])) for l in range(L - 1))
    m = rng.normal(0, 0.5, (n, sizes[0]))
    xs = tuple(rng.normal(0, 1.5, (n, batch, s)) for s in sizes)
    pi1 = np.where(rng.random(n) < 0.3, 0.0, rng.uniform(0.1, 2.0, n))  # root prior off in ~30%
    prec = np.concatenate([pi1[:, None], rng.uniform(0.1, 3.0, (n, L - 1))], 1)
    return Ws, bs, m, xs, prec


def _errors_np(Ws, bs, m, xs, prec):
    """eps^1 = pi_1 (x^1 - m), eps^l = pi_l (x^l - mu^l); arrays (instances, batch, n_l)."""
    eps = [prec[:, :1, None] * (xs[0] - m[:, None])]
    for l in range(1, len(xs)):
        mu = np.einsum("nij,nbj->nbi", Ws[l - 1], np.tanh(xs[l - 1])) + bs[l - 1][:, None]
        eps.append(prec[:, l, None, None] * (xs[l] - mu))
    return eps


_auto_grads = jax.jit(jax.vmap(jax.grad(_energy, argnums=(0, 1, 2, 3))))
_pkg_grad_x = jax.jit(jax.vmap(lambda W, b, m, x, p: pcn.grad_x(pcn.Params(W, b, m), x, p)))
_pkg_grad_params = jax.jit(jax.vmap(lambda W, b, m, x, p: pcn.grad_params(pcn.Params(W, b, m), x, p)))


# --- pcn-grad-x ------------------------------------------------------------------------------


def test_inference_dynamics_is_the_energy_gradient():
    """ch12, pcn-grad-x: dF/dx^l = eps^l - f'(x^l) * (W^{l T} eps^{l+1}) (no second term at l = L),
    written from the proposition in numpy, equals jax.grad of the independently written energy,
    and so does pcn.grad_x, on 100 random networks (5 architectures of 2 to 5 layers, random
    weights, states and precisions, the root prior on or off)."""
    rng = np.random.default_rng(1201)
    worst_formula = worst_pkg = 0.0
    for sizes in ARCHS:
        Ws, bs, m, xs, prec = _draw(rng, sizes, PER_ARCH)
        auto = _auto_grads(Ws, bs, m, xs, prec)[3]
        eps = _errors_np(Ws, bs, m, xs, prec)
        formula = []
        for l in range(len(xs)):
            g = eps[l].copy()
            if l + 1 < len(xs):  # row form of f'(x^l) * (W^{l T} eps^{l+1})
                g -= (1 - np.tanh(xs[l]) ** 2) * np.einsum("nbi,nij->nbj", eps[l + 1], Ws[l])
            formula.append(g)
        worst_formula = max(worst_formula, relative_error_l2(formula, auto, batched=True).max())
        worst_pkg = max(worst_pkg, relative_error_l2(_pkg_grad_x(Ws, bs, m, xs, prec), auto, batched=True).max())
    assert worst_formula < 1e-12 and worst_pkg < 1e-12


# --- pcn-learn -----------------------------------------------------------------------------


def test_learning_rule_is_the_energy_gradient():
    """ch12, pcn-learn: -dF/dW^l = eps^{l+1} f(x^l)^T, -dF/db^l = eps^{l+1}, -dF/dm = eps^1
    (summed over the examples), written in numpy, equal minus jax.grad of the independent energy
    in (W, b, m); pcn.grad_params agrees too. 100 random networks."""
    rng = np.random.default_rng(1202)
    worst_formula = worst_pkg = 0.0
    for sizes in ARCHS:
        Ws, bs, m, xs, prec = _draw(rng, sizes, PER_ARCH)
        gW, gb, gm, _ = _auto_grads(Ws, bs, m, xs, prec)
        auto = [-np.asarray(g) for g in (*gW, *gb, gm)]
        eps = _errors_np(Ws, bs, m, xs, prec)
        fW = [np.einsum("nbi,nbj->nij", eps[l + 1], np.tanh(xs[l])) for l in range(len(Ws))]
        fb = [eps[l + 1].sum(1) for l in range(len(Ws))]
        worst_formula = max(worst_formula, relative_error_l2([*fW, *fb, eps[0].sum(1)], auto, batched=True).max())
        pk = _pkg_grad_params(Ws, bs, m, xs, prec)
        worst_pkg = max(
            worst_pkg,
            relative_error_l2(
                [-np.asarray(g) for g in (*pk.weights, *pk.biases, pk.prior_mean)], auto, batched=True
            ).max(),
        )
    assert worst_formula < 1e-12 and worst_pkg < 1e-12


# --- pcn-ff --------------------------------------------------------------------------------


def _energy_free(z, Ws, bs, m, x1, prec, top):
    """The independent energy of one example with the free layers flattened into z.
    top=None: only x^1 clamped (z holds x^2..x^L); else x^L = top clamped too (z holds x^2..x^{L-1})."""
    n_free = len(Ws) if top is None else len(Ws) - 1
    xs, start = [x1[None]], 0
    for W in Ws[:n_free]:
        xs.append(z[start : start + W.shape[0]][None])
        start += W.shape[0]
    if top is not None:
        xs.append(top[None])
    return _energy(Ws, bs, m, tuple(xs), prec)


@functools.partial(jax.jit, static_argnames="clamp_top")
def _free_grad(z, Ws, bs, m, x1, prec, top, clamp_top):
    return jax.grad(_energy_free)(z, Ws, bs, m, x1, prec, top if clamp_top else None)


@functools.partial(jax.jit, static_argnames="clamp_top")
def _free_hess(z, Ws, bs, m, x1, prec, top, clamp_top):
    return jax.hessian(_energy_free)(z, Ws, bs, m, x1, prec, top if clamp_top else None)


@functools.partial(jax.jit, static_argnames="clamp_top")
def _free_energy(z, Ws, bs, m, x1, prec, top, clamp_top):
    return _energy_free(z, Ws, bs, m, x1, prec, top if clamp_top else None)


_pkg_forward = jax.jit(jax.vmap(lambda W, b, m, x1: pcn.forward(pcn.Params(W, b, m), x1)))


def _one(arrays, i):
    return tuple(a[i] for a in arrays)


def test_free_output_equilibrium_is_the_feedforward_pass():
    """ch12, pcn-ff, on 100 random networks of 3 to 5 layers with only x^1 clamped: at the
    feed-forward pass (a numpy loop) jax.grad of the independent energy in x^{2:L} vanishes, every
    eps^l (l >= 2) is zero and F is the root-prior term; every stationary point that scipy's root
    finder (hybr, with the jax Hessian, from 3 random starts each) reaches is that pass.
    Conditions: with x^L clamped too (training mode, target off the pass) the stationary point
    (Newton's method) keeps nonzero errors, F exceeds the root-prior term and the hidden layers
    leave the pass; with a zero hidden precision the pass is no longer the only stationary point."""
    rng = np.random.default_rng(1203)
    converged = found_other = n_train = 0
    worst_grad = worst_F = worst_eps = 0.0
    min_excess = min_move = np.inf
    for sizes in ((2, 4, 3), (4, 1, 3, 2), (3, 4, 2, 3, 2)):
        Ws, bs, m, xs, prec = _draw(rng, sizes, 34, batch=1)
        pkg_ff = _pkg_forward(Ws, bs, m, xs[0])
        for i in range(34):
            W, b, mi, p = _one(Ws, i), _one(bs, i), m[i], prec[i]
            x1 = xs[0][i, 0]
            ff = _feedforward(W, b, x1)
            assert max(np.max(np.abs(np.asarray(a[i, 0]) - c)) for a, c in zip(pkg_ff, ff)) < 1e-13
            z_ff = np.concatenate(ff[1:])
            top = np.zeros(sizes[-1])
            g = np.asarray(_free_grad(z_ff, W, b, mi, x1, p, top, False))
            root_prior = 0.5 * p[0] * np.sum((x1 - mi) ** 2)
            worst_grad = max(worst_grad, np.max(np.abs(g)))
            F_ff = float(_free_energy(z_ff, W, b, mi, x1, p, top, False))
            worst_F = max(worst_F, abs(F_ff - root_prior) / max(root_prior, 1.0))
            eps = _errors_np(
                tuple(w[None] for w in W),
                tuple(c[None] for c in b),
                mi[None],
                tuple(v[None, None] for v in ff),
                p[None],
            )
            worst_eps = max(worst_eps, max(np.max(np.abs(e)) for e in eps[1:]))
            args = (W, b, mi, x1, p, top, False)
            for _ in range(3):
                sol = scipy.optimize.root(
                    lambda z, a=args: np.asarray(_free_grad(z, *a)),
                    rng.normal(0, 2.0, z_ff.size),
                    jac=lambda z, a=args: np.asarray(_free_hess(z, *a)),
                    method="hybr",
                    options={"xtol": 1e-13},
                )
                if np.max(np.abs(np.asarray(_free_grad(sol.x, *args)))) < 1e-9:
                    converged += 1
                    found_other += int(np.max(np.abs(sol.x - z_ff)) > 1e-6)
            # condition: the top clamped too, at a target off the pass (training mode)
            y = ff[-1] + rng.normal(0, 1.0, sizes[-1])
            z = z_ff[: z_ff.size - sizes[-1]]
            for _ in range(40):  # Newton from the pass
                z = z - np.linalg.solve(
                    np.asarray(_free_hess(z, W, b, mi, x1, p, y, True)),
                    np.asarray(_free_grad(z, W, b, mi, x1, p, y, True)),
                )
            if np.max(np.abs(np.asarray(_free_grad(z, W, b, mi, x1, p, y, True)))) < 1e-10:
                n_train += 1
                min_excess = min(min_excess, float(_free_energy(z, W, b, mi, x1, p, y, True)) - root_prior)
                min_move = min(min_move, np.max(np.abs(z - z_ff[: z.size])))
    assert worst_grad < 1e-12 and worst_F < 1e-12 and worst_eps < 1e-12
    assert converged >= 150 and found_other == 0  # most of the 306 root solves converged, all to the pass
    # The condition's failure is shown on every training-mode instance where Newton's method reached a
    # stationary point (gradient < 1e-10 within 40 steps); it reaches one on most of the 102 (how many
    # depends on round-off, e.g. 91 to 95 across XLA configurations), so we ask for two thirds.
    assert n_train >= 68 and min_excess > 1e-8 and min_move > 1e-6

    # condition pi_l > 0 (l >= 2): with pi_2 = 0, moving x^2 anywhere (and the layers above with it)
    # is stationary too
    Ws, bs, m, xs, prec = _draw(np.random.default_rng(12031), (3, 4, 2, 2), 1, batch=1)
    W, b, mi, p = _one(Ws, 0), _one(bs, 0), m[0], prec[0].copy()
    p[1] = 0.0
    x1 = xs[0][0, 0]
    ff = _feedforward(W, b, x1)
    moved = [x1, xs[1][0, 0]] + _feedforward(W[1:], b[1:], xs[1][0, 0])[1:]
    g = _free_grad(np.concatenate(moved[1:]), W, b, mi, x1, p, np.zeros(2), False)
    assert np.max(np.abs(np.asarray(g))) < 1e-12 and np.max(np.abs(moved[1] - ff[1])) > 0.1


# --- pcn-bp --------------------------------------------------------------------------------


def _pc_update_per_gamma(Ws, bs, x, y, prec):
    """(1/gamma) eps^{l+1} f(x^l)^T at the training-mode equilibrium (x^1 = x, x^L = y clamped,
    gamma = prec[-1]): from the feed-forward pass, 2000 gradient steps (step 0.05) on the
    independent energy, then 30 Newton steps (plain Newton from the pass need not converge at
    gamma = 1); also returns the largest gradient left."""
    m = jnp.zeros_like(x)
    h, hidden = x, []
    for W, b in zip(Ws[:-1], bs[:-1]):
        h = W @ jnp.tanh(h) + b
        hidden.append(h)
    z = jnp.concatenate(hidden)

    def newton(_, z):
        g = jax.grad(_energy_free)(z, Ws, bs, m, x, prec, y)
        return z - jnp.linalg.solve(jax.hessian(_energy_free)(z, Ws, bs, m, x, prec, y), g)

    def descend(_, z):
        return z - 0.05 * jax.grad(_energy_free)(z, Ws, bs, m, x, prec, y)

    z = jax.lax.fori_loop(0, 30, newton, jax.lax.fori_loop(0, 2000, descend, z))
    resid = jnp.max(jnp.abs(jax.grad(_energy_free)(z, Ws, bs, m, x, prec, y)))
    xs, start = [x], 0
    for W in Ws[:-1]:
        xs.append(z[start : start + W.shape[0]])
        start += W.shape[0]
    xs.append(y)
    upd = [
        jnp.outer(prec[l + 1] * (xs[l + 1] - Ws[l] @ jnp.tanh(xs[l]) - bs[l]), jnp.tanh(xs[l])) / prec[-1]
        for l in range(len(Ws))
    ]
    return upd, resid


def _backprop(Ws, bs, x, y):
    def loss(Ws_):
        h = x
        for W, b in zip(Ws_, bs):
            h = W @ jnp.tanh(h) + b
        return 0.5 * jnp.sum((y - h) ** 2)

    return [-g for g in jax.grad(loss)(Ws)]


_pc_batch = jax.jit(jax.vmap(_pc_update_per_gamma))

_bp_batch = jax.jit(jax.vmap(_backprop))


def test_weak_clamping_recovers_backprop():
    """ch12, pcn-bp, on 100 random networks (3 to 5 layers): the PC update per unit gamma at the
    training-mode equilibrium (Newton's method on the independent energy) against minus jax.grad
    of the feed-forward loss 1/2 |Y - yhat(X)|^2 (backprop). The relative error is first order in
    gamma: it shrinks tenfold (0.08 to 0.12) from gamma = 1e-3 to 1e-4 on every instance, and is
    below 2% at 1e-4. The proof never uses pi_l = 1 for the hidden layers: the same holds with
    random fixed hidden precisions in [0.3, 3]. Condition gamma -> 0: at gamma = 1 the PC update is
    more than 10% off the gradient on at least 90% of the instances."""
    rng = np.random.default_rng(1204)
    ratios, err_small, err_one, err_hidden, resids = [], [], [], [], []
    for sizes in ((4, 3, 2), (3, 4, 4, 2), (3, 3, 2, 4, 2)):
        n, L = 34, len(sizes)
        Ws = tuple(rng.normal(0, 1.5 / np.sqrt(sizes[l]), (n, sizes[l + 1], sizes[l])) for l in range(L - 1))
        bs = tuple(rng.normal(0, 0.3, (n, sizes[l + 1])) for l in range(L - 1))
        x, y = rng.normal(0, 1.0, (n, sizes[0])), rng.normal(0, 1.0, (n, sizes[-1]))
        bp = _bp_batch(Ws, bs, x, y)
        errs = {}
        for gamma in (1.0, 1e-3, 1e-4):
            prec = np.concatenate([np.zeros((n, 1)), np.ones((n, L - 2)), np.full((n, 1), gamma)], 1)
            upd, r = _pc_batch(Ws, bs, x, y, prec)
            resids.append(np.max(r))
            errs[gamma] = relative_error_l2(upd, bp, batched=True)
        prec = np.concatenate([np.zeros((n, 1)), rng.uniform(0.3, 3.0, (n, L - 2)), np.full((n, 1), 1e-4)], 1)
        upd, r = _pc_batch(Ws, bs, x, y, prec)
        resids.append(np.max(r))
        err_hidden.append(relative_error_l2(upd, bp, batched=True))
        ratios.append(errs[1e-4] / errs[1e-3])
        err_small.append(errs[1e-4])
        err_one.append(errs[1.0])
    ratios, err_small, err_one, err_hidden = (np.concatenate(a) for a in (ratios, err_small, err_one, err_hidden))
    assert ratios.size >= 100 and max(resids) < 1e-12  # every comparison is at an equilibrium
    assert np.all((ratios > 0.08) & (ratios < 0.12))  # first order in gamma
    assert err_small.max() < 0.02 and err_hidden.max() < 0.02
    assert np.mean(err_one > 0.1) >= 0.9  # strong clamping: not backprop
