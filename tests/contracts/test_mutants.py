"""The mutant machinery of ``tools/mutants.py`` (``nox -s mutants``), checked without running a mutant's tests.

Every mutant's snippet occurs exactly once in today's source, so a refactor that moves or
rewrites the code makes the registry fail here, loudly, instead of silently testing nothing.
The control: a mutant applied in a scratch copy is what a process started the way the runs
start imports (not the editable install of the working tree).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# tools/ is a folder of scripts, not a package: load the script by its path.
_spec = importlib.util.spec_from_file_location("mutants", ROOT / "tools" / "mutants.py")
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)

MODEL_MODULES = {
    "core",
    "gmm",
    "slds",
    "mixture_pc",
    "attention",
    "hopfield",
    "slot_attention",
    "structural",
    "multihop",
    "expanding",
    "rbm",
    "diffusion",
    "pcn",
    "anpc",
    "gru",
    "autoencoder",
    "embedding",
    "vae",
    "adversarial",
    "population",
    "lif",
    "gan",
}


@pytest.mark.parametrize("mutant", M.MUTANTS, ids=[m.name for m in M.MUTANTS])
def test_each_mutant_applies_to_exactly_one_place_and_still_parses(mutant):
    source = (ROOT / mutant.path).read_text()
    assert source.count(mutant.snippet) == 1, f"{mutant.name}: the code it mutates moved; update the registry"
    mutated = M.apply(mutant, source)
    assert mutated != source
    ast.parse(mutated)  # a syntax error would be a trivial kill, not a plausible bug
    for t in mutant.tests:
        assert (ROOT / t).is_file(), t
    assert (ROOT / mutant.chapter).is_file(), mutant.chapter


def test_registry_names_are_unique_and_cover_every_model_module():
    names = [m.name for m in M.MUTANTS]
    assert len(names) == len(set(names))
    assert {m.module for m in M.MUTANTS} == MODEL_MODULES == set(M.CHAPTER) == set(M.TESTS)
    for t in (*M.GENERIC, M.KILLS):  # a missing file would be skipped (kills) or count as a kill (generic)
        assert (ROOT / t).is_file(), t
    # The chapters agree with the package's registry (kept as literals so --list needs no JAX).
    from lse_energy.registry import MODELS

    assert {m.name: m.chapter for m in MODELS} == M.CHAPTER


def test_apply_refuses_a_snippet_that_is_missing_or_repeated():
    m = M.Mutant("x", "core", "a = 1", "a = 2", "")
    assert M.apply(m, "a = 1\n") == "a = 2\n"
    with pytest.raises(ValueError, match="occurs 0 times"):
        M.apply(m, "b = 1\n")
    with pytest.raises(ValueError, match="occurs 2 times"):
        M.apply(m, "a = 1\na = 1\n")


def test_first_failure_reads_the_short_summary():
    out = "..F\n=== short test summary info ===\nFAILED tests/models/test_core.py::test_x[1] - AssertionError\n"
    assert M.first_failure(out) == "tests/models/test_core.py::test_x[1]"
    assert M.first_failure("ERROR book/01_lse_energy.ipynb::Cell 3\n") == "book/01_lse_energy.ipynb::Cell 3"
    assert M.first_failure("nothing\n").startswith("(no test id)")


def test_control_the_scratch_copy_is_imported_and_sees_the_mutation(tmp_path):
    # Copy only the package (the runs copy the whole tree; the import path is the same).
    scratch = tmp_path / "repo"
    (scratch / "lse_energy").mkdir(parents=True)
    for f in (ROOT / "lse_energy").rglob("*.py"):
        dest = scratch / f.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f.read_text())
    env = M.scratch_env(scratch)
    assert M.imported_from(scratch, env).is_relative_to(scratch.resolve())
    probe = "import jax.numpy as jnp, lse_energy.core as c; print(float(c.energy(jnp.zeros((1, 2)))))"

    def energy_of_two_zeros():
        out = subprocess.run(
            [sys.executable, "-c", probe], cwd=scratch, env=env, capture_output=True, text=True, check=True
        )
        return float(out.stdout.strip())

    ln2 = 0.6931471805599453
    assert energy_of_two_zeros() == pytest.approx(-ln2)
    with M.Mutated(scratch, M.by_name()["core_energy_sign"]):
        assert energy_of_two_zeros() == pytest.approx(ln2)  # the mutant is what runs
    assert energy_of_two_zeros() == pytest.approx(-ln2)  # and it is undone
    assert (scratch / "lse_energy/core.py").read_text() == (ROOT / "lse_energy/core.py").read_text()
