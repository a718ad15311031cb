"""Chart defects a user saw: layout, scales and ranges that a user saw wrong."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from dashboard import backend, charts
from tests.test_dashboard_figures import _find, _rows_with


def test_three_layer_histograms_wrap_instead_of_running_off_the_page():
    rng = np.random.default_rng(0)
    stats = [rng.uniform(size=(4, 5)) for _ in range(3)]
    spec = charts.statistic_histogram(stats, 0.5, "inclusion probability").to_dict()
    assert len(spec["concat"]) == 3
    assert spec["columns"] == charts.HISTOGRAMS_PER_ROW
    # two 320-px charts and their axes fit a 1400-px window beside the sidebar
    assert spec["columns"] * charts.CHART_WIDTH <= 700


def test_colour_legends_sit_below_their_heatmaps():
    mask = np.eye(4, 5)
    for chart in (
        charts.mask_heatmap(mask, "m"),
        charts.weight_heatmap(mask - 0.5, "w"),
        charts.kept_per_input_image(np.ones((3, 17)), (4, 4)),
    ):
        legends = _find(chart.to_dict(), lambda d: "legend" in d and isinstance(d["legend"], dict))
        assert legends and all(d["legend"]["orient"] == "bottom" for d in legends)


def test_pixel_map_is_square_for_a_square_image():
    spec = charts.kept_per_input_image(np.ones((3, 28 * 28 + 1)), (28, 28)).to_dict()
    assert spec["width"] == spec["height"]
    assert spec["autosize"]["type"] == "pad"  # Streamlit's "fit" would squeeze it to make room for the legend
    x, y = spec["encoding"]["x"]["scale"]["domain"], spec["encoding"]["y"]["scale"]["domain"]
    assert x == [0, 28] and y == [0, 28]
    (rows,) = _rows_with(spec, "kept")
    assert len(rows) == 784 and all(r["col_end"] - r["col"] == 1 for r in rows)


def test_class_probability_layers_share_one_unpadded_unit_scale():
    probs = np.array([[0.97, 0.03], [0.9, 0.1]])
    spec = charts.class_probability_bars(probs, ["a", "b"], doubt_level=0.95).to_dict()
    y_encodings = [layer["encoding"]["y"] for layer in spec["layer"]]
    assert len(y_encodings) == 3
    for y in y_encodings:
        assert y["scale"]["domain"] == [0, 1] and y["scale"]["nice"] is False
    assert y_encodings[0]["axis"]["labelFlush"] is False  # end labels where their values are
    (rule,) = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert spec["datasets"][rule["data"]["name"]] == [{"probability": 0.95}]


def test_ecdf_starts_at_zero_entropy_with_zero_mass():
    frame = charts.ecdf_frame({"a": np.array([0.3, 0.1, 0.2])})
    assert (frame["entropy"].iloc[0], frame["ecdf"].iloc[0]) == (0.0, 0.0)
    assert list(frame["ecdf"]) == pytest.approx([0, 1 / 3, 2 / 3, 1])
    spec = charts.entropy_ecdf({"a": np.array([0.3, 0.1])}, max_entropy=math.log(10)).to_dict()
    assert spec["encoding"]["x"]["scale"]["nice"] is False
    assert spec["encoding"]["x"]["axis"]["labelFlush"] is False  # the 0 label sits where the curves start


def test_threshold_range_covers_the_family_default_above_the_data():
    # bnn after a short training: every |mu|/sigma below 0.53, default cut 0.83
    spec = SimpleNamespace(name="signal_to_noise", low=0.0, high=math.inf, default_threshold=0.83, keep="above")
    stats = [np.array([[0.1, 0.53], [0.2, 0.4]])]
    limits = backend.threshold_range(spec, stats)
    assert limits.default == 0.83
    assert limits.low <= 0.0 and limits.high > 0.83
    # the default is a real position on the slider, not clipped to its end
    assert limits.clip(limits.default) == 0.83 < limits.high
