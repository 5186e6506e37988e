r"""Every model of the package, listed once.

Each :class:`Model` names the model's module and the book chapter that derives
it, the function that defines it (its log-sum-exp energy, or for the models
the book shows *without* an energy, the map they compute), a small valid
instance of its arguments, and the arguments that function is differentiable
in. The registry drives the generic tests (``tests/contracts/test_registry.py``: every
model's function is finite and passes ``jax.test_util.check_grads`` to second
order; ``tests/contracts/test_properties.py``: independent NumPy and ``mpmath`` oracles
of every energy; ``tests/contracts/test_validation.py``: bad-input cases for every
module), the equation index and the API reference chapter.

The registry imports every model module, so it sits above them, beside
:mod:`lse_energy.sharding` and ``lse_energy.experiments``; no model imports
it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lse_energy import (
    adversarial,
    anpc,
    attention,
    autoencoder,
    core,
    diffusion,
    embedding,
    expanding,
    gan,
    gmm,
    gru,
    hopfield,
    lif,
    mixture_pc,
    multihop,
    pcn,
    population,
    rbm,
    slds,
    slot_attention,
    structural,
    vae,
)

__all__ = ["Model", "MODELS", "get", "EM_FITS", "GRADIENT_FITS", "STEP_FITS", "OTHER_FITS", "DRIVERS"]


class Model(NamedTuple):
    """One model.

    Attributes:
      name: the module's name in ``lse_energy.<name>``.
      chapter: the book chapter that derives it (a file in ``book/``, no suffix).
      title: a few words naming the model.
      function: its energy, or (``has_energy`` false) the map it computes.
      has_energy: whether ``function`` is a log-sum-exp energy (a scalar).
      example: ``example(key) -> dict`` of keyword arguments for ``function``: a
        small valid instance in the default floating dtype.
      wrt: the arguments ``function`` is differentiated in (``"arg.field"`` for one field of a
        parameter tuple: constrained fields, such as weights on the simplex or covariances,
        are left out).
    """

    name: str
    chapter: str
    title: str
    function: Callable
    has_energy: bool
    example: Callable
    wrt: tuple


def _n(key, i, shape, scale=1.0):
    return scale * core.random_normal(jax.random.fold_in(key, i), shape, jnp.result_type(float))


def _spd(key, i, K, d):
    a = _n(key, i, (K, d, d), 0.3)
    return jnp.eye(d) + a @ jnp.swapaxes(a, 1, 2)


def _core(key):
    return dict(sim=_n(key, 0, (4, 3)))


def _gmm(key):
    K, d = 3, 2
    return dict(
        params=gmm.Params(jnp.full((K,), 1.0 / K), _n(key, 0, (K, d)), _spd(key, 1, K, d)), x=_n(key, 2, (5, d))
    )


def _slds(key):
    K, d = 2, 2
    return dict(
        params=slds.Params(
            jnp.full((K,), 1.0 / K), _n(key, 0, (K, d, d), 0.5), _n(key, 1, (K, d), 0.1), _spd(key, 2, K, d)
        ),
        x=_n(key, 3, (6, d)),
    )


def _mixture_pc(key):
    return dict(params=mixture_pc.init_params(2, 4, 3, key=key), x=_n(key, 1, (5, 3)), mu=_n(key, 2, (3, 2)))


def _attention(key):
    return dict(q=_n(key, 0, (3, 2)), k=_n(key, 1, (4, 2)))


def _hopfield(key):
    return dict(memories=_n(key, 0, (4, 3)), queries=_n(key, 1, (2, 3)))


def _slot(key):
    return dict(
        params=slot_attention.Params(_n(key, 0, (2, 3), 0.5), _n(key, 1, (2, 2), 0.5)),
        x=_n(key, 2, (5, 3)),
        mu=_n(key, 3, (3, 2)),
    )


def _structural(key):
    return dict(mu=_n(key, 0, (3, 2)), x=_n(key, 1, (5, 4)), w=_n(key, 2, (2, 4), 0.3))


def _multihop(key):
    return dict(q=_n(key, 0, (4, 2)), k=_n(key, 1, (4, 2)), v=_n(key, 2, (4, 3)))


def _expanding(key):
    return dict(sims=_n(key, 0, (2, 6)), q=jnp.asarray([0.3, 0.6], jnp.result_type(float)))


def _rbm(key):
    v = (core.random_uniform(jax.random.fold_in(key, 1), (3,)) < 0.5).astype(jnp.result_type(float))
    return dict(params=rbm.Params(W=_n(key, 0, (3, 2), 0.5), b=_n(key, 2, (3,), 0.1), c=_n(key, 3, (2,), 0.1)), v=v)


def _diffusion(key):
    return dict(
        data=_n(key, 0, (4, 2)),
        schedule=diffusion.linear_schedule(10, 1e-3, 0.2),
        x=_n(key, 1, (3, 2)),
        t=jnp.asarray([2, 5, 9]),
    )


def _pcn(key):
    params = pcn.init_params((2, 3, 2), key=key)
    return dict(params=params, xs=(_n(key, 1, (4, 2)), _n(key, 2, (4, 3)), _n(key, 3, (4, 2))))


def _anpc(key):
    N = 3
    adjacency = jnp.asarray([[False, True, True], [True, False, False], [True, True, True]])
    return dict(params=anpc.Params(_n(key, 0, (N, N)), _n(key, 1, (N, N), 0.1), adjacency), x=_n(key, 2, (4, N)))


def _embedding(key):
    n, d = 4, 2
    counts = jnp.asarray([[1.0, 2, 1, 1], [2, 1, 3, 1], [1, 3, 1, 2], [1, 1, 2, 1]], jnp.result_type(float))
    return dict(params=embedding.Params(_n(key, 0, (n, d), 0.5), _n(key, 1, (n, d), 0.5)), x=counts)


def _gan(key):
    params = gan.init_params(
        2, 2, key=key, generator_hidden=(3,), discriminator_hidden=(3,), dtype=jnp.result_type(float)
    )
    return dict(params=params, x=_n(key, 1, (3, 2)), z=_n(key, 2, (2, 2)))


def _gru(key):
    params = gru.MinParams(
        _n(key, 0, (3, 4), 0.5),
        _n(key, 1, (4,), 0.1),
        _n(key, 2, (3, 4), 0.5),
        _n(key, 3, (4,), 0.5),
        _n(key, 4, (4, 2), 0.5),
        _n(key, 5, (2,), 0.1),
    )
    return dict(params=params, x=_n(key, 6, (2, 5, 3)))


def _adversarial(key):
    params = adversarial.init_params(4, 3, 3, key=key, dtype=jnp.result_type(float))
    params = params._replace(b1=_n(key, 1, (3,), 0.3), b2=_n(key, 2, (3,), 0.3))
    return dict(params=params, x=_n(key, 3, (5, 4)), y=jnp.asarray([0, 2, 1, 1, 0]))


def _population(key):
    # 2 spike-count responses (children) over 4 candidate stimuli (parents) of 3 Poisson neurons;
    # counts are real-valued (the continuous relaxation) and kept >= 1 so check_grads stays in the domain
    counts = 1.0 + jnp.abs(_n(key, 0, (2, 3), 2.0))
    expected = 0.5 + jnp.exp(_n(key, 1, (4, 3), 0.5))
    return dict(counts=counts, expected_counts=expected)


def _lif(key):
    return dict(currents=1.5 + jnp.abs(_n(key, 0, (5,), 3.0)))


def _vae(key):
    prior = vae.MixturePrior(_n(key, 0, (3,)), _n(key, 1, (3, 2)), _n(key, 2, (3, 2), 0.3))
    return dict(prior=prior, z=_n(key, 3, (4, 2)))


def _autoencoder(key):
    return dict(
        params=autoencoder.Params(_n(key, 0, (2, 4), 0.5), _n(key, 1, (2,), 0.1), _n(key, 2, (4,), 0.1)),
        x=_n(key, 3, (5, 4)),
        activation="tanh",
    )


MODELS: tuple[Model, ...] = (
    Model("core", "01_lse_energy", "the log-sum-exp energy", core.energy, True, _core, ("sim",)),
    Model("gmm", "02_gmm", "Gaussian mixtures", gmm.energy, True, _gmm, ("params.means", "x")),
    Model("slds", "03_slds", "switching linear dynamics", slds.energy, True, _slds, ("params.A", "params.b", "x")),
    Model(
        "mixture_pc",
        "04_mixture_predictive_coding",
        "predictive coding with latent causes",
        mixture_pc.energy,
        True,
        _mixture_pc,
        ("params", "x", "mu"),
    ),
    Model(
        "attention",
        "05_attention",
        "cross-, self- and multi-head attention",
        attention.energy,
        True,
        _attention,
        ("q", "k"),
    ),
    Model(
        "hopfield", "06_hopfield", "modern Hopfield networks", hopfield.energy, True, _hopfield, ("memories", "queries")
    ),
    Model(
        "slot_attention",
        "07_slot_attention",
        "slot attention",
        slot_attention.energy,
        True,
        _slot,
        ("params", "x", "mu"),
    ),
    Model(
        "structural",
        "08_structural_inference",
        "iterative attention as structural inference",
        structural.energy,
        True,
        _structural,
        ("mu", "x", "w"),
    ),
    Model(
        "multihop",
        "09_new_attention_designs",
        "multi-hop attention (no energy)",
        multihop.attend,
        False,
        _multihop,
        ("q", "k", "v"),
    ),
    Model(
        "expanding", "09_new_attention_designs", "expanding attention", expanding.energy, True, _expanding, ("sims",)
    ),
    Model("rbm", "10_rbm", "restricted Boltzmann machines (free energy)", rbm.energy, True, _rbm, ("params",)),
    Model(
        "diffusion",
        "11_diffusion",
        "diffusion: the ideal denoiser's energy",
        diffusion.energy,
        True,
        _diffusion,
        ("data", "x"),
    ),
    Model(
        "pcn",
        "12_predictive_coding_networks",
        "hierarchical predictive coding networks",
        pcn.energy,
        True,
        _pcn,
        ("params", "xs"),
    ),
    Model(
        "anpc",
        "13_attention_normalised_pc",
        "attention-normalised predictive coding",
        anpc.energy,
        True,
        _anpc,
        ("params", "x"),
    ),
    Model(
        "gru",
        "15_gru",
        "GRU and minGRU (no energy; parallel and log-space scans)",
        gru.min_gru,
        False,
        _gru,
        ("params.U", "params.b", "params.U_g", "params.b_g", "x"),
    ),
    Model(
        "autoencoder",
        "16_autoencoders",
        "autoencoders with tied weights (no energy)",
        autoencoder.reconstruct,
        False,
        _autoencoder,
        ("params", "x"),
    ),
    Model(
        "embedding",
        "17_embeddings",
        "vector embeddings (skip-gram log-partition)",
        embedding.energy,
        True,
        _embedding,
        ("params",),
    ),
    Model(
        "vae",
        "18_vae",
        "variational autoencoders: the mixture prior's energy",
        vae.energy,
        True,
        _vae,
        ("prior", "z"),
    ),
    Model(
        "adversarial",
        "19_adversarial",
        "adversarial attacks and TRADES (cross-entropy, no energy)",
        adversarial.example_losses,
        False,
        _adversarial,
        ("params", "x"),
    ),
    Model(
        "population",
        "20_population_coding",
        "population coding: Bayesian decoding of Poisson counts",
        population.energy,
        True,
        _population,
        ("counts", "expected_counts"),
    ),
    Model(
        "lif",
        "20_population_coding",
        "leaky integrate-and-fire rate curve (no energy)",
        lif.rate,
        False,
        _lif,
        ("currents",),
    ),
    Model(
        "gan",
        "21_gans",
        "GANs: the discriminator's logistic (two-parent) energy",
        gan.energy,
        True,
        _gan,
        ("params", "x", "z"),
    ),
)


def get(name: str) -> Model:
    """The :class:`Model` called ``name``; ``ValueError`` listing the names when there is none."""
    for m in MODELS:
        if m.name == name:
            return m
    raise ValueError(f"no model {name!r}; the registry has {[m.name for m in MODELS]}")


# ---------------------------------------------------------------------------
# The fit families and their drivers (CONTRIBUTING, "Module shape"; checked by tests/contracts/test_registry.py)
# ---------------------------------------------------------------------------

#: Closed-form / EM fits, ``fit(x, n_components, *, key, max_iter, tol, ...)``: the data, the
#: number of components, and a stopping rule; parameters are initialised inside.
EM_FITS = ("gmm.fit", "slds.fit", "sharding.sharded_fit")
#: Gradient trainers, ``fit(params, x, *, key, optimizer, n_epochs, batch_size, ...)`` with an optax
#: optimizer: minibatches of the rows of ``x`` (a supervised trainer takes the labels ``y`` after
#: ``x``), ``n_epochs`` passes over them.
GRADIENT_FITS = ("vae.fit", "adversarial.fit", "pcn.fit", "gru.fit", "rbm.fit")
#: Step trainers, ``fit(params, x, *, optimizer, n_steps, ...)``: a fixed number of optax steps that
#: are not epochs over rows (full-batch, or drawing their own sample each step).
STEP_FITS = ("autoencoder.fit", "embedding.fit")
#: The fits whose signature joins none of the families, and why.
OTHER_FITS = {
    "gmm.em": "the loop of gmm.fit from given parameters, with the caller's pass over the data (sharding's)",
    "slot_attention.fit": "alternating closed-form steps (CCCP E-step, Procrustes or least-squares M-step) from "
    "the caller's parameters and slots: no optimizer and no randomness, and no (x, n_components) start",
    "gan.fit": "two players with two optimizers (d_optimizer, g_optimizer)",
    "diffusion_mlp.fit": "the noise schedule and the optimizer come before the keywords, as the chapter calls it",
    "mixture_pc.fit": "rounds of inference on the latent causes mu, then of learning, from the caller's mu0",
}

#: The driver of ``lse_energy._descent`` each fit calls (``_descent.record`` sees it): ``minibatch``,
#: ``em``, ``steps``, or ``rounds`` for a fit whose step is more than one optax step on one loss.
DRIVERS = {
    **dict.fromkeys(GRADIENT_FITS, "minibatch"),
    **dict.fromkeys(EM_FITS + ("gmm.em",), "em"),
    **dict.fromkeys((*STEP_FITS, "diffusion_mlp.fit"), "steps"),
    **dict.fromkeys(("slot_attention.fit", "gan.fit", "mixture_pc.fit"), "rounds"),
}
