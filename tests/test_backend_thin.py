"""dashboard/backend.py is a thin layer over the run verbs: its cards, masks, modes and curve
are core's, number for number."""

from __future__ import annotations

import numpy as np
import pytest

from core.predict import PredictionMode
from core.runs import RunConfig, train_run
from dashboard import backend


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("runs")
    return (
        train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2}), cache_dir=cache),
        train_run(RunConfig(dataset="toy-cubic", hidden=(6,), train={"epochs": 3}), cache_dir=cache),
    )


def _arrays(prediction):
    names = ("probs", "probs_per_draw", "mean", "mean_per_draw", "std_per_draw", "density", "disconnected")
    return {name: np.asarray(getattr(prediction, name)) for name in names if getattr(prediction, name) is not None}


def test_cards_are_the_cli_metrics(runs):
    for run in runs:
        dataset = run.dataset()
        for mode, samples in (("mpm-mean", 1), ("bma", 4)):
            cards = backend.test_metrics(_arrays(backend.predict(run, dataset.x_test, mode, samples, 0.5)), dataset)
            cli = run.evaluate(mode=mode, samples=samples, threshold=0.5 if mode == "mpm-mean" else None)
            assert cards["density"] == pytest.approx(cli["density"])
            if dataset.task == "classification":
                for key in ("accuracy", "nll", "ece"):
                    assert cards[key] == pytest.approx(cli[key], rel=1e-6)
                assert cards["doubt_count"] == cli["doubt"]["count"]
            else:
                for key in ("rmse", "log_likelihood"):
                    assert cards[key] == pytest.approx(cli[key], rel=1e-5)
                assert cards["coverage_95"] == pytest.approx(cli["coverage"]["0.95"])


def test_masks_modes_and_range_are_core_s(runs):
    run = runs[0]
    stats = backend.native_statistics(run.model)
    limits = backend.threshold_range(run.model.spec, stats)
    for threshold in (0.2, 0.5, 0.8):
        ours = backend.masks_at(stats, threshold, limits.keep_above)
        assert all(np.array_equal(a, b.numpy()) for a, b in zip(ours, run.masks(threshold)))


def test_every_offered_mode_predicts_core_s_numbers_and_its_help_names_it(runs):
    """The mode box offers every mode core predicts with, each gives Run.predict's numbers through the
    door, and the paper name its help starts with is one core's parser reads back as that mode."""
    from core.predict.modes import parse_mode

    assert {parse_mode(mode) for mode in backend.PREDICTION_MODES} == set(PredictionMode)
    for run in runs:
        x = run.dataset().x_test[:16]
        for mode in backend.PREDICTION_MODES:
            threshold = 0.5 if parse_mode(mode).uses_threshold else None
            ours = backend.predict(run, x, mode, 3, 0.5, seed=1)
            theirs = run.predict(x, mode=mode, samples=3, threshold=threshold, seed=1)
            for name in ("probs", "mean", "density"):
                if getattr(theirs, name) is not None:
                    np.testing.assert_allclose(
                        np.asarray(getattr(ours, name)),
                        np.asarray(getattr(theirs, name)),
                        rtol=1e-6,
                        err_msg=f"{mode} {name}",
                    )
            paper_name, _, what = backend.MODE_HELP[mode].partition(": ")
            assert parse_mode(paper_name).value == mode and what, mode


def test_the_marker_is_read_off_the_sweep(runs):
    run = runs[0]
    curve = backend.sweep(run)
    for index in (0, len(curve.thresholds) // 2, len(curve.thresholds) - 1):
        density, value = backend.curve_point(curve, curve.thresholds[index])
        assert density == pytest.approx(curve.density[index]) and value == pytest.approx(curve.values[index])
    middle = 0.5 * (curve.thresholds[10] + curve.thresholds[11])
    density, _ = backend.curve_point(curve, middle)
    low, high = sorted((curve.density[10], curve.density[11]))
    assert low <= density <= high


def test_run_lists_show_the_same_headline_in_the_cli_and_the_dashboard(runs):
    from core.cli.runs import _headline

    metrics = {
        "density": 0.25,
        "SIM-SIM R=10 doubt_accuracy": 0.99,
        "SIM-SIM R=10 accuracy": 0.875,
        "MED-MEA R=1 accuracy": 0.5,
    }
    assert backend.headline_text(metrics) == "SIM-SIM R=10 accuracy: 0.8750"
    assert _headline(metrics) == "SIM-SIM R=10 accuracy 0.875, density 0.25"
    regression = runs[1].metrics
    assert backend.headline_text(regression).split(":")[0].endswith("rmse")
