"""Every gradient trainer compiles once per configuration, not once per optimizer object.

The drivers of ``lse_energy._descent`` pass the optimizer (or, for ``rounds``, the round holding it) to
``jax.jit`` as a ``_descent.Static``, compared by ``_descent.fingerprint``: a second call with a
fresh but equal optimizer (same constructor, same hyperparameters) and the same shapes traces
nothing. Counted with ``jax.monitoring``: every new program is traced (``jaxpr_trace_duration``).
Control cases: another learning rate is another program; an optimizer that cannot be
fingerprinted (a closure over an object with state) is compared by identity, so it never shares
a program with another object, whatever their state.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import _descent

_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_counting: list[list[str]] = []


def _listener(event, duration, **kwargs):
    for found in _counting:
        found.append(event)


jax.monitoring.register_event_duration_secs_listener(_listener)


@contextlib.contextmanager
def traces():
    """Count the programs traced (jit cache misses, eager ones included) inside the block."""
    found: list[str] = []
    _counting.append(found)
    counted = []
    try:
        yield counted
    finally:
        _counting.remove(found)
        counted.append(sum(e == _TRACE_EVENT for e in found))


def _trainers():
    """Every fit that takes an optax optimizer, as ``name -> call(optimizer)`` on a small problem."""
    from lse_energy import adversarial, autoencoder, diffusion, embedding, gan, gru, mixture_pc, pcn, rbm, vae
    from lse_energy.experiments import diffusion_mlp

    rng = np.random.default_rng(0)
    key = jax.random.key(0)
    x = jnp.asarray(rng.normal(size=(12, 2)))
    binary = jnp.asarray((rng.random((8, 3)) < 0.5).astype(float))
    labels = jnp.asarray(np.arange(12) % 2)
    seqs = jnp.asarray(rng.normal(size=(6, 4, 2)))
    counts = jnp.asarray(rng.integers(1, 4, size=(4, 4)).astype(float))
    unit = jnp.asarray(rng.random((12, 2)))
    p = {
        "vae": vae.init_params(2, 1, 3, key=key),
        "adversarial": adversarial.init_params(2, 3, 2, key=key),
        "pcn": pcn.init_params((2, 3, 2), key=key),
        "gru": gru.init_params(2, 3, 2, key=key),
        "rbm": rbm.init_params(3, 2, key=key, scale=0.5),
        "autoencoder": autoencoder.init_params(2, 1, key=key),
        "embedding": embedding.init_params(4, 2, key=key),
        "gan": gan.init_params(2, 2, key=key, generator_hidden=(3,), discriminator_hidden=(3,)),
        "mixture_pc": mixture_pc.init_params(1, 3, 2, key=key),
        "diffusion_mlp": diffusion_mlp.init_params(2, key=key, hidden=(4,), n_freqs=2),
    }
    schedule = diffusion.linear_schedule(8)
    return {
        "vae.fit": lambda o: vae.fit(p["vae"], unit, key=key, optimizer=o, n_epochs=2, batch_size=4),
        "adversarial.fit": lambda o: adversarial.fit(
            p["adversarial"], x, labels, key=key, optimizer=o, n_epochs=2, batch_size=4, trades_weight=1.0
        ),
        "pcn.fit": lambda o: pcn.fit(p["pcn"], x, x, key=key, optimizer=o, n_epochs=2, batch_size=4, n_infer_steps=2),
        "gru.fit": lambda o: gru.fit(p["gru"], seqs, labels[:6], key=key, optimizer=o, n_epochs=2, batch_size=3),
        "rbm.fit": lambda o: rbm.fit(p["rbm"], binary, key=key, optimizer=o, n_epochs=2, batch_size=4),
        "autoencoder.fit": lambda o: autoencoder.fit(p["autoencoder"], x, optimizer=o, n_steps=3),
        "embedding.fit": lambda o: embedding.fit(p["embedding"], counts, optimizer=o, n_steps=3),
        "diffusion_mlp.fit": lambda o: diffusion_mlp.fit(
            p["diffusion_mlp"], x, schedule, o, key=key, n_steps=3, batch_size=4
        ),
        "gan.fit": lambda o: gan.fit(p["gan"], x, key=key, d_optimizer=o, g_optimizer=o, n_steps=3, batch_size=4),
        "mixture_pc.fit": lambda o: mixture_pc.fit(
            p["mixture_pc"], x, jnp.zeros((2, 1)), optimizer=o, n_steps=2, n_infer_steps=2, n_learn_steps=2
        ),
    }


TRAINERS = sorted(_trainers())


def _run(call, optimizer):
    return jax.block_until_ready(call(optimizer))


@pytest.mark.parametrize("name", TRAINERS)
def test_a_fresh_equal_optimizer_compiles_nothing(name):
    call = _trainers()[name]
    _run(call, optax.adam(1e-3))  # the first call compiles
    with traces() as n:
        _run(call, optax.adam(1e-3))  # a new object, the same constructor and hyperparameters
    assert n == [0], f"{name}: a fresh optax.adam(1e-3) traced {n[0]} programs"


@pytest.mark.parametrize("name", TRAINERS)
def test_another_learning_rate_is_another_program(name):
    # Control: the check can fail, and the key is not too coarse (adam(2e-3) must not reuse adam(1e-3)'s program).
    call = _trainers()[name]
    _run(call, optax.adam(1e-3))
    with traces() as n:
        _run(call, optax.adam(2e-3))
    assert n[0] > 0


class _Rate:
    """A learning rate held by an object with state: ``fingerprint`` cannot read it, so it compares by identity."""

    def __init__(self, value):
        self.value = value


def _sgd_with(rate: _Rate) -> optax.GradientTransformation:
    def init(params):
        return optax.EmptyState()

    def update(grads, state, params=None):
        return jax.tree.map(lambda g: -rate.value * g, grads), state

    return optax.GradientTransformation(init, update)


def test_an_unreadable_closure_falls_back_to_identity():
    a, b = _Rate(0.1), _Rate(0.1)
    assert _descent.fingerprint(_sgd_with(a)) == _descent.fingerprint(_sgd_with(a))  # the same object inside
    assert _descent.fingerprint(_sgd_with(a)) != _descent.fingerprint(_sgd_with(b))  # equal state, another object
    call = _trainers()["autoencoder.fit"]
    first = _run(call, _sgd_with(a))
    with traces() as n:
        again = _run(call, _sgd_with(a))
    assert n == [0]
    np.testing.assert_array_equal(again.energies, first.energies)
    # Another object is another program, so a changed state is never served a stale one.
    c = _Rate(0.3)
    with traces() as n:
        other = _run(call, _sgd_with(c))
    assert n[0] > 0
    assert not np.array_equal(other.energies, first.energies)


def test_fingerprints_compare_structure():
    fp = _descent.fingerprint
    chain = lambda lr: optax.chain(optax.clip(1.0), optax.adamw(optax.cosine_decay_schedule(lr, 100)))  # noqa: E731
    assert fp(chain(1e-3)) == fp(chain(1e-3)) and fp(chain(1e-3)) != fp(chain(2e-3))
    assert fp(optax.adam(1e-3)) != fp(optax.adam(1e-3, b1=0.8))
    assert fp(optax.adam(1e-3)) != fp(optax.sgd(1e-3))
    assert fp(optax.sgd(jnp.asarray(0.1))) == fp(optax.sgd(jnp.asarray(0.1)))
    assert fp(optax.sgd(jnp.asarray(0.1))) != fp(optax.sgd(jnp.asarray(0.2)))
    assert fp(optax.sgd(jnp.asarray(0.1, jnp.float32))) != fp(optax.sgd(np.float64(0.1)))
    assert fp(1.0) != fp(1) and fp(True) != fp(1)  # types by name: 1.0, 1 and True are different constants

    # A function that refers to itself (a cycle) is fingerprinted without recursing for ever.
    def f(n):
        return f(n - 1) if n else 0

    assert fp(f) == fp(f)
