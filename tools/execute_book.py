"""Execute the book's notebooks into a jupyter-cache, two at a time, for `nox -s book`.

Usage::

    python tools/execute_book.py CACHE_DIR [--force]

The build then runs with ``execute_notebooks: cache`` on that cache: Jupyter Book takes every
page's outputs from it, and executes (and reports, with ``-W``) any notebook that is missing.

What is kept from an earlier build: jupyter-cache keys an executed notebook by its code cells,
and this script keys the whole cache by everything else a chapter's outputs can depend on
(:func:`source_key`: the package, ``benchmarks/``, every file under ``book/`` that is not a
notebook, the lock file, the Python version and the kernel's environment variables). When that
key differs from the one the cache was filled under, the cache is emptied and every notebook is
executed again; otherwise only the notebooks whose code changed are. So a second build of
unchanged sources executes nothing, and an output is never taken from other code than the one
on disk. ``--force`` empties the cache regardless. The Performance chapter runs alone after the
others, since it times code and a second kernel beside it would slow what it measures.

Each notebook runs in its own kernel with ``book/`` as the working directory, as in a plain
``jupyter-book build``; the notebooks do not share state, so the order cannot change a result.

A notebook that fails here is named, with its traceback, and left out of the cache, so the build
executes it again on its own and fails with ``-W`` if it fails again. This is deliberate: two
kernels started together on this 2-core machine have twice hung on a lost message (a kernel
idle, its client waiting; once in a forked pool, once beside a separate ``jupyter execute``),
so here each cell has ``CELL_TIMEOUT_S`` (no cell takes a minute) and a hang costs a rerun,
not the build.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time

from jupyter_cache import get_cache
from jupyter_cache.executors import load_executor

ROOT = pathlib.Path(__file__).resolve().parents[1]
CELL_TIMEOUT_S = 300
ALONE = {"14_performance.ipynb"}
# Two workers, each a fresh interpreter (not a fork of this one) running one kernel at a time;
# the second starts a few seconds after the first so that the two kernels do not start at once.
WORKERS, STAGGER_S = 2, 5.0
# What a chapter can read besides its own code cells, and the variables that change its outputs.
KEYED_TREES = ("lse_energy", "benchmarks", "book")
KEYED_FILES = ("requirements/lock.txt", "pyproject.toml")
KEYED_ENV = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_ENABLE_X64", "TQDM_DISABLE", "LSE_CHECK_FIGURES")
KEY_FILE = "source_key"


def source_key(root: pathlib.Path = ROOT, environ: dict | None = None) -> str:
    """A hash of everything but the notebooks' code that the executed notebooks depend on."""
    environ = os.environ if environ is None else environ
    digest = hashlib.sha256(sys.version.encode())
    files = [root / f for f in KEYED_FILES]
    for tree in KEYED_TREES:
        files += [
            p
            for p in (root / tree).rglob("*")
            if p.is_file()
            and p.suffix != ".ipynb"
            and not any(part.startswith((".", "_build", "__pycache__")) for part in p.relative_to(root).parts)
        ]
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name in KEYED_ENV:
        digest.update(f"{name}={environ.get(name)}".encode() + b"\0")
    return digest.hexdigest()


def open_cache(path: pathlib.Path, key: str, *, force: bool = False):
    """The jupyter-cache at ``path``, emptied first unless it was filled under ``key``."""
    if force or not (path / KEY_FILE).is_file() or (path / KEY_FILE).read_text() != key:
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    cache = get_cache(str(path))
    (path / KEY_FILE).write_text(key)
    return cache


def _execute(cache_dir: str, pks: list[int]) -> list[str]:
    """Execute the project notebooks ``pks`` one after another into the cache; the URIs that failed."""
    cache = get_cache(cache_dir)
    result = load_executor("local-serial", cache=cache, logger=logging.getLogger("execute_book")).run_and_cache(
        filter_pks=pks, timeout=CELL_TIMEOUT_S, allow_errors=False
    )
    return result.excepted + result.errored


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if len(argv) >= 2 and argv[0] == "--worker":  # internal: one worker's share
        _execute(argv[1], [int(pk) for pk in argv[2:]])
        return 0
    force = "--force" in argv
    argv = [a for a in argv if a != "--force"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = pathlib.Path(argv[0]).resolve()
    cache = open_cache(path, source_key(), force=force)
    notebooks = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    records = {nb.name: cache.add_nb_to_project(str(nb)) for nb in notebooks}
    stale = {r.pk for r in cache.list_unexecuted()}
    records = {n: r for n, r in records.items() if r.pk in stale}
    shared = [records[n].pk for n in records if n not in ALONE]
    t0 = time.perf_counter()
    workers = []
    for i in range(WORKERS):
        if not shared[i::WORKERS]:
            continue
        if i:
            time.sleep(STAGGER_S)
        workers.append(
            subprocess.Popen([sys.executable, __file__, "--worker", str(path), *map(str, shared[i::WORKERS])])
        )
    for w in workers:
        w.wait()
    _execute(str(path), [records[n].pk for n in records if n in ALONE])
    failed = [r.uri for r in cache.list_project_records() if r.traceback]
    print(
        f"executed {len(records)} of {len(notebooks)} notebooks in {time.perf_counter() - t0:.0f} s "
        f"({len(notebooks) - len(records)} unchanged, taken from the cache); "
        f"{len(failed)} failed and will be executed again by the build"
    )
    for uri in failed:
        print(f"\n{pathlib.Path(uri).name} failed:\n{cache.get_project_record(uri).traceback}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
