"""Grids: local process pool, resuming, summary tables; Ray backend when Ray is installed."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import core.runs.grid as grid_module
from core.runs import RunStore, list_runs
from core.runs.grid import load_grid, run_grid

GRID = {
    "name": "tiny",
    "methods": ["lbbnn", "fnn"],
    "seeds": [0, 1],
    "setups": {"moons": {"dataset": "two-moons", "hidden": [8], "train": {"epochs": 1}, "device": "cpu"}},
}


@pytest.fixture
def grid_file(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(GRID))
    return path


def _csv_rows(path):
    with open(path, newline="") as handle:
        return {row["method"]: row for row in csv.DictReader(handle)}


@pytest.mark.slow  # two worker processes, each importing torch: 16 s CPU
def test_local_grid_with_two_workers_writes_medians_min_max(tmp_path, grid_file):
    lines = []
    result = run_grid(
        load_grid(str(grid_file)),
        cache_dir=tmp_path / "cache",
        backend="local",
        workers=2,
        out_dir=tmp_path / "out",
        report=lines.append,
    )
    assert not result.failed and len(result.cells) == 4
    assert "4 to train" in lines[0]
    runs = list_runs(tmp_path / "cache")
    assert len(runs) == 4 and all(run.status == "ok" for run in runs)
    rows = _csv_rows(result.csv_path)
    assert set(rows) == {"lbbnn", "fnn"}
    accuracy = next(k for k in runs[0].metrics if k.endswith("accuracy"))
    for method, row in rows.items():
        values = [run.metrics[accuracy] for run in runs if run.method == method]
        assert row["runs"] == "2"
        assert float(row[f"{accuracy} median"]) == pytest.approx(np.median(values))
        assert float(row[f"{accuracy} min"]) == pytest.approx(min(values))
        assert float(row[f"{accuracy} max"]) == pytest.approx(max(values))
    markdown = result.markdown_path.read_text()
    assert "## moons" in markdown and "| method | runs |" in markdown
    assert "| lbbnn | 2 |" in markdown and "| fnn | 2 |" in markdown


def test_resuming_trains_only_the_missing_runs(tmp_path, grid_file, monkeypatch):
    import dataclasses

    spec = dataclasses.replace(load_grid(str(grid_file)), seeds=(0,))
    cache = tmp_path / "cache"
    run_grid(spec, cache_dir=cache, workers=1, report=lambda line: None)
    store = RunStore(cache)
    removed = store.run_ids()[0]
    store.delete(removed)  # as if the grid had been interrupted before this run
    trained = []
    real = grid_module.run_cell
    monkeypatch.setattr(grid_module, "run_cell", lambda *a, **k: trained.append(a) or real(*a, **k))
    lines = []
    result = run_grid(spec, cache_dir=cache, workers=1, out_dir=tmp_path / "out", report=lines.append)
    assert len(trained) == 1 and "1 already stored, 1 to train" in lines[0]
    assert sorted(store.run_ids()) == sorted(cell.run_id for cell in result.cells)
    assert removed in store.run_ids()
    trained.clear()
    run_grid(spec, cache_dir=cache, workers=1, report=lambda line: None)
    assert trained == []


def test_grid_cli_and_bad_grids(tmp_path, grid_file, capsys):
    from core.cli import main

    assert (
        main(
            [
                "grid",
                str(grid_file),
                "--seeds",
                "0",
                "--methods",
                "fnn",
                "--cache-dir",
                str(tmp_path),
                "--out",
                str(tmp_path / "out"),
                "--json",
            ]
        )
        == 0
    )
    [cell] = json.loads(capsys.readouterr().out)
    assert cell["method"] == "fnn" and cell["seed"] == 0 and cell["error"] is None
    assert (tmp_path / "out" / "tiny.md").is_file() and (tmp_path / "out" / "tiny.csv").is_file()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**GRID, "setups": {"moons": {"dataset": "two-moons", "hidden": [0]}}}))
    assert main(["grid", str(bad), "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "setups.moons" in err and "hidden" in err
    assert main(["grid", str(grid_file), "--backend", "local", "--workers", "0", "--cache-dir", str(tmp_path)]) == 2
    assert main(["grid", str(grid_file), "--setups", "nowhere", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "its setups:" in err


def test_grid_cli_runs_only_the_named_setups(tmp_path, capsys):
    from core.cli import main

    two = tmp_path / "two.json"
    moons = GRID["setups"]["moons"]
    two.write_text(
        json.dumps(
            {**GRID, "methods": ["fnn"], "seeds": [0], "setups": {"moons": moons, "other": dict(moons, hidden=[3])}}
        )
    )
    assert (
        main(
            [
                "grid",
                str(two),
                "--setups",
                "other",
                "--cache-dir",
                str(tmp_path),
                "--out",
                str(tmp_path / "out"),
                "--json",
            ]
        )
        == 0
    )
    cells = json.loads(capsys.readouterr().out)
    assert [cell["setup"] for cell in cells] == ["other"]


@pytest.mark.slow  # starting a local Ray instance: 12 s in CI
def test_ray_backend_on_a_local_instance(tmp_path, grid_file):
    import ray  # a declared test dependency (requirements-test.txt)

    ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True)
    try:
        spec = load_grid(str(grid_file))
        result = run_grid(
            spec, cache_dir=tmp_path / "cache", backend="ray", out_dir=tmp_path / "out", report=lambda line: None
        )
    finally:
        ray.shutdown()
    assert not result.failed and len(result.cells) == 4
    assert len(list_runs(tmp_path / "cache")) == 4
    assert set(_csv_rows(result.csv_path)) == {"lbbnn", "fnn"}


def test_summary_markdown_has_one_row_per_method_and_mode_with_median_min_max():
    from core.runs import RunConfig
    from core.runs.grid import CellResult, GridResult, summary_markdown
    from core.runs.presets import GridSpec

    spec = GridSpec(name="t", setups={"s": RunConfig(dataset="two-moons")}, methods=("lbbnn",), seeds=(0, 1, 2))
    cells = [
        CellResult(
            "s",
            "lbbnn",
            seed,
            None,
            f"id{seed}",
            False,
            {"MED-MEA R=1 accuracy": acc, "SIM-SIM R=10 accuracy": acc + 0.01, "density": 0.1 * (seed + 1)},
        )
        for seed, acc in enumerate([0.90, 0.97, 0.95])
    ]
    text = summary_markdown(GridResult(spec, cells))
    assert "| lbbnn | MED-MEA R=1 | 0.950 (0.900, 0.970) |" in text
    assert "| lbbnn | SIM-SIM R=10 | 0.960 (0.910, 0.980) |" in text
    assert "| lbbnn | 3 | 0.200 (0.100, 0.300) |" in text
