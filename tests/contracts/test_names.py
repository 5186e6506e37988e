"""One name per concept: the vocabulary of the package, read from the registry and the signatures.

Beside ``test_architecture.py`` (which reads the import graph), this test reads every public
function of every model module (``lse_energy.registry.MODELS``), of ``sharding`` and of the
``experiments`` modules, and checks the naming contract of CONTRIBUTING ("Module shape"):

1. An energy model exposes its registered energy as ``energy``; its similarity, where it has
   one (a private ``_sim`` kernel), as ``sim``; no other public name says "similarity" or ends
   in ``_sim``.
2. A gradient is ``grad_<wrt>``: a public name containing ``grad`` or ``gradient`` starts with
   ``grad_``, except the few in ``NOT_GRADIENTS``, which are not gradients (each says why).
   ``<wrt>`` says what it differentiates in, and of what: ``grad_<arg>`` is the gradient of the
   module's energy (its registered function; in a model without one, its ``loss``) in the
   argument ``<arg>`` (a parameter of that function, a field of the module's ``Params``, or
   several parameters joined by ``_``); ``grad_<function>_<arg>`` is the gradient of another
   public function of the module in its argument ``<arg>``. ``OTHER_GRADIENTS`` lists the few
   named otherwise, each with the reason.
3. Iteration counts: ``n_steps`` for a fixed loop, ``max_iter`` with ``tol`` for a loop with a
   stopping rule, ``n_epochs`` for a minibatch trainer, and ``n_<what>_steps`` for a second
   loop in the same function; any other name that counts iterations (``n_iterations``,
   ``num_steps``, ``n_updates`` ...) is refused. Every ``max_iter`` comes with a ``tol``, and
   their defaults are the package's pair ``(100, 1e-6)``, except where ``tol`` bounds another
   quantity (``OTHER_TOL``).
4. One meaning per name: ``beta`` is an inverse temperature, ``t`` a diffusion time step, ``k``
   the keys of attention: where a docstring has an entry for such an argument, the entry
   states that meaning (a docstring that defers to another function's, "arguments as
   :func:`energy`", has none to check). ``beta`` always has an entry (or a deferral). Labels
   are ``y``.
5. One name for data: the data argument is ``x``. In a module with a ``fit``, no public function
   names its data ``data``, ``xs``, ``counts``, ``inputs`` or ``X`` (``OTHER_DATA`` lists the
   arguments of those names that are not the module's data, each with the reason).

Each rule is run on scratch modules that break it (``test_each_rule_catches_a_violation``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types

import pytest

from lse_energy.registry import MODELS

NOT_GRADIENTS = {
    "slot_attention.gradient_step": "a descent step on F_lambda, not a gradient",
    "adversarial.gradient_attack": "the notes' one-step attack x + k grad E (§24), not a gradient",
}
# tol bounds another quantity than the change in energy per point of an EM fit.
OTHER_TOL = {
    "expanding.attend": "|q_{t+1} - q_t| of the window prior, a probability",
    "expanding.attention": "|q_{t+1} - q_t| of the window prior, a probability",
    "experiments.structural_tasks.predict_expanding_task": "expanding.attend's q, at the chapter's 1e-3",
    "experiments.structural_tasks.run_expanding_experiment": "expanding.attend's q, at the chapter's 1e-3",
    "experiments.authors_multihop.predict_fig3": "the growth of the window kappa, as the authors' code, at their 0.01",
    "experiments.authors_multihop.run_fig3": "the growth of the window kappa, as the authors' code, at their 0.01",
}
COUNT_SUFFIXES = ("steps", "iter", "iters", "iteration", "iterations", "epochs", "rounds", "sweeps", "updates", "loops")
#: A count of iterations by another name: n_/num_/max_ followed by a word for a step.
COUNT_LIKE = re.compile(r"^(n|num|max)_(\w+_)?(it|iter\w*|step\w*|epoch\w*|update\w*|sweep\w*|round\w*|loop\w*)$")
COUNT_NAMES = {"n_steps", "max_iter", "n_epochs"}
SECOND_LOOP = re.compile(r"^n_[a-z]+(_[a-z]+)*_steps$")
DEFAULT_PAIR = (100, 1e-6)
#: Public gradients named neither grad_<arg> nor grad_<function>_<arg>, and why.
OTHER_GRADIENTS = {
    "core.grad_graph_terms": "the child and parent parts of eq. (4), summed by grad_graph_energy_nodes",
    "slds.grad_next": "the child part of eq. (4): dE/dx_{t+1} through term t (a part of grad_x)",
    "slds.grad_prev": "the parent part of eq. (4): dE/dx_t through term t (a part of grad_x)",
    "attention.grad_tokens": "token_energy's gradients in both token sets xq and xk (eqs. 7-8 and the chain rule)",
    "attention.grad_params": "token_energy's gradient in params (W^Q, W^K), eqs. (7)-(8) and the chain rule",
    "attention.grad_self_terms": "the two terms of eq. (16), which grad_self sums",
    "attention.grad_self": "dE^SA/dx of self_energy, eq. (16): the book's name for self-attention's gradient",
    "multihop.grad_logits": "the gradient in the logits S of <G, A(P) v>, the multi-hop map's vector-Jacobian product",
    "rbm.grad_cd": "a CD-k estimate of grad_log_likelihood_params, named for the estimator (§23.8)",
    "rbm.grad_cd_expected": "the expectation of grad_cd over the chain, by enumeration",
    "pcn.grad_x": "dF/dx of the value nodes xs (the notes' x_l), one array per layer: energy names them xs",
    "anpc.grad_x_standard": "dF_std/dx of the standard predictive-coding energy, which has no function of its own",
    "gru.grad_scan_log": "the VJP of scan_log: a cotangent in, gradients in every input out",
    "autoencoder.grad_loss_paths": "the encoder- and decoder-path parts of grad_params's W (GradPaths)",
    "gan.grad_generator_loss_logits": "the generator loss's gradient in the discriminator logits it is a function of",
}
#: Arguments named as data (``OTHER_DATA_NAMES``) that are not the module's data, and why.
DATA_NAMES = ("data", "xs", "counts", "inputs", "X")
OTHER_DATA = {
    "gmm.em(data)": "the argument tuple that the caller's statistics reads (sharding's shards), not rows",
    "pcn.predictions(xs)": "the value nodes of every layer (a tuple), not data rows",
    "pcn.errors(xs)": "the value nodes of every layer (a tuple), not data rows",
    "pcn.sim(xs)": "the value nodes of every layer (a tuple), not data rows",
    "pcn.energy(xs)": "the value nodes of every layer (a tuple), not data rows",
    "pcn.grad_x(xs)": "the value nodes of every layer (a tuple), not data rows",
    "pcn.grad_params(xs)": "the value nodes of every layer (a tuple), not data rows",
}
# name -> (words its docstring entry must contain, what the name means)
ONE_MEANING = {
    "beta": (("inverse temperature",), "an inverse temperature"),
    "t": (("step", "time"), "a diffusion time step"),
    "k": (("key",), "the keys of attention"),
}


def _modules():
    names = [m.name for m in MODELS] + ["sharding"]
    names += [
        info.name.removeprefix("lse_energy.")
        for info in pkgutil.iter_modules(
            importlib.import_module("lse_energy.experiments").__path__, "lse_energy.experiments."
        )
        if not info.name.rsplit(".", 1)[-1].startswith("_")
    ]
    return {n: importlib.import_module(f"lse_energy.{n}") for n in names}


def _public_functions(module):
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    out = {}
    for n in names:
        f = getattr(module, n)
        if inspect.isfunction(f) and f.__module__ == module.__name__:
            out[n] = f
    return out


def _arg_doc(doc: str, name: str) -> str:
    """The docstring's entry for argument ``name`` (``name: ...`` up to the next entry), or ''."""
    m = re.search(rf"^\s*(?:[\w, ]*\b)?{re.escape(name)}\b[\w, ]*:(.*(?:\n\s{{6,}}.*)*)", doc or "", re.M)
    return m.group(1).lower() if m else ""


#: A docstring that gives its arguments by reference to another function's.
DEFERS = re.compile(r"(arguments|args|parameters)\b[^.]{0,40}\bas (in )?:(func|class):", re.I)


def _main_function(module):
    """The function whose gradients are ``grad_<arg>``: the module's ``energy``, else its ``loss``, else the
    registered function."""
    for name in ("energy", "loss"):
        if inspect.isfunction(getattr(module, name, None)):
            return getattr(module, name)
    entry = next((m for m in MODELS if m.name == module.__name__.rsplit(".", 1)[-1]), None)
    return entry.function if entry else None


def _wrt_names(module, f) -> set[str]:
    """What a gradient of ``f`` may be in: its parameters, the fields of the module's ``Params``, and runs of
    its parameters joined by ``_`` (``prior_z``)."""
    params = [p for p in inspect.signature(f).parameters]
    names = set(params)
    names |= {"_".join(params[i:j]) for i in range(len(params)) for j in range(i + 2, len(params) + 1)}
    Params = getattr(module, "Params", None)
    if isinstance(Params, type) and hasattr(Params, "_fields"):
        names |= set(Params._fields)
    return names


def _names_a_gradient(module, name: str) -> bool:
    """Whether ``grad_<rest>`` reads as ``grad_<arg>`` of the main function or ``grad_<function>_<arg>``."""
    rest = name.removeprefix("grad_")
    main = _main_function(module)
    if main is not None and rest in _wrt_names(module, main):
        return True
    for fname, f in _public_functions(module).items():
        if (
            not fname.startswith("grad")
            and rest.startswith(fname + "_")
            and rest[len(fname) + 1 :] in _wrt_names(module, f)
        ):
            return True
    return False


def violations(label: str, module, *, model: bool = True) -> list[str]:
    """Every rule of the module docstring that ``module`` (reported as ``label``) breaks.

    Rules 1 and 2 (the model's energy, similarity and gradients) apply to ``model`` modules; in
    an experiment, ``gradient_attacks`` runs attacks and ``eval_grad_norms`` measures norms.
    """
    out = []
    functions = _public_functions(module)
    if hasattr(module, "_sim") and "sim" not in functions:
        out.append(f"{label}: has a similarity kernel _sim but no public sim")
    for name, f in functions.items():
        qual = f"{label}.{name}"
        words = name.split("_")
        if not model:
            pass
        elif "similarit" in name or name.endswith("_sim"):
            out.append(f"{qual}: a similarity is named sim")
        if (
            model
            and any(w.startswith("grad") for w in words)
            and not name.startswith("grad_")
            and qual not in NOT_GRADIENTS
        ):
            out.append(f"{qual}: a gradient is named grad_<wrt>")
        elif model and name.startswith("grad_") and qual not in OTHER_GRADIENTS and not _names_a_gradient(module, name):
            out.append(f"{qual}: a gradient is grad_<arg> (of the energy) or grad_<function>_<arg>")
        params = inspect.signature(f).parameters
        for p in params:
            counts = p.endswith(COUNT_SUFFIXES) or COUNT_LIKE.match(p)
            if counts and p not in COUNT_NAMES and not SECOND_LOOP.match(p):
                out.append(f"{qual}({p}): iteration counts are n_steps, max_iter, n_epochs or n_<what>_steps")
            if model and p in DATA_NAMES and "fit" in functions and name != "fit" and f"{qual}({p})" not in OTHER_DATA:
                out.append(f"{qual}({p}): the data argument is x, as in fit")
        if "beta" in params and not _arg_doc(f.__doc__, "beta") and not DEFERS.search(f.__doc__ or ""):
            out.append(f"{qual}(beta): beta has no docstring entry (it is an inverse temperature in this package)")
        if "max_iter" in params:
            if "tol" not in params:
                out.append(f"{qual}: max_iter without tol")
            elif qual not in OTHER_TOL:
                got = (params["max_iter"].default, params["tol"].default)
                if got != (inspect.Parameter.empty,) * 2 and got != DEFAULT_PAIR:
                    out.append(f"{qual}: (max_iter, tol) defaults {got}, not the package's {DEFAULT_PAIR}")
        for p, (needles, meaning) in ONE_MEANING.items():
            entry = _arg_doc(f.__doc__, p)
            if p in params and entry and not any(w in entry for w in needles):
                out.append(f"{qual}({p}): {p} is {meaning} in this package; its docstring entry does not say so")
    return out


MODULES = _modules()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_names_follow_the_contract(name):
    assert violations(name, MODULES[name], model=not name.startswith("experiments.")) == []


@pytest.mark.parametrize("model", [m for m in MODELS if m.has_energy], ids=lambda m: m.name)
def test_the_registered_energy_is_called_energy(model):
    module = MODULES[model.name]
    assert model.function.__name__ == "energy" and model.function is module.energy


def test_the_exceptions_exist():
    # No stale entry: every exception names a public function that exists.
    for qual in [*NOT_GRADIENTS, *OTHER_TOL, *OTHER_GRADIENTS]:
        mod, fn = qual.rsplit(".", 1)
        assert fn in _public_functions(MODULES[mod]), qual
    for entry in OTHER_DATA:
        qual, arg = entry.removesuffix(")").split("(")
        mod, fn = qual.rsplit(".", 1)
        assert arg in inspect.signature(_public_functions(MODULES[mod])[fn]).parameters, entry


def _scratch(source: str):
    module = types.ModuleType("lse_energy.scratch")
    exec(source, module.__dict__)
    for v in vars(module).values():
        if inspect.isfunction(v):
            v.__module__ = module.__name__
    return module


CONTROLS = {
    "similarity name": ("def similarity(q, k):\n    pass\n", "a similarity is named sim"),
    "prefixed sim": ("def prior_sim(p, z):\n    pass\n", "a similarity is named sim"),
    "hidden sim": ("def _sim(q, k):\n    pass\n\ndef energy(q, k):\n    pass\n", "no public sim"),
    "gradient name": ("def free_energy_grad_v(p, v):\n    pass\n", "grad_<wrt>"),
    "spelled gradient": ("def input_gradient(p, x):\n    pass\n", "grad_<wrt>"),
    "count name": ("def fit(x, *, infer_steps=5):\n    pass\n", "iteration counts"),
    "max_steps": ("def attend(q, *, max_steps=10, tol=1e-6):\n    pass\n", "iteration counts"),
    "no tol": ("def fit(x, *, max_iter=100):\n    pass\n", "max_iter without tol"),
    "other defaults": ("def fit(x, *, max_iter=200, tol=1e-9):\n    pass\n", "not the package's"),
    "beta as a weight": (
        'def loss(x, beta=1.0):\n    """Args:\n      beta: weight of the KL term."""\n',
        "beta is an inverse temperature",
    ),
    "t as labels": ('def loss(x, t):\n    """Args:\n      t: integer labels."""\n', "t is a diffusion time"),
    "k as a count": ('def cd(v, k=1):\n    """Args:\n      k: Gibbs sweeps."""\n', "k is the keys"),
    # issue 48: four violations the rules once let through, and the grad_ convention
    "similarity in a public name": ("def similarity_matrix(q, k):\n    pass\n", "a similarity is named sim"),
    "n_iterations": ("def fit(x, *, n_iterations=10):\n    pass\n", "iteration counts"),
    "num_steps": ("def infer(x, *, num_steps=10):\n    pass\n", "iteration counts"),
    "beta without an entry": (
        'def loss(x, beta=1.0):\n    """The loss.\n\n    Args:\n      x: data."""\n',
        "beta has no docstring entry",
    ),
    "data outside fit": (
        "def fit(params, x):\n    pass\n\ndef energy(params, data):\n    pass\n",
        "the data argument is x",
    ),
    "xs beside fit's x": (
        "def fit(params, x):\n    pass\n\ndef loss(params, xs):\n    pass\n",
        "the data argument is x",
    ),
    "grad_ of a function": (
        "def energy(params, x):\n    pass\n\ndef grad_energy(params, x):\n    pass\n",
        "grad_<arg> (of the energy) or grad_<function>_<arg>",
    ),
    "grad_ in an unknown argument": (
        "def energy(params, x):\n    pass\n\ndef grad_queries_regularised(params, x):\n    pass\n",
        "grad_<arg> (of the energy) or grad_<function>_<arg>",
    ),
}


@pytest.mark.parametrize("case", sorted(CONTROLS))
def test_each_rule_catches_a_violation(case):
    source, expected = CONTROLS[case]
    found = violations("scratch", _scratch(source))
    assert any(expected in v for v in found), found


def test_a_module_that_follows_the_rules_passes():
    ok = _scratch(
        "def _sim(q, k):\n    pass\n\n"
        "def sim(q, k, *, beta=1.0):\n"
        '    """Args:\n      k: keys.\n      beta: inverse temperature."""\n\n'
        "def grad_q(q, k):\n    pass\n\n"
        "def energy(q, k):\n    pass\n\n"
        "def loss(q, k, x):\n    pass\n\n"
        "def grad_loss_x(q, k, x):\n    pass\n\n"
        "def grad_q_k(q, k):\n    pass\n\n"
        "def predict(params, x):\n    pass\n\n"
        "def fit(x, *, max_iter=100, tol=1e-6, n_infer_steps=3, n_epochs=2):\n    pass\n"
    )
    assert violations("scratch", ok) == []
