"""Strict JAX configuration, set once before any array exists (CONTRIBUTING.md, Tests)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program when a test module ends.

    Each XLA CPU executable holds about three memory mappings until
    ``jax.clear_caches()``, and Linux caps a process at ``vm.max_map_count``
    mappings (65530 by default). A pytest worker that runs half the suite
    compiles tens of thousands of programs (``test_validation`` alone adds about
    16 000 mappings), passes the cap, and then LLVM's JIT segfaults on a
    failed ``mmap``: CI lost two runs that way, each at 99%. Released per
    module, a worker stays within the largest module's own count.
    """
    yield
    jax.clear_caches()
