r"""lse_energy: many models as descent on one log-sum-exp energy.

.. math::

    E = -\sum_{c} \ln \sum_{p} \exp \mathrm{sim}(v_c, v_p)

The shared primitive lives in :mod:`lse_energy.core`; each model family has
its own module, and :mod:`lse_energy.testing` holds the gradient checker used
by the tests and by every chapter of the book.
"""

from lse_energy import core, testing
from lse_energy.core import EnergyTerm, energy, weights

__all__ = ["core", "testing", "EnergyTerm", "energy", "weights"]
__version__ = "0.1.0"
