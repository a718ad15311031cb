"""The sparsity frontier of RESULTS.md (benchmarks/pareto.py): every published point and every point
of the benchmark result files is on the table and in the figure, each family's frontier is the
Pareto set, and `--only pareto` replaces that section alone."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks.pareto import PUBLISHED, Point, cached_points, frontier, pareto_section, splice


def write_results(folder):
    (folder / "time_to_quality.json").write_text(
        json.dumps(
            [
                {
                    "preset": "fast-mnist",
                    "seed": 0,
                    "config": {"dataset": "mnist", "method": "lbbnn"},
                    "rows": [
                        {"epoch": 1, "mpm_mean_accuracy": 0.5, "density": 0.5, "train_seconds": 1.0},
                        {"epoch": 20, "mpm_mean_accuracy": 0.9813, "density": 0.0783, "train_seconds": 354.2},
                    ],
                },
                {
                    "preset": "fast-fmnist",
                    "seed": 1,
                    "config": {"dataset": "fashion-mnist", "method": "lbbnn"},
                    "rows": [{"epoch": 21, "mpm_mean_accuracy": 0.8962, "density": 0.1084, "train_seconds": 223.0}],
                },
            ]
        )
    )
    (folder / "lenet.json").write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "dataset": "mnist",
                        "method": "sparse-vd",
                        "start": "scratch",
                        "train_seconds": 892.7,
                        "result": {"pruned": 0.9825, "density": 0.0492},
                    }
                ]
            }
        )
    )
    (folder / "elbo_solutions.json").write_text(
        json.dumps(
            {
                "preset": "fast-mnist",
                "recipe": {"accuracy": 0.9818, "density": 0.0695},
                "trajectory": [{"epoch": 20, "accuracy": 0.9647, "density": 0.0063}],
            }
        )
    )
    (folder / "kl_weight_sweep.json").write_text(
        json.dumps(
            [
                {
                    "preset": "fast-mnist",
                    "kl_weight": 0.1,
                    "rows": [{"epoch": 15, "mpm_mean_accuracy": 0.9761, "density": 0.0419, "train_seconds": 653.6}],
                }
            ]
        )
    )
    return {(0.9813, 0.0783), (0.8962, 0.1084), (0.9825, 0.0492), (0.9818, 0.0695), (0.9647, 0.0063), (0.9761, 0.0419)}


def table_rows(section: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| dataset")
    ]


def test_every_published_and_every_cached_point_is_on_the_table_and_the_figure(tmp_path):
    expected = write_results(tmp_path)
    found = {(p.accuracy, p.density) for p in cached_points(tmp_path)}
    assert found == expected  # the last row of each run, nothing else
    figure = tmp_path / "pareto.png"
    section = pareto_section(folder=tmp_path, figure=figure)
    rows = {(float(r[2]), float(r[3])) for r in table_rows(section)}
    for accuracy, density in expected | {(p.accuracy, p.density) for p in PUBLISHED}:
        assert any(abs(a - accuracy) < 5e-5 and abs(d - density) < 5e-6 for a, d in rows), (accuracy, density)
    assert len(table_rows(section)) == len(expected) + len(PUBLISHED)
    for p in PUBLISHED:
        assert p.source in section
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "results/pareto.png" in section
    # the training seconds the files record are on the table
    assert any(r[4] == "354" for r in table_rows(section)) and any(r[4] == "893" for r in table_rows(section))


def test_the_published_points_are_the_papers_numbers():
    by_source = {
        p.source.split(",")[0] + (" LeNet-5" if "LeNet-5" in p.source else ""): (p.accuracy, p.density)
        for p in PUBLISHED
    }
    assert by_source["Hubin & Storvik 2024"] == (0.981, 0.079)
    assert by_source["Molchanov et al. 2017"] == (0.9808, 0.0147)
    assert by_source["Molchanov et al. 2017 LeNet-5"] == (0.9925, 0.0036)
    assert by_source["Louizos et al. 2017 LeNet-5"] == (0.990, 0.0064)
    assert by_source["Hubin"] == (0.967, 0.00067)


def test_the_frontier_is_each_familys_pareto_set():
    points = [
        Point("mnist", "a", 0.98, 0.1, "1"),
        Point("mnist", "a", 0.97, 0.01, "2"),
        Point("mnist", "a", 0.96, 0.05, "3"),  # dominated by 2: less accurate, denser
        Point("mnist", "a", 0.98, 0.2, "4"),  # dominated by 1: as accurate, denser
        Point("mnist", "b", 0.90, 0.5, "5"),  # another family: its own frontier
        Point("fashion-mnist", "a", 0.5, 0.9, "6"),
    ]
    assert {p.source for p in frontier(points)} == {"1", "2", "5", "6"}


def test_store_runs_of_the_fast_grid_are_points_too(tmp_path):
    write_results(tmp_path)
    run = SimpleNamespace(
        run_id="abc", metrics={"MED-MEA R=1 accuracy": 0.9842, "density": 0.163}, info={"seconds": 12.5}
    )
    section = pareto_section(
        store=object(), setups={"mnist": {"bnn": "config"}}, find_runs=lambda s, c: [run], folder=tmp_path, figure=None
    )
    row = next(r for r in table_rows(section) if r[1] == "bnn")
    assert row[:5] == ["mnist", "bnn", "0.9842", "0.16300", "12"] and "run abc" in row[6]


def test_only_pareto_replaces_that_section_and_keeps_the_rest():
    page = "# Results\n\n## A\n\ntext a\n\n## UCI regression\n\nuci\n"
    once = splice(page, "## The sparsity frontier: x\n\nold\n")
    assert once.index("## A") < once.index("## The sparsity frontier") < once.index("## UCI regression")
    twice = splice(once, "## The sparsity frontier: x\n\nnew\n")
    assert "old" not in twice and "new" in twice and twice.count("## The sparsity frontier") == 1
    assert "text a" in twice and twice.rstrip().endswith("uci")


@pytest.mark.parametrize("name", ["time_to_quality.json", "lenet.json"])
def test_a_missing_result_file_adds_no_points(tmp_path, name):
    write_results(tmp_path)
    before = len(cached_points(tmp_path))
    (tmp_path / name).unlink()
    assert len(cached_points(tmp_path)) < before
