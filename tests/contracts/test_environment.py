"""pyproject.toml, the lock (requirements/lock.txt) and environment.yml (Binder) must agree.

pyproject.toml states the ranges the package works with; the lock holds the one version of every
package that the book and the tests are run with (`nox -s lock` writes it, and environment.yml
from it); Binder installs environment.yml. ``problems`` is the agreement check, and the controls
below show that it fails on a deliberately mismatched copy.
"""

import importlib.util
import pathlib
import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("locktools", ROOT / "requirements" / "locktools.py")
locktools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(locktools)


def _texts():
    return {name: (ROOT / name).read_text() for name in ("pyproject.toml", "requirements/lock.txt", "environment.yml")}


def _pyproject_requirements(pyproject_text):
    project = tomllib.loads(pyproject_text)["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs.extend(Requirement(r) for r in extra)
    return reqs


def _environment_pins(environment_text):
    env = yaml.safe_load(environment_text)
    pip = [d for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, "environment.yml must have exactly one pip: section"
    return locktools.parse_lock("\n".join(pip[0]["pip"]))


def problems(texts) -> list[str]:
    """Every disagreement between pyproject.toml, the lock and environment.yml (empty when they agree)."""
    out = []
    pins = locktools.parse_lock(texts["requirements/lock.txt"])
    locked = {}
    for pin in pins:
        if pin.name in locked:
            out.append(f"lock: {pin.name} appears twice (a per-Python or per-platform fork)")
        locked[pin.name] = pin
    for req in _pyproject_requirements(texts["pyproject.toml"]):
        name = locktools.normalise(req.name)
        if name not in locked:
            out.append(f"lock: {name} (pyproject.toml) is not locked")
        elif not req.specifier.contains(Version(locked[name].version), prereleases=True):
            out.append(f"lock: {name}=={locked[name].version} is outside pyproject.toml's {req}")
    env = {p.name: p for p in _environment_pins(texts["environment.yml"])}
    for name in sorted(set(locked) | set(env)):
        a, b = locked.get(name), env.get(name)
        if a is None or b is None or (a.version, a.marker) != (b.version, b.marker):
            out.append(
                f"environment.yml: {name} is {b.line if b else 'missing'}, the lock has {a.line if a else 'nothing'}"
            )
    if texts["environment.yml"] != locktools.render_environment(texts["requirements/lock.txt"]):
        out.append("environment.yml is not what `nox -s lock` generates from the lock")
    return out


def test_pyproject_lock_and_environment_agree():
    assert problems(_texts()) == []


@pytest.mark.parametrize(
    "file, old, new, expected",
    [
        # a pin outside pyproject's range (jax>=0.4.30), in the lock and in environment.yml alike
        ("both", "jax==", "jax==0.4.1 #", "jax==0.4.1 is outside pyproject.toml's jax>=0.4.30"),
        # environment.yml pins another version than the lock
        ("environment.yml", "numpy==", "numpy==1.26.0 #", "environment.yml: numpy is numpy==1.26.0"),
        # a package pyproject needs that the lock lacks
        ("pyproject.toml", '"numpy>=1.26",', '"numpy>=1.26",\n    "somepackage>=1",', "somepackage"),
        # one package at two versions (a fork)
        ("both", "scipy==", "scipy==1.17.0 ; python_version < '3.12'\nscipy==", "scipy appears twice"),
    ],
)
def test_mismatched_copy_fails(tmp_path, file, old, new, expected):
    texts = _texts()
    for name in ["requirements/lock.txt", "environment.yml"] if file == "both" else [file]:
        text = texts[name]
        if name == "environment.yml":  # its pins are list items; the edit keeps them one per line
            new_text = re.sub(
                rf"(?m)^(\s+- ){re.escape(old)}", lambda m: m[1] + new.replace("\n", "\n" + m[1]), text, count=1
            )
        elif name == "pyproject.toml":
            new_text = text.replace(old, new, 1)
        else:
            new_text = re.sub(rf"(?m)^{re.escape(old)}", lambda m: new, text, count=1)
        assert new_text != text, f"the control's edit did not apply to {name}"
        texts[name] = new_text
        (tmp_path / pathlib.Path(name).name).write_text(new_text)  # the mismatched copy, for inspection
    found = problems(texts)
    assert any(expected in p for p in found), found


def test_one_version_of_jax_and_jaxlib_for_every_python():
    pins = {p.name: p for p in locktools.parse_lock(_texts()["requirements/lock.txt"])}
    assert pins["jax"].version == pins["jaxlib"].version
    assert pins["jax"].marker is None and pins["jaxlib"].marker is None


def test_lock_covers_every_extra():
    """`nox -s lock` resolves every extra of pyproject.toml (and no other)."""
    extras = set(tomllib.loads(_texts()["pyproject.toml"])["project"]["optional-dependencies"])
    noxfile = (ROOT / "noxfile.py").read_text()
    assert set(re.findall(r'"--extra",\s*"([^"]+)"', noxfile)) == extras
    assert "torch" not in {p.name for p in locktools.parse_lock(_texts()["requirements/lock.txt"])}


def test_python_version_agrees():
    project = tomllib.loads(_texts()["pyproject.toml"])["project"]
    env = yaml.safe_load(_texts()["environment.yml"])
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert pythons, "environment.yml must pin python"
    version = pythons[0].split("=")[-1]
    minimum = project["requires-python"].removeprefix(">=")
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))
    assert "--python-version" in (ROOT / "noxfile.py").read_text()


def test_postbuild_installs_only_the_package():
    """environment.yml holds every dependency at its locked version; postBuild must not move any."""
    commands = [
        line
        for line in (ROOT / "postBuild").read_text().splitlines()
        if line.strip() and not line.startswith("#") and "pip " in line
    ]
    assert commands == ["python -m pip install --no-deps -e ."]


def test_jupyter_book_pinned_below_2():
    reqs = {locktools.normalise(r.name): r for r in _pyproject_requirements(_texts()["pyproject.toml"])}
    assert "<2" in str(reqs["jupyter-book"].specifier), "jupyter-book 2.x is a different tool; pin >=1,<2"


def test_installed_differences_reports_other_versions():
    """The check `nox -s tests` runs after installing (locktools.py check) sees a wrong version."""
    pins = locktools.parse_lock("pytest==0.0.1\nnot-a-real-package==1.0\nyaml-nothing==1 ; sys_platform == 'none'\n")
    found = {name: have for name, _, have in locktools.differences(pins)}
    assert set(found) == {"pytest", "not-a-real-package"}
    assert found["not-a-real-package"] == "not installed"


def _mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(not pathlib.Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_clear_caches_releases_the_mappings_of_compiled_programs():
    """conftest's per-module ``jax.clear_caches()`` keeps a worker under ``vm.max_map_count``.

    That guard works only while clearing the caches unmaps the compiled code; this checks it
    still does on the installed jax: 60 distinct programs add mappings, and clearing gives most back.
    """
    import jax
    import jax.numpy as jnp

    jax.clear_caches()
    before = _mappings()
    for i in range(60):
        jax.jit(lambda x, i=i: jnp.cumsum(jnp.sin(x)) * i)(jnp.ones(i + 1)).block_until_ready()
    grown = _mappings()
    jax.clear_caches()
    after = _mappings()
    assert grown - before >= 60, (before, grown)
    assert after - before < (grown - before) / 3, (before, grown, after)
