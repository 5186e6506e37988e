"""Hypothesis property tests over every model, driven by one registry.

``MODELS`` lists every model once, as a builder of a small instance from a
hypothesis-drawn seed and sizes. An instance holds the differentiable point
``z`` (a pytree), the package energy and analytic gradient as functions of
``z``, the similarity matrix (for the float32 test and the tolerances), and
two references written here from the formulas, independently of the package:
a float64 NumPy one and a 50-digit ``mpmath`` one. The generic tests:

* the energy equals the NumPy reference and the ``mpmath`` reference;
* the analytic gradient equals ``jax.grad`` of the energy (rtol 1e-10, float64);
* with inputs scaled so that the similarities reach ~1e4, the energy and the
  gradients (analytic and ``jax.grad``) are finite and float32 when the inputs
  are float32, and close to the float64 values;

plus a registry of EM/CCCP runs (monotone energy) and one of every public
function with a ``key`` (same key, same result; another key, another result).

Every test is ``derandomize=True, database=None``: the same examples on every
run, so CI runs are reproducible.

Tolerances. Energies are compared relative to the natural magnitude of the
sum, :math:`S = \\sum_c (\\max_p |\\mathrm{sim}_{cp}| + \\ln P) + 1`: a float64
evaluation has error of order :math:`10^{-16} S` times a small factor, so
``1e-12 * S`` leaves a margin of a few hundred and still catches any
formula error (which is of order :math:`S`). For float32 the inputs
themselves are rounded to float32 (relative error :math:`6\\times10^{-8}`),
which moves each similarity by about that fraction of its size: ``1e-4 * S``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lse_energy import (
    anpc,
    attention,
    core,
    diffusion,
    embedding,
    expanding,
    gan,
    gmm,
    hopfield,
    pcn,
    population,
    rbm,
    slds,
    slot_attention,
    structural,
    vae,
)
from lse_energy import autoencoder as ae_mod
from lse_energy import mixture_pc as mpc
from lse_energy.experiments import diffusion_mlp as dmlp
from lse_energy.testing import relative_error

mp.mp.dps = 50

SETTINGS = dict(derandomize=True, database=None, deadline=None)


class Instance(NamedTuple):
    """One small model instance.

    Attributes:
      z: the point (pytree of float arrays) the energy is differentiated at.
      energy: ``z -> scalar`` (the package energy).
      grad: ``z -> pytree like z`` (the package's analytic gradients).
      sim: ``z -> (C, P)`` similarities (package), used for the scale ``S``.
      numpy: ``numpy z -> float`` float64 reference from the formula.
      mpmath: ``numpy z -> mpf`` 50-digit reference from the formula.
    """

    z: Any
    energy: Callable
    grad: Callable
    sim: Callable
    numpy: Callable
    mpmath: Callable


def _np(z):
    return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), z)


def _np_lse(s):
    m = np.max(s, axis=-1, keepdims=True)
    return (np.log(np.sum(np.exp(s - m), axis=-1, keepdims=True)) + m)[..., 0]


def _mp_lse_energy(rows):
    """-sum_c ln sum_p exp s_cp over rows of mpf values."""
    return -mp.fsum(mp.log(mp.fsum(mp.exp(s) for s in row)) for row in rows)


def _mpm(a):
    a = np.asarray(a, np.float64)
    return mp.matrix([[mp.mpf(float(v)) for v in row] for row in a])


def _mpv(a):
    return [mp.mpf(float(v)) for v in np.asarray(a, np.float64).ravel()]


def _mp_gauss_logpdf(diff, cov):
    """ln N(diff | 0, cov) in mpmath; diff a list, cov a numpy (d, d)."""
    S = _mpm(cov)
    d = S.rows
    u = mp.matrix(diff)
    quad = (u.T * mp.inverse(S) * u)[0, 0]
    return -quad / 2 - mp.log(mp.det(S)) / 2 - d * mp.log(2 * mp.pi) / 2


def _np_gauss_logpdf(diff, cov):
    """ln N(diff | 0, cov) for diff (..., d)."""
    d = cov.shape[-1]
    quad = np.einsum("...i,ij,...j->...", diff, np.linalg.inv(cov), diff)
    return -0.5 * quad - 0.5 * np.linalg.slogdet(cov)[1] - 0.5 * d * np.log(2 * np.pi)


def _simplex(rng, k):
    """Mixing weights that are exact in float32 and sum to exactly 1 (multiples of 1/1024)."""
    counts = 1 + rng.multinomial(1024 - k, rng.dirichlet(2.0 * np.ones(k)))
    return counts / 1024.0


def _spd(rng, K, d):
    M = rng.normal(size=(K, d, d))
    return np.einsum("kij,klj->kil", M, M) / d + 0.5 * np.eye(d)


# ---------------------------------------------------------------------------
# Builders: (seed, n children, k parents, d dimension, scale) -> Instance
# ``scale`` multiplies the data so that the similarities grow like scale**power.
# ---------------------------------------------------------------------------


def build_core(seed, n, k, d, scale):
    sim = scale * np.random.default_rng(seed).normal(size=(n, k))

    def mp_ref(s):
        return _mp_lse_energy([[mp.mpf(float(v)) for v in row] for row in s])

    return Instance(
        z=jnp.asarray(sim),
        energy=lambda s: core.energy(s),
        grad=lambda s: -core.weights(s),  # -dE/dsim = softmax (eq. 4)
        sim=lambda s: s,
        numpy=lambda s: -np.sum(_np_lse(s)),
        mpmath=mp_ref,
    )


def build_gmm(seed, n, k, d, scale):
    rng = np.random.default_rng(seed)
    w = _simplex(rng, k)
    z = dict(
        weights=jnp.asarray(w),
        means=jnp.asarray(rng.normal(size=(k, d))),
        covariances=jnp.asarray(_spd(rng, k, d)),
        x=jnp.asarray(scale * rng.normal(size=(n, d))),
    )

    def params(z):
        return gmm.Params(z["weights"], z["means"], z["covariances"])

    def grad(z):
        p = params(z)
        return dict(
            weights=gmm.grad_weights(p, z["x"]),
            means=gmm.grad_means(p, z["x"]),
            covariances=gmm.grad_covariances(p, z["x"]),
            x=gmm.grad_x(p, z["x"]),
        )

    def np_sim(z):
        diff = z["x"][:, None, :] - z["means"][None]
        return np.log(z["weights"])[None] + np.stack(
            [_np_gauss_logpdf(diff[:, j], z["covariances"][j]) for j in range(k)], axis=1
        )

    def mp_ref(z):
        rows = [
            [
                mp.log(mp.mpf(float(z["weights"][j])))
                + _mp_gauss_logpdf(
                    [mp.mpf(float(a)) - mp.mpf(float(b)) for a, b in zip(z["x"][i], z["means"][j])], z["covariances"][j]
                )
                for j in range(k)
            ]
            for i in range(n)
        ]
        return _mp_lse_energy(rows)

    return Instance(
        z,
        lambda z: gmm.energy(params(z), z["x"]),
        grad,
        lambda z: gmm.sim(params(z), z["x"]),
        lambda z: -np.sum(_np_lse(np_sim(z))),
        mp_ref,
    )


def build_slds(seed, n, k, d, scale):
    rng = np.random.default_rng(seed)
    T = n + 1
    z = dict(
        x=jnp.asarray(scale * rng.normal(size=(T, d))),
        A=jnp.asarray(0.7 * rng.normal(size=(k, d, d))),
        b=jnp.asarray(rng.normal(size=(k, d))),
    )
    w = _simplex(rng, k)
    S = _spd(rng, k, d)

    def params(z):
        dt = z["x"].dtype
        return slds.Params(jnp.asarray(w, dt), z["A"], z["b"], jnp.asarray(S, dt))

    def grad(z):
        p = params(z)
        return dict(x=slds.grad_x(p, z["x"]), A=slds.grad_A(p, z["x"]), b=slds.grad_b(p, z["x"]))

    def np_sim(z):
        r = z["x"][1:, None, :] - np.einsum("kij,tj->tki", z["A"], z["x"][:-1]) - z["b"][None]
        return np.log(np.asarray(w))[None] + np.stack([_np_gauss_logpdf(r[:, j], S[j]) for j in range(k)], axis=1)

    def mp_ref(z):
        rows = []
        for t in range(T - 1):
            row = []
            for j in range(k):
                pred = _mpm(z["A"][j]) * mp.matrix(_mpv(z["x"][t]))
                r = [mp.mpf(float(z["x"][t + 1][i])) - pred[i] - mp.mpf(float(z["b"][j][i])) for i in range(d)]
                row.append(mp.log(mp.mpf(float(w[j]))) + _mp_gauss_logpdf(r, S[j]))
            rows.append(row)
        return _mp_lse_energy(rows)

    return Instance(
        z,
        lambda z: slds.energy(params(z), z["x"]),
        grad,
        lambda z: slds.sim(params(z), z["x"]),
        lambda z: -np.sum(_np_lse(np_sim(z))),
        mp_ref,
    )


def build_hopfield(seed, n, k, d, scale):
    rng = np.random.default_rng(seed)
    beta = float(rng.uniform(0.2, 3.0))
    z = dict(
        memories=jnp.asarray(scale * rng.normal(size=(k, d))), queries=jnp.asarray(scale * rng.normal(size=(n, d)))
    )

    def grad(z):
        return dict(
            memories=hopfield.grad_memories(z["memories"], z["queries"], beta=beta),
            queries=hopfield.grad_queries(z["memories"], z["queries"], beta=beta),
        )

    def mp_ref(z):
        b = mp.mpf(beta)
        rows = [
            [b * mp.fsum(mp.mpf(float(a)) * mp.mpf(float(c)) for a, c in zip(q, m)) for m in z["memories"]]
            for q in z["queries"]
        ]
        return _mp_lse_energy(rows) / b

    return Instance(
        z,
        lambda z: hopfield.energy(z["memories"], z["queries"], beta=beta),
        grad,
        lambda z: beta * z["queries"] @ z["memories"].T,
        lambda z: -np.sum(_np_lse(beta * z["queries"] @ z["memories"].T)) / beta,
        mp_ref,
    )


def build_cross_attention(seed, n, k, d, scale):
    rng = np.random.default_rng(seed)
    beta = float(rng.uniform(0.2, 3.0))
    mask = rng.random((n, k)) < 0.7
    mask[np.arange(n), rng.integers(0, k, n)] = True  # every query keeps at least one key
    mask = jnp.asarray(mask)
    z = dict(q=jnp.asarray(scale * rng.normal(size=(n, d))), k=jnp.asarray(scale * rng.normal(size=(k, d))))
    kw = dict(beta=beta, mask=mask)

    def grad(z):
        return dict(q=attention.grad_q(z["q"], z["k"], **kw), k=attention.grad_k(z["q"], z["k"], **kw))

    def np_ref(z):
        s = np.where(np.asarray(mask), beta * z["q"] @ z["k"].T, -np.inf)
        return -np.sum(_np_lse(s))

    def mp_ref(z):
        b = mp.mpf(beta)
        rows = [
            [
                b * mp.fsum(mp.mpf(float(a)) * mp.mpf(float(c)) for a, c in zip(z["q"][i], z["k"][j]))
                for j in range(k)
                if bool(mask[i, j])
            ]
            for i in range(n)
        ]
        return _mp_lse_energy(rows)

    return Instance(
        z,
        lambda z: attention.energy(z["q"], z["k"], **kw),
        grad,
        lambda z: jnp.where(mask, beta * z["q"] @ z["k"].T, 0.0),
        np_ref,
        mp_ref,
    )


def build_self_attention(seed, n, k, d, scale):
    rng = np.random.default_rng(seed)
    beta = float(rng.uniform(0.2, 3.0))
    dk = k  # reuse the drawn size as the key width
    params = attention.Params(wq=jnp.asarray(rng.normal(size=(dk, d))), wk=jnp.asarray(rng.normal(size=(dk, d))))
    mask = attention.causal_mask(n)
    z = jnp.asarray(scale * rng.normal(size=(n, d)))
    wq, wk, m = (np.asarray(a) for a in (*params, mask))

    def np_sim(x):
        return beta * (x @ wq.T) @ (x @ wk.T).T

    def mp_ref(x):
        b = mp.mpf(beta)
        Q = _mpm(x) * _mpm(wq).T
        Kt = _mpm(x) * _mpm(wk).T
        rows = [[b * mp.fsum(Q[i, a] * Kt[j, a] for a in range(dk)) for j in range(n) if m[i, j]] for i in range(n)]
        return _mp_lse_energy(rows)

    def p(x):
        return attention.Params(params.wq.astype(x.dtype), params.wk.astype(x.dtype))

    return Instance(
        z,
        lambda x: attention.self_energy(p(x), x, beta=beta, mask=mask),
        lambda x: attention.grad_self(p(x), x, beta=beta, mask=mask),
        lambda x: jnp.where(mask, beta * (x @ params.wq.T) @ (x @ params.wk.T).T, 0.0),
        lambda x: -np.sum(_np_lse(np.where(m, np_sim(x), -np.inf))),
        mp_ref,
    )


def build_slot_attention(seed, n, k, d, scale):
    rng = np.random.default_rng(seed)
    h = d + 1
    z = dict(
        x=jnp.asarray(scale * rng.normal(size=(n, d))),
        mu=jnp.asarray(scale * rng.normal(size=(k, d))),
        w_k=jnp.asarray(rng.normal(size=(h, d))),
        w_q=jnp.asarray(rng.normal(size=(h, d))),
    )

    def p(z):
        return slot_attention.Params(z["w_k"], z["w_q"])

    def grad(z):
        args = (p(z), z["x"], z["mu"])
        return dict(
            x=slot_attention.grad_x(*args),
            mu=slot_attention.grad_mu(*args),
            w_k=slot_attention.grad_w_k(*args),
            w_q=slot_attention.grad_w_q(*args),
        )

    def np_sim(z):
        return (z["x"] @ z["w_k"].T) @ (z["mu"] @ z["w_q"].T).T

    def mp_ref(z):
        Kx = _mpm(z["x"]) * _mpm(z["w_k"]).T
        Qm = _mpm(z["mu"]) * _mpm(z["w_q"]).T
        rows = [[mp.fsum(Kx[j, a] * Qm[i, a] for a in range(h)) for i in range(k)] for j in range(n)]
        return _mp_lse_energy(rows)

    return Instance(
        z,
        lambda z: slot_attention.energy(p(z), z["x"], z["mu"]),
        grad,
        lambda z: slot_attention.sim(p(z), z["x"], z["mu"]),
        lambda z: -np.sum(_np_lse(np_sim(z))),
        mp_ref,
    )


def build_rbm(seed, n, k, d, scale):
    """n samples, k hidden units, d visible units; v is real-valued (continuous relaxation)."""
    rng = np.random.default_rng(seed)
    z = dict(
        W=jnp.asarray(rng.normal(size=(d, k))),
        b=jnp.asarray(rng.normal(size=d)),
        c=jnp.asarray(rng.normal(size=k)),
        v=jnp.asarray(scale * rng.normal(size=(n, d))),
    )

    def p(z):
        return rbm.Params(z["W"], z["b"], z["c"])

    def grad(z):
        g = rbm.grad_params(p(z), z["v"])  # gradient of the *mean* free energy
        N = z["v"].shape[0]
        return dict(W=N * g.W, b=N * g.b, c=N * g.c, v=rbm.grad_v(p(z), z["v"]))

    def hid(z):  # (N, n_hidden, 2) sims of each hidden unit's two states {0, c + W'v}
        s = z["v"] @ z["W"] + z["c"]
        return jnp.stack([jnp.zeros_like(s), s], axis=-1).reshape(-1, 2)

    def np_ref(z):  # F(v) = -b'v - sum_j softplus(c_j + W_j'v), summed over samples
        s = z["v"] @ z["W"] + z["c"]
        return float(np.sum(-(z["v"] @ z["b"]) - np.sum(np.logaddexp(0.0, s), axis=-1)))

    def mp_ref(z):
        total = mp.mpf(0)
        for v in z["v"]:
            vm = _mpv(v)
            total -= mp.fsum(a * mp.mpf(float(b)) for a, b in zip(vm, z["b"]))
            for j in range(k):
                s = mp.mpf(float(z["c"][j])) + mp.fsum(vm[i] * mp.mpf(float(z["W"][i, j])) for i in range(d))
                total -= mp.log(1 + mp.exp(s))
        return total

    return Instance(z, lambda z: jnp.sum(rbm.energy(p(z), z["v"])), grad, hid, np_ref, mp_ref)


def build_diffusion(seed, n, k, d, scale):
    """n noisy points x (children), k training points (parents), T = 10 steps, t drawn."""
    rng = np.random.default_rng(seed)
    betas = np.linspace(0.05, 0.3, 10)
    schedule = diffusion.make_schedule(jnp.asarray(betas))
    t = int(rng.integers(1, 11))
    data = jnp.asarray(rng.normal(size=(k, d)))
    z = jnp.asarray(scale * rng.normal(size=(n, d)))

    def sims(x, data_, abar, sqrt):
        return -np.sum((x[:, None, :] - sqrt(abar) * data_[None]) ** 2, axis=-1) / (2 * (1 - abar))

    def np_ref(x):
        abar = np.prod(1.0 - betas[:t])
        return -np.sum(_np_lse(sims(x, np.asarray(data), abar, np.sqrt)))

    def mp_ref(x):
        abar = mp.fprod(1 - mp.mpf(float(b)) for b in betas[:t])
        ra = mp.sqrt(abar)
        rows = [
            [
                -mp.fsum((mp.mpf(float(x[b, a])) - ra * mp.mpf(float(data[i, a]))) ** 2 for a in range(d))
                / (2 * (1 - abar))
                for i in range(k)
            ]
            for b in range(n)
        ]
        return _mp_lse_energy(rows)

    def sim(x):
        abar = jnp.prod(1.0 - jnp.asarray(betas[:t], x.dtype))
        return -jnp.sum((x[:, None, :] - jnp.sqrt(abar) * data.astype(x.dtype)[None]) ** 2, axis=-1) / (2 * (1 - abar))

    def energy(x):
        sch = schedule if x.dtype == jnp.float64 else diffusion.make_schedule(jnp.asarray(betas, x.dtype))
        return diffusion.energy(data.astype(x.dtype), sch, x, t)

    def grad(x):
        sch = schedule if x.dtype == jnp.float64 else diffusion.make_schedule(jnp.asarray(betas, x.dtype))
        return -diffusion.ideal_score(data.astype(x.dtype), sch, x, t)  # score = -dE/dx

    return Instance(z, energy, grad, sim, np_ref, mp_ref)


def build_pc_mixture(seed, n, k, d, scale):
    """n data points in R^d, k latent causes in R^2, a tanh network with 4 hidden units."""
    rng = np.random.default_rng(seed)
    m, H = 2, 4
    z = dict(
        x=jnp.asarray(scale * rng.normal(size=(n, d))),
        mu=jnp.asarray(rng.normal(size=(k, m))),
        params=mpc.Params(
            W1=jnp.asarray(rng.normal(size=(H, m))),
            b1=jnp.asarray(rng.normal(size=H)),
            W2=jnp.asarray(rng.normal(size=(d, H))),
            b2=jnp.asarray(rng.normal(size=d)),
        ),
    )

    def grad(z):
        args = (z["params"], z["x"], z["mu"])
        return dict(x=mpc.grad_x(*args), mu=mpc.grad_mu(*args), params=mpc.grad_params(*args))

    def np_ref(z):
        P = z["params"]
        f = np.tanh(z["mu"] @ P.W1.T + P.b1) @ P.W2.T + P.b2
        return -np.sum(_np_lse(-0.5 * np.sum((z["x"][:, None] - f[None]) ** 2, axis=-1)))

    def mp_ref(z):
        P = z["params"]
        f = []
        for mu in z["mu"]:
            hidden = [
                mp.tanh(
                    mp.fsum(mp.mpf(float(P.W1[a, b])) * mp.mpf(float(mu[b])) for b in range(m)) + mp.mpf(float(P.b1[a]))
                )
                for a in range(H)
            ]
            f.append(
                [
                    mp.fsum(mp.mpf(float(P.W2[o, a])) * hidden[a] for a in range(H)) + mp.mpf(float(P.b2[o]))
                    for o in range(d)
                ]
            )
        rows = [
            [-mp.fsum((mp.mpf(float(x[o])) - f[j][o]) ** 2 for o in range(d)) / 2 for j in range(k)] for x in z["x"]
        ]
        return _mp_lse_energy(rows)

    return Instance(
        z,
        lambda z: mpc.energy(z["params"], z["x"], z["mu"]),
        grad,
        lambda z: mpc.sim(z["params"], z["x"], z["mu"]),
        np_ref,
        mp_ref,
    )


def build_pcn(seed, n, k, d, scale):
    """A 3-layer network (d, k+1, 2) on a batch of n; K = 1 parent per child."""
    rng = np.random.default_rng(seed)
    sizes = (d, k + 1, 2)
    prec = jnp.asarray([0.5, 1.0, 2.0])
    z = dict(
        params=pcn.Params(
            weights=tuple(jnp.asarray(rng.normal(size=(sizes[l + 1], sizes[l]))) for l in range(2)),
            biases=tuple(jnp.asarray(rng.normal(size=sizes[l + 1])) for l in range(2)),
            prior_mean=jnp.asarray(rng.normal(size=d)),
        ),
        xs=tuple(jnp.asarray(scale * rng.normal(size=(n, s))) for s in sizes),
    )

    def grad(z):
        return dict(params=pcn.grad_params(z["params"], z["xs"], prec), xs=pcn.grad_x(z["params"], z["xs"], prec))

    def np_ref(z):
        P, xs, pr = z["params"], z["xs"], np.asarray(prec)
        total = 0.5 * pr[0] * np.sum((xs[0] - P.prior_mean) ** 2)
        for l in range(2):
            mu = np.tanh(xs[l]) @ P.weights[l].T + P.biases[l]
            total += 0.5 * pr[l + 1] * np.sum((xs[l + 1] - mu) ** 2)
        return total

    def mp_ref(z):
        P, xs = z["params"], z["xs"]
        pr = [mp.mpf(float(v)) for v in np.asarray(prec)]
        total = (
            pr[0]
            / 2
            * mp.fsum((mp.mpf(float(a)) - mp.mpf(float(b))) ** 2 for row in xs[0] for a, b in zip(row, P.prior_mean))
        )
        for l in range(2):
            for row_in, row_out in zip(xs[l], xs[l + 1]):
                th = [mp.tanh(mp.mpf(float(v))) for v in row_in]
                for o in range(sizes[l + 1]):
                    mu = mp.fsum(mp.mpf(float(P.weights[l][o, i])) * th[i] for i in range(sizes[l])) + mp.mpf(
                        float(P.biases[l][o])
                    )
                    total += pr[l + 1] / 2 * (mp.mpf(float(row_out[o])) - mu) ** 2
        return total

    return Instance(
        z,
        lambda z: pcn.energy(z["params"], z["xs"], prec),
        grad,
        lambda z: pcn.sim(z["params"], z["xs"], prec).reshape(-1, 1),
        np_ref,
        mp_ref,
    )


def build_structural(seed, n, k, d, scale):
    """Singh & Buckley §4 collapsed free energy (prior "hopfield"), differentiated in the latents."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, d + 1)))
    w = jnp.asarray(scale * rng.normal(size=(d, d + 1)))
    z = dict(mu=jnp.asarray(rng.normal(size=(k, d))))

    def xw(z):  # the fixed x and W in the latents' dtype (the float32 test casts z only)
        return x.astype(z["mu"].dtype), w.astype(z["mu"].dtype)

    def sim(z):
        xc, wc = xw(z)
        return z["mu"] @ wc @ xc.T  # (k latents, n observations): each latent picks one observation

    def np_sim(mu):
        return mu @ np.asarray(w) @ np.asarray(x).T

    def grad(z):  # dF/dmu = mu - sum_j a_ij W x_j, and sum_j a_ij W x_j is one CCCP step
        return dict(mu=z["mu"] - structural.cccp_step(z["mu"], *xw(z)))

    return Instance(
        z=z,
        energy=lambda z: structural.energy(z["mu"], *xw(z)),
        grad=grad,
        sim=sim,
        numpy=lambda z: 0.5 * np.sum(z["mu"] ** 2) - np.sum(_np_lse(np_sim(z["mu"]))),
        mpmath=lambda z: (
            mp.mpf(0.5) * mp.fsum(_mpm(z["mu"] ** 2))
            + _mp_lse_energy([[mp.mpf(float(v)) for v in row] for row in np_sim(z["mu"])])
        ),
    )


def build_expanding(seed, n, k, d, scale):
    """Expanding attention's energy: a geometric prior over the distance to each of k keys."""
    rng = np.random.default_rng(seed)
    z = dict(sims=jnp.asarray(scale * rng.normal(size=(n, k))), q=jnp.asarray(rng.uniform(0.1, 0.9, size=n)))

    def np_sim(z):
        i = np.arange(z["sims"].shape[-1])
        return z["sims"] + np.log(z["q"])[:, None] + i * np.log1p(-z["q"])[:, None]

    def mp_ref(z):
        rows = [
            [mp.mpf(float(s)) + mp.log(mp.mpf(float(q))) + i * mp.log(1 - mp.mpf(float(q))) for i, s in enumerate(row)]
            for row, q in zip(z["sims"], z["q"])
        ]
        return _mp_lse_energy(rows)

    return Instance(
        z=z,
        energy=lambda z: expanding.energy(z["sims"], z["q"]),
        grad=lambda z: dict(sims=expanding.grad_sims(z["sims"], z["q"]), q=expanding.grad_q(z["sims"], z["q"])),
        sim=lambda z: (
            z["sims"] + jnp.log(z["q"])[:, None] + jnp.arange(z["sims"].shape[-1]) * jnp.log1p(-z["q"])[:, None]
        ),
        numpy=lambda z: -np.sum(_np_lse(np_sim(z))),
        mpmath=mp_ref,
    )


def build_anpc(seed, n, k, d, scale):
    """Attention-normalised PC (Singh & Buckley §4.4): n states of k + 1 neurons, all-to-all synapses."""
    rng = np.random.default_rng(seed)
    N = k + 1
    W = jnp.asarray(rng.normal(size=(N, N)))
    B = jnp.asarray(0.3 * rng.normal(size=(N, N)))
    A = jnp.asarray(~np.eye(N, dtype=bool))  # every neuron has the other k as presynaptic parents
    prec = jnp.asarray(rng.uniform(0.5, 2.0, size=(N, N)))
    z = dict(x=jnp.asarray(scale * rng.normal(size=(n, N))))

    def cast(z):  # the fixed parameters in the states' dtype (the float32 test casts z only)
        t = z["x"].dtype
        return anpc.Params(W.astype(t), B.astype(t), A), z["x"], prec.astype(t)

    def np_sim(x):
        e = x[:, :, None] - (np.asarray(W) * np.tanh(x)[:, None, :] + np.asarray(B))
        s = -0.5 * np.asarray(prec) * e * e
        off = ~np.eye(N, dtype=bool)
        return s[:, off].reshape(x.shape[0] * N, N - 1)  # one row per (state, neuron): its k parents

    return Instance(
        z=z,
        energy=lambda z: anpc.energy(*cast(z)),
        grad=lambda z: dict(x=anpc.grad_x(*cast(z))),
        sim=lambda z: anpc.sim(*cast(z)),
        numpy=lambda z: -np.sum(_np_lse(np_sim(z["x"]))),
        mpmath=lambda z: _mp_lse_energy([[mp.mpf(float(v)) for v in row] for row in np_sim(z["x"])]),
    )


def build_embedding(seed, n, k, d, scale):
    """k-word vocabulary: children are the k centre words (weighted by their pair counts N_c), parents the k
    candidate context words, sim = V_w . U_c; counts in 1..3 (n unused)."""
    rng = np.random.default_rng(seed)
    z = dict(U=jnp.asarray(scale * rng.normal(size=(k, d))), V=jnp.asarray(scale * rng.normal(size=(k, d))))
    counts = jnp.asarray(rng.integers(1, 4, size=(k, k)).astype(float))
    Nc = np.asarray(counts).sum(axis=1)

    def p(z):
        return embedding.Params(z["U"], z["V"])

    def grad(z):
        g = embedding.grad_params(p(z), counts)
        return dict(U=g.U, V=g.V)

    def np_ref(z):  # E = -sum_c N_c ln sum_w exp(U_c . V_w)
        return float(-np.sum(Nc * _np_lse(z["U"] @ z["V"].T)))

    def mp_ref(z):
        U, V = _mpm(z["U"]), _mpm(z["V"])
        rows = [[mp.fsum(U[c, a] * V[w, a] for a in range(d)) for w in range(k)] for c in range(k)]
        return -mp.fsum(mp.mpf(float(Nc[c])) * mp.log(mp.fsum(mp.exp(s) for s in rows[c])) for c in range(k))

    return Instance(z, lambda z: embedding.energy(p(z), counts), grad, lambda z: embedding.scores(p(z)), np_ref, mp_ref)


def build_gan(seed, n, k, d, scale):
    """n real samples x, k noises z (children), parents {0, -+a}; linear D a(x) = x w + c, affine G(z) = z A + m."""
    rng = np.random.default_rng(seed)
    w, c = rng.normal(size=(d, 1)), rng.normal(size=1)
    A, m = rng.normal(size=(d, d)), rng.normal(size=d)
    params = gan.Params(gan.MLP((jnp.asarray(A),), (jnp.asarray(m),)), gan.MLP((jnp.asarray(w),), (jnp.asarray(c),)))
    z = dict(x=jnp.asarray(scale * rng.normal(size=(n, d))), z=jnp.asarray(scale * rng.normal(size=(k, d))))

    def p(z):
        dt = z["x"].dtype
        return jax.tree_util.tree_map(lambda a: a.astype(dt), params)

    def grad(z):
        q = p(z)
        a_r, a_f = gan.logit(q, z["x"]), gan.logit(q, gan.generate(q, z["z"]))
        n_r, n_f = a_r.shape[0], a_f.shape[0]
        g_r = -n_r * gan.grad_logistic_loss_logits(a_r, jnp.ones_like(a_r))  # dE/da_real = 1 - sigma(a)
        g_f = -n_f * gan.grad_logistic_loss_logits(a_f, jnp.zeros_like(a_f))  # dE/da_fake = -sigma(a)
        wv = q.discriminator.weights[0][:, 0]
        return dict(x=g_r[:, None] * wv[None, :], z=g_f[:, None] * (q.generator.weights[0] @ wv)[None, :])

    def sims(z):
        q = p(z)
        s = jnp.concatenate([-gan.logit(q, z["x"]), gan.logit(q, gan.generate(q, z["z"]))])
        return jnp.stack([jnp.zeros_like(s), s], axis=-1)

    def np_ref(z):  # sum ln D(x) + sum ln(1 - D(G(z))) with logaddexp
        a_r = (z["x"] @ w)[:, 0] + c[0]
        a_f = ((z["z"] @ A + m) @ w)[:, 0] + c[0]
        return float(-np.sum(np.logaddexp(0.0, -a_r)) - np.sum(np.logaddexp(0.0, a_f)))

    def mp_ref(z):
        def lin(row, W, b):
            return [
                mp.fsum(mp.mpf(float(row[i])) * mp.mpf(float(W[i, j])) for i in range(W.shape[0])) + mp.mpf(float(b[j]))
                for j in range(W.shape[1])
            ]

        rows = [[mp.mpf(0), -lin(x, w, c)[0]] for x in z["x"]]
        for zz in z["z"]:
            g = lin(zz, A, m)
            a = mp.fsum(g[i] * mp.mpf(float(w[i, 0])) for i in range(d)) + mp.mpf(float(c[0]))
            rows.append([mp.mpf(0), a])
        return _mp_lse_energy(rows)

    return Instance(z, lambda z: gan.energy(p(z), z["x"], z["z"]), grad, sims, np_ref, mp_ref)


def build_population(seed, n, k, d, scale):
    """n responses (children), k candidate stimuli (parents), d Poisson neurons;
    sim(n, s_j) = sum_i n_i ln F_ji - sum_i F_ji; counts real >= 0 (continuous relaxation), grown by scale."""
    rng = np.random.default_rng(seed)
    F = jnp.asarray(rng.uniform(0.2, 5.0, size=(k, d)))
    z = dict(counts=jnp.asarray(scale * 3.0 * np.abs(rng.normal(size=(n, d)))))

    def np_sim(z):
        return z["counts"] @ np.log(np.asarray(F)).T - np.asarray(F).sum(axis=1)

    def mp_ref(z):
        Fm = [[mp.mpf(float(v)) for v in row] for row in np.asarray(F)]
        rows = [
            [mp.fsum(mp.mpf(float(c[i])) * mp.log(Fm[j][i]) - Fm[j][i] for i in range(d)) for j in range(k)]
            for c in z["counts"]
        ]
        return _mp_lse_energy(rows)

    def f_like(z):  # F in the dtype of the point (the float32 test casts z only)
        return F.astype(z["counts"].dtype)

    return Instance(
        z,
        lambda z: population.energy(z["counts"], f_like(z)),
        lambda z: dict(counts=population.grad_counts(z["counts"], f_like(z))),
        lambda z: population.sim(z["counts"], f_like(z)),
        lambda z: -np.sum(_np_lse(np_sim(z))),
        mp_ref,
    )


def build_vae(seed, n, k, d, scale):
    """n latent codes z (children), k mixture components of the prior (parents), diagonal covariances."""
    rng = np.random.default_rng(seed)
    z = dict(
        logits=jnp.asarray(rng.normal(size=k)),
        means=jnp.asarray(rng.normal(size=(k, d))),
        log_scales=jnp.asarray(0.3 * rng.normal(size=(k, d))),
        z=jnp.asarray(scale * rng.normal(size=(n, d))),
    )

    def prior(z):
        return vae.MixturePrior(z["logits"], z["means"], z["log_scales"])

    def grad(z):
        g, g_z = vae.grad_prior_z(prior(z), z["z"])
        return dict(logits=g.logits, means=g.means, log_scales=g.log_scales, z=g_z)

    def np_sim(z):  # ln pi_k + sum_j ln N(z_nj; m_kj, s_kj^2), written out
        log_pi = z["logits"] - _np_lse(z["logits"][None])[0]
        s2 = np.exp(2 * z["log_scales"])
        diff = z["z"][:, None, :] - z["means"][None]
        return log_pi[None] + np.sum(-0.5 * diff**2 / s2[None] - 0.5 * np.log(2 * np.pi * s2[None]), axis=-1)

    def mp_ref(z):
        lse_pi = mp.log(mp.fsum(mp.exp(mp.mpf(float(a))) for a in z["logits"]))
        rows = [
            [
                mp.mpf(float(z["logits"][j]))
                - lse_pi
                + mp.fsum(
                    -((mp.mpf(float(z["z"][i, c])) - mp.mpf(float(z["means"][j, c]))) ** 2)
                    / (2 * mp.exp(2 * mp.mpf(float(z["log_scales"][j, c]))))
                    - mp.mpf(float(z["log_scales"][j, c]))
                    - mp.log(2 * mp.pi) / 2
                    for c in range(d)
                )
                for j in range(k)
            ]
            for i in range(n)
        ]
        return _mp_lse_energy(rows)

    return Instance(
        z,
        lambda z: vae.energy(prior(z), z["z"]),
        grad,
        lambda z: vae.sim(prior(z), z["z"]),
        lambda z: -np.sum(_np_lse(np_sim(z))),
        mp_ref,
    )


class Model(NamedTuple):
    name: str
    build: Callable
    power: float  # similarities grow like scale**power


MODELS = [
    Model("core", build_core, 1.0),
    Model("gmm", build_gmm, 2.0),
    Model("slds", build_slds, 2.0),
    Model("hopfield", build_hopfield, 2.0),
    Model("attention.cross", build_cross_attention, 2.0),
    Model("attention.self", build_self_attention, 2.0),
    Model("slot_attention", build_slot_attention, 2.0),
    Model("rbm", build_rbm, 1.0),
    Model("diffusion", build_diffusion, 2.0),
    Model("mixture_pc", build_pc_mixture, 2.0),
    Model("pcn", build_pcn, 2.0),
    Model("structural", build_structural, 2.0),
    Model("expanding", build_expanding, 1.0),
    Model("anpc", build_anpc, 2.0),
    Model("embedding", build_embedding, 2.0),
    Model("gan", build_gan, 1.0),
    Model("population", build_population, 1.0),
    Model("vae", build_vae, 2.0),
]
MODEL_PARAMS = [pytest.param(m, id=m.name) for m in MODELS]

seeds = st.integers(0, 2**31 - 1)
# (children n, parents k, dimension d). A few fixed shapes keep JAX's per-shape
# compilations cached across examples; k = 1 (a single parent) is included.
SIZES = st.sampled_from([(2, 3, 2), (1, 1, 1)])


def _scale_of(inst, z=None) -> float:
    """S = sum_c (max_p |sim_cp| + ln P) + 1, from the package sims in float64."""
    s = np.asarray(inst.sim(inst.z if z is None else z), np.float64)
    s = s.reshape(-1, s.shape[-1])
    return float(np.sum(np.max(np.abs(s), axis=-1)) + s.shape[0] * math.log(s.shape[-1]) + 1.0)


# ---------------------------------------------------------------------------
# Energy = independent references
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODEL_PARAMS)
@settings(max_examples=3, **SETTINGS)
@given(seed=seeds, sizes=SIZES)
def test_energy_matches_numpy_and_mpmath(model, seed, sizes):
    n, k, d = sizes
    inst = model.build(seed, n, k, d, 1.0)
    e = float(inst.energy(inst.z))
    S = _scale_of(inst)
    z = _np(inst.z)
    ref_np = float(inst.numpy(z))
    ref_mp = inst.mpmath(z)
    assert abs(e - ref_np) <= 1e-12 * S, (e, ref_np, S)
    assert abs(mp.mpf(e) - ref_mp) <= 1e-12 * S, (e, ref_mp, S)
    # The float64 NumPy reference itself agrees with the 50-digit one.
    assert abs(mp.mpf(ref_np) - ref_mp) <= 1e-12 * S


# ---------------------------------------------------------------------------
# Analytic gradient = jax.grad (float64)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODEL_PARAMS)
@settings(max_examples=3, **SETTINGS)
@given(seed=seeds, sizes=SIZES)
def test_analytic_gradient_equals_autodiff(model, seed, sizes):
    n, k, d = sizes
    inst = model.build(seed, n, k, d, 1.0)
    analytic = inst.grad(inst.z)
    auto = jax.grad(inst.energy)(inst.z)
    assert jax.tree_util.tree_structure(analytic) == jax.tree_util.tree_structure(auto)
    assert relative_error(analytic, auto) <= 1e-10


# ---------------------------------------------------------------------------
# float32 at similarities of size ~1e4
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODEL_PARAMS)
@settings(max_examples=2, **SETTINGS)
@given(seed=seeds, sizes=st.just((2, 3, 2)))
def test_float32_finite_at_large_similarities(model, seed, sizes):
    n, k, d = sizes
    scale = 1.0
    for _ in range(4):  # fixed-point iteration on the scale: sims are ~ scale**power plus offsets
        inst = model.build(seed, n, k, d, scale)
        sims = np.abs(np.asarray(inst.sim(inst.z)))
        scale *= (1e4 / sims.max()) ** (1.0 / model.power)
    inst = model.build(seed, n, k, d, scale)
    sims = np.abs(np.asarray(inst.sim(inst.z)))
    assert 3e3 <= sims.max() <= 3e4, sims.max()  # the similarities do reach ~1e4
    z32 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), inst.z)
    e32 = inst.energy(z32)
    assert e32.dtype == jnp.float32 and bool(jnp.isfinite(e32))
    for g in (inst.grad(z32), jax.grad(inst.energy)(z32)):
        for leaf in jax.tree_util.tree_leaves(g):
            assert leaf.dtype == jnp.float32
            assert bool(jnp.all(jnp.isfinite(leaf)))
    # Close to the float64 energy at the float32-rounded inputs.
    z64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), z32)
    e64 = float(inst.energy(z64))
    assert abs(float(e32) - e64) <= 1e-4 * _scale_of(inst, z64), (float(e32), e64)


# ---------------------------------------------------------------------------
# EM / CCCP runs are monotone
# ---------------------------------------------------------------------------


def _blobs(rng, n_per, k, d, sep=4.0):
    centres = sep * rng.normal(size=(k, d))
    return jnp.asarray(np.concatenate([c + rng.normal(size=(n_per, d)) for c in centres]))


def run_gmm_em(seed, k, d):
    rng = np.random.default_rng(seed)
    x = _blobs(rng, 12, k, d)
    p = gmm.init_params(x, k, key=jax.random.key(seed))
    energies = [gmm.energy(p, x)]
    for _ in range(5):
        p = gmm.em_step(p, x)
        energies.append(gmm.energy(p, x))
    return energies


def run_gmm_fit(seed, k, d):
    rng = np.random.default_rng(seed)
    x = _blobs(rng, 12, k, d)
    trace = gmm.fit(x, k, key=jax.random.key(seed), max_iter=8, tol=0.0).energies
    return list(np.asarray(trace))


def run_slds_em(seed, k, d):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(np.cumsum(rng.normal(size=(25, d)), axis=0) * 0.3)
    p = slds.init_params(x, k, key=jax.random.key(seed))
    energies = [slds.objective(p, x)]
    for _ in range(5):
        p = slds.em_step(p, x)
        energies.append(slds.objective(p, x))
    return energies


def run_hopfield(seed, k, d):
    rng = np.random.default_rng(seed)
    m, q = jnp.asarray(rng.normal(size=(k + 2, d + 1))), jnp.asarray(rng.normal(size=(3, d + 1)))
    beta = float(rng.uniform(0.3, 5.0))
    energies = [hopfield.regularised_energy(m, q, beta=beta)]
    for _ in range(5):
        q = hopfield.update(m, q, beta=beta)
        energies.append(hopfield.regularised_energy(m, q, beta=beta))
    return energies


def run_slot_cccp(seed, k, d):
    rng = np.random.default_rng(seed)
    p = slot_attention.Params(jnp.asarray(rng.normal(size=(d + 1, d))), jnp.asarray(rng.normal(size=(d + 1, d))))
    x, mu = jnp.asarray(rng.normal(size=(6, d))), jnp.asarray(rng.normal(size=(k, d)))
    lam = float(rng.uniform(0.5, 3.0))
    energies = [slot_attention.regularised_energy(p, x, mu, lam)]
    for _ in range(5):
        mu = slot_attention.cccp_step(p, x, mu, lam)
        energies.append(slot_attention.regularised_energy(p, x, mu, lam))
    return energies


def _run_attention_cccp(prior):
    def run(seed, k, d):
        rng = np.random.default_rng(seed)
        mu, x, w = (jnp.asarray(rng.normal(size=s)) for s in ((k, d), (5, d + 1), (d, d + 1)))
        energies = [structural.energy(mu, x, w, prior=prior)]
        for _ in range(5):
            mu = structural.cccp_step(mu, x, w, prior=prior)
            energies.append(structural.energy(mu, x, w, prior=prior))
        return energies

    return run


def run_pc_infer(seed, k, d):
    rng = np.random.default_rng(seed)
    params = mpc.init_params(2, 4, d, key=jax.random.key(seed))
    out = mpc.infer(params, jnp.asarray(rng.normal(size=(6, d))), jnp.asarray(rng.normal(size=(k, 2))), n_steps=6)
    return list(np.asarray(out.energy))


RUNS = {
    "gmm.em_step": run_gmm_em,
    "gmm.fit": run_gmm_fit,
    "slds.em_step": run_slds_em,
    "hopfield.update": run_hopfield,
    "slot_attention.cccp_step": run_slot_cccp,
    "structural.cccp_step-hopfield": _run_attention_cccp("hopfield"),
    "structural.cccp_step-slot": _run_attention_cccp("slot"),
    "mixture_pc.infer": run_pc_infer,
}


@pytest.mark.parametrize("run", list(RUNS.values()), ids=list(RUNS))
@settings(max_examples=3, **SETTINGS)
@given(seed=st.integers(0, 2**16), sizes=st.just((2, 2)))
def test_em_and_cccp_runs_are_monotone(run, seed, sizes):
    k, d = sizes  # fixed shapes: the jitted steps compile once per run
    e = np.asarray([float(v) for v in run(seed, k, d)])
    assert np.all(np.isfinite(e))
    # Non-increasing up to round-off (1e-10 relative is ~1e6 ulps of float64).
    steps = np.diff(e)
    assert np.all(steps <= 1e-10 * (1.0 + np.abs(e[:-1]))), steps
    assert e[-1] < e[0] or np.allclose(e, e[0], rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------
# Same key -> same result (every public function with a key)
# ---------------------------------------------------------------------------

_SCH = diffusion.linear_schedule(8)
_DATA2 = jnp.asarray(np.random.default_rng(7).normal(size=(12, 2)))
_TRAJ = jnp.asarray(np.cumsum(np.random.default_rng(8).normal(size=(16, 2)), axis=0) * 0.3)
_RBM = rbm.Params(W=jnp.asarray(np.random.default_rng(9).normal(size=(3, 2))), b=jnp.zeros(3), c=jnp.zeros(2))
_BIN = jnp.asarray((np.random.default_rng(10).random((6, 3)) < 0.5).astype(float))
_DMLP = dmlp.init_params(2, key=jax.random.key(1), hidden=(4,), n_freqs=2)
_PCMLP = mpc.init_params(2, 3, 2, key=jax.random.key(2))
_PCN = pcn.init_params((2, 3, 2), key=jax.random.key(3))
_SLDS = slds.init_params(_TRAJ, 2, key=jax.random.key(4))
_EMB = embedding.init_params(4, 2, key=jax.random.key(5))
_EMB_COUNTS = jnp.asarray(np.random.default_rng(11).integers(1, 4, size=(4, 4)).astype(float))
_VAE = vae.init_params(3, 2, 4, key=jax.random.key(6), n_components=2)
_VAE_X = jnp.asarray(np.random.default_rng(12).random((6, 3)))
_SGD = optax.sgd(1e-2)  # one object: the optimizer is a static (hashed) argument of the jitted drivers

_GAN = gan.init_params(2, 2, key=jax.random.key(5), generator_hidden=(3,), discriminator_hidden=(3,))

KEYED = {
    "gan.init_params": lambda key: gan.init_params(2, 2, key=key, generator_hidden=(3,), discriminator_hidden=(3,)),
    "gan.init_mlp": lambda key: gan.init_mlp((2, 3, 1), key=key),
    "gan.sample_mixture": lambda key: gan.sample_mixture(_DATA2[:3], 0.1, 5, key=key),
    "gan.fit": lambda key: gan.fit(_GAN, _DATA2, key=key, d_optimizer=_SGD, g_optimizer=_SGD, n_steps=2, batch_size=4),
    "autoencoder.init_params": lambda key: ae_mod.init_params(3, 2, key=key),
    # The random start: k-means (the default) reaches one partition from most keys, so another key
    # need not change its output; the key is what picks the random start's means.
    "gmm.init_params": lambda key: gmm.init_params(_DATA2, 2, key=key, init="random"),
    "gmm.fit": lambda key: gmm.fit(_DATA2, 2, key=key, max_iter=2, init="random"),
    "gmm.streamed_fit": lambda key: gmm.fit(_DATA2, 2, key=key, max_iter=2, chunk_rows=3, init="random"),
    "slds.init_params": lambda key: slds.init_params(_TRAJ, 2, key=key),
    "slds.fit": lambda key: slds.fit(_TRAJ, 2, key=key, max_iter=2, n_init=2),
    "slds.sample": lambda key: slds.sample(_SLDS, jnp.zeros(2), 4, key=key),
    "attention.init_params": lambda key: attention.init_params(3, 2, key=key),
    "attention.init_multihead": lambda key: attention.init_multihead(4, 2, key=key),
    "slot_attention.fourier_features": lambda key: slot_attention.fourier_features(
        _DATA2, n_features=4, lengthscale=0.5, key=key
    ),
    "slot_attention.init_slots": lambda key: slot_attention.init_slots(_DATA2, 3, key=key),
    "slot_attention.blob_scene": lambda key: slot_attention.blob_scene(
        2, key=key, n_per_blob=3, min_separation=0.1, n_candidates=32
    ),
    "rbm.init_params": lambda key: rbm.init_params(3, 2, key=key, scale=0.5),
    "rbm.sample_hidden": lambda key: rbm.sample_hidden(_RBM, _BIN, key=key),
    "rbm.sample_visible": lambda key: rbm.sample_visible(_RBM, jnp.ones((6, 2)), key=key),
    "rbm.gibbs": lambda key: rbm.gibbs(_RBM, _BIN, 2, key=key),
    "rbm.grad_cd": lambda key: rbm.grad_cd(_RBM, _BIN, 1, key=key),
    "rbm.fit": lambda key: rbm.fit(_RBM, _BIN, key=key, optimizer=optax.sgd(0.05), n_epochs=1, batch_size=3),
    "diffusion.q_sample": lambda key: diffusion.q_sample(_SCH, _DATA2, 3, key=key),
    "diffusion.q_step": lambda key: diffusion.q_step(_SCH, _DATA2, 3, key=key),
    "diffusion.simplified_loss": lambda key: diffusion.simplified_loss(
        diffusion.ideal_epsilon, _DATA2, _SCH, _DATA2, key=key
    ),
    "diffusion.sample": lambda key: diffusion.sample(dmlp.epsilon, _DMLP, _SCH, 3, 2, key=key),
    "diffusion.ideal_sample": lambda key: diffusion.ideal_sample(_DATA2, _SCH, 3, key=key),
    "diffusion_mlp.init_params": lambda key: dmlp.init_params(2, key=key, hidden=(4,), n_freqs=2),
    "diffusion_mlp.fit": lambda key: dmlp.fit(_DMLP, _DATA2, _SCH, _SGD, key=key, n_steps=2, batch_size=4),
    "mixture_pc.init_params": lambda key: mpc.init_params(2, 3, 2, key=key),
    "mixture_pc.sample": lambda key: mpc.sample(_PCMLP, 2, 3, key=key),
    "pcn.init_params": lambda key: pcn.init_params((2, 3, 2), key=key),
    "population.init_params": lambda key: population.init_params(2, 5, key=key),
    "pcn.fit": lambda key: pcn.fit(
        _PCN, _DATA2, _DATA2, key=key, optimizer=_SGD, n_epochs=1, batch_size=4, n_infer_steps=2
    ),
    "embedding.init_params": lambda key: embedding.init_params(4, 2, key=key),
    "embedding.sample_chain": lambda key: embedding.sample_chain(embedding.ring_transition(5), 20, key=key),
    "embedding.fit": lambda key: embedding.fit(_EMB, _EMB_COUNTS, optimizer=_SGD, n_steps=2, batch_size=3, key=key),
    "vae.init_params": lambda key: vae.init_params(3, 2, 4, key=key, n_components=2),
    "vae.init_prior": lambda key: vae.init_prior(2, 2, key=key),
    "vae.elbo": lambda key: vae.elbo(_VAE, _VAE_X, key=key, n_samples=2),
    "vae.iwae": lambda key: vae.iwae(_VAE, _VAE_X, key=key, n_samples=3),
    "vae.fit": lambda key: vae.fit(_VAE, _VAE_X, key=key, optimizer=_SGD, n_epochs=2, batch_size=3),
}


def _leaves(out):
    return [
        np.asarray(a)
        for a in jax.tree_util.tree_leaves(out)
        if not (hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jax.dtypes.prng_key))
    ]


def test_keyed_registry_is_complete():
    """Every public function with a keyword-only ``key`` (except the structural module) is in KEYED."""
    import inspect

    from lse_energy import attention as m1
    from lse_energy import diffusion as m2
    from lse_energy import gmm as m3
    from lse_energy import mixture_pc as m4
    from lse_energy import rbm as m5
    from lse_energy import slds as m6
    from lse_energy import slot_attention as m7

    found = set()
    for mod in (ae_mod, m1, m2, m3, m4, pcn, anpc, m5, m6, m7, population, dmlp, embedding, gan, vae):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not isinstance(obj, type):
                params = inspect.signature(obj).parameters
                if "key" in params and params["key"].kind is inspect.Parameter.KEYWORD_ONLY:
                    found.add(f"{mod.__name__.rsplit('.', 1)[-1]}.{name}")
    assert found == set(KEYED), sorted(found ^ set(KEYED))


@pytest.mark.parametrize("fn", list(KEYED.values()), ids=list(KEYED))
@settings(max_examples=1, **SETTINGS)
@given(seed=st.integers(0, 2**31 - 1))
def test_same_key_same_result(fn, seed):
    key = jax.random.key(seed)
    a, b = _leaves(fn(key)), _leaves(fn(key))
    assert len(a) == len(b) and len(a) > 0
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    # The key is used: another key changes the output.
    c = _leaves(fn(jax.random.fold_in(key, 1)))
    assert any(u.shape != w.shape or not np.array_equal(u, w) for u, w in zip(a, c))
