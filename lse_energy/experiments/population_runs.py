r"""Chapter 20's stored experiment: decoding error against population size.

``population_scaling`` decodes a scalar stimulus (201 points on :math:`[-1, 1]`) from
nested LIF populations of :math:`N = 8, 16, \dots, 1024` neurons with the regularised
decoder of :func:`lse_energy.population.decoders`, the noise standard deviation
:math:`\sigma` fixed across sizes and seeds (10% of the largest rate of the chapter's
30-neuron tuning population, ``key(0)``), and records per size the distortion
:math:`\mathrm{RMS}(HD - x)` and the noise term :math:`\sigma\|D\|_F`. One cell per seed
(the population of seed ``s`` is drawn from ``fold_in(key(100), s)``; its first
:math:`N` neurons form the population of size :math:`N`). :func:`scaling_summary` fits
per-seed log-log slopes over a stated range of sizes and gives their mean with a 95%
t-interval over seeds.

Size, fixed before the run: 20 seeds (the house rule for a quantity that depends on the
seed) and sizes up to 1024, so that the slopes can be fitted over :math:`N \ge 64`, away
from the small populations whose errors are set by a handful of tuning curves. A cell
is a few linear solves of at most 1024 unknowns: about a second of CPU once compiled
(the stored run took 198 s of cell time on 2 heavily shared cores, compiles included).

The replay trace of a cell is its first two sizes (8 and 16 neurons) recomputed by the
same function; the full run's values sit next to them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import lif, population
from lse_energy.experiments import store

__all__ = [
    "SCALING",
    "EXPERIMENTS",
    "scaling_errors",
    "scaling_summary",
    "reference_sigma",
    "slopes",
    "mean_kernel",
    "ridge_prediction",
    "ridge_equivalent",
]

#: Settings of ``population_scaling``.
SCALING = dict(
    seeds=list(range(20)),
    sizes=[8, 16, 32, 64, 128, 256, 512, 1024],
    n_points=201,
    key=100,
    sigma_ref=dict(n_neurons=30, key=0, frac=0.1),
    fit_from=64,
)
# Float64. The replay evaluates the same jitted function on the same inputs (the full run evaluates all
# sizes in one vmapped call, the replay two of them), so only the fusion and instruction set change the
# order of operations in a 1024 x 1024 solve. Measured: 0 natively, <= 2e-13 relative under SSE4.2, AVX and
# the fast-compile flags; 1e-9 leaves room, while a 1% change of sigma moves the trace by >= 1e-3.
_RTOL, _ATOL = 1e-9, 1e-15
_REASON = (
    "float64 round-off of the same ridge solve compiled differently (measured <= 2e-13 relative under "
    "SSE4.2, AVX and fast-compile flags); a 1% change of sigma moves the trace by >= 1e-3"
)


def _stimuli(n_points):
    return jnp.linspace(-1.0, 1.0, n_points)


def reference_sigma(s: dict) -> float:
    """Noise standard deviation (Hz): ``frac`` times the largest rate of the reference population."""
    r = s["sigma_ref"]
    p = population.init_params(1, r["n_neurons"], key=jax.random.key(r["key"]))
    return r["frac"] * float(jnp.max(population.activities(p, _stimuli(s["n_points"]), lif.rate)))


@functools.partial(jax.jit, static_argnames=("n_max", "n_points"))
def _errors(key, n, sigma, n_max, n_points):
    """Distortion and noise term of the first ``n`` of ``n_max`` i.i.d. neurons (other columns zeroed,
    which gives them decoders exactly 0)."""
    xs = _stimuli(n_points)
    p = population.init_params(1, n_max, key=key)
    h = population.activities(p, xs, lif.rate) * (jnp.arange(n_max) < n)
    d = population.decoders(h, xs, sigma)
    return jnp.sqrt(jnp.mean((h @ d - xs) ** 2)), sigma * jnp.linalg.norm(d)


def scaling_errors(s: dict, seed: int, sizes=None) -> dict:
    """``distortion`` and ``noise`` (arrays over ``sizes``, default all of ``s["sizes"]``) for one seed."""
    sizes = s["sizes"] if sizes is None else sizes
    key = jax.random.fold_in(jax.random.key(s["key"]), seed)
    f = jax.vmap(_errors, in_axes=(None, 0, None, None, None))
    dist, noise = f(key, jnp.asarray(sizes), reference_sigma(s), max(s["sizes"]), s["n_points"])
    return dict(distortion=np.asarray(dist), noise=np.asarray(noise))


def slopes(sizes, errors, fit_from: int) -> np.ndarray:
    """Least-squares slopes of log error against log N over the sizes ``>= fit_from``, one per row."""
    sizes = np.asarray(sizes, dtype=float)
    keep = sizes >= fit_from
    x = np.log(sizes[keep])
    return np.array([np.polyfit(x, np.log(np.asarray(r)[keep]), 1)[0] for r in np.atleast_2d(errors)])


def _replay(s, cell):
    return scaling_errors(s, cell["seed"], s["sizes"][:2])


def _cell(s, cell, progress):
    r = scaling_errors(s, cell["seed"])
    trace = _replay(s, cell)
    trace = {k: r[k][:2] for k in trace}  # the full run's own first sizes
    result = dict(r, sigma=reference_sigma(s))
    for k in ("distortion", "noise"):
        result[f"slope_{k}"] = float(slopes(s["sizes"], r[k], s["fit_from"])[0])
    return dict(result=result, trace=trace)


def scaling_summary(doc: dict, fit_from: int | None = None) -> dict:
    """Per-seed errors ``(seeds, sizes)`` and slopes of a stored ``population_scaling`` document.

    ``fit_from`` (default: the stored setting) is the smallest size in the fit. For each of
    ``distortion`` and ``noise``: ``errors``, ``slopes`` (one per seed), ``mean`` and ``ci`` (the mean
    slope and its 95% t-interval over seeds), ``range`` (smallest and largest per-seed slope).
    """
    from scipy import stats

    s = doc["settings"]
    fit_from = s["fit_from"] if fit_from is None else fit_from
    res = [doc["cells"][store.cell_key(dict(seed=k))]["result"] for k in s["seeds"]]
    out = dict(sizes=np.asarray(s["sizes"]), sigma=np.asarray([r["sigma"] for r in res]), fit_from=fit_from)
    for k in ("distortion", "noise"):
        e = np.asarray([r[k] for r in res])
        sl = slopes(s["sizes"], e, fit_from)
        n = len(sl)
        half = stats.t.ppf(0.975, n - 1) * sl.std(ddof=1) / np.sqrt(n)
        out[k] = dict(
            errors=e,
            slopes=sl,
            mean=float(sl.mean()),
            ci=(float(sl.mean() - half), float(sl.mean() + half)),
            range=(float(sl.min()), float(sl.max())),
        )
    return out


@functools.partial(jax.jit, static_argnames=("n_chunks", "chunk", "n_points"))
def _mean_kernel(key, n_chunks, chunk, n_points):
    xs = _stimuli(n_points)

    def one(k):
        h = population.activities(population.init_params(1, chunk, key=k), xs, lif.rate)
        return h @ h.T

    keys = jax.random.split(key, n_chunks)
    return jax.lax.map(one, keys).sum(0) / (n_chunks * chunk)


def mean_kernel(s: dict, n_neurons: int = 32768, key: int = 999, chunk: int = 2048) -> np.ndarray:
    r"""The population-limit kernel :math:`\bar K = \mathbb E[h h^\top]` on the stimulus grid.

    Estimated from ``n_neurons`` neurons drawn independently of the stored run (``key``), in
    chunks of ``chunk``; ``(n_points, n_points)``.
    """
    return np.asarray(_mean_kernel(jax.random.key(key), n_neurons // chunk, chunk, s["n_points"]))


def ridge_prediction(s: dict, sizes, kernel: np.ndarray) -> dict:
    r"""Deterministic-equivalent prediction of the distortion and the noise term at each size.

    The run's decoder is ridge regression on :math:`N` i.i.d. neurons with penalty
    :math:`\lambda = M\sigma^2`. With :math:`\hat S = HH^\top/N` (an average of :math:`N`
    i.i.d. terms of mean :math:`\bar K`), :math:`\lambda' = \lambda/N`, the distortion is
    :math:`\|\lambda'(\hat S + \lambda')^{-1}x\|/\sqrt M` and the noise term
    :math:`\sigma\|D\|` with :math:`\|D\|^2 = x^\top[(\hat S+\lambda')^{-1}
    - \lambda'(\hat S+\lambda')^{-2}]x/N`. The deterministic equivalent of the resolvent of a
    sample second-moment matrix replaces :math:`\lambda'(\hat S+\lambda')^{-1}` by
    :math:`\kappa(\bar K+\kappa)^{-1}`, where :math:`\kappa > \lambda'` solves
    :math:`\kappa\,(1 - \mathrm{df}_1(\kappa)/N) = \lambda'`,
    :math:`\mathrm{df}_1 = \mathrm{tr}\,\bar K(\bar K+\kappa)^{-1}`; differentiating in
    :math:`\lambda'` (with :math:`\kappa' = 1/(1 - \mathrm{df}_2/N)`,
    :math:`\mathrm{df}_2 = \mathrm{tr}\,\bar K^2(\bar K+\kappa)^{-2}`) gives the squared terms:

    .. math::
        \begin{aligned}
        \mathrm{dist}^2 &\approx \tfrac1M\, x^\top\bigl[(\kappa - \lambda'\kappa')(\bar K+\kappa)^{-1}
            + \lambda'\kappa\kappa'(\bar K+\kappa)^{-2}\bigr]x, \\
        \|D\|^2 &\approx \tfrac{\kappa'}{N}\, x^\top \bar K(\bar K+\kappa)^{-2} x .
        \end{aligned}

    With :math:`\kappa = \lambda'`, :math:`\kappa' = 1` (the population limit, :math:`\hat S = \bar K`)
    they reduce to plugging the mean kernel into the formulas; ``plugin`` gives those values too.

    Returns ``distortion``, ``noise`` and ``plugin_distortion``, ``plugin_noise`` (arrays over ``sizes``),
    and ``kappa_ratio`` (:math:`\kappa/\lambda'`).
    """
    xs = np.asarray(_stimuli(s["n_points"]))
    sigma = reference_sigma(s)
    out = ridge_equivalent(kernel, xs, len(xs) * sigma**2, sizes)
    for k in ("noise", "plugin_noise"):
        out[k] = sigma * out[k]
    return out


def ridge_equivalent(kernel, target, lam: float, sizes) -> dict:
    r"""The formulas of :func:`ridge_prediction` for any kernel ``(M, M)``, target ``(M,)`` and penalty.

    Returns ``distortion`` (RMS over the ``M`` points), ``noise`` (:math:`\|D\|_F`, without the
    factor :math:`\sigma`), their ``plugin_`` versions and ``kappa_ratio``, arrays over ``sizes``.
    """
    from scipy.optimize import brentq

    target = np.asarray(target, dtype=float)
    m = len(target)
    w, u = np.linalg.eigh(np.asarray(kernel, dtype=float))
    w = np.clip(w, 0.0, None)
    c2 = (u.T @ target) ** 2
    out = {k: [] for k in ("distortion", "noise", "plugin_distortion", "plugin_noise", "kappa_ratio")}
    for n in np.asarray(sizes, dtype=float):
        lp = lam / n
        kap = brentq(lambda k: k * (1.0 - np.sum(w / (w + k)) / n) - lp, lp, lp + np.sum(w) + 1.0)
        kp = 1.0 / (1.0 - np.sum(w**2 / (w + kap) ** 2) / n)
        d2 = np.sum(((kap - lp * kp) / (w + kap) + lp * kap * kp / (w + kap) ** 2) * c2) / m
        out["distortion"].append(np.sqrt(d2))
        out["noise"].append(np.sqrt(kp / n * np.sum(w / (w + kap) ** 2 * c2)))
        out["plugin_distortion"].append(np.sqrt(np.sum((lp / (w + lp)) ** 2 * c2) / m))
        out["plugin_noise"].append(np.sqrt(np.sum(w / (w + lp) ** 2 * c2) / n))
        out["kappa_ratio"].append(kap / lp)
    return {k: np.asarray(v) for k, v in out.items()}


#: The chapter that plots it.
_CHAPTER = "20_population_coding"

EXPERIMENTS = [
    store.Experiment("population_scaling", _CHAPTER, SCALING, store.per_seed, _cell, _replay, _RTOL, _ATOL, _REASON)
]
