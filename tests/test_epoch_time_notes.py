"""benchmarks/epoch_time.py rewrites its table after every family; the notes written under the table
in the results file must survive that."""

from __future__ import annotations

from benchmarks.epoch_time import written_notes


def test_the_notes_under_the_table_are_kept_and_the_old_table_is_not(tmp_path):
    out = tmp_path / "epoch_time.md"
    out.write_text(
        "# title\n\nintro\n\n| family | s |\n|---|---|\n| lbbnn | 9.9 |\n\nCommand: x\n\n## Why\n| a | b |\n"
    )
    notes = written_notes(out)
    assert notes == "\nCommand: x\n\n## Why\n| a | b |\n"
    assert "9.9" not in notes


def test_no_file_or_no_notes_gives_nothing(tmp_path):
    assert written_notes(tmp_path / "missing.md") == ""
    table_only = tmp_path / "t.md"
    table_only.write_text("# t\n\n| a |\n|---|\n| 1 |\n")
    assert written_notes(table_only) == ""
