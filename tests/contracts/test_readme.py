"""The README's quick start runs as written: every ```python block is a doctest, run in order in one namespace.

The examples print only booleans and rounded numbers, so they hold with x64 on or off (a new user has it
off; ``tests/conftest.py`` turns it on, and the second test runs them in a fresh process without it).
The control: a block whose printed result is wrong fails.
"""

from __future__ import annotations

import doctest
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown text."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def run_blocks(blocks: list[str]) -> doctest.TestResults:
    """Run the blocks as doctests, in order, sharing one namespace; return the failures and attempts."""
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    namespace: dict = {}
    for i, block in enumerate(blocks):
        test = parser.get_doctest(block, namespace, f"README block {i}", "README.md", 0)
        runner.run(test, clear_globs=False)
        namespace = test.globs
    return runner.summarize(verbose=False)


def quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return python_blocks(section)


def test_quick_start_has_the_four_examples():
    blocks = quick_start()
    assert len(blocks) == 4
    for block, call in zip(blocks, ("lse.gmm.fit", "lse.hopfield.retrieve", "optax", "lse.drivers.descend")):
        assert call in block and ">>> " in block


def test_quick_start_runs_as_written():
    result = run_blocks(quick_start())
    assert result.attempted > 0 and result.failed == 0


def test_quick_start_runs_with_x64_off():
    """A new user's default: a fresh process, x64 off, the package imported as the README does."""
    code = (
        "import sys; from tests.contracts.test_readme import quick_start, run_blocks; "
        "r = run_blocks(quick_start()); sys.exit(int(r.failed > 0 or r.attempted == 0))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_a_wrong_output_fails():
    """Control: the runner reports a block whose expected output is wrong."""
    assert run_blocks([">>> 1 + 1\n3\n"]).failed == 1


@pytest.mark.parametrize("text, n", [("```python\n>>> 1\n1\n```\n```bash\nls\n```\n", 1), ("no code", 0)])
def test_python_blocks_finds_only_python_fences(text, n):
    assert len(python_blocks(text)) == n
