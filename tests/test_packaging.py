"""What the wheel holds equals the tree: every directory of Python files is a package that setup.py
finds under its installed name, and every file the package reads at run time (profiles, the model
catalog, the workload presets) is package data. `.ci/run` builds the wheel and checks the installed
copy the same way (scripts/check_install.py); these catch the drift before a wheel is built."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
# Source directory -> installed package name (pyproject/setup.py: probes/ and kernels/ install only
# under the kttune namespace).
INSTALLED_AS = {
    "kttune": "kttune",
    "probes": "kttune.probes",
    "kernels": "kttune.kernels",
    "profiles": "kttune.profiles",
}


def _skip(p: Path) -> bool:
    return any(part == "__pycache__" or part.endswith(".egg-info") for part in p.parts)


def _tree_packages() -> set[str]:
    """Every directory under the installed roots that holds Python files, by its installed name."""
    out = set()
    for src, name in INSTALLED_AS.items():
        for py in (ROOT / src).rglob("*.py"):
            rel = py.parent.relative_to(ROOT / src)
            if not _skip(rel):
                out.add(".".join((name, *rel.parts)))
    return out


def _setup_packages() -> list[str]:
    return runpy.run_path(str(ROOT / "setup.py"), run_name="kttune_setup")["packages"]()


def test_setup_finds_every_package_of_the_tree():
    found = _setup_packages()
    assert len(found) == len(set(found))
    # A directory of .py files without __init__.py would be missed by find_packages: it shows here.
    assert set(found) == _tree_packages()
    assert {"kttune.sim", "kttune.runner", "kttune.calibration"} <= set(found)


def test_every_package_has_an_init():
    for src, name in INSTALLED_AS.items():
        for py in (ROOT / src).rglob("*.py"):
            if not _skip(py.relative_to(ROOT)):
                assert (py.parent / "__init__.py").is_file(), (
                    f"{py.parent} has no __init__.py: it would not be installed"
                )


def test_package_data_covers_every_file_read_at_run_time():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"]["package-data"]
    src_of = {name: src for src, name in INSTALLED_AS.items()}
    covered = {f.resolve() for pkg, globs in data.items() for g in globs for f in (ROOT / src_of[pkg]).glob(g)}
    for src in INSTALLED_AS:
        for f in (ROOT / src).rglob("*"):
            if f.is_file() and f.suffix not in (".py", ".pyc") and not _skip(f.relative_to(ROOT)):
                assert f.resolve() in covered, f"{f.relative_to(ROOT)} is not package data: a wheel would lack it"
    assert any(f.parent.name == "models" for f in covered) and any(f.parent.name == "workloads" for f in covered)


def test_the_core_dependencies_leave_torch_to_the_measure_extra():
    """docs/install.md: `pip install kttune` runs model, search and emit; measuring needs kttune[measure]."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = [d.split(">")[0].split("=")[0].split(";")[0].strip() for d in project["dependencies"]]
    assert "torch" not in core and "matplotlib" not in core
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["measure"])
