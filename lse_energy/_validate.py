"""Argument checking: one rule per kind of argument, shared by every model module.

Every function takes the argument's *name* first, raises ``ValueError`` with a
message that names it, and returns the checked value (converted where the rule
says so). The rules:

* :func:`count`: a Python or NumPy integer (never ``bool``, never a float such
  as ``2.0``) at least ``low`` (and at most ``high``); returned as ``int``.
* :func:`positive`, :func:`nonnegative`: a finite real scalar ``> 0`` /
  ``>= 0``; returned as ``float`` (a traced value passes unchecked).
  ``allow_none=True`` also lets ``None`` through (for "pick a default" arguments).
* :func:`open_unit`: a number strictly between 0 and 1; :func:`real_pair`: a ``(low, high)`` pair
  of finite numbers.
* :func:`float_array`: an array of floating dtype with at least ``min_ndim``
  axes whose values, when concrete (not traced), are finite. Integer and boolean
  arrays are refused: the caller casts explicitly. Every array rule below builds
  on it: :func:`array` (exactly ``ndim`` axes), :func:`matrix` (``(n, cols)``),
  :func:`points` (non-empty ``(rows, d)``), :func:`qk` (queries and keys),
  :func:`bias` (an additive log-prior).
* :func:`seeds`: a non-empty 1-D sequence of integer seeds.
* :func:`choice`: one of a fixed set of strings.
* :func:`float_dtype`: a floating dtype (``None``: JAX's default floating dtype).
* :func:`last_axis`: a floating array of shape ``(..., n)``; :func:`orthonormal_columns`: a matrix
  whose columns are orthonormal to ``sqrt(eps)`` of its dtype.
* :func:`key`: one JAX PRNG key, typed (``jax.random.key``) or legacy
  ``uint32[2]`` (``jax.random.PRNGKey``); an integer seed or ``None`` is refused.
* :func:`params`: a model's ``Params`` NamedTuple, each array field checked
  against a symbolic shape (``{"W": "k d", "b": "k"}``): a symbol is one size
  wherever it appears, every size is at least 1, and the fields share one
  floating dtype.
* :func:`beta`, :func:`default_beta`: an inverse temperature (``None``: ``1/sqrt(d)``).
* :func:`time_steps`: integer diffusion steps in ``1..T``.
* :func:`optimizer`: anything with callable ``init`` and ``update`` (an optax
  ``GradientTransformation``).

It also holds :func:`is_concrete` (value checks run only on concrete inputs)
and :func:`require_finite` (every iterative driver calls it on what it
returns, so that a diverged run never comes back as NaN). This module is the
bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def is_concrete(*arrays) -> bool:
    """True when no argument is a tracer, i.e. all hold values (not inside jit/grad).

    Value checks (finiteness, positive-definiteness, ...) at the public
    boundary run only on concrete inputs; every model module uses this.
    """
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def all_finite(x) -> bool:
    """Whether every value of the concrete array ``x`` is finite.

    A JAX array on an accelerator is reduced where it lives, so that one flag,
    not the array, crosses to the host; anything else is checked with NumPy
    (a JAX array on the CPU shares its buffer with NumPy, which is faster there
    than dispatching a reduction).
    """
    if isinstance(x, jax.Array) and any(d.platform != "cpu" for d in x.devices()):
        return bool(jnp.all(jnp.isfinite(x)))
    return bool(np.all(np.isfinite(np.asarray(x))))


def _as_array(x) -> Array:
    """``x`` itself when it is a JAX array (or a tracer), else ``jnp.asarray(x)``.

    ``jnp.asarray`` of a JAX array returns an equal array but costs tens of microseconds, which a
    check made on every call of a small function pays thousands of times in a loop.
    """
    return x if isinstance(x, jax.Array) else jnp.asarray(x)


def float_array(name: str, x, min_ndim: int = 0) -> Array:
    """``x`` as an array with at least ``min_ndim`` axes, a floating dtype and finite values.

    Raises ``ValueError`` naming ``name``; finiteness is checked only when
    ``x`` is concrete.
    """
    x = _as_array(x)
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions; got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must have a floating dtype; got {x.dtype}")
    if is_concrete(x) and not all_finite(x):
        raise ValueError(f"{name} must be finite")
    return x


def require_finite(where: str, result, *, steps=None, hint: str = "") -> None:
    """Raise ``ValueError`` if any floating array in the pytree ``result`` is not finite.

    Every iterative driver (fits, trainers, experiment runs) calls this on what it
    is about to return, so that a run that diverged never comes back as NaN as if it
    had succeeded. ``steps`` is an optional array whose leading axis indexes the
    steps of the run (a trace): the message names the first step at which it is not
    finite. Nothing is checked on traced values (inside an outer ``jit``).

    Args:
      where: the function's name, first in the message.
      result: a pytree (NamedTuple, tuple, array ...); ``None`` leaves are skipped.
      steps: optional per-step trace, leading axis = step.
      hint: what to change, appended to the message.
    """
    leaves = [a for a in jax.tree_util.tree_leaves(result) if a is not None]
    if not is_concrete(*leaves, *(() if steps is None else (steps,))):
        return
    paths = jax.tree_util.tree_flatten_with_path(result)[0]
    bad = [
        "result" + jax.tree_util.keystr(path)
        for path, a in paths
        if a is not None and jnp.issubdtype(jnp.asarray(a).dtype, jnp.inexact) and not all_finite(a)
    ]
    if not bad:
        return
    where_step = ""
    if steps is not None:
        finite = np.all(np.isfinite(np.asarray(steps)).reshape(np.shape(steps)[0], -1), axis=1)
        if not np.all(finite):
            where_step = f", first at step {int(np.argmin(finite))}"
    raise ValueError(
        f"{where}: the run diverged: {', '.join(bad)} became non-finite{where_step}" + (f"; {hint}" if hint else "")
    )


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def count(name: str, value, low: int = 1, *, high: int | None = None, what: str = "") -> int:
    """An integer ``>= low`` (and ``<= high`` when given; ``what`` names ``high`` in the message, as
    ``"N"``); ``bool`` and floats such as ``2.0`` are refused."""
    if high is None:
        if not _is_int(value) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    elif not _is_int(value) or not low <= value <= high:
        bound = f"{what}={high}" if what else f"{high}"
        raise ValueError(f"{name} must be an integer in [{low}, {bound}]; got {value!r}")
    return int(value)


def seeds(values) -> np.ndarray:
    """A non-empty 1-D sequence of integer seeds, as a NumPy array."""
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"seeds must be a non-empty 1-D sequence of integers; got {values!r}")
    return arr


def simplex(name: str, w) -> None:
    """Concrete ``w`` (``(K,)``, finite) is strictly positive and sums to 1 within ``sqrt(eps)`` of its dtype."""
    if not is_concrete(w):
        return
    a = np.asarray(w, np.float64)
    if np.any(a <= 0):
        raise ValueError(f"{name} must be strictly positive (ln of each enters sim)")
    if abs(a.sum() - 1.0) > math.sqrt(float(jnp.finfo(jnp.asarray(w).dtype).eps)):
        raise ValueError(f"{name} must sum to 1; they sum to {a.sum():.12g}")


def spd_stack(name: str, s) -> None:
    """Concrete ``s`` (``(K, d, d)``, finite): each matrix symmetric (asymmetry at most ``sqrt(eps)`` of its
    largest entry) and positive definite (it has a Cholesky factor); the message names the first bad one."""
    if not is_concrete(s):
        return
    c = np.asarray(s, np.float64)
    tol = math.sqrt(float(jnp.finfo(jnp.asarray(s).dtype).eps))
    scale = np.maximum(np.abs(c).max(axis=(1, 2)), np.finfo(np.float64).tiny)
    asym = np.abs(c - np.swapaxes(c, 1, 2)).max(axis=(1, 2)) / scale
    if np.any(asym > tol):
        raise ValueError(f"{name}[{int(np.argmax(asym > tol))}] is not symmetric")
    for k in range(c.shape[0]):
        try:
            np.linalg.cholesky(c[k])
        except np.linalg.LinAlgError:
            raise ValueError(f"{name}[{k}] is not positive definite") from None


def orthonormal_columns(name: str, a, why: str = "") -> None:
    """Concrete ``a`` (``(n, m)``, finite) has ``n >= m`` and orthonormal columns: every entry of
    ``a.T @ a - I`` is at most ``sqrt(eps)`` of ``a``'s dtype (a float32 QR factor passes, as a float64 one)."""
    if not is_concrete(a):
        return
    c = np.asarray(a, np.float64)
    tol = math.sqrt(float(jnp.finfo(jnp.asarray(a).dtype).eps))
    if c.shape[0] < c.shape[1] or np.max(np.abs(c.T @ c - np.eye(c.shape[1])), initial=0.0) > tol:
        raise ValueError(f"{name} must have orthonormal columns" + (f" {why}" if why else ""))


def float_dtype(name: str, value):
    """A floating dtype, as JAX will use it: ``None`` is JAX's default floating dtype (float64 with x64 on,
    float32 without), and with x64 off a 64-bit request is its 32-bit type, without JAX's warning."""
    if value is None:
        return jnp.dtype(jnp.result_type(float))
    try:
        dtype = jnp.dtype(value)
    except TypeError:
        raise ValueError(f"{name} must be a floating dtype; got {value!r}") from None
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{name} must be a floating dtype; got {dtype}")
    return jax.dtypes.canonicalize_dtype(dtype)


def choice(name: str, value, options) -> str:
    """One of the strings ``options``."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value


def flag(name: str, value) -> bool:
    """A ``bool`` (NumPy's included); integers such as ``1`` are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool; got {value!r}")
    return bool(value)


def key(name: str, value):
    """One PRNG key: a typed key (``jax.random.key(0)``, shape ``()``) or a legacy raw key
    (``jax.random.PRNGKey(0)``, ``uint32`` of shape ``(2,)``); returned unchanged.

    An integer seed, ``None`` or any other array is refused with the package's message
    (``"key must be a JAX PRNG key, e.g. jax.random.key(0); got int"``) rather than JAX's
    "invalid PRNG key data" from deep inside a draw.
    """
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if isinstance(value, (jax.Array, np.ndarray)):
        if jnp.issubdtype(dtype, jax.dtypes.prng_key) and shape == ():
            return value
        if dtype == np.uint32 and shape == (2,):
            return value
        got = f"{dtype} array of shape {shape}"
    else:
        got = "None" if value is None else type(value).__name__
    raise ValueError(f"{name} must be a JAX PRNG key, e.g. jax.random.key(0); got {got}")


def _real_scalar(value) -> bool:
    if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
        return False
    try:
        return bool(np.isreal(value)) and bool(np.isfinite(value))
    except TypeError:
        return False


def positive(name: str, value, *, allow_none: bool = False):
    """A finite real scalar ``> 0`` (or ``None`` when ``allow_none``); a traced value passes unchecked."""
    if (value is None and allow_none) or not is_concrete(value):
        return value
    if not (_real_scalar(value) and value > 0):
        extra = " or None" if allow_none else ""
        raise ValueError(f"{name} must be a finite scalar > 0{extra}; got {value!r}")
    return float(value)


def nonnegative(name: str, value, *, below: float | None = None) -> float:
    """A finite real scalar ``>= 0`` (and ``< below`` when given); a traced value passes unchecked."""
    if not is_concrete(value):
        return value
    if below is None and not (_real_scalar(value) and value >= 0):
        raise ValueError(f"{name} must be a finite scalar >= 0; got {value!r}")
    if below is not None and not (_real_scalar(value) and 0 <= value < below):
        raise ValueError(f"{name} must be a finite scalar in [0, {below}); got {value!r}")
    return float(value)


def array(name: str, a, ndim: int) -> Array:
    """A floating array with exactly ``ndim`` axes, finite when concrete."""
    a = _as_array(a)
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions; got shape {a.shape}")
    return float_array(name, a)


def last_axis(name: str, a, n: int, symbol: str, ref: str = "") -> Array:
    """A floating array, finite when concrete, of shape ``(..., n)``; the message names ``n`` as ``symbol``
    (and ``ref``, where ``n`` comes from, as ``"params.W1.shape[1]"``)."""
    a = _as_array(a)
    if a.ndim < 1 or a.shape[-1] != n:
        where = f"{ref} = " if ref else ""
        raise ValueError(f"{name} must have shape (..., {symbol}) with {symbol} = {where}{n}; got {a.shape}")
    return float_array(name, a)


def matrix(name: str, a, cols: int, what: str) -> Array:
    """A floating, finite ``(n, cols)`` array with ``n >= 1``; ``what`` names ``cols`` in the message."""
    a = _as_array(a)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} must have shape (n, {what}) with n >= 1; got {a.shape}")
    if a.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns ({what}); got shape {a.shape}")
    return float_array(name, a)


def params(value, cls, shapes: dict, sizes: dict | None = None, *, name: str = "params") -> tuple:
    """``value``, an instance of the NamedTuple ``cls``, with its array fields checked against symbolic shapes.

    ``shapes`` maps a field to its axes, e.g. ``{"W": "k d", "b": "k", "c": "d"}``. Each such field
    must be a finite floating array (:func:`float_array`) of that rank; a symbol has one size wherever
    it appears, ``sizes`` may fix some in advance (e.g. ``{"d": x.shape[-1]}``), every size is at
    least 1, and all the fields have the dtype of the first. Fields not in ``shapes`` pass unchanged.
    Returns ``(value with those fields as arrays, sizes)``, ``sizes`` mapping every symbol to its size.
    """
    if not isinstance(value, cls):
        module = cls.__module__.rsplit(".", 1)[-1]
        raise ValueError(f"{name} must be {module}.{cls.__name__}; got {type(value).__name__}")
    sizes, out, first = dict(sizes or {}), {}, None
    for field, axes in shapes.items():
        axes, label = axes.split(), f"{name}.{field}"
        want = "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"
        a = jnp.asarray(getattr(value, field))
        if a.ndim != len(axes):
            raise ValueError(f"{label} must have shape {want}; got {a.shape}")
        for sym, n in zip(axes, a.shape):
            if n < 1 or sizes.setdefault(sym, n) != n:
                fixed = f"{sym} >= 1" if n < 1 else f"{sym} = {sizes[sym]}"
                raise ValueError(f"{label} must have shape {want} with {fixed}; got {a.shape}")
        out[field] = a = float_array(label, a)
        first = first or (label, a.dtype)
        if a.dtype != first[1]:
            raise ValueError(f"{label} must have the dtype of {first[0]} ({first[1]}); got {a.dtype}")
    return value._replace(**out), sizes


def optimizer(opt, name: str = "optimizer"):
    """An optax ``GradientTransformation`` (anything with callable ``init`` and ``update``)."""
    if not (callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None))):
        raise ValueError(f"{name} must be an optax GradientTransformation (with init and update)")
    return opt


_optimizer = optimizer


def trainer(optimizer, n_epochs, batch_size, n: int, rows: str = "N") -> tuple[int, int]:
    """A gradient trainer's schedule: an optax ``optimizer``, ``n_epochs >= 1`` and
    ``1 <= batch_size <= n`` (``rows`` names ``n`` in the message); returns the two counts."""
    _optimizer(optimizer)
    n_epochs, batch_size = count("n_epochs", n_epochs), count("batch_size", batch_size)
    if batch_size > n:
        raise ValueError(f"batch_size must be <= {rows} = {n}; got {batch_size}")
    return n_epochs, batch_size


def beta(value) -> None:
    """An inverse temperature: a finite real scalar ``> 0`` (checked when concrete)."""
    if is_concrete(value):
        b = np.asarray(value)
        if not (np.issubdtype(b.dtype, np.floating) or np.issubdtype(b.dtype, np.integer)):
            raise ValueError(f"beta must be a finite scalar > 0; got {value!r}")
        if b.ndim != 0 or not np.isfinite(b) or not b > 0:
            raise ValueError(f"beta must be a finite scalar > 0; got {value!r}")


def default_beta(value, d: int):
    r"""``value``, checked by :func:`beta`, or :math:`1/\sqrt{d}` when it is ``None``."""
    if value is None:
        return 1.0 / math.sqrt(d)
    beta(value)
    return value


def qk(q, k) -> tuple[Array, Array]:
    """Queries ``(..., N_Q, d)`` and keys ``(..., N_K, d)``: floating, finite, ``N_K >= 1``, one ``d``."""
    q = float_array("q", q, 2)
    k = float_array("k", k, 2)
    if k.shape[-2] < 1:
        raise ValueError(f"k must have at least one row (N_K >= 1 keys); got shape {k.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last (feature) dimension; got q{q.shape} and k{k.shape}")
    return q, k


def bias(value, shape) -> Array | None:
    """An optional additive log-prior, floating and finite, broadcastable to ``shape`` (``None`` passes)."""
    if value is None:
        return None
    value = float_array("bias", value, min_ndim=0)
    try:
        jnp.broadcast_shapes(value.shape, shape)
    except ValueError as err:
        raise ValueError(f"bias of shape {value.shape} does not broadcast to sim of shape {shape}") from err
    return value


def open_unit(name: str, value) -> float:
    """A real number strictly between 0 and 1 (a tail mass, a probability); ``bool`` is refused."""
    if not (_real_scalar(value) and is_concrete(value) and 0 < value < 1):
        raise ValueError(f"{name} must be a number in (0, 1); got {value!r}")
    return float(value)


def real_pair(name: str, value, *, strict: bool = True) -> tuple[float, float]:
    """A ``(low, high)`` tuple or list of two finite real numbers (not ``bool``) with ``low < high``
    (``low <= high`` when not ``strict``); returned as two floats."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(map(_real_scalar, value))
    if ok and is_concrete(*value):
        lo, hi = float(value[0]), float(value[1])
        if lo < hi or (lo == hi and not strict):
            return lo, hi
    relation = "low < high" if strict else "low <= high"
    raise ValueError(f"{name} must be a pair (low, high) of finite numbers with {relation}; got {value!r}")


def points(name: str, a, d=None, ref: str = "data") -> Array:
    """A floating, finite, non-empty ``(rows, d)`` array (with the ``d`` columns of ``ref`` when given)."""
    a = _as_array(a)
    if a.ndim != 2:
        raise ValueError(f"{name} must have shape (rows, d); got shape {a.shape}")
    a = float_array(name, a)
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty; got shape {a.shape}")
    if d is not None and a.shape[1] != d:
        raise ValueError(f"{name} has dimension d = {a.shape[1]} but {ref} have d = {d}")
    return a


def time_steps(t, n_steps: int, batch: int) -> Array:
    """Integer time step(s) ``t`` in ``1..n_steps``, a scalar or ``(batch,)``, broadcast to ``(batch,)``."""
    t = jnp.asarray(t)
    if not jnp.issubdtype(t.dtype, jnp.integer):
        raise ValueError(f"t must be an integer time step (or array of them); got dtype {t.dtype}")
    if t.ndim > 1 or (t.ndim == 1 and t.shape[0] != batch):
        raise ValueError(f"t must be a scalar or have shape ({batch},); got shape {t.shape}")
    if is_concrete(t):
        tv = np.asarray(t)
        if np.any(tv < 1) or np.any(tv > n_steps):
            raise ValueError(f"t must lie in 1..T = 1..{n_steps}; got {tv.min()}..{tv.max()}")
    return jnp.broadcast_to(t, (batch,))


def weight_rows(name: str, w) -> np.ndarray:
    """``w`` is a 2-D array of softmax weights: nonnegative (a weight may underflow to 0), each row summing to 1."""
    a = np.asarray(w, np.float64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D (children, parents), got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be finite and nonnegative")
    bad = np.abs(a.sum(axis=1) - 1.0) > 1e-3
    if np.any(bad):
        raise ValueError(
            f"each row of {name} must sum to 1; row {int(np.argmax(bad))} sums to {a.sum(axis=1)[bad][0]:.6g}"
        )
    return a
