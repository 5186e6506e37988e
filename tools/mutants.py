"""Hand-written mutants of the package: checks that cannot fail are found by breaking the code on purpose.

Each :class:`Mutant` is one plausible bug in one model module (a sign flip in a gradient or an
update, a dropped normaliser or KL term, an off-by-one in a scan or a window, a transposed
weight, a wrong temperature): an exact source snippet that occurs exactly once in today's
module, and its replacement. ``python tools/mutants.py`` (``nox -s mutants``) applies each
mutant in a scratch copy of the repository (never in the working tree), runs the module's
tests against it, then, if they all pass, the registry's generic tests of that module, then
its chapter under ``--nbval-lax``; it prints a table of what killed each mutant and exits
non-zero if any survives.

What counts as a kill: a failing test or a failing notebook cell (an assert, or an error).
A strict-nbval output diff does not count: whoever re-executes the chapter with the bug would
commit the wrong output as the new truth. That is why notebooks run under ``--nbval-lax``.

The scratch copy is imported instead of the editable install: ``PYTHONPATH`` puts the copy
first, ahead of site-packages and of the editable finder (which setuptools appends to
``sys.meta_path`` after the path finder), no bytecode is written (a mutated file of the same
size and modification second could otherwise reuse a stale ``.pyc``), and every run checks
that ``lse_energy`` resolves inside the copy. ``tests/contracts/test_mutants.py`` keeps that control:
the ``core_energy_sign`` mutant is visible to a subprocess started the way the runs start.

Usage::

    python tools/mutants.py                 # every mutant: tests, generic tests, chapter
    python tools/mutants.py --list          # the registry
    python tools/mutants.py --only NAME ... # a subset (exact names or module names)
    python tools/mutants.py --no-notebooks  # skip the chapters
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lse_energy"

# The chapter that derives each model module (as in lse_energy.registry; kept here so that
# listing and checking the registry does not import JAX).
CHAPTER = {
    "core": "01_lse_energy",
    "gmm": "02_gmm",
    "slds": "03_slds",
    "mixture_pc": "04_mixture_predictive_coding",
    "attention": "05_attention",
    "hopfield": "06_hopfield",
    "slot_attention": "07_slot_attention",
    "structural": "08_structural_inference",
    "multihop": "09_new_attention_designs",
    "expanding": "09_new_attention_designs",
    "rbm": "10_rbm",
    "diffusion": "11_diffusion",
    "pcn": "12_predictive_coding_networks",
    "anpc": "13_attention_normalised_pc",
    "gru": "15_gru",
    "autoencoder": "16_autoencoders",
    "embedding": "17_embeddings",
    "vae": "18_vae",
    "adversarial": "19_adversarial",
    "population": "20_population_coding",
    "lif": "20_population_coding",
    "gan": "21_gans",
}
# The module's own tests, as paths under tests/ (its file in models/, its chapter's propositions, and
# extra files that test it).
TESTS = {
    "core": ("models/test_core.py", "propositions/test_propositions_ch01.py"),
    "gmm": ("models/test_gmm.py", "propositions/test_propositions_ch02.py", "integration/test_streaming.py"),
    "slds": ("models/test_slds.py", "propositions/test_propositions_ch03.py"),
    "mixture_pc": ("models/test_mixture_pc.py", "propositions/test_propositions_ch04.py"),
    "attention": ("models/test_attention.py", "propositions/test_propositions_ch05.py"),
    "hopfield": ("models/test_hopfield.py", "propositions/test_propositions_ch06.py"),
    "slot_attention": ("models/test_slot_attention.py", "propositions/test_propositions_ch07.py"),
    # (models/test_structural.py tests multihop and expanding, not structural)
    "structural": ("propositions/test_propositions_ch08.py", "models/test_attention.py"),
    "multihop": (
        "models/test_structural.py",
        "propositions/test_propositions_ch09.py",
        "models/test_authors_multihop.py",
    ),
    "expanding": ("models/test_structural.py", "propositions/test_propositions_ch09.py"),
    "rbm": ("models/test_rbm.py", "propositions/test_propositions_ch10.py"),
    "diffusion": ("models/test_diffusion.py", "propositions/test_propositions_ch11.py"),
    "pcn": ("models/test_pcn.py", "propositions/test_propositions_ch12.py"),
    "anpc": ("models/test_anpc.py", "propositions/test_propositions_ch13.py"),
    "gru": ("models/test_gru.py", "propositions/test_propositions_ch15.py"),
    "autoencoder": ("models/test_autoencoder.py", "propositions/test_propositions_ch16.py"),
    "embedding": ("models/test_embedding.py", "propositions/test_propositions_ch17.py"),
    "vae": ("models/test_vae.py", "propositions/test_propositions_ch18.py"),
    "adversarial": ("models/test_adversarial.py", "propositions/test_propositions_ch19.py"),
    "population": ("models/test_population.py", "propositions/test_propositions_ch20.py"),
    "lif": ("models/test_lif.py", "propositions/test_propositions_ch20.py"),
    "gan": ("models/test_gan.py", "propositions/test_propositions_ch21.py"),
}
# The registry-driven tests (independent oracles of every energy, check_grads, monotone runs),
# selected with ``-k <module>``: run when the module's own tests let a mutant through.
GENERIC = ("tests/contracts/test_properties.py", "tests/contracts/test_registry.py")
# Extra test files that are not the module's own (tests/models/test_mutant_kills.py: checks added
# because a mutant survived everything else).
KILLS = "tests/models/test_mutant_kills.py"


class Mutant(NamedTuple):
    """One plausible bug: replace ``snippet`` (exactly one occurrence) in the module's source.

    The source is ``lse_energy/<module>.py``, or for a model that is a package (``gmm``,
    ``adversarial``) the one file of ``lse_energy/<module>/`` that holds the snippet.
    """

    name: str
    module: str
    snippet: str
    replacement: str
    description: str

    @property
    def path(self) -> str:
        single = f"{PACKAGE}/{self.module}.py"
        if (ROOT / single).exists():
            return single
        files = sorted((ROOT / PACKAGE / self.module).glob("*.py"))
        holding = [f for f in files if self.snippet in f.read_text()]
        # Zero or several files: the first, where apply() reports the count.
        return str((holding or files)[0].relative_to(ROOT))

    @property
    def tests(self) -> tuple[str, ...]:
        return tuple(f"tests/{t}" for t in TESTS[self.module])

    @property
    def chapter(self) -> str:
        return f"book/{CHAPTER[self.module]}.ipynb"


M = Mutant
MUTANTS: tuple[Mutant, ...] = (
    # core
    M(
        "core_energy_sign",
        "core",
        "    return -jnp.sum(_lse(sim, mask))",
        "    return jnp.sum(_lse(sim, mask))",
        "energy = +sum LSE (sign flip; also the control that the copy is imported)",
    ),
    M(
        "core_masked_shift_dropped",
        "core",
        "    return jnp.where(has, jnp.log(total) + m[..., 0], 0.0)",
        "    return jnp.where(has, jnp.log(total), 0.0)",
        "masked log-sum-exp forgets to add the row maximum back",
    ),
    M(
        "core_graph_parent_dropped",
        "core",
        "    return -(parts.child + parts.parent)",
        "    return -parts.child",
        "graph gradient drops the parent part of eq. (4)",
    ),
    M(
        "core_underflow_guard_max",
        "core",
        "    return (e @ v) / jnp.where(ok, total, 1.0), jnp.min(total)",
        "    return (e @ v) / jnp.where(ok, total, 1.0), jnp.max(total)",
        "blocked softmax_average's underflow guard reads the largest row sum, not the smallest",
    ),
    M(
        "core_blocks_not_rematerialised",
        "core",
        "    out, low = jax.lax.map(jax.checkpoint(lambda qc: _softmax_average_bounded(qc, k, v, k_norm)), qb)",
        "    out, low = jax.lax.map(lambda qc: _softmax_average_bounded(qc, k, v, k_norm), qb)",
        "blocked softmax_average stores every block's weights for reverse mode (no rematerialisation)",
    ),
    # gmm
    M(
        "gmm_logdet_dropped",
        "gmm",
        "        s = s - 0.5 * (d * math.log(2.0 * math.pi) + logdet)[None, :]",
        "        s = s - 0.5 * (d * math.log(2.0 * math.pi) + 0.0 * logdet)[None, :]",
        "normalised sim drops ln|Sigma_k| (dropped normaliser)",
    ),
    M(
        "gmm_mstep_cov_sign",
        "gmm",
        "    cov = second - mu[:, :, None] * mu[:, None, :]",
        "    cov = second + mu[:, :, None] * mu[:, None, :]",
        "M-step covariance E[xx'] + mu mu' (sign flip)",
    ),
    M(
        "gmm_tail_chunk_off_by_one",
        "gmm",
        "_chunk_stats(A, x[n_full * chunk :], shift, None if valid is None else valid[n_full * chunk :])",
        "_chunk_stats(A, x[n_full * chunk + 1 :], shift, None if valid is None else valid[n_full * chunk + 1 :])",
        "E-step skips the first row of the last, partial chunk (off-by-one in the scan)",
    ),
    M(
        "gmm_grad_means_sign",
        "gmm",
        '    return -jnp.einsum("ik,kid->kd", r, u)',
        '    return jnp.einsum("ik,kid->kd", r, u)',
        "dE/dmu sign flip",
    ),
    # slds
    M(
        "slds_grad_prev_untransposed",
        "slds",
        '    return -jnp.einsum("tk,kji,tkj->ti", alpha, params.A, u)',
        '    return -jnp.einsum("tk,kij,tkj->ti", alpha, params.A, u)',
        "parent gradient uses A_k instead of A_k^T",
    ),
    M(
        "slds_sample_transposed",
        "slds",
        "        nxt = params.A[k] @ xt + params.b[k] + e",
        "        nxt = params.A[k].T @ xt + params.b[k] + e",
        "sampler steps with A_k^T (transposed weight)",
    ),
    M(
        "slds_logdet_dropped",
        "slds",
        "        s = s - 0.5 * (d * jnp.log(2.0 * jnp.pi) + logdet)[None, :]",
        "        s = s - 0.5 * (d * jnp.log(2.0 * jnp.pi) + 0.0 * logdet)[None, :]",
        "normalised sim drops ln|Sigma_k| (dropped normaliser)",
    ),
    # mixture_pc
    M(
        "mpc_infer_sign",
        "mixture_pc",
        "        mu = mu - eta * _grad_mu(params, x, mu)",
        "        mu = mu + eta * _grad_mu(params, x, mu)",
        "inference ascends the energy (sign flip in the update)",
    ),
    M(
        "mpc_lipschitz_square",
        "mixture_pc",
        "    return jnp.sum(n1**2 * n2**2 + _TANH2_MAX * n1**2 * n2 * emax)",
        "    return jnp.sum(n1**2 * n2**2 + _TANH2_MAX * n1 * n2 * emax)",
        "Lipschitz bound's curvature term has |W1| instead of |W1|^2",
    ),
    # attention
    M(
        "attn_parent_wrong_weight",
        "attention",
        '    parent = beta * jnp.einsum("...ci,...ck->...ik", w, q) @ wk',
        '    parent = beta * jnp.einsum("...ci,...ck->...ik", w, q) @ wq',
        "self-attention parent gradient multiplies by W^Q instead of W^K",
    ),
    M(
        "attn_causal_off_by_one",
        "attention",
        "    return jnp.arange(m)[None, :] <= (jnp.arange(n)[:, None] + (m - n))",
        "    return jnp.arange(m)[None, :] < (jnp.arange(n)[:, None] + (m - n))",
        "causal mask excludes the diagonal (off-by-one)",
    ),
    M(
        "attn_default_temperature",
        "attention",
        "similarity matrix.\n    beta = _validate.default_beta(beta, q.shape[-1])",
        "similarity matrix.\n    beta = _validate.default_beta(beta, k.shape[-2])",
        "attend's default beta is 1/sqrt(N_K) instead of 1/sqrt(d) (wrong temperature)",
    ),
    # hopfield
    M(
        "hop_update_temperature",
        "hopfield",
        "    return core.softmax_average(queries, memories, memories, beta)",
        "    return core.softmax_average(queries, memories, memories, 1.0)",
        "retrieval update ignores beta (wrong temperature)",
    ),
    M(
        "hop_classical_diagonal",
        "hopfield",
        "    return w * (1.0 - jnp.eye(d, dtype=w.dtype))",
        "    return w",
        "classical Hebbian store keeps the self-connections",
    ),
    M(
        "hop_energy_unscaled",
        "hopfield",
        "    return core.energy(_sim(memories, queries, beta)) / beta",
        "    return core.energy(_sim(memories, queries, beta))",
        "energy not divided by beta (wrong temperature)",
    ),
    # slot_attention
    M(
        "slot_gd_prior_dropped",
        "slot_attention",
        "            new = m - step * (lam * m + _grad_mu(params, x, m))",
        "            new = m - step * _grad_mu(params, x, m)",
        "gradient E-step drops the lam*mu prior term",
    ),
    M(
        "slot_cccp_lam_dropped",
        "slot_attention",
        "            new = -_grad_mu(params, x, m) / lam",
        "            new = -_grad_mu(params, x, m)",
        "jitted CCCP E-step forgets the 1/lam",
    ),
    M(
        "slot_grad_w_q_sign",
        "slot_attention",
        "    return -params.w_k @ (x.T @ a @ mu)",
        "    return params.w_k @ (x.T @ a @ mu)",
        "dE/dW_Q sign flip",
    ),
    # structural
    M(
        "struct_wrong_axis",
        "structural",
        '    a = core.weights(s) if prior == "hopfield" else core.weights(s.T).T',
        '    a = core.weights(s.T).T if prior == "hopfield" else core.weights(s)',
        "CCCP normalises over the wrong axis for each prior",
    ),
    M(
        "struct_prior_dropped",
        "structural",
        "    return 0.5 * jnp.sum(mu**2) + lse",
        "    return lse",
        "structural free energy drops the 1/2|mu|^2 term",
    ),
    # multihop
    M(
        "multihop_normaliser",
        "multihop",
        "    return (eye + p + p2) / 3.0",
        "    return (eye + p + p2) / 2.0",
        "(I + P + P^2) normalised by 2 instead of 3",
    ),
    M(
        "multihop_grad_untransposed",
        "multihop",
        "    D = c * (G + G @ pt + pt @ G)",
        "    D = c * (G + G @ p + pt @ G)",
        "logit gradient uses P instead of P^T in one term",
    ),
    # expanding
    M(
        "exp_grad_q_sign",
        "expanding",
        "    return -(1.0 / q - m / (1.0 - q))",
        "    return -(1.0 / q + m / (1.0 - q))",
        "dE/dq sign flip on the geometric term",
    ),
    M(
        "exp_prior_off_by_one",
        "expanding",
        "    i = jnp.arange(n, dtype=q.dtype)",
        "    i = jnp.arange(1, n + 1, dtype=q.dtype)",
        "geometric log-prior counts distances from 1 (off-by-one)",
    ),
    M(
        "exp_window_short",
        "expanding",
        "    return jnp.maximum(h, 1.0).astype(jnp.int32)",
        "    return jnp.maximum(h - 1.0, 1.0).astype(jnp.int32)",
        "window one position short",
    ),
    # rbm
    M(
        "rbm_gibbs_visible_bias",
        "rbm",
        "    pv = jax.nn.sigmoid(h @ W.T + b)",
        "    pv = jax.nn.sigmoid(h @ W.T)",
        "Gibbs step drops the visible bias",
    ),
    M(
        "rbm_ll_grad_bias_sign",
        "rbm",
        "    model = Params(W=-(states.T * q) @ p, b=-(q @ states), c=-(q @ p))",
        "    model = Params(W=-(states.T * q) @ p, b=(q @ states), c=-(q @ p))",
        "exact log-likelihood gradient: model term of b with the sign flipped",
    ),
    M(
        "rbm_free_energy_bias",
        "rbm",
        "    return -(v @ b) - jnp.sum(core.logsumexp(_hidden_sim(W, c, v)), axis=-1)",
        "    return -jnp.sum(core.logsumexp(_hidden_sim(W, c, v)), axis=-1)",
        "free energy drops -b.v",
    ),
    # diffusion
    M(
        "diff_last_step_noise",
        "diffusion",
        "        z = jnp.where(t > 1, core.random_normal(k, shape, dtype), 0.0)",
        "        z = jnp.where(t > 0, core.random_normal(k, shape, dtype), 0.0)",
        "sampler adds noise at the last step too (off-by-one)",
    ),
    M(
        "diff_kl_weight_alpha",
        "diffusion",
        "    return beta**2 / (2.0 * sigma2 * alpha * (1.0 - ab))",
        "    return beta**2 / (2.0 * sigma2 * (1.0 - ab))",
        "KL weight drops alpha_t",
    ),
    M(
        "diff_reverse_coef",
        "diffusion",
        "    coef = beta / jnp.sqrt(1.0 - ab)",
        "    coef = beta / (1.0 - ab)",
        "reverse mean's eps coefficient without the square root",
    ),
    # pcn
    M(
        "pcn_tanh_derivative_dropped",
        "pcn",
        "            g = g - (1.0 - jnp.tanh(xs[l]) ** 2) * (eps[l + 1] @ W)",
        "            g = g - eps[l + 1] @ W",
        "feedback error misses f'(x) = 1 - tanh^2",
    ),
    M(
        "pcn_weight_grad_untransformed",
        "pcn",
        '-jnp.einsum(f"{batch}i,{batch}j->ij", eps[l + 1], jnp.tanh(xs[l]))',
        '-jnp.einsum(f"{batch}i,{batch}j->ij", eps[l + 1], xs[l])',
        "dE/dW uses x instead of f(x)",
    ),
    M(
        "pcn_root_precision",
        "pcn",
        "    first = prec[0] * (xs[0] - params.prior_mean)",
        "    first = xs[0] - params.prior_mean",
        "root error ignores its precision",
    ),
    # anpc
    M(
        "anpc_attention_dropped",
        "anpc",
        "    return _grad_from(params, x, alpha * k * e, activation)",
        "    return _grad_from(params, x, k * e, activation)",
        "normalised gradient drops the attention weights",
    ),
    M(
        "anpc_feedback_axis",
        "anpc",
        "    fed_back = jnp.sum(r * params.weights, axis=-2)",
        "    fed_back = jnp.sum(r * params.weights, axis=-1)",
        "feedback summed over the wrong axis (transposed)",
    ),
    # gru
    M(
        "gru_combine_order",
        "gru",
        "    return a1 * a2, a2 * b1 + b2",
        "    return a1 * a2, a1 * b2 + b1",
        "scan's combine applies the elements in the wrong order",
    ),
    M(
        "gru_log_combine",
        "gru",
        "    return a1 + a2, jnp.logaddexp(b1 + a2, b2)",
        "    return a1 + a2, jnp.logaddexp(b1 + a1, b2)",
        "log-space combine carries the wrong gate",
    ),
    M(
        "gru_reset_gate_dropped",
        "gru",
        "    cand = jnp.tanh((h * r) @ p.W + x @ p.U + p.b)",
        "    cand = jnp.tanh(h @ p.W + x @ p.U + p.b)",
        "GRU candidate ignores the reset gate",
    ),
    M(
        "gru_grad_scan_off_by_one",
        "gru",
        "    before = jnp.where(allowed, jnp.cumsum(w, axis=1) - w, 0)",
        "    before = jnp.where(allowed, jnp.cumsum(w, axis=1), 0)",
        "hand gradient of the log scan sums k <= j instead of k < j (off-by-one)",
    ),
    # autoencoder
    M(
        "ae_encoder_path_dropped",
        "autoencoder",
        "    return Params(gw_enc + gw_dec, gb, gc)",
        "    return Params(gw_dec, gb, gc)",
        "tied-weight gradient drops the encoder path",
    ),
    M(
        "ae_linear_grad_symmetrised",
        "autoencoder",
        "    return -W @ (cov @ E + E @ cov)",
        "    return -2.0 * W @ cov @ E",
        "linear-AE gradient assumes C and E commute",
    ),
    # embedding
    M(
        "emb_ns_sign",
        "embedding",
        "    return -counts * jax.nn.sigmoid(-S) + k *",
        "    return -counts * jax.nn.sigmoid(S) + k *",
        "negative-sampling positive term with sigma(S)",
    ),
    M(
        "emb_pmi_total",
        "embedding",
        "jnp.log(x) + jnp.log(total) - jnp.log(x.sum(axis=1, keepdims=True))",
        "jnp.log(x) - jnp.log(x.sum(axis=1, keepdims=True))",
        "PMI drops ln(total) (dropped normaliser)",
    ),
    M(
        "emb_window_off_by_one",
        "embedding",
        "    for j in range(1, min(window, T - 1) + 1):",
        "    for j in range(1, min(window, T - 1)):",
        "skip-gram window one short",
    ),
    # vae
    M(
        "vae_kl_mean_dropped",
        "vae",
        "        kl = jnp.mean(0.5 * jnp.sum(jnp.exp(logvar) + mu**2 - logvar - 1.0, axis=-1))",
        "        kl = jnp.mean(0.5 * jnp.sum(jnp.exp(logvar) - logvar - 1.0, axis=-1))",
        "training KL drops the mu^2 term",
    ),
    M(
        "vae_log_q_logvar",
        "vae",
        "# (S, N, d_z)\n    log_q = -0.5 * jnp.sum(eps**2 + logvar + _LOG_2PI, axis=-1)",
        "# (S, N, d_z)\n    log_q = -0.5 * jnp.sum(eps**2 + _LOG_2PI, axis=-1)",
        "ln q(z|x) in log_weights drops ln sigma^2 (dropped normaliser)",
    ),
    M(
        "vae_iwae_log_k",
        "vae",
        "    return core.logsumexp(moved[..., None, :])[..., 0] - math.log(log_w.shape[0])",
        "    return core.logsumexp(moved[..., None, :])[..., 0]",
        "IWAE bound drops -ln K",
    ),
    M(
        "vae_prior_scale_logdet",
        "vae",
        "    return log_pi - 0.5 * jnp.sum(r**2, axis=-1) - jnp.sum(prior.log_scales, axis=-1)",
        "    return log_pi - 0.5 * jnp.sum(r**2, axis=-1)",
        "mixture prior drops its log-scale normaliser",
    ),
    # adversarial
    M(
        "adv_fgsm_targeted",
        "adversarial",
        "        direction = -direction",
        "        direction = direction",
        "targeted FGSM steps away from the target",
    ),
    M(
        "adv_jacobian_derivative",
        "adversarial",
        '    return jnp.einsum("dh,nh,hk->nkd", p.W1, 1.0 - h**2, p.W2)',
        '    return jnp.einsum("dh,nh,hk->nkd", p.W1, 1.0 - h, p.W2)',
        "logit Jacobian with 1 - h for tanh'",
    ),
    # population
    M(
        "pop_poisson_normaliser",
        "population",
        "    return n.astype(f.dtype) @ jnp.log(f).T - jnp.sum(f, axis=1)",
        "    return n.astype(f.dtype) @ jnp.log(f).T",
        "Poisson log-likelihood drops -sum f (dropped normaliser)",
    ),
    M(
        "pop_ridge_m",
        "population",
        "    gram = h.T @ h + (m * sigma**2) * jnp.eye(n, dtype=h.dtype)",
        "    gram = h.T @ h + (sigma**2) * jnp.eye(n, dtype=h.dtype)",
        "ridge decoders drop the m in m sigma^2",
    ),
    M(
        "pop_a_prime_transposed",
        "population",
        "    return tau * a + jnp.eye(a.shape[0], dtype=a.dtype), tau * b",
        "    return tau * a.T + jnp.eye(a.shape[0], dtype=a.dtype), tau * b",
        "A' = tau A^T + I (transposed)",
    ),
    # lif
    M(
        "lif_refractory_off_by_one",
        "lif",
        "        ref = jnp.where(spike, n_ref, jnp.where(resting, ref - 1, 0))",
        "        ref = jnp.where(spike, n_ref + 1, jnp.where(resting, ref - 1, 0))",
        "simulated refractory period one step long",
    ),
    M(
        "lif_rate_tau_ref",
        "lif",
        "    r = 1.0 / (tau_ref - tau_rc * jnp.log1p(-threshold / j_safe))",
        "    r = 1.0 / (-tau_rc * jnp.log1p(-threshold / j_safe))",
        "rate curve drops the refractory period",
    ),
    # gan
    M(
        "gan_energy_sign",
        "gan",
        "    s = jnp.concatenate([-a_real, a_fake])",
        "    s = jnp.concatenate([a_real, a_fake])",
        "discriminator energy with the real logits' sign flipped",
    ),
    M(
        "gan_minimax_sign",
        "gan",
        "    return -jnp.mean(_softplus(a))",
        "    return jnp.mean(_softplus(a))",
        "minimax generator loss sign flip",
    ),
    # loop counts a user sets: each runs one step fewer (issue 47, point 19)
    M(
        "rbm_cd_sweeps_one_fewer",
        "rbm",
        "    vk = jax.lax.fori_loop(0, k, body, v)",
        "    vk = jax.lax.fori_loop(1, k, body, v)",
        "CD-k runs k - 1 Gibbs sweeps",
    ),
    M(
        "rbm_gibbs_sweeps_one_fewer",
        "rbm",
        "    state, _ = jax.lax.scan(body, GibbsState(v0, h0, v0), _sweep_keys(key, n_steps))",
        "    state, _ = jax.lax.scan(\n"
        "        body, GibbsState(v0, h0, v0), jax.tree_util.tree_map(lambda a: a[1:], _sweep_keys(key, n_steps))\n"
        "    )",
        "gibbs runs n_steps - 1 sweeps",
    ),
    M(
        "gmm_em_iterations_one_fewer",
        "gmm",
        "        max_iter=max_iter,\n        tol=tol,\n        n_init=n_init,",
        "        max_iter=max_iter - 1,\n        tol=tol,\n        n_init=n_init,",
        "EM stops after max_iter - 1 iterations (gmm.fit's call of the EM driver)",
    ),
    M(
        "slds_steps_one_fewer",
        "slds",
        "    xf, es = jax.lax.scan(body, x, None, length=n_steps)",
        "    xf, es = jax.lax.scan(body, x, None, length=n_steps - 1)",
        "runs n_steps - 1 steps",
    ),
    M(
        "mixture_pc_inference_one_fewer",
        "mixture_pc",
        "    mu, trace = jax.lax.scan(step, mu0, None, length=n_steps)",
        "    mu, trace = jax.lax.scan(step, mu0, None, length=n_steps - 1)",
        "inference runs n_steps - 1 steps",
    ),
    M(
        "mixture_pc_rounds_one_fewer",
        "mixture_pc",
        "        n_rounds=n_steps,",
        "        n_rounds=n_steps - 1,",
        "learning runs n_steps - 1 rounds",
    ),
    M(
        "hopfield_retrieval_steps_one_fewer",
        "hopfield",
        "    x, trace = jax.lax.scan(body, queries, None, length=n_steps)",
        "    x, trace = jax.lax.scan(body, queries, None, length=n_steps - 1)",
        "continuous retrieval runs n_steps - 1 updates",
    ),
    M(
        "hopfield_sweeps_one_fewer",
        "hopfield",
        "    s, trace = jax.lax.scan(body, states, None, length=n_steps)",
        "    s, trace = jax.lax.scan(body, states, None, length=n_steps - 1)",
        "binary asynchronous dynamics run n_steps - 1 sweeps",
    ),
    M(
        "slot_attention_iterations_one_fewer",
        "slot_attention",
        "    mu_out, trace = jax.lax.scan(body, mu, None, length=n_steps)",
        "    mu_out, trace = jax.lax.scan(body, mu, None, length=n_steps - 1)",
        "slot updates run n_steps - 1 iterations",
    ),
    M(
        "slot_attention_m_steps_one_fewer",
        "slot_attention",
        "    out, tr = jax.lax.scan(body, params, None, length=n_steps)",
        "    out, tr = jax.lax.scan(body, params, None, length=n_steps - 1)",
        "M-step runs n_steps - 1 updates",
    ),
    M(
        "slot_attention_e_steps_one_fewer",
        "slot_attention",
        "    m_new, tr = jax.lax.scan(estep, m, None, length=n_e_steps)",
        "    m_new, tr = jax.lax.scan(estep, m, None, length=n_e_steps - 1)",
        "EM rounds run n_e_steps - 1 E-steps",
    ),
    M(
        "slot_attention_em_rounds_one_fewer",
        "slot_attention",
        "        n_rounds=int(n_steps),",
        "        n_rounds=int(n_steps) - 1,",
        "EM runs n_steps - 1 rounds",
    ),
    M(
        "structural_cccp_steps_one_fewer",
        "structural",
        "    mu, fs = jax.lax.scan(step, mu0, None, length=n_steps)",
        "    mu, fs = jax.lax.scan(step, mu0, None, length=n_steps - 1)",
        "CCCP runs n_steps - 1 steps",
    ),
    M(
        "expanding_meanfield_scan_one_fewer",
        "expanding",
        "        carry, qs = jax.lax.scan(step, init, None, length=max_iter)",
        "        carry, qs = jax.lax.scan(step, init, None, length=max_iter - 1)",
        "mean-field (scan) runs max_iter - 1 steps",
    ),
    M(
        "expanding_meanfield_while_one_fewer",
        "expanding",
        "            return (j < max_iter) & ~jnp.all(st[..., 2] > 0) & ~(stop & jnp.any(st[..., 4] > 0))",
        "            return (j < max_iter - 1) & ~jnp.all(st[..., 2] > 0) & ~(stop & jnp.any(st[..., 4] > 0))",
        "mean-field (while) stops after max_iter - 1 steps",
    ),
    M(
        "pcn_inference_one_fewer",
        "pcn",
        "    xs_end, trace = jax.lax.scan(step, xs, None, length=n_steps)",
        "    xs_end, trace = jax.lax.scan(step, xs, None, length=n_steps - 1)",
        "inference runs n_steps - 1 steps",
    ),
    M(
        "anpc_inference_one_fewer",
        "anpc",
        "    x, (trace, mx) = jax.lax.scan(step, x0, None, length=n_steps)",
        "    x, (trace, mx) = jax.lax.scan(step, x0, None, length=n_steps - 1)",
        "inference runs n_steps - 1 steps",
    ),
    M(
        "adversarial_attack_steps_one_fewer",
        "adversarial",
        "    (xa, _, _), vals = jax.lax.scan(step, (x0, v0, alpha0), None, length=n_steps)",
        "    (xa, _, _), vals = jax.lax.scan(step, (x0, v0, alpha0), None, length=n_steps - 1)",
        "PGD/iterative attacks run n_steps - 1 steps",
    ),
    M(
        "diffusion_sampling_steps_one_fewer",
        "diffusion",
        "    x0, path = jax.lax.scan(step, x_init, (ts, step_keys))",
        "    x0, path = jax.lax.scan(step, x_init, (ts[:-1], step_keys[:-1]))",
        "ancestral sampling skips the last step (t = 1)",
    ),
)


def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in MUTANTS}


def apply(mutant: Mutant, source: str) -> str:
    """The mutated source; raises if the snippet does not occur exactly once (the code moved)."""
    n = source.count(mutant.snippet)
    if n != 1:
        raise ValueError(f"mutant {mutant.name}: snippet occurs {n} times in {mutant.path} (expected once)")
    return source.replace(mutant.snippet, mutant.replacement)


def select(names) -> list[Mutant]:
    """Mutants by exact name or by module name, in the order given (a module's in registry order)."""
    if not names:
        return list(MUTANTS)
    table = by_name()
    unknown = [n for n in names if n not in table and n not in CHAPTER]
    if unknown:
        raise SystemExit(f"unknown mutant or module: {', '.join(unknown)} (see --list)")
    chosen = []
    for n in names:
        for m in [table[n]] if n in table else [m for m in MUTANTS if m.module == n]:
            if m not in chosen:
                chosen.append(m)
    return chosen


# --- the scratch copy ------------------------------------------------------------------------

_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".nox",
    "_build",
    ".hypothesis",
    "__pycache__",
    "*.pyc",
    ".ipynb_checkpoints",
    "*.egg-info",
    ".pytest_cache",
    ".ci-venv",
    "venv",
)


def make_scratch(root: Path = ROOT, where: str | None = None, head: bool = False) -> Path:
    """A copy of the repository's working tree (no .git, virtualenvs or build outputs), or of its last commit."""
    base = Path(tempfile.mkdtemp(prefix="lse-mutants-", dir=where))
    dest = base / "repo"
    if head:
        dest.mkdir()
        archive = subprocess.run(["git", "-C", str(root), "archive", "HEAD"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    else:
        shutil.copytree(root, dest, ignore=_IGNORE, symlinks=True)
    return dest


def scratch_env(scratch: Path) -> dict[str, str]:
    """The environment the runs use: the copy first on the path, no bytecode, CPU, no progress bars."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["TQDM_DISABLE"] = "1"
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def imported_from(scratch: Path, env: dict[str, str]) -> Path:
    """Where ``import lse_energy`` resolves when started the way the runs start."""
    out = subprocess.run(
        [sys.executable, "-c", "import lse_energy; print(lse_energy.__file__)"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip()).resolve()


class Mutated:
    """Context manager: the mutant's module in the scratch copy is mutated inside, restored after."""

    def __init__(self, scratch: Path, mutant: Mutant):
        self.file = scratch / mutant.path
        self.mutant = mutant

    def __enter__(self):
        self.original = self.file.read_text()
        self.file.write_text(apply(self.mutant, self.original))
        return self.file

    def __exit__(self, *exc):
        self.file.write_text(self.original)
        return False


# --- running ---------------------------------------------------------------------------------

_FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", re.M)


def first_failure(output: str) -> str:
    """The first failing test id (or notebook cell) in pytest's short summary."""
    m = _FAILED.search(output)
    if m:
        return m.group(1)
    tail = [line for line in output.strip().splitlines() if line.strip()][-1:] or ["?"]
    return f"(no test id) {tail[0][:60]}"


def run_pytest(scratch: Path, env: dict[str, str], args, timeout: float) -> tuple[str, str]:
    """``(status, detail)``: status ``pass``, ``fail`` (detail = first failure) or ``timeout``."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *args]
    try:
        out = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", f"timed out after {timeout:.0f} s"
    text = out.stdout + out.stderr
    if out.returncode == 0:
        return "pass", ""
    if out.returncode == 5:  # nothing collected: a selection that matches no test is not a kill
        return "pass", "(no tests collected)"
    return "fail", first_failure(text)


class Outcome(NamedTuple):
    name: str
    killed_by: str  # "" when it survived
    stage: str  # tests, generic, kills, notebook, or survived
    seconds: float


STAGES = ("tests", "kills", "generic", "notebook")


def run_mutant(
    scratch: Path, env: dict[str, str], mutant: Mutant, *, stages=STAGES, timeout: float, log=print
) -> Outcome:
    """Run the stages in order until one fails (the mutant is killed) or all pass (it survived)."""
    t0 = time.perf_counter()
    args_of = {
        "tests": list(mutant.tests),
        "kills": [KILLS, "-k", mutant.module],
        "generic": [*GENERIC, "-k", mutant.module],
        "notebook": ["--nbval-lax", "--nbval-current-env", mutant.chapter],
    }
    todo = [(s, args_of[s]) for s in STAGES if s in stages and (s != "kills" or (scratch / KILLS).exists())]
    with Mutated(scratch, mutant):
        for stage, args in todo:
            log(f"  {mutant.name}: {stage} ...")
            status, detail = run_pytest(scratch, env, args, timeout)
            if status == "fail":
                return Outcome(mutant.name, detail, stage, time.perf_counter() - t0)
            if status == "timeout":
                return Outcome(mutant.name, f"{detail} ({stage}; counted as killed)", stage, time.perf_counter() - t0)
    return Outcome(mutant.name, "", "survived", time.perf_counter() - t0)


def table(outcomes) -> str:
    rows = [("mutant", "killed by", "stage", "time")]
    rows += [(o.name, o.killed_by or "SURVIVED", o.stage, f"{o.seconds:.0f} s") for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3].rjust(6))
        if i == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="mutant names or module names")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--no-notebooks", action="store_true", help="skip the chapters (tests only)")
    ap.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated stages to run, in this order: {','.join(STAGES)} (default all); "
        "e.g. --stages notebook checks that a chapter alone kills a mutant",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per pytest run (default 1800)")
    ap.add_argument(
        "--head", action="store_true", help="copy the last commit (git archive HEAD) instead of the working tree"
    )
    ap.add_argument("--scratch-dir", default=None, help="where to make the scratch copy (default: the temp dir)")
    args = ap.parse_args(argv)
    chosen = select(args.only)
    stages = {s.strip() for s in args.stages.split(",") if s.strip()}
    if stages - set(STAGES):
        raise SystemExit(f"unknown stages: {', '.join(sorted(stages - set(STAGES)))}")
    if args.no_notebooks:
        stages.discard("notebook")
    if args.list:
        for m in chosen:
            print(f"{m.name:32s} {m.path:30s} {m.description}")
        return 0
    source = {}
    for m in chosen:  # fail before copying anything if a snippet moved
        source.setdefault(m.path, (ROOT / m.path).read_text())
        apply(m, source[m.path])
    scratch = make_scratch(where=args.scratch_dir, head=args.head)
    env = scratch_env(scratch)
    try:
        where = imported_from(scratch, env)
        if not where.is_relative_to(scratch.resolve()):
            raise SystemExit(f"the scratch copy is not what is imported: lse_energy from {where}")
        print(f"scratch copy {scratch} (lse_energy imported from it); {len(chosen)} mutants", flush=True)
        outcomes = []
        t0 = time.perf_counter()
        for m in chosen:
            o = run_mutant(scratch, env, m, stages=stages, timeout=args.timeout, log=lambda s: print(s, flush=True))
            print(
                f"{o.name}: {'killed by ' + o.killed_by if o.killed_by else 'SURVIVED'} ({o.seconds:.0f} s)", flush=True
            )
            outcomes.append(o)
        print()
        print(table(outcomes))
        survivors = [o.name for o in outcomes if not o.killed_by]
        print(
            f"\n{len(outcomes) - len(survivors)}/{len(outcomes)} killed in {time.perf_counter() - t0:.0f} s"
            + (f"; survived: {', '.join(survivors)}" if survivors else "")
        )
        return 1 if survivors else 0
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
