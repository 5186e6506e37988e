"""Argument checking: one rule per kind of argument, shared by every model module.

Every function takes the argument's *name* first, raises ``ValueError`` with a
message that names it, and returns the checked value (converted where the rule
says so). The rules:

* :func:`count`: a Python or NumPy integer (never ``bool``, never a float such
  as ``2.0``) at least ``low``; returned as ``int``.
* :func:`positive`, :func:`nonnegative`: a finite real scalar ``> 0`` /
  ``>= 0``; returned as ``float``. ``allow_none=True`` also lets ``None``
  through (for "pick a default" arguments).
* :func:`floating`: an array of floating dtype whose values, when concrete
  (not traced), are finite. Integer and boolean arrays are refused: the
  caller casts explicitly.
* :func:`matrix`: a floating, finite ``(n, cols)`` array with ``n >= 1``.
* :func:`flag`: a Python or NumPy ``bool``.
* :func:`optimizer`: anything with callable ``init`` and ``update`` (an optax
  ``GradientTransformation``).

This module sits at the bottom of the package with :mod:`lse_energy.core`: it
imports nothing from the models.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy.core import is_concrete

Array = jax.Array


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def count(name: str, value, low: int = 1) -> int:
    """An integer ``>= low`` (``bool`` and floats such as ``2.0`` are refused)."""
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


def _real_scalar(value) -> bool:
    if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
        return False
    try:
        return bool(np.isreal(value)) and bool(np.isfinite(value))
    except TypeError:
        return False


def positive(name: str, value, *, allow_none: bool = False):
    """A finite real scalar ``> 0`` (or ``None`` when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if not (_real_scalar(value) and value > 0):
        extra = " or None" if allow_none else ""
        raise ValueError(f"{name} must be a finite scalar > 0{extra}; got {value!r}")
    return float(value)


def nonnegative(name: str, value) -> float:
    """A finite real scalar ``>= 0``."""
    if not (_real_scalar(value) and value >= 0):
        raise ValueError(f"{name} must be a finite scalar >= 0; got {value!r}")
    return float(value)


def floating(name: str, a) -> Array:
    """A floating-point array, finite when concrete."""
    a = jnp.asarray(a)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        raise ValueError(f"{name} must be floating point; got {a.dtype}")
    if is_concrete(a) and not bool(np.all(np.isfinite(np.asarray(a)))):
        raise ValueError(f"{name} must be finite")
    return a


def matrix(name: str, a, cols: int, what: str) -> Array:
    """A floating, finite ``(n, cols)`` array with ``n >= 1``; ``what`` names ``cols`` in the message."""
    a = jnp.asarray(a)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} must have shape (n, {what}) with n >= 1; got {a.shape}")
    if a.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns ({what}); got shape {a.shape}")
    return floating(name, a)


def flag(name: str, value) -> bool:
    """A ``bool``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool; got {value!r}")
    return bool(value)


def optimizer(opt):
    """An optax ``GradientTransformation`` (anything with callable ``init`` and ``update``)."""
    if not (callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None))):
        raise ValueError("optimizer must be an optax GradientTransformation (with init and update)")
    return opt
