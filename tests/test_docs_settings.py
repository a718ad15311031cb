"""docs/classroom.md's settings table is the declarations' own (core.settings), and every BNN_*
variable the docs or the code name is declared or listed as read elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

from scripts import settings_table

ROOT = Path(__file__).resolve().parents[1]

# Read by the command line and the server before any setting module loads (core/data, core/runs/store).
READ_ELSEWHERE = {"BNN_DATA_DIR", "BNN_CACHE_DIR", "BNN_CACHE_MAX_MB", "BNN_OFFLINE", "BNN_RERUN_LOG",
                  "BNN_SCREENSHOT_DIR"}


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
