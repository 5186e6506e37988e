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
    """A data matrix X (N, d) whose second moment X^T X / N has the given eigenvalues (random ones by default).

    Zero eigenvalues give a singular C: X then has rank < d, as the digits do (constant pixels)."""
    n = n or 3 * d
    lam = np.sort(rng.uniform(0.2, 3.0, d))[::-1] if eigenvalues is None else np.asarray(eigenvalues, float)
    q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    z = np.linalg.qr(rng.normal(size=(n, d)))[0] * np.sqrt(n)  # Z^T Z / N = I
    return z @ np.diag(np.sqrt(lam)) @ q.T


def _singular_eigenvalues(rng, d, n_zero):
    """Random eigenvalues in [0.2, 3] with the last n_zero set to 0 (C positive semidefinite, rank d - n_zero)."""
    lam = np.sort(rng.uniform(0.2, 3.0, d))[::-1]
    lam[d - n_zero :] = 0.0
    return lam


def _oracle_loss(w_flat, x, k):
    w = w_flat.reshape(k, -1)
    r = x - x @ w.T @ w
    return 0.5 * jnp.sum(r * r) / x.shape[0]


def _oracle_loss_in_span(z_flat, x, basis, k):
    """The loss at W = Z R^T, R (d, m) an orthonormal basis of the data's span: W's rows in the span."""
    return _oracle_loss((z_flat.reshape(k, -1) @ basis.T).ravel(), x, k)


_grad = jax.jit(jax.grad(_oracle_loss), static_argnums=2)
_hess = jax.jit(jax.hessian(_oracle_loss), static_argnums=2)
_value = jax.jit(_oracle_loss, static_argnums=2)
_grad_span = jax.jit(jax.grad(_oracle_loss_in_span), static_argnums=3)
_hess_span = jax.jit(jax.hessian(_oracle_loss_in_span), static_argnums=3)


def _is_critical_point_of_the_stated_form(w, cov, tol):
    """W = A B^T with orthonormal A (k, r), B (d, r), span(B) inside range(C) and invariant under C; returns (ok, r)."""
    _, s, vt = np.linalg.svd(w, full_matrices=False)
    rank = int(np.sum(s > 0.5))
    if not np.allclose(s[:rank], 1.0, atol=tol) or not np.all(s[rank:] < tol):
        return False, rank
    b = vt[:rank].T
    scale = max(1.0, np.linalg.norm(cov))
    invariant = np.linalg.norm(cov @ b - b @ (b.T @ cov @ b)) < tol * scale
    range_basis = sl.orth(cov, rcond=1e-10)  # scipy's SVD of C: its range
    in_range = np.linalg.norm(b - range_basis @ (range_basis.T @ b)) < tol
    return bool(invariant and in_range), rank


def test_critical_points_of_the_tied_linear_loss():
    """Proposition (critical points): for C positive semidefinite and W with rows in the data's span (range(C);
    every W when C is definite), grad L(W) = 0 iff W = A B^T with orthonormal columns A, B and span(B) inside
    range(C) and invariant under C (so spanned by eigenvectors of positive eigenvalues when those differ).

    Half of the instances have a singular C (data of rank < d, as the digits: constant pixels).
    (i) 'if': W built from a random subset of numpy eigenvectors of positive eigenvalue has zero jax.grad of
        the re-coded loss, and the loss (1/2)(tr C - sum_S lambda_i).
    (ii) 'only if': critical points found by Newton's method (scipy.optimize.root) from random starts all have
         this form; every rank 0..k is reached for every shape, with C definite and with C singular (then
         Newton runs on W = Z R^T, R a scipy basis of the data's span, and jax.grad of the full loss vanishes).
    (iii) outside the span (C singular): W = 3 a b^T with C b = 0 is a critical point with a singular value 3.
    """
    rng = np.random.default_rng(1600)
    # (i)
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        lam = _singular_eigenvalues(rng, d, 1 + i % 2) if i % 4 >= 2 else None
        x = _data(rng, d, lam)
        cov = x.T @ x / x.shape[0]
        evals, evecs = np.linalg.eigh(cov)
        positive = np.flatnonzero(evals > 1e-8)
        r = int(rng.integers(0, k + 1))
        subset = rng.choice(positive, size=r, replace=False)
        a = np.linalg.qr(rng.normal(size=(k, k)))[0][:, :r]
        w = a @ evecs[:, subset].T
        g = np.asarray(_grad(jnp.asarray(w.ravel()), jnp.asarray(x), k))
        assert np.linalg.norm(g) < 1e-12 * (1 + np.linalg.norm(cov)), (i, np.linalg.norm(g))
        value = float(_value(jnp.asarray(w.ravel()), jnp.asarray(x), k))
        assert abs(value - 0.5 * (np.trace(cov) - evals[subset].sum())) < 1e-12 * (1 + np.trace(cov))
    # (ii)
    for singular in (False, True):
        for shape in SHAPES:
            d, k = shape
            found, ranks = 0, set()
            for i in range(200):
                x = _data(rng, d, _singular_eigenvalues(rng, d, d - k - 1) if singular else None)
                cov = x.T @ x / x.shape[0]
                xj = jnp.asarray(x)
                # the data's span from scipy's SVD of X (not from C's eigenvectors)
                basis = jnp.asarray(sl.orth(x.T, rcond=1e-10) if singular else np.eye(d))
                m = basis.shape[1]
                assert m == (k + 1 if singular else d)
                z0 = rng.normal(size=k * m) * 10 ** rng.uniform(-1.5, 0.2)
                sol = so.root(
                    lambda z, xj=xj, b=basis, k=k: np.asarray(_grad_span(jnp.asarray(z), xj, b, k)),
                    z0,
                    jac=lambda z, xj=xj, b=basis, k=k: np.asarray(_hess_span(jnp.asarray(z), xj, b, k)),
                    method="hybr",
                    tol=1e-14,
                )
                w = sol.x.reshape(k, m) @ np.asarray(basis).T
                if not (np.all(np.isfinite(w)) and np.linalg.norm(_grad(jnp.asarray(w.ravel()), xj, k)) < 1e-11):
                    continue  # Newton did not converge from this start
                ok, rank = _is_critical_point_of_the_stated_form(w, cov, 1e-6)
                assert ok, (singular, shape, i, np.linalg.svd(w, compute_uv=False))
                found += 1
                ranks.add(rank)
                if found >= 20 and ranks == set(range(k + 1)):
                    break
            assert found >= 20, (singular, shape, found)
            assert ranks == set(range(k + 1)), (singular, shape, ranks)  # saddles of every rank, not only minima
    # (iii) the condition matters: a null direction of C gives critical points of any scale.
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        x = _data(rng, d, _singular_eigenvalues(rng, d, 1))
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
    """Proposition (global minimum, Baldi & Hornik 1989, tied form): for C positive semidefinite with
    lambda_k > lambda_{k+1} >= 0, the minimum of L over all W is (1/2) sum_{i>k} lambda_i, attained exactly at
    W with orthonormal rows spanning the top-k eigenvectors.

    scipy.optimize.minimize (BFGS, from random starts in all of R^{k x d}) on the re-coded loss reaches numpy's
    tail-eigenvalue sum, with principal angles (scipy) to numpy's top-k eigenvectors below 1e-5 and W W^T = I.
    Half of the instances have a singular C (one or more zero eigenvalues, up to lambda_{k+1} = 0): the start's
    component outside the data's span must vanish at the minimum. The starts are small (scale 0.1): with C
    singular, L also has local minima that are not global (shown last), which a large start can fall into.
    Without the gap (lambda_k = lambda_{k+1}) the
    minimiser's subspace is not unique: two W at right angles reach the same minimum.
    """
    rng = np.random.default_rng(1601)
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        # a gap of at least 0.3 after the k-th eigenvalue
        lam = np.concatenate([np.sort(rng.uniform(1.5, 3.0, k))[::-1], np.sort(rng.uniform(0.1, 1.2, d - k))[::-1]])
        if i % 2:  # C singular: 1 .. d - k zero eigenvalues (d - k: lambda_{k+1} = 0)
            lam[d - 1 - i % (d - k) :] = 0.0
        x = _data(rng, d, lam)
        xj = jnp.asarray(x)
        cov = x.T @ x / x.shape[0]
        evals, evecs = np.linalg.eigh(cov)
        evals, evecs = evals[::-1], evecs[:, ::-1]
        assert evals[k - 1] - evals[k] > 0.25
        assert (evals[-1] < 1e-12) == bool(i % 2)
        sol = so.minimize(
            lambda w, xj=xj, k=k: float(_value(jnp.asarray(w), xj, k)),
            rng.normal(size=k * d) * 0.1,
            jac=lambda w, xj=xj, k=k: np.asarray(_grad(jnp.asarray(w), xj, k)),
            method="BFGS",
            options={"gtol": 1e-12, "maxiter": 2000},
        )
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
    # With C singular, local minima that are not global: rows u_1 .. u_{k-1} (top eigenvectors) and s v with
    # C v = 0, s^2 > 2. Critical, Hessian (jax.hessian) positive semidefinite, no small random perturbation lowers
    # the loss, and the loss exceeds the global minimum by lambda_k / 2. With s^2 < 2 the same point is a saddle.
    for i in range(100):
        d, k = SHAPES[i % len(SHAPES)]
        x = _data(rng, d, _singular_eigenvalues(rng, d, 1))
        xj = jnp.asarray(x)
        cov = x.T @ x / x.shape[0]
        evals, evecs = np.linalg.eigh(cov)
        evals, evecs = evals[::-1], evecs[:, ::-1]
        scale = rng.uniform(1.5, 3.0) if i % 2 else rng.uniform(0.3, 1.2)
        w = np.concatenate([evecs[:, : k - 1].T, scale * evecs[:, -1:].T]).ravel()
        assert np.linalg.norm(_grad(jnp.asarray(w), xj, k)) < 1e-12
        h_min = np.linalg.eigvalsh(np.asarray(_hess(jnp.asarray(w), xj, k)))[0]
        value = float(_value(jnp.asarray(w), xj, k))
        assert abs(value - 0.5 * evals[k - 1 :].sum()) < 1e-12 and evals[k - 1] > 0.1
        if scale**2 > 2:
            assert h_min > -1e-10
            perturbed = [float(_value(jnp.asarray(w + 1e-3 * rng.normal(size=w.size)), xj, k)) for _ in range(50)]
            assert min(perturbed) > value
        else:
            assert h_min < -0.05


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
        p = ae.Params(
            jnp.asarray(rng.normal(size=(k, d)) * rng.uniform(0.1, 2.0)),
            jnp.asarray(rng.normal(size=k)),
            jnp.asarray(rng.normal(size=d)),
        )
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
