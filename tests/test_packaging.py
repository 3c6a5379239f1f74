"""Installing the project claims one import name, ``spectr_gbv``, and nothing else.

The card's folders stay at the top of the repository (reference/, oracle/, proofs_check/,
gpu_backend/, cli/) and pyproject.toml maps them under ``spectr_gbv``: a package that another
project calls ``oracle`` or ``reference`` can be installed beside ours.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"spectr_gbv": "spectr_gbv", "spectr_gbv.reference": "reference", "spectr_gbv.oracle": "oracle",
           "spectr_gbv.proofs_check": "proofs_check", "spectr_gbv.gpu_backend": "gpu_backend",
           "spectr_gbv.certify": "certify", "spectr_gbv.cli": "cli"}
GENERIC = ("reference", "oracle", "proofs_check", "gpu_backend", "certify", "cli")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_package_dir_maps_the_card_folders_under_one_name():
    st = _pyproject()["tool"]["setuptools"]
    assert st["package-dir"] == FOLDERS
    packages = set(st["packages"])
    assert all(p == "spectr_gbv" or p.startswith("spectr_gbv.") for p in packages)
    # every folder with an __init__.py is listed (a subpackage left out would be missing from a wheel)
    found = set()
    for name, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found == packages


def test_entry_points_use_the_one_name():
    project = _pyproject()["project"]
    assert project["scripts"] == {"spectr-gbv": "spectr_gbv.cli.main:main"}
    assert project["entry-points"]["pytest11"] == {"spectr_gbv": "spectr_gbv.oracle.pytest_plugin",
                                                   "spectr_gbv_endpoint": "spectr_gbv.certify.endpoint.pytest_plugin"}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_no_module_imports_a_generic_top_level_name():
    """Code, tests and benchmarks import ``spectr_gbv.X``, never ``X`` (which would be a second
    copy of the module, or nothing at all in an installed wheel)."""
    bad = []
    for folder in (*FOLDERS.values(), "tests", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for line, name in _imported_modules(path):
                if name.split(".")[0] in GENERIC:
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_a_built_wheel_holds_only_spectr_gbv(tmp_path):
    """Build the wheel and list its top-level names: ``spectr_gbv`` and its dist-info only."""
    pytest.importorskip("setuptools")
    import shutil
    built_before = (ROOT / "build").exists()
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    if not built_before:  # pip builds in the tree: leave it as it was
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    if proc.returncode != 0:
        pytest.fail(proc.stderr[-2000:])
    import zipfile
    (wheel,) = tmp_path.glob("*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"spectr_gbv"}
    names = zipfile.ZipFile(wheel).namelist()
    assert "spectr_gbv/reference/contract.py" in names
    assert "spectr_gbv/gpu_backend/engine/speculative.py" in names
    assert "spectr_gbv/certify/endpoint/run.py" in names
    assert "spectr_gbv/proofs_check/VERDICTS.md" in names


# The light install (scripts/light_check.sh runs it in a bare environment): the base dependencies
# are what `spectr-gbv exact`, the oracle's harness, the pytest plugin and `certify endpoint` need,
# and msgspec (`certify log`'s JSON decoder).
LIGHT = {"numpy", "scipy", "tqdm", "msgspec"}


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_base_dependencies_are_the_light_install():
    packaging_requirements = pytest.importorskip("packaging.requirements")
    project = _pyproject()["project"]
    base = {_canonical(packaging_requirements.Requirement(r).name) for r in project["dependencies"]}
    assert base == LIGHT
    extras = project["optional-dependencies"]
    for extra in ("oracle", "torch"):  # the base ones are not repeated in an extra
        names = {_canonical(packaging_requirements.Requirement(r).name) for r in extras[extra]}
        assert not names & LIGHT, (extra, names & LIGHT)


def test_constraints_pin_every_requirement_within_its_range():
    """constraints.txt (the versions CI ran with) pins every base and extra requirement, at a
    version inside pyproject.toml's range."""
    packaging_requirements = pytest.importorskip("packaging.requirements")
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[_canonical(name)] = version
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra, items in project["optional-dependencies"].items():
        reqs += [r for r in items if not r.startswith("spectr-gbv[")]
    bad = []
    for text in reqs:
        req = packaging_requirements.Requirement(text)
        pinned = pins.get(_canonical(req.name))
        if pinned is None or not req.specifier.contains(pinned, prereleases=True):
            bad.append(f"{text}: constraints.txt has {pinned}")
    assert not bad, "\n".join(bad)
