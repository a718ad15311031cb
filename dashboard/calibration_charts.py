"""Calibration and decision charts: pure functions, arrays in, Altair chart out.

Every number drawn is computed in core (core.predict.metrics through dashboard.backend); these
functions only lay the arrays out. Each chart's rows are in one named dataset, so tests read the
numbers back from the spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

# The NUTS reference's own colour (charts.style): a purple no family uses, far from bnn's orange;
# charts.predictions.reference_layers draws the overlay in the same colour.
from dashboard.charts import REFERENCE_COLOUR, family_colour  # noqa: F401  (REFERENCE_COLOUR: one home, charts.style)

# A reference whose diagnostics fail is drawn dashed and grey-purple, with the warning on the chart.
UNTRUSTED_REFERENCE_COLOUR = "#9E9AC8"
WARNING_COLOUR = "#B2182B"
DIAGONAL_COLOUR = "#888888"
MARK_COLOUR = "#D62728"  # the 0.95 doubt level, as the class-probability bars mark it
# A risk-coverage curve has one point per distinct confidence (up to n); more than this many are
# thinned evenly (the first and last kept): the line looks the same, the spec stays small.
MAX_CURVE_POINTS = 400
WIDTH, HEIGHT = 300, 260


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).reshape(-1)


def thin(n: int, limit: int = MAX_CURVE_POINTS) -> np.ndarray:
    """Indices of at most `limit` evenly spaced points of n, the first and last included."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(np.int64))


def diagonal(title_x: str, title_y: str) -> alt.Chart:
    frame = pd.DataFrame({"x": [0.0, 1.0], "y": [0.0, 1.0]})
    return (
        alt.Chart(frame)
        .mark_line(color=DIAGONAL_COLOUR, strokeDash=[4, 4])
        .encode(
            x=alt.X("x:Q", title=title_x, scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("y:Q", title=title_y, scale=alt.Scale(domain=[0, 1])),
        )
    )


# --- classifiers ----------------------------------------------------------------------------------


def reliability_frame(
    edges: Sequence[float], count: Sequence[int], confidence: Sequence[float], accuracy: Sequence[float]
) -> pd.DataFrame:
    """One row per non-empty bin: its edges, count, mean confidence, accuracy and their gap."""
    edges, count = _floats(edges), np.asarray(count, dtype=np.int64).reshape(-1)
    frame = pd.DataFrame(
        {
            "bin_low": edges[:-1],
            "bin_high": edges[1:],
            "count": count,
            "confidence": _floats(confidence),
            "accuracy": _floats(accuracy),
        }
    )
    frame = frame[frame["count"] > 0].reset_index(drop=True)
    frame["gap"] = frame["accuracy"] - frame["confidence"]
    return frame


def reliability_diagram(
    edges: Sequence[float],
    count: Sequence[int],
    confidence: Sequence[float],
    accuracy: Sequence[float],
    ece: float,
    colour: str | None = None,
    title: str | None = None,
) -> alt.LayerChart:
    """The reliability diagram (Guo et al. 2017): per confidence bin, a bar of its accuracy spanning
    the bin, a tick at its mean confidence, and the diagonal (calibrated). ECE in the title."""
    frame = reliability_frame(edges, count, confidence, accuracy)
    base = alt.Chart(frame)
    tooltip = [
        alt.Tooltip("bin_low:Q", format=".3f"),
        alt.Tooltip("bin_high:Q", format=".3f"),
        "count:Q",
        alt.Tooltip("confidence:Q", format=".3f"),
        alt.Tooltip("accuracy:Q", format=".3f"),
        alt.Tooltip("gap:Q", format="+.3f"),
    ]
    bars = base.mark_bar(opacity=0.75, color=colour or "#4C78A8", stroke="white").encode(
        x=alt.X("bin_low:Q", title="confidence (max class probability)", scale=alt.Scale(domain=[0, 1])),
        x2="bin_high:Q",
        y=alt.Y("accuracy:Q", title="accuracy in the bin", scale=alt.Scale(domain=[0, 1])),
        tooltip=tooltip,
    )
    ticks = base.mark_point(shape="diamond", color="black", size=30, filled=True).encode(
        x="confidence:Q", y="confidence:Q", tooltip=tooltip
    )
    return alt.layer(diagonal("confidence", "accuracy"), bars, ticks).properties(
        title=title or f"reliability: ECE {ece:.4f} over {len(count)} bins", width=WIDTH, height=HEIGHT
    )


def risk_coverage_frame(
    coverage: Sequence[float], risk: Sequence[float], threshold: Sequence[float] | None = None
) -> pd.DataFrame:
    coverage, risk = _floats(coverage), _floats(risk)
    keep = thin(len(coverage))
    frame = pd.DataFrame({"coverage": coverage[keep], "risk": risk[keep]})
    if threshold is not None:
        frame["threshold"] = _floats(threshold)[keep]
    return frame


def decision_points(points: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Rows of the marked decisions: name -> {level, coverage (fraction decided), risk}."""
    rows = [
        {
            "decision": name,
            "level": float(p["level"]),
            "coverage": float(p["coverage"]),
            "risk": None if p.get("risk") is None else float(p["risk"]),
        }
        for name, p in points.items()
    ]
    return pd.DataFrame(rows, columns=["decision", "level", "coverage", "risk"])


def risk_coverage_curve(
    coverage: Sequence[float],
    risk: Sequence[float],
    aurc: float,
    points: Mapping[str, Mapping[str, Any]] | None = None,
    threshold: Sequence[float] | None = None,
    colour: str | None = None,
) -> alt.LayerChart:
    """Risk (error rate of the decided inputs) against coverage (the fraction decided) as the doubt
    level moves from the top confidence down (Geifman & El-Yaniv 2017); AURC in the title.
    points: decisions to mark, name -> {level, coverage, risk}; the first in red (the 0.95 level)."""
    frame = risk_coverage_frame(coverage, risk, threshold)
    tooltip = [alt.Tooltip("coverage:Q", format=".3f"), alt.Tooltip("risk:Q", format=".4f")]
    if threshold is not None:
        tooltip.append(alt.Tooltip("threshold:Q", title="doubt level", format=".4f"))
    layers: list = [
        alt.Chart(frame)
        .mark_line(color=colour or "#4C78A8", interpolate="step-after")
        .encode(
            x=alt.X("coverage:Q", title="coverage (fraction decided)", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("risk:Q", title="risk (error rate of the decided)"),
            tooltip=tooltip,
        )
    ]
    if points:
        marks = decision_points(points).dropna(subset=["risk"])
        layers.append(
            alt.Chart(marks)
            .mark_point(size=90, filled=True)
            .encode(
                x="coverage:Q",
                y="risk:Q",
                color=alt.Color(
                    "decision:N",
                    title="doubt level",
                    legend=alt.Legend(orient="bottom"),
                    scale=alt.Scale(domain=list(points), range=[MARK_COLOUR, "black"]),
                ),
                shape="decision:N",
                tooltip=[
                    "decision:N",
                    alt.Tooltip("level:Q", format=".4f"),
                    alt.Tooltip("coverage:Q", format=".3f"),
                    alt.Tooltip("risk:Q", format=".4f"),
                ],
            )
        )
    return alt.layer(*layers).properties(title=f"risk-coverage: AURC {aurc:.4f}", width=WIDTH, height=HEIGHT)


def entropy_split_frame(parts: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """Long rows (set, part, nats, order) from set -> {aleatoric, epistemic} means."""
    rows = []
    for name, values in parts.items():
        rows.append(
            {"set": name, "part": "aleatoric (expected entropy)", "nats": float(values["aleatoric"]), "order": 0}
        )
        rows.append(
            {"set": name, "part": "epistemic (mutual information)", "nats": float(values["epistemic"]), "order": 1}
        )
    return pd.DataFrame(rows, columns=["set", "part", "nats", "order"])


def entropy_split_bars(parts: Mapping[str, Mapping[str, float]], max_entropy: float | None = None) -> alt.Chart:
    """Mean predictive entropy per input set stacked as aleatoric + epistemic (their sum is the
    total, exactly: Depeweg et al. 2018). The epistemic part should grow out of domain."""
    frame = entropy_split_frame(parts)
    y_scale = alt.Scale(domain=[0, max_entropy]) if max_entropy else alt.Undefined
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("set:N", title=None, sort=list(parts), axis=alt.Axis(labelAngle=-20, labelLimit=160)),
            y=alt.Y("nats:Q", title="mean entropy (nats)", stack="zero", scale=y_scale),
            color=alt.Color(
                "part:N",
                title=None,
                legend=alt.Legend(orient="bottom", direction="vertical"),
                scale=alt.Scale(range=["#A6CEE3", "#1F78B4"]),
            ),
            order=alt.Order("order:Q"),
            tooltip=["set:N", "part:N", alt.Tooltip("nats:Q", format=".4f")],
        )
        .properties(title="entropy split: aleatoric + epistemic = total", width=WIDTH, height=HEIGHT)
    )


# --- regression -------------------------------------------------------------------------------------


def calibration_curve_chart(
    nominal: Sequence[float], observed: Sequence[float], mean_abs_gap: float, colour: str | None = None
) -> alt.LayerChart:
    """Observed against nominal coverage of the central intervals (below the diagonal: intervals too
    narrow; above: too wide)."""
    frame = pd.DataFrame({"nominal": _floats(nominal), "observed": _floats(observed)})
    curve = (
        alt.Chart(frame)
        .mark_line(point=True, color=colour or "#4C78A8")
        .encode(
            x=alt.X("nominal:Q", title="nominal coverage of the central interval", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("observed:Q", title="observed coverage", scale=alt.Scale(domain=[0, 1])),
            tooltip=[alt.Tooltip("nominal:Q", format=".2f"), alt.Tooltip("observed:Q", format=".3f")],
        )
    )
    return alt.layer(diagonal("nominal", "observed"), curve).properties(
        title=f"calibration curve: mean |observed - nominal| {mean_abs_gap:.3f}", width=WIDTH, height=HEIGHT
    )


def pit_histogram_chart(
    edges: Sequence[float], density: Sequence[float], ks_statistic: float, colour: str | None = None
) -> alt.LayerChart:
    """The PIT histogram as a density on [0, 1]: flat at 1 when calibrated, U-shaped when the
    predictive is too narrow, hump-shaped when too wide; the KS distance in the title."""
    edges = _floats(edges)
    frame = pd.DataFrame({"pit_low": edges[:-1], "pit_high": edges[1:], "density": _floats(density)})
    bars = (
        alt.Chart(frame)
        .mark_bar(opacity=0.75, color=colour or "#4C78A8", stroke="white")
        .encode(
            x=alt.X("pit_low:Q", title="PIT = F(y | x)", scale=alt.Scale(domain=[0, 1])),
            x2="pit_high:Q",
            y=alt.Y("density:Q", title="density"),
            tooltip=[
                alt.Tooltip("pit_low:Q", format=".2f"),
                alt.Tooltip("pit_high:Q", format=".2f"),
                alt.Tooltip("density:Q", format=".3f"),
            ],
        )
    )
    uniform = (
        alt.Chart(pd.DataFrame({"density": [1.0]}))
        .mark_rule(color=DIAGONAL_COLOUR, strokeDash=[4, 4])
        .encode(y="density:Q")
    )
    return alt.layer(bars, uniform).properties(
        title=f"PIT histogram: KS distance {ks_statistic:.3f}", width=WIDTH, height=HEIGHT
    )


def interval_table(intervals: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """Rows per level: nominal, observed coverage, their difference, mean width (core's interval_metrics)."""
    rows = [
        {
            "level": float(level),
            "observed coverage": float(v["coverage"]),
            "coverage - level": float(v["coverage"]) - float(level),
            "mean width": float(v["width"]),
        }
        for level, v in intervals.items()
    ]
    return pd.DataFrame(rows, columns=["level", "observed coverage", "coverage - level", "mean width"])


# --- several runs (the Compare page) -----------------------------------------------------------------


def _run_colours(runs: Sequence[Mapping[str, Any]]) -> alt.Scale:
    return alt.Scale(domain=[r["label"] for r in runs], range=[family_colour(r.get("family")) for r in runs])


def compare_reliability(runs: Sequence[Mapping[str, Any]]) -> alt.LayerChart:
    """Reliability curves of several runs: each run's (confidence, accuracy) per non-empty bin.
    runs: {label, family, edges, count, confidence, accuracy, ece} each."""
    frames = []
    for run in runs:
        frame = reliability_frame(run["edges"], run["count"], run["confidence"], run["accuracy"])
        frame["run"] = run["label"]
        frame["ece"] = float(run["ece"])
        frames.append(frame)
    frame = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["bin_low", "bin_high", "count", "confidence", "accuracy", "gap", "run", "ece"])
    )
    curves = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("confidence:Q", title="mean confidence in the bin", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("accuracy:Q", title="accuracy in the bin", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color(
                "run:N",
                scale=_run_colours(runs),
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=400),
            ),
            detail="run:N",
            tooltip=[
                "run:N",
                "count:Q",
                alt.Tooltip("confidence:Q", format=".3f"),
                alt.Tooltip("accuracy:Q", format=".3f"),
                alt.Tooltip("ece:Q", format=".4f"),
            ],
        )
    )
    return alt.layer(diagonal("confidence", "accuracy"), curves).properties(
        title="reliability (diagonal: calibrated)", width=WIDTH, height=HEIGHT
    )


def compare_risk_coverage(runs: Sequence[Mapping[str, Any]]) -> alt.Chart:
    """Risk-coverage curves of several runs: {label, family, coverage, risk, aurc} each."""
    frames = []
    for run in runs:
        frame = risk_coverage_frame(run["coverage"], run["risk"])
        frame["run"], frame["aurc"] = run["label"], float(run["aurc"])
        frames.append(frame)
    frame = (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["coverage", "risk", "run", "aurc"])
    )
    return (
        alt.Chart(frame)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("coverage:Q", title="coverage (fraction decided)", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("risk:Q", title="risk (error rate of the decided)"),
            color=alt.Color(
                "run:N",
                scale=_run_colours(runs),
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=400),
            ),
            tooltip=[
                "run:N",
                alt.Tooltip("coverage:Q", format=".3f"),
                alt.Tooltip("risk:Q", format=".4f"),
                alt.Tooltip("aurc:Q", format=".4f"),
            ],
        )
        .properties(title="risk-coverage (lower is better)", width=WIDTH, height=HEIGHT)
    )


def compare_calibration_curves(runs: Sequence[Mapping[str, Any]]) -> alt.LayerChart:
    """Regression calibration curves of several runs: {label, family, nominal, observed} each."""
    frame = pd.DataFrame(
        [
            {"run": r["label"], "nominal": n, "observed": o}
            for r in runs
            for n, o in zip(_floats(r["nominal"]), _floats(r["observed"]))
        ],
        columns=["run", "nominal", "observed"],
    )
    curves = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("nominal:Q", title="nominal coverage", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("observed:Q", title="observed coverage", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color(
                "run:N",
                scale=_run_colours(runs),
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=400),
            ),
            tooltip=["run:N", alt.Tooltip("nominal:Q", format=".2f"), alt.Tooltip("observed:Q", format=".3f")],
        )
    )
    return alt.layer(diagonal("nominal", "observed"), curves).properties(
        title="calibration curves (diagonal: calibrated)", width=WIDTH, height=HEIGHT
    )


# --- the gap lesson: mean-field, non-factorised and NUTS side by side -------------------------------------


def gap_panel(
    x_grid: Sequence[float],
    panel: Mapping[str, Any],
    x_train: Sequence[float],
    y_train: Sequence[float],
    y_domain: Sequence[float] | None = None,
) -> alt.LayerChart:
    """One posterior's mean and band over x with the training points; its gap ratio in the title.
    panel: name, mean, low, high, gap_ratio, colour; optional warning (drawn on the chart, and the
    band dashed) and caption (a subtitle, e.g. the architecture)."""
    frame = pd.DataFrame(
        {
            "x": _floats(x_grid),
            "mean": _floats(panel["mean"]),
            "low": _floats(panel["low"]),
            "high": _floats(panel["high"]),
        }
    )
    warning = panel.get("warning")
    colour = panel.get("colour") or "#4C78A8"
    y_scale = alt.Scale(domain=list(y_domain)) if y_domain is not None else alt.Undefined
    base = alt.Chart(frame).encode(x=alt.X("x:Q", title="x"))
    layers = [
        base.mark_area(opacity=0.15 if warning else 0.3, color=colour).encode(
            y=alt.Y("low:Q", title="y", scale=y_scale), y2="high:Q"
        ),
        base.mark_line(color=colour, strokeWidth=2, strokeDash=[6, 3] if warning else [1, 0]).encode(y="mean:Q"),
    ]
    if warning:
        for edge in ("low", "high"):
            layers.append(base.mark_line(color=colour, strokeDash=[6, 3]).encode(y=f"{edge}:Q"))
    points = pd.DataFrame({"x": _floats(x_train), "y": _floats(y_train)})
    layers.append(alt.Chart(points).mark_circle(color="#444444", size=12, opacity=0.6).encode(x="x:Q", y="y:Q"))
    if warning:
        note = pd.DataFrame({"x": [float(np.min(frame["x"]))], "text": [str(warning)]})
        layers.append(
            alt.Chart(note)
            .mark_text(
                align="left",
                baseline="top",
                dx=4,
                dy=4,
                color=WARNING_COLOUR,
                fontWeight="bold",
                fontSize=11,
                limit=WIDTH - 10,
            )
            .encode(x="x:Q", y=alt.value(0), text="text:N")
        )
    ratio = panel.get("gap_ratio")
    ratio_text = "n/a" if ratio is None or not np.isfinite(ratio) else f"{ratio:.2f}"
    title: dict[str, Any] = {"text": f"{panel['name']}: gap ratio {ratio_text}"}
    if panel.get("caption"):
        title["subtitle"] = str(panel["caption"])
    if warning:
        title["color"] = WARNING_COLOUR
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT)


def gap_panels(
    x_grid: Sequence[float], panels: Sequence[Mapping[str, Any]], x_train: Sequence[float], y_train: Sequence[float]
) -> alt.HConcatChart:
    """gap_panel for each posterior, side by side on one y scale (bands compared by eye)."""
    lows = [float(np.nanmin(_floats(p["low"]))) for p in panels] + [float(np.min(_floats(y_train)))]
    highs = [float(np.nanmax(_floats(p["high"]))) for p in panels] + [float(np.max(_floats(y_train)))]
    domain = (min(lows), max(highs))
    return alt.hconcat(*[gap_panel(x_grid, p, x_train, y_train, domain) for p in panels])


def with_warning(chart: alt.TopLevelMixin, warning: str | None) -> alt.TopLevelMixin:
    """`chart` with `warning` as a red subtitle under its title (unchanged when None): a failed
    reference is said on the chart itself, not only beside it."""
    if not warning:
        return chart
    title = chart.title
    text = title.text if isinstance(title, alt.TitleParams) else (title if isinstance(title, str) else "")
    return chart.properties(
        title=alt.TitleParams(text=text, subtitle=[warning], subtitleColor=WARNING_COLOUR, subtitleFontWeight="bold")
    )
