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


def test_the_table_by_phase_is_regenerated_with_the_table_not_kept_as_notes(tmp_path):
    from types import SimpleNamespace

    from benchmarks.epoch_time import render_table

    args = SimpleNamespace(dataset="mnist-small", device="cpu", repeats=1, threads=1, load_at_start=0.5, steps=40)
    runs = {"plain-mlp": [{"seconds_per_epoch": 4.0, "peak_bytes": 2**20, "device": "cpu", "phases_ms": [1, 2, 3]}]}
    out = tmp_path / "epoch_time.md"
    out.write_text(render_table(args, (400, 600), ["plain-mlp"], runs) + "\nCommand: x\n\n## Why\n| a | b |\n")
    notes = written_notes(out)
    assert notes == "\nCommand: x\n\n## Why\n| a | b |\n"
    # rewritten twice, the file keeps one table by phase and one copy of the notes
    for _ in range(2):
        out.write_text(render_table(args, (400, 600), ["plain-mlp"], runs) + written_notes(out))
    text = out.read_text()
    assert text.count("CPU ms per step by phase") == 1 and text.count("## Why") == 1
