r"""Full-size runs of chapter 19: attacks on, and adversarial training of, digits classifiers.

Three registered experiments, one cell per training seed. A seed fixes the
random 1200/597 train/test split of scikit-learn's digits (pixels scaled to
``[0, 1]``), the initialisation and the minibatch order.

``adversarial_digits`` (:data:`ADV`), ten classes. In each cell two
one-hidden-layer networks (:mod:`lse_energy.adversarial`) are trained by Adam
from the same initialisation and batches: standard training (``trades_weight = 0``)
and multi-class TRADES (``trades_weight = ADV["beta"]``, the notes' :math:`\beta`;
inner monotone sign ascent in the ball of radius ``eps_trades``). For both it
stores:

* test accuracy under FGSM and under PGD at every radius of ``eps_grid``
  (``pgd_steps`` steps of ``eps / 4``), radius 0 being the clean accuracy;
* the minimal FGSM-direction perturbation of every test image (bisection):
  the fraction fooled within ``min_eps_max``, the median over correctly
  classified images and their histogram, and whether the bisection's bracket
  held on every image (wrong at the radius, right ``1e-6`` below);
* the inner KL maximisation with and without accept-if-improves on the test
  set (``mono_steps`` steps of ``eps_trades / 2``): whether the monotone one
  ever lowered the KL, and the fraction of images on which plain ascent did;
* the mean training loss of every epoch (for the plateau criterion of
  :func:`lse_energy.experiments.full_runs.plateau`).

``adversarial_digits_gradient`` (:data:`GRAD`): the same networks for every seed
(same settings, split, initialisation and batches), attacked by §24's
one-step gradient attacks at every step of ``grad_k``, projected onto the ball
of radius ``eps_trades`` (:func:`gradient_attacks`: the untargeted
misclassification rate and the targeted success rate over all 9 targets), and
the continuation check: clean and PGD accuracy after ``continue_epochs`` more
epochs at the same constant step (:func:`continue_training`).

``adversarial_digits_binary`` (:data:`BIN`), the notes' own model of §25.1: the binary
score :math:`f` with labels :math:`T = \pm 1` ("digit >= 5"), trained on
:math:`g(f(X)T) + \beta\, g(f(X)f(X'))` at every beta of a sweep (beta = 0 is
standard training) and by plain adversarial training (§25's first line), each
for 40 epochs and continued to 80 and 160 (the continuation check). At each of
the three budgets: clean accuracy, robust accuracy under PGD with random
restarts (:func:`robust_correct`), the share of test digits with :math:`f > 0`
(1 or 0: a constant classifier), the median :math:`|f|`, and the two terms of
the objective on the training set (:func:`objective_terms`).

**Size.** ``adversarial_digits``: 10 seeds, 64 hidden units, 120 epochs, 20 PGD
steps (60 epochs at first; TRADES's robust accuracy then failed the continuation
rule, so the budget was doubled and the check repeated from 120 to 240 epochs).
``adversarial_digits_binary`` uses 32 hidden units, 80 epochs (checked against
160), ``eps = 0.1`` and PGD with 3 restarts of 50 steps, over the same 10 seeds
(at 40 epochs, checked against 80, TRADES's robust accuracy at beta = 0.5 and 1
failed the continuation rule, so the budget was doubled);
``adversarial_digits_gradient`` uses the networks of all 10 seeds. Every
continuation check is the paired interval rule of CONTRIBUTING (the 95%
interval of the per-seed changes inside ``+-delta``, ``delta = 0.02``), over all
10 seeds. The chapter runs one seed live at a reduced size.

**Replay traces.** ``adversarial_digits``: for both models, the 24 minibatch
losses of the first epoch of the full run, next to the test cross-entropy
(clean, and under PGD at ``eps_trades``) of the same run stopped after that
epoch (``replay``). ``adversarial_digits_gradient``: the first epoch's minibatch
losses of both models. ``adversarial_digits_binary``: the first epoch's minibatch
losses of beta = 1, beta = 6 and plain adversarial training (``binary_replay``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lse_energy import adversarial
from lse_energy.experiments import store

__all__ = [
    "ADV",
    "BIN",
    "BOX",
    "GRAD",
    "gradient_summary",
    "EXPERIMENTS",
    "SIZE_KEYS",
    "digits",
    "split",
    "optimizer",
    "train",
    "continue_training",
    "gradient_attacks",
    "attacked_accuracy",
    "mean_interval",
    "summary",
    "binary_methods",
    "binary_split",
    "binary_train",
    "robust_correct",
    "objective_terms",
    "binary_replay",
    "binary_summary",
]

#: Settings of the full run. ``eps_grid`` are the attack radii (``L_inf``, pixel range 1).
ADV = dict(
    seeds=list(range(10)),
    n_hidden=64,
    n_epochs=120,
    batch_size=50,
    learning_rate=1e-2,
    n_train=1200,
    eps_grid=[0.0, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2],
    pgd_steps=20,
    eps_trades=0.1,
    beta=6.0,
    inner_steps=5,
    min_eps_max=0.5,
    n_bisect=30,
    hist_bins=40,
    mono_steps=10,
)
#: Settings of ``adversarial_digits_gradient``: the networks of :data:`ADV` (same sizes, same seeds' splits,
#: initialisations and minibatch orders, so the same networks) for every seed, attacked by
#: §24's one-step gradient attacks at every step ``grad_k``, and continued for ``continue_epochs`` (twice
#: the budget: the continuation rule, the 95% interval of the paired per-seed changes of clean and PGD
#: accuracy inside ``+-continuation_delta``).
GRAD = dict(ADV, grad_k=[0.01, 0.1, 1.0, 10.0, 100.0], continue_epochs=120, continuation_delta=0.02)
#: The settings a live (reduced) run may change; every other setting is the full run's.
SIZE_KEYS = ("seeds", "n_hidden", "n_epochs", "pgd_steps")
#: Pixel box of the digits.
BOX = (0.0, 1.0)
_MODELS = ("standard", "trades")

# Float64. The replay compiles the same training step for a one-epoch scan instead of the full run's, with
# or without XLA's fast-compile flags and on other instruction sets: the order of floating-point
# operations changes, nothing else. Measured on a stored cell, largest relative discrepancy over the
# trace: 0 natively, 7e-16 under --xla_cpu_max_isa=SSE4_2, AVX and the test suite's fast-compile flags.
# A learning rate 1% off moves the trace by 1e-2, beta 1% off by 4e-3, a flipped sign of the step by
# O(10). A sign step could in principle flip on a gradient component within round-off of zero; none did.
_RTOL, _ATOL = 1e-9, 1e-12
_REASON = (
    "float64 round-off of a reordered but identical program over 24 Adam steps "
    "(measured 7e-16 relative); a 1% change of the learning rate or of beta moves it by >= 4e-3"
)


@functools.lru_cache(maxsize=1)
def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1797 digits, pixels divided by 16 (so in ``[0, 1]``), and their labels."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x / 16.0, y


def split(seed: int, n_train: int = 1200):
    """``(x_train, y_train, x_test, y_test)``: a random split of :func:`digits` drawn from ``seed``."""
    x, y = digits()
    order = np.random.default_rng(seed).permutation(len(x))
    tr, te = order[:n_train], order[n_train:]
    return jnp.asarray(x[tr]), jnp.asarray(y[tr]), jnp.asarray(x[te]), jnp.asarray(y[te])


@functools.lru_cache(maxsize=8)
def optimizer(learning_rate: float) -> optax.GradientTransformation:
    """Adam at ``learning_rate``; one object per rate, so :func:`lse_energy.adversarial.fit` compiles once."""
    return optax.adam(learning_rate)


def train(settings: dict, seed: int, trades_weight: float, n_epochs: int | None = None, defence: str = "trades"):
    """Train one network of the experiment (``trades_weight = 0``: standard; ``trades_weight > 0``: TRADES
    weighted by ``trades_weight``, the notes' beta; ``defence="augment"``: plain adversarial training,
    §25's first line).

    Returns the :class:`~lse_energy.core.FitResult` of :func:`lse_energy.adversarial.fit`;
    ``n_epochs`` (default the settings') stops the same run early."""
    s = settings
    x_tr, y_tr, _, _ = split(seed, s["n_train"])
    p0 = adversarial.init_params(x_tr.shape[1], s["n_hidden"], 10, key=jax.random.key(seed))
    return adversarial.fit(
        p0,
        x_tr,
        y_tr,
        key=jax.random.key(1000 + seed),
        optimizer=optimizer(s["learning_rate"]),
        n_epochs=s["n_epochs"] if n_epochs is None else n_epochs,
        batch_size=s["batch_size"],
        trades_weight=trades_weight,
        epsilon=s["eps_trades"],
        n_inner_steps=s["inner_steps"],
        box=BOX,
        defence=defence,
    )


def continue_training(settings: dict, seed: int, fit_result, trades_weight: float, defence: str = "trades"):
    """The continuation check: ``continue_epochs`` more epochs from ``fit_result``'s parameters
    and optimizer state (constant step, so the same schedule), minibatch order from key ``3000 + seed``;
    ``trades_weight`` as in :func:`train`."""
    s = settings
    x_tr, y_tr, _, _ = split(seed, s["n_train"])
    return adversarial.fit(
        fit_result.params,
        x_tr,
        y_tr,
        key=jax.random.key(3000 + seed),
        optimizer=optimizer(s["learning_rate"]),
        n_epochs=s["continue_epochs"],
        batch_size=s["batch_size"],
        trades_weight=trades_weight,
        epsilon=s["eps_trades"],
        n_inner_steps=s["inner_steps"],
        box=BOX,
        defence=defence,
        opt_state=fit_result.extras.opt_state,
    )


def _pgd(settings, params, x, y, eps):
    return adversarial.pgd(params, x, y, eps, step_size=eps / 4, n_steps=settings["pgd_steps"], box=BOX).x_adv


def attacked_accuracy(settings: dict, params, x, y, eps: float, attack: str) -> float:
    """Accuracy on ``(x, y)`` under ``attack`` (``"fgsm"`` or ``"pgd"``) at radius ``eps`` (0: clean)."""
    if eps == 0.0:
        return float(adversarial.accuracy(params, x, y))
    if attack == "fgsm":
        xa = adversarial.fgsm(params, x, y, eps, box=BOX)
    elif attack == "pgd":
        xa = _pgd(settings, params, x, y, eps)
    else:
        raise ValueError(f"attack must be 'fgsm' or 'pgd'; got {attack!r}")
    return float(adversarial.accuracy(params, xa, y))


def _trades_weight(settings, model):
    """TRADES weight of ``model``: 0 for standard training, the settings' ``beta`` for TRADES (unused by
    ``augment``)."""
    return 0.0 if model == "standard" else settings["beta"]


def _defence(model):
    return "augment" if model == "augment" else "trades"


def gradient_attacks(settings: dict, params, x, y) -> dict:
    r"""§24's two one-step gradient attacks at every step ``k`` of ``grad_k``, projected onto
    :math:`B_\infty(x, \epsilon)` (``epsilon = eps_trades``) and the pixel box.

    ``untargeted``: the fraction of test images misclassified after
    :math:`x' = x + k\nabla_x E(f(x), t(x))`; ``targeted``: for every image and
    every target class :math:`t \ne t(x)`, whether
    :math:`x' = x - k\nabla_x E(f(x), t)` is classified as :math:`t`, averaged
    over the 9 targets and the images (the targeted success rate);
    ``clean_error``: the misclassification rate without attack."""
    e = settings["eps_trades"]
    n_cls = int(params.W2.shape[1])
    untargeted, targeted = [], []
    for k in settings["grad_k"]:
        xa = adversarial.gradient_attack(params, x, y, k, epsilon=e, box=BOX)
        untargeted.append(float(jnp.mean(adversarial.predict(params, xa) != y)))
        hits = []
        for shift in range(1, n_cls):
            tgt = (y + shift) % n_cls
            xt = adversarial.gradient_attack(params, x, tgt, k, targeted=True, epsilon=e, box=BOX)
            hits.append(float(jnp.mean(adversarial.predict(params, xt) == tgt)))
        targeted.append(float(np.mean(hits)))
    return dict(
        untargeted=untargeted, targeted=targeted, clean_error=float(jnp.mean(adversarial.predict(params, x) != y))
    )


def _stopped_metrics(settings, params, seed):
    """Test cross-entropy, clean and under PGD at ``eps_trades``: the replay's test metrics."""
    _, _, x_te, y_te = split(seed, settings["n_train"])
    xa = _pgd(settings, params, x_te, y_te, settings["eps_trades"])
    return dict(
        test_loss=float(adversarial.loss(params, x_te, y_te)), pgd_test_loss=float(adversarial.loss(params, xa, y_te))
    )


def replay(settings: dict, cell: dict) -> dict:
    """Both models of ``cell`` trained for one epoch: their minibatch losses and test metrics."""
    out = {}
    for m in _MODELS:
        r = train(settings, cell["seed"], _trades_weight(settings, m), n_epochs=1, defence=_defence(m))
        out[m] = dict(loss=np.asarray(r.extras.batch_losses)[0], **_stopped_metrics(settings, r.params, cell["seed"]))
    return out


def _minimal(settings, params, x, y):
    m = adversarial.minimal_perturbation(
        params, x, y, eps_max=settings["min_eps_max"], n_bisect=settings["n_bisect"], box=BOX
    )
    direction = jnp.sign(adversarial.grad_x(params, x, y))
    ok = np.asarray(m.fooled & (m.epsilon > 0))
    at = jnp.clip(x + m.epsilon[:, None] * direction, *BOX)
    below = jnp.clip(x + (m.epsilon[:, None] - 1e-6) * direction, *BOX)
    bracket = bool(
        np.all(np.asarray(adversarial.predict(params, at) != y)[ok])
        and np.all(np.asarray(adversarial.predict(params, below) == y)[ok])
    )
    correct = np.asarray(adversarial.predict(params, x) == y)
    eps = np.asarray(m.epsilon)[correct]
    counts, _ = np.histogram(eps, bins=np.linspace(0.0, settings["min_eps_max"], settings["hist_bins"] + 1))
    return dict(fooled=float(jnp.mean(m.fooled)), median=float(np.median(eps)), hist=counts, bracket=bracket)


def _monotone(settings, params, x, seed):
    e = settings["eps_trades"]
    res = {
        mono: adversarial.inner_maximize(
            params,
            x,
            e,
            key=jax.random.key(seed),
            step_size=e / 2,
            n_steps=settings["mono_steps"],
            monotone=mono,
            box=BOX,
        )
        for mono in (True, False)
    }
    never = bool(np.all(np.diff(np.asarray(res[True].losses), axis=0) >= 0))
    drops = np.any(np.diff(np.asarray(res[False].losses), axis=0) < 0, axis=0)
    return dict(monotone_never_lowers=never, plain_lowers_fraction=float(drops.mean()))


def _cell(settings, cell, progress):
    del progress
    s, seed = settings, cell["seed"]
    _, _, x_te, y_te = split(seed, s["n_train"])
    result, trace = {}, {}
    for m in _MODELS:
        r = train(s, seed, _trades_weight(s, m))
        p = r.params
        result[m] = dict(
            fgsm=[attacked_accuracy(s, p, x_te, y_te, e, "fgsm") for e in s["eps_grid"]],
            pgd=[attacked_accuracy(s, p, x_te, y_te, e, "pgd") for e in s["eps_grid"]],
            epoch_loss=np.asarray(r.extras.batch_losses).mean(axis=1),
            minimal=_minimal(s, p, x_te, y_te),
            inner=_monotone(s, p, x_te, seed),
        )
        trace[m] = np.asarray(r.extras.batch_losses)[0]  # the full run's own first epoch
    fresh = replay(s, cell)
    for m in _MODELS:
        fresh[m]["loss"] = trace[m]
    return dict(result=result, trace=fresh)


def _gradient_cell(settings, cell, progress):
    del progress
    s, seed = settings, cell["seed"]
    _, _, x_te, y_te = split(seed, s["n_train"])
    e = s["eps_trades"]
    result, trace = {}, {}
    for m in _MODELS:
        r = train(s, seed, _trades_weight(s, m))
        p = r.params
        c = continue_training(s, seed, r, _trades_weight(s, m)).params
        result[m] = dict(
            gradient=gradient_attacks(s, p, x_te, y_te),
            clean=attacked_accuracy(s, p, x_te, y_te, 0.0, "pgd"),
            pgd=attacked_accuracy(s, p, x_te, y_te, e, "pgd"),
            continued=dict(
                clean=attacked_accuracy(s, c, x_te, y_te, 0.0, "pgd"), pgd=attacked_accuracy(s, c, x_te, y_te, e, "pgd")
            ),
        )
        trace[m] = np.asarray(r.extras.batch_losses)[0]
    return dict(result=result, trace=trace)


def _gradient_replay(settings, cell):
    """Both models of ``cell`` trained for one epoch: their 24 minibatch losses."""
    return {
        m: np.asarray(train(settings, cell["seed"], _trades_weight(settings, m), n_epochs=1).extras.batch_losses)[0]
        for m in _MODELS
    }


def gradient_summary(doc: dict) -> dict:
    """A stored ``adversarial_digits_gradient`` document as arrays over seeds, per model: ``untargeted``,
    ``targeted`` ``(seeds, len(grad_k))``; ``clean_error``, ``clean``, ``pgd``, ``continued_clean``,
    ``continued_pgd`` ``(seeds,)``."""
    cells = [doc["cells"][store.cell_key(dict(seed=k))]["result"] for k in doc["settings"]["seeds"]]
    out = {}
    for m in _MODELS:
        rs = [c[m] for c in cells]
        out[m] = {k: np.array([r["gradient"][k] for r in rs]) for k in ("untargeted", "targeted", "clean_error")}
        for k in ("clean", "pgd"):
            out[m][k] = np.array([r[k] for r in rs])
            out[m][f"continued_{k}"] = np.array([r["continued"][k] for r in rs])
    return out


def mean_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    r"""Mean of ``values`` and its two-sided Student-t interval at ``level``: ``(mean, lo, hi)``.

    For a paired comparison pass the per-seed differences; the verdict "A beats B"
    needs ``lo > 0``."""
    from scipy.stats import t as student_t

    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size < 2:
        raise ValueError(f"values must be a 1-D array of at least 2 numbers; got shape {v.shape}")
    m = float(v.mean())
    half = float(student_t.ppf(0.5 + level / 2, v.size - 1)) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return m, m - half, m + half


def summary(doc: dict) -> dict:
    """A stored ``adversarial_digits`` document as arrays over seeds (in order), per model:
    ``fgsm``, ``pgd`` ``(seeds, len(eps_grid))``, ``epoch_loss`` ``(seeds, n_epochs)``,
    ``fooled``, ``median``, ``plain_lowers_fraction`` ``(seeds,)``, ``hist`` ``(seeds, bins)``,
    ``bracket``, ``monotone_never_lowers`` ``(seeds,)`` booleans."""
    cells = [doc["cells"][store.cell_key(dict(seed=k))]["result"] for k in doc["settings"]["seeds"]]
    out = {}
    for m in _MODELS:
        rs = [c[m] for c in cells]
        out[m] = dict(
            fgsm=np.array([r["fgsm"] for r in rs]),
            pgd=np.array([r["pgd"] for r in rs]),
            epoch_loss=np.array([r["epoch_loss"] for r in rs]),
        )
        for k in ("fooled", "median", "hist", "bracket"):
            out[m][k] = np.array([r["minimal"][k] for r in rs])
        for k in ("plain_lowers_fraction", "monotone_never_lowers"):
            out[m][k] = np.array([r["inner"][k] for r in rs])
    return out


# ---------------------------------------------------------------------------
# The notes' own model: binary TRADES (§25.1), a beta sweep, and §25's plain adversarial training
# ---------------------------------------------------------------------------

#: Settings of ``adversarial_digits_binary``: "digit >= 5" (T = 1) against "digit < 5" (T = -1), the binary
#: score f of §25.1 (one output), 32 hidden units, trained for ``epochs[0]`` epochs, then continued
#: to ``epochs[1]`` and ``epochs[2]`` (the continuation check), each method from the same start and
#: minibatch order; robust accuracy under PGD on g(f(x')T) with ``pgd_restarts`` random restarts of
#: ``pgd_steps`` steps of ``pgd_step_size`` at radius ``eps``; the objective's two terms on the
#: training set with X' from ``objective_steps`` monotone inner steps of ``eps / 4``.
#: Fixed before the run: the reported budget is ``epochs[1]``, and its continuation check asks that the
#: 95% Student-t interval of the paired per-seed change from ``epochs[1]`` to ``epochs[2]`` (twice as
#: long, same constant step) of clean and of robust accuracy lie inside ``+-continuation_delta``, for
#: every method; a method that misses it is reported as optimisation-limited.
BIN = dict(
    seeds=list(range(10)),
    n_hidden=32,
    epochs=[40, 80, 160],
    batch_size=50,
    learning_rate=1e-2,
    n_train=1200,
    split_digit=5,
    eps=0.1,
    inner_steps=5,
    betas=[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 6.0],
    pgd_restarts=3,
    pgd_steps=50,
    pgd_step_size=0.005,
    objective_steps=50,
    continuation_delta=0.02,
)


def binary_methods(settings: dict) -> list[str]:
    """The methods of a cell, the keys of its result: binary TRADES at every beta of ``betas``
    (``"beta=0"`` is standard training), then plain adversarial training: ``["beta=0", "beta=0.5", ...,
    "augment"]``."""
    return [f"beta={b:g}" for b in settings["betas"]] + ["augment"]


def binary_split(seed: int, settings: dict = BIN):
    """``(x_train, T_train, x_test, T_test)``: :func:`split` with labels ``T = 1`` for digits
    ``>= split_digit`` and ``T = -1`` for the rest."""
    x_tr, y_tr, x_te, y_te = split(seed, settings["n_train"])
    d = settings["split_digit"]
    return x_tr, jnp.where(y_tr >= d, 1, -1), x_te, jnp.where(y_te >= d, 1, -1)


def _method_args(method):
    if method == "augment":
        return dict(trades_weight=0.0, defence="augment")
    return dict(trades_weight=float(method.split("=")[1]), defence="trades")


def binary_train(settings: dict, seed: int, method: str, n_epochs: int, start=None, key_offset: int = 0):
    """Train (or, from ``start``, a :class:`~lse_energy.core.FitResult`, continue) one binary network.

    The initialisation is drawn from ``seed`` and the minibatch order from ``1000 + seed + key_offset``."""
    s = settings
    x_tr, t_tr, _, _ = binary_split(seed, s)
    if start is None:
        p0, st = adversarial.init_params(x_tr.shape[1], s["n_hidden"], 1, key=jax.random.key(seed)), None
    else:
        p0, st = start.params, start.extras.opt_state
    return adversarial.fit(
        p0,
        x_tr,
        t_tr,
        key=jax.random.key(1000 + seed + key_offset),
        optimizer=optimizer(s["learning_rate"]),
        n_epochs=n_epochs,
        batch_size=s["batch_size"],
        epsilon=s["eps"],
        n_inner_steps=s["inner_steps"],
        box=BOX,
        opt_state=st,
        **_method_args(method),
    )


def robust_correct(settings: dict, params, x, y) -> np.ndarray:
    """Per example: correct (f(x')T > 0) at the end of every one of ``pgd_restarts`` PGD runs on
    g(f(x')T), each from a uniform random point of the ball (keys ``10000 + r``) and the clean point.
    ``y`` holds the labels T = -1/1 (the notes' T)."""
    s = settings
    ok = np.asarray(adversarial.binary_score(params, x) * y > 0)
    for r in range(s["pgd_restarts"]):
        a = adversarial.pgd(
            params,
            x,
            y,
            s["eps"],
            step_size=s["pgd_step_size"],
            n_steps=s["pgd_steps"],
            key=jax.random.key(10_000 + r),
            box=BOX,
        )
        ok = ok & np.asarray(adversarial.binary_score(params, a.x_adv) * y > 0)
    return ok


def objective_terms(settings: dict, params, x, y, seed: int) -> dict:
    """The two terms of the notes' joint loss on ``(x, y)`` (``y`` the labels T = -1/1): ``fit_term`` =
    mean g(f(X)T) and
    ``robust_term`` = mean g(f(X)f(X')), X' from ``objective_steps`` monotone inner steps of ``eps / 4``
    (a lower bound on the inner maximum); J_beta = fit_term + beta * robust_term."""
    s = settings
    f = adversarial.binary_score(params, x)
    xa = adversarial.inner_maximize(
        params,
        x,
        s["eps"],
        key=jax.random.key(20_000 + seed),
        step_size=s["eps"] / 4,
        n_steps=s["objective_steps"],
        box=BOX,
    ).x_adv
    fa = adversarial.binary_score(params, xa)
    g = adversarial.softplus_surrogate
    return dict(fit_term=float(jnp.mean(g(f * y))), robust_term=float(jnp.mean(g(f * fa))))


def _binary_metrics(settings, params, seed):
    x_tr, t_tr, x_te, t_te = binary_split(seed, settings)
    f = np.asarray(adversarial.binary_score(params, x_te))
    return dict(
        clean=float(np.mean(f * np.asarray(t_te) > 0)),
        robust=float(np.mean(robust_correct(settings, params, x_te, t_te))),
        positive=float(np.mean(f > 0)),
        median_abs_f=float(np.median(np.abs(f))),
        **objective_terms(settings, params, x_tr, t_tr, seed),
    )


_BIN_TRACE = ("beta=1", "beta=6", "augment")


def binary_replay(settings: dict, cell: dict) -> dict:
    """The first epoch's 24 minibatch losses of three methods of ``cell``, trained for one epoch."""
    return {m: np.asarray(binary_train(settings, cell["seed"], m, 1).extras.batch_losses)[0] for m in _BIN_TRACE}


def _binary_cell(settings, cell, progress):
    del progress
    s, seed = settings, cell["seed"]
    x_tr, t_tr, x_te, t_te = binary_split(seed, s)
    result, trace = dict(train_positive=float(jnp.mean(t_tr > 0)), test_positive=float(jnp.mean(t_te > 0))), {}
    e0, e1, e2 = s["epochs"]
    for m in binary_methods(s):
        r = binary_train(s, seed, m, e0)
        if m in _BIN_TRACE:
            trace[m] = np.asarray(r.extras.batch_losses)[0]
        per = {e0: _binary_metrics(s, r.params, seed)}
        epoch_loss = [np.asarray(r.extras.batch_losses).mean(axis=1)]
        for done, extra in ((e0, e1 - e0), (e1, e2 - e1)):
            r = binary_train(s, seed, m, extra, start=r, key_offset=done)
            per[done + extra] = _binary_metrics(s, r.params, seed)
            epoch_loss.append(np.asarray(r.extras.batch_losses).mean(axis=1))
        result[m] = dict(at={str(k): v for k, v in per.items()}, epoch_loss=np.concatenate(epoch_loss))
    return dict(result=result, trace=trace)


def binary_summary(doc: dict) -> dict:
    """A stored ``adversarial_digits_binary`` document as arrays over seeds: ``out[method][metric]`` of shape
    ``(seeds, len(epochs))`` for ``clean``, ``robust``, ``positive``, ``median_abs_f``, ``fit_term`` and
    ``robust_term`` (the objective's two terms), and ``epoch_loss`` ``(seeds, epochs[-1])``; ``out["train_positive"]``,
    ``out["test_positive"]`` ``(seeds,)``."""
    s = doc["settings"]
    cells = [doc["cells"][store.cell_key(dict(seed=k))]["result"] for k in s["seeds"]]
    out = {k: np.array([c[k] for c in cells]) for k in ("train_positive", "test_positive")}
    for m in binary_methods(s):
        out[m] = {}
        for k in ("clean", "robust", "positive", "median_abs_f", "fit_term", "robust_term"):
            out[m][k] = np.array([[c[m]["at"][str(e)][k] for e in s["epochs"]] for c in cells])
        out[m]["epoch_loss"] = np.array([c[m]["epoch_loss"] for c in cells])
    return out


EXPERIMENTS = [
    store.Experiment("adversarial_digits", "19_adversarial", ADV, store.per_seed, _cell, replay, _RTOL, _ATOL, _REASON),
    store.Experiment(
        "adversarial_digits_gradient",
        "19_adversarial",
        GRAD,
        store.per_seed,
        _gradient_cell,
        _gradient_replay,
        _RTOL,
        _ATOL,
        _REASON,
    ),
    store.Experiment(
        "adversarial_digits_binary",
        "19_adversarial",
        BIN,
        store.per_seed,
        _binary_cell,
        binary_replay,
        _RTOL,
        _ATOL,
        _REASON,
    ),
]
