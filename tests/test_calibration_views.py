"""The calibration and decision panels under AppTest: they appear for a classifier run and a
regression run on the Uncertainty and Compare pages and show the numbers core's `evaluate`
computes; on a 1-D toy the mean-field, laplace and NUTS bands stand side by side with the gap ratios
core computes, and an unconverged reference is warned about on the chart and below it."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches, write_fake_reference
from tests.test_calibration_charts import titles
from tests.test_dashboard_app import APP, TIMEOUT

pytestmark = pytest.mark.slow  # trains five tiny runs and opens the pages a dozen times


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bnn-calib")
    previous = os.environ.get("BNN_CACHE_DIR")
    os.environ["BNN_CACHE_DIR"] = str(cache)
    from core.runs import RunConfig, train_run

    runs = {
        "moons": train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})),
        "moons_bnn": train_run(RunConfig(dataset="two-moons", method="bnn", hidden=(8,), train={"epochs": 2})),
        "sine": train_run(RunConfig(dataset="toy-sine-gaps", hidden=(8,), train={"epochs": 2})),
        "laplace": train_run(RunConfig(dataset="toy-sine-gaps", method="laplace", hidden=(8,), train={"epochs": 20})),
        "cubic": train_run(RunConfig(dataset="toy-cubic", hidden=(4,), train={"epochs": 1})),
    }
    # An unconverged reference of another width than the runs' (ESS 40; 1-16-1 against 1-8-1).
    runs["reference_id"] = write_fake_reference(cache, runs["sine"].dataset(), hidden=(16,))
    yield runs
    if previous is None:
        os.environ.pop("BNN_CACHE_DIR", None)
    else:
        os.environ["BNN_CACHE_DIR"] = previous


@pytest.fixture(autouse=True)
def fresh_caches():
    clear_dashboard_caches()
    yield
    clear_dashboard_caches()


def open_page(run_id: str, page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run_id
    at.run()
    return at.switch_page(f"views/{page}.py").run()


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def captions(at: AppTest) -> str:
    return "\n".join(re.sub(r"\\(.)", r"\1", c.value) for c in at.caption)


def spec_titles(at: AppTest) -> list[str]:
    """The titles (with subtitles) of every chart the page drew."""
    return [
        title
        for kind in ("arrow_vega_lite_chart", "vega_lite_chart")
        for chart in at.get(kind)
        for title in titles(json.loads(chart.proto.spec))
    ]


def tables(at: AppTest) -> list:
    return [getattr(d.value, "data", d.value) for d in at.dataframe]


def table_with(at: AppTest, column: str):
    (table,) = [t for t in tables(at) if column in t.columns]
    return table


def core_evaluate(run, **options):
    from core.predict import evaluate

    return evaluate(run.model, run.dataset(), "bma", 10, seed=0, **options)


def ood_split(run, name, n=1000):
    from core.data import load_ood
    from core.predict import predict
    from core.predict.metrics.classification import entropy_split

    dataset = run.dataset()
    x = load_ood(dataset, name, seed=0, n=min(n, len(dataset.x_test)))
    split = entropy_split(predict(run.model, x, "bma", 10, seed=0).probs_per_draw)
    return {part: float(values.mean()) for part, values in split.items()}


# --- the Uncertainty page --------------------------------------------------------------------------------


def test_classifier_panels_show_cores_ece_aurc_entropy_split_and_the_doubt_slider(store):
    run = store["moons"]
    at = open_page(run.run_id, "uncertainty")
    assert_clean(at)
    expected = core_evaluate(run)
    text = captions(at)
    assert f"ECE {expected['ece']:.4f} over 15" in text
    assert f"AURC {expected['aurc']:.4f}" in text and f"excess {expected['excess_aurc']:.4f}" in text
    titles = spec_titles(at)
    assert f"reliability: ECE {expected['ece']:.4f} over 15 bins" in titles
    assert f"risk-coverage: AURC {expected['aurc']:.4f}" in titles
    assert "entropy split: aleatoric + epistemic = total" in titles
    split = table_with(at, "epistemic")
    inside = split[split["set"] == "two-moons (in-domain)"].iloc[0]
    for part in ("total", "aleatoric", "epistemic"):
        assert inside[part] == pytest.approx(expected["entropy_split"][part], rel=1e-9)
    assert len(split) >= 2  # the page's OOD sets, out of domain
    for _, row in split[split["set"] != "two-moons (in-domain)"].iterrows():
        expected_out = ood_split(run, row["set"])
        assert row["epistemic"] == pytest.approx(expected_out["epistemic"], rel=1e-9)
        assert row["aleatoric"] == pytest.approx(expected_out["aleatoric"], rel=1e-9)
    assert np.allclose(split["aleatoric"] + split["epistemic"], split["total"])
    # The doubt slider moves the decision: the caption counts what core's rule decides at 0.8.
    at.slider(key="doubt_level").set_value(0.8).run()
    assert_clean(at)
    decided = core_evaluate(run, doubt_threshold=0.8)["doubt"]
    assert f"At doubt level 0.8: {decided['count']} of {run.dataset().n_test} inputs decided" in captions(at)


def test_regression_panels_show_cores_calibration_curve_and_intervals(store):
    run = store["sine"]
    at = open_page(run.run_id, "uncertainty")
    assert_clean(at)
    expected = core_evaluate(run, coverage_levels=(0.5, 0.9, 0.95))
    titles = spec_titles(at)
    assert f"calibration curve: mean |observed - nominal| {expected['calibration_gap']:.3f}" in titles
    assert f"PIT histogram: KS distance {expected['pit_ks']:.3f}" in titles
    intervals = table_with(at, "mean width")
    assert list(intervals["level"]) == [0.5, 0.9, 0.95]
    for _, row in intervals.iterrows():
        core = expected["intervals"][f"{row['level']:g}"]
        assert row["observed coverage"] == pytest.approx(core["coverage"])
        assert row["mean width"] == pytest.approx(core["width"], rel=1e-6)
    at.multiselect(key="interval_levels").set_value([0.8, 0.99]).run()
    assert_clean(at)
    expected = core_evaluate(run, coverage_levels=(0.8, 0.99))
    intervals = table_with(at, "mean width")
    assert list(intervals["level"]) == [0.8, 0.99]
    assert list(intervals["mean width"]) == pytest.approx(
        [expected["intervals"][k]["width"] for k in ("0.8", "0.99")], rel=1e-6
    )
    at.multiselect(key="interval_levels").set_value([]).run()  # none chosen: said, never silently the defaults
    assert_clean(at)
    assert any("Choose one or more interval levels" in i.value for i in at.info)
    assert table_with(at, "mean width").empty


def band_gap_ratio(run, samples=100):
    from core.predict import predict
    from core.predict.metrics.regression import band_width_ratios

    dataset = run.dataset()
    prediction = predict(run.model, dataset.x_grid, "bma", samples, seed=0).unstandardised(
        dataset.target_mean, dataset.target_std
    )
    return band_width_ratios(dataset.x_grid, dataset.x_train, np.sqrt(prediction.epistemic_variance))["gap_ratio"]


def test_mean_field_laplace_and_nuts_side_by_side_with_gap_ratios_and_a_warning(store):
    run, laplace = store["sine"], store["laplace"]
    at = open_page(run.run_id, "uncertainty")
    assert_clean(at)
    titles = spec_titles(at)
    assert any(t.startswith(f"lbbnn (mean-field): gap ratio {band_gap_ratio(run):.2f}") for t in titles), titles
    assert any(t.startswith(f"laplace (non-factorised): gap ratio {band_gap_ratio(laplace):.2f}") for t in titles)
    # The reference is 1-16-1, the run 1-8-1: said on the chart; ESS 40 < 400: warned, never truth.
    (nuts,) = [t for t in titles if t.startswith("NUTS")]
    assert nuts.startswith("NUTS (unconverged): gap ratio") and "1-16-1" in nuts and "the run is 1-8-1" in nuts
    (chart,) = [c for c in at.get("arrow_vega_lite_chart") + at.get("vega_lite_chart") if "gap ratio" in c.proto.spec]
    assert "not the truth" in json.dumps(json.loads(chart.proto.spec)) or any(
        "not the truth" in str(d.data) for d in chart.proto.datasets
    )
    warnings = " ".join(w.value for w in at.warning)
    assert f"NUTS reference {store['reference_id']}" in warnings and "not the truth" in warnings
    gaps = table_with(at, "gap ratio")
    assert list(gaps["posterior"]) == ["lbbnn (mean-field)", "laplace (non-factorised)", "NUTS (unconverged)"]
    # The existing bands chart draws the reference in its own colour and names its width.
    from dashboard.calibration_charts import REFERENCE_COLOUR

    bands = (at.get("arrow_vega_lite_chart") + at.get("vega_lite_chart"))[0].proto.spec
    assert "NUTS reference" in bands and REFERENCE_COLOUR in bands and "#f58518" not in bands
    assert json.loads(bands)["title"]["subtitle"][0].startswith("NUTS reference not converged (ESS 40 < 400)")
    assert "1-16-1, not the run's 1-8-1" in captions(at)
    # On the laplace run, the mean-field run is its partner, drawn first.
    at = open_page(laplace.run_id, "uncertainty")
    assert_clean(at)
    assert list(table_with(at, "gap ratio")["posterior"])[:2] == ["lbbnn (mean-field)", "laplace (non-factorised)"]


def test_without_a_laplace_run_the_page_offers_one_click_training(store):
    at = open_page(store["cubic"].run_id, "uncertainty")
    assert_clean(at)
    assert at.button(key="train_non_factorised").label == "Train laplace on toy-cubic"
    assert "No `laplace` run of toy-cubic is cached" in captions(at)
    from dashboard import backend

    config = backend.non_factorised_config(store["cubic"])
    assert (config.method, config.dataset, config.seed) == ("laplace", "toy-cubic", store["cubic"].config.seed)


def test_the_one_click_training_queues_the_non_factorised_config(store, monkeypatch):
    from core.errors import BNNError
    from dashboard import backend, cache

    submitted = []

    class RecordingQueue:  # records the request and refuses it: no training starts in the test
        def submit(self, *args, **kwargs):
            submitted.append((args, kwargs))
            raise BNNError("recorded")

    at = open_page(store["cubic"].run_id, "uncertainty")
    monkeypatch.setattr(cache, "training_queue", RecordingQueue)
    at.button(key="train_non_factorised").click().run()
    config = backend.non_factorised_config(store["cubic"])
    [(args, kwargs)] = submitted
    assert args == (json.dumps(config.to_dict(), sort_keys=True), config, backend.total_epochs(config))
    assert kwargs["label"] == config.label()
    assert [re.sub(r"\\(.)", r"\1", e.value) for e in at.error] == ["Cannot start training: recorded"]


# --- the Compare page -----------------------------------------------------------------------------------------


def test_compare_page_tables_cores_calibration_for_classifiers_and_regressions(store):
    at = open_page(store["moons"].run_id, "compare")
    assert_clean(at)
    at.selectbox(key="compare_dataset").set_value("two-moons").run()
    at.multiselect(key="compare_runs").set_value([store["moons"].run_id, store["moons_bnn"].run_id]).run()
    assert_clean(at)
    titles = spec_titles(at)
    assert "reliability (diagonal: calibrated)" in titles and "risk-coverage (lower is better)" in titles
    table = table_with(at, "AURC")
    for position, key in enumerate(("moons", "moons_bnn")):
        expected = core_evaluate(store[key])
        assert table["ECE"].iloc[position] == pytest.approx(expected["ece"])
        assert table["AURC"].iloc[position] == pytest.approx(expected["aurc"])
        assert table["epistemic"].iloc[position] == pytest.approx(expected["entropy_split"]["epistemic"])
        # Out of domain: the split of the page's OOD set (its first n inputs, seed 0), from core's functions.
        ood = at.selectbox(key="compare_ood").value
        assert table[f"epistemic ({ood})"].iloc[position] == pytest.approx(
            ood_split(store[key], ood)["epistemic"], rel=1e-9
        )
    # Another mode: every run predicts in it (mean weights: one network, no epistemic part).
    at.selectbox(key="compare_calibration_mode").set_value("mean").run()
    assert_clean(at)
    table = table_with(at, "AURC")
    from core.predict import evaluate

    for position, key in enumerate(("moons", "moons_bnn")):
        expected = evaluate(store[key].model, store[key].dataset(), "mean", 1, seed=0)
        assert table["ECE"].iloc[position] == pytest.approx(expected["ece"])
        assert table["AURC"].iloc[position] == pytest.approx(expected["aurc"])
        assert table["epistemic"].iloc[position] == pytest.approx(0.0, abs=1e-12)
    at.selectbox(key="compare_calibration_mode").set_value("bma").run()
    at.selectbox(key="compare_dataset").set_value("toy-sine-gaps").run()
    at.multiselect(key="compare_runs").set_value([store["sine"].run_id, store["laplace"].run_id]).run()
    assert_clean(at)
    assert "calibration curves (diagonal: calibrated)" in spec_titles(at)
    table = table_with(at, "calibration gap")
    for position, key in enumerate(("sine", "laplace")):
        expected = core_evaluate(store[key], coverage_levels=(0.5, 0.9, 0.95))
        assert table["calibration gap"].iloc[position] == pytest.approx(expected["calibration_gap"])
        assert table["PIT KS"].iloc[position] == pytest.approx(expected["pit_ks"])
        assert table["width 0.95"].iloc[position] == pytest.approx(expected["intervals"]["0.95"]["width"], rel=1e-6)


# --- the Playground ---------------------------------------------------------------------------------------------


def test_playground_prints_the_gap_ratio_of_its_band(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("views/playground.py").run()
    assert_clean(at)
    at.slider(key="play_epochs").set_value(200).run()
    training = at.session_state["playground_job"][1]
    training.join(timeout=120)
    at.run()
    assert_clean(at)
    picture = training.snapshot()
    data = training._dataset
    assert data.in_features == 1  # the playground opens on a 1-D toy
    from core.predict.metrics.regression import band_width_ratios

    expected = band_width_ratios(picture["x_plot"], data.x_train, picture["epistemic_std"])["gap_ratio"]
    assert any(t.endswith(f"gap ratio of the epistemic band {expected:.2f}") for t in spec_titles(at)), spec_titles(at)
