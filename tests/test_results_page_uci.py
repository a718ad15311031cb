"""`results_page --only uci` rewrites RESULTS.md's UCI section from benchmarks/results/uci.json (the text
`uci_table render` writes into uci.md) and keeps every other line of the page."""

from __future__ import annotations

import json

from benchmarks import results_page, uci_table

OLD_PAGE = "\n".join(
    [
        "# Results",
        "## Findings of the sparsity frontier, measured",
        "findings line",
        results_page.UCI_HEADING,
        "",
        "old uci table",
        "### Calls by set (old)",
        "old call",
        "## Regression bands vs the NUTS reference",
        "bands line",
        "",
    ]
)


def _record(split: int, ll: float) -> dict:
    return {
        "run_id": f"bnn-{split}",
        "set": "yacht",
        "dataset": "uci-yacht",
        "family": "bnn",
        "split": split,
        "seed": 0,
        "modes": {"bma": {"log_likelihood": ll, "rmse": 1.0, "density": 1.0}},
        "density": 1.0,
        "noise_std": 0.5,
        "train_seconds": 3.0,
        "epochs": 10,
        "samples": 100,
        "evaluation": 1,
    }


def test_only_uci_replaces_the_uci_section_with_the_rendered_file_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.delenv("BNN_DATA_DIR", raising=False)
    stored = {
        "runs": [_record(0, -1.0), _record(1, -1.2), _record(2, -0.9)],
        "reference_mc_dropout": {"uci-yacht": {"log_likelihood": [-1.5, -1.6, -1.4], "rmse": [1.0, 1.0, 1.0]}},
    }
    (tmp_path / "uci.json").write_text(json.dumps(stored))
    page = tmp_path / "RESULTS.md"
    page.write_text(OLD_PAGE)
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    monkeypatch.setattr(results_page, "PAGE", page)
    assert results_page.main(["--only", "uci"]) == 0
    out = page.read_text()
    assert "old uci table" not in out and "old call" not in out
    assert out.startswith("# Results\n## Findings of the sparsity frontier, measured\nfindings line\n")
    assert out.endswith("## Regression bands vs the NUTS reference\nbands line\n")
    assert out.count(results_page.UCI_HEADING) == 1
    # the section is the rendered file, line for line; d = (0.5, 0.4, 0.5) per split: a win
    rendered = uci_table.render_markdown(results_json=tmp_path / "uci.json").rstrip("\n")
    assert rendered in out
    assert "| yacht | bnn | bma | 3 | -1.03 ± 0.09 | -1.50 ± 0.06 | +0.467 ± 0.033 | win |" in out
    # running it again changes nothing
    assert results_page.main(["--only", "uci"]) == 0
    assert page.read_text() == out


def test_only_uci_without_a_results_file_says_how_to_make_one(tmp_path, monkeypatch):
    page = tmp_path / "RESULTS.md"
    page.write_text(OLD_PAGE)
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    monkeypatch.setattr(results_page, "PAGE", page)
    assert results_page.main(["--only", "uci"]) == 0
    assert "Not run yet: `python -m benchmarks.uci_table run`." in page.read_text()
    assert "old uci table" not in page.read_text() and "bands line" in page.read_text()
