"""Playback and the fixed family colours, on the pages and in the
pure figure builders."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.test_dashboard_app import APP, TIMEOUT, assert_clean, fresh_caches  # noqa: F401


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Tiny runs: two-moons lbbnn (3 epochs, 1 of them warm start) and bnn, mnist-small (too many
    weights for masks), a regression toy, and a run stored before snapshots were recorded."""
    cache = tmp_path_factory.mktemp("bnn-cache")
    previous = os.environ.get("BNN_CACHE_DIR")
    os.environ["BNN_CACHE_DIR"] = str(cache)
    from core.runs import RunConfig, train_run
    from core.runs.store import MANIFEST, SNAPSHOTS

    runs = {
        "moons": train_run(
            RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 3, "warm_start_epochs": 1})
        ).run_id,
        "moons_bnn": train_run(RunConfig(dataset="two-moons", method="bnn", hidden=(8,), train={"epochs": 2})).run_id,
        "mnist": train_run(
            RunConfig(dataset="mnist-small", hidden=(8,), train={"epochs": 2, "batch_size": 500})
        ).run_id,
        "sine": train_run(RunConfig(dataset="toy-sine-gaps", method="bnn", hidden=(8,), train={"epochs": 2})).run_id,
    }
    old = train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2}, seed=5))
    (old.path / SNAPSHOTS).unlink()  # as written before snapshots were recorded
    manifest = json.loads((old.path / MANIFEST).read_text())
    del manifest["files"][SNAPSHOTS]
    (old.path / MANIFEST).write_text(json.dumps(manifest))
    runs["old"] = old.run_id
    yield runs
    if previous is None:
        os.environ.pop("BNN_CACHE_DIR", None)
    else:
        os.environ["BNN_CACHE_DIR"] = previous


def open_page(run_id: str, page: str, params: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run_id
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.run()
    return at.switch_page(page).run()


def chart_elements(at: AppTest) -> list:
    return [c for kind in ("arrow_vega_lite_chart", "vega_lite_chart") for c in at.get(kind)]


def spec_of(chart) -> dict:
    """A chart element's spec with its datasets back inline (Streamlit ships them as Arrow beside it)."""
    import pyarrow as pa

    spec = json.loads(chart.proto.spec)
    datasets = spec.setdefault("datasets", {})
    for dataset in chart.proto.datasets:
        datasets[dataset.name] = pa.ipc.open_stream(dataset.data.data).read_all().to_pandas().to_dict("records")
    return spec


def inline_rows(spec: dict, data_name: str) -> list[dict]:
    return spec.get("datasets", {}).get(data_name, [])


def find(at: AppTest, text: str) -> list[dict]:
    """Specs whose title mentions `text`."""
    return [s for s in (spec_of(c) for c in chart_elements(at)) if text in json.dumps(s.get("title", ""))]


def mark_colours(spec) -> set[str]:
    """Every colour a mark of the spec is drawn in."""
    found = set()
    if isinstance(spec, dict):
        mark = spec.get("mark")
        if isinstance(mark, dict) and isinstance(mark.get("color"), str):
            found.add(mark["color"])
        for value in spec.values():
            found |= mark_colours(value)
    elif isinstance(spec, list):
        for value in spec:
            found |= mark_colours(value)
    return found


def playback_state(at: AppTest, run_id: str) -> tuple[int, dict, dict]:
    """The epoch on the slider, the histogram spec and the density-over-epochs spec."""
    epoch = at.slider(key=f"playback_epoch:{run_id}").value
    (histograms,) = [s for s in find(at, "at epoch") if "concat" in s]
    (density,) = find(at, "density over the epochs")
    return epoch, histograms, density


def marker_epoch(density: dict) -> int:
    (rule,) = [layer for layer in density["layer"] if layer["mark"].get("type") == "rule"]
    return inline_rows(density, rule["data"]["name"])[0]["epoch"]


def histogram_counts(histograms: dict) -> list[list[int]]:
    """Per layer, the bars' counts (their data inline in the panel, or a named dataset)."""

    def rows(panel: dict) -> list[dict]:
        data = panel.get("data") or panel["layer"][0]["data"]
        return data["values"] if "values" in data else inline_rows(histograms, data["name"])

    return [[row["count"] for row in rows(panel)] for panel in histograms["concat"]]


# --- the control ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # 3 s CPU
def test_epoch_slider_changes_the_histograms_marker_and_address(store):
    from core.runs import load_run

    snapshots = load_run(store["moons"]).snapshots()
    at = open_page(store["moons"], "views/inclusion.py")
    assert_clean(at)
    epoch, histograms, density = playback_state(at, store["moons"])
    assert epoch == 4 and marker_epoch(density) == 4  # opens on the trained model
    assert histogram_counts(histograms) == snapshots.histogram[3].tolist()
    at.slider(key=f"playback_epoch:{store['moons']}").set_value(1).run()
    assert_clean(at)
    epoch, histograms, density = playback_state(at, store["moons"])
    assert epoch == 1 and marker_epoch(density) == 1
    assert histogram_counts(histograms) == snapshots.histogram[0].tolist()
    assert snapshots.histogram[0].tolist() != snapshots.histogram[3].tolist()
    assert at.query_params["epoch"] in ("1", ["1"])
    assert any("warm-start" in c.value and "Warm start" in c.value for c in at.caption)
    # a small net: its masks at the page's threshold, replayed from the recorded statistic
    masks = [
        s
        for s in (spec_of(c) for c in chart_elements(at))
        if "at epoch 1" in json.dumps(s.get("title", "")) and "concat" not in s
    ]
    assert len(masks) == 2
    # each mask is a picture whose tooltip counts its kept weights
    kept = sum(
        int(re.search(r"kept (\d+) of", row["about"]).group(1))
        for spec in masks
        for row in inline_rows(spec, "picture")
        if isinstance(row.get("url"), str)
    )
    _, replayed = snapshots.masks_at(0, at.slider(key=f"widget:threshold:{store['moons']}").value)
    assert kept == sum(int(m.sum()) for m in replayed)


@pytest.mark.slow  # 3 s CPU
def test_a_link_with_an_epoch_opens_there_and_a_bad_one_is_a_warning(store):
    at = open_page(store["moons"], "views/inclusion.py", {"epoch": "3"})
    assert_clean(at)
    assert playback_state(at, store["moons"])[0] == 3
    # the link opened that run at that epoch; the next run opens on its own last epoch, without a word
    at.session_state["selected_run_id"] = store["moons_bnn"]
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)
    assert playback_state(at, store["moons_bnn"])[0] == 2 and not at.warning
    bad = open_page(store["moons"], "views/inclusion.py", {"epoch": "abc", "page": "inclusion"})
    assert not bad.exception and playback_state(bad, store["moons"])[0] == 4
    # said once, on the page the link opened (here the first run, before the switch above)
    first = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    first.session_state["selected_run_id"] = store["moons"]
    first.query_params.update({"epoch": "abc", "page": "inclusion"})
    first.run()
    assert not first.exception and playback_state(first, store["moons"])[0] == 4
    assert any("epoch" in w.value and "'abc'" in w.value for w in first.warning)


@pytest.mark.slow  # plays every epoch: 3 s CPU
def test_play_starts_from_the_first_epoch_advances_and_stops_at_the_end(store):
    from dashboard import playback

    run_id = store["moons"]
    at = open_page(run_id, "views/inclusion.py")
    at.button(key=f"playback_button:{run_id}").click().run()
    assert_clean(at)
    assert at.session_state[f"playback_playing:{run_id}"] is True
    assert at.slider(key=f"playback_epoch:{run_id}").value == 1  # at the end, Play starts again
    assert at.button(key=f"playback_button:{run_id}").label == "Pause"
    for expected in (2, 3, 4):
        at.session_state[f"playback_frame:{run_id}"] = 0.0  # a frame is due
        at.run()
        assert at.slider(key=f"playback_epoch:{run_id}").value == expected
        assert marker_epoch(playback_state(at, run_id)[2]) == expected
    at.session_state[f"playback_frame:{run_id}"] = 0.0
    at.run()
    assert at.session_state[f"playback_playing:{run_id}"] is False
    assert at.button(key=f"playback_button:{run_id}").label == "Play"
    assert playback.next_epoch(4, 4, 1) is None


def test_large_nets_replay_histograms_and_density_but_no_masks(store):
    at = open_page(store["mnist"], "views/inclusion.py")
    assert_clean(at)
    epoch, histograms, density = playback_state(at, store["mnist"])
    assert epoch == 2 and len(histograms["concat"]) == 2
    assert any("small networks only" in c.value for c in at.caption)


def test_a_run_trained_before_snapshots_says_so(store):
    at = open_page(store["old"], "views/inclusion.py")
    assert_clean(at)
    assert any("trained before snapshots were recorded" in i.value for i in at.info)
    assert not find(at, "density over the epochs")


# --- pure builders -------------------------------------------------------------------------------------------


def test_next_epoch_and_step_size():
    from dashboard import playback

    assert [playback.next_epoch(e, 5, 1) for e in (1, 4, 5)] == [2, 5, None]
    assert playback.next_epoch(3, 5, 4) == 5  # the last epoch is always shown
    assert playback.step_size(30) == 1 and playback.step_size(3000) == 50


def test_snapshot_histograms_draw_the_counts_on_fixed_axes():
    from dashboard import charts

    edges = np.linspace(0, 1, 5)
    counts = np.array([[3, 0, 1, 6], [0, 2, 2, 0]])
    spec = charts.snapshot_histograms(
        counts, edges, "p", ["a", "b"], threshold=0.5, colour="#E69F00", max_count=40
    ).to_dict()
    assert histogram_counts(spec) == counts.tolist()
    bars = spec["concat"][0]["layer"][0]
    assert bars["mark"]["color"] == "#E69F00"
    assert bars["encoding"]["y"]["scale"]["domain"] == [0, 40]
    assert bars["encoding"]["x"]["scale"]["domain"] == [0.0, 1.0]
    frame = charts.snapshot_histogram_frame(counts, edges, ["a", "b"])
    assert frame.groupby("layer")["count"].sum().to_dict() == {"a": 10, "b": 4}
    log_edges = [0.0, *np.geomspace(1e-3, 1e3, 4)]
    log_spec = charts.snapshot_histograms(counts, log_edges, "snr", ["a", "b"]).to_dict()
    scale = log_spec["concat"][0]["layer"][0]["encoding"]["x"]["scale"]
    assert scale["type"] == "symlog" and scale["constant"] == pytest.approx(1e-3)
    with pytest.raises(ValueError):
        charts.snapshot_histogram_frame(counts[:, :3], edges, ["a", "b"])


def test_density_over_epochs_marks_the_epoch_and_shades_the_warm_start():
    from dashboard import charts

    density = np.array([[1.0, 1.0], [0.8, 0.5], [0.6, 0.4]])
    overall = np.array([1.0, 0.7, 0.55])
    spec = charts.density_over_epochs(
        density, overall, ["warm-start", "train", "train"], ["l1", "l2"], 2, colour="#0072B2"
    ).to_dict()
    marks = [layer["mark"] for layer in spec["layer"]]
    assert marks[0]["type"] == "rect" and marks[1] == {"type": "line", "color": "#0072B2", "strokeWidth": 2}
    assert marker_epoch(spec) == 2
    points = inline_rows(spec, spec["layer"][3]["data"]["name"])
    assert sorted(p["density"] for p in points) == [0.5, 0.7, 0.8]
    frame = charts.density_over_epochs_frame(density, overall, ["w", "t", "t"], ["l1", "l2"])
    assert frame[frame["layer"] == "all weights"]["density"].tolist() == overall.tolist()
    long = charts.density_over_epochs_frame(
        np.zeros((1000, 1)), np.zeros(1000), ["t"] * 1000, ["l1"], max_epochs=100, keep_epoch=555
    )
    epochs = long[long["layer"] == "l1"]["epoch"]
    assert len(epochs) <= 101 and {1, 555, 1000} <= set(epochs)


# --- one colour per family on every page ----------------------------------------------------------------


def test_family_colour_is_the_one_palette():
    from dashboard import charts

    assert charts.family_colour("bnn") == charts.FAMILY_COLOURS["bnn"]
    assert charts.family_colour("no-such-family") == charts.OTHER_FAMILY_COLOUR
    scale = charts.family_colour_scale(["x"], ["sparse-vd"]).to_dict()
    assert scale["range"] == [charts.FAMILY_COLOURS["sparse-vd"]]


@pytest.mark.parametrize("name,family", [("moons", "lbbnn"), ("moons_bnn", "bnn")])
def test_inclusion_and_pruning_draw_the_family_in_its_colour(store, name, family):
    from dashboard import charts

    colour = charts.FAMILY_COLOURS[family]
    others = set(charts.FAMILY_COLOURS.values()) - {colour, "#009E73"}  # green: the prior and the star
    at = open_page(store[name], "views/inclusion.py")
    assert_clean(at)
    (histogram,) = [
        spec_of(c)
        for c in chart_elements(at)
        if '"prior"' in c.proto.spec or (family == "bnn" and "concat" in spec_of(c) and "at epoch" not in c.proto.spec)
    ][:1]
    assert colour in mark_colours(histogram) and not mark_colours(histogram) & others
    _, playback_histograms, density = playback_state(at, store[name])
    assert colour in mark_colours(playback_histograms) and colour in mark_colours(density)
    at.switch_page("views/pruning.py").run()
    assert_clean(at)
    (curve,) = find(at, "vs density")
    assert colour in mark_colours(curve) and not mark_colours(curve) & others


def test_uncertainty_bands_are_in_the_family_colour(store):
    from dashboard import charts

    at = open_page(store["sine"], "views/uncertainty.py")
    assert_clean(at)
    (bands,) = find(at, "95% bands")
    assert charts.FAMILY_COLOURS["bnn"] in mark_colours(bands)


def test_playground_figures_take_the_family_colour():
    from dashboard import charts

    colour = charts.FAMILY_COLOURS["horseshoe"]
    masks = [np.ones((3, 3), dtype=bool), np.ones((1, 4), dtype=bool)]
    assert colour in mark_colours(charts.network_graph(masks, colour=colour).to_dict())
    grid = np.linspace(0, 1, 5)
    bands = charts.regression_bands(grid, grid, grid * 0 + 0.1, grid * 0 + 0.2, grid, grid, colour=colour).to_dict()
    assert colour in mark_colours(bands)
    histogram = charts.statistic_histogram([np.linspace(0, 1, 10)], 0.5, "p", colour=colour).to_dict()
    assert colour in mark_colours(histogram)


def test_training_curves_take_the_family_colour_and_dash_the_phases():
    from dashboard import charts

    colour = charts.FAMILY_COLOURS["bnn"]
    history = [{"loss": 1.0, "density": 1.0, "phase": "warm-start"}, {"loss": 0.5, "density": 0.4, "phase": "train"}]
    spec = charts.training_curves(history, colour=colour).to_dict()
    for panel in spec["hconcat"]:
        assert mark_colours(panel) == {colour}
        assert panel["layer"][0]["encoding"]["strokeDash"]["field"] == "phase"


def test_play_shows_every_epoch_even_when_each_run_comes_later_than_a_frame(store, monkeypatch):
    """On a loaded server the run after Play can come more than a frame after the click: the first
    epoch is still drawn before the next one (CI at 95431ea saw Play jump straight to the last epoch)."""
    from dashboard import playback

    monkeypatch.setattr(playback, "PLAY_SECONDS", 1e-9)  # every run is later than a frame
    run_id = store["moons"]
    at = open_page(run_id, "views/inclusion.py")
    at.button(key=f"playback_button:{run_id}").click().run()
    assert_clean(at)
    shown = [at.slider(key=f"playback_epoch:{run_id}").value]
    while at.session_state[f"playback_playing:{run_id}"] and len(shown) < 10:
        at.run()
        shown.append(at.slider(key=f"playback_epoch:{run_id}").value)
    assert shown == [1, 2, 3, 4, 4]  # each epoch drawn once, then the timer stops at the last
