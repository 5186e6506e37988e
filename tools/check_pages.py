"""Fail when a built page carries what the executed notebooks must not leave in it.

`nox -s book` runs this on _build/html after the build:
- widget state (application/vnd.jupyter.widget-state+json): inert JSON without a kernel;
- "FIGURE TEXT CHECK FAILED": lse_energy.plotting's check (LSE_CHECK_FIGURES=1) found
  overlapping text or a literal "\\n" in a figure.
"""

from __future__ import annotations

import pathlib
import sys

PROBLEMS = {
    "application/vnd.jupyter.widget-state+json": "stores widget state",
    "FIGURE TEXT CHECK FAILED": "has a figure whose text overlaps or shows a literal \\n",
}


def problems(html: pathlib.Path) -> list[str]:
    out = []
    for page in sorted(html.rglob("*.html")):
        text = page.read_text(errors="replace")
        out += [f"{page.relative_to(html)} {why}" for marker, why in PROBLEMS.items() if marker in text]
    return out


if __name__ == "__main__":
    found = problems(pathlib.Path(sys.argv[1]))
    print("\n".join(found) or "pages: no widget state, no figure text problems")
    sys.exit(1 if found else 0)
