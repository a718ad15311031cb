"""Runs shipped with the app (core/runs/bundled.py): installed into the user's store verified and
whole, a damaged one refused, and every shipped lesson's run bundled (so a lesson starts at once)."""

from __future__ import annotations

import numpy as np
import pytest

from core.runs import RunConfig, load_run, train_run
from core.runs.bundled import BUNDLE_DIR, bundled_run_ids, install_bundled_runs
from core.runs.store import RunStore


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    run = train_run(RunConfig(dataset="two-moons", hidden=(6,), train={"epochs": 2}), cache_dir=folder)
    return folder, run.run_id


def test_a_bundled_run_installs_verified_and_predicts_the_same(bundle, tmp_path):
    folder, run_id = bundle
    installed, problems = install_bundled_runs(tmp_path, folder=folder)
    assert installed == [run_id] and problems == []
    original, copy = load_run(run_id, cache_dir=folder), load_run(run_id, cache_dir=tmp_path)
    x = original.dataset().x_test
    np.testing.assert_array_equal(copy.predict(x, mode="bma", samples=4).probs,
                                  original.predict(x, mode="bma", samples=4).probs)
    assert copy.snapshots() is not None and copy.snapshots().n_epochs == original.snapshots().n_epochs
    # a second start installs nothing and changes nothing
    assert install_bundled_runs(tmp_path, folder=folder) == ([], [])


def test_a_damaged_bundled_run_is_refused_not_copied(bundle, tmp_path):
    folder, run_id = bundle
    damaged = tmp_path / "damaged"
    import shutil

    shutil.copytree(folder, damaged)
    weights = next((damaged / "runs" / run_id).glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    target = tmp_path / "store"
    installed, problems = install_bundled_runs(target, folder=damaged)
    assert installed == [] and len(problems) == 1 and run_id in problems[0] and "\n" not in problems[0]
    assert not RunStore(target).exists(run_id)


def test_every_run_of_the_bundled_lessons_is_bundled_without_snapshots():
    """A class opening first-steps or prior-sparsity waits for no training: each of their runs is in the
    bundle (without per-epoch snapshots, which would take assets/ past its budget)."""
    from core.lessons import load_lesson
    from scripts.bundle_lesson_runs import BUNDLED_LESSONS

    assert set(BUNDLED_LESSONS) == {"first-steps", "prior-sparsity"}
    bundled = set(bundled_run_ids())
    assert all(RunStore(BUNDLE_DIR).read_snapshots(run_id) is None for run_id in bundled)
    for name in BUNDLED_LESSONS:
        for config in load_lesson(name).run_configs():
            run_id = config.run_id(config.load_dataset().fingerprint)
            assert run_id in bundled, (f"lesson {name}: {config.method} on {config.dataset} ({run_id}) is not "
                                       "bundled; run `python -m scripts.bundle_lesson_runs`")


@pytest.mark.slow
def test_a_fresh_server_opens_the_first_lesson_on_its_bundled_run_without_training(tmp_path, monkeypatch):
    """?lesson=first-steps on an empty store: the shipped runs are placed in the store at the first start
    and the lesson's first step shows its run; nothing is trained."""
    from streamlit.testing.v1 import AppTest

    from core.lessons import load_lesson
    from tests.support import clear_dashboard_caches
    from tests.test_dashboard_app import APP, TIMEOUT

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BNN_LESSON_RUNS", "1")
    clear_dashboard_caches()
    expected = load_lesson("first-steps").step(1).run_id()
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["lesson"] = "first-steps"
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert set(bundled_run_ids()) <= set(RunStore(tmp_path).run_ids())
    assert at.session_state["selected_run_id"] == expected
    assert not any("not trained yet" in str(i.value) for i in at.sidebar.info)
    assert "training_worker" not in at.session_state or at.session_state["training_worker"] is None  # no training
    clear_dashboard_caches()
