"""The fit drivers: every ``fit`` of the package is a short call to one of them.

Four loops, each owning its randomness, its stopping rule, its progress bar and the
:class:`~lse_energy.core.FitResult`:

* :func:`minibatch`, the gradient trainer: ``n_epochs`` passes over the rows of the data,
  each shuffled with the epoch's key and cut into ``N // batch_size`` minibatches (a last
  partial batch is dropped), one optax step per minibatch;
* :func:`em`, the EM fit: restarts (``n_init``, the lowest final energy kept), EM steps
  until ``max_iter`` or a change in energy per point below ``tol``, the energy trace;
* :func:`steps`, a fixed number of optax steps that are not epochs over rows: full-batch
  steps (``autoencoder``, ``embedding`` without ``batch_size``) or steps that draw their
  own sample (``embedding`` with ``batch_size``, ``experiments.diffusion_mlp``);
* :func:`rounds`, a fixed number of rounds that are more than one optax step on one loss:
  two players (``gan``), inference then learning (``mixture_pc``), closed-form updates with no
  optimizer (``slot_attention``).

Below them, :func:`scan` (one ``lax.scan`` of value-and-gradient then update) and :func:`step`
(one update, for rounds with more inside: ``gan``, ``mixture_pc``). Which driver a fit
used is recorded (:func:`record`); ``tests/contracts/test_registry.py`` checks it against
``registry.DRIVERS``.

Compile once per configuration: the drivers pass the optimizer and their hooks to ``jax.jit``
as :class:`Static` values, equal when their structure is (:func:`fingerprint`), so a fresh
``optax.adam(1e-3)`` reuses the program compiled for an earlier one.

It sits at the bottom of the package, above ``core`` and ``_progress``: no model is imported.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _progress, _validate, core

# ---------------------------------------------------------------------------
# Static arguments compared by structure
# ---------------------------------------------------------------------------


class _Identity:
    """A fingerprint leaf that is equal only to the same object (it holds the object alive)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is _Identity and other.obj is self.obj


_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))
_MAX_DEPTH = 40


def _code(code: types.CodeType, path, depth):
    consts = tuple(_fp(c, path, depth + 1) for c in code.co_consts)
    return (
        "code",
        code.co_code,
        consts,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_filename,
        code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
    )


def _fp(obj, path, depth):
    if isinstance(obj, _SCALARS) and type(obj) in _SCALARS:
        return (type(obj).__name__, repr(obj))
    if depth > _MAX_DEPTH or id(obj) in path:
        return _Identity(obj)
    path = path | {id(obj)}
    t = type(obj)
    if t is types.CodeType:
        return _code(obj, path, depth)
    if t is types.FunctionType:
        try:
            cells = tuple(_fp(c.cell_contents, path, depth + 1) for c in obj.__closure__ or ())
        except ValueError:  # an empty cell
            return _Identity(obj)
        return (
            "function",
            _Identity(obj.__globals__),
            _code(obj.__code__, path, depth + 1),
            _fp(obj.__defaults__, path, depth + 1),
            _fp(obj.__kwdefaults__, path, depth + 1),
            cells,
        )
    if t is types.MethodType:
        return ("method", _fp(obj.__func__, path, depth + 1), _fp(obj.__self__, path, depth + 1))
    if t is functools.partial:
        return (
            "partial",
            _fp(obj.func, path, depth + 1),
            _fp(obj.args, path, depth + 1),
            _fp(obj.keywords, path, depth + 1),
        )
    if t in (tuple, list, frozenset) or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
        items = sorted(obj, key=repr) if t is frozenset else obj
        return (_Identity(t), tuple(_fp(v, path, depth + 1) for v in items))
    if t is dict:
        return ("dict", tuple((_fp(k, path, depth + 1), _fp(v, path, depth + 1)) for k, v in obj.items()))
    if t is np.dtype:
        return ("dtype", str(obj))
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype != object:
        a = np.asarray(obj)
        return ("array", str(a.dtype), a.shape, a.tobytes())
    if isinstance(obj, jax.Array) and not isinstance(obj, jax.core.Tracer):
        try:
            a = np.asarray(obj)
        except Exception:  # noqa: BLE001 - an array that cannot be read (deleted, sharded): by identity
            return _Identity(obj)
        return ("array", str(a.dtype), a.shape, a.tobytes())
    return _Identity(obj)  # anything else (a class instance, a jitted function, a type): the object itself


def fingerprint(obj) -> Any:
    """A hashable key equal for two objects of the same structure, and otherwise for the same object only.

    Functions compare by their code, defaults, globals (the same module) and closure cells; a
    ``functools.partial`` or bound method by its parts; tuples (NamedTuples such as optax's
    ``GradientTransformation``), lists and dicts by their items; numbers, strings and ``None`` by
    value; arrays by dtype, shape and bytes. Anything else (an object with state, a jitted
    function, a tracer) is compared by identity, so the key is never equal for two objects that
    could behave differently: ``optax.adam(1e-3)`` twice gives equal keys, ``optax.adam(2e-3)``
    another.
    """
    return _fp(obj, frozenset(), 0)


class Static:
    """A static argument of ``jax.jit`` (``value``), hashed and compared by :func:`fingerprint`."""

    __slots__ = ("value", "_key", "_hash")

    def __init__(self, value):
        self.value = value
        self._key = fingerprint(value)
        self._hash = hash(self._key)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return type(other) is Static and self._hash == other._hash and self._key == other._key

    def __repr__(self):
        return f"Static({self.value!r})"


# ---------------------------------------------------------------------------
# One step, and a scan of steps
# ---------------------------------------------------------------------------


def step(optimizer, grads, opt_state, params):
    """One optax step: ``(params + updates, opt_state)``, each leaf keeping its dtype."""
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return jax.tree.map(lambda p, u: (p + u).astype(p.dtype), params, updates), opt_state


def scan(value_and_grad, params, opt_state, optimizer, xs=None, *, length=None):
    """``lax.scan`` of optax steps from ``(params, opt_state)``, one per item of ``xs`` (or ``length``).

    At each ``x``: ``value, grads = value_and_grad(params, x)``, then :func:`step`. ``value`` is any
    pytree (a loss, or a loss with diagnostics). Returns ``((params, opt_state), values)``, ``values``
    stacked over the steps.
    """

    def body(carry, x):
        p, s = carry
        value, grads = value_and_grad(p, x)
        return step(optimizer, grads, s, p), value

    return jax.lax.scan(body, (params, opt_state), xs, length=length)


# ---------------------------------------------------------------------------
# Which driver ran
# ---------------------------------------------------------------------------

_records: list[list[str]] = []


@contextlib.contextmanager
def record():
    """Collect the names of the drivers called inside the block (``"minibatch"``, ``"em"``, ``"steps"``, ...)."""
    used: list[str] = []
    _records.append(used)
    try:
        yield used
    finally:
        _records.remove(used)


def _used(name: str) -> None:
    for used in _records:
        used.append(name)


def _finish(where, params, energies, n_iter, converged, extras, steps_trace, hint):
    out = core.FitResult(params, energies, n_iter, converged, extras)
    _validate.require_finite(where, out, steps=steps_trace, hint=hint)
    return out


# ---------------------------------------------------------------------------
# The minibatch gradient driver
# ---------------------------------------------------------------------------


def _epochs(
    params, opt_state, data, key, args, value_and_grad, optimizer, n_epochs, batch_size, batch_keys, permutation,
    epoch_end, report_every,
):  # fmt: skip
    vg, opt = value_and_grad.value, optimizer.value
    keys_of, perm_of, end = batch_keys.value, permutation.value, epoch_end.value
    n = jax.tree.leaves(data)[0].shape[0]
    n_batches = n // batch_size

    def epoch(carry, inp):
        i, k = inp
        if keys_of is None:
            k_perm = k
        else:
            k_perm, k_batch = jax.random.split(k)
        perm = (perm_of or jax.random.permutation)(k_perm, n)[: n_batches * batch_size]
        batches = jax.tree.map(lambda a: a[perm].reshape((n_batches, batch_size) + a.shape[1:]), data)
        if keys_of is not None:
            keys = jax.random.split(k_batch, n_batches)
            batches = (batches, keys if keys_of is True else keys_of(keys, args))
        carry, values = scan(lambda p, b: vg(p, b, args), *carry, opt, batches)
        _progress.tick(i, n_epochs, report_every)
        return carry, (values, None if end is None else end(carry[0], values, data, args))

    xs = (jnp.arange(n_epochs), jax.random.split(key, n_epochs))
    (p, s), (values, ends) = jax.lax.scan(epoch, (params, opt_state), xs)
    return p, s, values, ends


_minibatch_jit = jax.jit(
    _epochs,
    static_argnames=(
        "value_and_grad", "optimizer", "n_epochs", "batch_size", "batch_keys", "permutation", "epoch_end",
        "report_every",
    ),
)  # fmt: skip


def minibatch(
    where: str,
    value_and_grad: Callable,
    params,
    data,
    *,
    key,
    optimizer,
    n_epochs: int,
    batch_size: int,
    args=None,
    opt_state=None,
    batch_keys: bool | Callable = False,
    permutation: Callable | None = None,
    epoch_end: Callable | None = None,
    result: Callable,
    hint: str = "lower the optimizer's learning rate",
    progress: bool = False,
) -> core.FitResult:
    """Train by minibatch descent: ``n_epochs`` shuffled passes over the rows of ``data``, one step per minibatch.

    Each epoch's key (``jax.random.split(key, n_epochs)``) draws the permutation of the rows
    (``permutation(key, N)``, default ``jax.random.permutation``; with ``batch_keys`` the epoch key
    is split first into the permutation's key and the minibatches' key, which is split into one
    key per minibatch). The first ``(N // batch_size) * batch_size`` permuted rows of every leaf of
    ``data`` make the minibatches; each takes one optax step (``scan``).

    Args:
      where: the fit's name, for messages and the progress bar.
      value_and_grad: ``(params, batch, args) -> (value, grads)``, ``batch`` the minibatch of
        ``data`` (with ``batch_keys``, ``(minibatch, key)``); ``value`` any pytree.
      params, opt_state: the start (``opt_state=None``: ``optimizer.init(params)``).
      data: a pytree of arrays with ``N`` rows (``x``, or ``(x, y)``).
      key, optimizer, n_epochs, batch_size: as the fits take them (checked by the fit).
      args: a pytree of arrays passed to the hooks (scalars of the loss, held-out data).
      batch_keys: ``True`` for one key per minibatch, or ``f(keys, args)`` mapping the
        ``(n_batches,)`` keys to what the minibatches take.
      permutation: ``(key, N) -> permutation`` when not ``jax.random.permutation``.
      epoch_end: ``(params, values, data, args) -> pytree`` after each epoch (diagnostics).
      result: ``(opt_state, values, ends) -> (energies, extras, steps)`` with ``values`` the
        ``(n_epochs, n_batches, ...)`` minibatch values and ``ends`` the ``epoch_end`` outputs:
        the :class:`~lse_energy.core.FitResult`'s ``energies`` and ``extras``, and the per-epoch
        trace whose first non-finite epoch a divergence names.
      progress: show a progress bar over the epochs (changes XLA's fusion: equal to round-off).

    The hooks are static arguments of the compiled loop, compared by :func:`fingerprint`: pass
    module-level functions (or ``functools.partial`` of them with hashable settings).
    """
    _used("minibatch")
    if opt_state is None:
        opt_state = optimizer.init(params)
    hooks = _minibatch_static(value_and_grad, optimizer, n_epochs, batch_size, batch_keys, permutation, epoch_end)
    with _progress.bar(progress, n_epochs, where) as every:
        p, s, values, ends = _minibatch_jit(params, opt_state, data, key, args, **hooks, report_every=every)
        jax.block_until_ready(p)
    energies, extras, trace = result(s, values, ends)
    return _finish(where, p, energies, n_epochs, None, extras, trace, hint)


def _minibatch_static(value_and_grad, optimizer, n_epochs, batch_size, batch_keys, permutation, epoch_end):
    return dict(
        value_and_grad=Static(value_and_grad),
        optimizer=Static(optimizer),
        n_epochs=n_epochs,
        batch_size=batch_size,
        batch_keys=Static(batch_keys if batch_keys else None),
        permutation=Static(permutation),
        epoch_end=Static(epoch_end),
    )


def lower_minibatch(
    value_and_grad, params, data, *, key, optimizer, n_epochs, batch_size, args=None, opt_state=None,
    batch_keys=False, permutation=None, epoch_end=None,
):  # fmt: skip
    """The program :func:`minibatch` runs, lowered (``.compile().as_text()`` for a profile); no progress bar."""
    if opt_state is None:
        opt_state = optimizer.init(params)
    hooks = _minibatch_static(value_and_grad, optimizer, n_epochs, batch_size, batch_keys, permutation, epoch_end)
    return _minibatch_jit.lower(params, opt_state, data, key, args, **hooks, report_every=0)


# ---------------------------------------------------------------------------
# The fixed-steps driver
# ---------------------------------------------------------------------------


def _steps(params, opt_state, key, args, value_and_grad, optimizer, n_steps, setup, report_every):
    vg, opt = value_and_grad.value, optimizer.value
    if setup.value is not None:
        args = setup.value(args)

    def body(p, inp):
        i, k = inp
        _progress.tick(i, n_steps, report_every)
        return vg(p, k, args)

    if not report_every:
        xs = None if key is None else jax.random.split(key, n_steps)
        return scan(lambda p, k: vg(p, k, args), params, opt_state, opt, xs, length=n_steps)
    keys = None if key is None else jax.random.split(key, n_steps)
    return scan(body, params, opt_state, opt, (jnp.arange(n_steps), keys), length=n_steps)


_steps_jit = jax.jit(_steps, static_argnames=("value_and_grad", "optimizer", "n_steps", "setup", "report_every"))


def steps(
    where: str,
    value_and_grad: Callable,
    params,
    *,
    optimizer,
    n_steps: int,
    key=None,
    args=None,
    opt_state=None,
    setup: Callable | None = None,
    result: Callable,
    hint: str = "lower the optimizer's learning rate",
    progress: bool = False,
) -> core.FitResult:
    """``n_steps`` optax steps that are not epochs over rows: full-batch, or drawing their own sample.

    Step ``i`` calls ``value_and_grad(params, k_i, args) -> (value, grads)``, with ``k_i`` the
    ``i``-th of ``jax.random.split(key, n_steps)`` (``None`` without a ``key``: a full-batch fit
    has no randomness). ``setup(args) -> args`` runs once before the steps, inside the compiled
    program (what every step shares: sampling tables). ``result(opt_state, values) -> (energies,
    extras, steps)`` as for :func:`minibatch`; the hooks are static, compared by :func:`fingerprint`.
    """
    _used("steps")
    if opt_state is None:
        opt_state = optimizer.init(params)
    with _progress.bar(progress, n_steps, where) as every:
        (p, s), values = _steps_jit(
            params,
            opt_state,
            key,
            args,
            value_and_grad=Static(value_and_grad),
            optimizer=Static(optimizer),
            n_steps=n_steps,
            setup=Static(setup),
            report_every=every,
        )
        jax.block_until_ready(p)
    energies, extras, trace = result(s, values)
    return _finish(where, p, energies, n_steps, None, extras, trace, hint)


# ---------------------------------------------------------------------------
# The rounds driver
# ---------------------------------------------------------------------------


def _rounds(carry, key, args, round_, n_rounds, report_every):
    fn = round_.value

    def body(c, inp):
        i, k = inp
        _progress.tick(i, n_rounds, report_every)
        return fn(c, k, args)

    keys = None if key is None else jax.random.split(key, n_rounds)
    return jax.lax.scan(body, carry, (jnp.arange(n_rounds), keys))


_rounds_jit = jax.jit(_rounds, static_argnames=("round_", "n_rounds", "report_every"))


def rounds(
    where: str,
    round_: Callable,
    carry,
    *,
    n_rounds: int,
    key=None,
    args=None,
    result: Callable,
    hint: str,
    progress: bool = False,
) -> core.FitResult:
    """``n_rounds`` rounds of a fit whose step is more than one optax step on one loss.

    The fits whose round holds inner loops of its own, a pair of optimizers, or closed-form
    updates with no optimizer at all: ``gan`` (``n_discriminator_steps`` updates of the
    discriminator, then one of the generator), ``mixture_pc`` (inference on the latents, then
    ``n_learn_steps`` optimizer steps), ``slot_attention`` (CCCP slot updates, then a closed-form
    M-step). No restarts and no stopping rule: a fixed number of rounds, as :func:`steps`.

    Round ``i`` is ``carry, value = round_(carry, k_i, args)``, with ``k_i`` the ``i``-th of
    ``jax.random.split(key, n_rounds)`` (``None`` without a ``key``). ``carry`` is everything the
    rounds update (parameters, optimizer states, latents); ``args`` a pytree of arrays they read.
    ``result(carry, values) -> (params, energies, extras, steps)`` makes the
    :class:`~lse_energy.core.FitResult` (``steps`` the per-round trace whose first non-finite
    round a divergence names). ``round_`` is a static argument, compared by :func:`fingerprint`:
    a module-level function, or a ``functools.partial`` of one with the optimizers and settings.
    """
    _used("rounds")
    with _progress.bar(progress, n_rounds, where) as every:
        carry, values = _rounds_jit(carry, key, args, round_=Static(round_), n_rounds=n_rounds, report_every=every)
        jax.block_until_ready(carry)
    params, energies, extras, trace = result(carry, values)
    return _finish(where, params, energies, n_rounds, None, extras, trace, hint)


# ---------------------------------------------------------------------------
# The EM driver
# ---------------------------------------------------------------------------


def em_loop(params, e_step, m_step, data, args, n, max_iter: int, tol, dtype, report_every: int = 0, stop="change"):
    """EM until ``max_iter`` steps, the stopping rule, or a failed M-step (traced).

    The rule compares one step's decrease in energy, :math:`E_t - E_{t+1}`, with ``tol * n``:
    ``stop="change"`` stops when its size is below it (scikit-learn's rule, ``gmm``);
    ``stop="decrease"`` when the energy fell by at most that much, a rise included (``slds``).

    ``e_step(p, *data) -> (sum_i ln p(x_i | p), stats)``: one pass over the data gives the energy
    :math:`E_t = -\\sum_i \\ln p(x_i | p_t)` and what the M-step needs. ``m_step(stats, n, args) ->
    (params, bad)``, ``bad`` a boolean vector (a component whose parameters are invalid, e.g. a
    covariance that lost positive definiteness): a bad M-step stops the loop at the last good
    parameters, and ``failed`` records (iteration, first bad index), or (-1, -1).
    Returns ``(params, trace, n_iter, done, failed)``, ``trace`` ``(max_iter + 1,)`` padded with NaN.
    """
    ll0, R0 = e_step(params, *data)
    trace = jnp.full((max_iter + 1,), jnp.nan, dtype=dtype).at[0].set(-ll0)
    no_failure = jnp.array([-1, -1], dtype=jnp.int32)

    def cond(carry):
        i, _, _, _, done, failed = carry
        return (i < max_iter) & ~done & (failed[0] < 0)

    def body(carry):
        i, p_old, R, tr, _, _ = carry
        p, bad = m_step(R, n, args)
        failed = jnp.where(jnp.any(bad), jnp.stack([i + 1, jnp.argmax(bad)]).astype(jnp.int32), no_failure)
        ok = failed[0] < 0
        p = jax.tree.map(lambda new, old: jnp.where(ok, new, old), p, p_old)
        ll, R_new = e_step(p, *data)
        done = stops(tr[i] + ll, tol * n, stop)
        tr = jnp.where(ok, tr.at[i + 1].set(-ll), tr)
        _progress.tick(i, max_iter, report_every)
        return jnp.where(ok, i + 1, i), p, R_new, tr, done, failed

    n_iter, params, _, trace, done, failed = jax.lax.while_loop(cond, body, (0, params, R0, trace, False, no_failure))
    return params, trace, n_iter, done, failed


def stops(decrease, tol_n, stop: str = "change"):
    """The EM stopping rule on one step's decrease in energy :math:`E_t - E_{t+1}` (a scalar or a traced one).

    ``stop="change"``: its size is below ``tol_n`` (``tol`` times the number of points);
    ``stop="decrease"``: the energy fell by at most ``tol_n``, a rise included.
    """
    return abs(decrease) < tol_n if stop == "change" else decrease <= tol_n


def em_host(params, one_pass, m_step, n: int, max_iter: int, tol: float, progress: bool = False):
    """EM driven from Python, one pass over the data per iteration: ``(params, trace, converged)``.

    The loop of :func:`em_loop` for data read in chunks (``gmm.fit`` on data larger than memory),
    with the same stopping rule (:func:`stops`, ``"change"``). ``one_pass(p) -> (sum_i ln p(x_i),
    R)``; ``m_step(R, iteration) -> p`` (raising if the step failed); ``trace`` holds the energies
    before the first step and after each.
    """
    _used("em")
    with _progress.bar(progress, max_iter, "EM (streamed)") as every:
        ll, R = one_pass(params)
        trace, done = [-float(ll)], False
        while len(trace) <= max_iter and not done:
            p = m_step(R, len(trace))
            ll, R = one_pass(p)
            done = bool(stops(trace[-1] + float(ll), tol * n))
            trace.append(-float(ll))
            params = p
            _progress.tick(len(trace) - 2, max_iter, every)
    return params, trace, done


def _em_one(params, data, args, tol, e_step, m_step, n, max_iter, report_every, stop="change"):
    return em_loop(params, e_step.value, m_step.value, data, args, n, max_iter, tol, tol.dtype, report_every, stop)


def _em_many(starts, data, args, tol, e_step, m_step, n, max_iter, report_every, stop="change"):
    def one(p):
        return em_loop(p, e_step.value, m_step.value, data, args, n, max_iter, tol, tol.dtype, report_every, stop)

    return jax.vmap(one)(starts)


_STATIC_EM = ("e_step", "m_step", "n", "max_iter", "report_every", "stop")
_em_one_jit = jax.jit(_em_one, static_argnames=_STATIC_EM)
_em_many_jit = jax.jit(_em_many, static_argnames=_STATIC_EM)


def em_run(params, e_step, m_step, data, args, *, n: int, max_iter: int, tol, dtype, on_failure, progress=False):
    """EM from ``params`` (:func:`em_loop`, jitted), the :class:`~lse_energy.core.FitResult` of one run.

    ``on_failure(failed)`` raises for a failed M-step (``failed[0] >= 0``). ``e_step`` and ``m_step``
    are static arguments of the compiled loop (module-level functions, or partials of them).
    """
    _used("em")
    return _em_run(params, e_step, m_step, data, args, n, max_iter, tol, dtype, on_failure, progress)


def _em_run(
    params, e_step, m_step, data, args, n, max_iter, tol, dtype, on_failure, progress, stop="change", label="EM"
):
    with _progress.bar(progress, max_iter, label) as every:
        p, trace, n_iter, done, failed = _em_one_jit(
            params, tuple(data), args, jnp.asarray(tol, dtype), Static(e_step), Static(m_step), n, max_iter, every, stop
        )
        jax.block_until_ready(p)
    on_failure(failed)
    n_iter = int(n_iter)
    return core.FitResult(p, trace[: n_iter + 1], n_iter, bool(done))


def em(
    init: Callable,
    e_step: Callable,
    m_step: Callable,
    x,
    n_components: int,
    *,
    key,
    max_iter: int,
    tol: float,
    n_init: int = 1,
    data=None,
    args=None,
    n: int | None = None,
    stop: str = "change",
    on_failure: Callable,
    label: str = "EM",
    progress: bool = False,
) -> core.FitResult:
    """Fit by EM from ``n_init`` starts and keep the one with the lowest final energy.

    ``init(x, n_components, key, n_init)`` returns the starts stacked on a leading axis (its
    restart keys are ``key[None]`` for one start, else ``jax.random.split(key, n_init)``, as
    :func:`restart_keys` gives them). One start runs :func:`em_loop` alone; several run side by
    side (``vmap``, one compile), and a restart whose M-step failed is dropped (``on_failure``
    raises the first failure when every restart failed). ``e_step(p, *data)`` with ``data``
    (default ``(x,)``) and ``m_step(stats, n, args)`` as in :func:`em_loop`, with the stopping rule
    ``stop`` per point, ``n`` points (default: the rows of ``x``). A restart whose final energy is
    not finite is dropped as a failed one.

    Returns:
      :class:`~lse_energy.core.FitResult`: the best restart's parameters, its energy trace
      :math:`E_0, \\dots, E_T`, ``n_iter = T`` and ``converged`` (the ``tol`` rule stopped it).
    """
    _used("em")
    starts = init(x, n_components, key, n_init)
    data = (x,) if data is None else tuple(data)
    n = jax.tree.leaves(x)[0].shape[0] if n is None else n
    dtype = jax.tree.leaves(x)[0].dtype
    if n_init == 1:
        p0 = jax.tree.map(lambda a: a[0], starts)
        return _em_run(p0, e_step, m_step, data, args, n, max_iter, tol, dtype, on_failure, progress, stop, label)
    with _progress.bar(progress, max_iter, label) as every:
        params, trace, n_iter, done, failed = _em_many_jit(
            starts, data, args, jnp.asarray(tol, dtype), Static(e_step), Static(m_step), n, max_iter, every, stop
        )
        jax.block_until_ready(params)
    n_iter, failed = np.asarray(n_iter), np.asarray(failed)
    final = np.asarray(trace)[np.arange(n_iter.size), n_iter]
    ok = (failed[:, 0] < 0) & np.isfinite(final)
    if not ok.any():
        on_failure(failed[0])
    best = int(np.argmin(np.where(ok, final, np.inf)))
    t = int(n_iter[best])
    return core.FitResult(jax.tree.map(lambda a: a[best], params), trace[best, : t + 1], t, bool(done[best]))


def restart_keys(key, n_init: int):
    """The keys of ``n_init`` restarts: ``key[None]`` for one (the fit's own key), else ``split(key, n_init)``."""
    return key[None] if n_init == 1 else jax.random.split(key, n_init)
