"""Generic tests over every model of :mod:`lse_energy.registry`.

* the registry lists every model module once, and every chapter it names exists;
* every model's function is finite on its example; an energy is a scalar;
* ``jax.test_util.check_grads`` to second order (forward and reverse mode) on
  every model's function, in the floating leaves of the arguments it lists;
* every model with an energy has an independent NumPy/``mpmath`` oracle in
  ``test_properties.MODELS`` and bad-input cases in ``test_validation``.
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

import lse_energy
from lse_energy.registry import MODELS, get

jax.config.update("jax_enable_x64", True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
IDS = [m.name for m in MODELS]

# Modules that are not models: the bottom layer, the layers above the models, helpers.
NOT_MODELS = {
    "_validate",
    "_progress",
    "_rows",
    "_descent",
    "compile_cache",
    "drivers",
    "testing",
    "plotting",
    "registry",
    "sharding",
    "experiments",
}


def test_registry_lists_every_model_module_once():
    modules = {m.name for m in pkgutil.iter_modules(lse_energy.__path__)} - NOT_MODELS
    assert sorted(IDS) == sorted(modules)
    assert len(IDS) == len(set(IDS))
    with pytest.raises(ValueError, match="no model 'gauss'"):
        get("gauss")


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_chapter_exists_and_function_is_public(model):
    assert (ROOT / "book" / f"{model.chapter}.ipynb").exists()
    module = importlib.import_module(f"lse_energy.{model.name}")
    assert model.function.__module__ == module.__name__
    assert model.function.__name__ in module.__all__


def _split(example, wrt):
    """(floating leaves of the ``wrt`` arguments, a function rebuilding the arguments from them).

    A ``wrt`` entry is an argument name or ``"arg.field"`` for one field of a NamedTuple argument
    (the constrained fields, such as mixture weights on the simplex, are left out: a finite
    difference would leave their domain).
    """

    def get(name):
        arg, _, field = name.partition(".")
        return getattr(example[arg], field) if field else example[arg]

    leaves, tree = jax.tree_util.tree_flatten([get(w) for w in wrt])
    is_float = [jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating) for a in leaves]
    floats = tuple(a for a, f in zip(leaves, is_float) if f)

    def rebuild(*new):
        it = iter(new)
        values = jax.tree_util.tree_unflatten(tree, [next(it) if f else a for a, f in zip(leaves, is_float)])
        out = dict(example)
        for name, value in zip(wrt, values):
            arg, _, field = name.partition(".")
            out[arg] = out[arg]._replace(**{field: value}) if field else value
        return out

    return floats, rebuild


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_function_is_finite_and_an_energy_is_a_scalar(model):
    out = model.function(**model.example(jax.random.key(0)))
    assert bool(jnp.all(jnp.isfinite(out)))
    assert jnp.result_type(out) == jnp.float64
    if model.has_energy:
        assert jnp.shape(out) == ()


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_check_grads_second_order(model):
    example = model.example(jax.random.key(1))
    floats, rebuild = _split(example, model.wrt)
    assert floats, f"{model.name}: nothing to differentiate"

    def f(*leaves):
        return model.function(**rebuild(*leaves))

    # Jitted: the same derivatives, each compiled as one program instead of op by op (about
    # 3x faster; validation that needs concrete values is skipped under a trace, the maths
    # is not). JAX's float64 defaults: eps 1e-4, tol 1e-5.
    check_grads(jax.jit(f), floats, order=2, modes=("fwd", "rev"))


def test_every_energy_has_an_independent_oracle():
    from tests.contracts import test_properties as P

    oracles = {m.name.split(".")[0] for m in P.MODELS}
    missing = sorted(m.name for m in MODELS if m.has_energy and m.name not in oracles)
    assert not missing, f"no NumPy/mpmath oracle in test_properties.MODELS for {missing}"


def test_every_model_has_validation_cases():
    from tests.contracts import test_validation as V

    missing = sorted(m.name for m in MODELS if m.name not in V.REQUIRED)
    assert not missing, f"no bad-input cases in test_validation.REQUIRED for {missing}"


def test_equation_index_names_every_model_and_only_real_objects():
    import re

    text = (ROOT / "book" / "equation_index.md").read_text()
    for model in MODELS:
        assert f"lse_energy.{model.name}." in text, f"the equation index does not cite lse_energy.{model.name}"
    for dotted in sorted(set(re.findall(r"`(lse_energy(?:\.\w+)+)`", text))):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                continue
        for attr in parts[i:]:
            assert hasattr(obj, attr), f"the equation index cites {dotted}, which does not exist"
            obj = getattr(obj, attr)


def test_examples_are_deterministic():
    for model in MODELS:
        a = jax.tree_util.tree_leaves(model.example(jax.random.key(3)))
        b = jax.tree_util.tree_leaves(model.example(jax.random.key(3)))
        for x, y in zip(a, b):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_api_reference_documents_every_public_module():
    """book/api.md is an index of one page per module (book/api/*.md), each listed in _toc.yml
    under it: together they document every public module exactly once, the models in the
    registry's (the book's) order."""
    import re

    import yaml

    def sections(entries):
        for entry in entries:
            yield entry
            yield from sections(entry.get("sections", []))

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [e for part in toc["parts"] for e in sections(part["chapters"])]
    index = next(e for e in entries if e.get("file") == "book/api")
    listed = [e["file"] for e in index.get("sections", [])]
    pages = sorted(str(p.relative_to(ROOT).with_suffix("")) for p in (ROOT / "book" / "api").glob("*.md"))
    assert sorted(listed) == pages, "every book/api/*.md page is listed under book/api in _toc.yml"
    linked = re.findall(r"\{doc\}`(api/\w+)`", (ROOT / "book" / "api.md").read_text())
    assert [f"book/{p}" for p in linked] == listed, "the API index links every page, in the order of _toc.yml"

    modules = []  # (page, module) in the order of the table of contents
    for page in listed:
        found = re.findall(r"\.\. automodule:: lse_energy\.([\w.]+)\n", (ROOT / f"{page}.md").read_text())
        assert len(found) == 1, f"{page}.md documents {found}: one module per page"
        modules.append(found[0])
    public = {
        info.name.removeprefix("lse_energy.")
        for info in pkgutil.walk_packages(lse_energy.__path__, "lse_energy.")
        if not any(part.startswith("_") for part in info.name.split("."))
        # a package is documented by its modules, unless it is a model (gmm, adversarial)
        and (not info.ispkg or info.name.removeprefix("lse_energy.") in {m.name for m in MODELS})
    }
    assert len(modules) == len(set(modules)), "a module documented twice"
    assert set(modules) == public, sorted(set(modules) ^ public)
    # grouped by model, in the registry's (the book's) order
    order = [m.name for m in MODELS]
    assert [m for m in modules if m in order] == order


# --- one result type for every fit --------------------------------------------------------------


def _fits():
    """Every public fit in the package, each as a small call (name -> thunk)."""

    from lse_energy import (
        adversarial,
        autoencoder,
        diffusion,
        embedding,
        gan,
        gmm,
        gru,
        mixture_pc,
        pcn,
        rbm,
        sharding,
        slds,
        slot_attention,
        vae,
    )
    from lse_energy.experiments import diffusion_mlp

    rng = np.random.default_rng(0)
    x2 = jnp.asarray(rng.normal(size=(12, 2)))
    traj = jnp.asarray(np.cumsum(rng.normal(size=(16, 2)), axis=0) * 0.3)
    key = jax.random.key(0)
    sgd = optax.sgd(1e-2)
    gp = gmm.init_params(x2, 2, key=key)
    shift = jnp.mean(x2, axis=0)
    r = rbm.init_params(3, 2, key=key, scale=0.5)
    binary = jnp.asarray((rng.random((6, 3)) < 0.5).astype(float))
    sp = slot_attention.Params(jnp.eye(2), jnp.eye(2))
    return {
        "autoencoder.fit": lambda **kw: autoencoder.fit(
            autoencoder.init_params(2, 1, key=key),
            x2,
            optimizer=sgd,
            n_steps=3,
            **kw,
        ),
        "gmm.fit": lambda **kw: gmm.fit(x2, 2, key=key, max_iter=3, tol=0.0, **kw),
        "gmm.em": lambda **kw: gmm.em(
            gp, gmm.sufficient_statistics, (x2, shift), n=12, shift=shift, max_iter=3, tol=0.0, **kw
        ),
        "sharding.sharded_fit": lambda **kw: sharding.sharded_fit(
            x2,
            2,
            sharding.data_mesh(1),
            key=key,
            max_iter=3,
            tol=0.0,
            **kw,
        ),
        "slds.fit": lambda **kw: slds.fit(traj, 2, key=key, max_iter=3, n_init=2, tol=0.0, **kw),
        "mixture_pc.fit": lambda **kw: mixture_pc.fit(
            mixture_pc.init_params(1, 3, 2, key=key),
            x2,
            jnp.zeros((2, 1)),
            optimizer=sgd,
            n_steps=3,
            n_infer_steps=2,
            n_learn_steps=2,
            **kw,
        ),
        "slot_attention.fit": lambda **kw: slot_attention.fit(sp, x2, x2[:3], n_steps=3, **kw),
        "adversarial.fit": lambda **kw: adversarial.fit(
            adversarial.init_params(2, 3, 2, key=key),
            x2,
            jnp.asarray(np.arange(12) % 2),
            key=key,
            optimizer=sgd,
            n_epochs=3,
            batch_size=4,
            trades_weight=1.0,
            epsilon=0.1,
            n_inner_steps=2,
            **kw,
        ),
        "rbm.fit": lambda **kw: rbm.fit(r, binary, key=key, optimizer=optax.sgd(0.05), n_epochs=3, batch_size=3, **kw),
        "embedding.fit": lambda **kw: embedding.fit(
            embedding.init_params(4, 2, key=key),
            jnp.asarray(rng.integers(1, 4, size=(4, 4)).astype(float)),
            optimizer=sgd,
            n_steps=3,
            **kw,
        ),
        "gru.fit": lambda **kw: gru.fit(
            gru.init_params(2, 3, 2, key=key),
            jnp.asarray(rng.normal(size=(6, 4, 2))),
            jnp.array([0, 1, 0, 1, 1, 0]),
            key=key,
            optimizer=sgd,
            n_epochs=3,
            batch_size=3,
            **kw,
        ),
        "pcn.fit": lambda **kw: pcn.fit(
            pcn.init_params((2, 3, 2), key=key),
            x2,
            x2,
            key=key,
            optimizer=sgd,
            n_epochs=3,
            batch_size=4,
            n_infer_steps=2,
            **kw,
        ),
        "gan.fit": lambda **kw: gan.fit(
            gan.init_params(2, 2, key=key, generator_hidden=(3,), discriminator_hidden=(3,)),
            x2,
            key=key,
            d_optimizer=sgd,
            g_optimizer=sgd,
            n_steps=3,
            batch_size=4,
            **kw,
        ),
        "diffusion_mlp.fit": lambda **kw: diffusion_mlp.fit(
            diffusion_mlp.init_params(2, key=key, hidden=(4,), n_freqs=2),
            x2,
            diffusion.linear_schedule(8),
            sgd,
            key=key,
            n_steps=3,
            batch_size=4,
            **kw,
        ),
        "vae.fit": lambda **kw: vae.fit(
            vae.init_params(2, 1, 3, key=key),
            jnp.asarray(rng.random((12, 2))),
            key=key,
            optimizer=sgd,
            n_epochs=3,
            batch_size=4,
            **kw,
        ),
    }


def test_every_fit_is_listed():
    """Each public ``fit`` (and the EM loops ``gmm.em``, ``sharding.sharded_fit``) is in ``_fits``."""
    import lse_energy.experiments

    found = set()
    for pkg in (lse_energy, lse_energy.experiments):
        for info in pkgutil.iter_modules(pkg.__path__):
            module = importlib.import_module(f"{pkg.__name__}.{info.name}")
            if module.__name__ == "lse_energy.drivers":
                continue  # the drivers themselves (drivers.em), not a model's fit
            for name in getattr(module, "__all__", []):
                if name in ("fit", "em", "sharded_fit"):
                    found.add(f"{info.name}.{name}")
    assert found == set(_fits())


def _fit_function(name):
    module, fn = name.split(".")
    pkg = "lse_energy.experiments" if module == "diffusion_mlp" else "lse_energy"
    return getattr(importlib.import_module(f"{pkg}.{module}"), fn)


def family_violations(name, fn) -> list[str]:
    """How the signature of the fit ``name`` breaks its family (registry.EM_FITS / GRADIENT_FITS / STEP_FITS)."""
    import inspect

    from lse_energy import registry

    params = inspect.signature(fn).parameters
    positional = [p for p, v in params.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
    keyword = {p for p, v in params.items() if v.kind is v.KEYWORD_ONLY}
    out = []
    if name in registry.EM_FITS:
        head, required = ["x", "n_components"], {"key", "max_iter", "tol"}
    elif name in registry.GRADIENT_FITS:
        head, required = ["params", "x"], {"key", "optimizer", "n_epochs", "batch_size"}
        if positional[2:3] not in ([], ["y"]) and params[positional[2]].default is inspect.Parameter.empty:
            out.append(f"{name}: a required argument after x is the labels y; got {positional[2]}")
    elif name in registry.STEP_FITS:
        head, required = ["params", "x"], {"optimizer", "n_steps"}
    elif name in registry.OTHER_FITS:
        head, required = [p for p in positional[:2] if p in ("params", "x")], set()
        if "x" not in positional and name != "gmm.em":
            out.append(f"{name}: the data argument is x")
    else:
        return [f"{name}: in no family and not in registry.OTHER_FITS"]
    if positional[: len(head)] != head:
        out.append(f"{name}: starts ({', '.join(positional[: len(head)])}), not ({', '.join(head)})")
    out += [f"{name}: {p} is not keyword-only" for p in sorted(required - keyword)]
    if "progress" not in keyword or params["progress"].default is not False:
        out.append(f"{name}: no keyword-only progress=False (the driver's progress bar)")
    return out


@pytest.mark.parametrize("name", sorted(_fits()))
def test_every_fit_belongs_to_a_family(name):
    assert family_violations(name, _fit_function(name)) == []


FAMILY_CONTROLS = {
    # (registered as, scratch signature) -> the violation the check must report
    "em fit taking params": ("gmm.fit", "def fit(params, x, *, key, max_iter=100, tol=1e-6): pass", "starts"),
    "em fit without tol": ("slds.fit", "def fit(x, n_components, *, key, max_iter=100): pass", "tol is not"),
    "trainer without optimizer": (
        "rbm.fit",
        "def fit(params, x, *, key, learning_rate, n_epochs, batch_size): pass",
        "optimizer is not",
    ),
    "trainer named data": ("vae.fit", "def fit(params, data, *, key, optimizer, n_epochs, batch_size): pass", "starts"),
    "trainer with n_steps": (
        "gru.fit",
        "def fit(params, x, y, *, key, optimizer, n_steps, batch_size): pass",
        "n_epochs is not",
    ),
    "unlisted fit": ("lif.fit", "def fit(x): pass", "in no family"),
    "step fit with a positional optimizer": (
        "autoencoder.fit",
        "def fit(params, x, optimizer, *, n_steps): pass",
        "optimizer is not",
    ),
    "other fit named data": ("gan.fit", "def fit(params, data, *, key): pass", "the data argument is x"),
    "fit without a progress bar": (
        "vae.fit",
        "def fit(params, x, *, key, optimizer, n_epochs, batch_size): pass",
        "no keyword-only progress",
    ),
    "progress on by default": (
        "gmm.fit",
        "def fit(x, n_components, *, key, max_iter=100, tol=1e-6, progress=True): pass",
        "no keyword-only progress",
    ),
}


@pytest.mark.parametrize("case", sorted(FAMILY_CONTROLS))
def test_the_family_check_catches_a_violation(case):
    name, source, expected = FAMILY_CONTROLS[case]
    scope = {}
    exec(source, scope)
    found = family_violations(name, scope["fit"])
    assert any(expected in v for v in found), found


def test_the_families_list_only_real_fits():
    from lse_energy import registry

    listed = [*registry.EM_FITS, *registry.GRADIENT_FITS, *registry.STEP_FITS, *registry.OTHER_FITS]
    assert len(listed) == len(set(listed)) and set(listed) == set(_fits())


# --- which driver each fit calls (lse_energy._descent) -------------------------------------------


def driver_violations(name, call) -> list[str]:
    """How running ``call`` (a fit registered as ``name``) disagrees with ``registry.DRIVERS[name]``."""
    from lse_energy import _descent, registry

    with _descent.record() as used:
        call()
    expected = registry.DRIVERS[name]
    if set(used) != {expected}:
        return [f"{name}: registered with the {expected} driver but called {sorted(set(used)) or 'none'}"]
    return []


def test_every_fit_has_a_driver():
    from lse_energy import _descent, registry

    assert set(registry.DRIVERS) == set(_fits())
    assert set(registry.DRIVERS.values()) == {"minibatch", "em", "steps", "rounds"}
    assert all(callable(getattr(_descent, d)) for d in registry.DRIVERS.values())


@pytest.mark.parametrize("name", sorted(_fits()))
def test_every_fit_calls_its_driver(name):
    assert driver_violations(name, _fits()[name]) == []


@pytest.mark.parametrize("name", sorted(_fits()))
def test_every_fit_shows_its_drivers_progress_bar(name, monkeypatch):
    """``progress=True`` reaches the driver: a bar opens and is moved to its end (3 steps, or max_iter)."""
    from lse_energy import _progress

    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # a hidden bar counts nothing
    _progress.last = None
    _fits()[name](progress=True)
    assert _progress.last is not None, f"{name}: progress=True opened no bar"
    done, total = _progress.last
    assert total == 3 and 1 <= done <= total, _progress.last


def test_the_progress_check_sees_a_fit_that_drops_it(monkeypatch):
    # Control: a fit that accepts progress but does not pass it on opens no bar.
    from lse_energy import _progress

    _progress.last = None
    _fits()["gmm.fit"]()  # progress left off
    assert _progress.last is None


DRIVER_CONTROLS = {
    # (registered as, a call that breaks the registration) -> the violation the check must report
    "a trainer that bypasses the minibatch driver": ("vae.fit", "autoencoder.fit", "called ['steps']"),
    "an EM fit that calls no driver": ("gmm.fit", None, "called none"),
    "a two-player fit that calls the steps driver": ("gan.fit", "embedding.fit", "called ['steps']"),
    "an EM fit with a loop of its own": ("slds.fit", "slot_attention.fit", "called ['rounds']"),
}


@pytest.mark.parametrize("case", sorted(DRIVER_CONTROLS))
def test_the_driver_check_catches_a_violation(case):
    name, other, expected = DRIVER_CONTROLS[case]
    call = (lambda: None) if other is None else _fits()[other]
    found = driver_violations(name, call)
    assert any(expected in v for v in found), found


@pytest.mark.parametrize("name", sorted(_fits()))
def test_every_fit_returns_one_result_type(name):
    """``core.FitResult``: params of the model's type, an energy per iteration, ``n_iter`` an int,
    ``converged`` a bool exactly where the loop has a stopping rule (a ``max_iter`` argument)."""
    import inspect

    from lse_energy import core

    out = _fits()[name]()
    assert type(out) is core.FitResult
    assert type(out.params).__name__ == "Params"
    assert isinstance(out.n_iter, int) and not isinstance(out.n_iter, bool) and out.n_iter == 3
    energies = np.asarray(out.energies)
    assert np.all(np.isfinite(energies))
    assert energies.ndim == 1, f"energies has shape {energies.shape}: one value per iteration or epoch"
    module, fn = name.split(".")
    mod = importlib.import_module(
        f"lse_energy.{module}" if module != "diffusion_mlp" else "lse_energy.experiments.diffusion_mlp"
    )
    has_rule = "max_iter" in inspect.signature(getattr(mod, fn)).parameters
    if has_rule:
        # tol = 0 never stops a loop early: it runs out of iterations.
        assert out.converged is False and energies.shape == (out.n_iter + 1,)
    else:
        assert out.converged is None and energies.shape[0] in (out.n_iter, out.n_iter + 1)
    if out.extras is not None:
        assert type(out.extras).__name__ == "FitExtras" and hasattr(out.extras, "_fields")


def test_readme_layout_names_every_registered_module():
    # README's layout table is the reader's map of the package: every model module in it.
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `lse_energy/` |"))
    missing = [m.name for m in MODELS if f"`{m.name}`" not in row]
    assert not missing, f"README's layout row for lse_energy/ does not name {missing}"
