"""The Inclusion page's "Active paths" section and the Uncertainty page's "Local explanation" panel under
AppTest, on a tiny two-moons run with input skip and a tiny mnist-small run: the figures' data read
back from the page equal the run's own arrays (masks, active paths, densities, explanations)."""

from __future__ import annotations

import base64
import json
import os
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.test_dashboard_app import APP, TIMEOUT, assert_clean, fresh_caches  # noqa: F401

DTYPES = {
    "i1": np.int8,
    "u1": np.uint8,
    "i2": np.int16,
    "u2": np.uint16,
    "i4": np.int32,
    "u4": np.uint32,
    "f4": np.float32,
    "f8": np.float64,
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bnn-cache")
    previous = os.environ.get("BNN_CACHE_DIR")
    os.environ["BNN_CACHE_DIR"] = str(cache)
    from core.runs import RunConfig, train_run

    runs = {
        "moons": train_run(
            RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2}, family_options={"input_skip": True})
        ).run_id,
        "mnist": train_run(
            RunConfig(dataset="mnist-small", hidden=(8,), train={"epochs": 1, "batch_size": 500})
        ).run_id,
    }
    yield runs
    if previous is None:
        os.environ.pop("BNN_CACHE_DIR", None)
    else:
        os.environ["BNN_CACHE_DIR"] = previous


def open_page(run_id: str, page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run_id
    at.run()
    at.switch_page(page).run()
    assert_clean(at)
    return at


def array(value) -> np.ndarray:
    """A figure's array as shipped: a plain list or Plotly's typed array ({dtype, bdata, shape})."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=DTYPES[value["dtype"]])
        shape = value.get("shape")
        if shape:
            flat = flat.reshape([int(s) for s in str(shape).split(",")])
        return flat
    return np.asarray(value, dtype=np.float64)


def figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def figure_titled(at: AppTest, words: str) -> dict:
    matches = [f for f in figures(at) if words in json.dumps(f.get("layout", {}).get("title", ""))]
    assert len(matches) == 1, [f.get("layout", {}).get("title") for f in figures(at)]
    return matches[0]


def threshold_of(at: AppTest) -> float:
    (value,) = [s.value for s in at.slider if s.label.startswith("threshold on")]
    return float(value)


@pytest.mark.slow  # trains two tiny runs (about 4 s CPU) and drives the pages
def test_inclusion_page_draws_full_masks_the_graph_and_both_densities(store):
    from core.runs import load_run
    from core.runs.sparsity_views import active_path_densities
    from dashboard import charts
    from dashboard.charts import sparsity

    run = load_run(store["moons"])
    at = open_page(store["moons"], "views/inclusion.py")
    threshold = threshold_of(at)
    masks = [m.numpy() for m in run.masks(threshold)]
    active = [m.numpy() for m in run.active_paths(threshold)]
    statistics = [s.detach().numpy() for s in run.model.native_statistics()]
    densities = active_path_densities(run, threshold)
    (table,) = [d.value for d in at.dataframe if "active-path density" in d.value.columns]
    np.testing.assert_allclose(table["density"], list(densities["layer_density"]) + [densities["density"]])
    np.testing.assert_allclose(
        table["active-path density"], list(densities["active_layer_density"]) + [densities["active_density"]]
    )
    for layer in range(len(masks)):
        at.selectbox(key="full_mask_layer").set_value(layer).run()
        assert_clean(at)
        (heatmap,) = figure_titled(at, charts.layer_label(layer, statistics[layer].shape))["data"]
        z = array(heatmap["z"])
        np.testing.assert_array_equal(z, sparsity.mask_states(masks[layer], active[layer]))
        np.testing.assert_allclose(array(heatmap["customdata"]), statistics[layer], rtol=1e-6)
        shapes = figure_titled(at, charts.layer_label(layer, statistics[layer].shape))["layout"].get("shapes", [])
        assert [s["x0"] for s in shapes] == ([masks[0].shape[0] - 0.5] if layer == 1 else [])  # input skip
    graph = figure_titled(at, "active paths")
    drawn = {
        trace["name"]: sum(1 for v in trace["x"] if v is None)
        for trace in graph["data"]
        if trace.get("mode") == "lines"
    }
    edges = sparsity.graph_edges(active)
    assert drawn.get("active weight", 0) == sum(not e[4] for e in edges)
    assert drawn.get("input-skip weight", 0) == sum(e[4] for e in edges)  # the run has input skip
    width = active[0].shape[0]  # the output layer reads the 8 hidden units, then the 2 inputs
    assert int(active[1][:, width : width + 2].sum()) == drawn.get("input-skip weight", 0)
    assert not [f for f in figures(at) if "reach an output" in json.dumps(f["layout"].get("title", ""))]
    # another threshold: the page's arrays follow it
    at.slider(key=[s.key for s in at.slider if s.label.startswith("threshold on")][0]).set_value(0.9).run()
    assert_clean(at)
    (table,) = [d.value for d in at.dataframe if "active-path density" in d.value.columns]
    assert table["active-path density"].iloc[-1] == pytest.approx(active_path_densities(run, 0.9)["active_density"])


@pytest.mark.slow
def test_images_show_the_pixels_that_reach_an_output_and_explanations_as_a_heat_map(store):
    from core.runs import load_run
    from dashboard.charts import sparsity

    run = load_run(store["mnist"])
    at = open_page(store["mnist"], "views/inclusion.py")
    threshold = threshold_of(at)
    active = [m.numpy() for m in run.active_paths(threshold)]
    (pixels,) = figure_titled(at, "reach an output")["data"]
    counts = sparsity.active_outgoing_per_input(active)
    np.testing.assert_array_equal(array(pixels["z"]).ravel(), counts)
    assert array(pixels["z"]).shape == (28, 28)
    assert any(f"{int((counts > 0).sum())} of 784 pixels" in c.value for c in at.caption)
    # the 784 x 9 first layer is wider than the graph's limit: said, not drawn
    assert any(f"at most {sparsity.MAX_GRAPH_UNITS} units" in c.value for c in at.caption)

    at.switch_page("views/uncertainty.py").run()
    assert_clean(at)
    caption = [c.value for c in at.caption if c.value.startswith("Test example 0:")][0]
    samples, shown = int(re.search(r"R = (\d+) draws", caption).group(1)), threshold_of(at)
    explained = run.explain(run.dataset().x_test[0], threshold=shown, samples=samples, seed=0)
    (heatmap,) = [f for f in figures(at) if f["data"][0].get("type") == "heatmap"][0]["data"]
    median = np.quantile(explained.contributions, 0.5, axis=0)
    np.testing.assert_allclose(array(heatmap["z"]).ravel(), median, rtol=1e-6, atol=1e-9)


@pytest.mark.slow
def test_tabular_explanation_bars_follow_the_chosen_example(store):
    from core.runs import load_run

    run = load_run(store["moons"])
    at = open_page(store["moons"], "views/uncertainty.py")
    for index in (0, 7):
        at.number_input(key="explain_index").set_value(index).run()
        assert_clean(at)
        caption = [c.value for c in at.caption if c.value.startswith(f"Test example {index}:")][0]
        samples, threshold = int(re.search(r"R = (\d+) draws", caption).group(1)), threshold_of(at)
        explained = run.explain(run.dataset().x_test[index], threshold=threshold, samples=samples, seed=0)
        low, median, high = np.quantile(explained.contributions, [0.025, 0.5, 0.975], axis=0)
        (bars,) = [f for f in figures(at) if f["data"][0].get("type") == "bar"][0]["data"]
        order = np.argsort(-np.abs(median), kind="stable")
        assert bars["y"] == [f"x{j}" for j in order]
        x = array(bars["x"])
        np.testing.assert_allclose(x, median[order], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(x + array(bars["error_x"]["array"]), high[order], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(x - array(bars["error_x"]["arrayminus"]), low[order], rtol=1e-6, atol=1e-9)
        value = np.median(explained.values)
        assert f"= {value:.4g} (median" in caption


@pytest.fixture(scope="module")
def image_server(tmp_path_factory, browser):
    """A dashboard server over one tiny mnist-small run."""
    from tests.test_browser import serve, train_runs

    cache = tmp_path_factory.mktemp("bnn-sparsity")
    train_runs(cache, "[RunConfig(dataset='mnist-small', hidden=(8,), train={'epochs': 1, 'batch_size': 500})]")
    with serve(cache) as running:
        yield running


def plotly_shapes(page) -> list[list[int]]:
    """Per Plotly graph on the page: the first trace's z as plotly.js computed it to draw, (rows, columns)."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')]
        .map(gd => {
            const z = gd.calcdata && gd.calcdata[0] && gd.calcdata[0][0] && gd.calcdata[0][0].z;
            return (z && z.length && z[0] && z[0].length) ? [z.length, z[0].length] : [];
        })""")


@pytest.mark.browser
@pytest.mark.slow  # a server and Chromium: about 40 s
def test_full_resolution_masks_and_explanations_render_in_chromium(image_server, browser):
    from tests.test_browser import RENDER_TIMEOUT, assert_no_traceback

    url, log = image_server
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{url}/inclusion")
    page.get_by_role("heading", name="Active paths", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    selector = "[data-testid='stMain'] .js-plotly-plot .hm image"  # a drawn heat map
    page.wait_for_function(f'document.querySelectorAll("{selector}").length >= 2', timeout=RENDER_TIMEOUT)
    shapes = plotly_shapes(page)
    assert [8, 785] in shapes and [28, 28] in shapes, shapes  # one cell per weight; the image grid
    assert_no_traceback(page)
    page.goto(f"{url}/uncertainty")
    page.get_by_role("heading", name="Local explanation", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    page.wait_for_function(f'document.querySelectorAll("{selector}").length >= 1', timeout=RENDER_TIMEOUT)
    assert [28, 28] in plotly_shapes(page)
    assert_no_traceback(page)
    page.close()
    assert "Traceback" not in log.read_text()


@pytest.mark.slow
def test_a_large_network_is_explained_only_on_request(store, monkeypatch):
    from dashboard import sparsity_panels

    monkeypatch.setattr(sparsity_panels, "EXPLAIN_AUTO_WEIGHTS", 10)  # the tiny run counts as large
    computed = []
    original = sparsity_panels.local_explanation
    monkeypatch.setattr(sparsity_panels, "local_explanation", lambda *a, **k: computed.append(a) or original(*a, **k))
    at = open_page(store["moons"], "views/uncertainty.py")
    assert not at.toggle(key="explain_on").value and computed == []
    assert not [f for f in figures(at) if f["data"][0].get("type") == "bar"]
    assert any("Switch it on" in c.value for c in at.caption)
    at.toggle(key="explain_on").set_value(True).run()
    assert_clean(at)
    assert len(computed) == 1 and [f for f in figures(at) if f["data"][0].get("type") == "bar"]
