"""Propositions of the book, checked against an independent computation.

Each test here checks one proposition of a chapter on at least 100 random
instances against a computation that does not share its formula (brute-force
enumeration, a density from scipy, a different algorithm). Where a
proposition needs a condition, a second test shows it failing without it.
The proposition's proof in the chapter names its test.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

from lse_energy import attention as A
from lse_energy import multihop

N_INSTANCES = 100


def _structures(n: int) -> np.ndarray:
    """Every structure phi in {0..n-1}^n: node i chooses parent phi[i]; shape (n^n, n)."""
    return np.array(list(itertools.product(range(n), repeat=n)), dtype=np.intp)


def _structural_expectation(P: np.ndarray, V: np.ndarray, variant: str) -> np.ndarray:
    """E[v_i(x, phi)] under p(phi) = prod_i P[i, phi_i], summed over all n^n structures.

    The value function is evaluated on each sampled structure, so the second hop
    phi[phi[i]] reuses node i's own choice when phi[i] = i: nothing is redrawn.
    """
    n = P.shape[0]
    phis = _structures(n)
    prob = np.prod(P[np.arange(n), phis], axis=1)  # (n^n,)
    assert abs(prob.sum() - 1.0) < 1e-12  # a distribution over structures
    first = phis  # phi_i
    second = np.take_along_axis(phis, phis, axis=1)  # phi_{phi_i}
    if variant == "paper":
        values = V[first] + V[second]  # (n^n, n, d_v)
    else:
        values = (V[None, :, :] + V[first] + V[second]) / 3.0
    return np.einsum("s,sid->id", prob, values)


def _instance(seed: int, n: int, *, self_edges: bool):
    ks = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(ks[0], (n, 3))
    k = jax.random.normal(ks[1], (n, 3))
    v = jax.random.normal(ks[2], (n, 2))
    mask = None if self_edges else ~np.eye(n, dtype=bool)
    P = np.asarray(A.attention_weights(q, k, mask=mask))
    return q, k, v, mask, P, np.asarray(v)


@pytest.mark.parametrize("variant", multihop.VARIANTS)
def test_multihop_is_structural_expectation_without_self_edges(variant):
    """ch09, prop-multihop: with self-edges masked (P_ii = 0), A(P) V = E_phi[v(x, phi)] exactly."""
    worst = 0.0
    for seed in range(N_INSTANCES):
        n = 3 + seed % 3  # n = 3, 4, 5: up to 3125 structures
        q, k, v, mask, P, V = _instance(seed, n, self_edges=False)
        assert np.all(np.diag(P) == 0.0)
        got = np.asarray(multihop.attend(q, k, v, variant=variant, mask=mask))
        worst = max(worst, float(np.max(np.abs(got - _structural_expectation(P, V, variant)))))
    assert worst < 1e-12, worst


@pytest.mark.parametrize("variant", multihop.VARIANTS)
def test_multihop_is_not_structural_expectation_with_self_edges(variant):
    """ch09, prop-multihop: without the condition, A(P) V is only the independent-redraw approximation.

    The exact expectation is (P^2 - diag(P) P + diag(P)) X for the second hop: when
    phi_i = i the second hop returns x_i itself. That closed form matches brute force
    on every instance, and A(P) V misses it by diag(P)(X - PX) (times 1/3 for "code").
    """
    gaps = []
    for seed in range(N_INSTANCES):
        n = 3 + seed % 3
        q, k, v, _, P, V = _instance(seed, n, self_edges=True)
        brute = _structural_expectation(P, V, variant)
        D = np.diag(np.diag(P))
        second = P @ P @ V - D @ (P @ V) + D @ V
        exact = P @ V + second if variant == "paper" else (V + P @ V + second) / 3.0
        assert np.max(np.abs(exact - brute)) < 1e-12
        got = np.asarray(multihop.attend(q, k, v, variant=variant))
        gaps.append(float(np.max(np.abs(got - brute))))
    # With continuous random scores P_ii > 0 and x_i != (PX)_i, so every instance differs.
    assert min(gaps) > 1e-6, min(gaps)


def _regularised_trace(q, k, beta, weight, n_steps=8):
    """E(q) + weight |q|^2 / 2 along q <- attend(q, k, k), evaluated in NumPy from the definition."""
    def objective(q_):
        s = beta * q_ @ k.T
        m = s.max(axis=1, keepdims=True)
        return float(-np.sum(np.log(np.sum(np.exp(s - m), axis=1)) + m[:, 0]) + 0.5 * weight * np.sum(q_**2))

    values = [objective(q)]
    for _ in range(n_steps):
        q = np.asarray(A.attend(jax.numpy.asarray(q), jax.numpy.asarray(k), jax.numpy.asarray(k), beta=beta))
        values.append(objective(q))
    return np.array(values)


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_attention_update_descends_with_the_beta_half_regulariser(beta):
    """ch05, Experiment 1: q <- attend(q, k, k) never increases E + (beta/2)|q|^2 (CCCP).

    With the weight decay |q|^2 / (2 beta) instead, the same iteration rises on some of
    the same starts (the condition matters unless beta = 1)."""
    rng = np.random.default_rng(int(beta * 10))
    rises_right, rises_wrong = 0, 0
    for _ in range(N_INSTANCES):
        q, k = 2.0 * rng.normal(size=(4, 3)), rng.normal(size=(6, 3))
        right = _regularised_trace(q, k, beta, beta)
        wrong = _regularised_trace(q, k, beta, 1.0 / beta)
        rises_right += bool(np.any(np.diff(right) > 1e-10 * np.abs(right[:-1])))
        rises_wrong += bool(np.any(np.diff(wrong) > 1e-10 * np.abs(wrong[:-1])))
    assert rises_right == 0
    assert rises_wrong > 0
