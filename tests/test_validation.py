"""Input validation at the public boundary, across every model module.

One registry (``CASES``) drives the generic tests, in the style of dynax's
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

Cases marked ``xfail(strict=True)`` are real gaps in modules this test may not
change; each reason states the missing check.
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import attention, core, diffusion, gmm, hopfield, rbm, slds, slot_attention
from lse_energy import predictive_coding as pc

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


def _rng(seed=0):
    return np.random.default_rng(seed)


def _normal(shape, seed=0):
    return jnp.asarray(_rng(seed).normal(size=shape))


def _nan_at(a, idx=0):
    a = np.array(a, dtype=np.float64)
    a.flat[idx] = np.nan
    return jnp.asarray(a)


def _ints(a):
    return np.asarray(np.round(np.asarray(a)), dtype=np.int64)


KEY = jax.random.key(0)

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
    params = gmm.GMMParams(
        weights=jnp.array([0.4, 0.6]),
        means=jnp.array([[0.0, 0.0], [1.5, -0.5]]),
        covariances=jnp.stack([jnp.eye(2), jnp.array([[1.0, 0.3], [0.3, 0.5]])]),
    )
    return dict(params=params, x=_normal((10, 2)))


def gmm_fit():
    return dict(x=_normal((30, 2)), n_components=2, key=KEY, max_iter=3)


def slds_energy():
    K, d = 2, 2
    params = slds.SLDSParams(
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
    params = attention.AttentionParams(wq=_normal((2, 3)), wk=_normal((2, 3), 1))
    return dict(params=params, x=_normal((4, 3), 2), beta=0.7, mask=attention.causal_mask(4))


def mha_args():
    return dict(params=attention.init_multihead(4, 2, key=KEY), xq=_normal((3, 4)))


def structural_args():
    return dict(mu=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2))


def slot_args():
    params = slot_attention.SlotParams(w_k=_normal((3, 4)), w_q=_normal((3, 2), 1))
    return dict(params=params, x=_normal((5, 4), 2), mu=_normal((3, 2), 3))


def slot_assign():
    a = slot_args()
    a["a"] = jnp.full((5, 3), 1.0 / 3.0)
    return a


def rbm_args():
    params = rbm.RBMParams(W=0.5 * _normal((3, 2)), b=_normal(3, 1), c=_normal(2, 2))
    return dict(params=params, v=jnp.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))


def rbm_joint():
    a = rbm_args()
    a["h"] = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    return a


def diffusion_args():
    return dict(data=_normal((5, 2)), schedule=diffusion.linear_schedule(20), x=_normal((3, 2), 1), t=7)


def diffusion_mlp():
    return dict(params=diffusion.init_mlp(2, key=KEY, hidden=(8,), num_freqs=2),
                schedule=diffusion.linear_schedule(20), x=_normal((3, 2), 1), t=5)


def diffusion_loss():
    return dict(eps_fn=diffusion.ideal_epsilon, params=_normal((5, 2)), schedule=diffusion.linear_schedule(20),
                x0=_normal((3, 2), 1), t=4, eps=_normal((3, 2), 2))


def pc_mixture():
    return dict(params=pc.init_mlp(2, 5, 3, key=KEY), x=_normal((6, 3)), mu=_normal((2, 2), 1))


def pc_net():
    params = pc.pcn_init((3, 4, 2), key=KEY)
    xs = (_normal((2, 3)), _normal((2, 4), 1), _normal((2, 2), 2))
    return dict(params=params, xs=xs, precisions=jnp.array([0.0, 1.0, 2.0]))


def pc_infer():
    a = pc_mixture()
    return dict(params=a["params"], x=a["x"], mu0=a["mu"], num_steps=2)


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------

C = Case
CASES: list[Case] = [
    # --- core ---------------------------------------------------------------
    C(core.energy, "shape", core_sim, lambda a: dict(sim=a["sim"][0], mask=None),
      r"sim must have shape \(\.\.\., C, P\)", "1d_sim"),
    C(core.energy, "shape", core_sim, lambda a: dict(mask=jnp.ones((2, 4), bool)),
      r"mask of shape \(2, 4\) does not broadcast to sim", "mask_shape"),
    C(core.energy, "finite", core_sim, lambda a: dict(sim=_nan_at(a["sim"])), r"sim must be finite", "nan"),
    C(core.energy, "K", core_sim, lambda a: dict(sim=jnp.zeros((3, 0)), mask=None),
      r"sim must have at least one parent \(P >= 1\)", "no_parents"),
    C(core.energy, "mask", core_sim, lambda a: dict(mask=a["mask"].at[1].set(False)),
      r"mask: child \(1,\).*no allowed parent", "empty_row"),
    C(core.energy, "mask", core_sim, lambda a: dict(mask=np.ones((3, 4), np.int64)),
      r"mask must be boolean", "int_mask"),
    C(core.energy, "dtype", core_sim, lambda a: dict(sim=_ints(a["sim"])), r"sim must have a floating dtype", "int_sim"),
    C(core.weights, "mask", core_sim, lambda a: dict(mask=a["mask"].at[2].set(False)),
      r"mask: child \(2,\).*no allowed parent", "empty_row"),
    C(core.logsumexp, "dtype", core_sim, lambda a: dict(sim=_ints(a["sim"])), r"sim must have a floating dtype", "int_sim"),
    C(core.EnergyTerm, "mask", core_term, lambda a: dict(mask=np.array([[True, False], [False, False]])),
      r"mask of term .*child row 1 has no allowed parent", "empty_row"),
    C(core.EnergyTerm, "dtype", core_term, lambda a: dict(children=[0.0, 1.0]),
      r"children must hold integer node indices", "float_indices"),
    C(core.EnergyTerm, "shape", core_term, lambda a: dict(mask=np.ones((3, 2), bool)),
      r"mask must be boolean of shape \(C_m, P_m\)", "mask_shape"),
    C(core.graph_energy, "finite", core_graph, lambda a: dict(nodes=_nan_at(a["nodes"], 3)), r"nodes must be finite", "nan"),
    C(core.graph_energy, "dtype", core_graph, lambda a: dict(nodes=_ints(a["nodes"])),
      r"nodes must have a floating dtype", "int_nodes"),
    C(core.graph_energy, "shape", core_graph, lambda a: dict(nodes=a["nodes"][:2]), r"refers to node 2 but nodes has only 2 rows",
      "too_few_nodes"),
    C(core.graph_gradient, "finite", core_graph, lambda a: dict(nodes=_nan_at(a["nodes"], 0)), r"nodes must be finite", "nan"),
    C(core.sim_matrix, "finite", lambda: dict(term=core_graph()["terms"][0], nodes=core_graph()["nodes"]),
      lambda a: dict(nodes=a["nodes"].at[0, 0].set(jnp.inf)), r"nodes must be finite", "inf"),
    # --- gmm ----------------------------------------------------------------
    C(gmm.energy, "shape", gmm_energy, lambda a: dict(x=_normal((10, 3))), r"x has dimension 3 but params.means has d = 2", "x_dim"),
    C(gmm.energy, "shape", gmm_energy, lambda a: dict(x=a["x"][:, 0]), r"x must have shape \(N, d\)", "x_1d"),
    C(gmm.energy, "shape", gmm_energy, lambda a: dict(params=a["params"]._replace(weights=jnp.array([1.0]))),
      r"params.weights must have shape \(K,\)", "weights_shape"),
    C(gmm.energy, "finite", gmm_energy, lambda a: dict(x=_nan_at(a["x"], 5)), r"x must be finite", "x_nan"),
    C(gmm.energy, "finite", gmm_energy, lambda a: dict(params=a["params"]._replace(means=_nan_at(a["params"].means))),
      r"params.means must be finite", "means_nan"),
    C(gmm.energy, "pd", gmm_energy,
      lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[1].set(jnp.diag(jnp.array([1.0, -0.1]))))),
      r"params.covariances\[1\] is not positive definite", "indefinite"),
    C(gmm.energy, "pd", gmm_energy,
      lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0, 0, 1].set(0.5))),
      r"params.covariances\[0\] is not symmetric", "asymmetric"),
    C(gmm.em_step, "pd", gmm_energy,
      lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0].set(jnp.zeros((2, 2))))),
      r"params.covariances\[0\] is not positive definite", "singular"),
    C(gmm.energy, "K", gmm_energy,
      lambda a: dict(params=gmm.GMMParams(jnp.zeros((0,)), jnp.zeros((0, 2)), jnp.zeros((0, 2, 2)))),
      r"params.means must have K >= 1 components", "zero_components"),
    C(gmm.fit, "K", gmm_fit, lambda a: dict(n_components=0), r"n_components must be >= 1", "zero"),
    C(gmm.initialize, "K", lambda: dict(x=_normal((30, 2)), n_components=2, key=KEY), lambda a: dict(n_components=-1),
      r"n_components must be >= 1", "negative"),
    C(gmm.fit, "dtype", gmm_fit, lambda a: dict(n_components=2.0), r"n_components must be an integer", "float_K"),
    C(gmm.fit, "positive", gmm_fit, lambda a: dict(tol=-1.0), r"tol must be a finite non-negative", "negative_tol"),
    C(gmm.em_step, "positive", gmm_energy, lambda a: dict(reg_covar=-1e-3), r"reg_covar must be a finite non-negative", "neg_reg"),
    C(gmm.free_energy, "shape", lambda: dict(gmm_energy(), resp=jnp.full((10, 2), 0.5)),
      lambda a: dict(resp=jnp.full((10, 3), 1 / 3)), r"resp must have shape \(N, K\)", "resp_shape"),
    C(gmm.fit, "positive", gmm_fit, lambda a: dict(tol="a"), r"tol must be a finite non-negative float", "string_tol"),
    # --- slds ---------------------------------------------------------------
    C(slds.energy, "shape", slds_energy, lambda a: dict(x=a["x"][:, 0]), r"x must have shape \(T, d\)", "x_1d"),
    C(slds.energy, "shape", slds_energy, lambda a: dict(x=a["x"][:1]), r"x must hold at least two time steps \(T >= 2\)", "T1"),
    C(slds.energy, "shape", slds_energy, lambda a: dict(x=_normal((8, 3))), r"params.A has state dimension 2 but x has d = 3", "x_dim"),
    C(slds.energy, "shape", slds_energy, lambda a: dict(params=a["params"]._replace(b=jnp.zeros((2, 3)))),
      r"params.b must have shape \(K, d\)", "b_shape"),
    C(slds.energy, "finite", slds_energy, lambda a: dict(x=_nan_at(a["x"], 4)), r"x must be finite", "x_nan"),
    C(slds.energy, "finite", slds_energy, lambda a: dict(params=a["params"]._replace(A=_nan_at(a["params"].A))),
      r"params.A must be finite", "A_nan"),
    C(slds.energy, "pd", slds_energy,
      lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[1].set(-jnp.eye(2)))),
      r"params.covariances must be positive definite", "negative_definite"),
    C(slds.energy, "pd", slds_energy,
      lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0, 1, 0].set(0.4))),
      r"params.covariances must be symmetric", "asymmetric"),
    C(slds.em_step, "pd", slds_energy,
      lambda a: dict(params=a["params"]._replace(covariances=a["params"].covariances.at[0].set(jnp.ones((2, 2))))),
      r"params.covariances must be positive definite", "singular"),
    C(slds.energy, "K", slds_energy,
      lambda a: dict(params=slds.SLDSParams(jnp.zeros((0,)), jnp.zeros((0, 2, 2)), jnp.zeros((0, 2)), jnp.zeros((0, 2, 2)))),
      r"params.weights must have shape \(K,\) with K >= 1", "zero_modes"),
    C(slds.fit, "K", slds_fit, lambda a: dict(n_components=0), r"n_components must be an integer >= 1", "zero"),
    C(slds.init_params, "K", lambda: dict(x=_normal((30, 2)), n_components=2, key=KEY), lambda a: dict(n_components=0),
      r"n_components must be an integer >= 1", "zero"),
    C(slds.fit, "dtype", slds_fit, lambda a: dict(n_components="2"), r"n_components must be an integer >= 1", "string_K"),
    C(slds.energy, "dtype", slds_energy, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(slds.energy, "dtype", slds_energy, lambda a: dict(params=a["params"]._replace(A=np.zeros((2, 2, 2), np.int64))),
      r"params.A must have a floating dtype", "int_A"),
    C(slds.energy, "dtype", slds_energy,
      lambda a: dict(params=a["params"]._replace(covariances=np.stack([np.eye(2, dtype=np.int64)] * 2))),
      r"params.covariances must have a floating dtype", "int_cov"),
    C(slds.sample, "dtype", slds_sample, lambda a: dict(x0=np.zeros(2, np.int64)), r"x0 must have a floating dtype", "int_x0"),
    C(slds.sample, "finite", slds_sample, lambda a: dict(x0=jnp.array([jnp.nan, 0.0])), r"x0 must be finite", "nan_x0"),
    C(slds.sample, "shape", slds_sample, lambda a: dict(x0=jnp.zeros(3)), r"params.A has state dimension 2 but x has d = 3", "x0_dim"),
    C(slds.em_step, "positive", slds_energy, lambda a: dict(reg_covar=None), r"reg_covar must be finite and >= 0", "none_reg"),
    C(slds.fit, "positive", slds_fit, lambda a: dict(tol="a"), r"tol must be finite and >= 0", "string_tol"),
    C(slds.m_step, "shape", lambda: dict(x=_normal((8, 2)), resp=jnp.full((7, 2), 0.5)),
      lambda a: dict(resp=jnp.full((8, 2), 0.5)), r"resp must have shape \(T-1, K\)", "resp_shape"),
    # --- hopfield -----------------------------------------------------------
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=0.0), r"beta must be finite and > 0", "zero"),
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=-1.0), r"beta must be finite and > 0", "negative"),
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=jnp.inf), r"beta must be finite and > 0", "inf"),
    C(hopfield.grad_queries, "beta", hopfield_args, lambda a: dict(beta=np.nan), r"beta must be finite and > 0", "nan"),
    C(hopfield.update, "beta", hopfield_args, lambda a: dict(beta=-0.5), r"beta must be finite and > 0", "negative"),
    C(hopfield.retrieve, "beta", hopfield_args, lambda a: dict(beta=0.0), r"beta must be finite and > 0", "zero"),
    C(hopfield.energy, "beta", hopfield_args, lambda a: dict(beta=None), r"beta", "none"),
    C(hopfield.energy, "shape", hopfield_args, lambda a: dict(queries=_normal((2, 4))),
      r"queries has dimension d = 4 but memories have d = 3", "d_mismatch"),
    C(hopfield.energy, "finite", hopfield_args, lambda a: dict(memories=_nan_at(a["memories"], 2)), r"memories must be finite", "nan"),
    C(hopfield.energy, "K", hopfield_args, lambda a: dict(memories=jnp.zeros((0, 3))), r"memories must be non-empty", "no_memories"),
    C(hopfield.energy, "dtype", hopfield_args, lambda a: dict(queries=_ints(a["queries"])),
      r"queries must have a floating dtype", "int_queries"),
    C(hopfield.regularised_energy, "dtype", hopfield_args, lambda a: dict(memories=_ints(a["memories"])),
      r"memories must have a floating dtype", "int_memories"),
    C(hopfield.cccp_surrogate, "shape", lambda: dict(hopfield_args(), anchor=_normal((2, 3), 5)),
      lambda a: dict(anchor=_normal((3, 3), 5)), r"anchor must have the shape of queries", "anchor_shape"),
    C(hopfield.retrieve, "dtype", hopfield_args, lambda a: dict(steps=2.0), r"steps must be a non-negative integer", "float_steps"),
    # --- attention ----------------------------------------------------------
    C(attention.cross_energy, "beta", cross_args, lambda a: dict(beta=0.0), r"beta must be a finite scalar > 0", "zero"),
    C(attention.cross_grad_queries, "beta", cross_args, lambda a: dict(beta=-2.0), r"beta must be a finite scalar > 0", "negative"),
    C(attention.attend, "beta", attend_args, lambda a: dict(beta=np.nan), r"beta must be a finite scalar > 0", "nan"),
    C(attention.self_energy, "beta", self_args, lambda a: dict(beta=-1.0), r"beta must be a finite scalar > 0", "negative"),
    C(attention.multihead_attention, "beta", mha_args, lambda a: dict(beta=0.0), r"beta must be a finite scalar > 0", "zero"),
    C(attention.cross_energy, "beta", cross_args, lambda a: dict(beta=None), r"beta", "none"),
    C(attention.cross_energy, "shape", cross_args, lambda a: dict(k=_normal((4, 2))),
      r"q and k must share their last \(feature\) dimension", "feature_dim"),
    C(attention.attend, "shape", attend_args, lambda a: dict(v=_normal((3, 5))), r"v must have one row per key", "v_rows"),
    C(attention.self_energy, "shape", self_args, lambda a: dict(x=_normal((4, 5))), r"x has width 5 but params.wq expects 3", "x_width"),
    C(attention.cross_energy, "finite", cross_args, lambda a: dict(q=_nan_at(a["q"])), r"q must be finite", "nan_q"),
    C(attention.cross_energy, "dtype", cross_args, lambda a: dict(k=_ints(a["k"])), r"k must have a floating dtype", "int_k"),
    C(attention.self_energy, "dtype", self_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(attention.cross_energy, "mask", cross_args, lambda a: dict(mask=a["mask"].at[1].set(False)),
      r"mask: child \(1,\).*no allowed parent", "empty_row"),
    C(attention.attend, "mask", lambda: dict(attend_args(), mask=jnp.ones((2, 4), bool)),
      lambda a: dict(mask=a["mask"].at[0].set(False)), r"mask: child \(0,\).*no allowed parent", "empty_row"),
    C(attention.self_energy, "mask", self_args, lambda a: dict(mask=a["mask"].at[0, 0].set(False)),
      r"mask: child \(0,\).*no allowed parent", "causal_first_row"),
    C(attention.cross_energy, "mask", cross_args, lambda a: dict(mask=np.ones((2, 4), np.int64)), r"mask must be boolean", "int_mask"),
    C(attention.cross_energy, "shape", cross_args, lambda a: dict(mask=jnp.ones((3, 4), bool)),
      r"mask of shape \(3, 4\) does not broadcast", "mask_shape"),
    C(attention.cross_energy, "K", cross_args, lambda a: dict(k=jnp.zeros((0, 3)), mask=None), r"\bk\b", "no_keys",
      gap="attention._check_qk: an empty key set (k with 0 rows) is reported by core as 'sim must have at least "
          "one parent', naming an internal array; it must raise 'k must have at least one row (N_K >= 1)'"),
    C(attention.init_multihead, "K", lambda: dict(d_model=4, n_heads=2, key=KEY), lambda a: dict(n_heads=0),
      r"n_heads must be >= 1", "zero_heads"),
    C(attention.cccp_step, "shape", structural_args, lambda a: dict(w=a["w"].T), r"w must have shape \(d_mu, d_x\)", "w_shape"),
    C(attention.cccp, "positive", lambda: dict(mu0=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2)),
      lambda a: dict(n_steps=-1), r"n_steps must be >= 0", "negative_steps"),
    C(attention.cccp, "dtype", lambda: dict(mu0=_normal((2, 3)), x=_normal((5, 4), 1), w=0.3 * _normal((3, 4), 2)),
      lambda a: dict(n_steps=1.5), r"n_steps", "float_steps",
      gap="attention.cccp: n_steps=1.5 is silently truncated to 1 by int(); it must raise "
          "'n_steps must be a non-negative integer'"),
    C(attention.collapsed_free_energy, "type", structural_args, lambda a: dict(prior="rows"), r"prior must be one of", "prior"),
    C(attention.multihead_attention, "finite", mha_args,
      lambda a: dict(params=a["params"]._replace(wq=_nan_at(a["params"].wq))), r"params\.wq must be finite", "nan_wq",
      gap="attention.multihead_attention: params are not validated; NaN in params.wq is reported as "
          "'q must be finite' (an internal projection), and integer params are silently promoted"),
    C(attention.prior_energy, "shape", lambda: dict(sim=_normal((2, 3)), prior=jnp.full((2, 3), 1 / 3)),
      lambda a: dict(prior=jnp.full((2, 2), 0.5)), r"prior", "prior_shape",
      gap="attention.prior_energy: a prior whose shape differs from sim raises a TypeError from jnp; it must raise "
          "'prior must have the shape of sim (..., C, P)'"),
    # --- slot attention -----------------------------------------------------
    C(slot_attention.energy, "shape", slot_args, lambda a: dict(x=_normal((5, 3))),
      r"x must have shape \(N, 4\) to match params.w_k", "x_width"),
    C(slot_attention.energy, "shape", slot_args,
      lambda a: dict(params=a["params"]._replace(w_q=_normal((2, 2)))), r"params.w_k and params.w_q must map to the same space", "maps"),
    C(slot_attention.energy, "finite", slot_args, lambda a: dict(mu=_nan_at(a["mu"], 1)), r"mu must be finite", "nan_mu"),
    C(slot_attention.energy, "K", slot_args, lambda a: dict(mu=jnp.zeros((0, 2))), r"mu must hold at least one slot \(S >= 1\)", "no_slots"),
    C(slot_attention.init_slots, "K", lambda: dict(x=_normal((5, 4)), n_slots=2, key=KEY), lambda a: dict(n_slots=0),
      r"n_slots must be an integer in \[1, N=5\]", "zero"),
    C(slot_attention.energy, "dtype", slot_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(slot_attention.grad_free_energy_mu, "dtype", slot_args, lambda a: dict(mu=_ints(a["mu"])),
      r"mu must have a floating dtype", "int_mu"),
    C(slot_attention.cccp_step, "positive", slot_args, lambda a: dict(lam=0.0), r"lam must be finite and > 0", "zero_lam"),
    C(slot_attention.cccp_step, "positive", slot_args, lambda a: dict(lam=jnp.inf), r"lam must be finite and > 0", "inf_lam"),
    C(slot_attention.free_energy, "positive", slot_args, lambda a: dict(lam=-1.0), r"lam must be finite and >= 0", "neg_lam"),
    C(slot_attention.grad_free_energy_mu, "positive", slot_args, lambda a: dict(lam=-0.5), r"lam must be finite and >= 0", "neg_lam"),
    C(slot_attention.gradient_step, "positive", lambda: dict(slot_args(), step=0.1), lambda a: dict(step=jnp.inf),
      r"step must be finite and > 0", "inf_step"),
    C(slot_attention.e_step, "positive", lambda: dict(slot_args(), n_steps=2), lambda a: dict(lam="a"),
      r"lam must be a finite non-negative scalar", "string_lam"),
    C(slot_attention.surrogate, "domain", slot_assign, lambda a: dict(a=-a["a"]), r"a must be non-negative", "negative_a"),
    C(slot_attention.surrogate, "shape", slot_assign, lambda a: dict(a=jnp.ones((5, 2))), r"a must have shape \(N, S\)", "a_shape"),
    C(slot_attention.fourier_features, "positive", lambda: dict(points=_normal((4, 2)), n_features=3, lengthscale=0.5, key=KEY),
      lambda a: dict(lengthscale=jnp.inf), r"lengthscale must be finite and > 0", "inf_lengthscale"),
    C(slot_attention.blob_scene, "K", lambda: dict(n_blobs=2, key=KEY, n_per_blob=3, min_separation=0.1, n_candidates=64),
      lambda a: dict(n_per_blob=0), r"n_per_blob must be an integer >= 1", "zero_per_blob"),
    C(slot_attention.blob_scene, "finite", lambda: dict(n_blobs=2, key=KEY, n_per_blob=3, min_separation=0.1, n_candidates=64),
      lambda a: dict(min_separation=np.nan), r"min_separation must be finite and >= 0", "nan_separation"),
    # --- rbm ----------------------------------------------------------------
    C(rbm.free_energy, "shape", rbm_args, lambda a: dict(v=jnp.ones((2, 4))), r"v must have shape \(3,\) or \(N, 3\)", "v_width"),
    C(rbm.free_energy, "shape", rbm_args, lambda a: dict(params=a["params"]._replace(c=jnp.zeros(3))),
      r"params.c must have shape \(2,\) to match W", "c_shape"),
    C(rbm.energy, "shape", rbm_joint, lambda a: dict(h=jnp.ones((3, 2))), r"v and h must have the same batch shape", "batch"),
    C(rbm.free_energy, "finite", rbm_args, lambda a: dict(v=_nan_at(a["v"])), r"v must be finite", "nan_v"),
    C(rbm.free_energy, "finite", rbm_args, lambda a: dict(params=a["params"]._replace(W=_nan_at(a["params"].W))),
      r"params.W must be finite", "nan_W"),
    C(rbm.free_energy, "dtype", rbm_args, lambda a: dict(params=a["params"]._replace(W=np.ones((3, 2), np.int64))),
      r"params.W must have a floating dtype", "int_W"),
    C(rbm.init_params, "dtype", lambda: dict(n_visible=3, n_hidden=2, key=KEY), lambda a: dict(dtype=jnp.int32),
      r"dtype must be a floating dtype", "int_dtype"),
    C(rbm.init_params, "K", lambda: dict(n_visible=3, n_hidden=2, key=KEY), lambda a: dict(n_hidden=0),
      r"n_hidden must be an integer >= 1", "zero_hidden"),
    C(rbm.gibbs, "domain", lambda: dict(params=rbm_args()["params"], v0=rbm_args()["v"], n_steps=2, key=KEY),
      lambda a: dict(v0=jnp.full((2, 3), 0.5)), r"v0 must be binary", "nonbinary_v0"),
    C(rbm.log_likelihood, "finite", lambda: dict(rbm_args(), log_z=rbm.log_partition(rbm_args()["params"])),
      lambda a: dict(log_z=jnp.nan), r"log_z must be finite", "nan_log_z"),
    C(rbm.log_likelihood, "shape", lambda: dict(rbm_args(), log_z=rbm.log_partition(rbm_args()["params"])),
      lambda a: dict(log_z=jnp.ones(2)), r"log_z must be a real scalar", "vector_log_z"),
    C(rbm.fit, "positive", lambda: dict(params=rbm_args()["params"], data=rbm_args()["v"], key=KEY, n_epochs=1, batch_size=2),
      lambda a: dict(learning_rate=0.0), r"learning_rate must be finite and > 0", "zero_lr"),
    # --- diffusion ----------------------------------------------------------
    C(diffusion.ideal_energy, "shape", diffusion_args, lambda a: dict(x=_normal((3, 3))), r"x has dimension d = 3 but data have d = 2", "x_dim"),
    C(diffusion.ideal_energy, "shape", diffusion_args, lambda a: dict(t=jnp.array([1, 2])),
      r"t must be a scalar or have shape \(3,\)", "t_shape"),
    C(diffusion.ideal_energy, "finite", diffusion_args, lambda a: dict(data=_nan_at(a["data"])), r"data must be finite", "nan_data"),
    C(diffusion.ideal_energy, "K", diffusion_args, lambda a: dict(data=jnp.zeros((0, 2))), r"data must be non-empty", "no_data"),
    C(diffusion.ideal_energy, "dtype", diffusion_args, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(diffusion.ideal_score, "dtype", diffusion_args, lambda a: dict(t=7.0), r"t must be an integer time step", "float_t"),
    C(diffusion.ideal_energy, "domain", diffusion_args, lambda a: dict(t=0), r"t must lie in 1..T = 1..20", "t_zero"),
    C(diffusion.ideal_energy, "type", diffusion_args, lambda a: dict(schedule=tuple(a["schedule"])), r"schedule must be a Schedule", "tuple"),
    C(diffusion.make_schedule, "positive", lambda: dict(betas=jnp.array([0.1, 0.2])), lambda a: dict(betas=jnp.array([0.1, 0.0])),
      r"betas must lie in \(0, 1\)", "zero_beta"),
    C(diffusion.make_schedule, "dtype", lambda: dict(betas=jnp.array([0.1, 0.2])), lambda a: dict(betas=np.array([0, 0])),
      r"betas must have a floating dtype", "int_betas"),
    C(diffusion.kl_weight, "positive", lambda: dict(schedule=diffusion.linear_schedule(20), t=3, sigma2=0.01),
      lambda a: dict(sigma2=0.0), r"sigma2 must be > 0", "zero_sigma2"),
    C(diffusion.time_embedding, "K", lambda: dict(t=jnp.array([1, 5]), num_steps=10, num_freqs=2), lambda a: dict(num_freqs=0),
      r"num_freqs must be an integer >= 1", "zero_freqs"),
    C(diffusion.time_embedding, "dtype", lambda: dict(t=jnp.array([1, 5]), num_steps=10, num_freqs=2),
      lambda a: dict(t=jnp.array([1.0, 5.0])), r"t must be a \(B,\) array of integer time steps", "float_t"),
    C(diffusion.mlp_epsilon, "shape", diffusion_mlp, lambda a: dict(x=_normal((3, 3))), r"x has width d = 3 but params expect", "x_width"),
    C(diffusion.mlp_epsilon, "finite", diffusion_mlp, lambda a: dict(x=_nan_at(a["x"])), r"x must be finite", "nan_x"),
    C(diffusion.mlp_epsilon, "dtype", diffusion_mlp, lambda a: dict(x=_ints(a["x"])), r"x must have a floating dtype", "int_x"),
    C(diffusion.mlp_epsilon, "domain", diffusion_mlp, lambda a: dict(t=21), r"t must lie in 1..T = 1..20", "t_big"),
    C(diffusion.fit_mlp, "type",
      lambda: dict(params=diffusion_mlp()["params"], data=_normal((5, 2)), schedule=diffusion.linear_schedule(20),
                   optimizer=optax.sgd(1e-3), key=KEY, steps=1, batch_size=2),
      lambda a: dict(params=tuple(a["params"])), r"params must be an MLPParams", "tuple_params"),
    C(diffusion.denoising_loss, "type", diffusion_loss, lambda a: dict(eps_fn=None), r"eps_fn must be callable", "none"),
    # --- predictive coding --------------------------------------------------
    C(pc.mixture_energy, "shape", pc_mixture, lambda a: dict(mu=_normal((2, 3))), r"mu must have 2 columns", "mu_width"),
    C(pc.mixture_energy, "shape", pc_mixture, lambda a: dict(x=_normal((6, 2))), r"x must have 3 columns", "x_width"),
    C(pc.mixture_energy, "finite", pc_mixture, lambda a: dict(x=_nan_at(a["x"], 7)), r"x must be finite", "nan_x"),
    C(pc.mixture_energy, "finite", pc_mixture, lambda a: dict(params=a["params"]._replace(W2=_nan_at(a["params"].W2))),
      r"params.W2 must be finite", "nan_W2"),
    C(pc.mixture_energy, "K", pc_mixture, lambda a: dict(mu=jnp.zeros((0, 2))), r"mu must have shape \(n, m .*\) with n >= 1", "no_causes"),
    C(pc.mixture_energy, "dtype", pc_mixture, lambda a: dict(x=_ints(a["x"])), r"x must be floating point", "int_x"),
    C(pc.mixture_grad_mu, "dtype", pc_mixture, lambda a: dict(params=a["params"]._replace(W1=_ints(a["params"].W1))),
      r"params.W1 must be floating point", "int_W1"),
    C(pc.mixture_infer, "positive", pc_infer,
      lambda a: dict(step_size=-0.1), r"step_size must be a finite scalar > 0", "neg_step"),
    C(pc.pcn_energy, "shape", pc_net, lambda a: dict(xs=a["xs"][:2]), r"xs must be a tuple of L = 3 arrays", "n_layers"),
    C(pc.pcn_energy, "shape", pc_net, lambda a: dict(xs=(a["xs"][0], _normal((2, 5)), a["xs"][2])), r"xs\[1\] \(layer 2\) must have shape",
      "layer_width"),
    C(pc.pcn_energy, "finite", pc_net, lambda a: dict(xs=(a["xs"][0], _nan_at(a["xs"][1]), a["xs"][2])), r"xs\[1\] must be finite", "nan"),
    C(pc.pcn_energy, "dtype", pc_net, lambda a: dict(xs=(_ints(a["xs"][0]),) + a["xs"][1:]), r"xs\[0\] must be floating point", "int_xs"),
    C(pc.pcn_energy, "positive", pc_net, lambda a: dict(precisions=jnp.array([0.0, 1.0, 0.0])), r"precisions must be finite", "zero_prec"),
    C(pc.pcn_init, "K", lambda: dict(sizes=(3, 2), key=KEY), lambda a: dict(sizes=(3,)), r"sizes must be a sequence of L >= 2", "one_layer"),
    C(pc.mlp, "shape", lambda: dict(params=pc_mixture()["params"], mu=_normal((2, 2))), lambda a: dict(mu=_normal((2, 3))),
      r"mu must have .*2", "mu_width",
      gap="predictive_coding.mlp: mu is not validated; a width mismatch raises a TypeError from dot_general "
          "instead of 'mu must have shape (..., m) with m = params.W1.shape[1]'"),
    C(pc.mlp, "finite", lambda: dict(params=pc_mixture()["params"], mu=_normal((2, 2))), lambda a: dict(mu=_nan_at(a["mu"])),
      r"mu must be finite", "nan_mu",
      gap="predictive_coding.mlp: NaN in mu propagates silently; it must raise 'mu must be finite'"),
]


def _kwargs(case: Case) -> tuple[dict, dict]:
    valid = case.valid()
    bad = dict(valid)
    bad.update(case.bad(valid))
    return valid, bad


def _params():
    out = []
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, raises=(AssertionError, TypeError, ValueError, pytest.fail.Exception), reason=case.gap)] \
            if case.gap else []
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def _valid_params():
    return [pytest.param(case, id=case.id) for case in CASES]


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
    "core": {"shape", "finite", "K", "mask", "dtype"},
    "gmm": {"shape", "finite", "pd", "K", "dtype"},
    "slds": {"shape", "finite", "pd", "K", "dtype"},
    "hopfield": {"shape", "finite", "K", "beta", "dtype"},
    "attention": {"shape", "finite", "K", "beta", "mask", "dtype"},
    "slot_attention": {"shape", "finite", "K", "positive", "dtype"},
    "rbm": {"shape", "finite", "K", "positive", "dtype"},
    "diffusion": {"shape", "finite", "K", "positive", "dtype"},
    "predictive_coding": {"shape", "finite", "K", "positive", "dtype"},
}


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


@pytest.mark.parametrize(
    "fn, make, arg",
    [
        (gmm.energy, gmm_energy, "x"),
        (rbm.free_energy, rbm_args, "v"),
    ],
    ids=["gmm.energy-x", "rbm.free_energy-v"],
)
def test_integer_data_is_cast_exactly(fn, make, arg):
    """gmm and rbm accept integer *data* (e.g. binary pixels) and cast it; the result equals the float call."""
    kwargs = make()
    ints = _ints(kwargs[arg])
    as_int = fn(**{**kwargs, arg: ints})
    as_float = fn(**{**kwargs, arg: jnp.asarray(ints, jnp.float64)})
    assert jnp.issubdtype(as_int.dtype, jnp.floating)
    np.testing.assert_array_equal(np.asarray(as_int), np.asarray(as_float))
