"""The fit drivers, for a model of your own.

Every ``fit`` of the package is a short call to one of three loops (``lse_energy._descent``
holds them); this module is their public face, so that a model the package does not have can
be trained the same way, as the appendix "Your own model" does:

* :func:`descend`: minibatch gradient descent on an energy you write, ``energy(params, batch)``;
  the driver owns the shuffle, the minibatches, the compiled scan, the progress bar and the
  :class:`~lse_energy.core.FitResult` (:func:`minibatch` is the same loop with every hook open);
* :func:`em`: EM from ``n_init`` starts, given your ``init``, ``e_step`` and ``m_step``; the
  driver owns the restarts, the stopping rule and the energy trace;
* :func:`steps`: a fixed number of optimizer steps that are not epochs over rows.

A driver compiles once per configuration: your functions and the optimizer are compared by
their code and settings (:func:`fingerprint`), not by identity, so a second call with a fresh
``optax.adam(1e-3)`` and data of the same shape reuses the compiled program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from lse_energy import _descent, _validate, core
from lse_energy._descent import Static, fingerprint, minibatch, restart_keys, steps

__all__ = ["descend", "em", "minibatch", "steps", "restart_keys", "fingerprint", "Static"]


def _mean_energy_value_and_grad(energy, params, batch, args):
    n = jax.tree.leaves(batch)[0].shape[0]
    return jax.value_and_grad(lambda p: energy(p, batch) / n)(params)


def _epoch_means(opt_state, values, ends):
    per_epoch = jnp.mean(values, axis=1)
    return per_epoch, {}, per_epoch


def descend(
    energy: Callable,
    params,
    x,
    *,
    key,
    optimizer,
    n_epochs: int,
    batch_size: int,
    progress: bool = False,
) -> core.FitResult:
    """Minimise ``energy(params, batch)`` by minibatch descent with an optax ``optimizer``.

    Each of ``n_epochs`` epochs shuffles the rows of ``x`` with its own key and takes one
    optimizer step per minibatch of ``batch_size`` rows (a last partial batch is dropped), on
    the energy per row of the minibatch.

    Args:
      energy: ``(params, batch) -> scalar``, the summed energy of the rows of ``batch``
        (for a log-sum-exp model, ``core.energy(sim(batch, params))``). Write it as a
        module-level function or a closure over settings: it is compared by its code and
        closure, so an equal function does not compile again.
      params: the start, a pytree of arrays.
      x: ``(N, ...)`` data, or a pytree of arrays with ``N`` rows.
      key: a ``jax.random.key``: the epochs' shuffles.
      optimizer: an ``optax.GradientTransformation``.
      n_epochs, batch_size: passes over the data, rows per step (``batch_size <= N``).
      progress: show a progress bar over the epochs.

    Returns:
      :class:`~lse_energy.core.FitResult`: the parameters after the last epoch, and the mean
      energy per row over each epoch's minibatches as ``energies``.

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from lse_energy import core, drivers
      >>> x = jax.random.normal(jax.random.key(0), (64, 2))
      >>> def energy(mu, batch):  # two parents, children pulled to the nearest
      ...     return core.energy(-0.5 * jnp.sum((batch[:, None] - mu[None]) ** 2, -1))
      >>> fit = drivers.descend(
      ...     energy,
      ...     jnp.array([[-1.0, 0.0], [1.0, 0.0]]),
      ...     x,
      ...     key=jax.random.key(1),
      ...     optimizer=optax.adam(0.05),
      ...     n_epochs=20,
      ...     batch_size=16,
      ... )
      >>> fit.energies.shape, bool(fit.energies[-1] < fit.energies[0])
      ((20,), True)
    """
    key = _validate.key("key", key)
    n = jax.tree.leaves(x)[0].shape[0]
    n_epochs, batch_size = _validate.trainer(optimizer, n_epochs, batch_size, n)
    if not callable(energy):
        raise TypeError(f"energy must be a function (params, batch) -> scalar, got {type(energy).__name__}")
    return minibatch(
        "drivers.descend",
        functools.partial(_mean_energy_value_and_grad, energy),
        params,
        x,
        key=key,
        optimizer=optimizer,
        n_epochs=n_epochs,
        batch_size=batch_size,
        result=_epoch_means,
        progress=progress,
    )


def _raise_failed(failed) -> None:
    if int(failed[0]) >= 0:
        raise ValueError(
            f"the M-step failed at EM step {int(failed[0])}: component {int(failed[1])} got invalid "
            "parameters (m_step flagged it bad); try more starts (n_init) or another key"
        )


def em(
    init: Callable,
    e_step: Callable,
    m_step: Callable,
    x,
    n_components: int,
    *,
    key,
    max_iter: int = 100,
    tol: float = 1e-6,
    n_init: int = 1,
    progress: bool = False,
) -> core.FitResult:
    """Fit by EM from ``n_init`` starts and keep the one with the lowest final energy.

    Args:
      init: ``(x, n_components, key, n_init) -> params`` stacked on a leading axis of
        ``n_init`` starts (:func:`restart_keys` gives the keys the package's own fits use).
      e_step: ``(params, x) -> (log_likelihood, stats)``: the summed log-likelihood
        :math:`-E` at ``params`` and the sufficient statistics the M-step needs
        (for a log-sum-exp model, computed from ``core.weights(sim)``).
      m_step: ``(stats, n, args) -> (params, bad)``: the parameters that minimise the
        energy with the weights held fixed, and a boolean vector flagging invalid
        components (``args`` is ``None``).
      x: ``(N, ...)`` data.
      n_components: the number of parents ``K``.
      key: a ``jax.random.key`` for the starts.
      max_iter: at most this many EM steps per start.
      tol: stop when the energy per point changes by less than ``tol``.
      n_init: starts run side by side (one compiled program); the lowest final energy wins.
      progress: show a progress bar over the steps.

    Returns:
      :class:`~lse_energy.core.FitResult`: the best start's parameters, its energy trace
      :math:`E_0, \\dots, E_T`, ``n_iter = T`` and ``converged``. Raises ``ValueError`` when
      every start's M-step failed.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import core, drivers
      >>> x = jnp.array([[-2.0], [-1.8], [2.0], [2.2]])
      >>> def init(x, k, key, n_init):  # the first and last rows as the means
      ...     return jnp.stack([x[jnp.array([0, -1])]] * n_init)
      >>> def e_step(mu, x):  # -E (up to a constant) and the weights
      ...     sim = -0.5 * jnp.sum((x[:, None] - mu[None]) ** 2, -1)
      ...     return -core.energy(sim), (core.weights(sim), x)
      >>> def m_step(stats, n, args):  # weighted means; no component is invalid
      ...     w, x = stats
      ...     return (w.T @ x) / w.sum(0)[:, None], jnp.zeros(2, bool)
      >>> fit = drivers.em(
      ...     init, e_step, m_step, x, 2, key=jax.random.key(0), max_iter=5
      ... )
      >>> bool(jnp.allclose(fit.params, jnp.array([[-1.9], [2.1]]), atol=0.01))
      True
    """
    key = _validate.key("key", key)
    n_components = _validate.count("n_components", n_components)
    max_iter = _validate.count("max_iter", max_iter)
    n_init = _validate.count("n_init", n_init)
    tol = _validate.positive("tol", tol)
    for name, fn in (("init", init), ("e_step", e_step), ("m_step", m_step)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
    return _descent.em(
        init,
        e_step,
        m_step,
        x,
        n_components,
        key=key,
        max_iter=max_iter,
        tol=tol,
        n_init=n_init,
        on_failure=_raise_failed,
        progress=progress,
    )
