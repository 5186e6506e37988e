"""Sessions: `nox -s book` renders the book, `nox -s tests` runs every test."""

import os
import pathlib

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

ROOT = pathlib.Path(__file__).parent
# CPU only: a GPU probe would print to stderr, which strict nbval reads as a diff.
ENV = {"JAX_PLATFORMS": "cpu", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


@nox.session
def book(session):
    """Execute every chapter and render the HTML book into _build/html."""
    session.install("-e", ".[book]")
    session.run(
        "jupyter-book", "build", "--all", ".", "-W", "-n", "--keep-going", env=ENV
    )
    index = ROOT / "_build" / "html" / "index.html"
    session.log(f"The book is ready: open file://{index}")


@nox.session
def tests(session):
    """Package tests, then every notebook under strict nbval (2 workers)."""
    session.install("-e", ".[book,test]")
    session.run(
        "pytest",
        "tests",
        "book",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        "nbval_sanitize.cfg",
        "-n",
        os.environ.get("LSE_TEST_WORKERS", "2"),
        "--dist",
        "loadfile",
        *session.posargs,
        env=ENV,
    )
