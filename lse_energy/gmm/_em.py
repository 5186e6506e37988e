r"""The Gaussian mixture's EM: the jitted fast path over sufficient statistics, :func:`fit`, :func:`em` and the
streamed fit for data larger than memory.

Part of :mod:`lse_energy.gmm`; the energy and its gradients are in ``lse_energy.gmm._model``.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _descent, _rows, _validate, core
from lse_energy.gmm._model import Params, _check_reg, _cholesky, _tri_solve, check_params, check_x

Array = jax.Array

# ---------------------------------------------------------------------------
# Dynamics: EM
# ---------------------------------------------------------------------------


# --- The fast path: one pass over row chunks accumulating sufficient statistics.
#
# With the data centred at its mean (x <- x - xbar, which removes most of the
# cancellation of the expanded quadratic), the normalised sim is linear in the
# features f(x) = [1, x, x_a x_b (a <= b)] of width 1 + d + d(d+1)/2:
#
#   sim(x, k) = ln pi_k - (d ln 2 pi + ln|Sigma_k|)/2 - mu_k' P_k mu_k / 2
#               + x' P_k mu_k - sum_{a<=b} (1 - delta_ab / 2) P_k[a,b] x_a x_b,
#
# P_k = Sigma_k^{-1}. So the E-step is one (C, F) @ (F, K) product per chunk of C
# rows, and the M-step's sufficient statistics (N_k, sum r x, sum r x x') are
# the single (K, C) @ (C, F) product r' f(x). Nothing of size N x K x d is formed.

_CHUNK = 4096


def _packed_pairs(d: int):
    """Static index maps between a symmetric (d, d) matrix and its packed upper triangle."""
    rows, cols = np.triu_indices(d)
    full = np.zeros((d, d), dtype=np.int32)
    full[rows, cols] = np.arange(rows.size)
    full[cols, rows] = np.arange(rows.size)
    return rows, cols, full


def _features(x: Array) -> Array:
    """``(C, d) -> (C, 1 + d + d(d+1)/2)``: ``[1, x, x_a x_b for a <= b]`` (row-major upper triangle)."""
    d = x.shape[1]
    quad = [x[:, a : a + 1] * x[:, a:] for a in range(d)]
    return jnp.concatenate([jnp.ones_like(x[:, :1]), x, *quad], axis=1)


def _sim_coefficients(params: Params, shift: Array) -> Array:
    """``(F, K)`` matrix ``A`` with ``sim(x, k) = features(x - shift) @ A[:, k]``."""
    K, d = params.means.shape
    L = _cholesky(params.covariances)
    eye = jnp.broadcast_to(jnp.eye(d, dtype=L.dtype), L.shape)
    Linv = _tri_solve(L, eye, 0)  # L^{-1}
    P = jnp.swapaxes(Linv, 1, 2) @ Linv  # Sigma^{-1} = L^{-T} L^{-1}
    mu = params.means - shift[None, :]
    Pmu = jnp.einsum("kab,kb->ka", P, mu)
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    const = jnp.log(params.weights) - 0.5 * (d * math.log(2.0 * math.pi) + logdet) - 0.5 * jnp.sum(mu * Pmu, axis=1)
    rows, cols, _ = _packed_pairs(d)
    scale = jnp.asarray(np.where(rows == cols, -0.5, -1.0), P.dtype)  # keep the input's dtype
    quad = P[:, rows, cols] * scale[None, :]  # (K, d(d+1)/2)
    return jnp.concatenate([const[:, None], Pmu, quad], axis=1).T


def _chunk_stats(A: Array, xc: Array, shift: Array, valid=None):
    """E-step of one chunk: ``(sum of ln sum_k exp sim, r' f(x - shift))``; ``valid`` masks padding rows."""
    f = _features(xc - shift[None, :])
    s = f @ A  # (C, K) sim
    # Log-sum-exp by hand: one exp pass gives both ln sum exp and the responsibilities (core.energy and
    # core.weights would each exponentiate the (N, K) block; this is the EM hot loop, see the performance chapter's
    # benchmark).
    m = jax.lax.stop_gradient(jnp.max(s, axis=1, keepdims=True))
    e = jnp.exp(s - m)
    tot = jnp.sum(e, axis=1, keepdims=True)
    r = e / tot
    lse = jnp.log(tot[:, 0]) + m[:, 0]
    if valid is not None:
        r = r * valid[:, None]
        lse = jnp.where(valid > 0, lse, 0.0)
    return jnp.sum(lse), r.T @ f


def _suff_stats(A: Array, x: Array, shift: Array, valid=None, chunk: int = _CHUNK):
    """Accumulate ``(sum_i ln p(x_i), r' f(x - shift))`` over row chunks (``lax.fori_loop``)."""
    N = x.shape[0]
    K, F = A.shape[1], A.shape[0]
    n_full = N // chunk
    # Zeros that carry x's type: inside shard_map a plain jnp.zeros carry would lack the
    # device-varying type of the per-device sums (x is finite, so 0 * x[0, 0] == 0).
    zero = 0 * x[0, 0]
    ll = jnp.zeros((), x.dtype) + zero
    R = jnp.zeros((K, F), x.dtype) + zero
    if n_full > 0:

        def body(i, carry):
            ll, R = carry
            xc = jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk)
            vc = None if valid is None else jax.lax.dynamic_slice_in_dim(valid, i * chunk, chunk)
            l, Rc = _chunk_stats(A, xc, shift, vc)
            return ll + l, R + Rc

        ll, R = jax.lax.fori_loop(0, n_full, body, (ll, R))
    if N % chunk:
        l, Rc = _chunk_stats(A, x[n_full * chunk :], shift, None if valid is None else valid[n_full * chunk :])
        ll, R = ll + l, R + Rc
    return ll, R


def _m_step(R: Array, N, shift: Array, reg_covar) -> Params:
    """Closed-form M-step from the sufficient statistics ``R = r' f(x - shift)``."""
    d = shift.shape[0]
    Nk = R[:, 0]
    mu = R[:, 1 : 1 + d] / Nk[:, None]
    _, _, full = _packed_pairs(d)
    second = R[:, 1 + d :][:, full] / Nk[:, None, None]  # (K, d, d) sum r x x' / N_k
    cov = second - mu[:, :, None] * mu[:, None, :]
    cov = 0.5 * (cov + jnp.swapaxes(cov, 1, 2)) + reg_covar * jnp.eye(d, dtype=R.dtype)
    return Params(weights=Nk / N, means=mu + shift[None, :], covariances=cov)


def _em_step(params: Params, x: Array, reg_covar) -> Params:
    shift = jnp.mean(x, axis=0)
    _, R = _suff_stats(_sim_coefficients(params, shift), x, shift)
    return _m_step(R, x.shape[0], shift, reg_covar)


_em_step_jit = jax.jit(_em_step)


def em_step(params: Params, x, *, reg_covar: float = 0.0) -> Params:
    r"""One EM iteration: E-step (responsibilities), then the closed-form M-step.

    .. math::

        r_{ik} &= \mathrm{softmax}_k\,\mathrm{sim}(x_i, \mu_k), \qquad N_k = \textstyle\sum_i r_{ik},\\
        \mu_k' &= \frac{1}{N_k}\sum_i r_{ik}\, x_i
            \quad\text{(zero of eq. (4)'s } \partial E/\partial\mu_k \text{ with } r \text{ frozen, §2)},\\
        \Sigma_k' &= \frac{1}{N_k}\sum_i r_{ik}\,(x_i-\mu_k')(x_i-\mu_k')^\top + \texttt{reg\_covar}\, I,\\
        \pi_k' &= N_k / N \quad\text{(Lagrange multiplier for } \textstyle\sum_k\pi_k = 1).

    With ``reg_covar = 0`` the energy never increases. ``reg_covar`` plays
    the role of scikit-learn's parameter of the same name (whose default
    there is ``1e-6``); pass the same value to both to compare them. One call
    equals one iteration of ``GaussianMixture.fit``.

    Args:
      params: :class:`Params`.
      x: ``(N, d)``.
      reg_covar: non-negative ridge added to each covariance.

    Returns:
      The updated :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> params = gmm.init_params(x, 2, key=jax.random.key(1))
      >>> new = gmm.em_step(params, x)
      >>> new.means.shape, bool(gmm.energy(new, x) <= gmm.energy(params, x))
      ((2, 2), True)
    """
    params = check_params(params)
    x = check_x(x, params.means.shape[1])
    reg = _check_reg(reg_covar)
    return _em_step_jit(params, x, jnp.asarray(reg, x.dtype))


#: Initialisations of :func:`init_params` and :func:`fit`.
INITS = ("kmeans", "random")

#: Rows the k-means start is computed on: all of them up to this many (or ``4 K``), else a uniform sample
#: of this many (a fit streamed from a file reads them in one pass over its chunks).
KMEANS_MAX_ROWS = 1 << 14

#: Lloyd iterations of the k-means start at most (scikit-learn's ``KMeans`` default).
KMEANS_MAX_ITER = 300


def init_params(x, n_components: int, *, key, reg_covar: float = 1e-6, init: str = "kmeans") -> Params:
    r"""The starting point used by :func:`fit` (with ``n_init=1``).

    ``init="kmeans"`` (the default) is scikit-learn's default start: k-means++
    seeding (greedy, :math:`2 + \lfloor \ln K \rfloor` candidates per centre,
    as scikit-learn), then Lloyd's k-means until no label changes (at most 300
    iterations), then one M-step with the k-means labels as one-hot
    responsibilities: weights are the cluster sizes over ``N``, means the
    cluster means, covariances the cluster covariances plus
    ``reg_covar * I``. A cluster whose covariance is not positive definite
    (fewer than ``d + 1`` distinct points with ``reg_covar = 0``) starts from
    the sample covariance of ``x`` instead. Above ``max(2**14, 4 K)`` rows the
    k-means (not the EM) runs on that many rows drawn with ``key``.

    ``init="random"`` is the earlier start: means at ``n_components``
    distinct data points chosen with ``key`` (:func:`jax.random.choice`
    without replacement; above ``2**20`` rows Floyd's algorithm, ``K``
    draws, memory independent of ``N``), every covariance the (biased)
    sample covariance of ``x`` plus ``reg_covar * I``, uniform weights
    :math:`1/K`.

    Args:
      x: ``(N, d)``.
      n_components: :math:`K`, with ``1 <= K <= N``.
      key: a JAX PRNG key (``jax.random.key(0)``).
      reg_covar: non-negative ridge added to the covariances (default
        ``1e-6``, as :func:`fit` and scikit-learn).
      init: ``"kmeans"`` or ``"random"``.

    Returns:
      :class:`Params`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> gmm.init_params(x, 3, key=jax.random.key(1)).covariances.shape
      (3, 2, 2)
    """
    x = check_x(x)
    K = _check_components(n_components, x.shape[0])
    starts = _starts(x, K, _validate.key("key", key), _check_reg(reg_covar), _check_init(init), 1)
    return jax.tree.map(lambda a: a[0], starts)


def _check_init(init) -> str:
    return _validate.choice("init", init, INITS)


def _restart_keys(key, n_init: int):
    """One key per restart: ``key`` itself for one start (so that ``fit`` starts at ``init_params``)."""
    return key[None] if n_init == 1 else jax.random.split(key, n_init)


def _kmeans_rows(key, N: int, K: int):
    """Sorted indices of the rows the k-means start uses, or ``None`` for all of them."""
    m = max(KMEANS_MAX_ROWS, 4 * K)
    if N <= m:
        return None
    return np.sort(_rows.choose_rows(jax.random.fold_in(key, 1), N, m))


def _starts(x, K: int, key, reg, init: str, n_init: int, rows=None) -> Params:
    """``n_init`` starting points stacked on a leading axis (``rows``: the k-means rows, when already read)."""
    keys = _restart_keys(key, n_init)
    if init == "random":
        cov = _pooled_covariance(x, reg)
        starts = [_initial(x[_rows.choose_rows(k, x.shape[0], K)], cov) for k in keys]
        return jax.tree.map(lambda *a: jnp.stack(a), *starts)
    if rows is None:
        idx = _kmeans_rows(key, x.shape[0], K)
        rows = x if idx is None else jnp.asarray(x[idx])
    _positive_definite(_pooled_covariance(rows, reg))
    return _kmeans_starts(rows, K, keys, jnp.asarray(reg, rows.dtype))


def _read_rows(stream, idx):
    """The rows at the sorted global indices ``idx``, read in one pass over the stream's chunks.

    Reading many rows at random places of a memmap maps pages all over the file (the
    page-cache read-around); a pass reads each chunk once and lets it go. A chunk holds the
    next rows in order, its valid rows first, in one process; across processes the rows of a
    chunk are not consecutive, so there ``stream.rows_at`` gathers them.
    """
    if jax.process_count() > 1:
        return stream.rows_at(idx)
    parts, start = [], 0
    for xc, vc in stream.chunks():
        n = int(np.asarray(vc).sum())
        local = idx[(idx >= start) & (idx < start + n)] - start
        if local.size:
            parts.append(np.asarray(xc)[local])
        start += n
    return np.concatenate(parts)


@partial(jax.jit, static_argnums=(1,))
def _kmeans_starts(x, K: int, keys, reg) -> Params:
    return jax.vmap(lambda k: _kmeans_start(x, K, k, reg))(keys)


def _kmeans_start(x, K: int, key, reg) -> Params:
    """k-means++ seeding, Lloyd's iterations, then the M-step on the one-hot k-means labels."""
    N, d = x.shape
    shift = jnp.mean(x, axis=0)
    xc = x - shift
    sq = jnp.sum(xc * xc, axis=1)

    def dist2(c):  # (N, C) squared distances to the rows of c
        return jnp.maximum(sq[:, None] - 2.0 * xc @ c.T + jnp.sum(c * c, axis=1)[None, :], 0.0)

    # k-means++ (greedy): each new centre is the best of n_trials candidates drawn with probability ~ D^2.
    n_trials = 2 + int(math.log(K))
    key, first = jax.random.split(key)
    chosen = jnp.zeros((K,), jnp.int32).at[0].set(jax.random.randint(first, (), 0, N, dtype=jnp.int32))
    closest = dist2(xc[chosen[0]][None])[:, 0]

    def seed(j, carry):
        chosen, closest, key = carry
        key, sub = jax.random.split(key)
        logits = jnp.where(closest > 0, jnp.log(jnp.where(closest > 0, closest, 1.0)), -jnp.inf)
        logits = jnp.where(jnp.any(closest > 0), logits, 0.0)  # every row on a centre: uniform
        cand = jax.random.categorical(sub, logits, shape=(n_trials,))
        pot = jnp.minimum(closest[:, None], dist2(xc[cand]))  # (N, n_trials)
        best = jnp.argmin(jnp.sum(pot, axis=0))
        return chosen.at[j].set(cand[best].astype(jnp.int32)), pot[:, best], key

    chosen, _, _ = jax.lax.fori_loop(1, K, seed, (chosen, closest, key))

    # Lloyd: an emptied cluster keeps its centre; stop when no label changes.
    def means_of(labels, c):
        onehot = jax.nn.one_hot(labels, K, dtype=x.dtype)
        n = jnp.sum(onehot, axis=0)
        return jnp.where(n[:, None] > 0, (onehot.T @ xc) / jnp.maximum(n, 1.0)[:, None], c)

    def lloyd(carry):
        i, c, labels, _ = carry
        c = means_of(labels, c)
        new = jnp.argmin(dist2(c), axis=1)
        return i + 1, c, new, jnp.any(new != labels)

    c0 = xc[chosen]
    labels = jnp.argmin(dist2(c0), axis=1)
    carry = (0, c0, labels, True)
    _, _, labels, _ = jax.lax.while_loop(lambda c: (c[0] < KMEANS_MAX_ITER) & c[3], lloyd, carry)

    # One M-step with one-hot responsibilities (scikit-learn adds 10 eps to each count).
    r = jax.nn.one_hot(labels, K, dtype=x.dtype)
    nk = jnp.sum(r, axis=0) + 10 * jnp.finfo(x.dtype).eps
    mu = (r.T @ xc) / nk[:, None]
    diff = xc[None, :, :] - mu[:, None, :]
    eye = jnp.eye(d, dtype=x.dtype)
    cov = jnp.einsum("ik,kia,kib->kab", r, diff, diff) / nk[:, None, None] + reg * eye
    pooled = xc.T @ xc / N + reg * eye
    cov = jnp.where(_not_pd(cov)[:, None, None], pooled, cov)
    return Params(nk / jnp.sum(nk), mu + shift, cov)


def _positive_definite(cov) -> None:
    """Refuse a singular sample covariance (the fallback of every start)."""
    try:
        np.linalg.cholesky(np.asarray(cov, np.float64))
    except np.linalg.LinAlgError:
        raise ValueError(
            "x: its sample covariance is singular (N <= d or degenerate data); pass reg_covar > 0"
        ) from None


@jax.jit
def _pooled_covariance(x, reg):
    centred = x - jnp.mean(x, axis=0)
    return centred.T @ centred / x.shape[0] + reg * jnp.eye(x.shape[1], dtype=x.dtype)


def _initial(means, cov) -> Params:
    """Uniform weights, the given means, every covariance ``cov`` (which must be positive definite)."""
    _positive_definite(cov)
    K, d = means.shape
    return Params(
        jnp.full((K,), 1.0 / K, dtype=cov.dtype), jnp.asarray(means, cov.dtype), jnp.broadcast_to(cov, (K, d, d))
    )


def _check_components(n_components, N: int) -> int:
    K = _validate.count("n_components", n_components)  # bools are not counts
    if K > N:
        raise ValueError(f"n_components must be <= N = {N} (number of rows of x); got {K}")
    return K


def _not_pd(covariances: Array) -> Array:
    """``(K,)`` booleans: True where a covariance has no finite Cholesky factor (not positive definite)."""
    return ~jnp.all(jnp.isfinite(_cholesky(covariances)), axis=(-2, -1))


def _em_m_step(R, n, args):
    """The M-step of the EM driver (``_descent.em_loop``): :func:`m_step`, and which covariances are not PD.

    A covariance that is not positive definite after an M-step (a component collapsed onto fewer than
    d + 1 distinct points, or emptied) stops the loop at the last good parameters.
    """
    shift, reg_covar = args
    p = _m_step(R, n, shift, reg_covar)
    return p, _not_pd(p.covariances)


def sufficient_statistics(params: Params, x, shift, valid=None):
    r"""One pass over the rows: :math:`(\sum_i \ln p(x_i), R)` with :math:`R = r^\top f(x - \mathrm{shift})`.

    :math:`r` are the responsibilities and :math:`f(y) = [1, y, y_a y_b]_{a \le b}`
    the quadratic features, so ``R`` holds :math:`N_k`, :math:`\sum_i r_{ik}(x_i - s)`
    and the packed :math:`\sum_i r_{ik}(x_i - s)(x_i - s)^\top`: all the M-step needs.
    ``shift`` (usually the data mean) keeps the second moments well conditioned;
    ``valid`` (``(N,)`` of 0/1) masks padding rows. Sums over row blocks add, so a
    sharded pass is the ``psum`` of per-device passes (:mod:`lse_energy.sharding`).
    A kernel: it does not validate, for use inside ``jit``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> params = gmm.init_params(x, 2, key=jax.random.key(1))
      >>> loglik, R = gmm.sufficient_statistics(params, x, x.mean(0))
      >>> loglik.shape, R.shape  # R: [1, x, packed x x^T] per component
      ((), (2, 6))
    """
    return _suff_stats(_sim_coefficients(params, shift), x, shift, valid)


def m_step(R, n, shift, reg_covar) -> Params:
    """The closed-form M-step (:func:`em_step`) from :func:`sufficient_statistics` ``R`` of ``n`` rows.

    A kernel: it does not validate, for use inside ``jit``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> params = gmm.init_params(x, 2, key=jax.random.key(1))
      >>> shift = x.mean(0)
      >>> _, R = gmm.sufficient_statistics(params, x, shift)
      >>> new = gmm.m_step(R, 10, shift, 1e-6)
      >>> bool(
      ...     jnp.allclose(
      ...         new.means, gmm.em_step(params, x, reg_covar=1e-6).means, atol=1e-5
      ...     )
      ... )
      True
    """
    return _m_step(R, n, shift, reg_covar)


def _local_statistics(params, x, shift):
    return sufficient_statistics(params, x, shift)


def _raise_if_failed(failed, reg_covar: float) -> None:
    """Raise the fit's ``ValueError`` for a covariance that lost positive-definiteness."""
    it, k = (int(v) for v in np.asarray(failed))
    if it >= 0:
        raise ValueError(
            f"component {k}: its covariance is not positive definite after EM iteration {it} "
            f"(ill-defined empirical covariance: the component collapsed onto too few distinct "
            f"points, or lost all its points) with reg_covar={reg_covar:g}; increase reg_covar "
            f"(default 1e-6, as scikit-learn) or decrease n_components"
        )


def _check_fit_args(max_iter, tol) -> tuple[int, float]:
    """``fit``'s ``max_iter`` (integer >= 0) and ``tol`` (finite float >= 0)."""
    return _validate.count("max_iter", max_iter, 0), _validate.nonnegative("tol", tol)


def fit(
    x,
    n_components: int,
    *,
    key,
    max_iter: int = 100,
    tol: float = 1e-6,
    reg_covar: float = 1e-6,
    chunk_rows: int | None = None,
    init: str = "kmeans",
    n_init: int = 1,
    progress: bool = False,
):
    r"""Fit a :math:`K`-component mixture by EM from :func:`init_params`.

    The EM loop is jitted (``lax.while_loop``). It stops after ``max_iter``
    steps or when the change in mean log-likelihood
    :math:`|E_{t-1} - E_t| / N` drops below ``tol`` (scikit-learn's rule).
    The defaults are scikit-learn's ``GaussianMixture``: a k-means start
    (``init="kmeans"``, see :func:`init_params`), one start, ``tol=1e-6``
    (scikit-learn's is 1e-3), ``reg_covar=1e-6``. With ``n_init > 1`` the
    restarts run side by side in one compiled loop (``vmap``), each from
    :func:`init_params` with its own key (``jax.random.split(key, n_init)``),
    and the one with the lowest final energy is returned.

    Args:
      x: ``(N, d)`` data, float32 or float64 (the result has the same dtype).
        A NumPy memmap, or any array-like with ``shape``, ``dtype`` and row
        slicing that is not a NumPy or JAX array (an h5py or zarr dataset),
        is never loaded whole: it is read ``chunk_rows`` rows at a time, once
        per EM iteration (:func:`streamed_fit`), so it may be larger than memory.
      n_components: :math:`K \ge 1`.
      key: JAX PRNG key (``jax.random.key(0)``) of the start (keyword-only).
      max_iter: maximum number of EM steps (``>= 0``).
      tol: convergence threshold on the per-point energy change (``>= 0``).
      reg_covar: ridge added to every covariance, at initialisation and in
        each M-step. The default ``1e-6`` is scikit-learn's: it keeps a
        component that collapses onto a few identical points finite. Pass
        ``0`` for exact EM (whose energy trace is non-increasing).
      chunk_rows: rows per chunk when streaming (default ``65536``); passing
        it streams any ``x``, in memory or not. The streamed fit equals the
        in-memory one up to the order of the floating point sums.
      init: the start, ``"kmeans"`` (default) or ``"random"``
        (:func:`init_params`).
      n_init: number of restarts (``>= 1``); the fit with the lowest final
        energy is kept.
      progress: show a ``tqdm.auto`` bar of the EM steps, out of ``max_iter``.

    Returns:
      :class:`~lse_energy.core.FitResult` with the fitted :class:`Params`, the
      energy trace :math:`E_0, E_1, \dots, E_T` (``T + 1`` values, :math:`E_0`
      at the initial parameters), ``n_iter`` :math:`= T \le` ``max_iter``, and
      ``converged`` (the ``tol`` rule stopped the loop); no ``extras``. With
      ``reg_covar = 0`` the trace is non-increasing. With ``n_init > 1``:
      those of the best restart.

    Raises:
      ValueError: on bad arguments, and when an M-step leaves a covariance
        that is not positive definite (the message names the component and
        the iteration, and suggests a larger ``reg_covar``; with restarts,
        only when every restart fails, naming the first). A fit never
        returns NaN parameters. Under an outer ``jax.jit`` nothing can be
        raised; call ``fit`` outside ``jit``.

    Examples:
      Two well-separated blobs, five EM steps:

      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> centres = jnp.repeat(jnp.array([[-4.0, 0.0], [4.0, 0.0]]), 20, axis=0)
      >>> x = centres + jax.random.normal(jax.random.key(0), (40, 2))
      >>> result = gmm.fit(x, 2, key=jax.random.key(1), max_iter=5)
      >>> result.params.means.shape, result.n_iter <= 5
      ((2, 2), True)
      >>> bool(result.energies[-1] < result.energies[0])
      True
    """
    if chunk_rows is not None or _rows.is_streamed(x):
        stream = _rows.local_stream(_rows.RowChunks("x", x, chunk_rows), _chunk_statistics)
        return streamed_fit(
            stream, n_components, key=key, max_iter=max_iter, tol=tol, reg_covar=reg_covar, init=init, n_init=n_init,
            progress=progress,
        )  # fmt: skip
    x = check_x(x)
    max_iter, tol = _check_fit_args(max_iter, tol)
    reg = _check_reg(reg_covar)
    K = _check_components(n_components, x.shape[0])
    n_init = _validate.count("n_init", n_init)
    key, init = _validate.key("key", key), _check_init(init)
    shift = jnp.mean(x, axis=0)
    return _descent.em(
        lambda x, K, key, n_init: _starts(x, K, key, reg, init, n_init),
        _local_statistics,
        _em_m_step,
        x,
        K,
        key=key,
        max_iter=max_iter,
        tol=tol,
        n_init=n_init,
        data=(x, shift),
        args=(shift, jnp.asarray(reg, x.dtype)),
        on_failure=partial(_raise_if_failed, reg_covar=reg),
        progress=progress,
    )


def em(
    params: Params,
    statistics,
    data,
    *,
    n: int,
    shift,
    max_iter: int = 100,
    tol: float = 1e-6,
    reg_covar: float = 1e-6,
    progress: bool = False,
):
    r"""EM from ``params`` with a given pass over the data; the loop of :func:`fit`.

    Each iteration is one call ``statistics(p, *data) -> (sum_i ln p(x_i | p), R)``
    (:func:`sufficient_statistics` for data in memory; :mod:`lse_energy.sharding`
    passes a sharded pass), then :func:`m_step`. The stopping rule, the energy
    trace and the error on a covariance that is no longer positive definite are
    those of :func:`fit`.

    Args:
      params: initial :class:`Params`.
      statistics: a hashable function (a static argument of the jitted loop).
      data: tuple of arrays passed to ``statistics`` after ``p``.
      n: the number of data points ``N``.
      shift: ``(d,)`` the shift ``statistics`` uses.
      max_iter, tol, reg_covar, progress: as in :func:`fit`.

    Returns:
      :class:`~lse_energy.core.FitResult` as :func:`fit`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> params = gmm.init_params(x, 2, key=jax.random.key(1))
      >>> shift = x.mean(0)
      >>> stats = gmm.sufficient_statistics
      >>> res = gmm.em(params, stats, (x, shift), n=10, shift=shift, max_iter=3)
      >>> res.params.means.shape, res.n_iter <= 3
      ((2, 2), True)
    """
    params = check_params(params)
    max_iter, tol = _check_fit_args(max_iter, tol)
    return _em(
        params, statistics, data, _validate.count("n", n), jnp.asarray(shift), max_iter, tol, _check_reg(reg_covar),
        progress,
    )  # fmt: skip


def _em(params, statistics, data, n: int, shift, max_iter: int, tol: float, reg: float, progress=False):
    """:func:`em` on checked arguments (:func:`fit` checks them once)."""
    return _descent.em_run(
        params,
        statistics,
        _em_m_step,
        tuple(data),
        (shift, jnp.asarray(reg, shift.dtype)),
        n=n,
        max_iter=max_iter,
        tol=tol,
        dtype=shift.dtype,
        on_failure=partial(_raise_if_failed, reg_covar=reg),
        progress=progress,
    )


# ---------------------------------------------------------------------------
# Data larger than memory: EM over row chunks
# ---------------------------------------------------------------------------


_m_step_jit = jax.jit(_m_step)


@jax.jit
def _chunk_statistics(params, x, valid, shift):
    return sufficient_statistics(params, x, shift, valid)


def streamed_fit(
    stream,
    n_components: int,
    *,
    key,
    max_iter: int = 100,
    tol: float = 1e-6,
    reg_covar: float = 1e-6,
    init: str = "kmeans",
    n_init: int = 1,
    progress: bool = False,
):
    r""":func:`fit` reading the rows from ``stream`` (a ``lse_energy._rows.Stream``) one chunk at a time.

    The initialisation of :func:`init_params` (the same start: the k-means rows,
    or the random means, read with ``stream.rows_at``; mean and covariance in
    two passes), then the loop of :func:`em` driven from Python:
    each iteration is one pass summing the chunks' sufficient statistics, then
    :func:`m_step`. Same stopping rule, trace and errors as :func:`fit`; the
    result equals the in-memory fit up to the order of the floating point sums.
    With ``n_init > 1`` the restarts run one after the other (each a full
    streamed fit) and the lowest final energy is kept.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import gmm
      >>> from lse_energy import _rows
      >>> x = jax.random.normal(jax.random.key(0), (20, 2))
      >>> stats = lambda p, x, valid, shift: gmm.sufficient_statistics(
      ...     p, x, shift, valid
      ... )
      >>> stream = _rows.local_stream(_rows.RowChunks("x", x, chunk_rows=8), stats)
      >>> res = gmm.streamed_fit(stream, 2, key=jax.random.key(1), max_iter=3)
      >>> res.params.means.shape, res.n_iter <= 3
      ((2, 2), True)
    """
    max_iter, tol = _check_fit_args(max_iter, tol)
    reg = _check_reg(reg_covar)
    K = _check_components(n_components, stream.n)
    key, init = _validate.key("key", key), _check_init(init)
    n_init = _validate.count("n_init", n_init)
    shift, cov = _rows.moments(stream, reg)
    if init == "random":
        starts = [_initial(stream.rows_at(_rows.choose_rows(k, stream.n, K)), cov) for k in _restart_keys(key, n_init)]
        starts = jax.tree.map(lambda *a: jnp.stack(a), *starts)
    else:
        idx = _kmeans_rows(key, stream.n, K)
        rows = jnp.asarray(_read_rows(stream, np.arange(stream.n) if idx is None else idx))
        starts = _starts(rows, K, key, reg, init, n_init, rows=rows)
    reg_a = jnp.asarray(reg, shift.dtype)

    def one_pass(p):
        return _rows.stream_sum(stream, lambda xc, vc: stream.statistics(p, xc, vc, shift))

    def m_step_checked(R, iteration):
        p = _m_step_jit(R, stream.n, shift, reg_a)
        bad = np.asarray(_not_pd(p.covariances))
        if bad.any():
            _raise_if_failed(np.array([iteration, int(np.argmax(bad))]), reg)
        return p

    best, errors = None, []
    for i in range(n_init):
        try:
            params, trace, done = _descent.em_host(
                jax.tree.map(lambda a: a[i], starts), one_pass, m_step_checked, stream.n, max_iter, tol, progress
            )
        except ValueError as err:  # a failed restart; raised only when every restart fails
            errors.append(err)
            continue
        if best is None or trace[-1] < best[1][-1]:
            best = (params, trace, done)
    if best is None:
        raise errors[0]
    params, trace, done = best
    return core.FitResult(params, jnp.asarray(trace, shift.dtype), len(trace) - 1, done)
