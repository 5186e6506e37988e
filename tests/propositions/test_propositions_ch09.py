"""Propositions of chapter 09 (new attention designs: multi-hop and expanding attention), checked independently.

Each test here checks one proposition of the chapter on at least 100 random
instances against a computation that does not share its formula (brute-force
enumeration over every structure, the mean-field sweep written out in plain Python
floats, ``jax.grad`` of an energy written here). Where a proposition needs a
condition, a second test shows it failing without it. The proposition's proof in
``book/09_new_attention_designs.ipynb`` names its test.
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


def _mean_field_by_hand(s, alpha, beta, eps, tol, max_iter):
    """Steps 1-3 of prop-meanfield written out in plain Python floats (math, no arrays)."""
    import math

    n = len(s)
    qs = []
    for t in range(max_iter + 1):
        q = alpha / (alpha + beta)  # step 1
        qs.append(q)
        if t == max_iter or (t > 0 and abs(qs[-1] - qs[-2]) < tol):
            break
        H = min(math.ceil(math.log(eps) / math.log(1.0 - q)), n)  # the window H(q_t)
        logits = [s[i] + math.log(q) + i * math.log(1.0 - q) for i in range(H)]
        top = max(logits)
        w = [math.exp(z - top) for z in logits]
        m = sum(i * wi for i, wi in enumerate(w)) / sum(w)  # step 2, its mean distance
        alpha, beta = alpha + 1.0, beta + m  # step 3 (accumulating, as printed)
    return qs


def test_expanding_mean_field_sweep_is_the_proposition():
    """prop-meanfield, steps 1-3: on 100 random queries the q_t trace of expanding.attend equals
    the sweep written out by hand in plain Python floats (window, softmax and Beta update)."""
    from lse_energy import expanding

    rng = np.random.default_rng(20)
    for n, d, eps, steps in ((6, 2, 0.05, 12), (17, 3, 0.01, 25), (30, 5, 0.002, 40), (40, 1, 0.1, 8)):
        B = N_INSTANCES // 4  # one batched call per shape
        q, k = rng.normal(size=(B, d)), rng.normal(size=(B, n, d)) * rng.uniform(0.2, 2.0, size=(B, 1, 1))
        alpha0, beta0 = rng.uniform(0.5, 3.0, size=B), rng.uniform(0.5, 3.0, size=B)
        res = expanding.attend(
            q, k, np.zeros((B, n, 1)), alpha0=alpha0, beta0=beta0, eps=eps, tol=1e-4, max_iter=steps, scale=1.0
        )
        for b in range(B):
            by_hand = _mean_field_by_hand(list(k[b] @ q[b]), float(alpha0[b]), float(beta0[b]), eps, 1e-4, steps)
            T = int(res.iterations[b])
            assert T == len(by_hand) - 1
            np.testing.assert_allclose(np.asarray(res.q_trace[b])[: T + 1], by_hand, rtol=1e-12)


def test_expanding_energy_gradients_are_the_proposition():
    """prop-meanfield, the gradients: dE/ds_i = -p_i and dE/dq = -(1/q - m/(1-q)) against jax.grad of
    the energy written independently, E = -ln sum_{i<H} q (1-q)^i e^{s_i}, on 100 random instances."""
    import jax.numpy as jnp

    from lse_energy import expanding

    jax.config.update("jax_enable_x64", True)

    def energy(s, q, H):
        i = jnp.arange(H)
        return -jnp.log(jnp.sum(q * (1.0 - q) ** i * jnp.exp(s[:H])))  # one query: s (n,), q scalar

    rng = np.random.default_rng(21)
    n = 12
    for H in (1, 5, 12):  # one compiled batch per window
        B = -(-N_INSTANCES // 3)
        s = jnp.asarray(rng.normal(size=(B, n)) * 2)
        q = jnp.asarray(rng.uniform(0.02, 0.98, size=B))
        gs, gq = jax.vmap(jax.grad(energy, argnums=(0, 1)), in_axes=(0, 0, None))(s, q, H)
        np.testing.assert_allclose(expanding.grad_sims(s, q, window=H), gs, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(expanding.grad_q(s, q, window=H), gq, rtol=1e-10)
