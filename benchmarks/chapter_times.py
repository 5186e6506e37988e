"""Time every chapter as a reader runs it: a fresh kernel per notebook, ``book/`` as the working directory.

Usage::

    python benchmarks/chapter_times.py [--out _build/chapter_times.json] [--only 04 09 ...] [--cells N]

Prints a per-chapter table (seconds, and whether it meets the 60 s target) and the total against the
10-minute target; ``--cells N`` also lists each chapter's N slowest cells. XLA's flags are whatever the
environment holds: ``nox -s timings`` runs this twice, with XLA's defaults and with the test suite's
fast-compile flags. Nothing is written back to the notebooks.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "_build" / "chapter_times.json"))
    ap.add_argument("--only", nargs="+", help="chapter numbers, e.g. 04 09")
    ap.add_argument("--cells", type=int, default=0, help="also list each chapter's N slowest cells")
    args = ap.parse_args(argv)
    paths = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        paths = [p for p in paths if p.name[:2] in set(args.only)]
    flags = os.environ.get("XLA_FLAGS", "") or "(XLA defaults)"
    print(f"XLA_FLAGS: {flags}; {os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.2f}")
    rows = {}
    for p in paths:
        r = time_chapter(p)
        rows[p.stem] = r
        ok = "yes" if r["seconds"] <= CHAPTER_S else "NO"
        print(f"{p.stem:40s} {r['seconds']:7.1f} s  <= {CHAPTER_S:.0f} s: {ok}", flush=True)
        for i, s in sorted(r["cells"], key=lambda c: -c[1])[: args.cells]:
            print(f"    cell {i:3d} {s:7.1f} s")
    total = sum(r["seconds"] for r in rows.values())
    print(f"{'all chapters':40s} {total:7.1f} s  <= {TOTAL_S:.0f} s: {'yes' if total <= TOTAL_S else 'NO'}")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(dict(xla_flags=flags, chapters=rows, total=total, load_after=os.getloadavg()[0]), indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
