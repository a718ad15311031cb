"""The Playground's histogram with fixed axes: the x axis is the family's statistic's display range
and the y axis runs to the largest layer's number of weights, so neither jumps between the pictures
of one fit or from one fit to the next (a new prior, a new family's run keeps its axes).

Laid out one chart per row: at 1400 px the graph and a two-panel histogram side by side were wider
than the page's main area (about 900 px beside the sidebar)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from dashboard import altair_spec, charts

# The display range of each playground family's statistic (core's StatisticSpec bounds where finite;
# signal-to-noise is unbounded: larger values are counted in the last bin, as the caption says).
STATISTIC_DOMAINS = {
    "inclusion_probability": (0.0, 1.0),
    "node_shrinkage_probability": (0.0, 1.0),
    "log_alpha": (-8.0, 8.0),
    "signal_to_noise": (0.0, 5.0),
}
MAIN_WIDTH_AT_1400 = 900  # px: a 1400-px window's main area beside Streamlit's sidebar (wide layout)


def domain(statistic: str, statistics: Sequence[np.ndarray]) -> tuple[float, float]:
    """The fixed x range of `statistic`; a statistic without one gets the range of the values seen."""
    if statistic in STATISTIC_DOMAINS:
        return STATISTIC_DOMAINS[statistic]
    return charts.histogram_range(statistics)


def histogram_spec(picture: Mapping[str, Any], colour: str | None = None) -> dict[str, Any]:
    """The Vega-Lite spec of the picture's per-layer histograms with fixed x and y domains."""
    statistics = [np.asarray(s, dtype=np.float64) for s in picture["statistics"]]
    low, high = domain(picture["statistic"], statistics)
    # Values beyond the range go into the end bins (never dropped: every weight is counted).
    clipped = [np.clip(s, low, high) for s in statistics]
    chart = charts.statistic_histogram(
        clipped,
        picture["default"],
        picture["statistic"],
        log_counts=True,
        labels=None,
        value_range=(low, high),
        colour=colour,
    )
    spec = altair_spec.spec(chart, validate=False)
    most = int(max(s.size for s in statistics))
    for panel in spec["concat"]:
        bars = panel["layer"][0]["encoding"]
        bars["y"]["scale"] = {**bars["y"].get("scale", {}), "domain": [0, most]}
    return spec


def spec_width(spec: Mapping[str, Any]) -> int:
    """The drawn width of a chart spec in px, roughly: panels side by side plus 60 px of axis each."""
    if "concat" in spec:
        columns = int(spec.get("columns") or len(spec["concat"]))
        row = spec["concat"][:columns]
        return sum(int(panel.get("width", 300)) + 60 for panel in row)
    if "hconcat" in spec:
        return sum(spec_width(panel) for panel in spec["hconcat"])
    return int(spec.get("width", 300)) + 60
