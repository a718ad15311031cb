"""Runs shipped with the app (core/runs/bundled.py): installed into the user's store verified and
whole, a damaged one refused, a thinned history that keeps the weights, and every run of every
shipped lesson bundled (so a lesson starts at once)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.runs import RunConfig, load_run, train_run
from core.runs.bundled import BUNDLE_DIR, HISTORY_RECORDS, bundled_run_ids, copy_run, install_bundled_runs, thin_history
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
    np.testing.assert_array_equal(
        copy.predict(x, mode="bma", samples=4).probs, original.predict(x, mode="bma", samples=4).probs
    )
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


def test_thin_history_keeps_each_phase_ends_and_spaces_the_rest_evenly():
    phases = ["pretrain"] * 7 + ["train"] * 1000 + ["posttrain"] * 93
    history = [{"epoch": i, "phase": phase, "loss": float(i)} for i, phase in enumerate(phases)]
    kept = thin_history(history, 50)
    assert len(kept) == 50
    indices = [record["epoch"] for record in kept]
    assert indices == sorted(set(indices))  # in order, no record twice
    assert all(kept_record is history[kept_record["epoch"]] for kept_record in kept)  # records unchanged
    for first, last in ((0, 6), (7, 1006), (1007, 1099)):  # each phase's first and last record
        assert first in indices and last in indices
    gaps = np.diff(indices)
    assert gaps.max() <= int(np.ceil(1099 / (50 - 6))) + 1  # evenly spaced: no long stretch left out
    assert thin_history(history[:40], 50) == history[:40]  # short histories stay whole


def test_a_thinned_copy_keeps_its_weights_bit_for_bit(bundle, tmp_path):
    folder, run_id = bundle
    source = RunStore(folder)
    copy_run(source, RunStore(tmp_path), run_id, with_snapshots=False, history_records=1)
    copy = RunStore(tmp_path).read(run_id, touch=False)
    original = source.read(run_id, touch=False)
    assert copy.history == [original.history[0], original.history[-1]]  # 1 asked, both ends of the phase kept
    assert RunStore(tmp_path).read_snapshots(run_id) is None
    for name, tensor in original.state_dict.items():
        assert torch.equal(copy.state_dict[name], tensor), name
    assert copy.info == original.info and copy.metrics == original.metrics


def test_every_run_of_every_shipped_lesson_is_bundled_thin_and_installs_bit_for_bit(tmp_path):
    """A class opening any shipped lesson waits for no training: each of their runs is in the bundle
    (without per-epoch snapshots and with a thinned history: assets/ stays under its budget), installs
    verified and predicts exactly as the bundle's copy does."""
    from core.lessons import lesson_names, load_lesson
    from scripts.bundle_lesson_runs import BUNDLED_LESSONS

    assert set(BUNDLED_LESSONS) == set(lesson_names())
    bundled = set(bundled_run_ids())
    source = RunStore(BUNDLE_DIR)
    wanted = set()
    for name in lesson_names():
        for config in load_lesson(name).run_configs():
            run_id = config.run_id(config.load_dataset().fingerprint)
            assert run_id in bundled, (
                f"lesson {name}: {config.method} on {config.dataset} ({run_id}) is not "
                "bundled; run `python -m scripts.bundle_lesson_runs`"
            )
            wanted.add(run_id)
            stored = source.read(run_id, touch=False)
            assert source.read_snapshots(run_id) is None and len(stored.history) <= HISTORY_RECORDS
            assert stored.info["epochs"] >= config.train.epochs  # the epochs trained, not the records kept
    assert bundled == wanted  # nothing in the bundle that no lesson shows
    installed, problems = install_bundled_runs(tmp_path)
    assert sorted(installed) == sorted(bundled) and problems == []
    for run_id in sorted(bundled):
        original, copy = load_run(run_id, cache_dir=BUNDLE_DIR), load_run(run_id, cache_dir=tmp_path)
        x = original.dataset().x_test
        np.testing.assert_array_equal(
            copy.predict(x, mode="bma", samples=4).probs, original.predict(x, mode="bma", samples=4).probs
        )


def test_the_gaps_lessons_bundled_runs_show_what_the_lesson_says():
    """Step 1 says the mean-field band does not open in the gaps, step 2 that the Laplace band does
    (gap ratio above 1): the bundled runs' bands on the grid, as the Uncertainty page draws them."""
    from core.lessons import load_lesson
    from core.predict.metrics.regression import band_width_ratios

    lesson = load_lesson("gaps")
    ratios = {}
    for number in (1, 2):
        step = lesson.step(number)
        run = load_run(step.run_id(), cache_dir=BUNDLE_DIR)
        data = run.dataset()
        band = np.sqrt(run.predict(data.x_grid, mode=step.view["mode"], samples=step.view["R"]).epistemic_variance)
        ratios[run.config.method] = band_width_ratios(data.x_grid, data.x_train, band)["gap_ratio"]
    assert ratios["laplace"] > 1.0 and ratios["laplace"] > ratios["lbbnn"], ratios


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


def test_show_reports_the_epochs_trained_not_the_records_kept(tmp_path, capsys):
    import json

    from core.cli import main
    from core.lessons import load_lesson

    run_id = load_lesson("gaps").step(1).run_id()
    install_bundled_runs(tmp_path)
    assert len(RunStore(tmp_path).read(run_id, touch=False).history) == HISTORY_RECORDS
    assert main(["show", run_id, "--cache-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epochs"] == 3000
