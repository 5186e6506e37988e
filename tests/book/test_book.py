"""Structural checks of the book: every chapter registered, executed and asserting."""

import json
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def _toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))
            for part in entry.get("parts", []):
                walk(part.get("chapters", []))

    walk(toc.get("chapters", []))
    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    return files


def test_toc_entries_exist():
    for entry in _toc_files():
        matches = list(ROOT.glob(entry + ".*"))
        assert matches, f"_toc.yml lists {entry}, which does not exist"


def test_every_notebook_in_toc():
    listed = set(_toc_files())
    for nb in NOTEBOOKS:
        assert f"book/{nb.stem}" in listed, f"{nb.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executed_and_asserting(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a chapter without code"
    assert all(c.get("execution_count") for c in code if "".join(c["source"]).strip()), (
        "every code cell must be executed before committing (nbval compares stored outputs)"
    )
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"], "stored error output"
    assert any("assert " in "".join(c["source"]) for c in code), "every claim must be asserted"


def _has_figure(cell):
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_widgets_have_static_figures(path):
    """Widgets render blank in the static book: a figure must sit beside each one."""
    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        if "ipywidgets" in src and ("interact" in src or "Slider" in src):
            near = cells[max(0, i - 3) : i + 4]
            assert any(c["cell_type"] == "code" and _has_figure(c) for c in near if c is not cell), (
                f"cell {i} shows a widget with no static figure within 3 cells"
            )


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _stored_widgets(nb: dict) -> list[str]:
    """Where a notebook stores widget views (outputs) or widget state (metadata)."""
    found = [
        f"cell {i}" for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})
    ]
    if nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE):
        found.append("notebook metadata")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_widget_state(path):
    """A stored widget renders only with require.js and a widget manager from a CDN, and a stored
    progress bar shows a stale count: execute with TQDM_DISABLE=1 (CONTRIBUTING, Notebooks)."""
    assert not _stored_widgets(json.loads(path.read_text())), (
        f"{path.name} stores widgets in {_stored_widgets(json.loads(path.read_text()))}: re-execute with TQDM_DISABLE=1"
    )


def test_stored_widget_rule_catches_a_progress_bar():
    bar = {"output_type": "display_data", "data": {WIDGET_VIEW: {"model_id": "x"}}}
    nb = {"cells": [{"cell_type": "code", "outputs": [bar]}], "metadata": {"widgets": {WIDGET_STATE: {"state": {}}}}}
    assert _stored_widgets(nb) == ["cell 0", "notebook metadata"]
    assert _stored_widgets({"cells": [{"cell_type": "code", "outputs": []}], "metadata": {}}) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_figures_share_the_plotting_style(path):
    """One style for every figure: plotting.use() once, no tight_layout (constrained layout is on),
    and every cell that draws axes labels them."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in cells]
    assert any("plotting.use()" in s for s in sources), "call lse_energy.plotting.use() once"
    for i, src in enumerate(sources):
        assert "tight_layout" not in src, f"code cell {i}: tight_layout conflicts with plotting.use()"
        if _has_figure(cells[i]) and ("plt.subplots" in src or "add_subplot" in src or "plt.figure" in src):
            # A static check: plotting.label(...), or a title plus axis labels (image grids and
            # diagrams drawn on hidden axes: a title).
            titled = "plotting.label(" in src or "title" in src
            labelled = any(t in src for t in ("plotting.label(", "xlabel", "ylabel", "imshow", 'axis("off")'))
            assert titled and labelled, f"code cell {i} draws a figure without axis labels and titles"


def test_equation_index_names_real_functions():
    import importlib
    import re

    text = (ROOT / "book" / "equation_index.md").read_text()
    names = re.findall(r"`(lse_energy\.[a-z_]+\.[A-Za-z_]+)`", text)
    assert len(names) > 20
    for name in names:
        module, attr = name.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), attr), f"{name} does not exist"


# An e-notation figure in a printed output, e.g. 3.6e-07 or 0.0e+00.
_E_NUMBER = r"[-+]?\d\.\d+e[-+]\d+"  # as printed by f"{x:.1e}"; a bare bound like 1e-5 is not one


def float32_roundoff_prints(nb: dict) -> list[str]:
    """Untagged cells that compute in float32 and print a figure only float32 round-off explains.

    Float32 round-off depends on the CPU and on how XLA compiles a kernel, so such a figure
    fails strict nbval on a reader's machine (CONTRIBUTING, "Notebooks"). In a cell whose
    source mentions float32, a printed e-notation figure that is zero or >= 1e-10 is taken
    for one: float32 round-off is never below 1e-10 unless exactly zero, while float64
    round-off (below 1e-10) is mapped to ROUNDOFF by the sanitize file. A ``decade(...)``
    in an untagged cell prints the decade of a compile-dependent error: also refused.
    """
    import re

    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or "nbval-ignore-output" in cell.get("metadata", {}).get("tags", []):
            continue
        src = "".join(cell["source"])
        if "decade(" in src:
            found.append(f"cell {i}: prints decade(...)")
        if "float32" not in src and "f32" not in src:
            continue
        text = "".join(
            "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
            for o in cell.get("outputs", [])
        )
        for number in re.findall(_E_NUMBER, text):
            if float(number) == 0.0 or abs(float(number)) >= 1e-10:
                found.append(f"cell {i}: float32 cell prints {number}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_float32_roundoff_in_untagged_outputs(path):
    found = float32_roundoff_prints(json.loads(path.read_text()))
    assert not found, found


def test_float32_roundoff_rule_catches_the_old_chapter_5():
    """The rule fails on chapter 5 as it was before the fix (a decade and a 0.0e+00 in float32 cells)."""
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["x = jnp.ones(3, jnp.float32)\n", "print(f'{err:.1e}')"],
                "outputs": [{"output_type": "stream", "text": ["per head: 0.0e+00\n"]}],
            },
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["print(decade(err))"],
                "outputs": [{"output_type": "stream", "text": ["< 1e-06\n"]}],
            },
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["y = x.astype(jnp.float64)  # from float32\n"],
                "outputs": [{"output_type": "stream", "text": ["float64 error 2.2e-16\n"]}],
            },
            {
                "cell_type": "code",
                "metadata": {"tags": ["nbval-ignore-output"]},
                "source": ["jnp.float32; decade(e)"],
                "outputs": [{"output_type": "stream", "text": ["3.6e-07\n"]}],
            },
        ]
    }
    assert float32_roundoff_prints(nb) == ["cell 0: float32 cell prints 0.0e+00", "cell 1: prints decade(...)"]


# A proposition's block, or the prose after it up to the next proposition, names the test that
# checks it with a marker, {abbr}`✓ tested (tests/<folder>/test_x.py::test_name)`: the page shows
# "✓ tested" and the path on hover, out of the reader's line (CONTRIBUTING, "Independent checks").
_CLAIM = r"```\{prf:(?:proposition|theorem|lemma|corollary)\}"
_TEST_REF = r"\{abbr\}`✓ tested \((tests/(?:\w+/)*test_\w+\.py)::(\w+)\)`"
_BARE_REF = r"(?<!\()`?tests/(?:\w+/)*test_\w+\.py"


def _claims_and_tests(path):
    """``[(first line of the claim, [(file, function), ...]), ...]`` for one notebook."""
    import re

    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    starts = [m.start() for m in re.finditer(_CLAIM, text)]
    out = []
    for i, start in enumerate(starts):
        chunk = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        out.append((chunk.splitlines()[0], re.findall(_TEST_REF, chunk)))
    return out


def _test_functions(file):
    import ast

    tree = ast.parse((ROOT / file).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_proposition_names_its_test(path):
    """Each prf:proposition/theorem/lemma/corollary is followed, before the next one, by a
    reference to an existing test function in ``tests/``."""
    for claim, refs in _claims_and_tests(path):
        assert refs, f"{path.name}: {claim!r} names no test (`tests/<folder>/test_x.py::test_name`)"
        for file, fn in refs:
            assert (ROOT / file).exists(), f"{path.name}: {claim!r} names {file}, which does not exist"
            assert fn in _test_functions(file), f"{path.name}: {claim!r} names {file}::{fn}, which does not exist"


def bare_test_paths(nb: dict) -> list[str]:
    """Test paths written into a chapter's prose instead of behind a "✓ tested" marker."""
    out = []
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "markdown":
            out += [f"cell {i}: {m}" for m in re.findall(_BARE_REF, "".join(c["source"]))]
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_test_paths_sit_behind_markers(path):
    assert bare_test_paths(json.loads(path.read_text())) == []


def test_bare_path_rule_catches_a_path_in_prose():
    marker = "{abbr}`✓ tested (tests/book/test_book.py::test_toc_entries_exist)`"
    nb = {"cells": [{"cell_type": "markdown", "source": [f"Checked {marker}; see `tests/models/test_gmm.py`."]}]}
    assert bare_test_paths(nb) == ["cell 0: `tests/models/test_gmm.py"]


def test_proposition_rule_catches_a_missing_reference(tmp_path):
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": ["```{prf:proposition} A\n", "x\n", "```\n"]},
            {
                "cell_type": "markdown",
                "source": ["```{prf:proof}\n", "{abbr}`✓ tested (tests/book/test_book.py::test_toc_entries_exist)`\n```"],
            },
            {"cell_type": "markdown", "source": ["```{prf:theorem} B\n", "y\n", "```\n"]},
        ]
    }
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    claims = _claims_and_tests(path)
    assert claims[0][1] == [("tests/book/test_book.py", "test_toc_entries_exist")]
    assert claims[1][1] == []


# The rendered code column holds about 80 characters; longer lines scroll sideways.
CODE_WIDTH = 80


def long_code_lines(nb) -> list[str]:
    """``"cell i line j: N chars"`` for every code line over :data:`CODE_WIDTH` characters."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        for j, line in enumerate("".join(cell["source"]).split("\n")):
            if len(line) > CODE_WIDTH:
                out.append(f"cell {i} line {j}: {len(line)} chars")
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_lines_fit_the_column(path):
    """Notebook code lines are at most 80 characters (``ruff format --line-length 80`` on the
    notebook, then wrap the strings and comments it leaves)."""
    assert not long_code_lines(json.loads(path.read_text())), path.name


def test_code_width_rule_catches_a_long_line():
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": ["x" * 200]},
            {"cell_type": "code", "source": ["a = 1\n", "b = '" + "y" * 80 + "'\n"]},
        ]
    }
    assert long_code_lines(nb) == ["cell 1 line 1: 86 chars"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_opens_with_prose(path):
    """A chapter opens with its first paragraph: the first cell is markdown and the setup cell
    (the first code cell: imports, flags, style) shows no input in the rendered book."""
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown", f"{path.name} opens with code"
    setup = next(c for c in cells if c["cell_type"] == "code")
    assert "hide-input" in setup.get("metadata", {}).get("tags", []), f"{path.name}: tag its setup cell hide-input"


def unlabelled_exercises(nb: dict, chapter: str) -> list[str]:
    """Problems with a chapter's exercises: each is a paragraph ``**Exercise K...`` (K = 1, 2, ...
    in order) directly after its own target ``(chNN-exercise-K)=``, so that the text, other
    chapters and readers can link it."""
    problems, k, seen = [], 0, False
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        lines = "".join(cell["source"]).split("\n")
        if any(re.match(r"#+ .*Exercises", line) for line in lines):
            seen = True
        if not seen:
            continue
        fence = False
        for j, line in enumerate(lines):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            if re.match(r"(\*\*)?\d+\.(\*\*)? ", line):
                problems.append(f"cell {i}: exercise as a bare number: {line[:40]!r}")
            m = re.match(r"\*\*Exercise (\d+)", line)
            if m:
                k += 1
                want = f"(ch{chapter}-exercise-{k})="
                if int(m.group(1)) != k:
                    problems.append(f"cell {i}: Exercise {m.group(1)} where {k} was due")
                if j == 0 or lines[j - 1] != want:
                    problems.append(f"cell {i}: Exercise {m.group(1)} lacks its target {want}")
    if seen and k == 0:
        problems.append("an Exercises section without a labelled exercise")
    return problems


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2].isdigit()], ids=lambda p: p.stem)
def test_exercises_are_labelled(path):
    assert not unlabelled_exercises(json.loads(path.read_text()), path.name[:2]), path.name


def test_exercise_rule_catches_a_list_and_a_missing_target():
    md = lambda s: {"cell_type": "markdown", "source": [s]}  # noqa: E731
    good = {"cells": [md("## 6. Exercises\n\n(ch02-exercise-1)=\n**Exercise 1.** Show it.")]}
    assert unlabelled_exercises(good, "02") == []
    listed = {"cells": [md("## Exercises\n\n1. Show it.\n2. And this.")]}
    assert len(unlabelled_exercises(listed, "02")) == 3
    bare = {"cells": [md("## Exercises\n\n**Exercise 1.** Show it.")]}
    assert unlabelled_exercises(bare, "02") == ["cell 0: Exercise 1 lacks its target (ch02-exercise-1)="]


def uncached_setup(nb: dict) -> list[str]:
    """What is wrong with a chapter's setup cell as to the compilation cache (``lse_energy.compile_cache``).

    The first code cell calls ``compile_cache.enable()`` after enabling float64 and before any
    computation, so that a reader's restarted kernel loads its compiled programs from disk.
    """
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if not cells:
        return ["no code cell"]
    src = "".join(cells[0]["source"])
    if "compile_cache.enable()" not in src:
        return ["the setup cell does not call compile_cache.enable()"]
    out = []
    if src.index("compile_cache.enable()") < src.find('jax.config.update("jax_enable_x64", True)'):
        out.append("compile_cache.enable() comes before float64 is enabled")
    first_use = re.search(r"\bplotting\.use\(\)|\bjnp\.|\bjax\.random\.", src)
    if first_use and first_use.start() < src.index("compile_cache.enable()"):
        out.append("a computation comes before compile_cache.enable()")
    return out


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2].isdigit()], ids=lambda p: p.stem)
def test_setup_cell_enables_the_compilation_cache(path):
    assert not uncached_setup(json.loads(path.read_text())), f"{path.name}: {uncached_setup(json.loads(path.read_text()))}"


def test_cache_rule_catches_a_missing_and_a_late_call():
    def nb(src):
        return {"cells": [{"cell_type": "code", "source": [src]}]}

    ok = 'import jax\njax.config.update("jax_enable_x64", True)\ncompile_cache.enable()\nplotting.use()\n'
    assert uncached_setup(nb(ok)) == []
    assert uncached_setup(nb(ok.replace("compile_cache.enable()\n", ""))) == [
        "the setup cell does not call compile_cache.enable()"
    ]
    late = 'import jax\njax.config.update("jax_enable_x64", True)\nplotting.use()\ncompile_cache.enable()\n'
    assert uncached_setup(nb(late)) == ["a computation comes before compile_cache.enable()"]


# A hidden verification cell's one-line "checked: ..." output is for nbval, not for the page: the
# prose states the result, and the rendered book removes the output (CONTRIBUTING, Notebooks).
_CHECKED = re.compile(r"(?m)^\s*checked\b", re.I)


def visible_check_outputs(nb: dict) -> list[int]:
    """Indices of hidden-input cells whose printed "checked: ..." output the page would still show."""
    out = []
    for i, c in enumerate(nb["cells"]):
        tags = c.get("metadata", {}).get("tags", [])
        if c["cell_type"] != "code" or not ({"hide-input", "remove-input"} & set(tags)) or "remove-output" in tags:
            continue
        outputs = c.get("outputs", [])
        if not outputs or any(o["output_type"] != "stream" for o in outputs):
            continue
        if _CHECKED.search("".join("".join(o.get("text", "")) for o in outputs)):
            out.append(i)
    return out


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2].isdigit()], ids=lambda p: p.stem)
def test_check_outputs_stay_off_the_page(path):
    found = visible_check_outputs(json.loads(path.read_text()))
    assert not found, f"{path.name}: cells {found} show a 'checked' output; tag them remove-output"


def test_check_output_rule_catches_a_shown_check():
    def cell(tags, text):
        return {"cell_type": "code", "metadata": {"tags": tags}, "outputs": [{"output_type": "stream", "text": [text]}]}

    nb = {
        "cells": [
            cell(["hide-input"], "checked: E = -ln 2\n"),
            cell(["hide-input", "remove-output"], "checked: E = -ln 2\n"),
            cell([], "checked: shown on purpose\n"),
            cell(["hide-input"], "mean 0.31 [0.2, 0.4]\n"),
        ]
    }
    assert visible_check_outputs(nb) == [0]
