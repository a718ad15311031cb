"""Curves: metric against density (the pruning sweep) and against R, training progress, and runs compared.

Pure: numpy arrays in, Altair charts (and the frames behind them) out (see dashboard/charts/__init__.py)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.charts.predictions import _thin_ecdf, ecdf_frame
from dashboard.charts.style import FIXED_SIZE, _colour, family_colour

# --- pruning curves -------------------------------------------------------------------------------


def sweep_frame(thresholds: np.ndarray, density: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "threshold": np.asarray(thresholds, dtype=np.float64),
            "density": np.asarray(density, dtype=np.float64),
            "value": np.asarray(values, dtype=np.float64),
        }
    )
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


def metric_vs_density(
    thresholds: np.ndarray,
    density: np.ndarray,
    values: np.ndarray,
    metric: str,
    current: tuple[float, float] | None = None,
    suggested: Mapping[str, float] | None = None,
    selectable: bool = False,
    title: str | None = None,
    colour: str | None = None,
) -> alt.LayerChart:
    """The precomputed sweep as a line over density (log axis), the current setting as a red point,
    the suggested threshold as a star; with `selectable`, a click on a point selects its threshold.
    colour: the curve's (the family's)."""
    frame = sweep_frame(thresholds, density, values)
    positive = frame["density"] > 0
    scale = alt.Scale(type="log") if positive.all() else alt.Scale()
    base = alt.Chart(frame).encode(
        x=alt.X("density:Q", title="density (fraction of weights kept)", scale=scale),
        y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
        tooltip=[
            alt.Tooltip("threshold:Q", format=".4g"),
            alt.Tooltip("density:Q", format=".4f"),
            alt.Tooltip("value:Q", format=".4f"),
        ],
    )
    points = base.mark_circle(size=60 if selectable else 30, **_colour(colour))
    if selectable:
        points = points.add_params(alt.selection_point(name=PICK, fields=["threshold"], on="click", nearest=True))
    layers = [base.mark_line(**_colour(colour)), points]
    if suggested is not None:
        star = pd.DataFrame(
            {
                "density": [float(suggested["density"])],
                "value": [float(suggested["value"])],
                "threshold": [float(suggested["threshold"])],
            }
        )
        layers.append(
            alt.Chart(star)
            .mark_point(
                shape="M0,-1L0.3,-0.3L1,-0.3L0.45,0.15L0.6,0.9L0,0.45L-0.6,0.9L-0.45,0.15L-1,-0.3L-0.3,-0.3Z",
                size=260,
                filled=True,
                color="#009e73",
            )
            .encode(
                x="density:Q",
                y="value:Q",
                tooltip=[alt.Tooltip("threshold:Q", title="suggested threshold", format=".4g"), "density:Q", "value:Q"],
            )
        )
    if current is not None:
        point = pd.DataFrame({"density": [float(current[0])], "value": [float(current[1])]})
        layers.append(
            alt.Chart(point)
            .mark_point(color="red", size=160, filled=True, shape="diamond")
            .encode(x="density:Q", y="value:Q", tooltip=["density:Q", "value:Q"])
            .properties(name=CURRENT_LAYER)
        )
    return alt.layer(*layers).properties(title=title or f"{metric} vs density", width=520, height=300)


CURRENT_LAYER = "current"  # the name of metric_vs_density's red diamond layer in its spec
# with_current_point's dataset: the point is data, not spec, so that the browser swaps it in place
CURRENT_DATASET = "current_point"


def with_current_point(spec: Mapping[str, Any], current: tuple[float, float]) -> dict[str, Any]:
    """A copy of a metric_vs_density spec (drawn with a current point) with that point moved to `current`.
    A threshold move changes only the diamond: building and converting the whole Altair chart again took
    about 0.5 s of one core per move, under the lock every session's chart conversion takes (profiled on
    the Pruning page, 2026-11-27), where moving the point is a dictionary copy."""
    layers = list(spec["layer"])
    (index,) = [i for i, layer in enumerate(layers) if layer.get("name") == CURRENT_LAYER]
    replaced = layers[index].get("data", {}).get("name")
    layers[index] = {**layers[index], "data": {"name": CURRENT_DATASET}}
    point = {"density": float(current[0]), "value": float(current[1])}
    read = {layer.get("data", {}).get("name") for layer in layers} | {spec.get("data", {}).get("name")}
    # the point the spec was drawn with, unless another layer reads its rows: no dead rows shipped
    datasets = {name: rows for name, rows in spec.get("datasets", {}).items() if name != replaced or name in read}
    return {**spec, "layer": layers, "datasets": {**datasets, CURRENT_DATASET: [point]}}


def metric_vs_samples(
    samples: Sequence[int], values: Sequence[float], metric: str, colour: str | None = None
) -> alt.LayerChart:
    frame = pd.DataFrame(
        {"samples": np.asarray(samples, dtype=np.int64), "value": np.asarray(values, dtype=np.float64)}
    )
    base = alt.Chart(frame).encode(
        x=alt.X("samples:Q", title="posterior samples R", scale=alt.Scale(type="log")),
        y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
        tooltip=["samples:Q", alt.Tooltip("value:Q", format=".4f")],
    )
    return alt.layer(base.mark_line(**_colour(colour)), base.mark_circle(size=40, **_colour(colour))).properties(
        title=f"{metric} vs R", width=520, height=260
    )


# --- training progress ----------------------------------------------------------------------------


def history_frame(history: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    """Long frame (step, phase, quantity, value) of loss and density per recorded epoch."""
    rows = []
    for step, record in enumerate(history, start=1):
        for quantity in ("loss", "density"):
            value = record.get(quantity)
            if value is None:
                continue
            rows.append(
                {"step": step, "phase": str(record.get("phase", "train")), "quantity": quantity, "value": float(value)}
            )
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


# --- comparing runs (the Compare page) -----------------------------------------------------------------


def family_colour_scale(labels: Sequence[str], families: Sequence[str]) -> alt.Scale:
    """Each run's line in its family's fixed colour (runs of one family differ by dash)."""
    return alt.Scale(domain=list(labels), range=[family_colour(f) for f in families])


def compare_curves(curves: Sequence[Mapping[str, Any]], metric: str) -> alt.LayerChart:
    """Metric vs density for several runs on one chart; each curve dict has label, family,
    density, values (and thresholds)."""
    frames = [
        pd.DataFrame(
            {
                "run": c["label"],
                "family": c["family"],
                "density": np.asarray(c["density"], dtype=np.float64),
                "value": np.asarray(c["values"], dtype=np.float64),
                "threshold": np.asarray(c["thresholds"], dtype=np.float64),
            }
        )
        for c in curves
    ]
    frame = pd.concat(frames, ignore_index=True).sort_values(["run", "density"], kind="stable")
    labels = [c["label"] for c in curves]
    colour = alt.Color(
        "run:N",
        title="run",
        scale=family_colour_scale(labels, [c["family"] for c in curves]),
        legend=alt.Legend(orient="bottom", columns=1, labelLimit=600),
    )
    scale = alt.Scale(type="log") if (frame["density"] > 0).all() else alt.Scale()
    base = alt.Chart(frame).encode(
        x=alt.X("density:Q", title="density (fraction of weights kept)", scale=scale),
        y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
        color=colour,
        strokeDash=alt.StrokeDash("run:N", legend=None),
        tooltip=[
            "run:N",
            alt.Tooltip("threshold:Q", format=".4g"),
            alt.Tooltip("density:Q", format=".4f"),
            alt.Tooltip("value:Q", format=".4f"),
        ],
    )
    return alt.layer(base.mark_line(), base.mark_circle(size=25)).properties(
        title=f"{metric} vs density, each family pruned on its own statistic (mean weights)",
        width=620,
        height=320,
        autosize=FIXED_SIZE,
    )


def compare_ecdf(entropies: Sequence[Mapping[str, Any]], max_entropy: float | None = None) -> alt.Chart:
    """Entropy ECDFs of several runs: colour = run (family colour), solid = in-domain, dashed = OOD."""
    frames = []
    for item in entropies:
        part = ecdf_frame({item["set"]: item["values"]})
        part["run"] = item["label"]
        part["domain"] = item["domain"]
        frames.append(_thin_ecdf(part, 400))
    frame = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame({"set": [], "entropy": [], "ecdf": [], "run": [], "domain": []})
    )
    labels = list(dict.fromkeys(item["label"] for item in entropies))
    families = [next(i["family"] for i in entropies if i["label"] == label) for label in labels]
    x_scale = alt.Scale(domain=[0, max_entropy], nice=False) if max_entropy else alt.Scale(nice=False)
    return (
        alt.Chart(frame)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("entropy:Q", title="predictive entropy (nats)", scale=x_scale, axis=alt.Axis(labelFlush=False)),
            y=alt.Y("ecdf:Q", title="fraction of inputs with entropy <= x", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color(
                "run:N",
                scale=family_colour_scale(labels, families),
                legend=alt.Legend(orient="bottom", columns=1, labelLimit=600),
            ),
            strokeDash=alt.StrokeDash(
                "domain:N",
                title="inputs",
                scale=alt.Scale(domain=["in-domain", "out-of-domain"], range=[[1, 0], [5, 3]]),
            ),
            detail="set:N",
            tooltip=["run:N", "set:N", alt.Tooltip("entropy:Q", format=".3f"), alt.Tooltip("ecdf:Q", format=".3f")],
        )
        .properties(
            title="entropy ECDFs: solid in-domain, dashed out-of-domain", width=620, height=320, autosize=FIXED_SIZE
        )
    )


def summary_over_seeds(
    records: Sequence[Mapping[str, Any]], group: str = "setting", columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per setting (runs that differ only by seed): 'median (min, max)' of each numeric
    column over its seeds, the plain value where there is one seed, and the number of seeds."""
    frame = pd.DataFrame(list(records))
    if frame.empty:
        return frame
    columns = (
        list(columns)
        if columns is not None
        else [c for c in frame.columns if c != group and pd.api.types.is_numeric_dtype(frame[c])]
    )
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
