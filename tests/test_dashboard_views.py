"""The pages under AppTest: the defects a new user found, and the controls added for them."""

from __future__ import annotations

import io
import json
import os
import re
import threading
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.test_dashboard_app import APP, TIMEOUT, assert_clean, fresh_caches, metric_value  # noqa: F401


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Tiny runs: two-moons (lbbnn, two seeds; bnn), mnist-small and a 1-D regression toy."""
    cache = tmp_path_factory.mktemp("bnn-cache")
    previous = os.environ.get("BNN_CACHE_DIR")
    os.environ["BNN_CACHE_DIR"] = str(cache)
    from core.runs import RunConfig, train_run

    runs = {
        "moons": train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})).run_id,
        "moons_seed1": train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2}, seed=1)).run_id,
        "moons_bnn": train_run(RunConfig(dataset="two-moons", method="bnn", hidden=(8,), train={"epochs": 2})).run_id,
        "mnist": train_run(
            RunConfig(dataset="mnist-small", hidden=(8,), train={"epochs": 1, "batch_size": 500})
        ).run_id,
        "sine": train_run(RunConfig(dataset="toy-sine-gaps", hidden=(8,), train={"epochs": 2})).run_id,
    }
    yield runs
    if previous is None:
        os.environ.pop("BNN_CACHE_DIR", None)
    else:
        os.environ["BNN_CACHE_DIR"] = previous


def open_app(run_id: str | None = None, params: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if run_id is not None:
        at.session_state["selected_run_id"] = run_id
    for key, value in (params or {}).items():
        at.query_params[key] = value
    return at.run()


def chart_specs(at: AppTest) -> list[dict]:
    """Every Vega-Lite spec on the page (selectable charts are 'vega_lite_chart' elements)."""
    return [json.loads(c.proto.spec) for kind in ("arrow_vega_lite_chart", "vega_lite_chart") for c in at.get(kind)]


def chart_rows(chart, name: str) -> list[dict]:
    """The rows of a named dataset of a chart element (Streamlit ships them as Arrow, beside the spec)."""
    import pyarrow as pa

    for dataset in chart.proto.datasets:
        if dataset.name == name:
            return pa.ipc.open_stream(dataset.data.data).read_all().to_pandas().to_dict("records")
    spec = json.loads(chart.proto.spec)
    return spec.get("datasets", {}).get(name, [])


def texts(elements) -> list[str]:
    """What a reader sees: messages quoting typed or linked text are escaped for Markdown."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in elements]


# --- out-of-range numbers are reported, never replaced ---------------------------------------


def test_out_of_range_numbers_disable_train_with_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    assert not at.button(key="train_button").disabled
    at.text_input(key="train_epochs").input("-5").run()
    assert not at.exception
    assert any("Epochs" in e and "-5" in e for e in texts(at.error)), texts(at.error)
    assert at.button(key="train_button").disabled
    at.text_input(key="train_epochs").input("2").run()
    at.text_input(key="train_seed").input("99999999999999999999").run()
    assert any("Seed" in e and "99999999999999999999" in e for e in texts(at.error)), texts(at.error)
    assert at.button(key="train_button").disabled
    at.text_input(key="train_seed").input("7").run()
    assert not at.error and not at.button(key="train_button").disabled
    at.text_input(key="train_batch").input("0").run()
    assert any("Batch size" in e for e in texts(at.error)) and at.button(key="train_button").disabled


# --- memory and time estimate before training ------------------------------------------------


def test_a_network_too_large_for_memory_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    at.text_input(key="train_hidden").input("8").run()
    assert any("Estimate" in c and "weights" in c for c in texts(at.caption)), texts(at.caption)
    at.text_input(key="train_hidden").input("100000, 100000").run()
    assert not at.exception  # past the widest layer any run may ask for: refused by that limit
    assert any("above the limit 4096" in e for e in texts(at.error)), texts(at.error)
    at.text_input(key="train_hidden").input("4000, 4000, 4000").run()
    assert not at.exception
    assert any("Too large" in e and "GB" in e for e in texts(at.error)), texts(at.error)
    assert at.button(key="train_button").disabled
    assert "training_worker" not in at.session_state


def test_training_estimate_counts_weights_exactly():
    from dashboard import backend

    config = backend.make_config({"dataset": "two-moons", "hidden": [8, 4], "train": {"epochs": 3}})
    estimate = backend.training_estimate(config)
    assert estimate["weights"] == (2 + 1) * 8 + (8 + 1) * 4 + (4 + 1) * 2
    assert estimate["epochs"] == 3 and estimate["n_train"] == 500 and estimate["seconds"] > 0
    assert estimate["refusal"] is None


# --- device message in the form's words; bundled page icon ------------------------------------


def test_device_problem_names_the_form_control_not_a_cli_flag():
    import torch

    from dashboard import backend

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the cuda device is fine here")
    problem = backend.device_problem("cuda")
    assert problem is not None and "--device" not in problem and "Device: auto" in problem
    assert backend.device_problem("auto") is None


def test_page_icon_is_a_bundled_file(tmp_path, monkeypatch):
    """The icon the app hands to st.set_page_config (recorded while the app runs) is a PNG file of the
    project, not a Material icon name that needs the internet."""
    import streamlit as st
    from PIL import Image

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    calls, real = [], st.set_page_config

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(st, "set_page_config", recording)
    assert_clean(AppTest.from_file(str(APP), default_timeout=TIMEOUT).run())
    assert calls, "the app never called st.set_page_config"
    icon = Path(calls[0]["page_icon"])
    assert icon.is_file() and icon.resolve().is_relative_to(APP.resolve().parent.parent / "assets")
    with Image.open(icon) as image:
        assert image.format == "PNG"


def test_the_sidebar_keys_every_family_colour_on_every_page(tmp_path, monkeypatch):
    """One key of the family colours (charts.FAMILY_COLOURS, used by every chart), in the sidebar of
    every page, drawn before the page itself (it also loads the browser's chart library early)."""
    from dashboard import charts

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    for page in (None, "views/glossary.py", "views/playground.py"):
        if page is not None:
            at.switch_page(page).run()
        assert not at.exception
        keys = [c for kind in ("arrow_vega_lite_chart", "vega_lite_chart") for c in at.sidebar.get(kind)]
        assert len(keys) == 1, page
        spec = json.loads(keys[0].proto.spec)
        layer = spec["layer"][0]
        scale = layer["encoding"]["color"]["scale"]
        assert scale["domain"] == list(charts.FAMILY_COLOURS)
        assert scale["range"] == [charts.FAMILY_COLOURS[f] for f in charts.FAMILY_COLOURS]
        rows = (
            chart_rows(keys[0], spec["data"]["name"])
            if "name" in spec.get("data", {})
            else chart_rows(keys[0], layer["data"]["name"])
        )
        assert sorted(r["family"] for r in rows) == sorted(charts.FAMILY_COLOURS)


# --- delete asks first, and the other sessions are told -------------------------------------------


@pytest.mark.slow  # 3 s CPU
def test_delete_asks_for_confirmation_and_other_sessions_are_told(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    from core.runs import RunConfig, list_runs, train_run

    keep = train_run(RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 1})).run_id
    doomed = train_run(RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 1}, seed=3)).run_id
    watcher = open_app(doomed)  # another browser looking at the run
    at = open_app(keep)
    at.selectbox(key="cached_run_choice").set_value(doomed).run()
    at.button(key="delete_run").click().run()
    assert any("cannot be undone" in w for w in texts(at.warning))
    assert doomed in [info.run_id for info in list_runs()]  # nothing deleted yet
    at.button(key="cancel_delete").click().run()
    assert doomed in [info.run_id for info in list_runs()]
    at.button(key="delete_run").click().run()
    at.button(key="confirm_delete").click().run()
    assert_clean(at)
    assert [info.run_id for info in list_runs()] == [keep]
    from dashboard import cache

    cache.cached_run_list.clear()
    watcher.run()
    assert not watcher.exception
    assert watcher.session_state["selected_run_id"] == keep
    assert any(doomed[:8] in i and "no longer" in i for i in texts(watcher.sidebar.info)), texts(watcher.sidebar.info)


# --- training status survives reloads and page switches, and its end is announced ----------


@pytest.fixture
def held_training(monkeypatch, store):
    """The queue's training function replaced by one that waits for `release` (and obeys cancel)."""
    from core.errors import TrainingCancelled
    from dashboard import worker as worker_module

    release = threading.Event()

    def train(config, progress=None, cancel=None):
        progress({"epoch": 1, "phase": "train", "loss": 1.0, "density": 0.5})
        while not release.wait(0.02):
            if cancel is not None and cancel.is_set():
                raise TrainingCancelled("cancelled")
        return SimpleNamespace(run_id=store["moons_seed1"])

    monkeypatch.setattr(worker_module, "train_in_subprocess", train)
    yield release
    release.set()


def train_small_from_the_form(run_id: str) -> AppTest:
    """The app on `run_id` after Train was pressed for a 3-unit two-moons network, 2 epochs."""
    at = open_app(run_id)
    at.selectbox(key="train_dataset").set_value("two-moons").run()
    at.text_input(key="train_hidden").input("3").run()
    at.text_input(key="train_epochs").input("2").run()
    at.button(key="train_button").click().run()
    assert_clean(at)
    return at


@pytest.mark.slow  # trains from the form: 2.4 s CPU
def test_train_page_status_right_after_clicking_and_after_a_reload(held_training, store):
    at = train_small_from_the_form(store["moons"])
    # the page drawn right after the click shows the training: Cancel on, the sidebar's line; Train stays
    # on, as a session may queue one more behind it (BNN_QUEUE_PER_SESSION)
    assert not at.button(key="train_button").disabled
    assert at.button(key="cancel_training")
    assert any("Training in the background" in c for c in texts(at.sidebar.caption)), texts(at.sidebar.caption)
    token = at.query_params["train"]
    token = token[0] if isinstance(token, list) else token

    # a reload is a new session with the same address: the progress comes back; Cancel stays with the
    # session that asked (the address is only a lookup: a copied link carries it too), and in classroom
    # mode with the teacher (tests/test_queue_ownership.py)
    again = open_app(params={"train": token})
    assert_clean(again)
    assert any("epoch 1/2" in (p.proto.text or "") for p in again.get("progress"))
    assert any("only the browser that asked for it" in c for c in texts(again.caption))

    held_training.set()
    again.session_state["training_worker"].join(timeout=30)
    again.run()
    assert_clean(again)
    assert again.session_state["selected_run_id"] == store["moons_seed1"]
    assert not again.button(key="train_button").disabled
    assert "train" not in again.query_params


def test_a_training_that_ends_on_another_page_is_announced(store):
    from dashboard.worker import TrainingQueue

    queue = TrainingQueue(lambda config, progress=None, cancel=None: SimpleNamespace(run_id=store["moons_seed1"]))
    request = queue.submit("k", SimpleNamespace(), 1, label="lbbnn [8] on two-moons, seed 1")
    request.join(timeout=10)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = store["moons"]
    at.session_state["training_worker"] = request
    at.switch_page("views/pruning.py").run()
    assert_clean(at)
    assert at.session_state["selected_run_id"] == store["moons_seed1"]
    notices = texts(at.sidebar.info)
    assert any(
        "Training finished" in n and store["moons_seed1"][:8] in n and store["moons"][:8] in n for n in notices
    ), notices


def test_finished_jobs_refresh_the_run_list_at_once():
    from dashboard.worker import TrainingQueue

    calls = []
    queue = TrainingQueue(lambda config, progress=None, cancel=None: SimpleNamespace(run_id="r"))
    queue.on_job_finished = lambda: calls.append("cleared")
    queue.submit("k", SimpleNamespace(), 1).join(timeout=10)
    assert calls == ["cleared"]


# --- labels say what differs ----------------------------------------------------------------------


def test_run_labels_name_the_fields_that_differ():
    from dashboard import backend

    base = {
        "dataset": "mnist-small",
        "method": "lbbnn",
        "hidden": [100, 100],
        "seed": 0,
        "train": {"epochs": 5, "kl_weight": 0.1},
        "family_options": {},
    }
    rows = [
        {"run_id": "a" * 16, "dataset": "mnist-small", "method": "lbbnn", "config": base},
        {
            "run_id": "b" * 16,
            "dataset": "mnist-small",
            "method": "lbbnn",
            "config": {**base, "family_options": {"prior_inclusion": 0.1}},
        },
        {
            "run_id": "c" * 16,
            "dataset": "mnist-small",
            "method": "lbbnn",
            "config": {**base, "train": {"epochs": 25, "kl_weight": 0.1}},
        },
        {"run_id": "d" * 16, "dataset": "two-moons", "method": "lbbnn", "config": {**base, "hidden": [8]}},
    ]
    labels = backend.run_labels(rows)
    assert len(set(labels.values())) == 4
    assert "epochs=25" in labels["c" * 16] and "epochs=5" in labels["a" * 16]
    assert "prior_inclusion=0.1" in labels["b" * 16]
    assert "kl_weight" not in labels["a" * 16]  # the same everywhere: not named
    assert labels["d" * 16] == f"lbbnn [8] on two-moons ({'d' * 8})"  # alone in its kind


def test_sidebar_labels_tell_two_seeds_apart(store):
    at = open_app(store["moons"])
    options = at.selectbox(key="sidebar_run").options
    moons = [o for o in options if "two-moons" in o and o.startswith("lbbnn")]
    assert len(moons) == 2 and any("seed=1" in o for o in moons) and any("seed=0" in o for o in moons)


# --- modes and units on the Pruning page ---------------------------------------------------


def test_bma_density_card_is_the_expected_density_of_a_sampled_network(store):
    from core.runs import load_run
    from dashboard import backend

    at = open_app(store["mnist"])
    at.switch_page("views/pruning.py").run()
    at.selectbox(key=f"widget:mode:{store['mnist']}").set_value("bma").run()
    assert_clean(at)
    model = load_run(store["mnist"]).model
    alphas = np.concatenate([s.ravel() for s in backend.native_statistics(model)])
    assert metric_value(at, "expected density") == f"{alphas.mean():.4f}"
    assert float(metric_value(at, "expected density")) < 0.99
    assert at.slider(key=f"widget:threshold:{store['mnist']}").disabled


def test_regression_card_and_curve_point_agree_in_original_units(store):
    at = open_app(store["sine"])
    at.switch_page("views/pruning.py").run()
    assert_clean(at)
    # Small regression sets start every alpha in [0.95, 0.99]: after 2 epochs a cut at 0.97 prunes some.
    at.slider(key=f"widget:threshold:{store['sine']}").set_value(0.97).run()
    assert_clean(at)
    card = float(metric_value(at, "RMSE"))
    (chart,) = [c for c in at.get("vega_lite_chart") if "density" in c.proto.spec]
    spec = json.loads(chart.proto.spec)
    diamonds = [
        layer
        for layer in spec["layer"]
        if isinstance(layer.get("mark"), dict) and layer["mark"].get("shape") == "diamond"
    ]
    (diamond,) = diamonds
    # inline: a threshold move moves the point in the cached spec (charts.with_current_point)
    (point,) = diamond["data"]["values"] if "values" in diamond["data"] else chart_rows(chart, diamond["data"]["name"])
    assert point["value"] == pytest.approx(card, abs=1e-4)
    assert 0 < point["density"] < 1


# --- the decision surface of 2-D classifiers ---------------------------------------------------------


@pytest.mark.slow  # 3-5 s: a 2-D grid through the page
@pytest.mark.parametrize("name", ["moons", "moons_bnn"])
def test_two_d_classifiers_draw_their_decision_surface(store, name):
    at = open_app(store[name])
    at.switch_page("views/uncertainty.py").run()
    assert_clean(at)
    assert any("Decision surface" in h.value for h in at.subheader)
    titles = json.dumps(chart_specs(at))
    assert "predictive entropy" in titles and "spread of the 10 draws" in titles


def test_surface_arrays_against_direct_computation():
    from dashboard import surface

    probs = np.array([[[0.9, 0.1], [0.5, 0.5]], [[0.7, 0.3], [0.3, 0.7]]])  # R=2, N=2, K=2
    arrays = surface.surface_arrays(probs)
    # averaged probabilities (0.8, 0.2) and (0.4, 0.6)
    assert list(arrays["predicted"]) == [0, 1]
    assert arrays["confidence"] == pytest.approx([0.8, 0.6])
    assert arrays["entropy"] == pytest.approx(
        [-(0.8 * np.log(0.8) + 0.2 * np.log(0.2)), -(0.4 * np.log(0.4) + 0.6 * np.log(0.6))]
    )
    assert arrays["spread"] == pytest.approx([0.1, 0.1])  # sd of (0.9, 0.7) and of (0.5, 0.7)


# --- priors you can see ------------------------------------------------------------------------


def test_prior_widgets_have_ranges_help_and_fold_advanced_options(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    psi = at.text_input(key="train_opt_lbbnn_prior_inclusion")
    assert psi.label.startswith("Prior inclusion probability") and "(0, 1)" in psi.help
    assert at.selectbox(key="train_opt_lbbnn_inclusion_prior").options == [
        "bernoulli",
        "beta-bernoulli",
        "beta-binomial",
    ]
    advanced = [e for e in at.expander if "Advanced" in e.label]
    assert advanced and advanced[0].text_input(key="train_opt_lbbnn_init_sigma")
    assert not [
        n for n in at.main.text_input if n.key == "train_opt_lbbnn_init_sigma" and n not in advanced[0].text_input
    ]
    keys = {n.key for n in at.text_input}
    # options shown only where they matter: Beta a, b for the beta priors, Student-t a, b for that slab
    assert "train_opt_lbbnn_beta_a" not in keys and "train_opt_lbbnn_slab_a" not in keys
    assert "train_opt_lbbnn_slab_variance" in keys
    at.selectbox(key="train_opt_lbbnn_inclusion_prior").set_value("beta-bernoulli").run()
    keys = {n.key for n in at.text_input}
    assert "train_opt_lbbnn_beta_a" in keys and "train_opt_lbbnn_prior_inclusion" not in keys
    assert at.checkbox(key="train_empirical_bayes").value is False
    at.text_input(key="train_opt_lbbnn_beta_a").input("-1.0").run()
    assert any("Beta a" in e and "-1" in e for e in texts(at.error)) and at.button(key="train_button").disabled
    at.text_input(key="train_opt_lbbnn_beta_a").input("2.0").run()
    assert not at.error
    at.checkbox(key="train_empirical_bayes").check().run()
    assert not at.error and not at.button(key="train_button").disabled
    at.selectbox(key="train_method").set_value("horseshoe").run()
    assert float(at.text_input(key="train_opt_horseshoe_global_scale").value) == pytest.approx(1e-5)


def test_prior_of_the_statistic_is_the_beta_density_or_the_point_psi():
    from dashboard import backend

    prior = backend.prior_of_statistic("lbbnn", {"inclusion_prior": "beta-bernoulli", "beta_a": 2.0, "beta_b": 5.0})
    assert prior["kind"] == "density" and prior["mean"] == pytest.approx(2 / 7)
    x = prior["x"]
    assert prior["density"] == pytest.approx(30 * x * (1 - x) ** 4, rel=1e-9)  # Beta(2, 5): 1 / B(2, 5) = 30
    assert np.trapezoid(prior["density"], prior["x"]) == pytest.approx(1.0, abs=1e-3)
    point = backend.prior_of_statistic("lbbnn", {"prior_inclusion": 0.2})
    assert point == {"kind": "point", "value": 0.2, "label": "prior inclusion probability psi = 0.2"}
    assert backend.prior_of_statistic("bnn", {}) is None


@pytest.mark.slow  # trains its own runs: 3 s CPU
def test_inclusion_page_draws_the_prior_beside_the_posterior(store):
    at = open_app(store["mnist"])
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)
    charts = [c for kind in ("arrow_vega_lite_chart", "vega_lite_chart") for c in at.get(kind)]
    (histograms,) = [c for c in charts if '"prior"' in c.proto.spec]
    spec = json.loads(histograms.proto.spec)
    panels = spec["concat"]
    assert len(panels) == 3  # the two layers' histograms, then the prior beside them
    prior = panels[-1]
    assert prior["title"]["text"] == "prior" and prior["mark"]["type"] == "rule"
    # the prior's data is inline (it never changes with the threshold) or a named dataset
    (row,) = prior["data"]["values"] if "values" in prior["data"] else chart_rows(histograms, prior["data"]["name"])
    assert row["inclusion_probability"] == pytest.approx(np.exp(-2.0))  # the default psi
    at.switch_page("views/inclusion.py")
    bnn = open_app(store["moons_bnn"])
    bnn.switch_page("views/inclusion.py").run()
    assert any("says nothing directly" in c for c in texts(bnn.caption))


@pytest.mark.slow  # several sessions: 2.4 s CPU
def test_inclusion_page_mask_comparison_is_built_once_for_every_session(store, monkeypatch):
    """The compared masks and receptive fields are shared cache entries: a second session on the same
    setting builds no chart, and the counts it shows are the masks' own."""
    from core.runs import load_run
    from dashboard import backend, raster

    built = []
    for name in ("mask_difference_picture", "receptive_field_pictures"):
        original = getattr(raster, name)
        monkeypatch.setattr(raster, name, lambda *a, _f=original, _n=name, **k: built.append(_n) or _f(*a, **k))
    run = load_run(store["mnist"])
    stats = backend.native_statistics(run.model)
    spec = backend.threshold_range(run.model.spec, stats)
    masks_a = backend.masks_at(stats, spec.default, spec.keep_above)
    sampled = backend.sample_structure(stats, spec.name, seed=0)
    expected = f"A keeps {sum(int(m.sum()) for m in masks_a)} weights, B keeps {sum(int(m.sum()) for m in sampled)}."
    for session in range(2):
        at = open_app(store["mnist"])
        at.switch_page("views/inclusion.py").run()
        assert_clean(at)
        assert expected in texts(at.caption)
        assert built == ["mask_difference_picture"] * len(masks_a) + ["receptive_field_pictures"], session
    at.radio(key="mask_b_kind").set_value("a second threshold").run()
    at.slider(key="mask_b_threshold").set_value(0.3).run()
    masks_b = backend.masks_at(stats, 0.3, spec.keep_above)
    kept_b = sum(int(m.sum()) for m in masks_b)
    assert kept_b != sum(int(m.sum()) for m in masks_a)
    assert f"A keeps {sum(int(m.sum()) for m in masks_a)} weights, B keeps {kept_b}." in texts(at.caption)


# --- tune and take away ---------------------------------------------------------------------------


def test_suggested_threshold_is_the_sparsest_within_the_loss():
    from dashboard import backend

    thresholds = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    density = np.array([0.9, 0.6, 0.3, 0.1, 0.02])
    accuracy = np.array([0.950, 0.952, 0.948, 0.940, 0.5])
    best = backend.suggested_threshold(thresholds, density, accuracy, "accuracy", 0.005)
    assert (best["threshold"], best["density"], best["best"]) == (0.5, 0.3, 0.952)
    wider = backend.suggested_threshold(thresholds, density, accuracy, "accuracy", 0.02)
    assert wider["threshold"] == 0.7
    rmse = backend.suggested_threshold(thresholds, density, np.array([1.0, 1.0, 1.004, 1.2, 3.0]), "rmse", 0.005)
    assert rmse["threshold"] == 0.5


def test_curve_click_and_suggestion_set_the_threshold(store):
    from dashboard import charts

    run_id = store["mnist"]
    at = open_app(run_id)
    at.switch_page("views/pruning.py").run()
    assert_clean(at)
    spec = json.loads([c for c in at.get("vega_lite_chart") if "density" in c.proto.spec][0].proto.spec)
    params = spec.get("params", []) + [p for layer in spec["layer"] for p in layer.get("params", [])]
    assert any(p.get("name") == charts.PICK and p["select"]["on"] == "click" for p in params)
    assert "green star" in " ".join(texts(at.markdown))
    at.button(key="apply_suggestion").click().run()
    assert_clean(at)
    suggested = at.session_state["run_settings"][run_id]["threshold"]
    assert at.slider(key=f"widget:threshold:{run_id}").value == pytest.approx(suggested)
    assert f"{suggested:.4g}" in " ".join(texts(at.markdown))
    # a click on the curve arrives as the chart's selection state
    assert charts.picked_threshold({"selection": {charts.PICK: [{"threshold": 0.42}]}}) == 0.42
    assert charts.picked_threshold({"selection": {charts.PICK: []}}) is None


def test_downloads_are_the_export_and_the_curve(store, tmp_path):
    from dashboard import backend

    run = backend.load_run(store["mnist"])
    data = backend.export_zip(run, 0.5)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(tmp_path / "pruned")
    exported = backend.load_exported(tmp_path / "pruned")
    import torch

    x = torch.as_tensor(run.dataset().x_test[:50])
    direct = backend.predict(run, run.dataset().x_test[:50], "prune", 1, 0.5, weights="mean").probs
    assert np.asarray(exported.predict(x)) == pytest.approx(np.asarray(direct), abs=1e-5)
    assert exported.meta["threshold"] == 0.5
    curve = backend.sweep(run)
    text = backend.curve_csv(curve.thresholds, curve.density, curve.values, curve.metric)
    import pandas as pd

    frame = pd.read_csv(io.StringIO(text))
    assert list(frame.columns) == ["threshold", "density", "accuracy"]
    assert frame["density"].to_numpy() == pytest.approx(curve.density, rel=1e-5)
    at = open_app(store["mnist"])
    at.switch_page("views/pruning.py").run()
    buttons = at.get("download_button")
    labels = [b.label for b in buttons]
    assert any("curve" in label for label in labels) and any("pruned model" in label for label in labels)
    assert any("ONNX" in label for label in labels)
    # the page counts kept weights as the export does: raw (the density's count) and on active paths
    threshold = at.slider(key=f"widget:threshold:{store['mnist']}").value
    counts = backend.kept_counts_at(run, float(threshold))
    caption = [c for c in texts(at.caption) if "input-to-output path" in c]
    assert caption and f"{counts['raw']:,} of {counts['total']:,}" in caption[0]
    assert f"{counts['active']:,} of them" in caption[0]
    onnx_zip = zipfile.ZipFile(io.BytesIO(backend.export_zip(run, float(threshold), "onnx")))
    meta = json.loads(onnx_zip.read("model.json"))
    assert (meta["kept_raw"], meta["kept_active"]) == (counts["raw"], counts["active"])
    # a download leaves the page as it is: no rerun (which would give the other button's file a new id)
    assert all(b.proto.ignore_rerun for b in buttons)
    assert any(b.proto.deferred_file_id for b in buttons)  # the model's zip is built only when clicked


# --- shareable views ------------------------------------------------------------------------------


@pytest.mark.slow  # 5 s CPU
def test_a_copied_link_reproduces_the_view(store):
    run_id = store["mnist"]
    at = open_app(run_id)
    at.switch_page("views/uncertainty.py").run()
    at.selectbox(key=f"widget:mode:{run_id}").set_value("prune").run()
    at.slider(key=f"widget:threshold:{run_id}").set_value(0.7).run()
    at.slider(key=f"widget:samples:{run_id}").set_value(4).run()
    at.multiselect(key="ood_sets").set_value(["uniform-noise"]).run()
    assert_clean(at)
    link = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert link["run"] == run_id and link["mode"] == "prune" and link["R"] == "4"
    assert float(link["threshold"]) == pytest.approx(0.7) and link["ood"] == "uniform-noise"

    # a new browser opens the link: nothing in its session, everything from the address
    fresh = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in link.items():
        fresh.query_params[key] = value
    fresh.run()
    fresh.switch_page("views/uncertainty.py").run()
    assert_clean(fresh)
    assert fresh.session_state["selected_run_id"] == run_id
    assert fresh.selectbox(key=f"widget:mode:{run_id}").value == "prune"
    assert fresh.slider(key=f"widget:threshold:{run_id}").value == pytest.approx(0.7)
    assert fresh.slider(key=f"widget:samples:{run_id}").value == 4
    assert fresh.multiselect(key="ood_sets").value == ["uniform-noise"]


def test_a_link_with_a_page_opens_that_page(store):
    at = open_app(params={"run": store["moons"], "page": "pruning"})
    assert_clean(at)
    assert any("Pruning" in h.value for h in at.header)


# --- explain --------------------------------------------------------------------------------------


def test_every_page_opens_with_its_explanation_and_the_glossary_names_the_modes(store):
    from dashboard import explain

    at = open_app(store["moons"])
    for page, key in (
        ("views/train.py", "train"),
        ("views/inclusion.py", "inclusion"),
        ("views/pruning.py", "pruning"),
        ("views/uncertainty.py", "uncertainty"),
    ):
        at.switch_page(page).run()
        assert_clean(at)
        assert explain.PAGE_INTROS[key] in texts(at.markdown), page
    at.switch_page("views/glossary.py").run()
    assert_clean(at)
    body = " ".join(texts(at.markdown))
    for name in ("SIM-SIM", "ALL-MEA", "MED-SIM", "MED-MEA", "PRN", "doubt@0.95", "AUROC"):
        assert f"**{name}" in body, name
    # the modes' help on every page uses the glossary's names
    from dashboard import backend

    for help_text in backend.MODE_HELP.values():
        assert help_text.split(":")[0] in body


# --- compare runs ------------------------------------------------------------------------------


def test_summary_over_seeds_gives_median_min_max():
    from dashboard import charts

    records = [
        {"setting": "a", "acc": 0.9},
        {"setting": "a", "acc": 0.8},
        {"setting": "a", "acc": 0.95},
        {"setting": "b", "acc": 0.7},
    ]
    table = charts.summary_over_seeds(records).set_index("setting")
    assert table.loc["a", "acc"] == "0.9 (0.8, 0.95)" and table.loc["a", "seeds"] == 3
    assert table.loc["b", "acc"] == "0.7" and table.loc["b", "seeds"] == 1


def test_family_colours_are_fixed_and_distinct():
    from dashboard import charts

    colours = list(charts.FAMILY_COLOURS.values())
    assert len(set(colours)) == len(colours)
    scale = charts.family_colour_scale(["x", "y"], ["bnn", "lbbnn"]).to_dict()
    assert scale["range"] == [charts.FAMILY_COLOURS["bnn"], charts.FAMILY_COLOURS["lbbnn"]]


def test_compare_page_overlays_runs_and_tables_modes_over_seeds(store):
    from dashboard import charts

    at = open_app(store["moons"])
    at.switch_page("views/compare.py").run()
    assert_clean(at)
    at.selectbox(key="compare_dataset").set_value("two-moons").run()
    at.multiselect(key="compare_runs").set_value([store["moons"], store["moons_seed1"], store["moons_bnn"]]).run()
    assert_clean(at)
    specs = chart_specs(at)
    (curves,) = [s for s in specs if "each family pruned" in json.dumps(s.get("title", ""))]
    colour = (
        curves["layer"][0]["encoding"]["color"]["scale"]
        if "encoding" in curves["layer"][0]
        else curves["encoding"]["color"]["scale"]
    )
    assert colour["range"].count(charts.FAMILY_COLOURS["lbbnn"]) == 2
    assert colour["range"].count(charts.FAMILY_COLOURS["bnn"]) == 1
    assert any("entropy ECDFs" in json.dumps(s.get("title", "")) for s in specs)
    tables = [getattr(d.value, "data", d.value) for d in at.dataframe]
    (aurocs,) = [t for t in tables if any(str(c).startswith("AUROC") for c in t.columns)]
    assert len(aurocs) == 3 and aurocs.iloc[:, 1].between(0, 1).all()
    (modes,) = [t for t in tables if "SIM-SIM R=10" in t.columns]
    assert sorted(modes["seeds"]) == [1, 2]
    lbbnn = modes[modes["seeds"] == 2].iloc[0]
    assert "(" in lbbnn["SIM-SIM R=10"] and lbbnn["runs"].startswith("lbbnn [8] on two-moons")


# --- a count has no arrow; an offline set says so before training --------------------------------------------


def test_doubt_card_count_has_no_arrow(store):
    at = open_app(store["mnist"])
    at.switch_page("views/pruning.py").run()
    (card,) = [m for m in at.metric if m.label == "doubt@0.95 accuracy"]
    assert "decided" in card.proto.delta
    assert card.proto.direction == card.proto.NONE  # a count, not a change: no up arrow


def test_a_set_that_needs_a_download_offline_disables_train_before_training(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BNN_DATA_DIR", str(tmp_path / "no-data"))
    at = open_app()
    at.selectbox(key="train_dataset").set_value("kmnist").run()
    assert not at.exception
    assert "kmnist  (unavailable)" in at.selectbox(key="train_dataset").options  # said before choosing it
    assert any("kmnist is not available" in e and "BNN_OFFLINE" in e for e in texts(at.error)), texts(at.error)
    assert at.button(key="train_button").disabled


# --- masks as in Hubin & Storvik (2019) -----------------------------------------------------------------------


def test_mask_difference_counts_every_weight_in_its_state():
    from dashboard import charts

    a = np.array([[1, 1, 0, 0]], dtype=bool)
    b = np.array([[1, 0, 1, 0]], dtype=bool)
    frame = charts.mask_difference_frame(a, b)
    assert list(frame["state"]) == ["kept in both", "only in A", "only in B", "in neither"]
    big_a = np.random.default_rng(0).random((300, 785)) < 0.3
    big_b = np.random.default_rng(1).random((300, 785)) < 0.3
    frame = charts.mask_difference_frame(big_a, big_b)
    assert frame["both"].sum() == int((big_a & big_b).sum())
    assert frame["only_a"].sum() == int((big_a & ~big_b).sum())
    assert frame["only_b"].sum() == int((~big_a & big_b).sum())


def test_sampled_structure_keeps_weights_at_their_inclusion_rates():
    from dashboard import backend

    alpha = [np.full((200, 101), 0.2), np.full((10, 201), 0.9)]
    draws = [backend.sample_structure(alpha, "inclusion_probability", seed=s) for s in range(20)]
    for layer, rate in ((0, 0.2), (1, 0.9)):
        assert np.mean([d[layer].mean() for d in draws]) == pytest.approx(rate, abs=0.005)
    assert backend.sample_structure(alpha, "signal_to_noise") is None


def test_receptive_fields_are_square_images_of_kept_weights():
    from dashboard import charts

    rng = np.random.default_rng(0)
    weights, mask = rng.normal(size=(5, 785)), rng.random((5, 785)) < 0.5
    frame = charts.receptive_field_frame(weights, mask, [1, 3], (28, 28))
    unit3 = frame[frame["unit"] == "unit 3"]
    assert len(unit3) == 784
    assert unit3["weight"].to_numpy() == pytest.approx(np.where(mask[3, :-1], weights[3, :-1], 0.0))
    spec = charts.receptive_fields(weights, mask, [1, 3], (28, 28)).to_dict()
    assert spec["spec"]["width"] == spec["spec"]["height"]


@pytest.mark.slow  # 2.5 s CPU
def test_inclusion_page_compares_two_masks_and_shows_receptive_fields(store):
    at = open_app(store["mnist"])
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)
    assert at.radio(key="mask_b_kind").value == "a sampled structure"
    assert any("receptive fields" in json.dumps(s.get("title", "")) for s in chart_specs(at))
    at.radio(key="mask_b_kind").set_value("a second threshold").run()
    at.slider(key="mask_b_threshold").set_value(0.9).run()
    assert_clean(at)
    from core.runs import load_run

    model = load_run(store["mnist"]).model
    kept_b = sum(int(m.sum()) for m in model.keep_masks(0.9))
    assert any(f"B keeps {kept_b}." in c for c in texts(at.caption)), texts(at.caption)


# --- the live playground -------------------------------------------------------------------------


def test_playground_training_draws_while_it_trains():
    import time

    from dashboard import playground_training

    job = playground_training.PlaygroundTraining(
        {
            "dataset": "toy-sine-gaps",
            "hidden": [8],
            "dataset_params": {"noise": 0.05},
            "train": {"epochs": 200, "batch_size": 500},
        },
        every=20,
    )
    epochs = []
    job.start()
    while job.running:
        picture = job.snapshot()
        if picture is not None and (not epochs or epochs[-1] != picture["epoch"]):
            epochs.append(picture["epoch"])
        time.sleep(0.002)  # a bare loop holds the interpreter: the training thread crawled (78 s for 200 epochs)
    job.join()
    assert job.error is None and job.done
    final = job.snapshot()
    assert final["epoch"] == 200 and len(epochs) >= 2  # pictures came during training, not only at the end
    assert final["mean"].shape == (len(final["x_plot"]),)
    assert np.all(final["total_std"] >= final["epistemic_std"] - 1e-9)
    assert [m.shape for m in final["masks"]] == [(8, 2), (1, 9)]


def test_playground_cancel_stops_quickly():
    import time

    from dashboard import playground_training

    job = playground_training.PlaygroundTraining(
        {"dataset": "two-moons", "hidden": [8], "train": {"epochs": 3000, "batch_size": 500}}, every=50
    ).start()
    while job.snapshot() is None:
        time.sleep(0.01)
    job.cancel()
    job.join(timeout=10)
    assert job.done and not job.running and job.error is None
    assert job.snapshot()["epoch"] < 3000


def test_playground_has_its_first_picture_when_start_returns_and_trains_after_it_is_drawn():
    """The page draws the untrained fit in its first run; the training waits for that picture
    (at most hold_seconds) so the two do not compete for the interpreter."""
    import time

    from dashboard import playground_training

    job = playground_training.PlaygroundTraining(
        {"dataset": "toy-sine-gaps", "hidden": [8], "train": {"epochs": 100, "batch_size": 500}},
        every=10,
        hold_seconds=60,
    ).start()
    picture = job.snapshot()
    assert picture is not None and picture["epoch"] == 0 and picture["mean"].shape == (len(picture["x_plot"]),)
    time.sleep(0.5)
    assert job.snapshot() is picture and job.running  # held: no epoch before the picture is drawn
    job.first_picture_drawn()
    job.join(timeout=60)
    assert job.done and job.error is None and job.snapshot()["epoch"] == 100


@pytest.mark.slow  # playground trainings: 3.5 s CPU
def test_playground_training_of_a_closed_tab_stops_and_a_present_one_finishes(monkeypatch):
    """Nothing keeps a playground fit: once its browser session is gone (for ABANDONED_SECONDS) the
    training stops; a session that comes back within the grace keeps it."""
    import time

    from dashboard import playground_training

    monkeypatch.setattr(playground_training.PlaygroundTraining, "ABANDONED_SECONDS", 0.3)
    monkeypatch.setattr(playground_training.PlaygroundTraining, "PRESENCE_CHECK_SECONDS", 0.05)
    values = {"dataset": "two-moons", "hidden": [8], "train": {"epochs": 100000, "batch_size": 500}}
    gone = playground_training.PlaygroundTraining(values, every=500, present=lambda: False).start()
    gone.first_picture_drawn()
    gone.join(timeout=30)
    assert gone.done and not gone.running and gone.abandoned and gone.error is None
    assert gone.snapshot()["epoch"] < 100000
    # away for one check, back before the grace ends: trains to the end
    answers = iter([True, False] + [True] * 10**6)
    values = dict(values, train={"epochs": 300, "batch_size": 500})
    back = playground_training.PlaygroundTraining(values, every=100, present=lambda: next(answers)).start()
    back.first_picture_drawn()
    back.join(timeout=60)
    assert back.done and not back.abandoned and back.snapshot()["epoch"] == 300
    started = time.monotonic()
    steady = playground_training.PlaygroundTraining(values, every=100, present=None).start()  # no server: never stops
    steady.first_picture_drawn()
    steady.join(timeout=60)
    assert steady.snapshot()["epoch"] == 300 and not steady.abandoned and time.monotonic() - started < 60


def test_playground_too_large_a_network_is_a_message_not_a_thread():
    from dashboard import playground_training

    job = playground_training.PlaygroundTraining(
        {"dataset": "two-moons", "hidden": [100, 100], "train": {"epochs": 10, "batch_size": 500}}
    ).start()
    job.join(timeout=5)
    assert job.done and not job.running and job.snapshot() is None
    assert "widths 100,100 need 10,602 weights" in job.error and "widths up to 67,67 fit" in job.error


def test_network_graph_draws_each_kept_connection():
    from dashboard import charts

    masks = [np.array([[1, 0, 1], [0, 1, 0]], dtype=bool), np.array([[1, 1, 1]], dtype=bool)]
    nodes, edges = charts.network_graph_frames(masks)
    assert len(nodes) == 2 + 2 + 1
    assert len(edges) == 2 + 2  # bias columns are not edges


@pytest.mark.slow  # two playground trainings
def test_playground_page_restarts_when_the_prior_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("views/playground.py").run()
    assert_clean(at)
    at.slider(key="play_epochs").set_value(100).run()  # the slider's least: the restart is what is tested
    first = at.session_state["playground_job"][1]
    first.join(timeout=60)
    at.run()
    assert_clean(at)
    assert any("done: epoch 100/100" in (p.proto.text or "") for p in at.get("progress"))
    at.slider(key="play_psi").set_value(0.5).run()
    second = at.session_state["playground_job"][1]
    assert second is not first and second.config.family_options["prior_inclusion"] == 0.5
    second.join(timeout=60)
    assert second.error is None


def test_a_shared_link_does_not_hand_over_someone_elses_training(held_training, store, monkeypatch):
    at = open_app(store["moons"])
    at.text_input(key="train_hidden").input("5").run()
    at.button(key="train_button").click().run()
    token = at.query_params["train"]
    token = token[0] if isinstance(token, list) else token
    # the classmate's session has the same address (as behind a school's NAT): it sees the progress only
    other = open_app(params={"train": token})
    assert_clean(other)
    assert other.session_state["training_worker"] is at.session_state["training_worker"]
    assert not [b for b in other.button if b.key == "cancel_training"]


def test_inclusion_threshold_step_swaps_chart_data_and_keeps_every_spec(store):
    """The threshold target: on a threshold step the browser only swaps the data of the
    histogram and of the mask pictures (their specs stay), and the pictures follow the threshold."""
    at = open_app(store["mnist"])
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)

    def charts():
        return [c for kind in ("arrow_vega_lite_chart", "vega_lite_chart") for c in at.get(kind)]

    before = [(c.proto.spec, {d.name: bytes(d.data.data) for d in c.proto.datasets}) for c in charts()]
    at.slider(key=f"widget:threshold:{store['mnist']}").set_value(0.8).run()
    assert_clean(at)
    after = [(c.proto.spec, {d.name: bytes(d.data.data) for d in c.proto.datasets}) for c in charts()]
    assert len(after) == len(before) >= 4
    assert [spec for spec, _ in after] == [spec for spec, _ in before]
    changed = [name for (_, old), (_, new) in zip(before, after) for name in new if new[name] != old.get(name)]
    assert "threshold_rule" in changed and changed.count("picture") >= 3
    assert all(len(spec) < 60_000 for spec, _ in after)  # pictures, not thousands of rectangles


def test_the_threshold_slider_says_why_it_is_off_in_each_mode_that_ignores_it():
    from types import SimpleNamespace

    from dashboard import backend, state

    spec = SimpleNamespace(default=0.5)
    for mode in ("bma", "mean", "mpm", "mpm-mean", "prune"):
        reason = state.threshold_off_reason(mode, spec)
        if backend.mode_uses_slider(mode):
            assert reason is None, mode
        elif mode in backend.DEFAULT_CUT_MODES:
            assert reason == f"Mode {mode} cuts at the family's default 0.5 (the median probability model).", mode
        else:
            assert reason == f"Mode {mode} uses every weight.", mode
    assert state.threshold_off_reason("prune", spec) is None  # prune is what the slider tunes
