"""Runs on user tables in the pages: Compare puts only runs of one data identity on a page (two
targets of one table, or two tables, never share one) and fits its table to the page; the
Inclusion page names the input columns the pruned network still reads (core's rule, here
checked against the run's own active paths)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def table_runs(tmp_path_factory):
    from core.data import user_table
    from core.runs import RunConfig, train_run

    folder = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(1)
    lines = ["x1,x2,kind,label,amount"]
    for i in range(60):
        x1, x2 = rng.normal(size=2)
        lines.append(f"{x1:.3f},{x2:.3f},{'abc'[i % 3]},{'up' if x1 > x2 else 'down'},{2 * x1 - x2:.3f}")
    (folder / "one.csv").write_text("\n".join(lines) + "\n")
    (folder / "two.csv").write_text("\n".join(lines[:50]) + "\n")  # another table, same column names
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_CACHE_DIR", str(tmp_path_factory.mktemp("bnn-cache")))
        user_table._parsed.cache_clear()
        train = {"epochs": 2, "pretrain_epochs": 0, "posttrain_epochs": 0}
        runs = {}
        for key, (file, target, seed) in {
            "one-label": ("one.csv", "label", 0),
            "one-label-seed1": ("one.csv", "label", 1),
            "one-amount": ("one.csv", "amount", 0),
            "two-label": ("two.csv", "label", 0),
        }.items():
            config = RunConfig.from_dict(
                {"data": str(folder / file), "target": target, "hidden": [6], "train": train, "seed": seed},
            )
            runs[key] = train_run(config)
        yield runs


@pytest.fixture(autouse=True)
def fresh_caches():
    clear_dashboard_caches()
    yield
    clear_dashboard_caches()


def open_page(run_id: str, page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=180)
    at.session_state["selected_run_id"] = run_id
    at.run()
    return at.switch_page(page).run()


def identity(run) -> str:
    from core.runs.user_data import data_identity

    return data_identity(run.config.dataset, run.config.to_dict()["dataset_params"])[0]


@pytest.mark.slow
def test_compare_never_puts_two_targets_or_two_tables_on_one_page(table_runs):
    at = open_page(table_runs["one-label"].run_id, "views/compare.py")
    assert not at.exception and not at.error, [e.value for e in at.error]
    data = at.selectbox(key="compare_dataset")
    assert len(data.options) == 3  # one.csv: label; one.csv: amount; two.csv: label
    assert any("one.csv: target label" in option for option in data.options)
    assert data.value == identity(table_runs["one-label"])  # opens on the current run's data
    groups = {
        identity(table_runs["one-label"]): {table_runs["one-label"].run_id, table_runs["one-label-seed1"].run_id},
        identity(table_runs["one-amount"]): {table_runs["one-amount"].run_id},
        identity(table_runs["two-label"]): {table_runs["two-label"].run_id},
    }
    assert len(groups) == 3
    for key, expected in groups.items():
        at.selectbox(key="compare_dataset").set_value(key).run()
        assert not at.exception and not at.error, (key, [e.value for e in at.error])
        assert set(at.multiselect(key="compare_runs").value) == expected, key
    # The table of modes and the table of structure: each narrow enough to fit the page, the layers
    # in the second one.
    at.selectbox(key="compare_dataset").set_value(identity(table_runs["one-label"])).run()
    tables = [frame.value for frame in at.dataframe if "runs" in frame.value.columns]
    modes, structure = tables[-2], tables[-1]
    assert "SIM-SIM R=10" in modes.columns and len(modes.columns) == 8
    assert list(structure.columns)[0] == "runs" and "layer 1 mean inclusion_probability" in structure.columns
    assert len(structure.columns) <= 8 and not set(modes.columns[2:]) & set(structure.columns)
    assert list(modes["seeds"]) == [2]  # two seeds of one setting: one row


@pytest.mark.slow
def test_inclusion_names_the_input_columns_read(table_runs):
    from core.runs import sparsity_views as views

    run = table_runs["one-label"]
    at = open_page(run.run_id, "views/inclusion.py")
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = next(frame.value for frame in at.dataframe if "levels read" in frame.value.columns)
    assert list(shown["column"]) == ["x1", "x2", "kind", "amount"]  # 'kind' is three one-hot inputs, one row
    features = run.dataset().feature_names
    assert features == ("x1", "x2", "kind=a", "kind=b", "kind=c", "amount")
    # the page's rows are core's rule on the run's own active paths at the default threshold
    active = [np.asarray(mask) for mask in run.active_paths(None)]
    read = active[0][:, : len(features)].any(axis=0)
    assert list(shown["read"]) == [bool(read[0]), bool(read[1]), bool(read[2:5].any()), bool(read[5])]
    rows = {row["column"]: row for row in views.input_columns(run)}
    assert rows["kind"]["units"] == 3 and rows["kind"]["read_units"] == int(read[2:5].sum())
