r"""Leaky integrate-and-fire (LIF) neurons: Euler simulation and the closed-form rate curve.

This module implements the LIF neuron that §28 of the lecture notes ("Dynamics")
builds its recurrent populations from, in the normalised form of Eliasmith and
Anderson (2003): with membrane time constant :math:`\tau_{RC}`, input current :math:`J`
and threshold :math:`J_{th}`,

.. math:: \tau_{RC}\,\dot v = J - v, \qquad v \ge J_{th} \Rightarrow \text{spike},\ v \leftarrow 0,

after which :math:`v` is held at 0 for the refractory period :math:`\tau_{ref}`. For a
constant :math:`J > J_{th}` the voltage from rest is :math:`v(t) = J(1 - e^{-t/\tau_{RC}})`,
so the threshold is reached after :math:`t^* = -\tau_{RC}\ln(1 - J_{th}/J)` and the rate is

.. math:: G(J) = \frac{1}{\tau_{ref} - \tau_{RC}\ln(1 - J_{th}/J)} \quad (J > J_{th}),
          \qquad G(J) = 0 \quad (J \le J_{th})

(:func:`rate`). The population module takes :func:`rate` as its nonlinearity.

:func:`simulate` runs explicit Euler with step :math:`\Delta t` and the refractory period
rounded to :math:`n_{ref} = \mathrm{round}(\tau_{ref}/\Delta t)` steps. Its inter-spike
interval is exactly :math:`(n_{ref} + k_E)\Delta t` with
:math:`k_E = \lceil \ln(1 - J_{th}/J) / \ln(1 - \Delta t/\tau_{RC}) \rceil` Euler steps from
rest to threshold (:func:`euler_rate`), which is within
:math:`\max(\Delta t,\ t^*h/(2(1-h)))`, :math:`h = \Delta t/\tau_{RC}`, of the exact
interval. There is no log-sum-exp anywhere in this module.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lse_energy import _validate

Array = jax.Array

__all__ = ["Run", "euler_rate", "rate", "simulate"]


class Run(NamedTuple):
    r"""The result of :func:`simulate`.

    Attributes:
      voltages: ``(n_steps, N)`` membrane voltage after each step (0 during the refractory period).
      spikes: ``(n_steps, N)`` 1.0 where a neuron spiked in that step, else 0.0.
      rates: ``(N,)`` spike count divided by the duration ``n_steps * dt``.
    """

    voltages: Array
    spikes: Array
    rates: Array


def _constants(tau_rc, tau_ref, threshold):
    return (
        _validate.positive("tau_rc", tau_rc),
        _validate.nonnegative("tau_ref", tau_ref),
        _validate.positive("threshold", threshold),
    )


def rate(currents, *, tau_rc: float = 0.02, tau_ref: float = 0.002, threshold: float = 1.0) -> Array:
    r"""The closed-form LIF rate :math:`1/(\tau_{ref} - \tau_{RC}\ln(1 - J_{th}/J))`, 0 for :math:`J \le J_{th}`.

    Elementwise; differentiable (its derivative is 0 below threshold).

    Args:
      currents: any-shape array of input currents :math:`J`.
      tau_rc: membrane time constant in seconds.
      tau_ref: refractory period in seconds.
      threshold: threshold current :math:`J_{th}`.

    Returns:
      the rates in Hz, the shape and dtype of ``currents``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import lif
      >>> [
      ...     round(r, 2) for r in lif.rate(jnp.array([0.5, 1.0, 2.0])).tolist()
      ... ]  # 1 / (2 ms + 20 ms ln 2)
      [0.0, 0.0, 63.04]
    """
    j = _validate.float_array("currents", currents)
    tau_rc, tau_ref, threshold = _constants(tau_rc, tau_ref, threshold)
    above = j > threshold
    j_safe = jnp.where(above, j, 2 * threshold)
    r = 1.0 / (tau_ref - tau_rc * jnp.log1p(-threshold / j_safe))
    return jnp.where(above, r, 0.0).astype(j.dtype)


def _steps(tau_rc, tau_ref, dt):
    dt = _validate.positive("dt", dt)
    if dt >= tau_rc:
        raise ValueError(f"dt must be smaller than tau_rc (explicit Euler); got dt={dt}, tau_rc={tau_rc}")
    return dt, round(tau_ref / dt)


def euler_rate(currents, *, dt: float, tau_rc: float = 0.02, tau_ref: float = 0.002, threshold: float = 1.0) -> Array:
    r"""The exact steady rate of :func:`simulate`: :math:`1/((n_{ref} + k_E)\Delta t)`, 0 at or below threshold.

    :math:`k_E = \lceil \ln(1 - J_{th}/J)/\ln(1 - \Delta t/\tau_{RC})\rceil` is the number of
    Euler steps :math:`v_{k+1} = v_k + h(J - v_k)` from :math:`v_0 = 0` to :math:`v_k \ge J_{th}`,
    since :math:`v_k = J(1 - (1-h)^k)`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import lif
      >>> r = lif.euler_rate(jnp.array([0.5, 2.0]), dt=1e-3)
      >>> float(r[0]), bool(r[1] > 0)  # silent below threshold
      (0.0, True)
    """
    j = _validate.float_array("currents", currents)
    tau_rc, tau_ref, threshold = _constants(tau_rc, tau_ref, threshold)
    dt, n_ref = _steps(tau_rc, tau_ref, dt)
    above = j > threshold
    j_safe = jnp.where(above, j, 2 * threshold)
    k = jnp.ceil(jnp.log1p(-threshold / j_safe) / math.log1p(-dt / tau_rc))
    return jnp.where(above, 1.0 / ((n_ref + k) * dt), 0.0).astype(j.dtype)


@partial(jax.jit, static_argnames=("n_steps", "n_ref"))
def _simulate(j, h, threshold, n_steps, n_ref):
    def step(carry, _):
        v, ref = carry
        resting = ref > 0
        v_new = jnp.where(resting, 0.0, v + h * (j - v))
        spike = jnp.logical_and(~resting, v_new >= threshold)
        v_new = jnp.where(spike, 0.0, v_new)
        ref = jnp.where(spike, n_ref, jnp.where(resting, ref - 1, 0))
        return (v_new, ref), (v_new, spike.astype(j.dtype))

    init = (jnp.zeros_like(j), jnp.zeros(j.shape, jnp.int32))
    _, (vs, spikes) = jax.lax.scan(step, init, None, length=n_steps)
    return vs, spikes


def simulate(
    currents, *, dt: float, n_steps: int, tau_rc: float = 0.02, tau_ref: float = 0.002, threshold: float = 1.0
) -> Run:
    r"""Euler simulation of ``N`` LIF neurons with constant input currents, from rest (§28).

    Each step: a neuron in its refractory period stays at 0 and counts down; otherwise
    :math:`v \leftarrow v + (\Delta t/\tau_{RC})(J - v)`, and if :math:`v \ge J_{th}` it
    spikes, resets to 0 and starts :math:`n_{ref} = \mathrm{round}(\tau_{ref}/\Delta t)`
    refractory steps. A jitted ``lax.scan``.

    Args:
      currents: ``(N,)`` constant input currents.
      dt: time step in seconds, smaller than ``tau_rc``.
      n_steps: number of steps.
      tau_rc: membrane time constant in seconds.
      tau_ref: refractory period in seconds.
      threshold: threshold current :math:`J_{th}`.

    Returns:
      a :class:`Run`; raises ``ValueError`` if the run became non-finite.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import lif
      >>> run = lif.simulate(jnp.array([0.5, 2.0]), dt=1e-3, n_steps=100)
      >>> run.spikes.shape, float(run.rates[0]), bool(run.rates[1] > 0)
      ((100, 2), 0.0, True)
    """
    j = _validate.array("currents", currents, 1)
    tau_rc, tau_ref, threshold = _constants(tau_rc, tau_ref, threshold)
    dt, n_ref = _steps(tau_rc, tau_ref, dt)
    n_steps = _validate.count("n_steps", n_steps)
    vs, spikes = _simulate(j, jnp.asarray(dt / tau_rc, j.dtype), jnp.asarray(threshold, j.dtype), n_steps, n_ref)
    out = Run(vs, spikes, (jnp.sum(spikes, axis=0) / (n_steps * dt)).astype(j.dtype))
    _validate.require_finite("lif.simulate", out, steps=vs, hint="reduce the currents")
    return out
