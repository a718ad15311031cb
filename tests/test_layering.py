"""The dashboard reaches core only through dashboard/backend.py (core.errors aside), and core
never imports the dashboard. The rules for outside values (core.validate, core.limits) and the
settings declarations (core.settings) reach the pages through backend too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_dashboard_reaches_core_only_through_backend():
    leaks = {}
    for path in sorted((ROOT / "dashboard").rglob("*.py")):
        # backend.py is the door; settings.py declares the dashboard's settings with core.settings and is
        # read by backend at its import (the draw cache's bound), so it cannot go through backend itself.
        if path.name == "backend.py" or (path.name == "settings.py" and path.parent.name == "dashboard"):
            continue
        core = {m for m in imported_modules(path) if m == "core" or m.startswith("core.")}
        core -= {"core.errors"}
        if core:
            leaks[str(path.relative_to(ROOT))] = sorted(core)
    assert not leaks, f"import core through dashboard/backend.py instead: {leaks}"


def test_core_never_imports_the_dashboard():
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "core").rglob("*.py"))
        if any(m == "dashboard" or m.startswith("dashboard.") for m in imported_modules(p))
    ]
    assert not offenders


def test_core_predict_never_imports_core_runs():
    # Runs are built on predictions (core.runs.Run's verbs call core.predict), never the other way round,
    # lazily imported or not.
    offenders = {
        str(p.relative_to(ROOT)): sorted(
            m for m in imported_modules(p) if m == "core.runs" or m.startswith(("core.runs.", "core.cli"))
        )
        for p in sorted((ROOT / "core" / "predict").rglob("*.py"))
    }
    offenders = {path: modules for path, modules in offenders.items() if modules}
    assert not offenders, f"core.predict must not import core.runs or the CLI: {offenders}"
