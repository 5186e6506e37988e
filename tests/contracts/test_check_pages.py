"""tools/check_pages.py, which `nox -s book` runs on the built pages (issue 50, points 4 and 7)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_pages", ROOT / "tools" / "check_pages.py")
check_pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_pages)


def test_clean_pages_pass(tmp_path):
    (tmp_path / "a.html").write_text("<html><body><p>fine</p></body></html>")
    assert check_pages.problems(tmp_path) == []


def test_widget_state_and_figure_text_fire(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.html").write_text('<script type="application/vnd.jupyter.widget-state+json">{}</script>')
    (tmp_path / "f.html").write_text("<pre>FIGURE TEXT CHECK FAILED:\nfigure 1: overlap</pre>")
    assert check_pages.problems(tmp_path) == [
        "f.html has a figure whose text overlaps or shows a literal \\n",
        "sub/w.html stores widget state",
    ]


def test_the_book_session_runs_it():
    assert '"tools/check_pages.py"' in (ROOT / "noxfile.py").read_text()
