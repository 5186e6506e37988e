"""Independent oracles shared by the tests and the benchmarks (not a test module)."""

import jax
import jax.numpy as jnp
import numpy as np


def complex_step_grad(f, x, h: float = 1e-30) -> np.ndarray:
    """Gradient of a real-analytic scalar ``f`` at real ``x`` by complex steps,
    ``f(x + i h e_k).imag / h``: exact to round-off (no subtraction), no autodiff."""
    x = np.asarray(x, dtype=complex)
    g = np.empty(x.shape)
    for j in np.ndindex(x.shape):
        xp = x.copy()
        xp[j] += 1j * h
        g[j] = np.imag(f(xp)) / h
    return g


def complex_step(f, args, argnum, h: float = 1e-30) -> np.ndarray:
    """``d f(*args) / d args[argnum]`` by complex steps (see :func:`complex_step_grad`)."""
    args = tuple(args)
    x = np.asarray(args[argnum], dtype=float)
    return complex_step_grad(lambda z: f(*args[:argnum], z, *args[argnum + 1 :]), x, h)


@jax.jit
def gmm_em_step_direct(params, x, reg_covar):
    """One EM step of a Gaussian mixture written directly from the formulas, with ``(N, K)``
    responsibilities and ``N x K x d x d`` intermediates: the oracle for ``gmm.em_step``'s fast
    path over sufficient statistics (and its timing baseline in ``benchmarks/bench_gmm.py``).

    ``params`` is ``(weights (K,), means (K, d), covariances (K, d, d))``; returns the same triple.
    The log-densities come from ``jax.scipy.stats.multivariate_normal``, not from the package.
    """
    weights, means, covariances = params
    N, d = x.shape
    logp = jax.vmap(lambda m, c: jax.scipy.stats.multivariate_normal.logpdf(x, m, c))(means, covariances).T
    r = jax.nn.softmax(jnp.log(weights) + logp, axis=1)  # E-step, (N, K)
    Nk = jnp.sum(r, axis=0)
    new_means = (r.T @ x) / Nk[:, None]
    diff = x[None, :, :] - new_means[:, None, :]
    cov = jnp.einsum("ik,kia,kib->kab", r, diff, diff) / Nk[:, None, None]
    return Nk / N, new_means, cov + reg_covar * jnp.eye(d, dtype=x.dtype)
