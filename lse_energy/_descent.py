"""Optimizer steps in one ``lax.scan``: the loop every gradient trainer of the package runs.

:func:`scan` takes the step's value-and-gradient function and an optax optimizer; the trainers
(``autoencoder``, ``embedding``, ``vae``, ``adversarial``, ``gru``, the experiments' ``diffusion_mlp``
and structural tasks) differ only in what that function computes. Loops with more inside a step
(``rbm``, ``pcn``, ``gan``, ``mixture_pc``) take the same :func:`step`. Like ``_progress``, it sits at the
bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

import jax


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
