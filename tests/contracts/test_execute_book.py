"""tools/execute_book.py keeps a notebook's executed outputs only for the code that made them
(issue 49: the reader's second build)."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("execute_book", ROOT / "tools" / "execute_book.py")
execute_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute_book)


@pytest.fixture
def tree(tmp_path):
    """A project tree with one file in each place the key reads, and some it must not read."""
    for rel, text in {
        "lse_energy/gmm.py": "def fit(): ...",
        "benchmarks/bench.py": "x = 1",
        "book/data/run.json": "{}",
        "book/02_gmm.ipynb": "{}",
        "book/_build/page.html": "<p>",
        "book/.ipynb_checkpoints/x.json": "{}",
        "lse_energy/__pycache__/gmm.cpython-311.pyc": "bytes",
        "requirements/lock.txt": "jax==0.4.38",
        "pyproject.toml": "[project]",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


ENV = {"XLA_FLAGS": "--xla_backend_optimization_level=0", "TQDM_DISABLE": "1"}


@pytest.mark.parametrize(
    "rel", ["lse_energy/gmm.py", "benchmarks/bench.py", "book/data/run.json", "requirements/lock.txt", "pyproject.toml"]
)
def test_the_key_changes_with_what_a_chapter_reads(tree, rel):
    before = execute_book.source_key(tree, ENV)
    (tree / rel).write_text((tree / rel).read_text() + " ")
    assert execute_book.source_key(tree, ENV) != before


def test_the_key_changes_with_the_kernels_flags(tree):
    assert execute_book.source_key(tree, ENV) != execute_book.source_key(tree, {**ENV, "XLA_FLAGS": ""})
    assert execute_book.source_key(tree, ENV) != execute_book.source_key(tree, {**ENV, "JAX_ENABLE_X64": "1"})


@pytest.mark.parametrize(
    "rel",
    [
        "book/02_gmm.ipynb",
        "book/_build/page.html",
        "book/.ipynb_checkpoints/x.json",
        "lse_energy/__pycache__/gmm.cpython-311.pyc",
    ],
)
def test_the_key_ignores_notebooks_and_build_products(tree, rel):
    # a notebook's code is keyed by jupyter-cache itself, per notebook
    before = execute_book.source_key(tree, ENV)
    (tree / rel).write_text((tree / rel).read_text() + " ")
    assert execute_book.source_key(tree, ENV) == before
    assert execute_book.source_key(tree, {**ENV, "IPYTHONDIR": "/elsewhere"}) == before


def test_the_cache_is_kept_only_under_the_same_key(tmp_path):
    path = tmp_path / "cache"
    execute_book.open_cache(path, "a")
    (path / "executed-marker").write_text("")
    execute_book.open_cache(path, "a")
    assert (path / "executed-marker").exists()
    execute_book.open_cache(path, "a", force=True)
    assert not (path / "executed-marker").exists()
    (path / "executed-marker").write_text("")
    execute_book.open_cache(path, "b")
    assert not (path / "executed-marker").exists()
    assert (path / execute_book.KEY_FILE).read_text() == "b"
