"""The suite's own rules (developer guide): a test whose data is missing fails under CI=true instead
of skipping, and no test skips on a missing import of a declared dependency."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import full_data_dir, require_module

ROOT = Path(__file__).resolve().parents[1]
IMPORT_NAMES = {"pyro-ppl": "pyro"}  # distribution name -> the module a test imports


def test_missing_full_data_skips_locally_and_fails_under_ci(tmp_path, monkeypatch):
    monkeypatch.delenv("BNN_DATA_DIR", raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="BNN_DATA_DIR"):
        full_data_dir()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        full_data_dir()
    monkeypatch.setenv("BNN_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(pytest.fail.Exception, match="nowhere.*CI=true"):
        full_data_dir()
    monkeypatch.setenv("BNN_DATA_DIR", str(tmp_path))
    assert full_data_dir() == tmp_path


def test_tests_using_the_data_folder_carry_the_fulldata_marker(request):
    """The conftest hook marks every test that requests data_dir (so -m 'not fulldata' drops them all)."""
    items = [item for item in request.session.items if "data_dir" in getattr(item, "fixturenames", ())]
    assert all(item.get_closest_marker("fulldata") is not None for item in items)


def _declared(*files: str) -> set[str]:
    names = set()
    for name in files:
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not line.startswith("-r"):
                distribution = re.split(r"[<>=!~\[ ]", line, maxsplit=1)[0].lower()
                names.add(IMPORT_NAMES.get(distribution, distribution))
    return names


def test_no_importorskip_on_a_declared_dependency():
    declared = _declared("requirements.txt", "requirements-test.txt", "requirements-reference.txt")
    assert {"streamlit", "ray", "torch", "pyro"} <= declared  # the parser reads the files
    offenders = []
    for path in (ROOT / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "importorskip"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                module = str(node.args[0].value).split(".")[0].lower()
                if module in declared:
                    offenders.append(f"{path.name}: importorskip({module!r})")
    assert not offenders, offenders


def test_a_missing_module_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no_such_module_here.*pip install it"):
        require_module("no_such_module_here", "pip install it")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_here.*CI=true"):
        require_module("no_such_module_here", "pip install it")
    import json

    assert require_module("json", "never needed") is json


def _skips_in_handler(handler: ast.ExceptHandler) -> bool:
    names = {
        getattr(node.func, "attr", getattr(node.func, "id", None))
        for node in ast.walk(handler)
        if isinstance(node, ast.Call)
    }
    return bool(names & {"skip", "unavailable", "_unavailable"})


def test_no_hand_written_skip_on_a_failed_import():
    """`try: import x / except ImportError: pytest.skip(...)` is an importorskip the rule above cannot
    see, and it skips under CI=true too: tests use tests.support.require_module instead."""
    offenders = []
    for path in (ROOT / "tests").glob("*.py"):
        if path.name == "support.py":  # require_module itself
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                caught = {
                    getattr(t, "id", None)
                    for t in (node.type.elts if isinstance(node.type, ast.Tuple) else [node.type])
                }
                if caught & {"ImportError", "ModuleNotFoundError"} and _skips_in_handler(node):
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
