"""The dashboard's chart builders: their data and encodings reflect the input arrays."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dashboard import charts


def _datasets(spec: dict) -> dict[str, list[dict]]:
    return spec.get("datasets", {})


def _find(spec, predicate):
    """All sub-dicts of a Vega-Lite spec for which predicate(dict) holds."""
    found = []
    if isinstance(spec, dict):
        if predicate(spec):
            found.append(spec)
        for value in spec.values():
            found.extend(_find(value, predicate))
    elif isinstance(spec, list):
        for value in spec:
            found.extend(_find(value, predicate))
    return found


def _rows_with(spec: dict, column: str) -> list[list[dict]]:
    return [rows for rows in _datasets(spec).values() if rows and column in rows[0]]


# --- histograms --------------------------------------------------------------------------------


def test_histogram_counts_every_weight_of_every_layer():
    rng = np.random.default_rng(0)
    statistics = [rng.uniform(0, 1, size=(20, 11)), rng.beta(0.2, 0.2, size=(3, 21))]
    frame = charts.histogram_frame(statistics, bins=17, value_range=(0.0, 1.0), labels=["a", "b"])
    counts = frame.groupby("layer", sort=False)["count"].sum()
    assert counts["a"] == 220 and counts["b"] == 63
    assert len(frame) == 2 * 17
    # each count equals a direct count over its bin ([start, end), last bin closed)
    layer_a = frame[frame["layer"] == "a"].reset_index(drop=True)
    values = statistics[0].ravel()
    for i, row in layer_a.iterrows():
        upper = values <= row["bin_end"] if i == len(layer_a) - 1 else values < row["bin_end"]
        assert row["count"] == np.sum((values >= row["bin_start"]) & upper)


def test_histogram_counts_infinite_statistics_in_the_end_bins():
    statistic = np.array([[0.5, np.inf, 2.0, 1.0]])
    frame = charts.histogram_frame([statistic], bins=4)
    assert frame["count"].sum() == 4
    assert frame["count"].iloc[-1] == 2  # 2.0 and +inf


def test_histogram_chart_data_and_threshold_rule():
    rng = np.random.default_rng(1)
    statistics = [rng.uniform(0, 1, size=(8, 5)), rng.uniform(0, 1, size=(4, 9))]
    spec = charts.statistic_histogram(statistics, 0.37, "inclusion_probability", bins=10).to_dict()
    count_tables = _rows_with(spec, "count")
    assert sum(row["count"] for rows in count_tables for row in rows) == 40 + 36
    rules = _find(
        spec, lambda d: d.get("mark") == "rule" or (isinstance(d.get("mark"), dict) and d["mark"].get("type") == "rule")
    )
    assert len(rules) == 2  # one per layer
    threshold_tables = _rows_with(spec, "threshold")
    assert threshold_tables and all(rows == [{"threshold": 0.37}] for rows in threshold_tables)
    x_fields = _find(spec, lambda d: d.get("field") == "bin_start")
    assert x_fields and all(d.get("title") == "inclusion_probability" for d in x_fields if "title" in d)


def test_histogram_range_includes_a_threshold_outside_the_data():
    low, high = charts.histogram_range([np.array([0.2, 0.4])], threshold=0.9)
    assert low == pytest.approx(0.2) and high == pytest.approx(0.9)


# --- masks ----------------------------------------------------------------------------------------


def test_small_mask_heatmap_has_one_cell_per_weight_and_the_right_ones():
    rng = np.random.default_rng(2)
    mask = rng.uniform(size=(7, 13)) > 0.6
    spec = charts.mask_heatmap(mask, "layer 1").to_dict()
    (rows,) = _rows_with(spec, "mean")
    assert len(rows) == mask.size
    assert sum(row["mean"] for row in rows) == mask.sum()
    for row in rows:
        assert row["mean"] == mask[row["row_start"], row["col_start"]]


def test_large_mask_is_block_aggregated_without_losing_kept_weights():
    rng = np.random.default_rng(3)
    mask = rng.uniform(size=(400, 785)) > 0.9
    frame = charts.block_frame(mask, max_cells=50)
    assert frame["row"].nunique() <= 50 and frame["col"].nunique() <= 50
    assert frame["size"].sum() == mask.size
    assert frame["total"].sum() == pytest.approx(mask.sum())
    # a block's total equals the sum of the entries it covers
    row = frame.iloc[123]
    r0, c0 = int(row["row_start"]), int(row["col_start"])
    r1 = frame[frame["row"] == row["row"] + 1]["row_start"].min() if row["row"] + 1 <= frame["row"].max() else 400
    c1 = frame[frame["col"] == row["col"] + 1]["col_start"].min() if row["col"] + 1 <= frame["col"].max() else 785
    assert row["total"] == mask[r0 : int(r1), c0 : int(c1)].sum()


def test_weight_heatmap_colour_scale_is_symmetric_about_zero():
    weights = np.array([[0.5, -2.0], [1.0, 0.0]])
    spec = charts.weight_heatmap(weights, "w").to_dict()
    domains = _find(spec, lambda d: "domain" in d and "scheme" in d)
    assert domains[0]["domain"] == [-2.0, 2.0]


def test_kept_per_input_pixel_counts_outgoing_kept_weights():
    mask = np.zeros((3, 4 * 4 + 1), dtype=bool)
    mask[:, 5] = True  # pixel (1, 1) used by all 3 units
    mask[0, 15] = True  # pixel (3, 3) by one unit
    mask[:, -1] = True  # bias, not a pixel
    frame = charts.kept_per_input_frame(mask, (4, 4))
    assert frame["kept"].sum() == 4
    assert frame.set_index(["row", "col"]).loc[(1, 1), "kept"] == 3
    assert frame.set_index(["row", "col"]).loc[(3, 3), "kept"] == 1
    with pytest.raises(ValueError):
        charts.kept_per_input_frame(mask, (5, 5))


def test_density_frame_per_layer_and_overall():
    masks = [np.array([[1, 0, 1]], dtype=bool), np.array([[0, 0], [0, 1]], dtype=bool)]
    frame = charts.density_frame(masks).set_index("layer")
    assert frame.loc["layer 1 (2 -> 1)", "density"] == pytest.approx(2 / 3)
    assert frame.loc["layer 2 (1 -> 2)", "kept"] == 1
    assert frame.loc["all", "kept"] == 3 and frame.loc["all", "total"] == 7


# --- curves -----------------------------------------------------------------------------------------


def test_metric_vs_density_marks_the_current_point():
    thresholds = np.linspace(0, 1, 5)
    density = np.array([1.0, 0.5, 0.2, 0.1, 0.01])
    accuracy = np.array([0.98, 0.97, 0.95, 0.9, 0.3])
    spec = charts.metric_vs_density(thresholds, density, accuracy, "accuracy", current=(0.2, 0.95)).to_dict()
    (curve,) = _rows_with(spec, "threshold")
    assert [row["density"] for row in curve] == sorted(density)
    points = [rows for rows in _rows_with(spec, "value") if "threshold" not in rows[0]]
    assert points == [[{"density": 0.2, "value": 0.95}]]
    x_encodings = _find(spec, lambda d: d.get("field") == "density" and d.get("title"))
    assert x_encodings and all(d["scale"] == {"type": "log"} for d in x_encodings)  # densities span decades
    linear = charts.metric_vs_density(
        np.append(thresholds, 1.1), np.append(density, 0.0), np.append(accuracy, 0.1), "accuracy"
    )
    # a zero density has no place on a log axis: the axis falls back to linear
    assert all("type" not in d.get("scale", {}) for d in _find(linear.to_dict(), lambda d: d.get("field") == "density"))


def test_moving_the_current_point_changes_only_the_diamond_as_a_rebuild_would():
    """with_current_point (a threshold move on the Pruning page) against building the chart again."""
    import copy

    thresholds = np.linspace(0, 1, 5)
    density = np.array([1.0, 0.5, 0.2, 0.1, 0.01])
    accuracy = np.array([0.98, 0.97, 0.95, 0.9, 0.3])
    suggested = {"density": 0.2, "value": 0.95, "threshold": 0.5}

    def built(current):
        chart = charts.metric_vs_density(
            thresholds, density, accuracy, "accuracy", current=current, suggested=suggested, selectable=True
        )
        return chart.to_dict()

    base = built((1.0, 0.98))
    kept = copy.deepcopy(base)
    moved = charts.with_current_point(base, (0.1, 0.9))
    assert base == kept  # the cached spec is not written
    rebuilt = built((0.1, 0.9))

    def drawn(spec):  # each layer's mark and rows, the named datasets read through
        datasets = spec.get("datasets", {})
        return [
            (json.dumps(layer["mark"], sort_keys=True), layer["data"].get("values") or datasets[layer["data"]["name"]])
            for layer in spec["layer"]
        ]

    assert drawn(moved) == drawn(rebuilt)
    assert drawn(moved)[-1][1] == [{"density": 0.1, "value": 0.9}]
    no_point = charts.metric_vs_density(thresholds, density, accuracy, "accuracy").to_dict()
    with pytest.raises(ValueError):  # a chart drawn without a current point has none to move
        charts.with_current_point(no_point, (0.1, 0.9))


def test_metric_vs_samples_frame():
    spec = charts.metric_vs_samples([1, 2, 5], [0.9, 0.93, 0.95], "accuracy").to_dict()
    (rows,) = _rows_with(spec, "samples")
    assert [(r["samples"], r["value"]) for r in rows] == [(1, 0.9), (2, 0.93), (5, 0.95)]


def test_regression_bands_are_nested_around_the_mean():
    x = np.linspace(-1, 1, 50)
    mean = np.sin(3 * x)
    epistemic = 0.1 + 0.2 * np.abs(x)
    total = np.sqrt(epistemic**2 + 0.3**2)
    frame = charts.regression_frame(x, mean, epistemic, total)
    assert np.allclose(frame["epistemic_high"] - frame["mean"], 1.96 * epistemic)
    assert (frame["total_low"] <= frame["epistemic_low"]).all()
    assert (frame["epistemic_high"] <= frame["total_high"]).all()
    spec = charts.regression_bands(x, mean, epistemic, total, x[:7], mean[:7], true_mean=mean).to_dict()
    (points,) = [rows for rows in _rows_with(spec, "y") if "mean" not in rows[0]]
    assert len(points) == 7


def test_class_probability_frame_and_doubt_line():
    probs = np.array([[0.9, 0.05, 0.05], [0.7, 0.2, 0.1]])
    frame = charts.class_probability_frame(probs, ["a", "b", "c"])
    assert len(frame) == 6
    assert frame.groupby("draw")["probability"].sum().tolist() == pytest.approx([1.0, 1.0])
    spec = charts.class_probability_bars(probs, ["a", "b", "c"], doubt_level=0.95).to_dict()
    means = [rows for rows in _rows_with(spec, "probability") if "draw" not in rows[0] and "class" in rows[0]]
    assert {r["class"]: r["probability"] for r in means[0]} == pytest.approx({"a": 0.8, "b": 0.125, "c": 0.075})
    assert [{"probability": 0.95}] in _rows_with(spec, "probability")
    with pytest.raises(ValueError):
        charts.class_probability_frame(np.ones((2, 3, 4)))


def test_ecdf_is_monotone_and_ends_at_one():
    rng = np.random.default_rng(4)
    frame = charts.ecdf_frame({"in": rng.exponential(size=300), "out": rng.uniform(1, 2, size=50)})
    for _, part in frame.groupby("set"):
        assert np.all(np.diff(part["entropy"]) >= 0)
        assert np.all(np.diff(part["ecdf"]) > 0)
        assert part["ecdf"].iloc[-1] == 1.0
    out = frame[frame["set"] == "out"]
    assert out["ecdf"].iloc[1] == pytest.approx(1 / 50)


def test_entropy_ecdf_chart_is_thinned_but_keeps_the_end_point():
    values = np.random.default_rng(5).uniform(size=5000)
    spec = charts.entropy_ecdf({"a": values}, max_entropy=np.log(10), max_points=200).to_dict()
    (rows,) = _rows_with(spec, "ecdf")
    assert len(rows) <= 200
    assert rows[-1]["ecdf"] == 1.0 and rows[-1]["entropy"] == pytest.approx(values.max())
    (x_scale,) = [d["scale"] for d in _find(spec, lambda d: d.get("field") == "entropy" and "scale" in d)]
    # 0 to the largest possible entropy, and exactly there (no rounding out to a "nice" end)
    assert x_scale["domain"] == [0, pytest.approx(np.log(10))] and x_scale.get("nice", False) is False
    (y_scale,) = [d["scale"] for d in _find(spec, lambda d: d.get("field") == "ecdf" and "scale" in d)]
    assert y_scale["domain"] == [0, 1]
    assert all(b["ecdf"] >= a["ecdf"] for a, b in zip(rows, rows[1:]))


def test_history_frame_has_loss_and_density_per_epoch():
    history = [
        {"epoch": 1, "phase": "train", "loss": 2.0, "density": 0.9},
        {"epoch": 2, "phase": "train", "loss": 1.5, "density": 0.7},
    ]
    frame = charts.history_frame(history)
    assert frame[frame["quantity"] == "loss"]["value"].tolist() == [2.0, 1.5]
    assert frame[frame["quantity"] == "density"]["step"].tolist() == [1, 2]
    assert charts.history_frame([]).empty and isinstance(charts.history_frame([]), pd.DataFrame)


def test_training_curves_plot_loss_and_density_per_epoch_coloured_by_phase():
    history = [
        {"epoch": 1, "phase": "pretrain", "loss": 3.0, "density": 1.0},
        {"epoch": 2, "phase": "train", "loss": 2.0},  # no density recorded this epoch
        {"epoch": 3, "phase": "train", "loss": 1.5, "density": 0.4},
    ]
    spec = charts.training_curves(history).to_dict()
    left, right = spec["hconcat"]
    expected = {
        "loss (-ELBO / N)": [(1, "pretrain", 3.0), (2, "train", 2.0), (3, "train", 1.5)],
        "density at the default threshold": [(1, "pretrain", 1.0), (3, "train", 0.4)],
    }
    for panel in (left, right):
        rows = spec["datasets"][panel["data"]["name"]]
        marks = sorted(layer["mark"]["type"] for layer in panel["layer"])
        assert marks == ["circle", "line"]  # a line through the epochs with a dot at each
        for layer in panel["layer"]:
            encoding = layer["encoding"]
            assert (encoding["x"]["field"], encoding["x"]["type"], encoding["x"]["title"]) == (
                "step",
                "quantitative",
                "epoch",
            )
            assert (encoding["y"]["field"], encoding["y"]["type"]) == ("value", "quantitative")
            assert encoding["y"]["scale"] == {"zero": False}
            assert (encoding["color"]["field"], encoding["color"]["type"]) == ("phase", "nominal")
        title = panel["layer"][0]["encoding"]["y"]["title"]
        assert [(r["step"], r["phase"], r["value"]) for r in rows] == expected.pop(title)
    assert not expected  # one panel for each quantity
