"""docs/classroom.md's settings table is the declarations' own (core.settings), and every BNN_*
variable the docs or the code name is declared or listed as read elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

from scripts import settings_table

ROOT = Path(__file__).resolve().parents[1]

# Not settings of the app or the command line: the load test's log and the screenshot tool's folder.
READ_ELSEWHERE = {"BNN_RERUN_LOG", "BNN_SCREENSHOT_DIR"}


def test_the_docs_table_is_the_declarations():
    text = settings_table.DOC.read_text(encoding="utf-8")
    assert settings_table.rewritten(text) == text, "run python scripts/settings_table.py"


def test_every_variable_named_in_the_docs_is_declared_or_read_elsewhere():
    from core.settings import SETTINGS

    settings_table.table()  # imports the declaring modules
    named = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named |= set(re.findall(r"\bBNN_[A-Z_]+[A-Z]\b", path.read_text(encoding="utf-8")))
    unknown = sorted(named - set(SETTINGS) - READ_ELSEWHERE)
    assert not unknown, f"named in the docs but declared nowhere: {unknown}"


def test_a_declared_setting_refuses_a_bad_value_naming_its_variable(monkeypatch):
    import pytest

    from core.errors import InputError
    from core.settings import SETTINGS

    settings_table.table()
    for variable, setting in SETTINGS.items():
        if setting.kind not in ("whole", "real", "flag"):
            continue
        monkeypatch.setenv(variable, "not-a-value")
        with pytest.raises(InputError, match=variable):
            setting.read()
        monkeypatch.delenv(variable)
        assert setting.read() == setting.default


def test_the_location_settings_refuse_bad_values_where_they_are_read(monkeypatch, tmp_path):
    """The store's cap and offline mode are read through their settings: a bad value is refused
    naming the variable (it was once a RunStoreError for one and silently 'online' for the other)."""
    import pytest

    from core.data.locations import is_offline
    from core.errors import InputError
    from core.runs.store import RunStore

    monkeypatch.setenv("BNN_CACHE_MAX_MB", "lots")
    with pytest.raises(InputError, match="BNN_CACHE_MAX_MB"):
        RunStore(tmp_path)
    monkeypatch.setenv("BNN_CACHE_MAX_MB", "-1")
    with pytest.raises(InputError, match="BNN_CACHE_MAX_MB"):
        RunStore(tmp_path)
    monkeypatch.setenv("BNN_CACHE_MAX_MB", "2")
    assert RunStore(tmp_path).max_bytes == 2 * 1024 * 1024
    monkeypatch.setenv("BNN_OFFLINE", "perhaps")
    with pytest.raises(InputError, match="BNN_OFFLINE"):
        is_offline()
    monkeypatch.setenv("BNN_OFFLINE", "no")
    assert is_offline() is False
    monkeypatch.setenv("BNN_OFFLINE", " ON ")
    assert is_offline() is True


def test_no_bnn_variable_is_read_outside_core_settings():
    """One home: core and the dashboard read BNN_* variables only through core.settings' Setting."""
    offenders = []
    for folder in ("core", "dashboard"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if path.name == "app.py" and "RERUN_LOG" in line:
                    continue  # the load test's instrumentation, not a setting (READ_ELSEWHERE)
                if re.search(r"(environ|getenv)\b.*BNN_|(environ|getenv)\b.*_(ENV|VARIABLE)\b", line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, offenders
