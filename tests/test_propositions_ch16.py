"""Propositions of chapter 16 (autoencoders with tied weights), each on >= 100 random instances.

Every test checks the chapter's statement against a computation that does not use the
formula under test: the loss is re-coded here from its definition on a data matrix
(``0.5/N ||X - X W^T W||^2``), differentiated with ``jax.grad``/``jax.hessian``, its critical
points found by Newton root finding (``scipy.optimize.root``) and its minima by
``scipy.optimize.minimize``; eigenvectors come from ``numpy.linalg.eigh`` and principal
angles from ``scipy.linalg.subspace_angles``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
import scipy.optimize as so

from lse_energy import autoencoder as ae

SHAPES = ((4, 2), (5, 2), (6, 3))  # (d, k): few shapes, so the jitted oracles compile few times


def _data(rng, d, eigenvalues=None, n=None):
    """A data matrix X (N, d) whose second moment X^T X / N has the given eigenvalues (random ones by default)."""
    n = n or 3 * d
    lam = np.sort(rng.uniform(0.2, 3.0, d))[::-1] if eigenvalues is None else np.asarray(eigenvalues, float)
    q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    z = np.linalg.qr(rng.normal(size=(n, d)))[0] * np.sqrt(n)  # Z^T Z / N = I
    return z @ np.diag(np.sqrt(lam)) @ q.T


def _oracle_loss(w_flat, x, k):
    w = w_flat.reshape(k, -1)
    r = x - x @ w.T @ w
    return 0.5 * jnp.sum(r * r) / x.shape[0]


_grad = jax.jit(jax.grad(_oracle_loss), static_argnums=2)
_hess = jax.jit(jax.hessian(_oracle_loss), static_argnums=2)
_value = jax.jit(_oracle_loss, static_argnums=2)


def _is_critical_point_of_the_stated_form(w, cov, tol):
    """W = A B^T with orthonormal A (k, r), B (d, r), span(B) invariant under C; returns (ok, r)."""
    _, s, vt = np.linalg.svd(w, full_matrices=False)
    rank = int(np.sum(s > 0.5))
    if not np.allclose(s[:rank], 1.0, atol=tol) or not np.all(s[rank:] < tol):
        return False, rank
    b = vt[:rank].T
    invariant = np.linalg.norm(cov @ b - b @ (b.T @ cov @ b)) < tol * max(1.0, np.linalg.norm(cov))
    return bool(invariant), rank


def test_critical_points_of_the_tied_linear_loss():
    """Proposition (critical points): for C positive definite, grad L(W) = 0 iff W = A B^T with orthonormal
    columns A, B and span(B) invariant under C (so spanned by eigenvectors of C when its eigenvalues differ).

    (i) 'if': W built from a random subset of numpy eigenvectors has zero jax.grad of the re-coded loss.
    (ii) 'only if': critical points found by Newton's method (scipy.optimize.root) from random starts all have
         this form, of every rank 0..k (so saddles, not only minima, are reached).
    (iii) without the condition (C singular): W = 3 a b^T with C b = 0 is a critical point with a singular value 3.
    """
    rng = np.random.default_rng(1600)
    # (i)
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        x = _data(rng, d)
        cov = x.T @ x / x.shape[0]
        evecs = np.linalg.eigh(cov)[1]
        r = int(rng.integers(0, k + 1))
        subset = rng.choice(d, size=r, replace=False)
        a = np.linalg.qr(rng.normal(size=(k, k)))[0][:, :r]
        w = a @ evecs[:, subset].T
        g = np.asarray(_grad(jnp.asarray(w.ravel()), jnp.asarray(x), k))
        assert np.linalg.norm(g) < 1e-12 * (1 + np.linalg.norm(cov)), (i, np.linalg.norm(g))
    # (ii)
    found, ranks = 0, set()
    for i in range(400):
        d, k = SHAPES[i % len(SHAPES)]
        x = _data(rng, d)
        cov = x.T @ x / x.shape[0]
        xj = jnp.asarray(x)
        w0 = rng.normal(size=k * d) * rng.uniform(0.1, 1.5)
        sol = so.root(lambda w, xj=xj, k=k: np.asarray(_grad(jnp.asarray(w), xj, k)), w0,
                      jac=lambda w, xj=xj, k=k: np.asarray(_hess(jnp.asarray(w), xj, k)), method="hybr", tol=1e-14)
        w = sol.x.reshape(k, d)
        if not (np.all(np.isfinite(w)) and np.linalg.norm(_grad(jnp.asarray(sol.x), xj, k)) < 1e-11):
            continue  # Newton did not converge from this start
        ok, rank = _is_critical_point_of_the_stated_form(w, cov, 1e-6)
        assert ok, (i, np.linalg.svd(w, compute_uv=False))
        found += 1
        ranks.add(rank)
        if found >= 100 and ranks == {0, 1, 2, 3}:
            break
    assert found >= 100, found
    assert {0, 1, 2} <= ranks, ranks
    # (iii) the condition matters: a null direction of C gives critical points of any scale.
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        lam = np.sort(rng.uniform(0.2, 3.0, d))[::-1]
        lam[-1] = 0.0
        x = _data(rng, d, lam)
        cov = x.T @ x / x.shape[0]
        evals, evecs = np.linalg.eigh(cov)
        null = evecs[:, 0]
        assert evals[0] < 1e-12
        a = np.linalg.qr(rng.normal(size=(k, 1)))[0]
        w = 3.0 * a @ null[None, :]
        g = np.asarray(_grad(jnp.asarray(w.ravel()), jnp.asarray(x), k))
        assert np.linalg.norm(g) < 1e-10
        assert not _is_critical_point_of_the_stated_form(w, cov, 1e-6)[0]


def test_minimum_is_the_top_k_principal_subspace():
    """Proposition (global minimum, Baldi & Hornik 1989, tied form): if lambda_k > lambda_{k+1}, the minimum of L
    is (1/2) sum_{i>k} lambda_i, attained exactly at W with orthonormal rows spanning the top-k eigenvectors.

    scipy.optimize.minimize (BFGS, from random starts) on the re-coded loss reaches numpy's tail-eigenvalue sum,
    with principal angles (scipy) to numpy's top-k eigenvectors below 1e-5 and W W^T = I. Without the gap
    (lambda_k = lambda_{k+1}) the minimiser's subspace is not unique: two W at right angles reach the same minimum.
    """
    rng = np.random.default_rng(1601)
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        # a gap of at least 0.3 after the k-th eigenvalue
        lam = np.concatenate([np.sort(rng.uniform(1.5, 3.0, k))[::-1], np.sort(rng.uniform(0.1, 1.2, d - k))[::-1]])
        x = _data(rng, d, lam)
        xj = jnp.asarray(x)
        cov = x.T @ x / x.shape[0]
        evals, evecs = np.linalg.eigh(cov)
        evals, evecs = evals[::-1], evecs[:, ::-1]
        assert evals[k - 1] - evals[k] > 0.25
        sol = so.minimize(lambda w, xj=xj, k=k: float(_value(jnp.asarray(w), xj, k)), rng.normal(size=k * d) * 0.5,
                          jac=lambda w, xj=xj, k=k: np.asarray(_grad(jnp.asarray(w), xj, k)), method="BFGS",
                          options={"gtol": 1e-12, "maxiter": 2000})
        w = sol.x.reshape(k, d)
        assert abs(sol.fun - 0.5 * evals[k:].sum()) < 1e-10 * (1 + evals.sum()), (i, sol.fun, 0.5 * evals[k:].sum())
        assert np.max(sl.subspace_angles(w.T, evecs[:, :k])) < 1e-5
        assert np.allclose(w @ w.T, np.eye(k), atol=1e-6)
        # The module's own functions agree with the oracle at the optimum.
        assert abs(float(ae.linear_loss(jnp.asarray(w), jnp.asarray(cov))) - sol.fun) < 1e-10
        assert np.max(np.asarray(ae.principal_angles(jnp.asarray(w.T), jnp.asarray(evecs[:, :k])))) < 1e-5
    # Without the gap: lambda_k = lambda_{k+1}.
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        lam = np.sort(rng.uniform(0.2, 3.0, d))[::-1]
        lam[k] = lam[k - 1]
        x = _data(rng, d, lam)
        cov = x.T @ x / x.shape[0]
        evals, evecs = np.linalg.eigh(cov)
        evals, evecs = evals[::-1], evecs[:, ::-1]
        w1 = evecs[:, :k].T
        w2 = evecs[:, list(range(k - 1)) + [k]].T
        v1, v2 = (float(_value(jnp.asarray(w.ravel()), jnp.asarray(x), k)) for w in (w1, w2))
        assert abs(v1 - v2) < 1e-10 and abs(v1 - 0.5 * evals[k:].sum()) < 1e-10
        assert np.max(sl.subspace_angles(w1.T, w2.T)) > np.pi / 2 - 1e-6  # arccos resolves only ~1e-8 here


def test_tied_autoencoder_cannot_beat_pca_on_its_training_data():
    """Proposition (Eckart-Young): for every activation, W, b, c, the training loss of a tied autoencoder is at
    least PCA's, (1/2N) sum_{i>k} s_i^2 with s the singular values of the centred data (numpy SVD): its
    reconstructions x' = W^T h + c lie in a k-dimensional affine subspace.

    The bound is attained (to round-off) by the linear autoencoder with W the top-k right singular vectors and
    c the mean (biases b = -W mean), which shows it is the minimum and not merely a bound.
    """
    rng = np.random.default_rng(1602)
    for i in range(120):
        d, k = SHAPES[i % len(SHAPES)]
        n = 3 * d
        x = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
        s = np.linalg.svd(x - x.mean(0), compute_uv=False)
        bound = 0.5 * np.sum(s[k:] ** 2) / n
        activation = ae.ACTIVATIONS[i % 3]
        p = ae.Params(jnp.asarray(rng.normal(size=(k, d)) * rng.uniform(0.1, 2.0)), jnp.asarray(rng.normal(size=k)),
                      jnp.asarray(rng.normal(size=d)))
        assert float(ae.loss(p, jnp.asarray(x), activation)) >= bound * (1 - 1e-12)
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        x = rng.normal(size=(3 * d, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
        mean = x.mean(0)
        _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
        bound = 0.5 * np.sum(s[k:] ** 2) / x.shape[0]
        w = vt[:k]
        p = ae.Params(jnp.asarray(w), jnp.asarray(-w @ mean), jnp.asarray(mean))
        assert abs(float(ae.loss(p, jnp.asarray(x), "linear")) - bound) < 1e-10 * (1 + bound)
