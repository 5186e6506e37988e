"""The lock (requirements/lock.txt) and what is made from it or checked against it.

    python requirements/locktools.py environment   # write environment.yml (Binder) from the lock
    python requirements/locktools.py check         # installed versions == locked ones, else exit 1
    python requirements/locktools.py diff          # report installed versions that differ (exit 0)

The lock is written by `nox -s lock` (uv, a universal resolution for CPython >= 3.11). Standard
library only, except that `check`/`diff` evaluate environment markers with `packaging` (installed
in every environment made from the lock).
"""

from __future__ import annotations

import pathlib
import re
import sys
from typing import NamedTuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
ENVIRONMENT = ROOT / "environment.yml"
# Binder's Python; the lock holds the same versions for 3.11, 3.12 and 3.13.
BINDER_PYTHON = "3.11"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)\s*(?:;\s*(?P<marker>.+))?$")


class Pin(NamedTuple):
    name: str  # normalised (PEP 503)
    version: str
    marker: str | None
    line: str  # as written in the lock


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[Pin]:
    """Every ``name==version [; marker]`` line of a lock (comments and blank lines skipped)."""
    pins = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        m = _PIN.match(line)
        if m is None:
            raise ValueError(f"not an exact pin in the lock: {raw!r}")
        pins.append(Pin(normalise(m["name"]), m["version"], m["marker"], line))
    return pins


def render_environment(lock_text: str) -> str:
    """environment.yml: conda's Python, then pip with every pin of the lock, verbatim."""
    lines = [
        "# Binder / conda environment. GENERATED from requirements/lock.txt by `nox -s lock`",
        "# (python requirements/locktools.py environment): do not edit by hand.",
        "# tests/contracts/test_environment.py checks that this file, the lock and pyproject.toml agree.",
        "# The package itself is installed by `postBuild` (`pip install --no-deps -e .`; the",
        "# repository is not present while this file is built).",
        "name: lse_energy",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={BINDER_PYTHON}",
        "  - pip",
        "  - pip:",
    ]
    for pin in parse_lock(lock_text):
        lines.append(f'      - "{pin.line}"' if pin.marker else f"      - {pin.line}")
    return "\n".join(lines) + "\n"


def differences(pins: list[Pin]) -> list[tuple[str, str, str]]:
    """``(name, locked, installed)`` for every pin that applies here and is not installed at its version."""
    from importlib import metadata

    from packaging.markers import Marker

    installed = {normalise(d.metadata["Name"]): d.version for d in metadata.distributions()}
    out = []
    for pin in pins:
        if pin.marker and not Marker(pin.marker).evaluate():
            continue
        have = installed.get(pin.name, "not installed")
        if have != pin.version:
            out.append((pin.name, pin.version, have))
    return out


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else ""
    if command == "environment":
        ENVIRONMENT.write_text(render_environment(LOCK.read_text()))
        print(f"wrote {ENVIRONMENT.relative_to(ROOT)} from {LOCK.relative_to(ROOT)}")
        return 0
    if command in ("check", "diff"):
        pins = parse_lock(LOCK.read_text())
        diff = differences(pins)
        for name, locked, have in diff:
            print(f"{name}: locked {locked}, installed {have}")
        if command == "check":
            if diff:
                print(f"{len(diff)} installed version(s) differ from {LOCK.relative_to(ROOT)}")
                return 1
            print(f"all {len(pins)} pins of {LOCK.relative_to(ROOT)} that apply here are installed at their version")
        else:
            print(f"{len(diff)} of {len(pins)} locked packages differ from the lock")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
