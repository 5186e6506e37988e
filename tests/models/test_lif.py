"""Tests of lse_energy.lif: the closed-form rate, the exact Euler rate and the jitted simulation.

Oracles: the rate curve written out in NumPy, the first-passage time of the exact voltage
solved by scipy (brentq), and the Euler recursion iterated in plain Python.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from lse_energy import lif

TAU_RC, TAU_REF = 0.02, 0.002


def np_rate(j):
    j = np.asarray(j, float)
    out = np.zeros_like(j)
    above = j > 1
    out[above] = 1 / (TAU_REF - TAU_RC * np.log(1 - 1 / j[above]))
    return out


def test_rate_matches_numpy_and_first_passage():
    j = np.linspace(0.0, 20.0, 401)
    np.testing.assert_allclose(lif.rate(jnp.asarray(j)), np_rate(j), rtol=1e-13, atol=0)
    for jj in [1.01, 1.5, 3.0, 10.0]:
        # time for v(t) = J (1 - exp(-t / tau_rc)) to reach 1, found numerically
        t_star = brentq(lambda t, jj=jj: jj * (1 - math.exp(-t / TAU_RC)) - 1, 0, 10, xtol=1e-15)
        assert abs(float(lif.rate(jnp.asarray([jj]))[0]) - 1 / (TAU_REF + t_star)) < 1e-9 / (TAU_REF + t_star)


def test_rate_is_zero_at_and_below_threshold_and_keeps_dtype():
    j = jnp.asarray([-3.0, 0.0, 0.5, 1.0], jnp.float32)
    r = lif.rate(j)
    assert r.dtype == jnp.float32 and np.all(np.asarray(r) == 0)


@pytest.mark.parametrize("dt", [1e-4, 5e-5, 2e-5])
def test_euler_rate_matches_python_recursion(dt):
    n_ref = round(TAU_REF / dt)
    h = dt / TAU_RC
    for j in [1.05, 1.7, 4.0, 12.0]:
        v, k = 0.0, 0
        while v < 1.0:
            v += h * (j - v)
            k += 1
        expected = 1 / ((n_ref + k) * dt)
        assert abs(float(lif.euler_rate(jnp.asarray(j), dt=dt)) - expected) < 1e-9 * expected


@pytest.mark.parametrize("dt", [1e-4, 5e-5])
def test_simulated_rate_within_dt_bound_of_closed_form(dt):
    """|r_sim - r| <= 1/T (spike count in a window) + r r_E max(dt, t* h / (2(1-h)))."""
    n_steps = round(1.0 / dt)
    duration = n_steps * dt
    j = jnp.linspace(0.5, 12.0, 47)
    run = lif.simulate(j, dt=dt, n_steps=n_steps)
    r, r_e = np.asarray(lif.rate(j)), np.asarray(lif.euler_rate(j, dt=dt))
    h = dt / TAU_RC
    t_star = np.where(np.asarray(j) > 1, -TAU_RC * np.log1p(-1 / np.maximum(np.asarray(j), 1 + 1e-12)), 0)
    # the spike count over the window differs from duration * r_E by less than one spike
    assert np.all(np.abs(np.asarray(run.rates) - r_e) <= 1 / duration + 1e-9)
    bound = r * r_e * np.maximum(dt, t_star * h / (2 * (1 - h)))
    assert np.all(np.abs(r_e - r) <= bound + 1e-9)
    assert np.all(np.abs(np.asarray(run.rates) - r) <= bound + 1 / duration + 1e-9)
    assert np.all(np.asarray(run.rates)[np.asarray(j) <= 1] == 0)


def test_first_spike_step_and_refractory_period():
    dt = 1e-4
    run = lif.simulate(jnp.asarray([3.0]), dt=dt, n_steps=400)
    spikes = np.flatnonzero(np.asarray(run.spikes[:, 0]))
    k = math.ceil(math.log(1 - 1 / 3.0) / math.log(1 - dt / TAU_RC))
    assert spikes[0] == k - 1
    assert np.all(np.diff(spikes) == k + round(TAU_REF / dt))
    v = np.asarray(run.voltages[:, 0])
    assert np.all(v[spikes[0] : spikes[0] + round(TAU_REF / dt) + 1] == 0)


def test_simulate_float32_and_validation():
    run = lif.simulate(jnp.asarray([2.0, 0.5], jnp.float32), dt=1e-4, n_steps=100)
    assert run.rates.dtype == jnp.float32 and run.voltages.dtype == jnp.float32
