r"""lse_energy: many models as descent on one log-sum-exp energy.

.. math::

    E = -\sum_{c} \ln \sum_{p} \exp \mathrm{sim}(v_c, v_p)

The shared primitive lives in :mod:`lse_energy.core`; each model family has
its own module, and :mod:`lse_energy.testing` holds the gradient checker used
by the tests and by every chapter of the book.

Every public module is an attribute of the package, imported on first use
(PEP 562), so ``import lse_energy as lse`` stays cheap and ``lse.gmm.fit(...)``
works without a second import::

    >>> import lse_energy as lse
    >>> "gmm" in dir(lse) and lse.gmm.fit.__module__
    'lse_energy.gmm'
"""

import importlib

from lse_energy import core, testing
from lse_energy.core import EnergyTerm, energy, weights

# The public submodules, each imported on first attribute access.
_SUBMODULES = (
    "adversarial",
    "anpc",
    "attention",
    "autoencoder",
    "compile_cache",
    "diffusion",
    "drivers",
    "embedding",
    "expanding",
    "experiments",
    "gan",
    "gmm",
    "gru",
    "hopfield",
    "lif",
    "mixture_pc",
    "multihop",
    "pcn",
    "plotting",
    "population",
    "rbm",
    "registry",
    "sharding",
    "slds",
    "slot_attention",
    "structural",
    "vae",
)

__all__ = ["core", "testing", "EnergyTerm", "energy", "weights"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """Import the public submodule ``name`` on first access (PEP 562)."""
    if name in _SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
