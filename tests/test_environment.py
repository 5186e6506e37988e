"""environment.yml (Binder) and pyproject.toml must list the same packages."""

import pathlib
import re
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs.extend(extra)
    return reqs


def _environment_requirements():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = [d for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, "environment.yml must have exactly one pip: section"
    return list(pip[0]["pip"])


def test_same_packages_and_constraints():
    py = {_name(r): r.replace(" ", "") for r in _pyproject_requirements()}
    env = {_name(r): r.replace(" ", "") for r in _environment_requirements()}
    assert sorted(py) == sorted(env), (
        f"only in pyproject: {sorted(set(py) - set(env))}; "
        f"only in environment.yml: {sorted(set(env) - set(py))}"
    )
    assert py == env, {k: (py[k], env[k]) for k in py if py[k] != env[k]}


def test_python_version_agrees():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert pythons, "environment.yml must pin python"
    version = pythons[0].split("=")[-1]
    minimum = project["requires-python"].removeprefix(">=")
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))


def test_jupyter_book_pinned_below_2():
    reqs = {_name(r): r for r in _pyproject_requirements()}
    assert "<2" in reqs["jupyter-book"], "jupyter-book 2.x is a different tool; pin >=1,<2"
