"""The project as a package: pyproject.toml and the requirements files declare the same dependencies
with the same ranges, what is installed (what CI installs) lies in those ranges, the console script is
`python -m core`, and no module edits sys.path (tests get the root from pytest's `pythonpath`)."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import core
from tests.support import unavailable

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
NAME = canonicalize_name(PROJECT["name"])


def key(requirement: Requirement) -> tuple[str, str, str]:
    """Name, range and marker, in a form where `a>=1,<2` and `a<2, >=1` are equal."""
    specifier = ",".join(sorted(str(s) for s in requirement.specifier))
    return canonicalize_name(requirement.name), specifier, str(requirement.marker or "")


def from_requirements_file(name: str) -> set[tuple[str, str, str]]:
    """Every requirement of a requirements file, `-r` includes followed."""
    found = set()
    for raw in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        if line.startswith("-r"):
            found |= from_requirements_file(line[2:].strip())
        else:
            found.add(key(Requirement(line)))
    return found


def from_pyproject(extra: str | None) -> set[tuple[str, str, str]]:
    """The base dependencies plus an extra's, the project's own extras (`name[other]`) followed."""
    found = {key(Requirement(line)) for line in PROJECT["dependencies"]}
    for line in PROJECT["optional-dependencies"].get(extra, []) if extra else []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == NAME:
            for other in requirement.extras:
                found |= from_pyproject(other)
        else:
            found.add(key(requirement))
    return found


def test_the_parsers_read_what_the_files_say():
    base = from_requirements_file("requirements.txt")
    assert ("torch", "<2.15,>=2.4", "") in base
    assert any(name == "streamlit" and "<" in spec for name, spec, _ in base)
    test = from_pyproject("test")
    assert {"pyro-ppl", "pytest", "pytest-timeout", "ruff", "import-linter"} <= {name for name, _, _ in test}
    assert base < test  # the test extra brings the base dependencies and the reference extra's


def test_requirements_files_and_pyproject_declare_the_same_dependencies_and_ranges():
    assert from_requirements_file("requirements.txt") == from_pyproject(None)
    extras = set(PROJECT["optional-dependencies"])
    files = {path.name for path in ROOT.glob("requirements-*.txt")}
    assert files == {f"requirements-{extra}.txt" for extra in extras}, "one requirements file per extra"
    for extra in sorted(extras):
        assert from_requirements_file(f"requirements-{extra}.txt") == from_pyproject(extra), extra


def test_streamlit_is_bounded_above_while_the_app_uses_its_private_hooks():
    (streamlit,) = [Requirement(line) for line in PROJECT["dependencies"] if line.startswith("streamlit")]
    upper = [s for s in streamlit.specifier if s.operator in ("<", "<=", "==", "~=")]
    assert upper, "streamlit needs an upper bound: dashboard/ uses private Streamlit hooks"


def test_what_is_installed_lies_in_the_declared_ranges():
    """CI installs the test extra (with the base dependencies): each installed version must satisfy
    the range declared for it, so the ranges are ones that were actually tested."""
    outside, missing = [], []
    for name, spec, marker in sorted(from_pyproject("test")):
        if marker and not Requirement(f"x; {marker}").marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if not Requirement(f"{name}{spec}").specifier.contains(Version(installed), prereleases=True):
            outside.append(f"{name} {installed} not in {spec}")
    assert not outside, outside
    if missing:
        unavailable(f"not installed: {missing} (pip install -e '.[test]')")


def test_the_version_is_declared_once_in_each_place_and_they_agree():
    assert PROJECT["version"] == core.__version__


def test_the_console_script_is_python_m_core():
    assert PROJECT["scripts"] == {"sparse-bnn": "core.cli:main"}
    tree = ast.parse((ROOT / "core" / "__main__.py").read_text(encoding="utf-8"))
    imports = [
        (node.module, [alias.name for alias in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    ]
    assert ("core.cli", ["main"]) in imports


@pytest.mark.slow  # 5 s: a new interpreter imports the command line
def test_the_installed_console_script_prints_the_commands():
    """After `pip install -e .` (CI): `sparse-bnn --help` runs this checkout's command line."""
    try:
        distribution = importlib.metadata.distribution(PROJECT["name"])
    except importlib.metadata.PackageNotFoundError:
        unavailable("the project is not installed (pip install -e '.[test]')")
    scripts = [entry for entry in distribution.entry_points if entry.group == "console_scripts"]
    assert [(entry.name, entry.value) for entry in scripts] == [("sparse-bnn", "core.cli:main")]
    script = Path(sys.executable).parent / "sparse-bnn"
    if not script.exists():
        unavailable(f"{script} not found beside {sys.executable}")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    from core.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert all(command in done.stdout for command in commands)
    assert done.stdout.startswith("usage: sparse-bnn "), done.stdout[:80]  # the name the user typed


def setting_sys_path(tree: ast.AST) -> list[int]:
    """Lines that change sys.path (insert, append, extend, assignment, +=)."""

    def is_sys_path(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )

    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and is_sys_path(node.func.value)
            and node.func.attr in {"insert", "append", "extend"}
        ):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)) for t in targets):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_sys_path_finder_finds_each_form():
    source = "import sys\nsys.path.insert(0, 'a')\nsys.path.append('b')\nsys.path[:0] = ['c']\nsys.path += ['d']\n"
    assert setting_sys_path(ast.parse(source)) == [2, 3, 4, 5]
    assert setting_sys_path(ast.parse("import sys\nprint(sys.path)\n")) == []


@pytest.mark.parametrize("folder", ["core", "dashboard", "benchmarks", "scripts", "tests"])
def test_no_module_edits_sys_path(folder):
    offenders = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        lines = setting_sys_path(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            offenders[str(path.relative_to(ROOT))] = lines
    assert not offenders, f"import through the package (pip install -e . / pytest's pythonpath): {offenders}"
