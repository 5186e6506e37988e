r"""Full-size run of chapter 21: GAN mode coverage on a ring of Gaussians, over many seeds.

Two registered experiments. ``gan_ring`` (:data:`GAN`), one cell per seed. The
data are ``n_data`` draws (key 10) from ``n_modes`` Gaussians of standard
deviation ``std`` on a circle of radius ``radius`` (:func:`lse_energy.gan.ring_centers`,
Metz et al. 2017). Generator and discriminator are tanh MLPs with two hidden
layers of ``hidden`` units, each trained by Adam (``learning_rate``, ``b1``),
batch ``batch_size``, one discriminator step per generator step, the notes'
non-saturating generator loss (:func:`lse_energy.gan.fit`), in ``n_chunks``
chunks of ``chunk`` steps. Seed ``s`` initialises from ``fold_in(key(13), s)``
and trains chunk ``c`` with ``fold_in(fold_in(key(12), s), c)``.

At step 0 and after every chunk the generator maps the same ``n_eval`` noise
vectors (key 11) to samples, and :func:`lse_energy.gan.mode_coverage` (the
criterion fixed before any run: high quality within ``n_std`` standard
deviations of the nearest centre, a mode covered when it holds at least
``min_fraction`` of all samples as high-quality ones) gives the number of modes
covered, the high-quality fraction and the per-mode counts. A cell stores
those at every checkpoint, the mean discriminator and generator losses of every
chunk, and ``keep_samples`` of the final samples (rounded to 1e-4, for plots).

**Size.** 40 seeds, so that a rate over seeds has an exact 95% interval at most
about 0.32 wide (at a rate of 1/2; 0.09 at a rate of 0 or 1); 6000 steps, a
little more than the 5000 the chapter announced as its full size: in a pilot
(seeds 0-2 to 10 000 steps, not stored) every seed covered all modes by step
2000 and the high-quality fraction levelled off around step 6000. Settings
fixed before the run. The stored run took 870 s of cell time on two cores
shared with other jobs (load 10-19).

**Replay trace.** The first :data:`REPLAY_STEPS` discriminator and generator
losses of the full run's first chunk, next to those of a run stopped after
that many steps and the mean of its samples on the evaluation noise
(``replay``).

**Minimax against non-saturating** (``gan_ring_losses``, :data:`LOSSES`): cells are
a seed and a generator loss. The discriminator first trains alone for
``head_start`` steps against the initial generator (key ``fold_in(key(14), s)``),
so that it rejects the fakes, the condition of the chapter's saturation
proposition; from that one state both losses then train for ``n_chunks`` chunks
with gan_ring's chunk keys (paired per seed). A cell stores what a ``gan_ring``
cell stores, and the chunk means of the generator's gradient norm and of
:math:`D(G(z))`, both losses' gradient norms and the mean :math:`D(G(z))` on the
evaluation noise at every checkpoint (:func:`eval_grad_norms`), the first
chunk's per-step gradient norms and :math:`D(G(z))` as ``early_block``-step
means, and the same for the first ``balanced_steps`` steps without the head start.
Size: 10 seeds of 1000 steps, 804 s of cell time on two cores shared with other
jobs (load 12-17); its replay covers the head start and 25 joint steps.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lse_energy import core, gan
from lse_energy.experiments import store

__all__ = [
    "GAN",
    "LOSSES",
    "SIZE_KEYS",
    "REPLAY_STEPS",
    "EXPERIMENTS",
    "ring",
    "train_seed",
    "eval_grad_norms",
    "rate_interval",
    "summary",
    "summary_losses",
    "replay_losses",
]

#: Settings of the full run.
GAN = dict(
    seeds=list(range(40)),
    n_modes=8,
    radius=2.0,
    std=0.05,
    n_data=10_000,
    n_eval=2000,
    hidden=64,
    learning_rate=1e-3,
    b1=0.5,
    batch_size=128,
    chunk=500,
    n_chunks=12,
    generator_loss="non_saturating",
    n_std=3.0,
    min_fraction=0.02,
    keep_samples=300,
)
#: Settings of the side-by-side run of the two generator losses; the full run's, but 10 seeds of 1000
#: steps (sized to this session's compute), each trained with both losses (a cell is a seed and a loss), after
#: a head start of ``head_start`` steps in which the discriminator alone trains against the initial generator
#: (so that it rejects the fakes, the condition of the saturation proposition). The first chunk's per-step
#: generator gradient norms and mean D(G(z)) are stored as means over blocks of ``early_block`` steps, for this
#: run and for the first ``balanced_steps`` steps of a run without the head start (gan_ring's setting).
LOSSES = dict(
    {k: v for k, v in GAN.items() if k != "generator_loss"},
    seeds=list(range(10)),
    n_chunks=2,
    generator_losses=list(gan.GENERATOR_LOSSES),
    head_start=500,
    early_block=25,
    balanced_steps=100,
)
#: The settings a live (reduced) run may change; every other setting is the full run's.
SIZE_KEYS = ("seeds", "n_chunks")
#: Length of the replay trace.
REPLAY_STEPS = 25

# Float64. The replay is the same program as the full run's first chunk compiled for a 25-step scan
# instead of a 500-step one (and with or without XLA's fast-compile flags, on other instruction sets):
# the order of floating-point operations changes, nothing else. GAN training is chaotic over thousands of
# steps, but over 25 steps the measured largest relative discrepancy is 0 natively, 9e-16 under
# --xla_cpu_max_isa=SSE4_2 and 3e-15 under AVX and the test suite's fast-compile flags. A learning rate
# 1% off moves the losses by 3e-4 (the mean sample by 6e-2), a flipped sign of the step by O(1).
_RTOL, _ATOL = 1e-9, 1e-12
_REASON = (
    "float64 round-off of a reordered but identical program over 25 alternating Adam steps "
    "(measured 3e-15 relative); a 1% change of the learning rate moves it by >= 3e-4"
)


def ring(settings: dict):
    """``(centers, data, noise)``: the mode centres, the training data and the evaluation noise."""
    centers = gan.ring_centers(settings["n_modes"], settings["radius"])
    data = gan.sample_mixture(centers, settings["std"], settings["n_data"], key=jax.random.key(10))
    noise = core.random_normal(jax.random.key(11), (settings["n_eval"], 2), centers.dtype)
    return centers, data, noise


def optimizer(settings: dict) -> optax.GradientTransformation:
    """Adam at the settings' ``learning_rate`` and ``b1``; one object per pair, so :func:`gan.fit` compiles once."""
    return _adam(float(settings["learning_rate"]), float(settings["b1"]))


@functools.lru_cache(maxsize=8)
def _adam(learning_rate, b1):
    return optax.adam(learning_rate, b1=b1)


def _init(settings, seed):
    h = settings["hidden"]
    return gan.init_params(
        2, 2, key=jax.random.fold_in(jax.random.key(13), seed), generator_hidden=(h, h), discriminator_hidden=(h, h)
    )


def _head_key(seed):
    return jax.random.fold_in(jax.random.key(14), seed)


def _chunk_key(seed, c):
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(12), seed), c)


def _head_start(settings, seed, data):
    """``(params, opt_state)`` to start from: the initial ones, or (with ``head_start`` > 0) after that many
    steps of the discriminator alone against the initial generator, with key ``fold_in(key(14), seed)``."""
    p = _init(settings, seed)
    if not settings.get("head_start", 0):
        return p, None
    opt = optimizer(settings)
    r = gan.fit(
        p,
        data,
        key=_head_key(seed),
        d_optimizer=opt,
        g_optimizer=opt,
        n_steps=settings["head_start"],
        batch_size=settings["batch_size"],
        train_generator=False,
    )
    return r.params, r.extras.opt_state


def _fit(settings, params, data, key, n_steps, opt_state=None):
    opt = optimizer(settings)
    return gan.fit(
        params,
        data,
        key=key,
        d_optimizer=opt,
        g_optimizer=opt,
        n_steps=n_steps,
        batch_size=settings["batch_size"],
        generator_loss=settings["generator_loss"],
        opt_state=opt_state,
    )


def train_seed(settings: dict, seed: int) -> dict:
    """Train seed ``seed`` for ``n_chunks`` chunks; its coverage at step 0 and after every chunk.

    Returns a dict of NumPy arrays: ``steps`` ``(n_chunks + 1,)``, ``covered``,
    ``high_quality`` (same shape), ``counts`` ``(n_chunks + 1, n_modes)``, ``samples``
    ``(n_chunks + 1, n_eval, 2)``, ``d_loss`` and ``g_loss`` ``(n_chunks,)`` (chunk
    means), and ``first`` (the first :data:`REPLAY_STEPS` discriminator and generator
    losses of the first chunk); ``grad_norm``, ``fake_prob`` ``(n_chunks,)`` (chunk means of
    the generator's gradient norm and of D(G(z))), ``eval_grad_norms`` ``(n_chunks + 1, 2)``
    and ``eval_fake_prob`` ``(n_chunks + 1,)`` on the evaluation noise, and ``first_chunk``
    (the first chunk's per-step ``grad_norm`` and ``fake_prob``). With a ``head_start``
    setting, the discriminator first trains alone for that many steps (step 0 is after it)."""
    s = settings
    centers, data, noise = ring(s)
    p, state = _head_start(s, seed, data)
    out = dict(
        covered=[],
        high_quality=[],
        counts=[],
        samples=[],
        d_loss=[],
        g_loss=[],
        grad_norm=[],
        fake_prob=[],
        eval_grad_norms=[],
        eval_fake_prob=[],
    )

    def record(p):
        x = gan.generate(p, noise)
        cov = gan.mode_coverage(x, centers, s["std"], n_std=s["n_std"], min_fraction=s["min_fraction"])
        out["covered"].append(int(cov.n_covered))
        out["high_quality"].append(float(cov.high_quality))
        out["counts"].append(np.asarray(cov.counts))
        out["samples"].append(np.asarray(x))
        out["eval_grad_norms"].append(np.asarray(eval_grad_norms(p, noise)))
        out["eval_fake_prob"].append(float(jnp.mean(gan.discriminate(p, x))))

    record(p)
    for c in range(s["n_chunks"]):
        r = _fit(s, p, data, _chunk_key(seed, c), s["chunk"], state)
        p, state = r.params, r.extras.opt_state
        d, g = np.asarray(r.energies), np.asarray(r.extras.generator_loss)
        gn, fp = np.asarray(r.extras.generator_grad_norm), np.asarray(r.extras.fake_prob)
        if c == 0:
            out["first"] = dict(d_loss=d[:REPLAY_STEPS], g_loss=g[:REPLAY_STEPS])
            out["first_chunk"] = dict(grad_norm=gn, fake_prob=fp)
        out["d_loss"].append(float(d.mean()))
        out["g_loss"].append(float(g.mean()))
        out["grad_norm"].append(float(gn.mean()))
        out["fake_prob"].append(float(fp.mean()))
        record(p)
    res = {k: np.asarray(v) for k, v in out.items() if k not in ("first", "first_chunk")}
    res["steps"] = np.arange(s["n_chunks"] + 1) * s["chunk"]
    res["first"], res["first_chunk"] = out.get("first"), out.get("first_chunk")
    return res


@jax.jit
def _eval_grad_norms(params, noise):
    def norm(kind):
        g = jax.grad(lambda ph: gan.generator_loss(params._replace(generator=ph), noise, kind))(params.generator)
        return jnp.sqrt(sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(g)))

    return jnp.stack([norm(kind) for kind in gan.GENERATOR_LOSSES])


def eval_grad_norms(params, noise) -> jax.Array:
    r"""``(2,)``: :math:`\|\nabla_\varphi L_G\|` of the non-saturating and the minimax generator loss
    (order of ``gan.GENERATOR_LOSSES``) at the same ``params``, on the evaluation ``noise``."""
    return _eval_grad_norms(params, jnp.asarray(noise))


def replay(settings: dict, cell: dict) -> dict:
    """The first :data:`REPLAY_STEPS` steps of ``cell``'s seed: its losses and its mean sample on the noise."""
    _, data, noise = ring(settings)
    r = _fit(settings, _init(settings, cell["seed"]), data, _chunk_key(cell["seed"], 0), REPLAY_STEPS)
    return dict(
        d_loss=np.asarray(r.energies),
        g_loss=np.asarray(r.extras.generator_loss),
        sample_mean=np.asarray(jnp.mean(gan.generate(r.params, noise), axis=0)),
    )


def _history_result(settings, h, *more) -> dict:
    """The stored result of one training history: its per-chunk curves (and ``more`` keys), the last samples."""
    keys = ("steps", "covered", "high_quality", "counts", "d_loss", "g_loss", *more)
    return dict({k: h[k] for k in keys}, samples=np.round(h["samples"][-1][: settings["keep_samples"]], 4))


def _cell(settings, cell, progress):
    del progress
    h = train_seed(settings, cell["seed"])
    result = _history_result(settings, h)
    trace = replay(settings, cell)
    trace.update(h["first"])  # the full run's own first steps
    return dict(result=result, trace=trace)


def rate_interval(n_hits: int, n: int, level: float = 0.95) -> tuple[float, float, float]:
    r"""The rate ``n_hits / n`` and its exact (Clopper-Pearson) two-sided interval at ``level``: ``(rate, lo, hi)``.

    ``n_hits`` successes (here: seeds that cover every mode) out of ``n`` trials."""
    from scipy.stats import beta

    if not (isinstance(n_hits, (int, np.integer)) and isinstance(n, (int, np.integer)) and 0 <= n_hits <= n and n >= 1):
        raise ValueError(f"need integers 0 <= n_hits <= n, n >= 1; got n_hits={n_hits!r}, n={n!r}")
    a = (1 - level) / 2
    lo = 0.0 if n_hits == 0 else float(beta.ppf(a, n_hits, n - n_hits + 1))
    hi = 1.0 if n_hits == n else float(beta.ppf(1 - a, n_hits + 1, n - n_hits))
    return n_hits / n, lo, hi


def summary(doc: dict) -> dict:
    """A stored ``gan_ring`` document as arrays with seeds (in order) on the first axis:
    ``covered``, ``high_quality`` ``(seeds, checkpoints)``, ``counts`` ``(seeds, checkpoints,
    n_modes)``, ``d_loss``, ``g_loss`` ``(seeds, n_chunks)``, ``samples`` ``(seeds, keep, 2)``;
    and ``steps`` ``(checkpoints,)``."""
    cells = [doc["cells"][store.cell_key(dict(seed=k))]["result"] for k in doc["settings"]["seeds"]]
    out = {
        k: np.array([c[k] for c in cells]) for k in ("covered", "high_quality", "counts", "d_loss", "g_loss", "samples")
    }
    out["steps"] = np.asarray(cells[0]["steps"])
    return out


def _blocks(v, b):
    v = np.asarray(v)
    return v.reshape(-1, b).mean(axis=1)


def replay_losses(settings: dict, cell: dict) -> dict:
    """The head start and the first :data:`REPLAY_STEPS` steps of ``cell`` (a seed and a generator loss):
    the losses, the generator gradient norms, and the mean sample on the evaluation noise."""
    s = dict(settings, generator_loss=cell["loss"])
    _, data, noise = ring(s)
    p, state = _head_start(s, cell["seed"], data)
    r = _fit(s, p, data, _chunk_key(cell["seed"], 0), REPLAY_STEPS, state)
    return dict(
        d_loss=np.asarray(r.energies),
        g_loss=np.asarray(r.extras.generator_loss),
        grad_norm=np.asarray(r.extras.generator_grad_norm),
        sample_mean=np.asarray(jnp.mean(gan.generate(r.params, noise), axis=0)),
    )


def _cell_losses(settings, cell, progress):
    del progress
    seed, b = cell["seed"], settings["early_block"]
    s = dict(settings, generator_loss=cell["loss"])
    h = train_seed(s, seed)
    # the same seed and loss without the head start (gan_ring's setting), its first balanced_steps steps
    _, data, _ = ring(s)
    r = _fit(s, _init(s, seed), data, _chunk_key(seed, 0), s["balanced_steps"])
    early = h["first_chunk"]
    result = _history_result(s, h, "grad_norm", "fake_prob", "eval_grad_norms", "eval_fake_prob")
    result.update(
        early_steps=np.arange(s["chunk"] // b) * b,
        early_grad_norm=_blocks(early["grad_norm"], b),
        early_fake_prob=_blocks(early["fake_prob"], b),
        balanced_early_grad_norm=_blocks(r.extras.generator_grad_norm, b),
        balanced_early_fake_prob=_blocks(r.extras.fake_prob, b),
    )
    trace = replay_losses(settings, cell)
    trace.update(h["first"], grad_norm=early["grad_norm"][:REPLAY_STEPS])  # the full run's own first steps
    return dict(result=result, trace=trace)


_LOSS_FIELDS = (
    "covered",
    "high_quality",
    "counts",
    "d_loss",
    "g_loss",
    "samples",
    "grad_norm",
    "fake_prob",
    "eval_grad_norms",
    "eval_fake_prob",
    "early_grad_norm",
    "early_fake_prob",
    "balanced_early_grad_norm",
    "balanced_early_fake_prob",
)


def summary_losses(doc: dict) -> dict:
    """A stored ``gan_ring_losses`` document as ``{loss: {field: array}}``, seeds (in order) on the first
    axis of every array: the fields of :func:`summary`, and ``grad_norm``, ``fake_prob`` ``(seeds, n_chunks)``
    (chunk means), ``eval_grad_norms`` ``(seeds, checkpoints, 2)`` (both losses' gradient norms at this run's
    checkpoints, order of ``gan.GENERATOR_LOSSES``), ``eval_fake_prob`` ``(seeds, checkpoints)``,
    ``early_grad_norm``, ``early_fake_prob`` ``(seeds, blocks)`` and their ``balanced_`` versions (no head
    start, the first ``balanced_steps`` steps) ``(seeds, balanced_steps // early_block)``; and ``steps``,
    ``early_steps``."""
    s = doc["settings"]
    out = {}
    for loss in s["generator_losses"]:
        cells = [doc["cells"][store.cell_key(dict(seed=k, loss=loss))]["result"] for k in s["seeds"]]
        out[loss] = {k: np.array([c[k] for c in cells]) for k in _LOSS_FIELDS}
        out[loss]["steps"] = np.asarray(cells[0]["steps"])
        out[loss]["early_steps"] = np.asarray(cells[0]["early_steps"])
    return out


def _seed_losses(s):
    return [dict(seed=k, loss=loss) for k in s["seeds"] for loss in s["generator_losses"]]


EXPERIMENTS = [
    store.Experiment("gan_ring", "21_gans", GAN, store.per_seed, _cell, replay, _RTOL, _ATOL, _REASON),
    store.Experiment(
        "gan_ring_losses", "21_gans", LOSSES, _seed_losses, _cell_losses, replay_losses, _RTOL, _ATOL, _REASON
    ),
]
