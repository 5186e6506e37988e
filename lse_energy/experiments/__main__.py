"""``python -m lse_energy.experiments``: run the stored experiments (what ``nox -s experiments`` calls).

Usage::

    python -m lse_energy.experiments [--out book/data] [--only NAME ...] [--progress] [--list]

Each experiment writes ``<out>/<name>.json`` after every finished cell and resumes
from it when rerun (see :mod:`lse_energy.experiments.store`).
"""

from __future__ import annotations

import argparse
import sys
import time

from lse_energy.experiments import store


def main(argv=None) -> int:
    reg = store.registry()
    parser = argparse.ArgumentParser(
        prog="python -m lse_energy.experiments", description="Run the stored full-size experiments (resumable)."
    )
    parser.add_argument("--out", default="book/data", help="directory of the stored JSON files")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(reg), metavar="NAME", help=f"run only these (of: {', '.join(sorted(reg))})"
    )
    parser.add_argument("--progress", action="store_true", help="progress bars (cells, and steps inside)")
    parser.add_argument("--list", action="store_true", help="list the experiments and their chapters, then stop")
    args = parser.parse_args(argv)
    if args.list:
        for name, exp in sorted(reg.items(), key=lambda kv: (kv[1].chapter, kv[0])):
            print(f"{name:28s} {exp.chapter}")
        return 0
    names = args.only or sorted(reg, key=lambda n: (reg[n].chapter, n))
    total = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        doc = store.run(reg[name], args.out, progress=args.progress)
        print(
            f"{name}: {len(doc['cells'])} cells, {doc['seconds']:.0f} s of cell time stored, "
            f"{time.perf_counter() - t0:.0f} s in this run -> {args.out}/{name}.json",
            flush=True,
        )
    print(f"all: {time.perf_counter() - total:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
