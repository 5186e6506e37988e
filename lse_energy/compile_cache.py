r"""A persistent compilation cache for the book's kernels and a reader's own: compile once, across processes.

Most of a chapter's first run is XLA compiling its programs. JAX can store each compiled
program on disk and load it in the next process instead of compiling it again; this
module switches that on, by an explicit call (importing ``lse_energy`` changes no JAX
setting). Every chapter's first cell calls :func:`enable`.

Where the cache lives, first match wins:

1. the ``path`` argument of :func:`enable`;
2. the environment variable ``LSE_JAX_CACHE``: a directory, or ``off`` (also ``0``,
   ``false``, ``no`` or empty) to leave the cache off;
3. a directory JAX already has (``JAX_COMPILATION_CACHE_DIR`` in the environment, as the
   ``nox`` sessions set it);
4. :func:`default_dir`, ``$XDG_CACHE_HOME/lse_energy/jax`` (``~/.cache/lse_energy/jax``).

What the cache cannot do:

- An entry is keyed by the program, the jaxlib version, the device and ``XLA_FLAGS``. Programs
  compiled under other XLA flags are other entries: the test suite's and the book build's
  fast-compile flags do not share entries with XLA's defaults, and each emulated instruction
  set of ``nox -s portability`` (``--xla_cpu_max_isa=...``) fills its own.
- The key does not name the host CPU's instruction set, so a cache directory belongs to one
  machine: do not copy it to another.
- A program with a host callback (a progress bar, ``jax.debug.callback``) is compiled in
  every process; JAX does not store it.
- JAX writes an entry without a lock. Two processes that compile the same program at the same
  moment (the test suite's two workers, two notebooks built side by side) can meet a file that
  the other is still writing; JAX then cannot read it, warns, and compiles the program itself,
  with the same result. :func:`enable` silences that one warning, so that a notebook's output
  stays clean; every other warning of the cache still shows. (JAX's locked mode, a size cap,
  rescans the whole directory on every write: about 0.1 s an entry at 6000 entries here.)

Examples:
    >>> import os
    >>> from lse_energy import compile_cache
    >>> before = os.environ.get("LSE_JAX_CACHE")
    >>> os.environ["LSE_JAX_CACHE"] = "/tmp/my-jax-cache"
    >>> str(compile_cache.resolve())
    '/tmp/my-jax-cache'
    >>> os.environ["LSE_JAX_CACHE"] = "off"
    >>> compile_cache.enable() is None
    True
    >>> _ = (
    ...     os.environ.pop("LSE_JAX_CACHE")
    ...     if before is None
    ...     else os.environ.update(LSE_JAX_CACHE=before)
    ... )
"""

from __future__ import annotations

import os
import pathlib

ENV = "LSE_JAX_CACHE"
_OFF = {"", "0", "off", "false", "no"}

__all__ = ["ENV", "default_dir", "enable", "is_off", "resolve"]


def is_off(value: str) -> bool:
    """Whether a value of ``LSE_JAX_CACHE`` turns the cache off (empty, ``0``, ``off``, ``false``, ``no``).

    Examples:
      >>> from lse_energy.compile_cache import is_off
      >>> is_off(" Off "), is_off("/tmp/jax-cache")
      (True, False)
    """
    return value.strip().lower() in _OFF


def default_dir() -> pathlib.Path:
    """``$XDG_CACHE_HOME/lse_energy/jax``, or ``~/.cache/lse_energy/jax`` when XDG_CACHE_HOME is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "lse_energy" / "jax"


def resolve(path: str | os.PathLike | None = None) -> pathlib.Path | None:
    """The directory :func:`enable` would use, or ``None`` where ``LSE_JAX_CACHE`` turns the cache off.

    Args:
        path: a directory that overrides the environment.

    Returns:
        the cache directory, or ``None``.
    """
    if path is not None:
        return pathlib.Path(path)
    if ENV in os.environ:
        value = os.environ[ENV]
        return None if is_off(value) else pathlib.Path(value.strip()).expanduser()
    import jax

    existing = jax.config.jax_compilation_cache_dir
    return pathlib.Path(existing) if existing else default_dir()


def enable(path: str | os.PathLike | None = None) -> pathlib.Path | None:
    """Store every compiled XLA program in a directory, and load it from there in later processes.

    Also caches the many small programs: JAX's defaults store only programs that took at least a
    second to compile, and this sets the minimum compile time and entry size to 0. Call it before
    the first computation of a process (a chapter's first cell does). The cache never changes a
    result: a loaded program is the one XLA compiled, for the same program, jaxlib and flags.

    Args:
        path: the directory; by default ``LSE_JAX_CACHE``, then a directory JAX already has, then
            :func:`default_dir` (see the module docstring).

    Returns:
        the directory in use, or ``None`` where ``LSE_JAX_CACHE`` is ``off``.
    """
    import warnings

    import jax

    where = resolve(path)
    if where is None:
        return None
    where.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(where))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # An entry another process is still writing: JAX compiles the program itself (module docstring).
    warnings.filterwarnings("ignore", message="Error reading persistent compilation cache entry", category=UserWarning)
    return where
