"""dashboard.raster (weight matrices as pictures in one image mark) and charts.with_threshold_rules:
the pictures show what the old rectangle heatmaps showed, and a threshold step changes only data."""

from __future__ import annotations

import base64
import io
import json

import altair as alt
import numpy as np
import pytest
from PIL import Image

from dashboard import charts, raster


def decode_png(data: bytes) -> np.ndarray:
    """A PNG file as a (height, width, 3) array, decoded by Pillow (checks the signature and the CRCs);
    the file must be 8-bit RGB, as raster.png_bytes promises."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as image:
        image.verify()  # every chunk's CRC
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG" and image.mode == "RGB"
        return np.asarray(image).copy()


def picture_of(spec: dict, panel: int | None = None) -> np.ndarray:
    rows = [r for r in spec["datasets"]["picture"] if r.get("url") and (panel is None or r.get("panel") == panel)]
    (row,) = rows
    prefix = "data:image/png;base64,"
    assert row["url"].startswith(prefix)
    return decode_png(base64.b64decode(row["url"][len(prefix) :]))


def without_data(spec: dict) -> str:
    return json.dumps({k: v for k, v in spec.items() if k != "datasets"}, sort_keys=True)


def assert_valid(spec: dict) -> None:
    """Valid Vega-Lite (Altair's schema)."""
    kind = alt.TopLevelConcatSpec if "concat" in spec else alt.TopLevelLayerSpec
    kind.from_dict(spec, validate=True)


def test_png_round_trip_keeps_every_pixel():
    rgb = np.random.default_rng(0).integers(0, 256, size=(7, 13, 3), dtype=np.uint8)
    assert np.array_equal(decode_png(raster.png_bytes(rgb)), rgb)
    with pytest.raises(ValueError, match="height, width, 3"):
        raster.png_bytes(np.zeros((4, 4), dtype=np.uint8))


def test_colour_ramp_hits_the_scheme_stops_and_interpolates_between_them():
    stops = raster.scheme_stops("greys")
    n = len(stops)
    at_stops = raster.colour_ramp(np.linspace(0.0, 1.0, n), "greys", 0.0, 1.0)
    assert np.array_equal(at_stops, stops.astype(np.uint8))
    middle = raster.colour_ramp(np.array([0.5 / (n - 1)]), "greys", 0.0, 1.0)[0]
    assert np.array_equal(middle, np.round((stops[0] + stops[1]) / 2).astype(np.uint8))
    # clamped at both ends, on any domain
    ends = raster.colour_ramp(np.array([-5.0, 5.0]), "redblue", -2.0, 2.0)
    assert np.array_equal(ends, raster.scheme_stops("redblue")[[0, -1]].astype(np.uint8))


@pytest.mark.parametrize("shape", [(400, 785), (600, 401), (10, 601), (3, 5), (65, 130)])
def test_block_means_and_states_are_those_of_the_rectangle_heatmaps(shape):
    rng = np.random.default_rng(sum(shape))
    mask, other, weights = rng.random(shape) < 0.3, rng.random(shape) < 0.6, rng.normal(size=shape)
    for matrix in (mask, weights):
        frame = charts.block_frame(np.asarray(matrix, dtype=np.float64))
        means = raster.block_means(matrix)
        assert means.shape == (frame["row"].max() + 1, frame["col"].max() + 1)
        assert means.ravel() == pytest.approx(frame["mean"].to_numpy())
    frame = charts.mask_difference_frame(mask, other)
    states, counts = raster.block_states(mask, other)
    index = {state: k for k, state in enumerate(charts.MASK_STATES)}
    assert states.ravel().tolist() == [index[s] for s in frame["state"]]
    assert counts.tolist() == [
        int(mask[...].__and__(other).sum()),
        int((mask & ~other).sum()),
        int((~mask & other).sum()),
        int((~mask & ~other).sum()),
    ]


def test_mask_picture_has_one_pixel_per_weight_of_a_small_mask_in_the_legend_colours():
    mask = np.array([[1, 0, 1], [0, 0, 1]], dtype=bool)
    spec = raster.mask_picture(mask, "layer 1")
    assert_valid(spec)
    greys = raster.scheme_stops("greys").astype(np.uint8)
    picture = picture_of(spec)
    assert picture.shape == (2, 3, 3)
    assert np.array_equal(picture[mask], np.repeat(greys[-1:], mask.sum(), axis=0))  # kept: the scale's 1
    assert np.array_equal(picture[~mask], np.repeat(greys[:1], (~mask).sum(), axis=0))  # pruned: its 0
    legend = spec["layer"][1]["encoding"]["color"]
    assert legend["scale"] == {"domain": [0, 1], "scheme": "greys"} and legend["title"] == "kept"
    assert legend["legend"]["orient"] == "bottom"
    (image,) = [layer for layer in spec["layer"] if layer["mark"]["type"] == "image"]
    assert image["mark"]["smooth"] is False and spec["width"] == charts.CHART_WIDTH
    assert image["mark"]["width"] == {"expr": "width"}  # the picture fills the plot at any column width
    assert any("kept 3 of 6 weights" in (r.get("about") or "") for r in spec["datasets"]["picture"])


def test_large_masks_are_drawn_in_blocks_with_the_kept_fraction():
    mask = np.random.default_rng(1).random((400, 785)) < 0.25
    spec = raster.mask_picture(mask, "layer 1")
    picture = picture_of(spec)
    assert picture.shape == (charts.MAX_HEATMAP_CELLS, charts.MAX_HEATMAP_CELLS, 3)
    expected = raster.colour_ramp(raster.block_means(mask), "greys", 0.0, 1.0)
    assert np.array_equal(picture, expected)
    assert spec["layer"][1]["encoding"]["color"]["title"] == "kept fraction"
    assert len(json.dumps(spec)) < 20_000  # the rectangle heatmap's spec was 466 kB


def test_a_threshold_step_changes_the_pictures_data_not_their_specs():
    """Streamlit's browser side redraws a chart whose spec changed, and swaps the data of one whose
    spec did not: every picture must keep its spec when the mask changes."""
    rng = np.random.default_rng(2)
    alpha, weights = rng.random((50, 30)), rng.normal(size=(50, 30))
    first, second = alpha > 0.5, alpha > 0.7
    pairs = [
        (raster.mask_picture(first, "l"), raster.mask_picture(second, "l")),
        (
            raster.weight_picture(np.where(first, weights, 0), "l"),
            raster.weight_picture(np.where(second, weights, 0), "l"),
        ),
        (raster.mask_difference_picture(first, first, "l"), raster.mask_difference_picture(second, first, "l")),
        (
            raster.kept_per_input_picture(np.c_[first[:, :25], np.ones(50)], (5, 5)),
            raster.kept_per_input_picture(np.c_[second[:, :25], np.ones(50)], (5, 5)),
        ),
        (
            raster.receptive_field_pictures(
                np.c_[weights[:, :25], np.ones(50)], np.c_[first[:, :25], np.ones(50)], [0, 3], (5, 5)
            ),
            raster.receptive_field_pictures(
                np.c_[weights[:, :25], np.ones(50)], np.c_[second[:, :25], np.ones(50)], [0, 3], (5, 5)
            ),
        ),
    ]
    for before, after in pairs:
        assert_valid(before)
        assert without_data(before) == without_data(after)
        assert before["datasets"] != after["datasets"]


def test_weight_picture_is_symmetric_about_zero_and_its_legend_spans_the_drawn_values():
    weights = np.array([[0.5, -0.25], [0.0, 0.1]])
    spec = raster.weight_picture(weights, "w")
    legend_rows = [r for r in spec["datasets"]["picture"] if not r.get("url")]
    assert [r["value"] for r in legend_rows] == [-0.5, 0.5]
    picture = picture_of(spec)
    ramp = raster.scheme_stops("redblue").astype(np.uint8)
    assert np.array_equal(picture[0, 0], ramp[-1]) and np.array_equal(
        picture[0, 1], raster.colour_ramp(np.array([-0.25]), "redblue", -0.5, 0.5)[0]
    )


def test_kept_per_input_picture_is_square_and_counts_outgoing_kept_weights():
    mask = np.zeros((3, 17), dtype=bool)
    mask[:, 5] = True  # input pixel 5 (row 1, col 1) read by all three units
    mask[0, 0] = True
    spec = raster.kept_per_input_picture(mask, (4, 4))
    assert_valid(spec)
    assert spec["width"] == spec["height"] and spec["autosize"]["type"] == "pad"
    picture = picture_of(spec)
    viridis = raster.scheme_stops("viridis").astype(np.uint8)
    assert np.array_equal(picture[1, 1], viridis[-1]) and np.array_equal(picture[3, 3], viridis[0])
    assert [r["kept"] for r in spec["datasets"]["picture"] if not r.get("url")] == [0.0, 3.0]


def test_receptive_field_pictures_are_square_with_pruned_weights_white():
    rng = np.random.default_rng(3)
    weights, mask = rng.normal(size=(5, 785)), rng.random((5, 785)) < 0.5
    spec = raster.receptive_field_pictures(weights, mask, [1, 3], (28, 28))
    assert_valid(spec)
    assert [p["title"]["text"] for p in spec["concat"]] == ["unit 1", "unit 3"]
    assert all(p["width"] == p["height"] for p in spec["concat"])
    picture = picture_of(spec, panel=1)  # unit 3
    kept = mask[3, :-1].reshape(28, 28)
    assert (picture[~kept] == 255).all()
    bound = float(np.abs(np.where(mask[[1, 3], :-1], weights[[1, 3], :-1], 0)).max())
    expected = raster.colour_ramp(weights[3, :-1].reshape(28, 28), "redblue", -bound, bound)
    assert np.array_equal(picture[kept], expected[kept])


def test_with_threshold_rules_draws_the_rule_in_every_histogram_from_one_dataset():
    rng = np.random.default_rng(4)
    stats = [rng.random((20, 9)), rng.random((4, 21))]
    prior = {"kind": "point", "value": 0.3, "label": "psi = 0.3"}
    base = charts.statistic_histogram(
        stats, None, "p", value_range=(0.0, 1.0), labels=["a", "b"], prior=prior
    ).to_dict()
    frozen = json.dumps(base, sort_keys=True)
    at_04, at_07 = charts.with_threshold_rules(base, 0.4), charts.with_threshold_rules(base, 0.7)
    assert json.dumps(base, sort_keys=True) == frozen  # the input is not changed
    assert_valid(at_04)
    assert without_data(at_04) == without_data(at_07)
    assert at_04["datasets"] == {charts.THRESHOLD_DATASET: [{"threshold": 0.4}]}
    histograms = [p for p in at_04["concat"] if "layer" in p]
    assert len(histograms) == 2 and len(at_04["concat"]) == 3  # the prior panel has no rule
    for panel in histograms:
        rules = [layer for layer in panel["layer"] if layer["mark"]["type"] == "rule"]
        assert len(rules) == 1 and rules[0]["data"] == {"name": charts.THRESHOLD_DATASET}
    # the bars carry the counts statistic_histogram computes, inline
    direct = charts.statistic_histogram(stats, 0.4, "p", value_range=(0.0, 1.0), labels=["a", "b"]).to_dict()
    counts = [r["count"] for rows in direct["datasets"].values() for r in rows if "count" in r]
    inline = [r["count"] for p in histograms for r in p["data"]["values"]]
    assert sorted(inline) == sorted(counts) and sum(inline) == sum(s.size for s in stats)
    assert "name" not in json.dumps([p.get("data", {}) for p in at_04["concat"]]).replace(
        f'"name": "{charts.THRESHOLD_DATASET}"', ""
    )
    assert "threshold_rule" not in json.dumps(charts.with_threshold_rules(base, None))
