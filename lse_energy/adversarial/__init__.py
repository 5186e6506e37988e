r"""Adversarial attacks and the TRADES defence, on a small softmax classifier.

This module implements §24 ("Adversarial Attacks") and §25 ("Adversarial
Defense", §25.1 "TRADES") of the lecture notes. The classifier is a
one-hidden-layer network with logits

.. math:: z(x) = \tanh(x W_1 + b_1)\, W_2 + b_2 \in \mathbb R^K ,

trained on the cross-entropy

.. math:: \ell(x, t) = -\ln \operatorname{softmax}(z(x))_t
          = \ln \sum_j e^{z_j(x)} - z_t(x) .

Where the log-sum-exp appears. The cross-entropy is the log-partition
:math:`\ln\sum_j e^{z_j}` *minus* the target's logit: it is the book's energy
:math:`E = -\ln\sum_p e^{\mathrm{sim}_p}` with the **opposite sign**, plus a
linear term. Its input gradient has the eq.-(4) form of Tschantz (2025), a
softmax-weighted sum of logit gradients minus the target's,

.. math:: \nabla_x \ell = \textstyle\sum_j \operatorname{softmax}(z)_j\, \nabla_x z_j - \nabla_x z_t ,

(:func:`grad_x`), and the attacks *ascend* it. The binary surrogate of
§25.1, :math:`g(u) = \ln(1 + e^{-u})`, is a two-term log-sum-exp
:math:`\ln(e^0 + e^{-u})` (:func:`softplus_surrogate`), again entering as a
loss to be minimised by the learner and maximised by the attacker: nothing here
is descent on the book's energy.

Attacks (§24). The "error" :math:`E(f(x;\theta), t)` of the notes is taken to
be the cross-entropy. :func:`gradient_attack` is the untargeted step
:math:`x' = x + k\nabla_x E(f(x), t(x))` and the targeted step
:math:`x' = x - k\nabla_x E(f(x), t)` (:math:`k` = ``step_size``); :func:`fgsm` is §24.1's
:math:`\delta x = \epsilon\,\mathrm{sign}(\nabla_x E)`; :func:`pgd` iterates it
with projection onto the :math:`L_\infty` ball (not in the notes; Madry et al.);
:func:`minimal_perturbation` bisects on :math:`\epsilon` along the FGSM
direction. Every attack optionally clips to the pixel box ``[lo, hi]``; since
``x`` lies in the box, clipping moves toward ``x`` and the result stays in the
ball :math:`B_\infty(x, \epsilon)`.

TRADES (§25.1). Binary form (``n_classes = 1``, score :math:`f = z_0`, labels
:math:`T \in \{-1, 1\}`): :math:`g(f(X)T) + \beta\, g(f(X) f(X'))`
(:func:`binary_trades_loss`). Multi-class form (Zhang et al. 2019):
:math:`\mathrm{CE}(z(X), y) + \beta\,\mathrm{KL}(\operatorname{softmax} z(X)
\,\|\, \operatorname{softmax} z(X'))` (:func:`trades_loss`). In both, ``X'`` is
found by a few projected sign-ascent steps (:func:`inner_maximize`), then held
fixed while the parameters take a gradient step (:func:`fit`). The weight
:math:`\beta` (the notes' and Zhang et al.'s symbol) is the argument ``trades_weight``.

Shapes: inputs ``x`` are ``(N, d)``; integer labels ``y`` are ``(N,)`` (class
indices for ``K >= 2``; ``-1``/``1`` for the binary model). The notes write the
targets :math:`t` (:math:`T` in §25.1); the argument is ``y``, as in the rest of
the package, where ``t`` is a diffusion time.

Layout. ``adversarial._attacks`` and ``adversarial._trades`` hold the code; import from ``lse_energy.adversarial``: the
submodules are private.
"""

from __future__ import annotations

from typing import Any  # noqa: F401 (annotations of the re-exported NamedTuples, see Array)

import jax

from lse_energy.adversarial._attacks import (
    Ascent,
    FitExtras,
    MinimalPerturbation,
    Params,
    accuracy,
    example_losses,
    fgsm,
    grad_params,
    grad_x,
    gradient_attack,
    init_params,
    logits,
    loss,
    minimal_perturbation,
    pgd,
    predict,
)
from lse_energy.adversarial._trades import (
    binary_score,
    binary_trades_loss,
    fit,
    grad_binary_trades_loss_params,
    grad_trades_loss_params,
    inner_maximize,
    kl_softmax,
    softplus_surrogate,
    trades_loss,
)

# The re-exported NamedTuples annotate their fields with ``Array``; autodoc resolves those
# annotations in this module (their __module__), so the name must exist here too.
Array = jax.Array

__all__ = [
    "Ascent",
    "FitExtras",
    "MinimalPerturbation",
    "Params",
    "accuracy",
    "binary_score",
    "binary_trades_loss",
    "example_losses",
    "fgsm",
    "fit",
    "grad_binary_trades_loss_params",
    "grad_params",
    "grad_trades_loss_params",
    "gradient_attack",
    "init_params",
    "inner_maximize",
    "grad_x",
    "kl_softmax",
    "logits",
    "loss",
    "minimal_perturbation",
    "pgd",
    "predict",
    "softplus_surrogate",
    "trades_loss",
]

# Documented, registered and tested as lse_energy.adversarial's own.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
