"""A user table's default length of training: the step budget of every dataset, but at most
TABLE_ROW_PASSES rows through the network (a large table trains in minutes, not many); other
datasets keep their defaults (and their runs their ids)."""

from __future__ import annotations

import numpy as np

from core.runs import RunConfig
from core.runs.user_data import TABLE_ROW_PASSES, default_epochs
from core.train import default_epochs as step_default


def test_the_table_budget_caps_rows_times_epochs():
    for n in (40, 64, 200, 1_000, 10_000, 40_000, 400_000):
        epochs = default_epochs(n, 100)
        assert 1 <= epochs <= step_default(n, 100)
        assert n * (epochs - 1) < TABLE_ROW_PASSES  # the least epochs reaching the budget, or fewer
    assert default_epochs(40_000, 100) == 3 and step_default(40_000, 100) == 8
    assert default_epochs(400_000, 100) == 1


def test_a_table_run_gets_it_and_other_runs_keep_their_defaults(isolated_data_env, tmp_path):
    rng = np.random.default_rng(0)
    rows = ["a,b,y"] + [f"{a:.3f},{b:.3f},{int(a > b)}" for a, b in rng.normal(size=(3000, 2))]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    table = RunConfig.from_dict({"data": str(path), "target": "y"})
    n_train = 2400  # the 80/20 split of 3000 rows
    assert table.train.epochs == default_epochs(n_train, 100) == 42 < step_default(n_train, 100)
    explicit = RunConfig.from_dict({"data": str(path), "target": "y", "train": {"epochs": 7}})
    assert explicit.train.epochs == 7
    from core.data.registry import dataset_info

    moons = RunConfig(dataset="two-moons")
    assert moons.train.epochs == step_default(dataset_info("two-moons").n_train, 100)
