"""Sessions: `nox -s book` renders the book, `nox -s tests` runs every test, `nox -s portability`
re-runs the notebooks as on older CPUs, `nox -s bench` times the peers, `nox -s experiments` runs
the full-size experiments the chapters plot from book/data/, `nox -s timings` times every chapter,
`nox -s pdf` writes the book as one PDF, `nox -s lint` checks the code's format and lint rules.

Every session but `tests-latest` installs the exact versions of requirements/lock.txt, then the
package itself without dependencies; `nox -s lock` regenerates that lock (and environment.yml,
Binder's copy of it); `nox -s tests-latest` runs the tests on the newest versions instead."""

import importlib.util
import os
import pathlib

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

ROOT = pathlib.Path(__file__).parent
# The one source of truth for versions: every package of the book and test extras at one exact
# version, the same on CPython 3.11, 3.12 and 3.13 (a universal resolution; see `lock`).
LOCK = "requirements/lock.txt"
# CPU only: a GPU probe would print to stderr, which strict nbval reads as a diff.
ENV = {"JAX_PLATFORMS": "cpu", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
# The tests and the book compile a few thousand small XLA programs and run most of
# them once, so compile time dominates: without XLA's fusion emitters and LLVM
# optimisation each compile takes about half as long (the test suite went from 12.5
# to about 6 min). These flags change code generation only, never the program;
# results agree up to floating-point reassociation, which the sanitised nbval
# comparison and every test tolerance allow. The Performance chapter removes them in
# its own kernel (it measures speed), and the benchmarks (`nox -s bench`) and
# readers running the notebooks use XLA's defaults.
FAST_COMPILE = {"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"}


# JAX's persistent compilation cache (lse_energy/compile_cache.py): every compiled XLA program is
# stored on disk, and a later process with the same program, jaxlib and XLA_FLAGS loads it instead
# of compiling it again. One directory for every session; entries of different XLA flags (the
# fast-compile flags, XLA's defaults, each emulated instruction set) never match each other, so
# sessions share only what is truly the same program. `LSE_JAX_CACHE=off nox ...` runs without
# it, `LSE_JAX_CACHE=DIR` moves it. The minimum compile time and entry size are 0 so that the
# thousands of small programs are stored too (JAX's default keeps only compiles of over 1 s).
def _cache_env() -> dict[str, str]:
    # the package's own rule for "off", read from its file (nox's Python need not have jax)
    spec = importlib.util.spec_from_file_location("_lse_compile_cache", ROOT / "lse_energy" / "compile_cache.py")
    compile_cache = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compile_cache)
    where = os.environ.get("LSE_JAX_CACHE", str(ROOT / "_build" / "jax_cache")).strip()
    if compile_cache.is_off(where):
        return {"LSE_JAX_CACHE": "off"}
    return {
        "LSE_JAX_CACHE": where,
        "JAX_COMPILATION_CACHE_DIR": where,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def _install_locked(session):
    """The locked versions, then the package itself (editable, no dependencies: they are all locked)."""
    session.install("-r", LOCK)
    session.install("--no-deps", "-e", ".")
    # A reused environment may hold other versions from before: fail rather than test those.
    session.run_install("python", "requirements/locktools.py", "check")


def _kernel_env(session):
    """ENV plus an IPython directory whose kernel config silences one log line.

    ipykernel >= 7 logs "Kernel is running over TCP without encryption" at WARNING
    level on every start. The kernel only listens on localhost for the duration of
    the build, and the line would be the only warning the build prints, so the
    kernel's own log level is raised to ERROR. Warnings raised by notebook code
    still reach the cell's stderr (and fail strict nbval).
    """
    profile = pathlib.Path(session.create_tmp()).resolve() / "ipython" / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.py").write_text('c.IPKernelApp.log_level = "ERROR"\n')
    # tqdm's notebook bar ignores TQDM_DISABLE and would store a widget in the page (its state,
    # 65 KB in chapter 1, inert without a kernel): where the variable is set, a chapter's
    # `from tqdm.auto import tqdm` gets the plain, disabled bar instead.
    (profile / "startup").mkdir(exist_ok=True)
    (profile / "startup" / "00-quiet-progress.py").write_text(
        "import os\n"
        "if os.environ.get('TQDM_DISABLE', '').strip().lower() not in ('', '0', 'false'):\n"
        "    import functools, tqdm.auto, tqdm.std\n"
        "    tqdm.auto.tqdm = functools.partial(tqdm.std.tqdm, disable=True)\n"
        "    tqdm.auto.trange = functools.partial(tqdm.std.trange, disable=True)\n"
    )
    return {**ENV, **_cache_env(), "IPYTHONDIR": str(profile.parent)}


@nox.session
def book(session):
    """Execute the chapters changed since the last build and render the HTML book into _build/html."""
    _install_locked(session)
    # Progress bars off while the book is built: tqdm would store a widget that the
    # static page cannot run (a reader's own Jupyter still shows them).
    # LSE_CHECK_FIGURES: every figure's text is checked after each cell (lse_energy.plotting);
    # a problem is written to the cell's stderr, which the page check below finds.
    env = {**_kernel_env(session), **FAST_COMPILE, "TQDM_DISABLE": "1", "LSE_CHECK_FIGURES": "1"}
    # The notebooks run two at a time into a jupyter-cache (tools/execute_book.py), then the
    # build takes their outputs from it (execute_notebooks: cache, in a copy of _config.yml);
    # one kernel at a time left one of the two cores idle for most of the build. The cache keeps
    # a notebook's outputs while its code, the package, book/'s other files, the lock and the
    # kernel's flags are unchanged, so a second build executes only what changed;
    # `nox -s book -- --force` executes every notebook again. A notebook missing from the cache
    # is executed, and reported, by the build itself.
    cache = ROOT / "_build" / ".jupyter_cache"
    force = ["--force"] if "--force" in session.posargs else []
    session.run("python", "tools/execute_book.py", str(cache), *force, env=env)
    config = pathlib.Path(session.create_tmp()).resolve() / "_config_book.yml"
    session.run(
        "python",
        "-c",
        "import sys, yaml; c = yaml.safe_load(open('_config.yml')); "
        "c['execute'].update(execute_notebooks='cache', cache=sys.argv[2]); "
        "open(sys.argv[1], 'w').write(yaml.safe_dump(c, allow_unicode=True))",
        str(config),
        str(cache),
        silent=True,
    )
    session.run("jupyter-book", "build", "--all", ".", "-W", "-n", "--keep-going", "--config", str(config), env=env)
    session.run("python", "tools/check_pages.py", str(ROOT / "_build" / "html"))
    index = ROOT / "_build" / "html" / "index.html"
    session.log(f"The book is ready: open file://{index}")


# The PDF: Sphinx's LaTeX builder with XeLaTeX (Unicode text such as σ, ≤ and ⪰ in the prose;
# fonts from fonts-freefont-otf), from the notebooks' stored outputs, which strict nbval checks
# against the code. Debian packages that provide every LaTeX package the build uses.
PDF_APT = [
    "texlive-xetex",
    "texlive-latex-extra",
    "texlive-fonts-recommended",
    "texlive-science",
    "latexmk",
    "fonts-freefont-otf",
]


@nox.session
def pdf(session):
    """The whole book as one PDF, _build/latex/lse_energy.pdf (also copied to _build/html/).

    Needs XeLaTeX and latexmk: on Debian or Ubuntu, `sudo apt-get install --no-install-recommends`
    with the packages of PDF_APT. The notebooks are not executed again: the PDF shows their
    stored outputs."""
    import shutil

    missing = [tool for tool in ("xelatex", "latexmk") if shutil.which(tool) is None]
    if missing:
        session.error(
            f"{', '.join(missing)} not found: sudo apt-get install --no-install-recommends " + " ".join(PDF_APT)
        )
    _install_locked(session)
    # _config.yml with execution off, written by the session's Python (which has PyYAML)
    tmp = pathlib.Path(session.create_tmp()).resolve() / "_config_pdf.yml"
    session.run(
        "python",
        "-c",
        "import sys, yaml; c = yaml.safe_load(open('_config.yml')); "
        "c['execute']['execute_notebooks'] = 'off'; "
        "open(sys.argv[1], 'w').write(yaml.safe_dump(c, allow_unicode=True))",
        str(tmp),
        silent=True,
    )
    session.run(
        "jupyter-book",
        "build",
        "--all",
        ".",
        "--builder",
        "pdflatex",
        "--config",
        str(tmp),
        env={**ENV, "TQDM_DISABLE": "1"},
    )
    out = ROOT / "_build" / "latex" / "lse_energy.pdf"
    if not out.exists():
        session.error(f"{out} was not written")
    html = ROOT / "_build" / "html"
    if html.is_dir():
        shutil.copy2(out, html / out.name)
    session.log(f"The PDF is ready: {out}")


NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "nbval_sanitize.cfg"]
# --max-worker-restart 0: pytest-xdist 3.8 can deadlock when it replaces a crashed worker under
# --dist loadfile (pytest-xdist#784, #1378), which turns one crash into a run that never ends.
# With no restart a crash ends the run at once, naming the test it crashed in.
WORKERS = ["-n", os.environ.get("LSE_TEST_WORKERS", "2"), "--dist", "loadfile", "--max-worker-restart", "0"]
# Readers run the notebooks on other CPUs. XLA can emulate an older instruction set on
# this one, which changes float32 round-off (and vectorised float64 maths) the way
# another CPU would; every stored output must survive it.
PORTABILITY_ISAS = ("SSE4_2", "AVX")


def _pytest_everything(session):
    session.run(
        "pytest",
        # Each file (a notebook, or a test module) stays on one worker (--dist loadfile); xdist
        # hands out the files with the most items first, so small test files fill the tails.
        "book",
        "tests",
        "lse_energy",
        "--doctest-modules",
        *NBVAL,
        *WORKERS,
        *session.posargs,
        env={**_kernel_env(session), **FAST_COMPILE},
    )


@nox.session
def tests(session):
    """Every notebook under strict nbval, the package tests and the docstring examples, on 2 workers (one file each)."""
    _install_locked(session)
    _pytest_everything(session)


@nox.session(name="tests-latest")
def tests_latest(session):
    """The tests of `tests` on the newest versions this Python allows (no lock): what a new release changes.

    Not part of CI (.ci/run): a failure here is news about a release, not about a commit. The
    versions that differ from the lock are printed first.
    """
    session.install("--upgrade", "--upgrade-strategy", "eager", "-e", ".[book,test]")
    session.run("python", "-m", "pip", "freeze", "--exclude-editable")
    session.run("python", "requirements/locktools.py", "diff")
    _pytest_everything(session)


# The linter and formatter, pinned: a new ruff release may format differently, and CI must not change
# its verdict on a commit that did not change.
RUFF = "ruff==0.16.9"


@nox.session
def lint(session):
    """`ruff format --check` and `ruff check` ([tool.ruff] in pyproject.toml): package, tests, benchmarks, tools."""
    session.install(RUFF)
    session.run("ruff", "format", "--check", ".")
    session.run("ruff", "check", ".")


# uv writes the lock; pinned so that a regenerated lock differs only where the versions do.
UV = "uv==0.13.9"


@nox.session
def lock(session):
    """Regenerate requirements/lock.txt (newest versions, one per package for CPython 3.11-3.13) and environment.yml.

    A universal resolution (`--universal`: markers instead of one lock per platform) with
    `--fork-strategy fewest`, which picks one version of each package for every Python >= 3.11
    where one exists instead of the newest for each Python; jax >= 0.11 needs Python >= 3.12,
    so this holds jax at the newest release that also runs on 3.11. Extra arguments go to uv,
    e.g. `nox -s lock -- --upgrade-package optax` (the default upgrades everything).
    """
    session.install(UV)
    session.run(
        "uv",
        "pip",
        "compile",
        "pyproject.toml",
        "--extra",
        "book",
        "--extra",
        "test",
        "--universal",
        "--python-version",
        "3.11",
        "--fork-strategy",
        "fewest",
        "--custom-compile-command",
        "nox -s lock",
        "--quiet",
        "-o",
        LOCK,
        *(session.posargs or ["--upgrade"]),
    )
    session.run("python", "requirements/locktools.py", "environment")


@nox.session
def portability(session):
    """Every notebook under strict nbval as if on older CPUs (XLA's SSE4.2, then AVX, code paths)."""
    _install_locked(session)
    for isa in PORTABILITY_ISAS:
        session.log(f"strict nbval with --xla_cpu_max_isa={isa}")
        flags = f"{FAST_COMPILE['XLA_FLAGS']} --xla_cpu_max_isa={isa}"
        session.run(
            "pytest", "book", *NBVAL, *WORKERS, *session.posargs, env={**_kernel_env(session), "XLA_FLAGS": flags}
        )


@nox.session
def experiments(session):
    """Every registered full-size run (lse_energy.experiments.store) into book/data/, resuming what is stored.

    `nox -s experiments -- --only NAME ...` runs a subset, `-- --list` lists them. A progress bar shows
    the cells and, inside each, the optimizer steps."""
    _install_locked(session)
    session.run(
        "python",
        "-m",
        "lse_energy.experiments",
        "--out",
        "book/data",
        "--progress",
        *session.posargs,
        env={**ENV, **_cache_env()},
    )


@nox.session
def timings(session):
    """Every chapter executed as a reader runs it, timed: with XLA's defaults, then with the fast-compile flags."""
    _install_locked(session)
    env = _kernel_env(session)
    session.run(
        "python", "benchmarks/chapter_times.py", "--out", "_build/chapter_times_default.json", *session.posargs, env=env
    )
    session.run(
        "python",
        "benchmarks/chapter_times.py",
        "--out",
        "_build/chapter_times_fast.json",
        *session.posargs,
        env={**env, **FAST_COMPILE},
    )


@nox.session
def bench(session):
    """Benchmarks against scikit-learn (and PyTorch, if installed): one table, also in _build/bench.json."""
    _install_locked(session)
    session.run("python", "benchmarks/run.py", *session.posargs, env=ENV)


@nox.session
def mutants(session):
    """Hand-written bugs (tools/mutants.py), each in a scratch copy: its module's tests, then its chapter, must fail.

    Prints which test or notebook cell killed each mutant; fails if one survives (a check that cannot
    fail). `nox -s mutants -- --list`, `-- --only NAME ...`, `-- --no-notebooks`. Not in CI: it takes
    longer than the test suite."""
    _install_locked(session)
    session.run("python", "tools/mutants.py", *session.posargs, env={**_kernel_env(session), **FAST_COMPILE})
