"""Write the table of every declared setting into docs/classroom.md (between its settings markers).

    python scripts/settings_table.py           # rewrite the table
    python scripts/settings_table.py --check   # exit 1 when the docs' table is not the declarations'

The rows come from the declarations themselves (core.settings.SETTINGS, filled when the modules
that declare settings are imported), so the documentation cannot drift from the code.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "classroom.md"
BEGIN, END = "<!-- settings table: begin (python scripts/settings_table.py) -->", "<!-- settings table: end -->"
# The modules that declare settings (importing them registers their declarations).
DECLARING_MODULES = (
    "core.limits",
    "core.cost",
    "core.models.laplace",
    "core.models.lbbnn_flow",
    "core.dashboard_settings",
)


def table() -> str:
    for name in DECLARING_MODULES:
        importlib.import_module(name)
    from core.settings import describe

    return describe()


def rewritten(text: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table() + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the table is current")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = rewritten(text)
    if args.check:
        if new != text:
            print(f"{DOC.relative_to(ROOT)}: the settings table is out of date; run python scripts/settings_table.py")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
