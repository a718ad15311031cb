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
        # backend.py is the door, with no exemption beside it: the dashboard's settings are declared in
        # core.dashboard_settings, which backend re-exports to dashboard/settings.py.
        if path.name == "backend.py" and path.parent.name == "dashboard":
            continue
        core = {m for m in imported_modules(path) if m == "core" or m.startswith("core.")}
        core -= {"core.errors"}
        if core:
            leaks[str(path.relative_to(ROOT))] = sorted(core)
    assert not leaks, f"import core through dashboard/backend.py instead: {leaks}"


def test_backend_never_imports_the_dashboard_settings():
    """backend reads the draw cache's settings at its import, and dashboard/settings.py imports backend:
    backend reaching back into dashboard.settings (even lazily) would bring the import cycle back."""
    backend = imported_modules(ROOT / "dashboard" / "backend.py")
    assert "dashboard.settings" not in backend
    assert not {m for m in imported_modules(ROOT / "dashboard" / "server_secrets.py") if m.split(".")[0] == "core"}


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
