"""Chapter 01 (the log-sum-exp energy): its propositions, checked independently.

Each test checks one proposition on at least 100 random instances (numpy
``default_rng`` with fixed seeds) against an independent computation: the
derivative of an energy written here with explicit loops, taken by the
complex-step method, :math:`\\partial_j f(x) = \\mathrm{Im}\\, f(x + i h e_j) / h`
with :math:`h = 10^{-30}`. That derivative has no subtraction, so it is exact to
float64 round-off and shares no formula with the softmax weights under test.
The chapter's proofs name these tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import core
from tests.support import complex_step_grad, relative_error

jax.config.update("jax_enable_x64", True)

N_INSTANCES = 100
H = 1e-30


# ---------------------------------------------------------------------------
# prop-lse-gradient
# ---------------------------------------------------------------------------


def test_lse_gradient_is_softmax_weighted_sum():
    """ch01, prop-lse-gradient: d/dx[-ln sum_m exp f_m(x)] = -sum_m softmax_m(f) df_m/dx.

    The f_m are random smooth functions (linear + quadratic + sinusoidal). The
    left side is the complex-step derivative of -ln sum exp f written directly;
    the right side uses each f_m's own analytic gradient and the softmax.
    """
    rng = np.random.default_rng(101)
    worst = 0.0
    for _ in range(N_INSTANCES):
        d, M = int(rng.integers(1, 6)), int(rng.integers(1, 7))
        a = rng.normal(size=(M, d))
        B = rng.normal(size=(M, d, d))
        B = 0.5 * (B + np.swapaxes(B, 1, 2))
        c, w, e = rng.normal(size=M), rng.normal(size=(M, d)), rng.normal(size=M)
        x = rng.normal(size=d)

        def f(v):  # (M,) values of f_m(v); complex-analytic
            return a @ v + 0.5 * np.einsum("i,mij,j->m", v, B, v) + c * np.sin(w @ v) + e

        def lhs_energy(v):
            return -np.log(np.sum(np.exp(f(v))))

        grad_f = a + np.einsum("mij,j->mi", B, x) + (c * np.cos(w @ x))[:, None] * w  # (M, d)
        fx = f(x)
        soft = np.exp(fx) / np.sum(np.exp(fx))
        rhs = -soft @ grad_f
        lhs = complex_step_grad(lhs_energy, x)
        worst = max(worst, relative_error(rhs, lhs))
        # the weights are positive and sum to one: a convex combination
        assert np.all(soft > 0) and abs(soft.sum() - 1.0) < 1e-14
    assert worst < 1e-12, worst


# ---------------------------------------------------------------------------
# prop-child-parent (eq. 4)
# ---------------------------------------------------------------------------


def _sim_params(rng, d: int, kind: int) -> tuple:
    """Random parameters of a similarity of the given kind (see :func:`_make_sim`)."""
    if kind == 0:
        return (rng.normal(size=(d, d)),)
    if kind == 1:
        return (rng.uniform(0.5, 2.0),)
    return rng.normal(size=(d, d)), rng.normal(size=d), rng.normal(size=d)


def _make_sim(kind: int, params: tuple):
    """A pairwise similarity usable with numpy (complex) and jax arrays.

    Works on ``(..., d)`` broadcasting inputs and returns ``(...)``. Kind 0 is
    bilinear (attention), 1 Gaussian (a mixture), 2 a nonlinear one.
    """
    if kind == 0:
        (W,) = params
        return lambda vc, vp, xp=np: xp.sum((vc @ W) * vp, axis=-1)
    if kind == 1:
        (s2,) = params
        return lambda vc, vp, xp=np: -0.5 * xp.sum((vc - vp) ** 2, axis=-1) / s2
    U, g, h = params
    return lambda vc, vp, xp=np: xp.tanh(xp.sum((vc @ U) * vp, axis=-1)) + 0.7 * xp.sin(vc @ g) * xp.cos(vp @ h)


def _random_structure(rng):
    """Node count, dimension and random overlapping terms (children, parents, mask, kind).

    Children may repeat, parents may also be children, masks are random with at
    least one allowed parent per child.
    """
    n, d = int(rng.integers(3, 8)), int(rng.integers(1, 5))
    structure = []
    for _ in range(int(rng.integers(1, 4))):
        children = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=True)
        parents = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)
        mask = None
        if rng.random() < 0.5:
            mask = rng.random((children.size, parents.size)) < 0.6
            mask[np.arange(children.size), rng.integers(parents.size, size=children.size)] = True
        structure.append((children, parents, mask, int(rng.integers(3))))
    return n, d, structure


def _random_values(rng, n, d, structure):
    """Random nodes and similarity parameters for a structure: ``V, [(ch, pa, sim, mask), ...], params``."""
    V = rng.normal(size=(n, d))
    params = [_sim_params(rng, d, kind) for _, _, _, kind in structure]
    terms = [(ch, pa, _make_sim(kind, p), m) for (ch, pa, m, kind), p in zip(structure, params)]
    return V, terms, params


def _loop_energy(terms, V) -> complex:
    """E = -sum_m sum_c ln sum_{allowed p} exp sim_m(v_c, v_p), term by term from eq. (2)."""
    total = 0.0
    for children, parents, sim, mask in terms:
        S = sim(V[children][:, None, :], V[parents][None, :, :])  # (C, P)
        allowed = np.ones(S.shape, bool) if mask is None else mask
        total = total - np.sum(np.log(np.sum(np.where(allowed, np.exp(S), 0.0), axis=1)))
    return total


def _eq4_parts(terms, V: np.ndarray, parent_weights: str = "softmax over parents"):
    """The right side of eq. (4), child and parent parts, written from the equation.

    The sim-partials d sim(v_c, v_p)/d v_c and /d v_p are complex-step derivatives of
    sim alone; the weights are an explicit softmax over each child's allowed parents.
    ``parent_weights="softmax over children"`` is the wrong normalisation the chapter
    warns about (used to show that eq. (4) fails with it).
    """
    n, d = V.shape
    child, parent = np.zeros((n, d)), np.zeros((n, d))
    for children, parents, sim, mask in terms:
        C, P = children.size, parents.size
        allowed = np.ones((C, P), bool) if mask is None else mask
        Vc, Vp = V[children][:, None, :], V[parents][None, :, :]
        S = sim(Vc, Vp)  # (C, P)
        w = np.zeros((C, P))
        for i in range(C):
            e = np.array([np.exp(S[i, j]) if allowed[i, j] else 0.0 for j in range(P)])
            w[i] = e / e.sum()
        if parent_weights == "softmax over children":
            wp = np.zeros((C, P))
            for j in range(P):
                if allowed[:, j].any():
                    e = np.array([np.exp(S[i, j]) if allowed[i, j] else 0.0 for i in range(C)])
                    wp[:, j] = e / e.sum()
        else:
            wp = w
        dS1, dS2 = np.empty((C, P, d)), np.empty((C, P, d))
        for k in range(d):
            step = np.zeros(d, complex)
            step[k] = 1j * H
            dS1[:, :, k] = np.imag(sim(Vc + step, Vp)) / H
            dS2[:, :, k] = np.imag(sim(Vc, Vp + step)) / H
        for i, a in enumerate(children):
            child[a] += np.einsum("p,pk->k", w[i], dS1[i])
        for j, a in enumerate(parents):
            parent[a] += np.einsum("c,ck->k", wp[:, j], dS2[:, j])
    return child, parent


def test_child_parent_decomposition_eq4():
    """ch01, prop-child-parent: -dE/dv_a = child part + parent part (eq. 4).

    100 random graphs of 1-3 terms over 3-7 nodes in 1-4 dimensions, with
    bilinear, Gaussian and nonlinear similarities, masks, repeated children and
    nodes that are both child and parent. The gradient of E is the complex-step
    derivative of the energy of eq. (2) written term by term; eq. (4) is
    evaluated from the equation (explicit softmax over each child's allowed
    parents, complex-step sim-partials). Normalising the parent part over
    children instead (the wrong axis) breaks eq. (4).
    """
    rng = np.random.default_rng(102)
    worst = 0.0
    wrong_axis_fails = 0
    for _ in range(N_INSTANCES):
        V, terms, _ = _random_values(rng, *_random_structure(rng))
        grad = complex_step_grad(lambda Z: _loop_energy(terms, Z), V)
        child, parent = _eq4_parts(terms, V)
        worst = max(worst, relative_error(-(child + parent), grad))
        child_w, parent_w = _eq4_parts(terms, V, parent_weights="softmax over children")
        wrong_axis_fails += relative_error(-(child_w + parent_w), grad) > 1e-6
    assert worst < 1e-11, worst
    # The parent part is weighted by w_ca (softmax over the parents of child c), not by a
    # softmax over children: with the latter, eq. (4) is wrong on almost every graph.
    assert wrong_axis_fails >= 0.9 * N_INSTANCES, wrong_axis_fails


def test_graph_gradient_terms_is_eq4():
    """ch01, prop-child-parent: ``core.grad_graph_terms`` returns the two parts of eq. (4).

    5 random graph structures x 20 random draws of nodes and similarity
    parameters (100 instances), each part compared with eq. (4) evaluated from
    the equation as in :func:`test_child_parent_decomposition_eq4`. The package
    is jitted once per structure, with the parameters as arguments.
    """
    rng = np.random.default_rng(103)
    worst = 0.0
    for _ in range(5):
        n, d, structure = _random_structure(rng)

        @jax.jit
        def parts(V, params, structure=structure):
            terms = [
                core.EnergyTerm(
                    children=ch,
                    parents=pa,
                    mask=m,
                    sim=lambda vc, vp, s=_make_sim(kind, p): s(vc, vp, jnp),  # noqa: B008 (binds this term's sim)
                )
                for (ch, pa, m, kind), p in zip(structure, params)
            ]
            return core.grad_graph_terms(terms, V)

        for _ in range(N_INSTANCES // 5):
            V, terms, params = _random_values(rng, n, d, structure)
            child, parent = _eq4_parts(terms, V)
            got = parts(jnp.asarray(V), [tuple(jnp.asarray(a) for a in p) for p in params])
            worst = max(worst, relative_error(got.child, child), relative_error(got.parent, parent))
    assert worst < 1e-11, worst
