"""Every fit and iterative driver works in float32 and float64, with x64 on and off.

One registry (``DRIVERS``) names each public fit / iterative driver and a factory of
small valid arguments (shared with the validation registry). For each driver and each
input dtype in {float32, float64} the floating arrays of the arguments are cast to
that dtype, the driver is called, and every floating array it returns must have the
input's dtype.

The rule for the result dtype: with ``jax_enable_x64`` on, the input's dtype; with it
off, JAX canonicalises float64 inputs to float32, so every result is float32.

``tests/conftest.py`` turns x64 on for the session and no test may toggle it in
process, so the x64-off half runs the same registry in one subprocess (this module run
as ``python -m tests.contracts.test_dtypes`` with ``JAX_ENABLE_X64=0``), which reports JSON.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lse_energy import (
    adversarial,
    anpc,
    attention,
    diffusion,
    embedding,
    expanding,
    gan,
    gmm,
    gru,
    hopfield,
    lif,
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
from lse_energy import mixture_pc as mpc
from lse_energy.experiments import diffusion_mlp as dmlp
from lse_energy.experiments import structural_tasks as toy
from tests.contracts import test_validation as V  # the valid-argument factories

ROOT = pathlib.Path(__file__).resolve().parents[2]

DTYPES = ("float32", "float64")


def _rbm_fit():
    a = V.rbm_args()
    return dict(params=a["params"], x=a["v"], key=V.KEY, optimizer=optax.sgd(0.05), n_epochs=2, batch_size=1)


def _slot_fit():
    return dict(V.slot_args(), n_steps=2, m_step="least_squares")


def _diffusion_fit():
    return dict(
        params=V.diffusion_mlp()["params"],
        x=V._normal((8, 2)),
        schedule=diffusion.linear_schedule(20),
        optimizer=optax.adam(1e-3),
        key=V.KEY,
        n_steps=2,
        batch_size=4,
    )


def _expanding():
    return dict(q=V._normal((2, 3)), k=V._normal((2, 6, 3), 1), v=V._normal((2, 6, 2), 2), max_iter=3)


def _gan_fit():
    a = V.gan_args()
    return dict(
        params=a["params"],
        x=a["x"],
        key=V.KEY,
        d_optimizer=optax.adam(1e-3),
        g_optimizer=optax.adam(1e-3),
        n_steps=2,
        batch_size=2,
    )


DRIVERS = {
    "gan.fit": (gan.fit, _gan_fit),
    "population.simulate": (population.simulate, V.pop_sim),
    "lif.simulate": (lif.simulate, V.lif_sim),
    "autoencoder.fit": (ae_mod.fit, V.ae_fit_args),
    "gmm.fit": (gmm.fit, V.gmm_fit),
    # streamed_fit through its public entry: fit with chunk_rows streams x (cast like every input here)
    "gmm.streamed_fit": (lambda **kw: gmm.fit(chunk_rows=4, **kw), V.gmm_fit),
    "gmm.em_step": (gmm.em_step, V.gmm_energy),
    "sharding.sharded_fit": (sharding.sharded_fit, lambda: dict(V.gmm_fit(), mesh=sharding.data_mesh())),
    "sharding.sharded_em_step": (sharding.sharded_em_step, lambda: dict(V.gmm_energy(), mesh=sharding.data_mesh())),
    "slds.fit": (slds.fit, V.slds_fit),
    "slds.em_step": (slds.em_step, V.slds_energy),
    "slds.sample": (slds.sample, V.slds_sample),
    "hopfield.retrieve": (hopfield.retrieve, lambda: dict(V.hopfield_args(), n_steps=3, return_energy=True)),
    "structural.cccp": (structural.cccp, V.cccp_args),
    "slot_attention.fit": (slot_attention.fit, _slot_fit),
    "rbm.fit": (rbm.fit, _rbm_fit),
    "embedding.fit": (embedding.fit, V.emb_fit),
    "rbm.gibbs": (rbm.gibbs, V.rbm_gibbs),
    "mixture_pc.infer": (mpc.infer, V.pc_infer),
    "mixture_pc.fit": (mpc.fit, V.pc_fit),
    "pcn.infer": (pcn.infer, V.pcn_infer_args),
    "pcn.fit": (pcn.fit, V.pcn_train_args),
    "adversarial.fit": (adversarial.fit, V.adv_fit),
    "adversarial.pgd": (adversarial.pgd, V.adv_pgd),
    "adversarial.inner_maximize": (adversarial.inner_maximize, V.adv_inner),
    "adversarial.minimal_perturbation": (adversarial.minimal_perturbation, V.adv_minimal),
    "anpc.infer": (anpc.infer, V.anpc_infer_args),
    "diffusion_mlp.fit": (dmlp.fit, _diffusion_fit),
    "expanding.attend": (expanding.attend, _expanding),
    "gru.fit": (gru.fit, V.gru_fit),
    "gru.gru": (gru.gru, V.gru_gru_args),
    "gru.min_gru": (gru.min_gru, V.gru_min_args),
    "gru.scan_log_signed": (gru.scan_log_signed, V.gru_signed_args),
    "vae.fit": (vae.fit, V.vae_fit),
}


def _cast(tree, dtype):
    def leaf(a):
        if isinstance(a, (np.ndarray, jax.Array)) and jnp.issubdtype(a.dtype, jnp.floating):
            return jnp.asarray(np.asarray(a).astype(dtype))
        return a

    return jax.tree_util.tree_map(leaf, tree)


def result_dtypes(name: str, dtype: str) -> list[str]:
    """Call driver ``name`` on arguments cast to ``dtype``; the dtypes of its floating outputs."""
    fn, factory = DRIVERS[name]
    out = fn(**_cast(factory(), dtype))
    leaves = [a for a in jax.tree_util.tree_leaves(out) if isinstance(a, (np.ndarray, jax.Array))]
    floats = sorted({str(a.dtype) for a in leaves if jnp.issubdtype(a.dtype, jnp.floating)})
    assert floats, f"{name} returned no floating array"
    return floats


def test_registry_names_every_fit():
    """Every public ``fit`` / trainer in the package is in the registry."""
    import inspect

    missing = []
    for mod in (
        gru,
        ae_mod,
        gmm,
        sharding,
        slds,
        hopfield,
        attention,
        slot_attention,
        rbm,
        mpc,
        pcn,
        anpc,
        diffusion,
        dmlp,
        toy,
        embedding,
        gan,
        vae,
    ):
        for fname, f in inspect.getmembers(mod, inspect.isfunction):
            if f.__module__ != mod.__name__ or fname.startswith("_"):
                continue
            if fname.endswith("fit") or fname.endswith("train") or fname == "fit_mlp":
                key = f"{mod.__name__.rsplit('.', 1)[-1]}.{fname}"
                if key not in DRIVERS:
                    missing.append(key)
    assert not missing, missing


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_driver_keeps_the_input_dtype_with_x64(name, dtype):
    assert jax.config.jax_enable_x64
    assert result_dtypes(name, dtype) == [dtype]


def _default_dtype_calls():
    """Calls that take the ``dtype`` default: with x64 off they must give float32 without a warning."""
    from lse_energy import gan, rbm

    key = jax.random.key(0)
    return {
        "rbm.init_params": lambda: rbm.init_params(3, 2, key=key),
        "rbm.binary_states": lambda: rbm.binary_states(2),
        "gan.init_mlp": lambda: gan.init_mlp((2, 3), key=key),
        "gan.init_params": lambda: gan.init_params(2, 2, key=key, generator_hidden=(3,), discriminator_hidden=(3,)),
        "gan.ring_centers": lambda: gan.ring_centers(4),
        # the control: a fixed float64 default, as these had before issue 48, warns with x64 off
        "control: a float64 default": lambda: jnp.zeros(2, jnp.float64),
    }


def _leaf_dtypes(out) -> list[str]:
    return sorted({str(np.asarray(a).dtype) for a in jax.tree_util.tree_leaves(out)})


def test_every_dtype_argument_defaults_to_jax_default():
    """A ``dtype`` argument of a public model function defaults to ``None``, JAX's default floating dtype
    (``_validate.float_dtype``): a fixed ``jnp.float64`` ignores it, and warns with x64 off."""
    import importlib
    import inspect

    from lse_energy.registry import MODELS
    from tests.contracts.test_names import _public_functions

    fixed = []
    for m in MODELS:
        for name, f in _public_functions(importlib.import_module(f"lse_energy.{m.name}")).items():
            p = inspect.signature(f).parameters.get("dtype")
            if p is not None and p.default not in (None, inspect.Parameter.empty):
                fixed.append(f"{m.name}.{name}(dtype={p.default})")
    assert fixed == []


@pytest.fixture(scope="module")
def x64_off_results():
    env = {**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.contracts.test_dtypes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_driver_returns_float32_with_x64_off(name, dtype, x64_off_results):
    got = x64_off_results["results"][name][dtype]
    assert x64_off_results["x64"] is False
    assert got == ["float32"], got


@pytest.mark.parametrize("name", sorted(n for n in _default_dtype_calls() if not n.startswith("control")))
def test_default_dtype_is_float32_with_x64_off_without_a_warning(name, x64_off_results):
    """With x64 off, the default ``dtype`` gives float32 and no ``UserWarning`` (the subprocess turns
    warnings into errors)."""
    assert x64_off_results["defaults"][name] == ["float32"]


def test_a_float64_default_warns_with_x64_off(x64_off_results):
    """The control: the same check fails on a fixed float64 default."""
    assert x64_off_results["defaults"]["control: a float64 default"].startswith("UserWarning")


def _main() -> None:
    import warnings

    warnings.simplefilter("error")  # a dtype-promotion warning is a failure too
    results = {}
    for name in sorted(DRIVERS):
        results[name] = {}
        for dtype in DTYPES:
            try:
                results[name][dtype] = result_dtypes(name, dtype)
            except Exception as err:  # reported, and fails the parent's assert
                results[name][dtype] = f"{type(err).__name__}: {err}"[:500]
    defaults = {}
    for name, call in _default_dtype_calls().items():
        try:
            defaults[name] = _leaf_dtypes(call())
        except Exception as err:
            defaults[name] = f"{type(err).__name__}: {err}"[:500]
    print(json.dumps({"x64": bool(jax.config.jax_enable_x64), "results": results, "defaults": defaults}))


if __name__ == "__main__":
    _main()
