"""Execute the book's notebooks into a fresh jupyter-cache, two at a time, for `nox -s book`.

Usage::

    python tools/execute_book.py CACHE_DIR

The build then runs with ``execute_notebooks: cache`` on that cache: Jupyter Book takes every
page's outputs from it, and executes (and reports, with ``-W``) any notebook that is missing.
The cache is emptied first, so every output comes from this run of this code; nothing is
reused from an earlier build. The Performance chapter runs alone after the others, since it
times code and a second kernel beside it would slow what it measures.

Each notebook runs in its own kernel with ``book/`` as the working directory, as in a plain
``jupyter-book build``; the notebooks do not share state, so the order cannot change a result.
Exits non-zero, naming the notebooks and printing their tracebacks, if any notebook fails.
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import sys
import time

from jupyter_cache import get_cache
from jupyter_cache.executors import load_executor

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT_S = 600  # as _config.yml's execute.timeout
ALONE = {"14_performance.ipynb"}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = pathlib.Path(argv[0]).resolve()
    shutil.rmtree(path, ignore_errors=True)
    cache = get_cache(str(path))
    notebooks = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    records = {nb.name: cache.add_nb_to_project(str(nb)) for nb in notebooks}
    logger = logging.getLogger("execute_book")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    t0 = time.perf_counter()
    failed = []
    for executor, names in (("local-parallel", [n for n in records if n not in ALONE]),
                            ("local-serial", [n for n in records if n in ALONE])):
        if not names:
            continue
        result = load_executor(executor, cache=cache, logger=logger).run_and_cache(
            filter_pks=[records[n].pk for n in names], timeout=TIMEOUT_S, allow_errors=False)
        failed += result.excepted + result.errored
    print(f"executed {len(notebooks)} notebooks in {time.perf_counter() - t0:.0f} s "
          f"({len(failed)} failed)")
    for uri in failed:
        record = cache.get_project_record(uri)
        print(f"\n{pathlib.Path(uri).name} failed:\n{record.traceback}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
