"""Every dashboard page opens a run trained on a user table (classification and regression), after the
table's source file is gone: the pages reach the data through Run.dataset() like any other run's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
PAGES = ("views/inclusion.py", "views/pruning.py", "views/uncertainty.py", "views/compare.py")


@pytest.fixture(scope="module")
def table_runs(tmp_path_factory):
    from core.data import user_table
    from core.runs import RunConfig, train_run

    folder = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(1)
    lines = ["x1,x2,kind,label,amount"]
    for i in range(80):
        x1, x2 = rng.normal(size=2)
        lines.append(f"{x1:.3f},{x2:.3f},{'abc'[i % 3]},{'up' if x1 > x2 else 'down'},{2 * x1 - x2:.3f}")
    text = "\n".join(lines) + "\n"
    # one file per task: Compare groups runs by dataset name, and two targets of one table share it
    paths = {"classification": folder / "mine.csv", "regression": folder / "mine-amount.csv"}
    paths["classification"].write_text(text)
    paths["regression"].write_text(text.replace(",label,", ",label_text,"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_CACHE_DIR", str(tmp_path_factory.mktemp("bnn-cache")))
        train = {"epochs": 2, "pretrain_epochs": 0, "posttrain_epochs": 0}
        runs = {
            task: train_run(
                RunConfig.from_dict({"data": str(paths[task]), "target": target, "hidden": [6], "train": train})
            ).run_id
            for task, target in (("classification", "label"), ("regression", "amount"))
        }
        for path in paths.values():
            path.unlink()
        user_table._parsed.cache_clear()
        yield runs


@pytest.fixture(autouse=True)
def fresh_caches():
    clear_dashboard_caches()
    yield
    clear_dashboard_caches()


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_every_page_opens_a_table_run(table_runs, task):
    at = AppTest.from_file(str(APP), default_timeout=180)
    at.session_state["selected_run_id"] = table_runs[task]
    at.run()
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
    assert at.session_state["selected_run_id"] == table_runs[task]
