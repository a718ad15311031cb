"""Pure chart builders: numpy arrays in, Altair charts (and the frames behind them) out.

Nothing here imports Streamlit or torch, so every figure is testable on its
own. Each chart has a `*_frame` function that computes the DataFrame it draws;
tests assert on those frames and on `chart.to_dict()`.

Charts stay small (a few thousand rows at most): large weight matrices are
drawn as block aggregates, histograms are binned here, not in the browser.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

DOUBT_LEVEL = 0.95  # default only: pages pass backend.DOUBT_LEVEL (core's constant); figures stay free of torch
MAX_HEATMAP_CELLS = 64  # blocks per side of a drawn weight matrix
CHART_WIDTH = 320
HISTOGRAMS_PER_ROW = 2
# Charts with a legend below keep their own size: Streamlit's default "fit" autosize squeezed the plot
# to make room for the legend (a 28x28 image drawn 240 x 90 px).
FIXED_SIZE = {"type": "pad", "contains": "padding"}
# End labels of a colour gradient stay inside the chart when the legend sits below it.
GRADIENT_LEGEND = {"orient": "bottom", "direction": "horizontal", "gradientLength": 200, "labelOverlap": False}

# --- a fixed colour per family, colour-blind safe (Okabe-Ito), the same on every page ----------------

FAMILY_COLOURS = {
    "lbbnn": "#0072B2", "lbbnn-lfmvn": "#56B4E9", "bnn": "#E69F00", "bnn-mixture": "#F0E442",
    "variational-dense": "#999999", "concrete-dropout": "#CC79A7", "horseshoe": "#009E73",
    "sparse-vd": "#D55E00", "fnn": "#000000", "laplace": "#882255",
    "ensemble": "#117733",  # Tol's green: apart from horseshoe's bluish green
}
OTHER_FAMILY_COLOUR = "#666666"  # a family missing from the table (none should be)


def family_colour(family: str | None) -> str:
    """The one colour of a family's curves, bars and bands on every page."""
    return FAMILY_COLOURS.get(str(family), OTHER_FAMILY_COLOUR)


def family_key(columns: int = 2) -> alt.Chart:
    """A small key of the family colours (the sidebar's): a square and the family's name each."""
    families = list(FAMILY_COLOURS)
    rows = -(-len(families) // columns)
    frame = pd.DataFrame({"family": families, "column": [i // rows for i in range(len(families))],
                          "row": [i % rows for i in range(len(families))]})
    colour = alt.Color("family:N", scale=alt.Scale(domain=families, range=[FAMILY_COLOURS[f] for f in families]),
                       legend=None)
    # Column c starts at c / columns of the width: the last column's names have room to its right.
    x = alt.X("column:Q", axis=None, scale=alt.Scale(domain=[0, columns], nice=False, zero=True))
    y = alt.Y("row:O", axis=None)
    base = alt.Chart(frame)
    squares = base.mark_square(size=90, opacity=1).encode(x=x, y=y, color=colour, tooltip=["family:N"])
    names = base.mark_text(align="left", dx=9, fontSize=11).encode(x=x, y=y, text="family:N")
    return (squares + names).properties(width=115 * columns, height=16 * rows).configure_view(stroke=None)


CLASS_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
                 "#999999", "#882255"]


# Long lists of labels read better with a name: "layer 1 (784 -> 400)".


def layer_label(index: int, shape: Sequence[int]) -> str:
    out_features, in_plus_bias = int(shape[0]), int(shape[1])
    return f"layer {index + 1} ({in_plus_bias - 1} -> {out_features})"


# --- histograms of the native statistic -----------------------------------------------------

def histogram_range(statistics: Sequence[np.ndarray], threshold: float | None = None) -> tuple[float, float]:
    """Common finite bin range over all layers (and the threshold, so its line is visible)."""
    values = [np.asarray(s, dtype=np.float64).ravel() for s in statistics]
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.empty(0)
    points = list(finite[[finite.argmin(), finite.argmax()]]) if finite.size else [0.0, 1.0]
    if threshold is not None and np.isfinite(threshold):
        points.append(float(threshold))
    low, high = float(min(points)), float(max(points))
    if high <= low:
        high = low + 1.0
    return low, high


def histogram_frame(statistics: Sequence[np.ndarray], bins: int = 40,
                    value_range: tuple[float, float] | None = None,
                    labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-layer counts in `bins` equal bins; values outside the range land in the end bins."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    low, high = value_range if value_range is not None else histogram_range(statistics)
    edges = np.linspace(low, high, bins + 1)
    frames = []
    for index, statistic in enumerate(statistics):
        values = np.asarray(statistic, dtype=np.float64).ravel()
        # Clip so that every weight is counted (inf statistics go to the end bins).
        clipped = np.clip(np.nan_to_num(values, nan=low, posinf=high, neginf=low), low, high)
        counts, _ = np.histogram(clipped, bins=edges)
        label = labels[index] if labels is not None else f"layer {index + 1}"
        frames.append(pd.DataFrame({"layer": label, "bin_start": edges[:-1], "bin_end": edges[1:],
                                    "count": counts.astype(np.int64)}))
    return pd.concat(frames, ignore_index=True)


def statistic_histogram(statistics: Sequence[np.ndarray], threshold: float | None, statistic_name: str,
                        bins: int = 40, log_counts: bool = True, labels: Sequence[str] | None = None,
                        value_range: tuple[float, float] | None = None,
                        prior: Mapping[str, Any] | None = None, colour: str | None = None) -> alt.ConcatChart:
    """One histogram per layer of the family's native statistic, threshold as a red rule.

    value_range: the x range (e.g. [0, 1] for inclusion probabilities); default: the data and threshold.
    colour: the bars' colour (the family's, `family_colour`); default Vega-Lite's.
    """
    value_range = value_range or histogram_range(statistics, threshold)
    frame = histogram_frame(statistics, bins, value_range, labels)
    # symlog keeps empty bins at 0 and shows the tall spikes near 0 and 1 of inclusion probabilities.
    y_scale = alt.Scale(type="symlog") if log_counts else alt.Scale()
    charts = []
    for label, layer_frame in frame.groupby("layer", sort=False):
        bars = alt.Chart(layer_frame).mark_bar(**_colour(colour)).encode(
            x=alt.X("bin_start:Q", title=statistic_name, bin="binned", scale=alt.Scale(domain=list(value_range))),
            x2="bin_end:Q",
            y=alt.Y("count:Q", title="weights", scale=y_scale),
            tooltip=["bin_start:Q", "bin_end:Q", "count:Q"],
        )
        layers = [bars]
        if threshold is not None and np.isfinite(threshold):
            layers.append(threshold_rule(threshold))
        charts.append(alt.layer(*layers).properties(title=str(label), width=CHART_WIDTH, height=180))
    if prior is not None:  # the prior of the statistic beside the posterior's histograms
        charts.append(prior_chart(prior, statistic_name, width=CHART_WIDTH, value_range=value_range))
    # At most HISTOGRAMS_PER_ROW side by side: three 320-px charts overflow a 1400-px window's main area.
    return alt.concat(*charts, columns=HISTOGRAMS_PER_ROW)


def _colour(colour: str | None) -> dict[str, str]:
    return {} if colour is None else {"color": colour}


def threshold_rule(threshold: float, axis: str = "x") -> alt.Chart:
    data = pd.DataFrame({"threshold": [float(threshold)]})
    encoding = {axis: alt.X("threshold:Q") if axis == "x" else alt.Y("threshold:Q")}
    return alt.Chart(data).mark_rule(color="red", strokeDash=[4, 3], size=2).encode(
        **encoding, tooltip=["threshold:Q"])


THRESHOLD_DATASET = "threshold_rule"  # with_threshold_rules: the named dataset holding the threshold


def with_threshold_rules(histogram_spec: Mapping[str, Any], threshold: float | None) -> dict[str, Any]:
    """The spec of statistic_histogram(..., threshold=None, value_range=...) with threshold_rule's line
    added to every layer's histogram. The threshold is the only row of a named dataset, so the spec
    is the same at every threshold: a threshold step costs a dict copy, not a new chart (building and
    validating the Altair chart took over 100 ms for a 784-400-600-10 net), and Streamlit's browser
    side swaps the rule's data instead of drawing a new chart. The bars' data is written inline
    (inline_datasets). The input is not changed."""
    spec = inline_datasets(histogram_spec)
    if threshold is None or not np.isfinite(threshold):
        return spec
    rule = {"data": {"name": THRESHOLD_DATASET},
            "mark": {"type": "rule", "color": "red", "strokeDash": [4, 3], "size": 2},
            "encoding": {"x": {"field": "threshold", "type": "quantitative"},
                         "tooltip": [{"field": "threshold", "type": "quantitative"}]}}
    # Data the panels inherit goes into each panel: Streamlit would convert top-level data too.
    inherited = spec.pop("data", None)
    panels = [panel if inherited is None or "data" in panel else {**panel, "data": inherited}
              for panel in spec["concat"]]
    spec["concat"] = [{**panel, "layer": [*panel["layer"], rule]} if "layer" in panel else panel for panel in panels]
    spec["datasets"] = {THRESHOLD_DATASET: [{"threshold": float(threshold)}]}
    return spec


def inline_datasets(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with its named datasets (Altair's top-level "datasets") written into the views that
    use them. Streamlit converts every named dataset into an Arrow table on every script run; data
    that never changes is cheaper inline. The input is not changed."""
    datasets = spec.get("datasets") or {}

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            data = node.get("data")
            out = {key: inline(value) for key, value in node.items() if key != "datasets"}
            if isinstance(data, dict) and set(data) == {"name"} and data["name"] in datasets:
                out["data"] = {"values": datasets[data["name"]]}
            return out
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return inline(spec) if datasets else dict(spec)


# --- masks and weight matrices ------------------------------------------------------------------

def block_frame(matrix: np.ndarray, max_cells: int = MAX_HEATMAP_CELLS) -> pd.DataFrame:
    """Aggregate a (rows, cols) matrix into at most max_cells x max_cells blocks.

    Columns: row/col (block index), row_start/col_start, size (entries in the
    block), total (sum) and mean. With a small matrix each block is one entry.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {matrix.shape}")
    row_edges = _block_edges(matrix.shape[0], max_cells)
    col_edges = _block_edges(matrix.shape[1], max_cells)
    # Sums over blocks via cumulative sums: exact, and no Python loop over entries.
    padded = np.zeros((matrix.shape[0] + 1, matrix.shape[1] + 1))
    padded[1:, 1:] = matrix.cumsum(0).cumsum(1)
    r0, r1 = row_edges[:-1], row_edges[1:]
    c0, c1 = col_edges[:-1], col_edges[1:]
    totals = (padded[np.ix_(r1, c1)] - padded[np.ix_(r0, c1)] - padded[np.ix_(r1, c0)] + padded[np.ix_(r0, c0)])
    sizes = np.outer(r1 - r0, c1 - c0)
    rows, cols = np.meshgrid(np.arange(len(r0)), np.arange(len(c0)), indexing="ij")
    return pd.DataFrame({
        "row": rows.ravel(), "col": cols.ravel(),
        "row_start": r0[rows.ravel()], "col_start": c0[cols.ravel()],
        "size": sizes.ravel().astype(np.int64), "total": totals.ravel(),
        "mean": (totals / sizes).ravel(),
    })


def _block_edges(length: int, max_cells: int) -> np.ndarray:
    cells = max(1, min(length, max_cells))
    return np.unique(np.linspace(0, length, cells + 1).round().astype(np.int64))


def mask_heatmap(mask: np.ndarray, title: str, max_cells: int = MAX_HEATMAP_CELLS) -> alt.Chart:
    """Kept (1) / pruned (0) weights of one augmented (out, in+1) matrix; blocks show the kept fraction."""
    frame = block_frame(np.asarray(mask, dtype=np.float64), max_cells)
    blocked = bool((frame["size"] > 1).any())
    colour_title = "kept fraction" if blocked else "kept"
    return alt.Chart(frame).mark_rect().encode(
        x=alt.X("col:O", title="input (last column: bias)", axis=None),
        y=alt.Y("row:O", title="output unit", axis=None),
        color=alt.Color("mean:Q", title=colour_title, scale=alt.Scale(domain=[0, 1], scheme="greys"),
                        legend=alt.Legend(**GRADIENT_LEGEND)),
        tooltip=["row_start:Q", "col_start:Q", alt.Tooltip("total:Q", title="kept"), "size:Q"],
    ).properties(title=title, width=CHART_WIDTH, height=CHART_WIDTH * 0.6, autosize=FIXED_SIZE)


def weight_heatmap(weights: np.ndarray, title: str, max_cells: int = MAX_HEATMAP_CELLS) -> alt.Chart:
    """Signed (masked) weights of one layer, block means, diverging colours centred on 0."""
    frame = block_frame(weights, max_cells)
    bound = float(np.abs(frame["mean"]).max()) or 1.0
    return alt.Chart(frame).mark_rect().encode(
        x=alt.X("col:O", axis=None),
        y=alt.Y("row:O", axis=None),
        color=alt.Color("mean:Q", title="weight", scale=alt.Scale(scheme="redblue", domain=[-bound, bound]),
                        legend=alt.Legend(**GRADIENT_LEGEND)),
        tooltip=["row_start:Q", "col_start:Q", alt.Tooltip("mean:Q", format=".3f")],
    ).properties(title=title, width=CHART_WIDTH, height=CHART_WIDTH * 0.6, autosize=FIXED_SIZE)


def kept_per_input_frame(first_layer_mask: np.ndarray, input_shape: Sequence[int]) -> pd.DataFrame:
    """How many kept weights leave each input pixel (bias column dropped), on the image grid."""
    mask = np.asarray(first_layer_mask)
    per_input = mask[:, :-1].sum(axis=0).astype(np.int64)
    height, width = int(input_shape[0]), int(input_shape[1])
    if per_input.size != height * width:
        raise ValueError(f"first layer has {per_input.size} inputs, not {height}x{width}")
    rows, cols = np.divmod(np.arange(per_input.size), width)
    return pd.DataFrame({"row": rows, "col": cols, "kept": per_input})


def kept_per_input_image(first_layer_mask: np.ndarray, input_shape: Sequence[int], side: int = 240) -> alt.Chart:
    """The image grid with one square cell per pixel: quantitative cell edges on scales whose
    pixels-per-cell are equal in x and y (ordinal bands stretch with the legend and title)."""
    frame = kept_per_input_frame(first_layer_mask, input_shape)
    frame["col_end"] = frame["col"] + 1
    frame["row_end"] = frame["row"] + 1
    height, width = int(input_shape[0]), int(input_shape[1])
    cell = side / max(height, width)
    return alt.Chart(frame).mark_rect().encode(
        x=alt.X("col:Q", axis=None, scale=alt.Scale(domain=[0, width], nice=False, zero=False)),
        x2="col_end:Q",
        y=alt.Y("row:Q", axis=None, scale=alt.Scale(domain=[0, height], nice=False, zero=False, reverse=True)),
        y2="row_end:Q",
        color=alt.Color("kept:Q", title="kept weights", scale=alt.Scale(scheme="viridis"),
                        legend=alt.Legend(**GRADIENT_LEGEND)),
        tooltip=["row:Q", "col:Q", "kept:Q"],
    ).properties(title="kept weights per input pixel", width=cell * width, height=cell * height,
                 autosize=FIXED_SIZE)


def density_frame(masks: Sequence[np.ndarray]) -> pd.DataFrame:
    """Per-layer kept/total/density plus an 'all' row."""
    rows = []
    for index, mask in enumerate(masks):
        mask = np.asarray(mask)
        kept, total = int(mask.sum()), int(mask.size)
        rows.append({"layer": layer_label(index, mask.shape), "kept": kept, "total": total,
                     "density": kept / total})
    kept = sum(r["kept"] for r in rows)
    total = sum(r["total"] for r in rows)
    rows.append({"layer": "all", "kept": kept, "total": total, "density": kept / total if total else 0.0})
    return pd.DataFrame(rows)


# --- pruning curves -------------------------------------------------------------------------------

def sweep_frame(thresholds: np.ndarray, density: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame({"threshold": np.asarray(thresholds, dtype=np.float64),
                          "density": np.asarray(density, dtype=np.float64),
                          "value": np.asarray(values, dtype=np.float64)})
    return frame.sort_values("density", kind="stable").reset_index(drop=True)


PICK = "pick"  # the curve's click selection: {"pick": [{"threshold": t}]} in Streamlit's chart state


def picked_threshold(selection: Any) -> float | None:
    """The threshold of the point clicked on the metric-vs-density curve, from Streamlit's chart
    state (event.selection or the widget's session-state value), or None."""
    if selection is None:
        return None
    if hasattr(selection, "get") and "selection" in selection:
        selection = selection["selection"]
    points = selection.get(PICK) if hasattr(selection, "get") else None
    if isinstance(points, dict):  # some versions wrap the values: {"threshold": [t]} or {"vlPoint": ...}
        values = points.get("threshold")
        if isinstance(values, list) and values:
            return float(values[0])
        return float(values) if isinstance(values, (int, float)) else None
    if points:
        first = points[0]
        if isinstance(first, dict) and first.get("threshold") is not None:
            return float(first["threshold"])
    return None


def metric_vs_density(thresholds: np.ndarray, density: np.ndarray, values: np.ndarray, metric: str,
                      current: tuple[float, float] | None = None, suggested: Mapping[str, float] | None = None,
                      selectable: bool = False, title: str | None = None,
                      colour: str | None = None) -> alt.LayerChart:
    """The precomputed sweep as a line over density (log axis), the current setting as a red point,
    the suggested threshold as a star; with `selectable`, a click on a point selects its threshold.
    colour: the curve's (the family's)."""
    frame = sweep_frame(thresholds, density, values)
    positive = frame["density"] > 0
    scale = alt.Scale(type="log") if positive.all() else alt.Scale()
    base = alt.Chart(frame).encode(
        x=alt.X("density:Q", title="density (fraction of weights kept)", scale=scale),
        y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
        tooltip=[alt.Tooltip("threshold:Q", format=".4g"), alt.Tooltip("density:Q", format=".4f"),
                 alt.Tooltip("value:Q", format=".4f")],
    )
    points = base.mark_circle(size=60 if selectable else 30, **_colour(colour))
    if selectable:
        points = points.add_params(alt.selection_point(name=PICK, fields=["threshold"], on="click", nearest=True))
    layers = [base.mark_line(**_colour(colour)), points]
    if suggested is not None:
        star = pd.DataFrame({"density": [float(suggested["density"])], "value": [float(suggested["value"])],
                             "threshold": [float(suggested["threshold"])]})
        layers.append(alt.Chart(star).mark_point(shape="M0,-1L0.3,-0.3L1,-0.3L0.45,0.15L0.6,0.9L0,0.45L-0.6,0.9"
                                                       "L-0.45,0.15L-1,-0.3L-0.3,-0.3Z", size=260, filled=True,
                                                 color="#009e73").encode(
            x="density:Q", y="value:Q",
            tooltip=[alt.Tooltip("threshold:Q", title="suggested threshold", format=".4g"), "density:Q", "value:Q"]))
    if current is not None:
        point = pd.DataFrame({"density": [float(current[0])], "value": [float(current[1])]})
        layers.append(alt.Chart(point).mark_point(color="red", size=160, filled=True, shape="diamond").encode(
            x="density:Q", y="value:Q", tooltip=["density:Q", "value:Q"]))
    return alt.layer(*layers).properties(title=title or f"{metric} vs density", width=520, height=300)


def metric_vs_samples(samples: Sequence[int], values: Sequence[float], metric: str,
                      colour: str | None = None) -> alt.LayerChart:
    frame = pd.DataFrame({"samples": np.asarray(samples, dtype=np.int64),
                          "value": np.asarray(values, dtype=np.float64)})
    base = alt.Chart(frame).encode(
        x=alt.X("samples:Q", title="posterior samples R", scale=alt.Scale(type="log")),
        y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
        tooltip=["samples:Q", alt.Tooltip("value:Q", format=".4f")],
    )
    return alt.layer(base.mark_line(**_colour(colour)), base.mark_circle(size=40, **_colour(colour))).properties(
        title=f"{metric} vs R", width=520, height=260)


# --- regression bands ---------------------------------------------------------------------------

def regression_frame(x_grid: np.ndarray, mean: np.ndarray, epistemic_std: np.ndarray,
                     total_std: np.ndarray, z: float = 1.96) -> pd.DataFrame:
    x = np.asarray(x_grid, dtype=np.float64).ravel()
    mean = np.asarray(mean, dtype=np.float64).ravel()
    epistemic = np.asarray(epistemic_std, dtype=np.float64).ravel()
    total = np.asarray(total_std, dtype=np.float64).ravel()
    return pd.DataFrame({"x": x, "mean": mean,
                         "epistemic_low": mean - z * epistemic, "epistemic_high": mean + z * epistemic,
                         "total_low": mean - z * total, "total_high": mean + z * total})


def reference_layers(x_grid: np.ndarray, reference: dict | None) -> list:
    """The NUTS reference's 5-95% band (orange outline) and mean (orange dashes), when given."""
    if reference is None:
        return []
    frame = pd.DataFrame({"x": np.asarray(x_grid, dtype=np.float64).ravel(),
                          "ref_low": np.asarray(reference["low"], dtype=np.float64).ravel(),
                          "ref_high": np.asarray(reference["high"], dtype=np.float64).ravel(),
                          "ref_mean": np.asarray(reference["mean"], dtype=np.float64).ravel()})
    base = alt.Chart(frame).encode(x="x:Q")
    return [base.mark_line(color="#f58518", strokeWidth=1.5).encode(y="ref_low:Q"),
            base.mark_line(color="#f58518", strokeWidth=1.5).encode(y="ref_high:Q"),
            base.mark_line(color="#f58518", strokeDash=[2, 2]).encode(y="ref_mean:Q")]


BAND_COLOUR, MEAN_COLOUR = "#4c78a8", "#1f3b73"  # a model's bands and mean where no family is given


def quantile_bands(x_grid: np.ndarray, mean: np.ndarray, low: np.ndarray, high: np.ndarray, x_train: np.ndarray,
                   y_train: np.ndarray, true_mean: np.ndarray | None = None, reference: dict | None = None,
                   title: str = "predictive mean and 5-95% band", colour: str | None = None) -> alt.LayerChart:
    """Predictive mean with a quantile band (e.g. the collapsed predictive's), optionally the reference's;
    colour: the band's and the mean's (the family's)."""
    frame = pd.DataFrame({"x": np.asarray(x_grid, dtype=np.float64).ravel(),
                          "mean": np.asarray(mean, dtype=np.float64).ravel(),
                          "low": np.asarray(low, dtype=np.float64).ravel(),
                          "high": np.asarray(high, dtype=np.float64).ravel()})
    base = alt.Chart(frame).encode(x=alt.X("x:Q", title="x"))
    layers = [base.mark_area(opacity=0.3, color=colour or BAND_COLOUR).encode(y=alt.Y("low:Q", title="y"), y2="high:Q"),
              base.mark_line(color=colour or MEAN_COLOUR, strokeWidth=2).encode(y="mean:Q")]
    return _finish_bands(layers, frame["x"], x_train, y_train, true_mean, reference, title)


def _finish_bands(layers: list, x: Any, x_train: np.ndarray, y_train: np.ndarray, true_mean: np.ndarray | None,
                  reference: dict | None, title: str) -> alt.LayerChart:
    layers = layers + reference_layers(x, reference)
    if true_mean is not None:
        truth = pd.DataFrame({"x": x, "truth": np.asarray(true_mean, dtype=np.float64).ravel()})
        layers.append(alt.Chart(truth).mark_line(color="black", strokeDash=[5, 4]).encode(x="x:Q", y="truth:Q"))
    points = pd.DataFrame({"x": np.asarray(x_train, dtype=np.float64).ravel(),
                           "y": np.asarray(y_train, dtype=np.float64).ravel()})
    layers.append(alt.Chart(points).mark_circle(color="#e45756", size=18, opacity=0.8).encode(x="x:Q", y="y:Q"))
    if reference is not None:
        title += "; orange: NUTS reference 5-95% and mean"
    return alt.layer(*layers).properties(title=title, width=640, height=340)


def regression_bands(x_grid: np.ndarray, mean: np.ndarray, epistemic_std: np.ndarray, total_std: np.ndarray,
                     x_train: np.ndarray, y_train: np.ndarray, true_mean: np.ndarray | None = None,
                     z: float = 1.96, reference: dict | None = None, colour: str | None = None) -> alt.LayerChart:
    """Predictive mean with 95% total (light) and epistemic (dark) bands and the training points;
    colour: the bands' and the mean's (the family's)."""
    frame = regression_frame(x_grid, mean, epistemic_std, total_std, z)
    base = alt.Chart(frame).encode(x=alt.X("x:Q", title="x"))
    layers = [
        base.mark_area(opacity=0.25, color=colour or BAND_COLOUR).encode(
            y=alt.Y("total_low:Q", title="y"), y2="total_high:Q"),
        base.mark_area(opacity=0.45, color=colour or BAND_COLOUR).encode(y="epistemic_low:Q", y2="epistemic_high:Q"),
        base.mark_line(color=colour or MEAN_COLOUR, strokeWidth=2).encode(y="mean:Q"),
    ]
    if reference is not None:
        return _finish_bands(layers, frame["x"], x_train, y_train, true_mean, reference,
                             "predictive mean, epistemic (dark) and total (light) 95% bands")
    if true_mean is not None:
        truth = pd.DataFrame({"x": frame["x"], "truth": np.asarray(true_mean, dtype=np.float64).ravel()})
        layers.append(alt.Chart(truth).mark_line(color="black", strokeDash=[5, 4]).encode(x="x:Q", y="truth:Q"))
    points = pd.DataFrame({"x": np.asarray(x_train, dtype=np.float64).ravel(),
                           "y": np.asarray(y_train, dtype=np.float64).ravel()})
    layers.append(alt.Chart(points).mark_circle(color="#e45756", size=18, opacity=0.8).encode(x="x:Q", y="y:Q"))
    return alt.layer(*layers).properties(
        title="predictive mean, epistemic (dark) and total (light) 95% bands", width=640, height=340)


# --- per-image class probabilities -----------------------------------------------------------------

def class_probability_frame(probs_per_draw: np.ndarray, class_names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (draw, class) for one input: probs_per_draw has shape (R, K)."""
    probs = np.asarray(probs_per_draw, dtype=np.float64)
    if probs.ndim != 2:
        raise ValueError(f"expected (R, K) probabilities for one input, got shape {probs.shape}")
    draws, classes = probs.shape
    names = list(class_names) if class_names is not None else [str(k) for k in range(classes)]
    return pd.DataFrame({"draw": np.repeat(np.arange(draws), classes),
                         "class": np.tile(names, draws),
                         "probability": probs.ravel()})


def class_probability_bars(probs_per_draw: np.ndarray, class_names: Sequence[str] | None = None,
                           title: str = "", doubt_level: float = DOUBT_LEVEL) -> alt.LayerChart:
    """Model-averaged probability per class (bars), each draw's probability (ticks), doubt line."""
    frame = class_probability_frame(probs_per_draw, class_names)
    order = list(dict.fromkeys(frame["class"]))
    mean = frame.groupby("class", sort=False, as_index=False)["probability"].mean()
    x = alt.X("class:N", sort=order, title="class")
    # Every layer on the same fixed [0, 1] scale (no "nice" padding): the doubt line sits below
    # the 1.0 gridline and bars start at 0.
    y_scale = alt.Scale(domain=[0, 1], nice=False, zero=True, clamp=True)
    # labelFlush off: Streamlit's theme pulls the end labels inwards, which drew "1.0" below the 0.95 line.
    y_axis = alt.Axis(labelFlush=False, grid=True, values=[0, 0.25, 0.5, 0.75, 1.0], format=".2f")
    bars = alt.Chart(mean).mark_bar(opacity=0.5).encode(
        x=x, y=alt.Y("probability:Q", scale=y_scale, title="p(class)", axis=y_axis),
        tooltip=["class:N", alt.Tooltip("probability:Q", format=".3f")])
    ticks = alt.Chart(frame).mark_tick(color="black", thickness=1, opacity=0.6).encode(
        x=x, y=alt.Y("probability:Q", scale=y_scale))
    rule = alt.Chart(pd.DataFrame({"probability": [float(doubt_level)]})).mark_rule(
        color="red", strokeDash=[4, 3], size=2).encode(y=alt.Y("probability:Q", scale=y_scale),
                                                      tooltip=[alt.Tooltip("probability:Q", title="doubt level")])
    return alt.layer(bars, ticks, rule).resolve_scale(y="shared").properties(title=title, width=260, height=180)


# --- out-of-distribution entropy ---------------------------------------------------------------------

def ecdf_frame(samples: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Empirical CDF per named set: sorted values and i/n, one step per point."""
    frames = []
    for name, values in samples.items():
        values = np.sort(np.asarray(values, dtype=np.float64).ravel())
        n = values.size
        if n == 0:
            continue
        # The step function starts at (0, 0): entropy is never negative, so the curves start where the
        # axis's 0 is drawn, not at each set's smallest value.
        start = min(0.0, float(values[0]))
        frames.append(pd.DataFrame({"set": name, "entropy": np.concatenate([[start], values]),
                                    "ecdf": np.concatenate([[0.0], np.arange(1, n + 1) / n])}))
    if not frames:
        return pd.DataFrame({"set": [], "entropy": [], "ecdf": []})
    return pd.concat(frames, ignore_index=True)


def entropy_ecdf(samples: Mapping[str, np.ndarray], max_entropy: float | None = None,
                 max_points: int = 1000) -> alt.Chart:
    """ECDFs of predictive entropy: in-domain rises early, OOD late (seed 002 fig 2)."""
    frame = _thin_ecdf(ecdf_frame(samples), max_points)
    x_scale = alt.Scale(domain=[0, max_entropy], nice=False) if max_entropy else alt.Scale(nice=False)
    return alt.Chart(frame).mark_line(interpolate="step-after").encode(
        x=alt.X("entropy:Q", title="predictive entropy (nats)", scale=x_scale, axis=alt.Axis(labelFlush=False)),
        y=alt.Y("ecdf:Q", title="fraction of inputs with entropy <= x", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("set:N", title="test set"),
        tooltip=["set:N", alt.Tooltip("entropy:Q", format=".3f"), alt.Tooltip("ecdf:Q", format=".3f")],
    ).properties(title="empirical CDF of predictive entropy", width=560, height=320)


def _thin_ecdf(frame: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Keep at most max_points per set (evenly in rank, always the last point) to keep the chart light."""
    parts = []
    for _, part in frame.groupby("set", sort=False):
        if len(part) > max_points:
            index = np.unique(np.linspace(0, len(part) - 1, max_points).round().astype(np.int64))
            part = part.iloc[index]
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else frame



# --- training progress ----------------------------------------------------------------------------

def history_frame(history: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    """Long frame (step, phase, quantity, value) of loss and density per recorded epoch."""
    rows = []
    for step, record in enumerate(history, start=1):
        for quantity in ("loss", "density"):
            value = record.get(quantity)
            if value is None:
                continue
            rows.append({"step": step, "phase": str(record.get("phase", "train")), "quantity": quantity,
                         "value": float(value)})
    return pd.DataFrame(rows, columns=["step", "phase", "quantity", "value"])


def training_curves(history: Sequence[Mapping[str, object]], colour: str | None = None) -> alt.HConcatChart:
    """Loss and density per epoch side by side (epochs counted over all phases). With `colour` (the
    family's) every line is drawn in it and the phases differ by dash; else each phase has a colour."""
    frame = history_frame(history)
    charts = []
    for quantity, title in (("loss", "loss (-ELBO / N)"), ("density", "density at the default threshold")):
        part = frame[frame["quantity"] == quantity]
        base = alt.Chart(part).encode(
            x=alt.X("step:Q", title="epoch", axis=alt.Axis(tickMinStep=1)),
            y=alt.Y("value:Q", title=title, scale=alt.Scale(zero=False)),
            tooltip=["step:Q", "phase:N", alt.Tooltip("value:Q", format=".4f")],
        )
        if colour is None:
            base = base.encode(color=alt.Color("phase:N", title="phase"))
            lines, dots = base.mark_line(), base.mark_circle(size=35)
        else:
            lines = base.mark_line(color=colour).encode(strokeDash=alt.StrokeDash("phase:N", title="phase"))
            dots = base.mark_point(size=35, filled=True, color=colour).encode(shape=alt.Shape("phase:N", title="phase"))
        charts.append(alt.layer(lines, dots).properties(width=300, height=180))
    return alt.hconcat(*charts)


# --- the decision surface of a 2-D classifier ------------------------------------------------------

def surface_frame(xs: np.ndarray, ys: np.ndarray, arrays: Mapping[str, np.ndarray],
                  class_names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per grid cell (grid points in row-major order over ys, then xs) with its edges."""
    xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    dx = (xs[1] - xs[0]) if xs.size > 1 else 1.0
    dy = (ys[1] - ys[0]) if ys.size > 1 else 1.0
    gx, gy = np.meshgrid(xs, ys)
    predicted = np.asarray(arrays["predicted"]).astype(np.int64)
    names = list(class_names) if class_names else None
    return pd.DataFrame({
        "x": gx.ravel() - dx / 2, "x_end": gx.ravel() + dx / 2,
        "y": gy.ravel() - dy / 2, "y_end": gy.ravel() + dy / 2,
        "class": [names[k] if names else str(k) for k in predicted],
        "confidence": np.asarray(arrays["confidence"], dtype=np.float64),
        "entropy": np.asarray(arrays["entropy"], dtype=np.float64),
        "spread": np.asarray(arrays["spread"], dtype=np.float64),
    })


def decision_surface(xs: np.ndarray, ys: np.ndarray, arrays: Mapping[str, np.ndarray], x_train: np.ndarray,
                     y_train: np.ndarray, class_names: Sequence[str] | None = None, samples: int = 1,
                     size: int = 210) -> alt.HConcatChart:
    """Predicted class (faded by confidence), predictive entropy and the R draws' spread over the
    input plane, each with the training points."""
    frame = surface_frame(xs, ys, arrays, class_names)
    n_classes = int(max(np.asarray(arrays["predicted"]).max(), np.asarray(y_train).max())) + 1
    names = list(class_names) if class_names else [str(k) for k in range(n_classes)]
    x_train = np.asarray(x_train, dtype=np.float64)
    points = pd.DataFrame({"x1": x_train[:, 0], "x2": x_train[:, 1],
                           "class": [names[int(k)] for k in np.asarray(y_train)]})
    x_scale = alt.Scale(domain=[float(frame["x"].min()), float(frame["x_end"].max())], nice=False, zero=False)
    y_scale = alt.Scale(domain=[float(frame["y"].min()), float(frame["y_end"].max())], nice=False, zero=False)
    class_scale = alt.Scale(domain=names, range=CLASS_COLOURS[:len(names)])

    def cells(colour: alt.Color, title: str, opacity: Any = alt.value(1.0)) -> alt.LayerChart:
        rect = alt.Chart(frame).mark_rect().encode(
            x=alt.X("x:Q", title="x1", scale=x_scale), x2="x_end:Q",
            y=alt.Y("y:Q", title="x2", scale=y_scale), y2="y_end:Q",
            color=colour, opacity=opacity,
            tooltip=["class:N", alt.Tooltip("confidence:Q", format=".3f"), alt.Tooltip("entropy:Q", format=".3f"),
                     alt.Tooltip("spread:Q", format=".3f")])
        dots = alt.Chart(points).mark_circle(size=14, stroke="white", strokeWidth=0.5, opacity=0.9).encode(
            x="x1:Q", y="x2:Q", color=alt.Color("class:N", scale=class_scale, legend=None))
        return alt.layer(rect, dots).properties(title=title, width=size, height=size)

    predicted = cells(alt.Color("class:N", title="predicted class", scale=class_scale,
                                legend=alt.Legend(orient="bottom")),
                      "predicted class", alt.Opacity("confidence:Q", scale=alt.Scale(domain=[1 / n_classes, 1]),
                                                     legend=None))
    entropy = cells(alt.Color("entropy:Q", title="entropy (nats)",
                              scale=alt.Scale(scheme="viridis", domain=[0, float(np.log(n_classes))]),
                              legend=alt.Legend(**GRADIENT_LEGEND)), "predictive entropy")
    spread = cells(alt.Color("spread:Q", title="sd over draws", scale=alt.Scale(scheme="magma", reverse=True),
                             legend=alt.Legend(**GRADIENT_LEGEND)),
                   f"spread of the {samples} draws" if samples > 1 else "spread (one draw: none)")
    return alt.hconcat(predicted, entropy, spread).resolve_scale(
        color="independent", opacity="independent").properties(autosize=FIXED_SIZE)


# --- the prior beside the posterior -------------------------------------------------------------------

def prior_chart(prior: Mapping[str, Any], statistic_name: str, width: int = 260,
                value_range: tuple[float, float] = (0.0, 1.0)) -> alt.Chart:
    """The prior of the statistic: a density curve, or a rule at the prior's single value."""
    if prior["kind"] == "density":
        frame = pd.DataFrame({statistic_name: np.asarray(prior["x"], dtype=np.float64),
                              "density": np.asarray(prior["density"], dtype=np.float64)})
        cap = float(np.quantile(frame["density"], 0.98)) * 1.2 or 1.0
        frame["density"] = frame["density"].clip(upper=cap)  # Beta densities with a < 1 diverge at the ends
        chart = alt.Chart(frame).mark_area(color="#009E73", opacity=0.4, line={"color": "#009E73"}).encode(
            x=alt.X(f"{statistic_name}:Q", scale=alt.Scale(domain=list(value_range), nice=False)),
            y=alt.Y("density:Q", title="prior density"))
    else:
        frame = pd.DataFrame({statistic_name: [float(prior["value"])], "label": [prior["label"]]})
        chart = alt.Chart(frame).mark_rule(color="#009E73", size=3).encode(
            x=alt.X(f"{statistic_name}:Q", scale=alt.Scale(domain=list(value_range), nice=False)),
            tooltip=["label:N"])
    return chart.properties(title={"text": "prior", "subtitle": str(prior["label"])}, width=width, height=180)


# --- comparing runs (the Compare page) -----------------------------------------------------------------

def family_colour_scale(labels: Sequence[str], families: Sequence[str]) -> alt.Scale:
    """Each run's line in its family's fixed colour (runs of one family differ by dash)."""
    return alt.Scale(domain=list(labels), range=[family_colour(f) for f in families])


def compare_curves(curves: Sequence[Mapping[str, Any]], metric: str) -> alt.LayerChart:
    """Metric vs density for several runs on one chart; each curve dict has label, family,
    density, values (and thresholds)."""
    frames = [pd.DataFrame({"run": c["label"], "family": c["family"],
                            "density": np.asarray(c["density"], dtype=np.float64),
                            "value": np.asarray(c["values"], dtype=np.float64),
                            "threshold": np.asarray(c["thresholds"], dtype=np.float64)}) for c in curves]
    frame = pd.concat(frames, ignore_index=True).sort_values(["run", "density"], kind="stable")
    labels = [c["label"] for c in curves]
    colour = alt.Color("run:N", title="run", scale=family_colour_scale(labels, [c["family"] for c in curves]),
                       legend=alt.Legend(orient="bottom", columns=1, labelLimit=600))
    scale = alt.Scale(type="log") if (frame["density"] > 0).all() else alt.Scale()
    base = alt.Chart(frame).encode(
        x=alt.X("density:Q", title="density (fraction of weights kept)", scale=scale),
        y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
        color=colour, strokeDash=alt.StrokeDash("run:N", legend=None),
        tooltip=["run:N", alt.Tooltip("threshold:Q", format=".4g"), alt.Tooltip("density:Q", format=".4f"),
                 alt.Tooltip("value:Q", format=".4f")])
    return alt.layer(base.mark_line(), base.mark_circle(size=25)).properties(
        title=f"{metric} vs density, each family pruned on its own statistic (mean weights)", width=620, height=320,
        autosize=FIXED_SIZE)


def compare_ecdf(entropies: Sequence[Mapping[str, Any]], max_entropy: float | None = None) -> alt.Chart:
    """Entropy ECDFs of several runs: colour = run (family colour), solid = in-domain, dashed = OOD."""
    frames = []
    for item in entropies:
        part = ecdf_frame({item["set"]: item["values"]})
        part["run"] = item["label"]
        part["domain"] = item["domain"]
        frames.append(_thin_ecdf(part, 400))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {"set": [], "entropy": [], "ecdf": [], "run": [], "domain": []})
    labels = list(dict.fromkeys(item["label"] for item in entropies))
    families = [next(i["family"] for i in entropies if i["label"] == label) for label in labels]
    x_scale = alt.Scale(domain=[0, max_entropy], nice=False) if max_entropy else alt.Scale(nice=False)
    return alt.Chart(frame).mark_line(interpolate="step-after").encode(
        x=alt.X("entropy:Q", title="predictive entropy (nats)", scale=x_scale, axis=alt.Axis(labelFlush=False)),
        y=alt.Y("ecdf:Q", title="fraction of inputs with entropy <= x", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("run:N", scale=family_colour_scale(labels, families),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=600)),
        strokeDash=alt.StrokeDash("domain:N", title="inputs",
                                  scale=alt.Scale(domain=["in-domain", "out-of-domain"], range=[[1, 0], [5, 3]])),
        detail="set:N",
        tooltip=["run:N", "set:N", alt.Tooltip("entropy:Q", format=".3f"), alt.Tooltip("ecdf:Q", format=".3f")],
    ).properties(title="entropy ECDFs: solid in-domain, dashed out-of-domain", width=620, height=320,
                 autosize=FIXED_SIZE)


def summary_over_seeds(records: Sequence[Mapping[str, Any]], group: str = "setting",
                       columns: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per setting (runs that differ only by seed): 'median (min, max)' of each numeric
    column over its seeds, the plain value where there is one seed, and the number of seeds."""
    frame = pd.DataFrame(list(records))
    if frame.empty:
        return frame
    columns = list(columns) if columns is not None else [c for c in frame.columns
                                                         if c != group and pd.api.types.is_numeric_dtype(frame[c])]
    rows = []
    for setting, part in frame.groupby(group, sort=False):
        row: dict[str, Any] = {group: setting, "seeds": len(part)}
        for column in columns:
            values = pd.to_numeric(part[column], errors="coerce").dropna()
            if values.empty:
                row[column] = ""
            elif len(values) == 1:
                row[column] = f"{values.iloc[0]:.4g}"
            else:
                row[column] = f"{values.median():.4g} ({values.min():.4g}, {values.max():.4g})"
        rows.append(row)
    return pd.DataFrame(rows)


# --- masks as in seed 002 (figures 4-5): receptive fields, two masks side by side or as a difference ----------

def receptive_field_frame(first_layer_weights: np.ndarray, first_layer_mask: np.ndarray, units: Sequence[int],
                          input_shape: Sequence[int]) -> pd.DataFrame:
    """The kept incoming weights of chosen first-layer units on the image grid (pruned: 0)."""
    weights = np.asarray(first_layer_weights, dtype=np.float64)[:, :-1]  # bias column dropped
    mask = np.asarray(first_layer_mask)[:, :-1]
    height, width = int(input_shape[0]), int(input_shape[1])
    if weights.shape[1] != height * width:
        raise ValueError(f"first layer has {weights.shape[1]} inputs, not {height}x{width}")
    rows, cols = np.divmod(np.arange(height * width), width)
    frames = [pd.DataFrame({"unit": f"unit {int(u)}", "row": rows, "col": cols, "row_end": rows + 1,
                            "col_end": cols + 1, "weight": np.where(mask[int(u)], weights[int(u)], 0.0)})
              for u in units]
    return pd.concat(frames, ignore_index=True)


def receptive_fields(first_layer_weights: np.ndarray, first_layer_mask: np.ndarray, units: Sequence[int],
                     input_shape: Sequence[int], side: int = 140) -> alt.FacetChart:
    """One square 28x28 image per chosen unit: its kept weights, diverging colours centred on 0."""
    frame = receptive_field_frame(first_layer_weights, first_layer_mask, units, input_shape)
    height, width = int(input_shape[0]), int(input_shape[1])
    bound = float(np.abs(frame["weight"]).max()) or 1.0
    cell = side / max(height, width)
    return alt.Chart(frame).mark_rect().encode(
        x=alt.X("col:Q", axis=None, scale=alt.Scale(domain=[0, width], nice=False, zero=False)), x2="col_end:Q",
        y=alt.Y("row:Q", axis=None, scale=alt.Scale(domain=[0, height], nice=False, zero=False, reverse=True)),
        y2="row_end:Q",
        color=alt.Color("weight:Q", scale=alt.Scale(scheme="redblue", domain=[-bound, bound]),
                        legend=alt.Legend(**GRADIENT_LEGEND)),
        tooltip=["unit:N", "row:Q", "col:Q", alt.Tooltip("weight:Q", format=".3f")],
    ).properties(width=cell * width, height=cell * height).facet(
        facet=alt.Facet("unit:N", title=None, sort=[f"unit {int(u)}" for u in units]), columns=5
    ).properties(title="receptive fields: kept weights into each unit", autosize=FIXED_SIZE)


MASK_STATES = ("kept in both", "only in A", "only in B", "in neither")
MASK_STATE_COLOURS = ("#000000", "#0072B2", "#E69F00", "#eeeeee")


def mask_difference_frame(mask_a: np.ndarray, mask_b: np.ndarray, max_cells: int = MAX_HEATMAP_CELLS) -> pd.DataFrame:
    """Where two masks of one layer agree and differ, per block: the majority state of its entries."""
    a, b = np.asarray(mask_a, dtype=bool), np.asarray(mask_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"masks differ in shape: {a.shape} and {b.shape}")
    states = np.select([a & b, a & ~b, ~a & b], [0, 1, 2], default=3)
    counts = [block_frame((states == k).astype(np.float64), max_cells)["total"].to_numpy() for k in range(4)]
    frame = block_frame(np.zeros(a.shape), max_cells)[["row", "col", "row_start", "col_start", "size"]]
    stacked = np.stack(counts, axis=1)
    frame["state"] = [MASK_STATES[k] for k in stacked.argmax(axis=1)]
    for name, column in zip(("both", "only_a", "only_b", "neither"), stacked.T):
        frame[name] = column.astype(np.int64)
    return frame


def mask_difference(mask_a: np.ndarray, mask_b: np.ndarray, title: str, max_cells: int = MAX_HEATMAP_CELLS) -> alt.Chart:
    frame = mask_difference_frame(mask_a, mask_b, max_cells)
    return alt.Chart(frame).mark_rect().encode(
        x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None),
        color=alt.Color("state:N", title="weight", scale=alt.Scale(domain=list(MASK_STATES),
                                                                    range=list(MASK_STATE_COLOURS)),
                        legend=alt.Legend(orient="bottom", columns=2)),
        tooltip=["row_start:Q", "col_start:Q", "state:N", "both:Q", "only_a:Q", "only_b:Q"],
    ).properties(title=title, width=CHART_WIDTH, height=CHART_WIDTH * 0.6, autosize=FIXED_SIZE)


# --- the network as a graph (the playground) ----------------------------------------------------------------

def network_graph_frames(masks: Sequence[np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Nodes (layer, unit, x, y) and kept edges (x, y, x2, y2) of a small network; bias columns dropped."""
    widths = [np.asarray(masks[0]).shape[1] - 1] + [np.asarray(m).shape[0] for m in masks]
    nodes = []
    for layer, width in enumerate(widths):
        for unit in range(width):
            nodes.append({"layer": layer, "unit": unit, "x": float(layer),
                          "y": (unit + 0.5) / width})
    position = {(n["layer"], n["unit"]): (n["x"], n["y"]) for n in nodes}
    edges = []
    for layer, mask in enumerate(masks):
        outputs, inputs = np.nonzero(np.asarray(mask)[:, :-1])
        for out_unit, in_unit in zip(outputs, inputs):
            x, y = position[(layer, int(in_unit))]
            x2, y2 = position[(layer + 1, int(out_unit))]
            edges.append({"x": x, "y": y, "x2": x2, "y2": y2})
    return pd.DataFrame(nodes), pd.DataFrame(edges, columns=["x", "y", "x2", "y2"])


def network_graph(masks: Sequence[np.ndarray], title: str = "kept connections", width: int = 300,
                  height: int = 260, colour: str | None = None) -> alt.LayerChart:
    nodes, edges = network_graph_frames(masks)
    axis_x = alt.X("x:Q", axis=None, scale=alt.Scale(domain=[-0.2, len(masks) + 0.2]))
    axis_y = alt.Y("y:Q", axis=None, scale=alt.Scale(domain=[0, 1]))
    lines = alt.Chart(edges).mark_rule(color=colour or "#0072B2", opacity=0.5).encode(x=axis_x, y=axis_y, x2="x2:Q", y2="y2:Q")
    dots = alt.Chart(nodes).mark_circle(size=40, color="#D55E00").encode(x=axis_x, y=axis_y,
                                                                          tooltip=["layer:Q", "unit:Q"])
    return alt.layer(lines, dots).properties(title=title, width=width, height=height)


# --- playback: the statistic over the epochs (per-epoch snapshots recorded in training) ------------------------

MAX_CURVE_EPOCHS = 400  # points per line of the density-over-epochs chart (long toy trainings are thinned)


def _log_binned(edges: np.ndarray) -> bool:
    """Edges that are not equally spaced: the log bins of a statistic unbounded above."""
    widths = np.diff(np.asarray(edges, dtype=np.float64))
    return not np.allclose(widths, widths[0], rtol=1e-6)


def snapshot_histogram_frame(histogram: np.ndarray, edges: np.ndarray, labels: Sequence[str]) -> pd.DataFrame:
    """Rows (layer, bin_start, bin_end, count) of one epoch's histograms: histogram has shape (layers, bins)."""
    histogram = np.asarray(histogram)
    edges = np.asarray(edges, dtype=np.float64)
    if histogram.ndim != 2 or histogram.shape[1] != len(edges) - 1:
        raise ValueError(f"expected (layers, {len(edges) - 1}) counts, got shape {histogram.shape}")
    return pd.concat([pd.DataFrame({"layer": str(labels[layer]), "bin_start": edges[:-1], "bin_end": edges[1:],
                                    "count": histogram[layer].astype(np.int64)})
                      for layer in range(histogram.shape[0])], ignore_index=True)


def snapshot_histograms(histogram: np.ndarray, edges: np.ndarray, statistic_name: str, labels: Sequence[str],
                        threshold: float | None = None, colour: str | None = None, max_count: int | None = None,
                        log_counts: bool = True, title: str = "") -> alt.ConcatChart:
    """One epoch's histograms per layer on the fixed snapshot edges. The count axis is fixed by
    `max_count` (the largest bin over all epochs) so that bars move, not the axis, as epochs play;
    log-spaced edges (statistics unbounded above) get a symlog x axis."""
    frame = snapshot_histogram_frame(histogram, edges, labels)
    edges = np.asarray(edges, dtype=np.float64)
    if _log_binned(edges):
        x_scale = alt.Scale(type="symlog", constant=float(edges[1]), domain=[float(edges[0]), float(edges[-1])],
                            nice=False)
    else:
        x_scale = alt.Scale(domain=[float(edges[0]), float(edges[-1])], nice=False)
    top = int(max_count if max_count is not None else max(1, frame["count"].max()))
    y_scale = alt.Scale(type="symlog", domain=[0, top]) if log_counts else alt.Scale(domain=[0, top])
    charts = []
    for label, part in frame.groupby("layer", sort=False):
        bars = alt.Chart(part).mark_bar(**_colour(colour)).encode(
            x=alt.X("bin_start:Q", title=statistic_name, bin="binned", scale=x_scale), x2="bin_end:Q",
            y=alt.Y("count:Q", title="weights", scale=y_scale),
            tooltip=[alt.Tooltip("bin_start:Q", format=".4g"), alt.Tooltip("bin_end:Q", format=".4g"), "count:Q"])
        layers = [bars]
        if threshold is not None and np.isfinite(threshold):
            layers.append(threshold_rule(threshold))
        charts.append(alt.layer(*layers).properties(title=str(label), width=CHART_WIDTH, height=160))
    return alt.concat(*charts, columns=HISTOGRAMS_PER_ROW).properties(title=title)


def density_over_epochs_frame(density: np.ndarray, overall: np.ndarray, phases: Sequence[str],
                              labels: Sequence[str], max_epochs: int = MAX_CURVE_EPOCHS,
                              keep_epoch: int | None = None) -> pd.DataFrame:
    """Long rows (epoch, phase, layer, density) per layer and "all weights"; epochs count from 1 over
    every phase. Trainings longer than max_epochs are thinned evenly (first, last and keep_epoch kept)."""
    density = np.asarray(density, dtype=np.float64)
    overall = np.asarray(overall, dtype=np.float64)
    epochs = density.shape[0]
    index = np.arange(epochs)
    if epochs > max_epochs:
        index = np.unique(np.concatenate([np.linspace(0, epochs - 1, max_epochs).round().astype(np.int64),
                                          [] if keep_epoch is None else [int(keep_epoch) - 1]])).astype(np.int64)
    phases = np.asarray(phases, dtype=str)
    frames = [pd.DataFrame({"epoch": index + 1, "phase": phases[index], "layer": str(labels[layer]),
                            "density": density[index, layer]}) for layer in range(density.shape[1])]
    frames.append(pd.DataFrame({"epoch": index + 1, "phase": phases[index], "layer": "all weights",
                                "density": overall[index]}))
    return pd.concat(frames, ignore_index=True)


def density_over_epochs(density: np.ndarray, overall: np.ndarray, phases: Sequence[str], labels: Sequence[str],
                        current: int, colour: str | None = None, threshold: float | None = None) -> alt.LayerChart:
    """Density at the default threshold per layer (dashed) and overall (solid) over the epochs, in the
    family's colour; a red rule and points mark epoch `current` (1-based); warm-start epochs shaded."""
    frame = density_over_epochs_frame(density, overall, phases, labels, keep_epoch=current)
    names = [*(str(label) for label in labels), "all weights"]
    dashes = [[4, 3]] * len(labels) + [[1, 0]]
    x = alt.X("epoch:Q", title="epoch (all phases)", axis=alt.Axis(tickMinStep=1),
              scale=alt.Scale(domain=[1, max(2, len(overall))], nice=False))
    y = alt.Y("density:Q", title="density at the default threshold", scale=alt.Scale(domain=[0, 1]))
    base = alt.Chart(frame).encode(
        x=x, y=y, strokeDash=alt.StrokeDash("layer:N", title=None, scale=alt.Scale(domain=names, range=dashes),
                                            legend=alt.Legend(orient="bottom", columns=2, labelLimit=400)),
        tooltip=["epoch:Q", "phase:N", "layer:N", alt.Tooltip("density:Q", format=".4f")])
    layers = []
    warm = [i for i, phase in enumerate(phases) if str(phase) == "warm-start"]
    if warm:
        shade = pd.DataFrame({"start": [min(warm) + 0.5], "end": [max(warm) + 1.5], "phase": ["warm start"]})
        layers.append(alt.Chart(shade).mark_rect(color="#999999", opacity=0.15).encode(
            x="start:Q", x2="end:Q", tooltip=["phase:N"]))
    layers.append(base.mark_line(strokeWidth=2, **_colour(colour)))
    marker = pd.DataFrame({"epoch": [int(current)]})
    layers.append(alt.Chart(marker).mark_rule(color="red", size=2).encode(x="epoch:Q", tooltip=["epoch:Q"]))
    here = frame[frame["epoch"] == int(current)]
    layers.append(alt.Chart(here).mark_point(color="red", filled=True, size=50).encode(
        x="epoch:Q", y="density:Q", tooltip=["layer:N", alt.Tooltip("density:Q", format=".4f")]))
    title = "density over the epochs" + (f" (default threshold {threshold:g})" if threshold is not None else "")
    return alt.layer(*layers).properties(title=title, width=560, height=220, autosize=FIXED_SIZE)
