r"""Gaussian mixture models as a log-sum-exp energy (§2 and Appendix B of Tschantz 2025).

The data points :math:`x_i \in \mathbb{R}^d` (:math:`i = 1..N`) are the
*children* and the mixture components :math:`k = 1..K`, with weight
:math:`\pi_k`, mean :math:`\mu_k` and covariance :math:`\Sigma_k`, are the
*parents*. With the similarity

.. math::

    \begin{aligned}
    \mathrm{sim}(x_i, \mu_k) &= \ln \pi_k + \ln \mathcal N(x_i \mid \mu_k, \Sigma_k) \\
    &= \ln\pi_k - \tfrac12 (x_i-\mu_k)^\top \Sigma_k^{-1} (x_i-\mu_k) \\
    &\quad - \tfrac12 \ln |2\pi \Sigma_k|
    \end{aligned}

the log-sum-exp energy (eq. 2 / eq. 5)

.. math::

    E = -\sum_i \ln \sum_k \exp \mathrm{sim}(x_i, \mu_k)
      = -\sum_i \ln \sum_k \pi_k \mathcal N(x_i \mid \mu_k, \Sigma_k)

is the exact negative log-likelihood of the mixture. The seed's similarity
(§2 and Appendix B) omits the normaliser :math:`-\frac12\ln|2\pi\Sigma_k|`;
that version is available as :func:`seed_energy` (and ``normalised=False``
in :func:`sim`, :func:`responsibilities` and the gradients). It equals the
exact energy up to the constant :math:`\frac N2 \ln|2\pi\Sigma|` only when all
components share one covariance; otherwise it changes the responsibilities
and the optimum, and it has no minimiser in the covariances at all (see the
chapter *Gaussian mixtures*).

Every Gaussian log-density is computed from the Cholesky factor
:math:`\Sigma_k = L_k L_k^\top`:
:math:`(x-\mu)^\top\Sigma^{-1}(x-\mu) = \|L^{-1}(x-\mu)\|^2` and
:math:`\ln|\Sigma| = 2\sum_j \ln (L)_{jj}`.

Input dtypes. The data ``x``, the parameters (weights, means, covariances)
and responsibilities are continuous: an integer or boolean array raises
``ValueError`` naming it ("x must have a floating dtype; got int64") rather
than being cast silently. Cast integer data yourself (``x.astype(float)``).

Layout. The energy, the similarity and their gradients are in ``gmm._model``; the EM
drivers (the jitted fast path, :func:`fit`, :func:`em`, the streamed fit) are in
``gmm._em``. Import from ``lse_energy.gmm``: the submodules are private.
"""

from __future__ import annotations

import jax

from lse_energy.gmm._em import em, em_step, fit, init_params, m_step, streamed_fit, sufficient_statistics
from lse_energy.gmm._model import (
    Params,
    check_params,
    check_x,
    energy,
    free_energy,
    grad_covariances,
    grad_means,
    grad_weights,
    grad_x,
    predict,
    responsibilities,
    seed_energy,
    sim,
)

# The re-exported NamedTuples annotate their fields with ``Array``; autodoc resolves those
# annotations in this module (their __module__), so the name must exist here too.
Array = jax.Array

__all__ = [
    "Params",
    "check_params",
    "check_x",
    "sim",
    "energy",
    "seed_energy",
    "responsibilities",
    "predict",
    "free_energy",
    "grad_means",
    "grad_x",
    "grad_covariances",
    "grad_weights",
    "em_step",
    "init_params",
    "fit",
    "sufficient_statistics",
    "m_step",
    "em",
    "streamed_fit",
]

# Documented, registered and tested as lse_energy.gmm's own.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
