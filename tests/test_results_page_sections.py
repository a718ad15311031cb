"""`results_page --only NAME` rewrites one file-backed section of RESULTS.md and keeps every other line."""

from __future__ import annotations

from benchmarks import results_page
from benchmarks.results_page import FILE_SECTIONS, splice_section

PAGE = "\n".join(
    [
        "# Results",
        "## A",
        "a line",
        "## Epoch time (`old command`)",
        "old table",
        "## Why the ratios move (an old subsection written as a page section)",
        "old notes",
        "## Findings of the sparsity frontier, measured",
        "old findings",
        "### sub",
        "## UCI regression: paired",
        "uci line",
        "",
    ]
)


def test_a_section_is_replaced_up_to_the_next_named_heading_and_the_rest_is_kept():
    out = splice_section(PAGE, "## Findings of the sparsity frontier", "## Findings\n\nnew\n", "## UCI regression")
    assert "old findings" not in out and "### sub" not in out and "new" in out
    assert out.split("## Findings")[0] == PAGE.split("## Findings")[0]
    assert out.endswith("## UCI regression: paired\nuci line\n")
    # splicing the same section again changes nothing
    again = splice_section(out, "## Findings", "## Findings\n\nnew\n", "## UCI regression")
    assert again == out


def test_the_last_section_runs_to_the_end_so_old_subsections_go_with_it():
    text = PAGE.replace("## UCI regression: paired\nuci line\n", "")
    out = splice_section(text, "## Epoch time", "## Epoch time (`new`)\n\nnew table\n", None)
    assert "old table" not in out and "old notes" not in out and "old findings" not in out
    assert out.endswith("## Epoch time (`new`)\n\nnew table\n")


def test_a_missing_section_goes_in_front_of_the_next_heading():
    text = PAGE.replace("## Findings of the sparsity frontier, measured\nold findings\n### sub\n", "")
    out = splice_section(text, "## Findings of the sparsity frontier", "## Findings X\n\nbody\n", "## UCI regression")
    assert out.index("## Findings X") < out.index("## UCI regression") and out.count("## Findings") == 1


def test_file_sections_demote_their_files_headings_under_the_page_heading(tmp_path, monkeypatch):
    (tmp_path / "epoch_time.md").write_text("# title\n\n| t |\n\n## notes of a day\n\ntext\n")
    (tmp_path / "findings.md").write_text("# title\n\n## islab\n\nrow\n")
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    for name in ("epoch-time", "findings"):
        heading, _body, _next = FILE_SECTIONS[name]
        section = results_page.file_section(name)
        lines = section.splitlines()
        assert lines[0] == heading
        # exactly one page-level heading: the file's own "##" headings sit one level down
        assert [line for line in lines if line.startswith("## ")] == [heading]
        assert "# title" not in lines
