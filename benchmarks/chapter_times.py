"""Time every chapter as a reader runs it: a fresh kernel per notebook, ``book/`` as the working directory.

Usage::

    python benchmarks/chapter_times.py [--out _build/chapter_times.json] [--only 04 09 ...] [--cells N]

Prints a per-chapter table (seconds, and whether it meets the 60 s target) and the total against
the 10-minute target; with a warm compilation cache (``LSE_JAX_CACHE`` holds entries already, as on
a second ``nox -s timings``) the targets are a reader's second run, 20 s a chapter and 300 s in all.
``--cells N`` also lists each chapter's N slowest cells. XLA's flags are whatever the environment
holds: ``nox -s timings`` runs this twice, with XLA's defaults and with the test suite's fast-compile
flags. Nothing is written back to the notebooks.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTER_S, TOTAL_S = 60.0, 600.0
# With a warm compilation cache (lse_energy.compile_cache; nox sets LSE_JAX_CACHE) a chapter
# loads its programs instead of compiling them: the targets of a reader's second run.
WARM_CHAPTER_S, WARM_TOTAL_S = 20.0, 300.0


def cache_state() -> tuple[str, int]:
    """The compilation cache directory the kernels will use (LSE_JAX_CACHE) and its entry count."""
    from lse_energy.compile_cache import is_off

    where = os.environ.get("LSE_JAX_CACHE", "").strip()
    if is_off(where):
        return "off", 0
    path = pathlib.Path(where)
    return where, sum(1 for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def time_chapter(path: pathlib.Path, timeout: int = 600) -> dict:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}}, record_timing=True
    )
    t0 = time.perf_counter()
    client.execute()
    total = time.perf_counter() - t0
    cells = []
    for i, cell in enumerate(nb.cells):
        t = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type == "code" and "iopub.execute_input" in t and "shell.execute_reply" in t:
            from datetime import datetime

            start = datetime.fromisoformat(t["iopub.execute_input"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(t["shell.execute_reply"].replace("Z", "+00:00"))
            cells.append((i, (end - start).total_seconds()))
    return dict(seconds=total, cells=cells)


def machine_probe() -> float:
    """Seconds for a fixed piece of NumPy and pure-Python work: how fast the machine is right now.

    Timings on a shared machine move with its load (chapter times by up to 1.8x within an hour on
    the project's 2-core machine). The probe is taken before each chapter, so that runs can be
    compared: about 0.28 s on that machine idle, 0.9-1.6 s with two busy processes beside it.
    """
    import numpy as np

    a = np.random.default_rng(0).random((500, 500))
    t0 = time.perf_counter()
    for _ in range(60):
        a = a @ a
        a /= np.abs(a).max()
    sum(i * i for i in range(3_000_000))
    return time.perf_counter() - t0


def cold_warm(paths, out: pathlib.Path) -> int:
    """Each chapter on an empty cache, then again at once on the cache it filled: a side-by-side pair."""
    import shutil
    import tempfile

    rows = {}
    print(
        f"{'chapter':40s} {'cold s':>7s} {'warm s':>7s} {'warm/cold':>9s}  warm <= {WARM_CHAPTER_S:.0f} s"
        f"  {'probe s':>7s}"
    )
    for p in paths:
        probe = machine_probe()
        d = tempfile.mkdtemp(prefix="lse-jax-cache-")
        os.environ["LSE_JAX_CACHE"] = d  # the kernels inherit it; their first cell enables it
        os.environ["JAX_COMPILATION_CACHE_DIR"] = d
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        try:
            cold, warm = time_chapter(p)["seconds"], time_chapter(p)["seconds"]
        finally:
            shutil.rmtree(d, ignore_errors=True)
        rows[p.stem] = dict(cold=cold, warm=warm, probe=probe)
        ok = "yes" if warm <= WARM_CHAPTER_S else "NO"
        print(f"{p.stem:40s} {cold:7.1f} {warm:7.1f} {warm / cold:9.2f}  {ok:>13s}  {probe:7.2f}", flush=True)
    cold_total = sum(r["cold"] for r in rows.values())
    warm_total = sum(r["warm"] for r in rows.values())
    print(
        f"{'all chapters':40s} {cold_total:7.1f} {warm_total:7.1f} {warm_total / cold_total:9.2f}  "
        f"total <= {WARM_TOTAL_S:.0f} s: {'yes' if warm_total <= WARM_TOTAL_S else 'NO'}"
    )
    probes = [r["probe"] for r in rows.values()]
    print(f"machine probe: {min(probes):.2f} to {max(probes):.2f} s (the same work; larger is a slower machine)")
    flags = os.environ.get("XLA_FLAGS", "") or "(XLA defaults)"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(xla_flags=flags, cold_warm=rows, load_after=os.getloadavg()[0]), indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "_build" / "chapter_times.json"))
    ap.add_argument("--only", nargs="+", help="chapter numbers, e.g. 04 09")
    ap.add_argument("--cells", type=int, default=0, help="also list each chapter's N slowest cells")
    ap.add_argument(
        "--cold-warm",
        action="store_true",
        help="run each chapter twice in a row on its own new compilation cache: cold, then warm",
    )
    args = ap.parse_args(argv)
    paths = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        paths = [p for p in paths if p.name[:2] in set(args.only)]
    flags = os.environ.get("XLA_FLAGS", "") or "(XLA defaults)"
    print(f"XLA_FLAGS: {flags}; {os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.2f}")
    if args.cold_warm:
        return cold_warm(paths, pathlib.Path(args.out))
    cache, entries = cache_state()
    warm = entries > 0
    print(f"compilation cache: {cache}, {entries} entries before ({'warm' if warm else 'cold'})")
    chapter_s, total_s = (WARM_CHAPTER_S, WARM_TOTAL_S) if warm else (CHAPTER_S, TOTAL_S)
    rows = {}
    for p in paths:
        r = time_chapter(p)
        rows[p.stem] = r
        ok = "yes" if r["seconds"] <= chapter_s else "NO"
        print(f"{p.stem:40s} {r['seconds']:7.1f} s  <= {chapter_s:.0f} s: {ok}", flush=True)
        for i, s in sorted(r["cells"], key=lambda c: -c[1])[: args.cells]:
            print(f"    cell {i:3d} {s:7.1f} s")
    total = sum(r["seconds"] for r in rows.values())
    print(f"{'all chapters':40s} {total:7.1f} s  <= {total_s:.0f} s: {'yes' if total <= total_s else 'NO'}")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            dict(
                xla_flags=flags,
                cache=cache,
                cache_entries_before=entries,
                chapters=rows,
                total=total,
                load_after=os.getloadavg()[0],
            ),
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
