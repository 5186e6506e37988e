"""The persistent compilation cache (``lse_energy.compile_cache``), across real processes.

JAX's configuration is process-wide, so every case runs a fresh interpreter: it enables the cache
(or not), fits a small GMM, and reports the result's bits, whether JAX logged a persistent-cache
hit, and its own configuration. The parent process's configuration is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import json, logging, os, sys
    hits = []

    class Hits(logging.Handler):
        def emit(self, record):
            if "Persistent compilation cache hit" in record.getMessage():
                hits.append(record.getMessage())

    logging.getLogger("jax._src.compiler").addHandler(Hits())
    logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    import lse_energy
    from lse_energy import gmm
    before = dict(dir=jax.config.jax_compilation_cache_dir,
                  min_s=jax.config.jax_persistent_cache_min_compile_time_secs)
    where = None
    if sys.argv[1] in ("enable", "enable-unfiltered"):
        from lse_energy import compile_cache
        where = compile_cache.enable()
    if sys.argv[1] == "enable-unfiltered":
        import warnings
        warnings.resetwarnings()
    x = jax.random.normal(jax.random.key(1), (40, 2))
    res = gmm.fit(x, 2, key=jax.random.key(0), max_iter=5, tol=0.0)
    print(json.dumps(dict(
        before=before, where=None if where is None else str(where),
        hits=len(hits), bits=jnp.asarray(res.params.means).tobytes().hex())))
    """
)


def _run(mode: str, env: dict) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT", "LSE_JAX"))}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        env={**base, "JAX_PLATFORMS": "cpu", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def _entries(path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


def test_importing_the_package_sets_no_cache(tmp_path):
    """``import lse_energy`` (and a fit) leaves JAX's cache settings at their defaults."""
    r = _run("plain", {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert r["before"] == {"dir": None, "min_s": 1.0}
    assert not (tmp_path / "xdg").exists()
    assert r["hits"] == 0


def test_second_process_loads_every_program_and_gets_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    first = _run("enable", {"LSE_JAX_CACHE": str(cache)})
    assert first["where"] == str(cache) and first["hits"] == 0
    written = _entries(cache)
    assert written > 0
    second = _run("enable", {"LSE_JAX_CACHE": str(cache)})
    # Every program of the second process comes from disk, none is written anew, and the
    # result is bit for bit the first process's.
    assert second["hits"] > 0
    assert _entries(cache) == written
    assert second["bits"] == first["bits"]
    # Control: a process without the cache compiles everything itself, to the same bits.
    plain = _run("plain", {})
    assert plain["hits"] == 0 and plain["bits"] == first["bits"]


def test_off_and_default_locations(tmp_path):
    off = _run("enable", {"LSE_JAX_CACHE": "off", "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert off["where"] is None and not (tmp_path / "xdg").exists()
    default = _run("enable", {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert default["where"] == str(tmp_path / "xdg" / "lse_energy" / "jax")
    assert _entries(tmp_path / "xdg") > 0
    # A directory JAX already has (as the nox sessions set it) is kept.
    kept = _run("enable", {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "nox")})
    assert kept["before"]["dir"] == str(tmp_path / "nox") and kept["where"] == str(tmp_path / "nox")


@pytest.mark.parametrize("flags", ["--xla_cpu_max_isa=SSE4_2"])
def test_other_xla_flags_are_other_entries(tmp_path, flags):
    """A cache warmed under one set of XLA flags gives a process under other flags no hit."""
    cache = tmp_path / "cache"
    _run("enable", {"LSE_JAX_CACHE": str(cache), "XLA_FLAGS": ""})
    written = _entries(cache)
    other = _run("enable", {"LSE_JAX_CACHE": str(cache), "XLA_FLAGS": flags})
    assert other["hits"] == 0
    assert _entries(cache) > written


def test_an_entry_being_written_costs_a_compile_not_a_warning(tmp_path):
    """JAX writes entries unlocked: a reader can meet a half-written file (as a truncated one here).

    JAX then warns and compiles the program itself. ``enable`` silences that one warning (a notebook
    cell's stderr fails strict nbval); the result is the same bits. Control: without the filter the
    warning is there, so the test would see it.
    """
    cache = tmp_path / "cache"
    first = _run("enable", {"LSE_JAX_CACHE": str(cache)})
    for entry in cache.rglob("*"):
        if entry.is_file():
            data = entry.read_bytes()
            entry.write_bytes(data[: len(data) // 2])
    unfiltered = _run("enable-unfiltered", {"LSE_JAX_CACHE": str(cache)})
    assert "Error reading persistent compilation cache entry" in unfiltered["stderr"]
    filtered = _run("enable", {"LSE_JAX_CACHE": str(cache)})
    assert "Error reading" not in filtered["stderr"] and "Warning" not in filtered["stderr"]
    assert filtered["hits"] == 0
    assert filtered["bits"] == unfiltered["bits"] == first["bits"]
