"""Histograms of the native statistic, the threshold drawn on them, and the prior beside the posterior.

Pure: numpy arrays in, Altair charts (and the frames behind them) out (see dashboard/charts/__init__.py)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.charts.style import CHART_WIDTH, HISTOGRAMS_PER_ROW, _colour

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


def histogram_frame(
    statistics: Sequence[np.ndarray],
    bins: int = 40,
    value_range: tuple[float, float] | None = None,
    labels: Sequence[str] | None = None,
) -> pd.DataFrame:
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
        frames.append(
            pd.DataFrame(
                {"layer": label, "bin_start": edges[:-1], "bin_end": edges[1:], "count": counts.astype(np.int64)}
            )
        )
    return pd.concat(frames, ignore_index=True)


def statistic_histogram(
    statistics: Sequence[np.ndarray],
    threshold: float | None,
    statistic_name: str,
    bins: int = 40,
    log_counts: bool = True,
    labels: Sequence[str] | None = None,
    value_range: tuple[float, float] | None = None,
    prior: Mapping[str, Any] | None = None,
    colour: str | None = None,
) -> alt.ConcatChart:
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
        bars = (
            alt.Chart(layer_frame)
            .mark_bar(**_colour(colour))
            .encode(
                x=alt.X("bin_start:Q", title=statistic_name, bin="binned", scale=alt.Scale(domain=list(value_range))),
                x2="bin_end:Q",
                y=alt.Y("count:Q", title="weights", scale=y_scale),
                tooltip=["bin_start:Q", "bin_end:Q", "count:Q"],
            )
        )
        layers = [bars]
        if threshold is not None and np.isfinite(threshold):
            layers.append(threshold_rule(threshold))
        charts.append(alt.layer(*layers).properties(title=str(label), width=CHART_WIDTH, height=180))
    if prior is not None:  # the prior of the statistic beside the posterior's histograms
        charts.append(prior_chart(prior, statistic_name, width=CHART_WIDTH, value_range=value_range))
    # At most HISTOGRAMS_PER_ROW side by side: three 320-px charts overflow a 1400-px window's main area.
    return alt.concat(*charts, columns=HISTOGRAMS_PER_ROW)


def threshold_rule(threshold: float, axis: str = "x") -> alt.Chart:
    data = pd.DataFrame({"threshold": [float(threshold)]})
    encoding = {axis: alt.X("threshold:Q") if axis == "x" else alt.Y("threshold:Q")}
    return alt.Chart(data).mark_rule(color="red", strokeDash=[4, 3], size=2).encode(**encoding, tooltip=["threshold:Q"])


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
    rule = {
        "data": {"name": THRESHOLD_DATASET},
        "mark": {"type": "rule", "color": "red", "strokeDash": [4, 3], "size": 2},
        "encoding": {
            "x": {"field": "threshold", "type": "quantitative"},
            "tooltip": [{"field": "threshold", "type": "quantitative"}],
        },
    }
    # Data the panels inherit goes into each panel: Streamlit would convert top-level data too.
    inherited = spec.pop("data", None)
    panels = [
        panel if inherited is None or "data" in panel else {**panel, "data": inherited} for panel in spec["concat"]
    ]
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


# --- the prior beside the posterior -------------------------------------------------------------------


def prior_chart(
    prior: Mapping[str, Any], statistic_name: str, width: int = 260, value_range: tuple[float, float] = (0.0, 1.0)
) -> alt.Chart:
    """The prior of the statistic: a density curve, or a rule at the prior's single value."""
    if prior["kind"] == "density":
        frame = pd.DataFrame(
            {
                statistic_name: np.asarray(prior["x"], dtype=np.float64),
                "density": np.asarray(prior["density"], dtype=np.float64),
            }
        )
        cap = float(np.quantile(frame["density"], 0.98)) * 1.2 or 1.0
        frame["density"] = frame["density"].clip(upper=cap)  # Beta densities with a < 1 diverge at the ends
        chart = (
            alt.Chart(frame)
            .mark_area(color="#009E73", opacity=0.4, line={"color": "#009E73"})
            .encode(
                x=alt.X(f"{statistic_name}:Q", scale=alt.Scale(domain=list(value_range), nice=False)),
                y=alt.Y("density:Q", title="prior density"),
            )
        )
    else:
        frame = pd.DataFrame({statistic_name: [float(prior["value"])], "label": [prior["label"]]})
        chart = (
            alt.Chart(frame)
            .mark_rule(color="#009E73", size=3)
            .encode(
                x=alt.X(f"{statistic_name}:Q", scale=alt.Scale(domain=list(value_range), nice=False)),
                tooltip=["label:N"],
            )
        )
    return chart.properties(title={"text": "prior", "subtitle": str(prior["label"])}, width=width, height=180)
