"""A benchmark command in the docs runs as written. `python benchmarks/NAME.py` puts benchmarks/, not the
project root, first on the path (and no module of ours edits sys.path: tests/test_packaging.py), so a
script that imports the benchmarks package is documented as `python -m benchmarks.NAME`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AS_FILE = re.compile(r"python benchmarks/(\w+)\.py")


def imports_the_package(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "benchmarks":
            return True
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "benchmarks" for alias in node.names):
            return True
    return False


def documented_files() -> list[Path]:
    return [
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "README.md",
        ROOT / "benchmarks" / "RESULTS.md",
        *sorted((ROOT / "benchmarks").glob("*.py")),
        *sorted((ROOT / "core").rglob("*.py")),
        *sorted((ROOT / "dashboard").rglob("*.py")),
    ]


def test_the_finder_knows_a_script_that_imports_the_package():
    assert imports_the_package(ROOT / "benchmarks" / "classroom_load.py")
    assert not imports_the_package(ROOT / "benchmarks" / "epoch_time.py")


def test_every_documented_file_command_runs_as_written():
    broken = {}
    for path in documented_files():
        for name in AS_FILE.findall(path.read_text(encoding="utf-8")):
            script = ROOT / "benchmarks" / f"{name}.py"
            if not script.exists() or imports_the_package(script):
                broken.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    assert not broken, f"write these as python -m benchmarks.NAME: {broken}"
