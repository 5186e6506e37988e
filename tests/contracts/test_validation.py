"""Input validation at the public boundary, across every model module.

One registry (``CASES``) drives the generic tests, in the style of dynamax's
``CONFIGS`` and optax's ``ALL_MODULES``. Each :class:`Case` names a public
function, a factory for valid keyword arguments, a change that makes one
argument bad, the kind of bad input, and a regular expression that the
``ValueError`` message must match: the argument's name and the expected shape
or property.

* :func:`test_valid_call_succeeds` calls every function with its valid
  arguments: it must not raise, and its floating outputs must be finite. So
  every bad-input case below can fail (the bad call differs from a call that
  works in one argument only).
* :func:`test_bad_input_raises_value_error_naming_the_argument` makes the bad
  call and checks the ``ValueError`` and its message.
* :func:`test_registry_covers_every_module_and_kind` checks that the
  registry covers every model module and every kind of bad input the issue
  lists where it applies.

* :func:`test_every_continuous_input_has_an_integer_dtype_case` checks that
  every public function of the modules under the integer-dtype policy either
  has an integer-dtype case or is listed as taking no continuous array.

A case with ``gap=...`` is a strict xfail: a real gap in a module this test
may not change, the reason stating the missing check. There are none at
present; a fixed gap left marked turns into an XPASS failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import (
    adversarial,
    anpc,
    attention,
    core,
    diffusion,
    expanding,
    gan,
    gmm,
    gru,
    hopfield,
    lif,
    multihop,
    pcn,
    population,
    rbm,
    sharding,
    slds,
    slot_attention,
    structural,
    vae,
)
from lse_energy import autoencoder as ae_mod
from lse_energy import embedding as emb
from lse_energy import mixture_pc as mpc
from lse_energy.experiments import diffusion_mlp as dmlp
from lse_energy.experiments import structural_tasks as toy
from tests.support import rng as _rng

KINDS = (
    "shape",  # mismatched or wrong shapes
    "finite",  # NaN / inf values
    "pd",  # covariance not symmetric positive definite
    "K",  # K < 1 (components, modes, slots, memories, keys, heads ...)
    "beta",  # beta <= 0 (or not finite / not a number)
    "positive",  # another scalar that must be > 0 (or >= 0): step sizes, lam, precisions ...
    "mask",  # a mask row with no allowed parent, or a malformed mask
    "dtype",  # an integer dtype where a float is needed (or the reverse)
    "type",  # wrong container type / non-callable
    "domain",  # a value outside its domain: non-binary states, t outside 1..T, negative assignments
    "diverge",  # valid arguments on which an iterative driver's run goes non-finite: it must raise, not return NaN
)


class Case(NamedTuple):
    """One bad input of one public function.

    Attributes:
      fn: the public function (or class) under test.
      kind: one of ``KINDS``.
      valid: ``() -> dict`` of keyword arguments for a call that succeeds.
      bad: ``valid_kwargs -> dict`` of the arguments to replace.
      match: regular expression the ``ValueError`` message must contain.
      label: short description (part of the test id).
      gap: if set, the missing check (a real gap in a module this test may
        not change); the case is then a strict xfail.
    """

    fn: Callable
    kind: str
    valid: Callable[[], dict]
    bad: Callable[[dict], dict]
    match: str
    label: str
    gap: str | None = None

    @property
    def module(self) -> str:
        return self.fn.__module__.rsplit(".", 1)[-1]

    @property
    def id(self) -> str:
        return f"{self.module}.{self.fn.__name__}-{self.kind}-{self.label}"


def _normal(shape, seed=0):
    return jnp.asarray(_rng(seed).normal(size=shape))


def _nan_at(a, idx=0):
    a = np.array(a, dtype=np.float64)
    a.flat[idx] = np.nan
    return jnp.asarray(a)


def _ints(a):
    return np.asarray(np.round(np.asarray(a)), dtype=np.int64)


KEY = jax.random.key(0)


def adv_args():
    params = adversarial.init_params(4, 3, 3, key=KEY)
    x = jnp.asarray(_rng(7).uniform(0.1, 0.9, (5, 4)))
    return dict(params=params, x=x, y=jnp.asarray([0, 2, 1, 1, 0]))


def adv_binary():
    params = adversarial.init_params(4, 3, 1, key=KEY)
    a = adv_args()
    return dict(params=params, x=a["x"], y=jnp.asarray([1, -1, 1, -1, 1]), x_adv=a["x"] + 0.05, trades_weight=1.0)


def adv_trades():
    return dict(adv_args(), x_adv=adv_args()["x"] + 0.05, trades_weight=2.0)


def adv_binary_x():
    a = adv_binary()
    return dict(params=a["params"], x=a["x"])


def adv_x():
    a = adv_args()
    return dict(params=a["params"], x=a["x"])


def adv_fgsm():
    return dict(adv_args(), epsilon=0.1, box=(0.0, 1.0))


def adv_step():
    return dict(adv_args(), step_size=0.1, epsilon=0.1, box=(0.0, 1.0))


def adv_pgd():
    return dict(adv_args(), epsilon=0.1, step_size=0.05, n_steps=2, box=(0.0, 1.0))


def adv_minimal():
    return dict(adv_args(), eps_max=0.5, n_bisect=5)


def adv_inner():
    return dict(adv_x(), epsilon=0.1, key=KEY, step_size=0.05, n_steps=2)


def adv_kl():
    return dict(z=_normal((3, 4)), z_adv=_normal((3, 4), 1))


def adv_fit():
    return dict(
        adv_args(),
        key=KEY,
        optimizer=optax.sgd(1e-2),
        n_epochs=1,
        batch_size=2,
        trades_weight=1.0,
        epsilon=0.1,
        n_inner_steps=2,
    )


def vae_prior():
    return dict(prior=vae.MixturePrior(_normal(3), _normal((3, 2), 1), 0.3 * _normal((3, 2), 2)), z=_normal((4, 2), 3))


def vae_x():
    return dict(params=vae.init_params(4, 2, 5, key=KEY, n_components=2), x=jnp.asarray(_rng(4).random((6, 4))))


def vae_z():
    return dict(params=vae_x()["params"], z=_normal((6, 2), 5))


def vae_lik():
    return dict(vae_x(), z=_normal((6, 2), 5))


def vae_eps():
    return dict(vae_x(), eps=_normal((3, 6, 2), 6))


def vae_loss():
    return dict(vae_x(), eps=_normal((6, 2), 6))


def vae_keyed():
    return dict(vae_x(), key=KEY, n_samples=3)


def vae_gauss():
    return dict(mu=_normal((4, 2)), logvar=0.3 * _normal((4, 2), 1))


def vae_fit():
    return dict(vae_x(), key=KEY, optimizer=optax.adam(1e-2), n_epochs=2, batch_size=3)


def vae_lg():
    return dict(W=_normal((3, 2)), b=_normal(3, 1), sigma=0.5, x=_normal((2, 3), 2))


def vae_lg_weights():
    return dict(vae_lg(), q_mean=_normal((2, 2), 3), q_chol=jnp.eye(2), eps=_normal((4, 2, 2), 4))


def _vae_prior_field(field, make_bad):
    return lambda a: dict(prior=a["prior"]._replace(**{field: make_bad(getattr(a["prior"], field))}))


# ---------------------------------------------------------------------------
# Valid-argument factories, one or two per module
# ---------------------------------------------------------------------------


def core_sim():
    return dict(sim=_normal((3, 4)), mask=jnp.ones((3, 4), bool))


def _dot(a, b):
    return a @ b


def core_graph():
    term = core.EnergyTerm(children=[0, 1], parents=[1, 2], sim=_dot, name="t")
    return dict(terms=[term], nodes=_normal((3, 2)))


def core_term():
    return dict(children=[0, 1], parents=[1, 2], sim=_dot, mask=np.array([[True, False], [True, True]]))


def gmm_energy():
    params = gmm.Params(
        weights=jnp.array([0.4, 0.6]),
        means=jnp.array([[0.0, 0.0], [1.5, -0.5]]),
        covariances=jnp.stack([jnp.eye(2), jnp.array([[1.0, 0.3], [0.3, 0.5]])]),
    )
    return dict(params=params, x=_normal((10, 2)))


def gmm_fit():
    return dict(x=_normal((30, 2)), n_components=2, key=KEY, max_iter=3)


def slds_energy():
    K, d = 2, 2
    params = slds.Params(
        weights=jnp.array([0.3, 0.7]),
        A=0.5 * _normal((K, d, d), 1),
        b=_normal((K, d), 2),
        covariances=jnp.stack([jnp.eye(d), jnp.array([[0.6, 0.1], [0.1, 0.4]])]),
    )
    return dict(params=params, x=_normal((8, d), 3))


def slds_fit():
    return dict(x=_normal((30, 2), 4), n_components=2, key=KEY, max_iter=3, n_init=1)


def slds_sample():
    return dict(params=slds_energy()["params"], x0=jnp.zeros(2), n_steps=4, key=KEY)


def hopfield_args():
    return dict(memories=_normal((4, 3)), queries=_normal((2, 3), 1), beta=1.5)


def cross_args():
    return dict(q=_normal((2, 3)), k=_normal((4, 3), 1), beta=0.8, mask=jnp.ones((2, 4), bool))


def attend_args():
    return dict(q=_normal((2, 3)), k=_normal((4, 3), 1), v=_normal((4, 5), 2), beta=0.8)


def self_args():
    params = attention.Params(wq=_normal((2, 3)), wk=_normal((2, 3), 1))
    return dict(params=params, x=_normal((4, 3), 2), beta=0.7, mask=attention.causal_mask(4))


def mha_args():
    return dict(params=attention.init_multihead(4, 2, key=KEY), xq=_normal((3, 4)))


def structural_args():
    return dict(mu=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2))


def slot_args():
    params = slot_attention.Params(w_k=_normal((3, 4)), w_q=_normal((3, 2), 1))
    return dict(params=params, x=_normal((5, 4), 2), mu=_normal((3, 2), 3))


def slot_assign():
    a = slot_args()
    a["a"] = jnp.full((5, 3), 1.0 / 3.0)
    return a


def rbm_args():
    params = rbm.Params(W=0.5 * _normal((3, 2)), b=_normal(3, 1), c=_normal(2, 2))
    return dict(params=params, v=jnp.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))


def rbm_joint():
    a = rbm_args()
    a["h"] = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    return a


def diffusion_args():
    return dict(data=_normal((5, 2)), schedule=diffusion.linear_schedule(20), x=_normal((3, 2), 1), t=7)


def diffusion_mlp():
    return dict(
        params=dmlp.init_params(2, key=KEY, hidden=(8,), n_freqs=2),
        schedule=diffusion.linear_schedule(20),
        x=_normal((3, 2), 1),
        t=5,
    )


def diffusion_loss():
    return dict(
        eps_fn=diffusion.ideal_epsilon,
        params=_normal((5, 2)),
        schedule=diffusion.linear_schedule(20),
        x0=_normal((3, 2), 1),
        t=4,
        eps=_normal((3, 2), 2),
    )


def pc_mixture():
    return dict(params=mpc.init_params(2, 5, 3, key=KEY), x=_normal((6, 3)), mu=_normal((2, 2), 1))


def pc_net():
    params = pcn.init_params((3, 4, 2), key=KEY)
    xs = (_normal((2, 3)), _normal((2, 4), 1), _normal((2, 2), 2))
    return dict(params=params, xs=xs, precisions=jnp.array([0.0, 1.0, 2.0]))


def pc_infer():
    a = pc_mixture()
    return dict(params=a["params"], x=a["x"], mu0=a["mu"], n_steps=2)


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------


def mh_args():
    return dict(q=_normal((4, 3)), k=_normal((4, 3), 1), v=_normal((4, 2), 2))


def mh_params_args():
    return dict(
        params=multihop.Params(wq=_normal((2, 3)), wk=_normal((2, 3), 1), wv=_normal((1, 3), 2)), x=_normal((4, 3), 3)
    )


def mh_grad_args():
    return dict(logits=_normal((4, 4)), v=_normal((4, 2), 1), g=_normal((4, 2), 2))


def ex_args():
    return dict(q=_normal((2, 3)), k=_normal((2, 6, 3), 1), v=_normal((2, 6, 1), 2))


def ex_params_args():
    return dict(
        params=expanding.Params(wq=_normal((2, 3)), wk=_normal((2, 3), 1), wv=_normal((1, 3), 2)),
        x=_normal((2, 6, 3), 3),
    )


def ex_sims_args():
    return dict(sims=_normal((2, 6)), q=jnp.array([0.3, 0.6]))


C = Case
CASES: list[Case] = [
    # --- core ---------------------------------------------------------------
    C(
        core.energy,
        "shape",
        core_sim,
        lambda a: dict(sim=a["sim"][0], mask=None),
        r"sim must have shape \(\.\.\., C, P\)",
        "1d_sim",
    ),
    C(
        core.energy,
        "shape",
        core_sim,
        lambda a: dict(mask=jnp.ones((2, 4), bool)),
        r"mask of shape \(2, 4\) does not broadcast to sim",
        "mask_shape",
    ),
    C(core.energy, "finite", core_sim, lambda a: dict(sim=_nan_at(a["sim"])), r"sim must be finite", "nan"),
    C(
        core.energy,
        "K",
        core_sim,
        lambda a: dict(sim=jnp.zeros((3, 0)), mask=None),
        r"sim must have at least one parent \(P >= 1\)",
        "no_parents",
    ),
    C(
        core.energy,
        "mask",
        core_sim,
        lambda a: dict(mask=a["mask"].at[1].set(False)),
        r"mask: child \(1,\).*no allowed parent",
        "empty_row",
    ),
    C(
        core.energy,
        "mask",
        core_sim,
        lambda a: dict(mask=np.ones((3, 4), np.int64)),
        r"mask must be boolean",
        "int_mask",
    ),
    C(
        core.energy,
        "dtype",
        core_sim,
        lambda a: dict(sim=_ints(a["sim"])),
        r"sim must have a floating dtype",
        "int_sim",
    ),
    C(
        core.weights,
        "mask",
        core_sim,
        lambda a: dict(mask=a["mask"].at[2].set(False)),
        r"mask: child \(2,\).*no allowed parent",
        "empty_row",
    ),
    C(
        core.logsumexp,
        "dtype",
        core_sim,
        lambda a: dict(sim=_ints(a["sim"])),
        r"sim must have a floating dtype",
        "int_sim",
    ),
    C(
        core.EnergyTerm,
        "mask",
        core_term,
        lambda a: dict(mask=np.array([[True, False], [False, False]])),
        r"mask of term .*child row 1 has no allowed parent",
        "empty_row",
    ),
    C(
        core.EnergyTerm,
        "dtype",
        core_term,
        lambda a: dict(children=[0.0, 1.0]),
        r"children must hold integer node indices",
        "float_indices",
    ),
    C(
        core.EnergyTerm,
        "shape",
        core_term,
        lambda a: dict(mask=np.ones((3, 2), bool)),
        r"mask must be boolean of shape \(C_m, P_m\)",
        "mask_shape",
    ),
    C(
        core.graph_energy,
        "finite",
        core_graph,
        lambda a: dict(nodes=_nan_at(a["nodes"], 3)),
        r"nodes must be finite",
        "nan",
    ),
    C(
        core.graph_energy,
        "dtype",
        core_graph,
        lambda a: dict(nodes=_ints(a["nodes"])),
        r"nodes must have a floating dtype",
        "int_nodes",
    ),
    C(
        core.graph_energy,
        "shape",
        core_graph,
        lambda a: dict(nodes=a["nodes"][:2]),
        r"refers to node 2 but nodes has only 2 rows",
        "too_few_nodes",
    ),
    C(
        core.grad_graph_energy_nodes,
        "finite",
        core_graph,
        lambda a: dict(nodes=_nan_at(a["nodes"], 0)),
        r"nodes must be finite",
        "nan",
    ),
    C(
        core.sim_matrix,
        "finite",
        lambda: dict(term=core_graph()["terms"][0], nodes=core_graph()["nodes"]),
        lambda a: dict(nodes=a["nodes"].at[0, 0].set(jnp.inf)),
        r"nodes must be finite",
        "inf",
    ),
    # --- gmm ----------------------------------------------------------------
    C(
        gmm.energy,
        "shape",
        gmm_energy,
        lambda a: dict(x=_normal((10, 3))),
        r"x has dimension 3 but params.means has d = 2",
        "x_dim",
    ),
    C(gmm.energy, "shape", gmm_energy, lambda a: dict(x=a["x"][:, 0]), r"x must have shape \(rows, d\)", "x_1d"),
    C(
        gmm.energy,
        "shape",
        gmm_energy,
        lambda a: dict(params=a["params"]._replace(weights=jnp.array([1.0]))),
        r"params.weights must have shape \(K,\)",
        "weights_shape",
    ),
    C(gmm.energy, "finite", gmm_energy, lambda a: dict(x=_nan_at(a["x"], 5)), r"x must be finite", "x_nan"),
    C(
        gmm.energy,
        "finite",
        gmm_energy,
        lambda a: dict(params=a["params"]._replace(means=_nan_at(a["params"].means))),
        r"params.means must be finite",
        "means_nan",
    ),
    C(
        gmm.energy,
        "pd",
        gmm_energy,
        lambda a: dict(
            params=a["params"]._replace(covariances=a["params"].covariances.at[1].set(jnp.diag(jnp.array([1.0, -0.1]))))
        ),
        r"params.covariances\[1\] is not positive definite",
        "indefinite",
    ),
    C(
        gmm.energy,
        "pd",
        gmm_energy,
        lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0, 0, 1].set(0.5))),
        r"params.covariances\[0\] is not symmetric",
        "asymmetric",
    ),
    C(
        gmm.em_step,
        "pd",
        gmm_energy,
        lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0].set(jnp.zeros((2, 2))))),
        r"params.covariances\[0\] is not positive definite",
        "singular",
    ),
    C(
        gmm.energy,
        "K",
        gmm_energy,
        lambda a: dict(params=gmm.Params(jnp.zeros((0,)), jnp.zeros((0, 2)), jnp.zeros((0, 2, 2)))),
        r"params.means must have shape \(K, d\) with K >= 1",
        "zero_components",
    ),
    C(gmm.fit, "K", gmm_fit, lambda a: dict(n_components=0), r"n_components must be an integer >= 1", "zero"),
    # one simplex rule (_validate.simplex) for gmm and slds: positive, sums to 1 within sqrt(eps)
    C(
        gmm.energy,
        "domain",
        gmm_energy,
        lambda a: dict(params=a["params"]._replace(weights=a["params"].weights * (1 + 1e-7))),
        r"params.weights must sum to 1",
        "weights_off_simplex",
    ),
    C(
        slds.energy,
        "domain",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(weights=a["params"].weights * (1 + 1e-7))),
        r"params.weights must sum to 1",
        "weights_off_simplex",
    ),
    C(
        slds.energy,
        "domain",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(weights=a["params"].weights.at[0].set(0.0))),
        r"params.weights must be strictly positive",
        "zero_weight",
    ),
    C(gmm.fit, "dtype", gmm_fit, lambda a: dict(n_components=True), r"n_components must be an integer", "bool_K"),
    # PRNG keys and booleans for counts (issue 48): the package's own message, not JAX's.
    C(
        gmm.fit,
        "type",
        gmm_fit,
        lambda a: dict(key=0),
        r"key must be a JAX PRNG key, e\.g\. jax\.random\.key\(0\); got int",
        "int_key",
    ),
    C(gmm.fit, "type", gmm_fit, lambda a: dict(key=None), r"key must be a JAX PRNG key.*; got None", "none_key"),
    C(
        gmm.init_params,
        "type",
        lambda: dict(x=_normal((30, 2)), n_components=2, key=KEY),
        lambda a: dict(key=0),
        r"key must be a JAX PRNG key, e\.g\. jax\.random\.key\(0\); got int",
        "int_key",
    ),
    C(gmm.fit, "type", gmm_fit, lambda a: dict(init="kmeans++"), r"init must be one of 'kmeans', 'random'", "init"),
    C(
        gmm.fit,
        "dtype",
        gmm_fit,
        lambda a: dict(n_init=True),
        r"n_init must be an integer >= 1; got True",
        "bool_n_init",
    ),
    C(
        gmm.fit,
        "dtype",
        gmm_fit,
        lambda a: dict(max_iter=True),
        r"max_iter must be an integer >= 0; got True",
        "bool_iter",
    ),
    C(gmm.predict, "dtype", gmm_energy, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        hopfield.retrieve,
        "dtype",
        hopfield_args,
        lambda a: dict(n_steps=True),
        r"n_steps must be an integer >= 0; got True",
        "bool_steps",
    ),
    C(
        attention.init_params,
        "type",
        lambda: dict(d_in=3, d_k=2, key=KEY),
        lambda a: dict(key=0),
        r"key must be a JAX PRNG key, e\.g\. jax\.random\.key\(0\); got int",
        "int_key",
    ),
    C(
        attention.init_params,
        "dtype",
        lambda: dict(d_in=3, d_k=2, key=KEY),
        lambda a: dict(d_k=True),
        r"d_k must be an integer >= 1; got True",
        "bool_d_k",
    ),
    C(
        attention.init_multihead,
        "type",
        lambda: dict(d_model=4, n_heads=2, key=KEY),
        lambda a: dict(key=None),
        r"key must be a JAX PRNG key.*; got None",
        "none_key",
    ),
    C(
        attention.init_multihead,
        "dtype",
        lambda: dict(d_model=4, n_heads=2, key=KEY),
        lambda a: dict(n_heads=True),
        r"n_heads must be an integer >= 1; got True",
        "bool_heads",
    ),
    C(
        gmm.check_x,
        "dtype",
        lambda: dict(x=_normal((5, 2))),
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        gmm.check_x,
        "shape",
        lambda: dict(x=_normal((5, 2)), d=2),
        lambda a: dict(d=3),
        r"x has dimension 2 but params.means has d = 3",
        "x_dim",
    ),
    C(
        gmm.init_params,
        "K",
        lambda: dict(x=_normal((30, 2)), n_components=2, key=KEY),
        lambda a: dict(n_components=-1),
        r"n_components must be an integer >= 1",
        "negative",
    ),
    C(gmm.fit, "dtype", gmm_fit, lambda a: dict(n_components=2.0), r"n_components must be an integer", "float_K"),
    C(gmm.fit, "positive", gmm_fit, lambda a: dict(tol=-1.0), r"tol must be a finite scalar >= 0", "negative_tol"),
    C(
        gmm.em_step,
        "positive",
        gmm_energy,
        lambda a: dict(reg_covar=-1e-3),
        r"reg_covar must be a finite scalar >= 0",
        "neg_reg",
    ),
    C(
        gmm.free_energy,
        "shape",
        lambda: dict(gmm_energy(), resp=jnp.full((10, 2), 0.5)),
        lambda a: dict(resp=jnp.full((10, 3), 1 / 3)),
        r"resp must have shape \(N, K\)",
        "resp_shape",
    ),
    C(gmm.fit, "positive", gmm_fit, lambda a: dict(tol="a"), r"tol must be a finite scalar >= 0", "string_tol"),
    # --- slds ---------------------------------------------------------------
    C(slds.energy, "shape", slds_energy, lambda a: dict(x=a["x"][:, 0]), r"x must have shape \(rows, d\)", "x_1d"),
    C(
        slds.energy,
        "shape",
        slds_energy,
        lambda a: dict(x=a["x"][:1]),
        r"x must hold at least two time steps \(T >= 2\)",
        "T1",
    ),
    C(
        slds.energy,
        "shape",
        slds_energy,
        lambda a: dict(x=_normal((8, 3))),
        r"params.A must have shape \(K, d, d\) with d = 3",
        "x_dim",
    ),
    C(
        slds.energy,
        "shape",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(b=jnp.zeros((2, 3)))),
        r"params.b must have shape \(K, d\)",
        "b_shape",
    ),
    C(slds.energy, "finite", slds_energy, lambda a: dict(x=_nan_at(a["x"], 4)), r"x must be finite", "x_nan"),
    C(
        slds.energy,
        "finite",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(A=_nan_at(a["params"].A))),
        r"params.A must be finite",
        "A_nan",
    ),
    C(
        slds.energy,
        "pd",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[1].set(-jnp.eye(2)))),
        r"params.covariances\[1\] is not positive definite",
        "negative_definite",
    ),
    C(
        slds.energy,
        "pd",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0, 1, 0].set(0.4))),
        r"params.covariances\[0\] is not symmetric",
        "asymmetric",
    ),
    C(
        slds.em_step,
        "pd",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0].set(jnp.ones((2, 2))))),
        r"params.covariances\[0\] is not positive definite",
        "singular",
    ),
    C(
        slds.energy,
        "K",
        slds_energy,
        lambda a: dict(
            params=slds.Params(jnp.zeros((0,)), jnp.zeros((0, 2, 2)), jnp.zeros((0, 2)), jnp.zeros((0, 2, 2)))
        ),
        r"params.weights must have shape \(K,\) with K >= 1",
        "zero_modes",
    ),
    C(slds.fit, "K", slds_fit, lambda a: dict(n_components=0), r"n_components must be an integer >= 1", "zero"),
    C(
        slds.init_params,
        "K",
        lambda: dict(x=_normal((30, 2)), n_components=2, key=KEY),
        lambda a: dict(n_components=0),
        r"n_components must be an integer >= 1",
        "zero",
    ),
    C(
        slds.fit,
        "dtype",
        slds_fit,
        lambda a: dict(n_components="2"),
        r"n_components must be an integer >= 1",
        "string_K",
    ),
    C(slds.energy, "dtype", slds_energy, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        slds.energy,
        "dtype",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(A=np.zeros((2, 2, 2), np.int64))),
        r"params.A must have a floating dtype",
        "int_A",
    ),
    C(
        slds.energy,
        "dtype",
        slds_energy,
        lambda a: dict(params=a["params"]._replace(covariances=np.stack([np.eye(2, dtype=np.int64)] * 2))),
        r"params.covariances must have a floating dtype",
        "int_cov",
    ),
    C(
        slds.sample,
        "dtype",
        slds_sample,
        lambda a: dict(x0=np.zeros(2, np.int64)),
        r"x0 must have a floating dtype",
        "int_x0",
    ),
    C(slds.sample, "finite", slds_sample, lambda a: dict(x0=jnp.array([jnp.nan, 0.0])), r"x0 must be finite", "nan_x0"),
    C(
        slds.sample,
        "shape",
        slds_sample,
        lambda a: dict(x0=jnp.zeros(3)),
        r"params.A must have shape \(K, d, d\) with d = 3",
        "x0_dim",
    ),
    C(
        slds.em_step,
        "positive",
        slds_energy,
        lambda a: dict(reg_covar=None),
        r"reg_covar must be a finite scalar >= 0",
        "none_reg",
    ),
    C(slds.fit, "positive", slds_fit, lambda a: dict(tol="a"), r"tol must be a finite scalar >= 0", "string_tol"),
    C(
        slds.m_step,
        "shape",
        lambda: dict(x=_normal((8, 2)), resp=jnp.full((7, 2), 0.5)),
        lambda a: dict(resp=jnp.full((8, 2), 0.5)),
        r"resp must have shape \(T-1, K\)",
        "resp_shape",
    ),
    # --- hopfield -----------------------------------------------------------
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=0.0), r"beta must be a finite scalar > 0", "zero"),
    C(
        hopfield.energy,
        "beta",
        hopfield_args,
        lambda a: dict(beta=-1.0),
        r"beta must be a finite scalar > 0",
        "negative",
    ),
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=jnp.inf), r"beta must be a finite scalar > 0", "inf"),
    C(
        hopfield.grad_queries,
        "beta",
        hopfield_args,
        lambda a: dict(beta=np.nan),
        r"beta must be a finite scalar > 0",
        "nan",
    ),
    C(
        hopfield.update,
        "beta",
        hopfield_args,
        lambda a: dict(beta=-0.5),
        r"beta must be a finite scalar > 0",
        "negative",
    ),
    C(hopfield.retrieve, "beta", hopfield_args, lambda a: dict(beta=0.0), r"beta must be a finite scalar > 0", "zero"),
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=None), r"beta", "none"),
    C(
        hopfield.energy,
        "shape",
        hopfield_args,
        lambda a: dict(queries=_normal((2, 4))),
        r"queries has dimension d = 4 but memories have d = 3",
        "d_mismatch",
    ),
    C(
        hopfield.energy,
        "finite",
        hopfield_args,
        lambda a: dict(memories=_nan_at(a["memories"], 2)),
        r"memories must be finite",
        "nan",
    ),
    C(
        hopfield.energy,
        "K",
        hopfield_args,
        lambda a: dict(memories=jnp.zeros((0, 3))),
        r"memories must be non-empty",
        "no_memories",
    ),
    C(
        hopfield.energy,
        "dtype",
        hopfield_args,
        lambda a: dict(queries=_ints(a["queries"])),
        r"queries must have a floating dtype",
        "int_queries",
    ),
    C(
        hopfield.regularised_energy,
        "dtype",
        hopfield_args,
        lambda a: dict(memories=_ints(a["memories"])),
        r"memories must have a floating dtype",
        "int_memories",
    ),
    C(
        hopfield.cccp_surrogate,
        "shape",
        lambda: dict(hopfield_args(), anchor=_normal((2, 3), 5)),
        lambda a: dict(anchor=_normal((3, 3), 5)),
        r"anchor must have the shape of queries",
        "anchor_shape",
    ),
    C(
        hopfield.retrieve,
        "dtype",
        hopfield_args,
        lambda a: dict(n_steps=2.0),
        r"n_steps must be an integer >= 0",
        "float_steps",
    ),
    # --- attention ----------------------------------------------------------
    C(
        attention.energy,
        "beta",
        cross_args,
        lambda a: dict(beta=0.0),
        r"beta must be a finite scalar > 0",
        "zero",
    ),
    C(
        attention.grad_q,
        "beta",
        cross_args,
        lambda a: dict(beta=-2.0),
        r"beta must be a finite scalar > 0",
        "negative",
    ),
    C(attention.attend, "beta", attend_args, lambda a: dict(beta=np.nan), r"beta must be a finite scalar > 0", "nan"),
    C(
        attention.self_energy,
        "beta",
        self_args,
        lambda a: dict(beta=-1.0),
        r"beta must be a finite scalar > 0",
        "negative",
    ),
    C(
        attention.multihead_attention,
        "beta",
        mha_args,
        lambda a: dict(beta=0.0),
        r"beta must be a finite scalar > 0",
        "zero",
    ),
    C(attention.energy, "beta", cross_args, lambda a: dict(beta=None), r"beta", "none"),
    C(
        attention.energy,
        "shape",
        cross_args,
        lambda a: dict(k=_normal((4, 2))),
        r"q and k must share their last \(feature\) dimension",
        "feature_dim",
    ),
    C(
        attention.attend,
        "shape",
        attend_args,
        lambda a: dict(v=_normal((3, 5))),
        r"v must have one row per key",
        "v_rows",
    ),
    C(
        attention.self_energy,
        "shape",
        self_args,
        lambda a: dict(x=_normal((4, 5))),
        r"x has width 5 but params.wq expects 3",
        "x_width",
    ),
    C(attention.energy, "finite", cross_args, lambda a: dict(q=_nan_at(a["q"])), r"q must be finite", "nan_q"),
    C(
        attention.energy,
        "dtype",
        cross_args,
        lambda a: dict(k=_ints(a["k"])),
        r"k must have a floating dtype",
        "int_k",
    ),
    C(
        attention.self_energy,
        "dtype",
        self_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        attention.energy,
        "mask",
        cross_args,
        lambda a: dict(mask=a["mask"].at[1].set(False)),
        r"mask: query \(1,\).*no allowed key: a fully masked row(?!.*allow_empty)",
        "empty_row",
    ),
    C(
        attention.attend,
        "mask",
        lambda: dict(attend_args(), mask=jnp.ones((2, 4), bool)),
        lambda a: dict(mask=a["mask"].at[0].set(False)),
        r"mask: query \(0,\).*no allowed key: a fully masked row(?!.*allow_empty)",
        "empty_row",
    ),
    C(
        attention.self_energy,
        "mask",
        self_args,
        lambda a: dict(mask=a["mask"].at[0, 0].set(False)),
        r"mask: query \(0,\).*no allowed key: a fully masked row(?!.*allow_empty)",
        "causal_first_row",
    ),
    C(
        attention.energy,
        "mask",
        cross_args,
        lambda a: dict(mask=np.ones((2, 4), np.int64)),
        r"mask must be boolean",
        "int_mask",
    ),
    C(
        attention.energy,
        "shape",
        cross_args,
        lambda a: dict(mask=jnp.ones((3, 4), bool)),
        r"mask of shape \(3, 4\) does not broadcast",
        "mask_shape",
    ),
    C(
        attention.energy,
        "K",
        cross_args,
        lambda a: dict(k=jnp.zeros((0, 3)), mask=None),
        r"k must have at least one row \(N_K >= 1",
        "no_keys",
    ),
    C(
        attention.init_multihead,
        "K",
        lambda: dict(d_model=4, n_heads=2, key=KEY),
        lambda a: dict(n_heads=0),
        r"n_heads must be an integer >= 1",
        "zero_heads",
    ),
    C(
        structural.cccp_step,
        "shape",
        structural_args,
        lambda a: dict(w=a["w"].T),
        r"w must have shape \(d_mu, d_x\)",
        "w_shape",
    ),
    C(
        structural.cccp,
        "positive",
        lambda: dict(mu0=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2)),
        lambda a: dict(n_steps=-1),
        r"n_steps must be an integer >= 0",
        "negative_steps",
    ),
    C(
        structural.cccp,
        "dtype",
        lambda: dict(mu0=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2)),
        lambda a: dict(n_steps=1.5),
        r"n_steps must be an integer >= 0",
        "float_steps",
    ),
    C(structural.energy, "type", structural_args, lambda a: dict(prior="rows"), r"prior must be one of", "prior"),
    C(
        attention.multihead_attention,
        "finite",
        mha_args,
        lambda a: dict(params=a["params"]._replace(wq=_nan_at(a["params"].wq))),
        r"params\.wq must be finite",
        "nan_wq",
    ),
    C(
        attention.prior_energy,
        "shape",
        lambda: dict(sim=_normal((2, 3)), prior=jnp.full((2, 3), 1 / 3)),
        lambda a: dict(prior=jnp.full((2, 2), 0.5)),
        r"prior must have the shape of sim \(\.\.\., C, P\)",
        "prior_shape",
    ),
    # --- slot attention -----------------------------------------------------
    C(
        slot_attention.energy,
        "shape",
        slot_args,
        lambda a: dict(x=_normal((5, 3))),
        r"x must have 4 columns \(d = params.w_k.shape\[1\]\)",
        "x_width",
    ),
    C(
        slot_attention.energy,
        "shape",
        slot_args,
        lambda a: dict(params=a["params"]._replace(w_q=_normal((2, 2)))),
        r"params.w_q must have shape \(d_k, d_slot\) with d_k = 3",
        "maps",
    ),
    C(
        slot_attention.energy,
        "finite",
        slot_args,
        lambda a: dict(mu=_nan_at(a["mu"], 1)),
        r"mu must be finite",
        "nan_mu",
    ),
    C(
        slot_attention.energy,
        "K",
        slot_args,
        lambda a: dict(mu=jnp.zeros((0, 2))),
        r"mu must have shape \(n, d_slot = params.w_q.shape\[1\]\) with n >= 1",
        "no_slots",
    ),
    C(
        slot_attention.init_slots,
        "K",
        lambda: dict(x=_normal((5, 4)), n_slots=2, key=KEY),
        lambda a: dict(n_slots=0),
        r"n_slots must be an integer in \[1, N=5\]",
        "zero",
    ),
    C(
        slot_attention.energy,
        "dtype",
        slot_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        slot_attention.grad_regularised_energy_mu,
        "dtype",
        slot_args,
        lambda a: dict(mu=_ints(a["mu"])),
        r"mu must have a floating dtype",
        "int_mu",
    ),
    C(
        slot_attention.cccp_step,
        "positive",
        slot_args,
        lambda a: dict(lam=0.0),
        r"lam must be a finite scalar > 0",
        "zero_lam",
    ),
    C(
        slot_attention.cccp_step,
        "positive",
        slot_args,
        lambda a: dict(lam=jnp.inf),
        r"lam must be a finite scalar > 0",
        "inf_lam",
    ),
    C(
        slot_attention.regularised_energy,
        "positive",
        slot_args,
        lambda a: dict(lam=-1.0),
        r"lam must be a finite scalar >= 0",
        "neg_lam",
    ),
    C(
        slot_attention.grad_regularised_energy_mu,
        "positive",
        slot_args,
        lambda a: dict(lam=-0.5),
        r"lam must be a finite scalar >= 0",
        "neg_lam",
    ),
    C(
        slot_attention.gradient_step,
        "positive",
        lambda: dict(slot_args(), step=0.1),
        lambda a: dict(step=jnp.inf),
        r"step must be a finite scalar > 0",
        "inf_step",
    ),
    C(
        slot_attention.e_step,
        "positive",
        lambda: dict(slot_args(), n_steps=2),
        lambda a: dict(lam="a"),
        r"lam must be a finite scalar >= 0",
        "string_lam",
    ),
    C(
        slot_attention.surrogate,
        "domain",
        slot_assign,
        lambda a: dict(a=-a["a"]),
        r"a must be non-negative",
        "negative_a",
    ),
    C(
        slot_attention.surrogate,
        "shape",
        slot_assign,
        lambda a: dict(a=jnp.ones((5, 2))),
        r"a must have shape \(N, S\)",
        "a_shape",
    ),
    C(
        slot_attention.fourier_features,
        "positive",
        lambda: dict(points=_normal((4, 2)), n_features=3, lengthscale=0.5, key=KEY),
        lambda a: dict(lengthscale=jnp.inf),
        r"lengthscale must be a finite scalar > 0",
        "inf_lengthscale",
    ),
    C(
        slot_attention.blob_scene,
        "K",
        lambda: dict(n_blobs=2, key=KEY, n_per_blob=3, min_separation=0.1, n_candidates=64),
        lambda a: dict(n_per_blob=0),
        r"n_per_blob must be an integer >= 1",
        "zero_per_blob",
    ),
    C(
        slot_attention.blob_scene,
        "finite",
        lambda: dict(n_blobs=2, key=KEY, n_per_blob=3, min_separation=0.1, n_candidates=64),
        lambda a: dict(min_separation=np.nan),
        r"min_separation must be a finite scalar >= 0",
        "nan_separation",
    ),
    # --- vae ----------------------------------------------------------------
    C(vae.encode, "shape", vae_x, lambda a: dict(x=jnp.zeros((3, 5))), r"x has dimension d = 5", "x_width"),
    C(
        vae.energy,
        "shape",
        vae_prior,
        _vae_prior_field("log_scales", lambda s: s[:, :1]),
        r"prior.log_scales must have shape",
        "log_scales",
    ),
    C(vae.energy, "shape", vae_prior, lambda a: dict(z=jnp.zeros((4, 3))), r"z has dimension d = 3", "z_width"),
    C(vae.log_weights, "shape", vae_eps, lambda a: dict(eps=jnp.zeros((3, 5, 2))), r"eps must have shape", "eps"),
    C(
        vae.encode,
        "shape",
        vae_x,
        lambda a: dict(params=a["params"]._replace(out_b=jnp.zeros(5))),
        r"params.out_b must have shape",
        "out_b",
    ),
    C(vae.linear_gaussian_log_marginal, "shape", vae_lg, lambda a: dict(b=jnp.zeros(2)), r"b must have shape", "b"),
    C(
        vae.gaussian_kl,
        "shape",
        vae_gauss,
        lambda a: dict(logvar=jnp.zeros((4, 3))),
        r"logvar must have the shape",
        "logvar",
    ),
    C(vae.encode, "finite", vae_x, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_x"),
    C(vae.energy, "finite", vae_prior, lambda a: dict(z=_nan_at(a["z"])), r"z must be finite", "nan_z"),
    C(
        vae.decode,
        "finite",
        vae_z,
        lambda a: dict(params=a["params"]._replace(dec_W=_nan_at(a["params"].dec_W))),
        r"params.dec_W must be finite",
        "nan_dec_W",
    ),
    C(
        vae.init_params,
        "K",
        lambda: dict(n_visible=4, n_latent=2, n_hidden=5, key=KEY),
        lambda a: dict(n_latent=0),
        r"n_latent must be an integer >= 1",
        "zero_latent",
    ),
    C(
        vae.init_prior,
        "K",
        lambda: dict(n_components=2, n_latent=2, key=KEY),
        lambda a: dict(n_components=0),
        r"n_components must be an integer >= 1",
        "zero_components",
    ),
    C(vae.iwae, "K", vae_keyed, lambda a: dict(n_samples=0), r"n_samples must be an integer >= 1", "zero_samples"),
    C(vae.fit, "K", vae_fit, lambda a: dict(batch_size=7), r"batch_size must be <= N = 6", "batch_too_big"),
    C(
        vae.log_likelihood,
        "positive",
        vae_lik,
        lambda a: dict(obs_scale=0.0),
        r"obs_scale must be a finite scalar > 0",
        "obs_scale",
    ),
    C(
        vae.fit,
        "positive",
        vae_fit,
        lambda a: dict(kl_weight=-1.0),
        r"kl_weight must be a finite scalar > 0",
        "kl_weight",
    ),
    C(
        vae.linear_gaussian_posterior,
        "positive",
        vae_lg,
        lambda a: dict(sigma=0.0),
        r"sigma must be a finite scalar > 0",
        "sigma",
    ),
    C(
        vae.init_prior,
        "positive",
        lambda: dict(n_components=2, n_latent=2, key=KEY),
        lambda a: dict(scale=0.0),
        r"scale must be a finite scalar > 0",
        "scale",
    ),
    C(
        vae.init_params,
        "dtype",
        lambda: dict(n_visible=4, n_latent=2, n_hidden=5, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(
        vae.init_prior,
        "dtype",
        lambda: dict(n_components=2, n_latent=2, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(
        vae.fit,
        "dtype",
        vae_fit,
        lambda a: dict(x=a["x"].astype(jnp.float32)),
        r"x must have the dtype of params",
        "x_float32",
    ),
    C(vae.fit, "type", vae_fit, lambda a: dict(optimizer=object()), r"optimizer must be an optax", "optimizer"),
    C(vae.encode, "type", vae_x, lambda a: dict(params=tuple(a["params"])), r"params must be vae.Params", "tuple"),
    C(
        vae.energy,
        "type",
        vae_prior,
        lambda a: dict(prior=tuple(a["prior"])),
        r"prior must be vae.MixturePrior",
        "tuple",
    ),
    C(vae.fit, "domain", vae_fit, lambda a: dict(x=2.0 * a["x"]), r"x must lie in \[0, 1\]", "x_above_one"),
    C(vae.loss, "domain", vae_loss, lambda a: dict(decoder="poisson"), r"decoder must be one of", "decoder"),
    C(
        vae.linear_gaussian_log_weights,
        "domain",
        vae_lg_weights,
        lambda a: dict(q_chol=-jnp.eye(2)),
        r"q_chol must have a positive diagonal",
        "negative_chol",
    ),
    # --- rbm ----------------------------------------------------------------
    C(
        rbm.energy,
        "shape",
        rbm_args,
        lambda a: dict(v=jnp.ones((2, 4))),
        r"v must have shape \(3,\) or \(N, 3\)",
        "v_width",
    ),
    C(
        rbm.energy,
        "shape",
        rbm_args,
        lambda a: dict(params=a["params"]._replace(c=jnp.zeros(3))),
        r"params.c must have shape \(n_hidden,\) with n_hidden = 2",
        "c_shape",
    ),
    C(
        rbm.joint_energy,
        "shape",
        rbm_joint,
        lambda a: dict(h=jnp.ones((3, 2))),
        r"v and h must have the same batch shape",
        "batch",
    ),
    C(rbm.energy, "finite", rbm_args, lambda a: dict(v=_nan_at(a["v"])), r"v must be finite", "nan_v"),
    C(
        rbm.energy,
        "finite",
        rbm_args,
        lambda a: dict(params=a["params"]._replace(W=_nan_at(a["params"].W))),
        r"params.W must be finite",
        "nan_W",
    ),
    C(
        rbm.energy,
        "dtype",
        rbm_args,
        lambda a: dict(params=a["params"]._replace(W=np.ones((3, 2), np.int64))),
        r"params.W must have a floating dtype",
        "int_W",
    ),
    C(
        rbm.init_params,
        "dtype",
        lambda: dict(n_visible=3, n_hidden=2, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(
        rbm.init_params,
        "K",
        lambda: dict(n_visible=3, n_hidden=2, key=KEY),
        lambda a: dict(n_hidden=0),
        r"n_hidden must be an integer >= 1",
        "zero_hidden",
    ),
    C(
        rbm.gibbs,
        "domain",
        lambda: dict(params=rbm_args()["params"], v0=rbm_args()["v"], n_steps=2, key=KEY),
        lambda a: dict(v0=jnp.full((2, 3), 0.5)),
        r"v0 must be binary",
        "nonbinary_v0",
    ),
    C(
        rbm.log_likelihood,
        "finite",
        lambda: dict(rbm_args(), log_z=rbm.log_partition(rbm_args()["params"])),
        lambda a: dict(log_z=jnp.nan),
        r"log_z must be finite",
        "nan_log_z",
    ),
    C(
        rbm.log_likelihood,
        "shape",
        lambda: dict(rbm_args(), log_z=rbm.log_partition(rbm_args()["params"])),
        lambda a: dict(log_z=jnp.ones(2)),
        r"log_z must be a real scalar",
        "vector_log_z",
    ),
    C(
        rbm.fit,
        "type",
        lambda: rbm_fit(),
        lambda a: dict(optimizer=0.05),
        r"optimizer must be an optax",
        "learning_rate",
    ),
    # --- diffusion ----------------------------------------------------------
    C(
        diffusion.energy,
        "shape",
        diffusion_args,
        lambda a: dict(x=_normal((3, 3))),
        r"x has dimension d = 3 but data have d = 2",
        "x_dim",
    ),
    C(
        diffusion.energy,
        "shape",
        diffusion_args,
        lambda a: dict(t=jnp.array([1, 2])),
        r"t must be a scalar or have shape \(3,\)",
        "t_shape",
    ),
    C(
        diffusion.energy,
        "finite",
        diffusion_args,
        lambda a: dict(data=_nan_at(a["data"])),
        r"data must be finite",
        "nan_data",
    ),
    C(
        diffusion.energy,
        "K",
        diffusion_args,
        lambda a: dict(data=jnp.zeros((0, 2))),
        r"data must be non-empty",
        "no_data",
    ),
    C(
        diffusion.energy,
        "dtype",
        diffusion_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        diffusion.ideal_score,
        "dtype",
        diffusion_args,
        lambda a: dict(t=7.0),
        r"t must be an integer time step",
        "float_t",
    ),
    C(diffusion.energy, "domain", diffusion_args, lambda a: dict(t=0), r"t must lie in 1..T = 1..20", "t_zero"),
    C(
        diffusion.energy,
        "type",
        diffusion_args,
        lambda a: dict(schedule=tuple(a["schedule"])),
        r"schedule must be a Schedule",
        "tuple",
    ),
    C(
        diffusion.make_schedule,
        "positive",
        lambda: dict(betas=jnp.array([0.1, 0.2])),
        lambda a: dict(betas=jnp.array([0.1, 0.0])),
        r"betas must lie in \(0, 1\)",
        "zero_beta",
    ),
    C(
        diffusion.make_schedule,
        "dtype",
        lambda: dict(betas=jnp.array([0.1, 0.2])),
        lambda a: dict(betas=np.array([0, 0])),
        r"betas must have a floating dtype",
        "int_betas",
    ),
    C(
        diffusion.kl_weight,
        "positive",
        lambda: dict(schedule=diffusion.linear_schedule(20), t=3, sigma2=0.01),
        lambda a: dict(sigma2=0.0),
        r"sigma2 must be finite and > 0",
        "zero_sigma2",
    ),
    C(
        dmlp.time_embedding,
        "K",
        lambda: dict(t=jnp.array([1, 5]), n_steps=10, n_freqs=2),
        lambda a: dict(n_freqs=0),
        r"n_freqs must be an integer >= 1",
        "zero_freqs",
    ),
    C(
        dmlp.time_embedding,
        "dtype",
        lambda: dict(t=jnp.array([1, 5]), n_steps=10, n_freqs=2),
        lambda a: dict(t=jnp.array([1.0, 5.0])),
        r"t must be a \(B,\) array of integer time steps",
        "float_t",
    ),
    C(
        dmlp.epsilon,
        "shape",
        diffusion_mlp,
        lambda a: dict(x=_normal((3, 3))),
        r"x has width d = 3 but params expect",
        "x_width",
    ),
    C(dmlp.epsilon, "finite", diffusion_mlp, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_x"),
    C(dmlp.epsilon, "dtype", diffusion_mlp, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(dmlp.epsilon, "domain", diffusion_mlp, lambda a: dict(t=21), r"t must lie in 1..T = 1..20", "t_big"),
    C(
        dmlp.fit,
        "type",
        lambda: dict(
            params=diffusion_mlp()["params"],
            x=_normal((5, 2)),
            schedule=diffusion.linear_schedule(20),
            optimizer=optax.sgd(1e-3),
            key=KEY,
            n_steps=1,
            batch_size=2,
        ),
        lambda a: dict(params=tuple(a["params"])),
        r"params must be diffusion_mlp\.Params",
        "tuple_params",
    ),
    C(
        diffusion.denoising_loss,
        "type",
        diffusion_loss,
        lambda a: dict(eps_fn=None),
        r"eps_fn must be callable",
        "none",
    ),
    # --- predictive coding --------------------------------------------------
    C(mpc.energy, "shape", pc_mixture, lambda a: dict(mu=_normal((2, 3))), r"mu must have 2 columns", "mu_width"),
    C(mpc.energy, "shape", pc_mixture, lambda a: dict(x=_normal((6, 2))), r"x must have 3 columns", "x_width"),
    C(mpc.energy, "finite", pc_mixture, lambda a: dict(x=_nan_at(a["x"], 7)), r"x must be finite", "nan_x"),
    C(
        mpc.energy,
        "finite",
        pc_mixture,
        lambda a: dict(params=a["params"]._replace(W2=_nan_at(a["params"].W2))),
        r"params.W2 must be finite",
        "nan_W2",
    ),
    C(
        mpc.energy,
        "K",
        pc_mixture,
        lambda a: dict(mu=jnp.zeros((0, 2))),
        r"mu must have shape \(n, m .*\) with n >= 1",
        "no_causes",
    ),
    C(mpc.energy, "dtype", pc_mixture, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        mpc.grad_mu,
        "dtype",
        pc_mixture,
        lambda a: dict(params=a["params"]._replace(W1=_ints(a["params"].W1))),
        r"params.W1 must have a floating dtype",
        "int_W1",
    ),
    C(
        mpc.infer,
        "positive",
        pc_infer,
        lambda a: dict(step_size=-0.1),
        r"step_size must be a finite scalar > 0",
        "neg_step",
    ),
    C(pcn.energy, "shape", pc_net, lambda a: dict(xs=a["xs"][:2]), r"xs must be a tuple of L = 3 arrays", "n_layers"),
    C(
        pcn.energy,
        "shape",
        pc_net,
        lambda a: dict(xs=(a["xs"][0], _normal((2, 5)), a["xs"][2])),
        r"xs\[1\] must have shape \(\.\.\., n_2\) with n_2 = 4",
        "layer_width",
    ),
    C(
        pcn.energy,
        "finite",
        pc_net,
        lambda a: dict(xs=(a["xs"][0], _nan_at(a["xs"][1]), a["xs"][2])),
        r"xs\[1\] must be finite",
        "nan",
    ),
    C(
        pcn.energy,
        "dtype",
        pc_net,
        lambda a: dict(xs=(_ints(a["xs"][0]),) + a["xs"][1:]),
        r"xs\[0\] must have a floating dtype",
        "int_xs",
    ),
    C(
        pcn.energy,
        "positive",
        pc_net,
        lambda a: dict(precisions=jnp.array([0.0, 1.0, 0.0])),
        r"precisions must be finite",
        "zero_prec",
    ),
    C(
        pcn.init_params,
        "K",
        lambda: dict(sizes=(3, 2), key=KEY),
        lambda a: dict(sizes=(3,)),
        r"sizes must be a sequence of L >= 2",
        "one_layer",
    ),
    C(
        mpc.predict,
        "shape",
        lambda: dict(params=pc_mixture()["params"], mu=_normal((2, 2))),
        lambda a: dict(mu=_normal((2, 3))),
        r"mu must have shape \(\.\.\., m\) with m = params.W1.shape\[1\] = 2",
        "mu_width",
    ),
    C(
        mpc.predict,
        "finite",
        lambda: dict(params=pc_mixture()["params"], mu=_normal((2, 2))),
        lambda a: dict(mu=_nan_at(a["mu"])),
        r"mu must be finite",
        "nan_mu",
    ),
]


# ---------------------------------------------------------------------------
# More factories (attention, predictive coding, rbm, slds, slot attention,
# diffusion, sharding) for the audit cases and the integer-dtype sweep below
# ---------------------------------------------------------------------------


def tokens_args():
    params = attention.Params(wq=_normal((2, 3)), wk=_normal((2, 4), 1))
    return dict(params=params, xq=_normal((2, 3), 2), xk=_normal((5, 4), 3), beta=0.9)


def prior_args():
    return dict(sim=_normal((2, 3)), prior=jnp.full((2, 3), 1 / 3))


def cccp_args():
    return dict(mu0=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2), n_steps=2)


def pc_mlp():
    return dict(params=mpc.init_params(2, 5, 3, key=KEY), mu=_normal((2, 2)))


def pc_lipschitz():
    a = pc_mixture()
    return dict(params=a["params"], x=a["x"])


def pc_fit():
    a = pc_mixture()
    return dict(
        params=a["params"],
        x=a["x"],
        mu0=a["mu"],
        optimizer=optax.sgd(1e-2),
        n_steps=1,
        n_infer_steps=1,
        n_learn_steps=1,
    )


def pc_sample():
    return dict(
        teacher=mpc.init_params(2, 5, 3, key=KEY),
        num_clusters=2,
        points_per_cluster=3,
        key=KEY,
        latent_centres=_normal((2, 2)),
    )


def pcn_forward_args():
    return dict(params=pc_net()["params"], x=_normal((2, 3)))


def pcn_infer_args():
    a = pc_net()
    return dict(params=a["params"], xs0=a["xs"], precisions=a["precisions"], clamp=(True, False, False), n_steps=2)


def pcn_train_args():
    return dict(
        params=pc_net()["params"],
        x=_normal((4, 3)),
        y=_normal((4, 2), 1),
        key=KEY,
        optimizer=optax.sgd(1e-2),
        n_epochs=1,
        batch_size=2,
        n_infer_steps=2,
    )


def pcn_classify_args():
    return dict(params=pc_net()["params"], x=_normal((2, 3)), n_steps=2)


def pcn_generate_args():
    return dict(params=pc_net()["params"], y=_normal((2, 2)), n_steps=2)


def anpc_args():
    A = np.zeros((3, 3), bool)
    A[1, 0] = A[2, 0] = A[2, 1] = True
    params = anpc.Params(weights=_normal((3, 3)), biases=0.1 * _normal((3, 3), 1), adjacency=jnp.asarray(A))
    return dict(params=params, x=_normal((2, 3), 2), precisions=jnp.array([1.0, 0.5, 2.0]))


def anpc_lipschitz_args():
    a = anpc_args()
    return dict(params=a["params"], precisions=a["precisions"], clamp=jnp.array([True, False, False]), radius=3.0)


def anpc_infer_args():
    a = anpc_args()
    return dict(
        params=a["params"],
        x0=a["x"],
        precisions=a["precisions"],
        clamp=jnp.array([True, False, False]),
        n_steps=2,
        step_size=0.05,
    )


def emb_args():
    params = emb.Params(U=0.5 * _normal((4, 2)), V=0.5 * _normal((4, 2), 1))
    counts = jnp.asarray([[1.0, 2, 1, 1], [2, 1, 3, 1], [1, 3, 1, 2], [1, 1, 2, 1]])
    return dict(params=params, x=counts)


def emb_params_only():
    return dict(params=emb_args()["params"])


def emb_counts_only():
    return dict(x=emb_args()["x"])


def emb_ns():
    return dict(emb_args(), noise=jnp.full((4,), 0.25), n_negatives=2)


def emb_sampled():
    return dict(
        params=emb_args()["params"],
        centres=jnp.asarray([0, 1, 2]),
        contexts=jnp.asarray([1, 2, 3]),
        negatives=jnp.asarray([[2, 3], [0, 3], [1, 0]]),
    )


_EMB_SGD = optax.sgd(0.1)  # one object: the optimizer is a static (hashed) argument of the jitted fit


def emb_fit():
    a = emb_args()
    return dict(params=a["params"], x=a["x"], optimizer=_EMB_SGD, n_steps=3)


def emb_chain():
    return dict(transition=emb.ring_transition(5), n_tokens=10, key=KEY)


def emb_cos():
    return dict(a=_normal((4, 3)), b=_normal((2, 3), 1))


def emb_analogy():
    return dict(emb=_normal((5, 3)), a=jnp.asarray([0, 1]), b=jnp.asarray([1, 2]), c=jnp.asarray([2, 3]))


def emb_cooc():
    return dict(tokens=jnp.asarray([0, 1, 2, 1, 0]), n_vocab=3, window=1)


CASES += [
    # embedding
    C(
        emb.softmax_loss,
        "shape",
        emb_args,
        lambda a: dict(x=jnp.ones((3, 3))),
        r"x must have shape \(n_vocab, n_vocab\) = \(4, 4\)",
        "counts_shape",
    ),
    C(
        emb.scores,
        "shape",
        emb_params_only,
        lambda a: dict(params=a["params"]._replace(V=jnp.ones((4, 3)))),
        r"params.V must have shape \(n_vocab, dim\) with dim = 2",
        "V_shape",
    ),
    C(
        emb.negative_sampling_loss,
        "shape",
        emb_ns,
        lambda a: dict(noise=jnp.full((3,), 1 / 3)),
        r"noise must have shape \(n_vocab,\) = \(4,\)",
        "noise_shape",
    ),
    C(
        emb.sampled_negative_sampling_loss,
        "shape",
        emb_sampled,
        lambda a: dict(contexts=jnp.asarray([1, 2])),
        r"must share their first dimension",
        "pairs_mismatch",
    ),
    C(
        emb.skipgram_pairs,
        "shape",
        lambda: dict(tokens=jnp.asarray([0, 1, 2]), window=1),
        lambda a: dict(tokens=jnp.zeros((2, 3), jnp.int32)),
        r"tokens must have 1 dimension",
        "tokens_2d",
    ),
    C(
        emb.sample_chain,
        "shape",
        emb_chain,
        lambda a: dict(transition=jnp.full((2, 3), 1 / 3)),
        r"transition must be a square",
        "not_square",
    ),
    C(
        emb.cosine,
        "shape",
        emb_cos,
        lambda a: dict(b=jnp.ones((2, 2))),
        r"b has dimension d = 2 but a have d = 3",
        "b_width",
    ),
    C(
        emb.energy,
        "finite",
        emb_args,
        lambda a: dict(x=_nan_at(a["x"])),
        r"x must be finite",
        "nan_counts",
    ),
    C(
        emb.grad_params,
        "finite",
        emb_args,
        lambda a: dict(params=a["params"]._replace(U=_nan_at(a["params"].U))),
        r"params.U must be finite",
        "nan_U",
    ),
    C(emb.cosine, "finite", emb_cos, lambda a: dict(a=_nan_at(a["a"])), r"a must be finite", "nan_a"),
    C(
        emb.init_params,
        "K",
        lambda: dict(n_vocab=4, dim=2, key=KEY),
        lambda a: dict(dim=0),
        r"dim must be an integer >= 1",
        "zero_dim",
    ),
    C(
        emb.negative_sampling_loss,
        "K",
        emb_ns,
        lambda a: dict(n_negatives=0),
        r"n_negatives must be an integer >= 1",
        "zero_k",
    ),
    C(emb.cooccurrence, "K", emb_cooc, lambda a: dict(window=0), r"window must be an integer >= 1", "zero_window"),
    C(
        emb.ring_transition,
        "K",
        lambda: dict(n_vocab=5),
        lambda a: dict(n_vocab=2),
        r"n_vocab must be an integer >= 3",
        "tiny_ring",
    ),
    C(emb.fit, "K", emb_fit, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(
        emb.fit,
        "K",
        emb_fit,
        lambda a: dict(batch_size=0, key=KEY),
        r"batch_size must be an integer >= 1",
        "zero_batch",
    ),
    C(
        emb.init_params,
        "positive",
        lambda: dict(n_vocab=4, dim=2, key=KEY),
        lambda a: dict(scale=0.0),
        r"scale must be a finite scalar > 0",
        "zero_scale",
    ),
    C(
        emb.noise_distribution,
        "positive",
        emb_counts_only,
        lambda a: dict(power=0.0),
        r"power must be a finite scalar > 0",
        "zero_power",
    ),
    C(
        emb.ring_transition,
        "positive",
        lambda: dict(n_vocab=5),
        lambda a: dict(stay=-0.1),
        r"stay must be a finite scalar in \[0, 1\)",
        "negative_stay",
    ),
    C(
        emb.init_params,
        "dtype",
        lambda: dict(n_vocab=4, dim=2, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(
        emb.cooccurrence,
        "dtype",
        emb_cooc,
        lambda a: dict(tokens=jnp.asarray([0.0, 1.0])),
        r"tokens must hold integer token ids",
        "float_tokens",
    ),
    C(
        emb.analogy,
        "dtype",
        emb_analogy,
        lambda a: dict(a=jnp.asarray([0.0, 1.0])),
        r"a must hold integer token ids",
        "float_a",
    ),
    C(
        emb.softmax_loss,
        "domain",
        emb_args,
        lambda a: dict(x=-a["x"]),
        r"x must be non-negative",
        "negative_counts",
    ),
    C(
        emb.pmi,
        "domain",
        emb_counts_only,
        lambda a: dict(x=jnp.zeros((4, 4))),
        r"x must have a positive total",
        "zero_counts",
    ),
    C(
        emb.negative_sampling_loss,
        "domain",
        emb_ns,
        lambda a: dict(noise=jnp.full((4,), 0.5)),
        r"noise must be a probability vector",
        "noise_sum",
    ),
    C(
        emb.cooccurrence,
        "domain",
        emb_cooc,
        lambda a: dict(tokens=jnp.asarray([0, 3])),
        r"tokens must hold token ids in 0..2",
        "token_range",
    ),
    C(
        emb.sample_chain,
        "domain",
        emb_chain,
        lambda a: dict(transition=jnp.full((3, 3), 0.5)),
        r"transition must be row-stochastic",
        "not_stochastic",
    ),
    C(
        emb.ring_transition,
        "domain",
        lambda: dict(n_vocab=5),
        lambda a: dict(stay=1.0),
        r"stay must be a finite scalar in \[0, 1\)",
        "stay_one",
    ),
    C(emb.cosine, "domain", emb_cos, lambda a: dict(a=a["a"].at[0].set(0.0)), r"non-zero rows", "zero_row"),
    C(emb.fit, "domain", emb_fit, lambda a: dict(objective="nce"), r"objective must be one of", "objective"),
    C(
        emb.log_partition,
        "type",
        emb_params_only,
        lambda a: dict(params=(a["params"].U, a["params"].V)),
        r"params must be embedding.Params",
        "tuple_params",
    ),
    C(emb.fit, "type", emb_fit, lambda a: dict(optimizer=None), r"optimizer must be an optax", "no_optimizer"),
    C(
        emb.fit,
        "type",
        emb_fit,
        lambda a: dict(batch_size=2),
        r"key is required when batch_size is given",
        "batch_without_key",
    ),
]


def rbm_params_only():
    return dict(params=rbm_args()["params"])


def rbm_hidden():
    return dict(params=rbm_args()["params"], h=rbm_joint()["h"])


def rbm_keyed():
    return dict(rbm_args(), key=KEY)


def rbm_keyed_hidden():
    return dict(rbm_hidden(), key=KEY)


def rbm_gibbs():
    return dict(params=rbm_args()["params"], v0=rbm_args()["v"], n_steps=2, key=KEY)


def rbm_fit():
    return dict(
        params=rbm_args()["params"], x=rbm_args()["v"], key=KEY, optimizer=optax.sgd(0.05), n_epochs=1, batch_size=2
    )


def slds_params_only():
    return dict(params=slds_energy()["params"])


def slds_m_step():
    return dict(x=_normal((8, 2), 3), resp=jnp.tile(jnp.array([[0.3, 0.7]]), (7, 1)))


def slds_impute():
    return dict(slds_energy(), missing=[3, 4], n_steps=2)


def slot_e_step():
    return dict(slot_args(), n_steps=2)


def slot_fit():
    a = slot_args()
    w_q = jnp.linalg.qr(a["params"].w_q)[0]  # orthonormal columns, as procrustes needs
    return dict(params=a["params"]._replace(w_q=w_q), x=a["x"], mu=a["mu"], n_steps=1)


def slot_procrustes():
    a = slot_fit()
    return dict(params=a["params"], x=a["x"], mu=a["mu"], a=jnp.full((5, 3), 1.0 / 3.0))


def diffusion_x0():
    return dict(schedule=diffusion.linear_schedule(20), x0=_normal((3, 2)), t=4)


def diffusion_posterior():
    return dict(diffusion_x0(), xt=_normal((3, 2), 1))


def diffusion_reverse():
    return dict(schedule=diffusion.linear_schedule(20), xt=_normal((3, 2)), t=4, eps=_normal((3, 2), 1))


def diffusion_sample():
    return dict(
        eps_fn=diffusion.ideal_epsilon,
        params=_normal((5, 2)),
        schedule=diffusion.linear_schedule(20),
        n_samples=2,
        dim=2,
        key=KEY,
    )


def diffusion_fit():
    a = diffusion_mlp()
    return dict(
        params=a["params"],
        x=_normal((5, 2)),
        schedule=a["schedule"],
        optimizer=optax.sgd(1e-3),
        key=KEY,
        n_steps=1,
        batch_size=2,
    )


def sharding_em():
    return dict(params=gmm_energy()["params"], x=_normal((10, 2)), mesh=sharding.data_mesh(1))


def sharding_fit():
    return dict(x=_normal((30, 2)), n_components=2, mesh=sharding.data_mesh(1), key=KEY, max_iter=3)


def sharding_retrieve():
    return dict(hopfield_args(), mesh=sharding.data_mesh(1), n_steps=2)


def _replace_params(field, make_bad):
    return lambda a: dict(params=a["params"]._replace(**{field: make_bad(getattr(a["params"], field))}))


# Audit cases: checks added for issue 8 in attention, predictive coding, rbm,
# slds, diffusion and sharding.
CASES += [
    # attention
    C(
        attention.multihead_attention,
        "K",
        mha_args,
        lambda a: dict(params=attention.MultiHeadParams(*(p[:0] for p in a["params"]))),
        r"at least one head \(H >= 1\)",
        "no_heads",
    ),
    C(
        attention.multihead_attention,
        "mask",
        lambda: dict(mha_args(), mask=jnp.ones((3, 3), bool)),
        lambda a: dict(mask=a["mask"].at[2].set(False)),
        r"mask: query .*no allowed key: a fully masked row(?!.*allow_empty)",
        "empty_row",
    ),
    C(
        attention.multihead_attention,
        "shape",
        mha_args,
        lambda a: dict(xkv=_normal((5, 3))),
        r"xq and xkv must have width d_model=4",
        "xkv_width",
    ),
    C(
        attention.multihead_attention,
        "dtype",
        mha_args,
        _replace_params("wv", _ints),
        r"params\.wv must have a floating dtype",
        "int_wv",
    ),
    C(
        attention.prior_energy,
        "K",
        prior_args,
        lambda a: dict(sim=jnp.zeros((2, 0)), prior=jnp.zeros((2, 0))),
        r"sim must have at least one parent \(P >= 1\)",
        "no_parents",
    ),
    C(
        attention.prior_energy,
        "mask",
        prior_args,
        lambda a: dict(prior=a["prior"].at[1].set(0.0)),
        r"prior must be non-negative with rows summing to one",
        "empty_row",
    ),
    C(
        attention.prior_energy,
        "finite",
        prior_args,
        lambda a: dict(sim=_nan_at(a["sim"], 4)),
        r"sim must be finite",
        "nan_sim",
    ),
    C(
        structural.cccp,
        "K",
        cccp_args,
        lambda a: dict(mu0=jnp.zeros((0, 3))),
        r"mu0 and x must each have at least one row",
        "no_latents",
    ),
    C(structural.cccp, "finite", cccp_args, lambda a: dict(x=_nan_at(a["x"], 2)), r"x must be finite", "nan_x"),
    C(
        attention.init_params,
        "K",
        lambda: dict(d_in=3, d_k=2, key=KEY),
        lambda a: dict(d_k=0),
        r"d_k must be an integer >= 1",
        "zero_dk",
    ),
    C(
        attention.init_multihead,
        "dtype",
        lambda: dict(d_model=4, n_heads=2, key=KEY),
        lambda a: dict(n_heads=2.0),
        r"n_heads must be an integer >= 1",
        "float_heads",
    ),
    C(
        attention.causal_mask,
        "dtype",
        lambda: dict(n=3, m=5),
        lambda a: dict(n=2.5),
        r"n must be an integer >= 1",
        "float_n",
    ),
    C(
        attention.relative_position_bias,
        "shape",
        lambda: dict(table=_normal(5), n=3),
        lambda a: dict(n=4),
        r"table must have 2n - 1 = 7 entries",
        "table_length",
    ),
    C(
        attention.sinusoidal_encoding,
        "positive",
        lambda: dict(n=3, d=4),
        lambda a: dict(base=np.nan),
        r"base must be a finite scalar > 1",
        "nan_base",
    ),
    C(
        attention.sinusoidal_shift,
        "dtype",
        lambda: dict(offset=1.0, d=4),
        lambda a: dict(d=True),
        r"d must be an integer >= 2; got True",
        "bool_d",
    ),
    C(
        attention.token_energy,
        "finite",
        tokens_args,
        _replace_params("wk", lambda w: _nan_at(w, 1)),
        r"params\.wk must be finite",
        "nan_wk",
    ),
    C(
        attention.token_energy,
        "beta",
        tokens_args,
        lambda a: dict(beta=-0.1),
        r"beta must be a finite scalar > 0",
        "negative",
    ),
    C(attention.attend, "finite", attend_args, lambda a: dict(v=_nan_at(a["v"], 3)), r"v must be finite", "nan_v"),
    C(
        attention.energy,
        "shape",
        cross_args,
        lambda a: dict(bias=jnp.zeros((3, 4))),
        r"bias of shape \(3, 4\) does not broadcast",
        "bias_shape",
    ),
    # predictive coding
    C(mpc.predict, "dtype", pc_mlp, _replace_params("b1", _ints), r"params\.b1 must have a floating dtype", "int_b1"),
    C(
        pcn.energy,
        "dtype",
        pc_net,
        lambda a: dict(precisions=np.array([0, 1, 2])),
        r"precisions must have a floating dtype",
        "int_precisions",
    ),
    C(
        anpc.energy,
        "dtype",
        anpc_args,
        lambda a: dict(precisions=np.array([1, 1, 2])),
        r"precisions must have a floating dtype",
        "int_precisions",
    ),
    C(anpc.energy, "finite", anpc_args, lambda a: dict(x=_nan_at(a["x"], 2)), r"x must be finite", "nan_x"),
    C(
        anpc.energy,
        "shape",
        anpc_args,
        lambda a: dict(x=_normal((2, 4))),
        r"x must have shape \(\.\.\., N\) with N = 3",
        "x_width",
    ),
    C(
        anpc.energy,
        "mask",
        anpc_args,
        _replace_params("adjacency", lambda A: np.asarray(A, np.int64)),
        r"params\.adjacency must be boolean",
        "int_adjacency",
    ),
    C(pcn.infer, "K", pcn_infer_args, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(mpc.infer, "K", pc_infer, lambda a: dict(n_steps=1.0), r"n_steps must be an integer >= 1", "float_steps"),
    C(anpc.infer, "K", anpc_infer_args, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(
        anpc.infer,
        "positive",
        anpc_infer_args,
        lambda a: dict(step_size=-0.1),
        r"step_size must be a finite scalar > 0",
        "negative_step",
    ),
    C(
        anpc.lipschitz,
        "positive",
        lambda: dict(params=anpc_args()["params"], clamp=np.array([True, False, False]), radius=1.0),
        lambda a: dict(radius=-1.0),
        r"radius",
        "negative_radius",
    ),
    # rbm
    C(
        rbm.energy,
        "domain",
        rbm_args,
        lambda a: dict(v=np.array([[1, 0, 2], [0, 1, 1]])),
        r"v must be binary \(entries 0 or 1\); got an int64 array",
        "int_v_not_binary",
    ),
    C(
        rbm.log_likelihood,
        "domain",
        lambda: dict(rbm_args(), log_z=rbm.log_partition(rbm_args()["params"])),
        lambda a: dict(v=jnp.full((2, 3), 0.5)),
        r"v must be binary",
        "nonbinary_v",
    ),
    C(
        rbm.grad_log_likelihood_params,
        "domain",
        rbm_args,
        lambda a: dict(v=jnp.full((2, 3), 0.5)),
        r"v must be binary",
        "nonbinary_v",
    ),
    C(rbm.energy_hidden, "finite", rbm_hidden, lambda a: dict(h=_nan_at(a["h"])), r"h must be finite", "nan_h"),
    C(rbm.gibbs, "K", rbm_gibbs, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(rbm.fit, "K", rbm_fit, lambda a: dict(batch_size=0), r"batch_size must be an integer >= 1", "zero_batch"),
    C(rbm.fit, "K", rbm_fit, lambda a: dict(monitor="yes"), r"monitor must be a bool", "monitor_not_bool"),
    # slds
    C(
        slds.m_step,
        "domain",
        slds_m_step,
        lambda a: dict(resp=-a["resp"]),
        r"resp must be non-negative",
        "negative_resp",
    ),
    C(
        slds.impute,
        "domain",
        slds_impute,
        lambda a: dict(missing=[9]),
        r"missing indices must lie in \[0, 7\]",
        "bad_index",
    ),
    # diffusion
    C(
        dmlp.epsilon,
        "finite",
        diffusion_mlp,
        lambda a: dict(
            params=a["params"]._replace(weights=(_nan_at(a["params"].weights[0]),) + a["params"].weights[1:])
        ),
        r"params\.weights\[0\] must be finite",
        "nan_weights",
    ),
    C(
        dmlp.epsilon,
        "shape",
        diffusion_mlp,
        lambda a: dict(params=a["params"]._replace(biases=(jnp.zeros(3),) + a["params"].biases[1:])),
        r"params\.biases\[0\] shape \(n_out,\)",
        "bias_shape",
    ),
    C(
        diffusion.kl_weight,
        "finite",
        lambda: dict(schedule=diffusion.linear_schedule(20), t=3, sigma2=0.01),
        lambda a: dict(sigma2=np.inf),
        r"sigma2 must be finite and > 0",
        "inf_sigma2",
    ),
    C(
        diffusion.kl_weight,
        "shape",
        lambda: dict(schedule=diffusion.linear_schedule(20), t=jnp.array([3, 4]), sigma2=0.01),
        lambda a: dict(sigma2=jnp.array([0.1, 0.2, 0.3])),
        r"sigma2 must be a scalar or have the shape of t",
        "sigma2_shape",
    ),
    # sharding (validation delegated to gmm/hopfield, dtype checked here)
    C(
        sharding.sharded_em_step,
        "shape",
        sharding_em,
        lambda a: dict(x=_normal((10, 3))),
        r"x has dimension 3 but params.means has d = 2",
        "x_dim",
    ),
    C(
        sharding.sharded_em_step,
        "finite",
        sharding_em,
        lambda a: dict(x=_nan_at(a["x"], 3)),
        r"x must be finite",
        "nan_x",
    ),
    C(
        sharding.sharded_fit,
        "K",
        sharding_fit,
        lambda a: dict(n_components=0),
        r"n_components must be an integer >= 1",
        "zero",
    ),
    C(
        sharding.sharded_retrieve,
        "beta",
        sharding_retrieve,
        lambda a: dict(beta=0.0),
        r"beta must be a finite scalar > 0",
        "zero",
    ),
    C(
        sharding.shard_rows,
        "shape",
        lambda: dict(a=_normal((5, 2)), mesh=sharding.data_mesh(1)),
        lambda a: dict(a=jnp.float64(1.0)),
        r"a must have at least one axis",
        "scalar",
    ),
    C(
        sharding.shard_rows,
        "type",
        lambda: dict(a=_normal((5, 2)), mesh=sharding.data_mesh(1)),
        lambda a: dict(mesh="data"),
        r"mesh must be a jax.sharding.Mesh",
        "not_a_mesh",
    ),
    # multihop and expanding (Singh & Buckley §5)
    C(multihop.attend, "shape", mh_args, lambda a: dict(v=_normal((3, 2))), r"v must have one row per key", "v_rows"),
    C(multihop.attend, "finite", mh_args, lambda a: dict(q=_nan_at(a["q"])), r"q must be finite", "nan_q"),
    C(multihop.attend, "beta", mh_args, lambda a: dict(beta=0.0), r"beta must be a finite scalar > 0", "zero_beta"),
    C(multihop.attend, "mask", mh_args, lambda a: dict(mask=jnp.zeros((4, 4), bool)), r"mask", "empty_rows"),
    C(multihop.attend, "type", mh_args, lambda a: dict(variant="three_hop"), r"variant must be one of", "variant"),
    C(
        multihop.attention,
        "type",
        mh_params_args,
        lambda a: dict(params=tuple(a["params"])),
        r"params must be multihop\.Params",
        "tuple_params",
    ),
    C(
        multihop.attention,
        "shape",
        mh_params_args,
        lambda a: dict(x=_normal((4, 5))),
        r"params\.wq must have shape",
        "x_width",
    ),
    C(
        multihop.hop_matrix,
        "shape",
        lambda: dict(p=jnp.full((3, 3), 1 / 3)),
        lambda a: dict(p=jnp.full((3, 2), 0.5)),
        r"p must be square",
        "not_square",
    ),
    C(expanding.attend, "shape", ex_args, lambda a: dict(k=_normal((2, 6, 4))), r"q and k must share", "k_width"),
    C(expanding.attend, "finite", ex_args, lambda a: dict(v=_nan_at(a["v"])), r"v must be finite", "nan_v"),
    C(
        expanding.attend,
        "K",
        ex_args,
        lambda a: dict(max_iter=-1),
        r"max_iter must be an integer >= 0",
        "negative_steps",
    ),
    C(
        expanding.attend,
        "positive",
        ex_args,
        lambda a: dict(alpha0=-1.0),
        r"alpha0 must be a finite scalar > 0",
        "alpha0",
    ),
    C(expanding.attend, "positive", ex_args, lambda a: dict(eps=1.5), r"eps must be a number in \(0, 1\)", "eps"),
    C(
        expanding.attend,
        "mask",
        ex_args,
        lambda a: dict(mask=jnp.ones((2, 6), bool).at[:, 0].set(False)),
        r"mask\[\.\.\., 0\] must be True",
        "no_nearest_key",
    ),
    C(
        expanding.energy,
        "domain",
        ex_sims_args,
        lambda a: dict(q=jnp.array([0.3, 1.5])),
        r"q must lie strictly between 0 and 1",
        "q_above_one",
    ),
    C(
        expanding.attention,
        "type",
        ex_params_args,
        lambda a: dict(params=multihop.Params(*a["params"])),
        r"params must be expanding\.Params",
        "multihop_params",
    ),
    C(
        expanding.attention,
        "shape",
        ex_params_args,
        lambda a: dict(x=_normal((2, 1, 3))),
        r"x must hold at least 2 tokens",
        "one_token",
    ),
]


def gan_args():
    p = gan.init_params(2, 2, key=KEY, generator_hidden=(3,), discriminator_hidden=(3,))
    return dict(params=p, x=_normal((4, 2)), z=_normal((3, 2), 1))


def gan_logits():
    return dict(logits=_normal(5), labels=jnp.asarray([0.0, 1.0, 1.0, 0.5, 0.0]))


def gan_fit():
    a = gan_args()
    return dict(
        params=a["params"],
        x=a["x"],
        key=KEY,
        d_optimizer=optax.sgd(1e-2),
        g_optimizer=optax.sgd(1e-2),
        n_steps=2,
        batch_size=2,
    )


def gan_fit_linear():
    """Linear discriminator, affine generator: a huge SGD step overflows the weights."""
    p = gan.init_params(2, 2, key=KEY, generator_hidden=(), discriminator_hidden=())
    return dict(
        params=p,
        x=_normal((8, 2)),
        key=KEY,
        d_optimizer=optax.sgd(1e-2),
        g_optimizer=optax.sgd(1e-2),
        n_steps=10,
        batch_size=4,
    )


def gan_mixture():
    return dict(centers=_normal((3, 2)), std=0.5, x=_normal((4, 2), 1))


def gan_coverage():
    return dict(samples=_normal((6, 2)), centers=_normal((3, 2), 1), std=0.5)


CASES += [
    C(
        gan.discriminator_loss,
        "shape",
        gan_args,
        lambda a: dict(x=_normal((4, 3))),
        r"x must have shape \(N, 2\)",
        "x_width",
    ),
    C(
        gan.generate,
        "shape",
        lambda: {k: v for k, v in gan_args().items() if k != "x"},
        lambda a: dict(z=_normal(3)),
        r"z must have shape \(N, 2\)",
        "z_1d",
    ),
    C(
        gan.logistic_loss,
        "shape",
        gan_logits,
        lambda a: dict(labels=jnp.zeros(4)),
        r"labels must have the shape of logits",
        "labels_len",
    ),
    C(gan.energy, "finite", gan_args, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_x"),
    C(
        gan.energy,
        "finite",
        gan_args,
        lambda a: dict(
            params=a["params"]._replace(
                discriminator=gan.MLP(
                    (_nan_at(a["params"].discriminator.weights[0]),) + a["params"].discriminator.weights[1:],
                    a["params"].discriminator.biases,
                )
            )
        ),
        r"params\.discriminator\.layers\[0\]\.weights must be finite",
        "nan_weight",
    ),
    C(
        gan.energy,
        "type",
        gan_args,
        lambda a: dict(params=tuple(a["params"])),
        r"params must be gan\.Params",
        "tuple_params",
    ),
    C(
        gan.energy,
        "shape",
        gan_args,
        lambda a: dict(params=a["params"]._replace(discriminator=a["params"].generator)),
        r"params\.discriminator\.layers\[1\]\.weights must have shape \(n_1, logit\) with logit = 1",
        "two_logits",
    ),
    C(
        gan.logistic_loss,
        "domain",
        gan_logits,
        lambda a: dict(labels=jnp.asarray([0.0, 1.0, 2.0, 0.5, 0.0])),
        r"labels must lie in \[0, 1\]",
        "label_2",
    ),
    C(
        gan.generator_loss,
        "domain",
        lambda: {k: v for k, v in gan_args().items() if k != "x"},
        lambda a: dict(generator_loss="wasserstein"),
        r"generator_loss must be one of",
        "unknown_loss",
    ),
    C(
        gan.init_params,
        "K",
        lambda: dict(noise_dim=2, data_dim=2, key=KEY),
        lambda a: dict(data_dim=0),
        r"data_dim must be an integer >= 1",
        "zero_dim",
    ),
    C(
        gan.init_mlp,
        "K",
        lambda: dict(sizes=(2, 3), key=KEY),
        lambda a: dict(sizes=(2,)),
        r"sizes must be a tuple of at least two",
        "one_layer",
    ),
    C(
        gan.init_params,
        "dtype",
        lambda: dict(noise_dim=2, data_dim=2, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(
        gan.sample_mixture,
        "positive",
        lambda: dict(centers=_normal((3, 2)), std=0.5, n_samples=4, key=KEY),
        lambda a: dict(std=0.0),
        r"std must be a finite scalar > 0",
        "zero_std",
    ),
    C(
        gan.mode_coverage,
        "positive",
        gan_coverage,
        lambda a: dict(min_fraction=1.5),
        r"min_fraction must be a number in \(0, 1\)",
        "fraction_above_one",
    ),
    C(
        gan.mixture_log_density,
        "shape",
        gan_mixture,
        lambda a: dict(x=_normal((4, 3))),
        r"x has dimension d = 3 but centers have d = 2",
        "x_width",
    ),
    C(gan.fit, "K", gan_fit, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(gan.fit, "type", gan_fit, lambda a: dict(d_optimizer=None), r"d_optimizer must be an optax", "no_optimizer"),
    C(gan.fit, "type", gan_fit, lambda a: dict(train_generator=1), r"train_generator must be a bool", "int_flag"),
]


def gru_min_args():
    p = gru.init_min_params(3, 4, 2, key=KEY)
    return dict(params=p, x=_normal((2, 5, 3)))


def gru_gru_args():
    return dict(params=gru.init_params(3, 4, 2, key=KEY), x=_normal((2, 5, 3)))


def gru_cell_args():
    return dict(params=gru.init_params(3, 4, 2, key=KEY), h=_normal((2, 4)), x=_normal((2, 3), 1))


def gru_scan_args():
    return dict(a=jnp.asarray(_rng(1).uniform(0.1, 0.9, (6, 2))), b=_normal((6, 2)), h0=_normal(2, 1))


def gru_log_scan_args():
    return dict(
        log_a=jnp.log(jnp.asarray(_rng(1).uniform(0.1, 0.9, (6, 2)))), log_b=_normal((6, 2)), log_h0=_normal(2, 1)
    )


def gru_signed_args():
    a = gru_scan_args()
    return dict(log_a=jnp.log(a["a"]), b=a["b"], h0=a["h0"])


def gru_grad_args():
    return dict(gru_log_scan_args(), cotangent=_normal((6, 2), 2))


def gru_labelled():
    return dict(gru_min_args(), y=jnp.array([0, 1]))


def gru_fit():
    return dict(
        params=gru.init_min_params(3, 4, 2, key=KEY),
        x=_normal((6, 5, 3)),
        y=jnp.array([0, 1, 0, 1, 1, 0]),
        key=KEY,
        optimizer=optax.adam(1e-2),
        n_epochs=2,
        batch_size=3,
    )


CASES += [
    C(
        gru.min_gru,
        "shape",
        gru_min_args,
        lambda a: dict(x=_normal((5, 3))),
        r"x must have shape \(B, N, D\)",
        "xs_2d",
    ),
    C(gru.min_gru, "shape", gru_min_args, lambda a: dict(x=_normal((2, 5, 4))), r"x has D = 4 features", "xs_D"),
    C(gru.min_gru, "finite", gru_min_args, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_xs"),
    C(
        gru.min_gru,
        "type",
        gru_min_args,
        lambda a: dict(params=tuple(a["params"])),
        r"params must be gru\.MinParams; got tuple",
        "tuple_params",
    ),
    C(
        gru.min_gru,
        "type",
        gru_min_args,
        lambda a: dict(params=gru.init_params(3, 4, 2, key=KEY)),
        r"params must be gru\.MinParams",
        "gru_params",
    ),
    C(gru.min_gru, "domain", gru_min_args, lambda a: dict(method="fast"), r"method must be one of", "method"),
    C(
        gru.min_gru,
        "shape",
        gru_min_args,
        _replace_params("V", lambda v: v[:, :1]),
        r"params\.c must have shape \(K,\) with K = 1",
        "readout",
    ),
    C(
        gru.gru,
        "type",
        gru_gru_args,
        lambda a: dict(params=gru.init_min_params(3, 4, 2, key=KEY)),
        r"params must be gru\.Params",
        "min_params",
    ),
    C(
        gru.gru,
        "shape",
        gru_gru_args,
        _replace_params("W", lambda w: w[:, :3]),
        r"params\.W must have shape \(H, H\) with H = 4",
        "W",
    ),
    C(gru.gru_cell, "shape", gru_cell_args, lambda a: dict(h=_normal((2, 3))), r"h must end in H = 4", "h"),
    C(
        gru.init_params,
        "K",
        lambda: dict(d_in=3, d_hidden=4, n_classes=2, key=KEY),
        lambda a: dict(d_hidden=0),
        r"d_hidden must be an integer >= 1",
        "zero_hidden",
    ),
    C(
        gru.init_min_params,
        "K",
        lambda: dict(d_in=3, d_hidden=4, n_classes=2, key=KEY),
        lambda a: dict(n_classes=0),
        r"n_classes must be an integer >= 1",
        "zero_classes",
    ),
    C(gru.scan_parallel, "shape", gru_scan_args, lambda a: dict(h0=_normal(3)), r"h0 must have shape \(2,\)", "h0"),
    C(
        gru.scan_sequential,
        "shape",
        gru_scan_args,
        lambda a: dict(b=_normal((5, 2))),
        r"a and b must share one shape",
        "b_rows",
    ),
    C(gru.scan_cumprod, "finite", gru_scan_args, lambda a: dict(a=_nan_at(a["a"])), r"a must be finite", "nan_a"),
    C(
        gru.scan_log,
        "domain",
        gru_log_scan_args,
        lambda a: dict(log_b=_nan_at(a["log_b"])),
        r"log_b must be finite or -inf",
        "nan_log_b",
    ),
    C(gru.scan_log, "shape", gru_log_scan_args, lambda a: dict(log_h0=_normal(3)), r"log_h0 \(2,\)", "log_h0"),
    C(gru.scan_log_signed, "shape", gru_signed_args, lambda a: dict(h0=_normal(3)), r"h0 must have shape", "h0"),
    C(
        gru.grad_scan_log,
        "shape",
        gru_grad_args,
        lambda a: dict(cotangent=_normal((5, 2))),
        r"must share shape",
        "cotangent",
    ),
    C(gru.loss, "domain", gru_labelled, lambda a: dict(y=jnp.array([0, 2])), r"y must lie in 0\.\.K-1", "label_K"),
    C(
        gru.accuracy,
        "dtype",
        gru_labelled,
        lambda a: dict(y=jnp.array([0.0, 1.0])),
        r"y must be \(2,\) integer",
        "float_labels",
    ),
    C(gru.fit, "type", gru_fit, lambda a: dict(optimizer=None), r"optimizer must be an optax", "optimizer"),
    C(gru.fit, "K", gru_fit, lambda a: dict(n_epochs=0), r"n_epochs must be an integer >= 1", "zero_epochs"),
    C(gru.fit, "shape", gru_fit, lambda a: dict(batch_size=7), r"batch_size must be <= B = 6", "big_batch"),
    C(
        gru.fit,
        "domain",
        gru_fit,
        lambda a: dict(method="log"),
        r"method must be one of 'sequential', 'parallel'",
        "log_training",
    ),
    C(
        gru.fit,
        "shape",
        gru_fit,
        lambda a: dict(x_eval=_normal((2, 5, 3))),
        r"x_eval and y_eval must be given together",
        "eval_pair",
    ),
]


# ---------------------------------------------------------------------------
# Integer dtypes: one case per public function that takes a continuous array
# ---------------------------------------------------------------------------
#
# The policy (issue 8): continuous-valued arrays (parameters, states,
# queries/keys/values, observations of continuous models, responsibilities,
# precisions) given with an integer or boolean dtype raise a ValueError naming
# the argument; inherently discrete data (RBM unit states, labels, masks, time
# steps, indices, counts) keep their natural dtypes. Each entry below is
# (function, valid-argument factory, the continuous argument made integer);
# a "params.<field>" argument replaces one field of the params NamedTuple.

_DTYPE = r"must have a floating dtype"


def _int_case(fn, valid, arg, name=None):
    """The case for ``arg`` made integer; ``name`` is the argument the message names, if not ``arg``."""
    if arg.startswith("params."):
        field = arg.split(".", 1)[1]
        bad = _replace_params(field, _ints)
    elif arg.startswith("xs["):
        bad = lambda a: dict(xs=(_ints(a["xs"][0]),) + tuple(a["xs"][1:]))  # noqa: E731
    elif arg.startswith("xs0["):
        bad = lambda a: dict(xs0=(_ints(a["xs0"][0]),) + tuple(a["xs0"][1:]))  # noqa: E731
    else:
        bad = lambda a: {arg: _ints(a[arg])}  # noqa: E731
    label = "int_" + re.sub(r"\W+", "_", arg).strip("_")
    return C(fn, "dtype", valid, bad, re.escape(name or arg) + " " + _DTYPE, label)


def pop_params():
    return population.init_params(1, 5, key=KEY)


def pop_acts():
    x = jnp.linspace(-1.0, 1.0, 8)
    return dict(activities=population.activities(pop_params(), x, lif.rate), targets=x, sigma=10.0)


def pop_x():
    return dict(params=pop_params(), x=jnp.linspace(-1.0, 1.0, 4))


def pop_loss():
    return dict(pop_acts(), decoders=jnp.full((5,), 1e-3))


def pop_weights():
    return dict(decoders=jnp.full((5,), 1e-3), post=population.init_params(1, 4, key=KEY))


def pop_feedforward():
    return dict(
        pre_activities=pop_acts()["activities"],
        weights=jnp.full((5, 4), 1e-3),
        post=population.init_params(1, 4, key=KEY),
        nonlinearity=lif.rate,
    )


def pop_nef():
    return dict(a=jnp.zeros((1, 1)), b=jnp.ones((1, 1)), tau=0.1)


def pop_sim():
    return dict(
        params=pop_params(),
        nonlinearity=lif.rate,
        decoders=jnp.full((5, 1), 1e-3),
        a_prime=jnp.eye(1),
        b_prime=jnp.full((1, 1), 0.1),
        u=jnp.ones((3, 1)),
        y0=jnp.zeros(1),
        tau=0.1,
        dt=0.01,
    )


def pop_bayes():
    return dict(
        counts=jnp.asarray([[1.0, 0.0, 3.0], [2.0, 1.0, 0.0]]),
        expected_counts=jnp.asarray([[1.0, 0.5, 2.0], [0.3, 1.5, 1.0], [2.0, 2.0, 0.2]]),
    )


def lif_currents():
    return dict(currents=jnp.asarray([0.5, 1.5, 4.0]))


def lif_sim():
    return dict(lif_currents(), dt=1e-4, n_steps=20)


CASES += [
    # population
    C(
        population.currents,
        "shape",
        pop_x,
        lambda a: dict(x=jnp.ones((4, 2))),
        r"x must have shape \(M, 1\)",
        "x_width",
    ),
    C(
        population.decoders,
        "shape",
        pop_acts,
        lambda a: dict(targets=jnp.ones(3)),
        r"targets must have shape \(8,\)",
        "targets_rows",
    ),
    C(
        population.decode,
        "shape",
        lambda: dict(activities=pop_acts()["activities"], decoders=jnp.full((5,), 1e-3)),
        lambda a: dict(decoders=jnp.ones(4)),
        r"decoders must have shape \(5,\)",
        "decoders_rows",
    ),
    C(
        population.connection_weights,
        "shape",
        pop_weights,
        lambda a: dict(decoders=jnp.ones((5, 2))),
        r"decoders must have shape \(N_A, 1\)",
        "decoders_cols",
    ),
    C(
        population.feedforward,
        "shape",
        pop_feedforward,
        lambda a: dict(weights=jnp.ones((3, 4))),
        r"weights must have shape \(5, N_post\)",
        "weights_rows",
    ),
    C(population.nef_matrices, "shape", pop_nef, lambda a: dict(a=jnp.ones((1, 2))), r"a must be square", "a_square"),
    C(population.simulate, "shape", pop_sim, lambda a: dict(y0=jnp.zeros(2)), r"y0 must have shape \(1,\)", "y0_shape"),
    C(
        population.energy,
        "shape",
        pop_bayes,
        lambda a: dict(counts=jnp.ones((2, 4))),
        r"counts must have shape \(3,\) or \(M, 3\)",
        "counts_width",
    ),
    C(
        population.decoders,
        "finite",
        pop_acts,
        lambda a: dict(activities=_nan_at(a["activities"])),
        r"activities must be finite",
        "nan_activities",
    ),
    C(
        population.energy,
        "finite",
        pop_bayes,
        lambda a: dict(counts=_nan_at(a["counts"])),
        r"counts must be finite",
        "nan_counts",
    ),
    C(population.simulate, "finite", pop_sim, lambda a: dict(u=_nan_at(a["u"])), r"u must be finite", "nan_u"),
    C(
        population.init_params,
        "K",
        lambda: dict(d=1, n_neurons=3, key=KEY),
        lambda a: dict(n_neurons=0),
        r"n_neurons must be an integer >= 1",
        "no_neurons",
    ),
    C(
        population.decoders,
        "positive",
        pop_acts,
        lambda a: dict(sigma=0.0),
        r"sigma must be a finite scalar > 0",
        "zero_sigma",
    ),
    C(
        population.nef_matrices,
        "positive",
        pop_nef,
        lambda a: dict(tau=-1.0),
        r"tau must be a finite scalar > 0",
        "negative_tau",
    ),
    C(population.simulate, "positive", pop_sim, lambda a: dict(dt=0.5), r"dt must be at most tau", "dt_over_tau"),
    C(
        population.init_params,
        "dtype",
        lambda: dict(d=1, n_neurons=3, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(
        population.init_params,
        "domain",
        lambda: dict(d=1, n_neurons=3, key=KEY),
        lambda a: dict(intercepts=(-1.5, 0.5)),
        r"intercepts must lie in",
        "intercepts",
    ),
    C(
        population.energy,
        "domain",
        pop_bayes,
        lambda a: dict(counts=-a["counts"]),
        r"counts must be >= 0",
        "negative_counts",
    ),
    C(
        population.posterior,
        "domain",
        pop_bayes,
        lambda a: dict(expected_counts=a["expected_counts"] * 0.0),
        r"expected_counts must be > 0",
        "silent_neuron",
    ),
    C(
        population.activities,
        "type",
        lambda: dict(pop_x(), nonlinearity=lif.rate),
        lambda a: dict(nonlinearity=None),
        r"nonlinearity must be callable",
        "nonlinearity",
    ),
    C(
        population.currents,
        "type",
        pop_x,
        lambda a: dict(params=tuple(a["params"])),
        r"params must be population.Params",
        "params_tuple",
    ),
    # lif
    C(
        lif.rate,
        "shape",
        lif_currents,
        lambda a: dict(tau_rc=jnp.ones(2)),
        r"tau_rc must be a finite scalar > 0",
        "tau_rc_array",
    ),
    C(
        lif.simulate,
        "shape",
        lif_sim,
        lambda a: dict(currents=jnp.ones((2, 2))),
        r"currents must have 1 dimensions",
        "currents_2d",
    ),
    C(
        lif.rate,
        "finite",
        lif_currents,
        lambda a: dict(currents=_nan_at(a["currents"])),
        r"currents must be finite",
        "nan_currents",
    ),
    C(lif.simulate, "K", lif_sim, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "no_steps"),
    C(
        lif.rate,
        "positive",
        lif_currents,
        lambda a: dict(tau_rc=0.0),
        r"tau_rc must be a finite scalar > 0",
        "zero_tau_rc",
    ),
    C(lif.simulate, "positive", lif_sim, lambda a: dict(dt=0.05), r"dt must be smaller than tau_rc", "dt_over_tau"),
    C(
        lif.euler_rate,
        "positive",
        lambda: dict(lif_currents(), dt=1e-4),
        lambda a: dict(tau_ref=-1.0),
        r"tau_ref must be a finite scalar >= 0",
        "negative_tau_ref",
    ),
]


def gmm_free():
    return dict(gmm_energy(), resp=jnp.full((10, 2), 0.5))


def gmm_init():
    return dict(x=_normal((30, 2)), n_components=2, key=KEY)


INT_INPUTS = [
    # gru: parameters, sequences, coefficients are continuous (labels are integer data)
    (gru.param_count, lambda: dict(params=gru_min_args()["params"]), "params.U"),
    (gru.sigmoid, lambda: dict(a=_normal(3)), "a"),
    (gru.log_sigmoid, lambda: dict(a=_normal(3)), "a"),
    (gru.gru_cell, gru_cell_args, "h"),
    (gru.gru, gru_gru_args, "x"),
    (gru.min_coefficients, gru_min_args, "params.U_g"),
    (gru.min_gru, gru_min_args, "x"),
    (gru.scan_sequential, gru_scan_args, "a"),
    (gru.scan_parallel, gru_scan_args, "b"),
    (gru.scan_cumprod, gru_scan_args, "h0"),
    (gru.scan_log, gru_log_scan_args, "log_b"),
    (gru.scan_log_signed, gru_signed_args, "log_a"),
    (gru.grad_scan_log, gru_grad_args, "cotangent"),
    (gru.logits, gru_min_args, "params.V"),
    (gru.loss, gru_labelled, "x"),
    (gru.accuracy, gru_labelled, "params.c"),
    (gru.fit, gru_fit, "x"),
    # population: stimuli, activities, decoders, weights, matrices, inputs and rates are continuous
    (population.currents, pop_x, "x"),
    (population.activities, lambda: dict(pop_x(), nonlinearity=lif.rate), "x"),
    (population.decoders, pop_acts, "activities"),
    (population.decode, lambda: dict(activities=pop_acts()["activities"], decoders=jnp.full((5,), 1e-3)), "decoders"),
    (population.decoding_loss, pop_loss, "targets"),
    (population.grad_decoding_loss_decoders, pop_loss, "activities"),
    (population.connection_weights, pop_weights, "decoders"),
    (population.feedforward, pop_feedforward, "pre_activities"),
    (population.nef_matrices, pop_nef, "a"),
    (population.simulate, pop_sim, "y0"),
    (population.sim, pop_bayes, "expected_counts"),
    (population.energy, pop_bayes, "expected_counts"),
    (population.grad_counts, pop_bayes, "expected_counts"),
    (population.posterior, pop_bayes, "expected_counts"),
    (population.log_evidence, pop_bayes, "expected_counts"),
    (population.bayes_decode, lambda: dict(pop_bayes(), grid=jnp.asarray([-1.0, 0.0, 1.0])), "grid"),
    # lif
    (lif.rate, lif_currents, "currents"),
    (lif.euler_rate, lambda: dict(lif_currents(), dt=1e-4), "currents"),
    (lif.simulate, lif_sim, "currents"),
    # gmm: observations, parameters and responsibilities are continuous
    (gmm.sim, gmm_energy, "x"),
    (gmm.energy, gmm_energy, "x"),
    (gmm.seed_energy, gmm_energy, "params.means"),
    (gmm.responsibilities, gmm_energy, "params.covariances"),
    (gmm.free_energy, gmm_free, "resp"),
    (gmm.grad_means, gmm_energy, "params.weights"),
    (gmm.grad_x, gmm_energy, "x"),
    (gmm.grad_covariances, gmm_energy, "params.means"),
    (gmm.grad_weights, gmm_energy, "x"),
    (gmm.em_step, gmm_energy, "x"),
    (gmm.init_params, gmm_init, "x"),
    (gmm.fit, gmm_fit, "x"),
    # attention
    (attention.sim, lambda: {n: v for n, v in cross_args().items() if n != "mask"}, "k"),
    (attention.energy, cross_args, "q"),
    (attention.grad_q, cross_args, "k"),
    (attention.grad_k, cross_args, "q"),
    (attention.token_energy, tokens_args, "xk"),
    (attention.grad_tokens, tokens_args, "xq"),
    (attention.grad_params, tokens_args, "params.wq"),
    (attention.self_energy, self_args, "params.wk"),
    (attention.grad_self_terms, self_args, "x"),
    (attention.grad_self, self_args, "x"),
    (attention.attention_weights, cross_args, "k"),
    (attention.attend, attend_args, "v"),
    (attention.edge_prior, lambda: dict(bias=_normal((2, 4))), "bias"),
    (attention.prior_energy, prior_args, "sim"),
    (attention.multihead_attention, mha_args, "xq"),
    (attention.relative_position_bias, lambda: dict(table=_normal(5), n=3), "table"),
    (structural.energy, structural_args, "w"),
    (structural.cccp_step, structural_args, "mu"),
    (structural.cccp, cccp_args, "mu0"),
    (gmm.check_params, lambda: dict(params=gmm_energy()["params"]), "params.means"),
    # multihop and expanding
    (multihop.hop_matrix, lambda: dict(p=jnp.full((3, 3), 1 / 3)), "p"),
    (multihop.attend, mh_args, "k"),
    (multihop.attention, mh_params_args, "x"),
    (multihop.grad_logits, mh_grad_args, "logits"),
    (expanding.log_prior, lambda: dict(q=jnp.array([0.3]), n=4), "q"),
    (expanding.window_size, lambda: dict(q=jnp.array([0.3]), eps=0.01), "q"),
    (expanding.posterior, ex_sims_args, "sims"),
    (expanding.energy, ex_sims_args, "sims"),
    (expanding.grad_sims, ex_sims_args, "sims"),
    (expanding.grad_q, ex_sims_args, "q"),
    (expanding.attend, ex_args, "q"),
    (expanding.attention, ex_params_args, "x"),
    # predictive coding
    (mpc.predict, pc_mlp, "mu"),
    (mpc.sim, pc_mixture, "x"),
    (mpc.energy, pc_mixture, "mu"),
    (mpc.responsibilities, pc_mixture, "x"),
    (mpc.grad_x, pc_mixture, "x"),
    (mpc.grad_mu, pc_mixture, "mu"),
    (mpc.grad_params, pc_mixture, "params.W2"),
    (mpc.mu_lipschitz, pc_lipschitz, "x"),
    (mpc.infer, pc_infer, "mu0"),
    (mpc.fit, pc_fit, "x"),
    (mpc.sample, pc_sample, "latent_centres"),
    (pcn.forward, pcn_forward_args, "x"),
    (pcn.predictions, lambda: {k: v for k, v in pc_net().items() if k != "precisions"}, "xs[0]"),
    (pcn.errors, pc_net, "precisions"),
    (pcn.sim, pc_net, "xs[0]"),
    (pcn.energy, pc_net, "precisions"),
    (pcn.grad_x, pc_net, "xs[0]"),
    (pcn.grad_params, pc_net, "xs[0]"),
    (pcn.infer, pcn_infer_args, "xs0[0]"),
    (pcn.fit, pcn_train_args, "y"),
    (pcn.classify, pcn_classify_args, "x"),
    (pcn.generate, pcn_generate_args, "y"),
    (anpc.predictions, lambda: {k: v for k, v in anpc_args().items() if k != "precisions"}, "x"),
    (anpc.errors, lambda: {k: v for k, v in anpc_args().items() if k != "precisions"}, "params.weights"),
    (anpc.sim, anpc_args, "x"),
    (anpc.attention, anpc_args, "x"),
    (anpc.effective_precisions, anpc_args, "params.biases"),
    (anpc.energy, anpc_args, "x"),
    (anpc.standard_energy, anpc_args, "x"),
    (anpc.grad_x, anpc_args, "x"),
    (anpc.grad_x_standard, anpc_args, "x"),
    (anpc.grad_params, anpc_args, "x"),
    (anpc.lipschitz, anpc_lipschitz_args, "params.weights"),
    (anpc.infer, anpc_infer_args, "x0"),
    # rbm: the parameters are continuous (unit states are binary data: see test_integer_data_is_cast_exactly)
    (rbm.joint_energy, rbm_joint, "params.W"),
    (rbm.energy, rbm_args, "params.b"),
    (rbm.energy_hidden, rbm_hidden, "params.c"),
    (rbm.grad_v, rbm_args, "params.W"),
    (rbm.grad_params, rbm_args, "params.W"),
    (rbm.energy_gap, rbm_joint, "params.W"),
    (rbm.hidden_probs, rbm_args, "params.W"),
    (rbm.visible_probs, rbm_hidden, "params.W"),
    (rbm.sample_hidden, rbm_keyed, "params.W"),
    (rbm.sample_visible, rbm_keyed_hidden, "params.W"),
    (rbm.gibbs, rbm_gibbs, "params.W"),
    (rbm.log_partition, rbm_params_only, "params.W"),
    (rbm.log_likelihood, rbm_args, "params.W"),
    (rbm.grad_log_likelihood_params, rbm_args, "params.W"),
    (rbm.grad_cd, rbm_keyed, "params.W"),
    (rbm.gibbs_transition_matrix, rbm_params_only, "params.W"),
    (rbm.grad_cd_expected, lambda: dict(rbm_args(), n_gibbs_steps=1), "params.W"),
    (rbm.fit, rbm_fit, "params.W"),
    # embedding: embeddings, noise distribution and transition matrix are continuous
    # (co-occurrence counts and token ids are discrete data: see test_integer_data_is_cast_exactly)
    (emb.scores, emb_params_only, "params.U"),
    (emb.log_partition, emb_params_only, "params.V"),
    (emb.energy, emb_args, "params.U"),
    (emb.grad_params, emb_args, "params.U"),
    (emb.softmax_loss, emb_args, "params.U"),
    (emb.grad_softmax_loss_params, emb_args, "params.V"),
    (emb.negative_sampling_loss, emb_ns, "noise"),
    (emb.grad_negative_sampling_loss_params, emb_ns, "params.U"),
    (emb.sampled_negative_sampling_loss, emb_sampled, "params.U"),
    (emb.sample_chain, emb_chain, "transition"),
    (emb.cosine, emb_cos, "a"),
    (emb.analogy, emb_analogy, "emb"),
    (emb.fit, emb_fit, "params.U"),
    # slds
    (slds.residuals, slds_energy, "x"),
    (slds.sim, slds_energy, "x"),
    (slds.energy, slds_energy, "params.b"),
    (slds.responsibilities, slds_energy, "x"),
    (slds.grad_next, slds_energy, "x"),
    (slds.grad_prev, slds_energy, "x"),
    (slds.grad_x, slds_energy, "x"),
    (slds.grad_A, slds_energy, "x"),
    (slds.grad_b, slds_energy, "x"),
    (slds.covariance_penalty, lambda: dict(slds_params_only(), reg_covar=0.1), "params.covariances"),
    (slds.objective, slds_energy, "x"),
    (slds.m_step, slds_m_step, "resp"),
    (slds.em_step, slds_energy, "x"),
    (slds.init_params, lambda: dict(x=_normal((30, 2)), n_components=2, key=KEY), "x"),
    (slds.fit, slds_fit, "x"),
    (slds.predict, slds_energy, "x"),
    (slds.sample, slds_sample, "params.A"),
    (slds.smoothness_bound, slds_params_only, "params.A"),
    (slds.impute, slds_impute, "x"),
    # slot attention
    (slot_attention.sim, slot_args, "x"),
    (slot_attention.attention, slot_args, "mu"),
    (slot_attention.energy, slot_args, "params.w_k"),
    (slot_attention.regularised_energy, slot_args, "mu"),
    (slot_attention.grad_x, slot_args, "x"),
    (slot_attention.grad_mu, slot_args, "mu"),
    (slot_attention.grad_w_k, slot_args, "params.w_k"),
    (slot_attention.grad_w_q, slot_args, "params.w_q"),
    (slot_attention.grad_regularised_energy_mu, slot_args, "x"),
    (slot_attention.gradient_step, lambda: dict(slot_args(), step=0.1), "mu"),
    (slot_attention.cccp_step, slot_args, "mu"),
    (slot_attention.e_step, slot_e_step, "mu"),
    (slot_attention.surrogate, slot_assign, "a"),
    (slot_attention.m_step_w_q, slot_assign, "a"),
    (slot_attention.m_step_w_k, slot_assign, "x"),
    (slot_attention.procrustes_w_q, slot_procrustes, "a"),
    (slot_attention.unconstrained_m_steps, lambda: dict(slot_assign(), n_steps=1), "mu"),
    (slot_attention.fit, slot_fit, "x"),
    (
        slot_attention.fourier_features,
        lambda: dict(points=_normal((4, 2)), n_features=3, lengthscale=0.5, key=KEY),
        "points",
    ),
    (slot_attention.init_slots, lambda: dict(x=_normal((5, 4)), n_slots=2, key=KEY), "x"),
    # diffusion
    (diffusion.make_schedule, lambda: dict(betas=jnp.array([0.1, 0.2])), "betas"),
    (diffusion.forward_marginal, diffusion_x0, "x0"),
    (diffusion.q_sample, lambda: dict(diffusion_x0(), key=KEY), "x0"),
    (
        diffusion.q_step,
        lambda: dict(schedule=diffusion.linear_schedule(20), x_prev=_normal((3, 2)), t=4, key=KEY),
        "x_prev",
    ),
    (diffusion.q_posterior, diffusion_posterior, "xt"),
    (diffusion.reverse_mean, diffusion_reverse, "eps"),
    (diffusion.denoising_loss, diffusion_loss, "x0"),
    (
        diffusion.simplified_loss,
        lambda: dict(
            eps_fn=diffusion.ideal_epsilon,
            params=_normal((5, 2)),
            schedule=diffusion.linear_schedule(20),
            x0=_normal((3, 2), 1),
            key=KEY,
        ),
        "x0",
    ),
    (diffusion.sim, diffusion_args, "data"),
    (diffusion.energy, diffusion_args, "x"),
    (diffusion.ideal_log_density, diffusion_args, "data"),
    (diffusion.ideal_score, diffusion_args, "x"),
    (diffusion.ideal_denoiser, diffusion_args, "x"),
    (diffusion.ideal_epsilon, diffusion_args, "data"),
    # params are opaque to sample; eps_fn = ideal_epsilon validates them under their own name, data
    (diffusion.sample, diffusion_sample, "params", "data"),
    (
        diffusion.ideal_sample,
        lambda: dict(data=_normal((5, 2)), schedule=diffusion.linear_schedule(20), n_samples=2, key=KEY),
        "data",
    ),
    (dmlp.epsilon, diffusion_mlp, "x"),
    (dmlp.fit, diffusion_fit, "x"),
    (dmlp.nearest_training_point, lambda: dict(samples=_normal((3, 2)), data=_normal((5, 2), 1)), "samples"),
    (dmlp.nearest_neighbour_spacing, lambda: dict(data=_normal((5, 2))), "data"),
    # sharding
    (sharding.sharded_em_step, sharding_em, "x"),
    (sharding.sharded_fit, sharding_fit, "x"),
    (sharding.sharded_retrieve, sharding_retrieve, "queries"),
    # gan: samples, noise, logits, densities and parameters are continuous (labels too: floats in [0, 1])
    (gan.forward, lambda: dict(mlp=gan_args()["params"].discriminator, x=_normal((4, 2))), "x"),
    (gan.generate, lambda: {k: v for k, v in gan_args().items() if k != "x"}, "z"),
    (gan.logit, lambda: {k: v for k, v in gan_args().items() if k != "z"}, "x"),
    (gan.discriminate, lambda: {k: v for k, v in gan_args().items() if k != "z"}, "x"),
    (gan.logistic_loss, gan_logits, "logits"),
    (gan.grad_logistic_loss_logits, gan_logits, "labels"),
    (gan.energy, gan_args, "x"),
    (gan.discriminator_loss, gan_args, "z"),
    (gan.generator_loss, lambda: {k: v for k, v in gan_args().items() if k != "x"}, "z"),
    (gan.grad_generator_loss_logits, lambda: dict(logits=_normal(5)), "logits"),
    (gan.optimal_logit, lambda: dict(log_p_data=_normal(4), log_p_g=_normal(4, 1)), "log_p_data"),
    (gan.sample_mixture, lambda: dict(centers=_normal((3, 2)), std=0.5, n_samples=4, key=KEY), "centers"),
    (gan.mixture_log_density, gan_mixture, "x"),
    (gan.mode_coverage, gan_coverage, "samples"),
    (gan.fit, gan_fit, "x"),
    # vae
    (vae.encode, vae_x, "x"),
    (vae.decode, vae_z, "z"),
    (vae.reparameterize, lambda: dict(vae_gauss(), eps=_normal((3, 4, 2), 2)), "eps"),
    (vae.gaussian_kl, vae_gauss, "mu"),
    (vae.log_likelihood, vae_lik, "params.out_W"),
    (vae.log_weights, vae_eps, "eps"),
    (vae.elbo_bound, lambda: dict(log_w=_normal((3, 4))), "log_w"),
    (vae.iwae_bound, lambda: dict(log_w=_normal((3, 4))), "log_w"),
    (vae.elbo, vae_keyed, "x"),
    (vae.iwae, vae_keyed, "params.mu_W"),
    (vae.iwae_loss, vae_eps, "eps"),
    (vae.loss, vae_loss, "eps"),
    (vae.fit, vae_fit, "x"),
    (vae.log_prior, vae_prior, "z"),
    (vae.linear_gaussian_log_marginal, vae_lg, "W"),
    (vae.linear_gaussian_posterior, vae_lg, "x"),
    (vae.linear_gaussian_log_weights, vae_lg_weights, "q_mean"),
]

CASES += [
    C(vae.sim, "dtype", vae_prior, _vae_prior_field("means", _ints), r"prior.means " + _DTYPE, "int_prior_means"),
    C(
        vae.energy,
        "dtype",
        vae_prior,
        _vae_prior_field("logits", _ints),
        r"prior.logits " + _DTYPE,
        "int_prior_logits",
    ),
    C(
        vae.grad_prior_z,
        "dtype",
        vae_prior,
        _vae_prior_field("log_scales", _ints),
        r"prior.log_scales " + _DTYPE,
        "int_prior_log_scales",
    ),
    C(vae.prior_responsibilities, "dtype", vae_prior, lambda a: dict(z=_ints(a["z"])), r"z " + _DTYPE, "int_z"),
]

_existing = {case.id for case in CASES}
CASES += [case for case in (_int_case(*entry) for entry in INT_INPUTS) if case.id not in _existing]

CASES += [
    # --- adversarial ---------------------------------------------------------
    C(
        adversarial.logits,
        "shape",
        adv_x,
        lambda a: dict(x=jnp.ones((2, 5))),
        r"x has dimension d = 5 but params.W1 have d = 4",
        "x_width",
    ),
    C(
        adversarial.logits,
        "shape",
        adv_x,
        lambda a: dict(params=a["params"]._replace(b1=jnp.zeros(4))),
        r"params.b1 must have shape \(H,\) with H = \d+",
        "b1",
    ),
    C(adversarial.logits, "finite", adv_x, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_x"),
    C(
        adversarial.logits,
        "finite",
        adv_x,
        lambda a: dict(params=a["params"]._replace(W1=_nan_at(a["params"].W1))),
        r"params.W1 must be finite",
        "nan_W1",
    ),
    C(adversarial.logits, "dtype", adv_x, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        adversarial.logits,
        "type",
        adv_x,
        lambda a: dict(params=tuple(a["params"])),
        r"params must be adversarial.Params",
        "tuple_params",
    ),
    C(
        adversarial.example_losses,
        "dtype",
        adv_args,
        lambda a: dict(y=jnp.asarray(a["y"], jnp.float64)),
        r"y must be integer labels",
        "float_y",
    ),
    C(
        adversarial.example_losses,
        "domain",
        adv_args,
        lambda a: dict(y=a["y"] + 3),
        r"y must hold class indices in 0..2",
        "y_out_of_range",
    ),
    C(
        adversarial.example_losses,
        "shape",
        adv_args,
        lambda a: dict(y=a["y"][:3]),
        r"y must have shape \(5,\)",
        "y_length",
    ),
    C(
        adversarial.example_losses,
        "dtype",
        adv_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(adversarial.loss, "dtype", adv_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        adversarial.grad_x,
        "dtype",
        adv_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.grad_params,
        "dtype",
        adv_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(adversarial.predict, "dtype", adv_x, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        adversarial.accuracy,
        "dtype",
        adv_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.binary_score,
        "dtype",
        adv_binary_x,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.binary_score,
        "K",
        adv_binary_x,
        lambda a: dict(params=adv_args()["params"]),
        r"needs a binary model \(n_classes = 1\)",
        "multiclass_params",
    ),
    C(
        adversarial.binary_trades_loss,
        "domain",
        adv_binary,
        lambda a: dict(y=jnp.asarray([1, 0, 1, -1, 1])),
        r"y must hold -1/1 for a binary model",
        "y_zero",
    ),
    C(
        adversarial.binary_trades_loss,
        "dtype",
        adv_binary,
        lambda a: dict(x_adv=_ints(a["x_adv"])),
        r"x_adv must have a floating dtype",
        "int_x_adv",
    ),
    C(
        adversarial.binary_trades_loss,
        "positive",
        adv_binary,
        lambda a: dict(trades_weight=-1.0),
        r"trades_weight must be a finite scalar >= 0",
        "negative_trades_weight",
    ),
    C(
        adversarial.grad_binary_trades_loss_params,
        "dtype",
        adv_binary,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.trades_loss,
        "shape",
        adv_trades,
        lambda a: dict(x_adv=a["x"][:2]),
        r"x_adv must have the shape of x",
        "x_adv_rows",
    ),
    C(
        adversarial.trades_loss,
        "dtype",
        adv_trades,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.trades_loss,
        "K",
        adv_trades,
        lambda a: dict(params=adv_binary()["params"]),
        r"needs a multi-class model",
        "binary_params",
    ),
    C(
        adversarial.grad_trades_loss_params,
        "dtype",
        adv_trades,
        lambda a: dict(x_adv=_ints(a["x_adv"])),
        r"x_adv must have a floating dtype",
        "int_x_adv",
    ),
    C(
        adversarial.kl_softmax,
        "shape",
        adv_kl,
        lambda a: dict(z_adv=_normal((3, 5))),
        r"z and z_adv must have the same shape",
        "mismatch",
    ),
    C(
        adversarial.kl_softmax,
        "dtype",
        adv_kl,
        lambda a: dict(z=_ints(a["z"])),
        r"z must have a floating dtype",
        "int_z",
    ),
    C(
        adversarial.kl_softmax,
        "finite",
        adv_kl,
        lambda a: dict(z_adv=_nan_at(a["z_adv"])),
        r"z_adv must be finite",
        "nan_z_adv",
    ),
    C(
        adversarial.softplus_surrogate,
        "dtype",
        lambda: dict(u=_normal(4)),
        lambda a: dict(u=_ints(a["u"])),
        r"u must have a floating dtype",
        "int_u",
    ),
    C(
        adversarial.gradient_attack,
        "positive",
        adv_step,
        lambda a: dict(step_size=0.0),
        r"step_size must be a finite scalar > 0",
        "zero_step_size",
    ),
    C(
        adversarial.gradient_attack,
        "dtype",
        adv_step,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.fgsm,
        "positive",
        adv_fgsm,
        lambda a: dict(epsilon=-0.1),
        r"epsilon must be a finite scalar >= 0",
        "negative_epsilon",
    ),
    C(adversarial.fgsm, "domain", adv_fgsm, lambda a: dict(x=a["x"] + 1.0), r"x must lie in the box", "outside_box"),
    C(
        adversarial.fgsm,
        "type",
        adv_fgsm,
        lambda a: dict(box=(0.0,)),
        r"box must be a pair \(low, high\) of finite numbers with low < high",
        "box_single",
    ),
    C(adversarial.fgsm, "dtype", adv_fgsm, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(adversarial.pgd, "K", adv_pgd, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(
        adversarial.pgd,
        "positive",
        adv_pgd,
        lambda a: dict(step_size=0.0),
        r"step_size must be a finite scalar > 0",
        "zero_step",
    ),
    C(adversarial.pgd, "dtype", adv_pgd, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(adversarial.pgd, "type", adv_pgd, lambda a: dict(key=0), r"key must be a JAX PRNG key", "int_key"),
    C(
        adversarial.minimal_perturbation,
        "positive",
        adv_minimal,
        lambda a: dict(eps_max=0.0),
        r"eps_max must be a finite scalar > 0",
        "zero_eps_max",
    ),
    C(
        adversarial.minimal_perturbation,
        "dtype",
        adv_minimal,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.inner_maximize,
        "positive",
        adv_inner,
        lambda a: dict(epsilon=0.0),
        r"epsilon must be a finite scalar > 0",
        "zero_epsilon",
    ),
    C(
        adversarial.inner_maximize,
        "dtype",
        adv_inner,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(
        adversarial.init_params,
        "K",
        lambda: dict(n_in=4, n_hidden=3, n_classes=2, key=KEY),
        lambda a: dict(n_classes=0),
        r"n_classes must be an integer >= 1",
        "zero_classes",
    ),
    C(
        adversarial.init_params,
        "dtype",
        lambda: dict(n_in=4, n_hidden=3, n_classes=2, key=KEY),
        lambda a: dict(dtype=jnp.int32),
        r"dtype must be a floating dtype",
        "int_dtype",
    ),
    C(adversarial.fit, "K", adv_fit, lambda a: dict(batch_size=6), r"batch_size must be <= N = 5", "big_batch"),
    C(
        adversarial.fit,
        "positive",
        adv_fit,
        lambda a: dict(trades_weight=-1.0),
        r"trades_weight must be a finite scalar >= 0",
        "negative_trades_weight",
    ),
    C(
        adversarial.fit,
        "type",
        adv_fit,
        lambda a: dict(optimizer="adam"),
        r"optimizer must be an optax",
        "optimizer_str",
    ),
    C(adversarial.fit, "dtype", adv_fit, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        adversarial.fit,
        "domain",
        adv_fit,
        lambda a: dict(defence="mixup"),
        r"defence must be one of 'trades', 'augment'; got 'mixup'",
        "unknown_defence",
    ),
    C(
        adversarial.fit,
        "diverge",
        adv_fit,
        lambda a: dict(optimizer=optax.sgd(1e308), n_epochs=5),
        r"adversarial.fit: the run diverged: .* became non-finite",
        "huge_rate",
    ),
]


# ---------------------------------------------------------------------------
# Degenerate inputs: every fit / trainer / training run raises on a run that goes
# non-finite (issue: no silent NaN). The valid factories give runs that stay finite.
# ---------------------------------------------------------------------------


def _collapsible():
    """40 Gaussian points and 10 copies of one point: without a ridge a component collapses onto them."""
    rng = _rng(3)
    return np.concatenate([rng.normal(size=(40, 2)), np.tile([[5.0, 5.0]], (10, 1))])


def gmm_fit_collapsible():
    return dict(x=_collapsible(), n_components=3, key=KEY)


def slds_fit_degenerate():
    # A trajectory that sits still for 20 steps, then walks: with three restarts EM finds a fit;
    # with one, the restart breaks down (a mode loses all responsibility) and fit must say so.
    rng = _rng(4)
    walk = np.cumsum(rng.normal(size=(40, 2)), axis=0) * 0.3
    return dict(x=np.concatenate([np.zeros((20, 2)), walk]), n_components=2, key=KEY, n_init=3, max_iter=5)


def diffusion_fit_diverge():
    return dict(
        params=diffusion_mlp()["params"],
        x=_normal((8, 2)),
        schedule=diffusion.linear_schedule(20),
        optimizer=optax.sgd(1e-3),
        key=KEY,
        n_steps=3,
        batch_size=4,
    )


def multihop_run():
    return dict(model="one_layer", seeds=[0], optimizer=optax.sgd(1e-3), n_steps=3, batch=4, n_test=4)


def expanding_run():
    return dict(model="expanding", seeds=[0], ps=[0.5], optimizer=optax.sgd(1e-3), n_steps=3, batch=4, n=8, n_test=4)


_HUGE_STEP = optax.sgd(1e300)  # overflows the first update
DIVERGE = r"the run diverged: .* became non-finite"

CASES += [
    C(
        population.simulate,
        "diverge",
        pop_sim,
        lambda a: dict(u=jnp.full((3, 1), 1e308), b_prime=jnp.full((1, 1), 10.0)),
        "population.simulate: " + DIVERGE + ".*reduce the input",
        "overflowing_input",
    ),
    C(
        gmm.fit,
        "diverge",
        gmm_fit_collapsible,
        lambda a: dict(reg_covar=0.0),
        r"component \d+: its covariance is not positive definite after EM iteration \d+ .*increase reg_covar",
        "collapsed_component",
    ),
    C(
        sharding.sharded_fit,
        "diverge",
        lambda: dict(gmm_fit_collapsible(), mesh=sharding.data_mesh()),
        lambda a: dict(reg_covar=0.0),
        r"component \d+: its covariance is not positive definite after EM iteration \d+ .*increase reg_covar",
        "collapsed_component",
    ),
    C(
        slds.fit,
        "diverge",
        slds_fit_degenerate,
        lambda a: dict(n_init=1),
        r"every EM restart broke down .* larger reg_covar",
        "still_trajectory",
    ),
    C(
        slot_attention.fit,
        "diverge",
        lambda: dict(slot_args(), n_steps=2, m_step="least_squares"),
        lambda a: dict(lam=1e-300),
        "slot_attention.fit: " + DIVERGE,
        "tiny_lam",
    ),
    C(
        rbm.fit,
        "diverge",
        rbm_fit,
        lambda a: dict(optimizer=optax.sgd(1e308), n_epochs=3, batch_size=1),
        "rbm.fit: " + DIVERGE + ".*lower the optimizer's learning rate",
        "huge_rate",
    ),
    C(
        emb.fit,
        "diverge",
        emb_fit,
        lambda a: dict(optimizer=_HUGE_STEP),
        "embedding.fit: " + DIVERGE + ".*lower the optimizer's learning rate",
        "huge_rate",
    ),
    C(mpc.fit, "diverge", pc_fit, lambda a: dict(optimizer=_HUGE_STEP), "mixture_pc.fit: " + DIVERGE, "huge_rate"),
    C(pcn.fit, "diverge", pcn_train_args, lambda a: dict(optimizer=_HUGE_STEP), "pcn.fit: " + DIVERGE, "huge_rate"),
    C(
        dmlp.fit,
        "diverge",
        diffusion_fit_diverge,
        lambda a: dict(optimizer=_HUGE_STEP),
        "diffusion_mlp.fit: " + DIVERGE,
        "huge_rate",
    ),
    C(
        toy.run_multihop_experiment,
        "diverge",
        multihop_run,
        lambda a: dict(optimizer=_HUGE_STEP),
        r"run_multihop_experiments \(one_layer\): " + DIVERGE,
        "huge_rate",
    ),
    C(
        toy.run_expanding_experiment,
        "diverge",
        expanding_run,
        lambda a: dict(optimizer=_HUGE_STEP),
        r"run_expanding_experiment \(expanding\): " + DIVERGE,
        "huge_rate",
    ),
    C(
        gan.fit,
        "diverge",
        gan_fit_linear,
        lambda a: dict(d_optimizer=_HUGE_STEP, g_optimizer=_HUGE_STEP),
        "gan.fit: " + DIVERGE + r".*lower the optimizers' learning rates",
        "huge_rate",
    ),
    C(
        gru.fit,
        "diverge",
        gru_fit,
        lambda a: dict(x=a["x"] * 1e200, optimizer=_HUGE_STEP),
        "gru.fit: " + DIVERGE + ".*lower the optimizer",
        "huge_rate",
    ),
    C(vae.fit, "diverge", vae_fit, lambda a: dict(optimizer=_HUGE_STEP), "vae.fit: " + DIVERGE, "huge_rate"),
]


def _kwargs(case: Case) -> tuple[dict, dict]:
    valid = case.valid()
    bad = dict(valid)
    bad.update(case.bad(valid))
    return valid, bad


def _params():
    out = []
    for case in CASES:
        marks = (
            [
                pytest.mark.xfail(
                    strict=True, raises=(AssertionError, TypeError, ValueError, pytest.fail.Exception), reason=case.gap
                )
            ]
            if case.gap
            else []
        )
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def _valid_params():
    """One valid call per (function, valid-argument maker): many cases share both."""
    seen, params = set(), []
    for case in CASES:
        key = (case.fn, case.valid)
        if key not in seen:
            seen.add(key)
            params.append(pytest.param(case, id=f"{case.module}.{case.fn.__name__}-{case.valid.__name__}"))
    return params


def _finite_float_leaves(out):
    for leaf in jax.tree_util.tree_leaves(out):
        a = np.asarray(leaf)
        if np.issubdtype(a.dtype, np.floating):
            assert np.all(np.isfinite(a)), "valid call returned non-finite values"


@pytest.mark.parametrize("case", _valid_params())
def test_valid_call_succeeds(case):
    valid, _ = _kwargs(case)
    _finite_float_leaves(case.fn(**valid))


@pytest.mark.parametrize("case", _params())
def test_bad_input_raises_value_error_naming_the_argument(case):
    _, bad = _kwargs(case)
    with pytest.raises(ValueError) as info:
        case.fn(**bad)
    message = str(info.value)
    assert re.search(case.match, message), f"message {message!r} does not match {case.match!r}"


# Which kinds of bad input apply to which module (from the issue).
REQUIRED = {
    "population": {"shape", "finite", "K", "positive", "dtype", "domain", "type", "diverge"},
    "lif": {"shape", "finite", "K", "positive", "dtype"},
    "core": {"shape", "finite", "K", "mask", "dtype"},
    "gmm": {"shape", "finite", "pd", "K", "dtype"},
    "slds": {"shape", "finite", "pd", "K", "dtype"},
    "hopfield": {"shape", "finite", "K", "beta", "dtype"},
    "attention": {"shape", "finite", "K", "beta", "mask", "dtype"},
    "slot_attention": {"shape", "finite", "K", "positive", "dtype"},
    "rbm": {"shape", "finite", "K", "type", "dtype"},
    "diffusion": {"shape", "finite", "K", "positive", "dtype"},
    "diffusion_mlp": {"shape", "finite", "K", "dtype", "type", "diverge"},
    "mixture_pc": {"shape", "finite", "K", "positive", "dtype"},
    "pcn": {"shape", "finite", "K", "positive", "dtype"},
    "anpc": {"shape", "finite", "K", "positive", "dtype"},
    "sharding": {"shape", "finite", "K", "beta", "dtype", "diverge"},
    "structural": {"shape", "finite", "K", "positive", "dtype", "type"},
    "multihop": {"shape", "finite", "beta", "mask", "dtype", "type"},
    "expanding": {"shape", "finite", "K", "positive", "mask", "dtype", "domain"},
    "structural_tasks": {"diverge"},
    "embedding": {"shape", "finite", "K", "positive", "dtype", "domain", "type", "diverge"},
    "vae": {"shape", "finite", "K", "positive", "dtype", "type", "domain", "diverge"},
}
REQUIRED["gru"] = {"shape", "finite", "K", "dtype", "type", "domain", "diverge"}
for _m in ("gmm", "slds", "slot_attention", "rbm", "mixture_pc", "pcn"):
    REQUIRED[_m] = REQUIRED[_m] | {"diverge"}

REQUIRED["gan"] = {"shape", "finite", "K", "positive", "dtype", "type", "domain", "diverge"}


def ae_args():
    rng = _rng(16)
    return dict(
        params=ae_mod.Params(jnp.asarray(rng.normal(size=(2, 4))), jnp.zeros(2), jnp.zeros(4)),
        x=_normal((5, 4), 16),
        activation="sigmoid",
    )


def ae_decode_args():
    a = ae_args()
    return dict(params=a["params"], h=_normal((5, 2), 17))


def ae_cov_args():
    return dict(W=_normal((2, 4), 18), cov=jnp.eye(4) + 0.1 * jnp.ones((4, 4)))


def ae_angles_args():
    return dict(a=_normal((5, 2), 19), b=_normal((5, 3), 20))


def ae_fit_args():
    return dict(ae_args(), optimizer=optax.sgd(1e-2), n_steps=3)


CASES += [
    C(ae_mod.loss, "shape", ae_args, lambda a: dict(x=_normal((5, 3))), r"x has dimension d = 3", "x_cols"),
    C(
        ae_mod.loss,
        "shape",
        ae_args,
        lambda a: dict(params=a["params"]._replace(b=jnp.zeros(3))),
        r"params.b must have shape \(k,\)",
        "b_shape",
    ),
    C(ae_mod.loss, "finite", ae_args, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_x"),
    C(ae_mod.loss, "domain", ae_args, lambda a: dict(activation="relu"), r"activation must be one of", "relu"),
    C(
        ae_mod.loss,
        "type",
        ae_args,
        lambda a: dict(params=(1, 2, 3)),
        r"params must be autoencoder.Params",
        "tuple_params",
    ),
    C(ae_mod.loss, "dtype", ae_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(ae_mod.encode, "dtype", ae_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(ae_mod.reconstruct, "dtype", ae_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        ae_mod.grad_params,
        "dtype",
        ae_args,
        lambda a: dict(params=a["params"]._replace(W=_ints(a["params"].W))),
        r"params.W must have a floating dtype",
        "int_W",
    ),
    C(
        ae_mod.grad_loss_paths,
        "dtype",
        ae_args,
        lambda a: dict(x=_ints(a["x"])),
        r"x must have a floating dtype",
        "int_x",
    ),
    C(ae_mod.decode, "shape", ae_decode_args, lambda a: dict(h=_normal((5, 3))), r"h has dimension d = 3", "h_cols"),
    C(
        ae_mod.decode,
        "dtype",
        ae_decode_args,
        lambda a: dict(h=_ints(a["h"])),
        r"h must have a floating dtype",
        "int_h",
    ),
    C(
        ae_mod.linear_loss,
        "shape",
        ae_cov_args,
        lambda a: dict(cov=jnp.eye(3)),
        r"cov must have shape \(d, d\)",
        "cov_shape",
    ),
    C(
        ae_mod.linear_loss,
        "dtype",
        ae_cov_args,
        lambda a: dict(W=_ints(a["W"])),
        r"W must have a floating dtype",
        "int_W",
    ),
    C(
        ae_mod.grad_linear_loss_W,
        "dtype",
        ae_cov_args,
        lambda a: dict(cov=_ints(a["cov"])),
        r"cov must have a floating dtype",
        "int_cov",
    ),
    C(
        ae_mod.principal_angles,
        "shape",
        ae_angles_args,
        lambda a: dict(b=_normal((4, 3))),
        r"a and b must be \(d, p\) and \(d, q\)",
        "rows",
    ),
    C(
        ae_mod.principal_angles,
        "dtype",
        ae_angles_args,
        lambda a: dict(a=_ints(a["a"])),
        r"a must have a floating dtype",
        "int_a",
    ),
    C(
        ae_mod.init_params,
        "K",
        lambda: dict(d=4, n_hidden=2, key=KEY),
        lambda a: dict(n_hidden=0),
        r"n_hidden must be an integer >= 1",
        "zero_k",
    ),
    C(
        ae_mod.init_params,
        "positive",
        lambda: dict(d=4, n_hidden=2, key=KEY),
        lambda a: dict(scale=0.0),
        r"scale must be a finite scalar > 0",
        "zero_scale",
    ),
    C(ae_mod.fit, "K", ae_fit_args, lambda a: dict(n_steps=0), r"n_steps must be an integer >= 1", "zero_steps"),
    C(
        ae_mod.fit,
        "type",
        ae_fit_args,
        lambda a: dict(optimizer=object()),
        r"optimizer must be an optax",
        "no_optimizer",
    ),
    C(ae_mod.fit, "dtype", ae_fit_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(
        ae_mod.fit,
        "diverge",
        ae_fit_args,
        lambda a: dict(optimizer=_HUGE_STEP),
        "autoencoder.fit: " + DIVERGE,
        "huge_rate",
    ),
]

REQUIRED["autoencoder"] = {"shape", "finite", "K", "positive", "dtype", "type", "domain", "diverge"}

# Every public fit, trainer and training run (the drivers that take many steps on
# their own) has a "diverge" case.
FITS = {
    ae_mod.fit,
    emb.fit,
    gru.fit,
    gmm.fit,
    sharding.sharded_fit,
    slds.fit,
    slot_attention.fit,
    rbm.fit,
    mpc.fit,
    pcn.fit,
    dmlp.fit,
    toy.run_multihop_experiment,
    toy.run_multihop_experiments,
    toy.run_expanding_experiment,
    gan.fit,
    vae.fit,
}


REQUIRED["adversarial"] = {"shape", "finite", "K", "positive", "dtype", "type", "domain", "diverge"}
FITS.add(adversarial.fit)


def gmm_streamed_collapsible():
    from lse_energy import _rows

    rows = _rows.RowChunks("x", _collapsible(), chunk_rows=16)
    stream = _rows.local_stream(rows, lambda p, x, valid, shift: gmm.sufficient_statistics(p, x, shift, valid))
    return dict(stream=stream, n_components=3, key=KEY)


CASES += [
    C(
        gmm.streamed_fit,
        "diverge",
        gmm_streamed_collapsible,
        lambda a: dict(reg_covar=0.0),
        r"component \d+: its covariance is not positive definite after EM iteration \d+ .*increase reg_covar",
        "collapsed_component",
    ),
    C(
        gmm.fit,
        "diverge",
        lambda: dict(gmm_fit_collapsible(), chunk_rows=16),
        lambda a: dict(reg_covar=0.0),
        r"component \d+: its covariance is not positive definite after EM iteration \d+ .*increase reg_covar",
        "collapsed_component_streamed",
    ),
]
FITS.add(gmm.streamed_fit)


def test_every_fit_has_a_diverge_case():
    import inspect

    with_case = {c.fn for c in CASES if c.kind == "diverge"}
    # run_multihop_experiment is run_multihop_experiments for one model: one case covers both.
    missing = {f.__qualname__ for f in FITS - with_case} - {"run_multihop_experiments"}
    assert not missing, missing
    for mod in (
        gru,
        ae_mod,
        gmm,
        sharding,
        slds,
        slot_attention,
        rbm,
        mpc,
        pcn,
        anpc,
        diffusion,
        dmlp,
        toy,
        emb,
        gan,
        vae,
    ):
        for name, f in inspect.getmembers(mod, inspect.isfunction):
            if (
                f.__module__ == mod.__name__
                and not name.startswith("_")
                and (name.endswith(("fit", "train", "fit_mlp")) or name.startswith("run_"))
            ):
                assert f in FITS, f"{mod.__name__}.{name} is a driver with no diverge case"


def test_registry_covers_every_module_and_kind():
    covered: dict[str, set] = {}
    for case in CASES:
        assert case.kind in KINDS, case.id
        covered.setdefault(case.module, set()).add(case.kind)
    assert set(covered) == set(REQUIRED)
    for module, kinds in REQUIRED.items():
        assert kinds <= covered[module], f"{module} lacks cases for {sorted(kinds - covered[module])}"
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"


# Public functions with no continuous array argument (sizes, counts, keys,
# integer time steps, schedules, meshes only), exempt from the dtype sweep.
NO_CONTINUOUS_ARRAY = {
    "attention": {"init_params", "init_multihead", "causal_mask", "sinusoidal_encoding", "sinusoidal_shift"},
    "mixture_pc": {"init_params"},
    "pcn": {"init_params"},
    "anpc": set(),
    "autoencoder": {"init_params"},
    "rbm": {"init_params", "binary_states"},
    "slds": set(),
    "slot_attention": {"blob_scene"},
    "diffusion": {"linear_schedule", "sigmas", "kl_weight", "effective_beta"},
    "diffusion_mlp": {"time_embedding", "init_params"},
    "sharding": {"data_mesh", "shard_rows"},
    # sufficient_statistics and m_step are unvalidated kernels for use inside jit (documented as such);
    # em's params go through check_params, whose dtype case is below. streamed_fit takes a stream,
    # whose rows were checked when it was made (_rows.RowChunks refuses an integer dtype:
    # tests/integration/test_streaming.py::test_streamed_errors_name_the_rows).
    "gmm": {"sufficient_statistics", "m_step", "em", "streamed_fit"},
    "structural": set(),
    "multihop": set(),
    "expanding": {"self_attention_ops"},
    # counts and token ids are discrete data (integer dtypes accepted and cast)
    "population": {"init_params"},
    "lif": set(),
    "embedding": {"init_params", "ring_transition", "cooccurrence", "skipgram_pairs", "noise_distribution", "pmi"},
    "gan": {"init_mlp", "init_params", "ring_centers"},
    "vae": {"init_params", "init_prior"},
}
NO_CONTINUOUS_ARRAY["gru"] = {"init_params", "init_min_params", "combine"}


def test_every_continuous_input_has_an_integer_dtype_case():
    import inspect

    modules = dict(
        gru=gru,
        autoencoder=ae_mod,
        attention=attention,
        mixture_pc=mpc,
        pcn=pcn,
        anpc=anpc,
        structural=structural,
        multihop=multihop,
        expanding=expanding,
        diffusion_mlp=dmlp,
        rbm=rbm,
        slds=slds,
        slot_attention=slot_attention,
        diffusion=diffusion,
        sharding=sharding,
        gmm=gmm,
        embedding=emb,
        gan=gan,
        population=population,
        lif=lif,
        vae=vae,
    )
    with_case = {(c.module, c.fn.__name__) for c in CASES if c.kind == "dtype"}
    for name, module in modules.items():
        public = {n for n in module.__all__ if inspect.isfunction(getattr(module, n))}
        exempt = NO_CONTINUOUS_ARRAY[name]
        assert exempt <= public, f"{name}: stale exemptions {sorted(exempt - public)}"
        missing = sorted(n for n in public - exempt if (name, n) not in with_case)
        assert not missing, f"{name}: no integer-dtype case for {missing}"


@pytest.mark.parametrize(
    "fn, make, arg",
    [
        (rbm.energy, rbm_args, "v"),
        (emb.softmax_loss, emb_args, "x"),
        (population.energy, pop_bayes, "counts"),
    ],
    ids=["rbm.energy-v", "embedding.softmax_loss-counts", "population.energy-counts"],
)
def test_integer_data_is_cast_exactly(fn, make, arg):
    """rbm accepts integer *data* (binary pixels) and casts it; the result equals the float call.

    Visible units are binary data; continuous inputs everywhere else (gmm's
    observations included) reject integer dtypes (``INT_INPUTS``).
    """
    kwargs = make()
    ints = _ints(kwargs[arg])
    as_int = fn(**{**kwargs, arg: ints})
    as_float = fn(**{**kwargs, arg: jnp.asarray(ints, jnp.float64)})
    assert jnp.issubdtype(as_int.dtype, jnp.floating)
    np.testing.assert_array_equal(np.asarray(as_int), np.asarray(as_float))


def _module_raises():
    """``(file, line, qualified function, match)`` for every ``pytest.raises(..., match=...)`` in
    the per-module test files, the called function resolved through the file's imports."""
    import ast
    import pathlib

    out = []
    skip = {"test_validation.py", "test_registry.py", "test_core.py", "test_benchmarks.py"}
    tests = pathlib.Path(__file__).resolve().parents[1]  # every folder of tests/
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in skip:
            continue
        tree = ast.parse(path.read_text())
        alias = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lse_energy"):
                for a in node.names:
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    alias[a.asname or a.name] = a.name
        for node in ast.walk(tree):
            if not isinstance(node, ast.With):
                continue
            ctx = node.items[0].context_expr
            if not (isinstance(ctx, ast.Call) and ast.unparse(ctx.func) == "pytest.raises"):
                continue
            match = [k.value for k in ctx.keywords if k.arg == "match" and isinstance(k.value, ast.Constant)]
            calls = [n for n in ast.walk(ast.Module(body=node.body, type_ignores=[])) if isinstance(n, ast.Call)]
            if not match or not calls:
                continue
            name = ast.unparse(calls[0].func)
            head, _, rest = name.partition(".")
            out.append((path.name, node.lineno, f"{alias.get(head, head)}.{rest}", match[0].value))
    return out


def test_no_module_test_repeats_a_registry_case():
    """A bad input the registry checks (the same function, and a registry message that the
    per-module ``match`` finds) is not tested again per module."""
    registry = {}
    for case in CASES:
        registry.setdefault(f"{case.fn.__module__}.{case.fn.__name__}", []).append(case.match.replace("\\", ""))
    repeats = []
    for file, line, fn, match in _module_raises():
        for message in registry.get(fn, []):
            if re.search(match, message):
                repeats.append(f"{file}:{line} {fn} {match!r} (registry: {message!r})")
                break
    assert not repeats, "\n".join(repeats)


@pytest.mark.parametrize("make", [np.asarray, jnp.asarray], ids=["numpy", "jax"])
def test_all_finite_flags_nan_and_inf(make):
    from lse_energy._validate import all_finite

    x = np.arange(12.0).reshape(3, 4)
    assert all_finite(make(x))
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[2, 1] = bad
        assert not all_finite(make(y))


def test_params_rule_checks_symbols_sizes_and_dtype():
    """``_validate.params``: one size per symbol, every size >= 1, one dtype, the right class."""
    from typing import NamedTuple

    from lse_energy._validate import params

    class P(NamedTuple):
        W: jnp.ndarray
        b: jnp.ndarray
        c: jnp.ndarray
        tag: str

    shapes = {"W": "k d", "b": "k", "c": "d"}
    good = P(jnp.ones((2, 3)), jnp.ones(2), jnp.ones(3), "kept")
    checked, sizes = params(good, P, shapes)
    assert sizes == {"k": 2, "d": 3} and checked.tag == "kept"
    assert params(good, P, shapes, {"d": 3})[1] == {"k": 2, "d": 3}
    bad = [
        (good._replace(b=jnp.ones(3)), r"params\.b must have shape \(k,\) with k = 2; got \(3,\)"),
        (good._replace(c=jnp.ones((3, 1))), r"params\.c must have shape \(d,\); got \(3, 1\)"),
        (P(jnp.ones((0, 3)), jnp.ones(0), jnp.ones(3), ""), r"params\.W must have shape \(k, d\) with k >= 1"),
        (good._replace(b=jnp.ones(2, jnp.float16)), r"params\.b must have the dtype of params\.W"),
        (good._replace(c=jnp.ones(3, int)), r"params\.c must have a floating dtype"),
        (good._replace(W=jnp.full((2, 3), jnp.nan)), r"params\.W must be finite"),
        (tuple(good), r"params must be test_validation\.P; got tuple"),
    ]
    for value, match in bad:
        with pytest.raises(ValueError, match=match):
            params(value, P, shapes)
    with pytest.raises(ValueError, match=r"params\.W must have shape \(k, d\) with d = 4"):
        params(good, P, shapes, {"d": 4})
    with pytest.raises(ValueError, match=r"prior\.b"):
        params(good._replace(b=jnp.ones(3)), P, shapes, name="prior")


def test_seeds_rule():
    from lse_energy._validate import seeds

    np.testing.assert_array_equal(seeds([3, 1]), [3, 1])
    for bad in ([], [[1, 2]], [1.0, 2.0], [True]):
        with pytest.raises(ValueError, match="seeds must be a non-empty 1-D sequence of integers"):
            seeds(bad)
