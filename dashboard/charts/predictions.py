"""What a prediction looks like: regression bands, per-image class probabilities, out-of-domain
entropy ECDFs, the decision surface of a 2-D classifier.

Pure: numpy arrays in, Altair charts (and the frames behind them) out (see dashboard/charts/__init__.py)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.charts.style import CLASS_COLOURS, FIXED_SIZE, GRADIENT_LEGEND, REFERENCE_COLOUR

# --- regression bands ---------------------------------------------------------------------------


def regression_frame(
    x_grid: np.ndarray, mean: np.ndarray, epistemic_std: np.ndarray, total_std: np.ndarray, z: float = 1.96
) -> pd.DataFrame:
    x = np.asarray(x_grid, dtype=np.float64).ravel()
    mean = np.asarray(mean, dtype=np.float64).ravel()
    epistemic = np.asarray(epistemic_std, dtype=np.float64).ravel()
    total = np.asarray(total_std, dtype=np.float64).ravel()
    return pd.DataFrame(
        {
            "x": x,
            "mean": mean,
            "epistemic_low": mean - z * epistemic,
            "epistemic_high": mean + z * epistemic,
            "total_low": mean - z * total,
            "total_high": mean + z * total,
        }
    )


def reference_layers(x_grid: np.ndarray, reference: dict | None) -> list:
    """The NUTS reference's 5-95% band (purple outline) and mean (purple dashes), when given."""
    if reference is None:
        return []
    frame = pd.DataFrame(
        {
            "x": np.asarray(x_grid, dtype=np.float64).ravel(),
            "ref_low": np.asarray(reference["low"], dtype=np.float64).ravel(),
            "ref_high": np.asarray(reference["high"], dtype=np.float64).ravel(),
            "ref_mean": np.asarray(reference["mean"], dtype=np.float64).ravel(),
        }
    )
    base = alt.Chart(frame).encode(x="x:Q")
    return [
        base.mark_line(color=REFERENCE_COLOUR, strokeWidth=1.5).encode(y="ref_low:Q"),
        base.mark_line(color=REFERENCE_COLOUR, strokeWidth=1.5).encode(y="ref_high:Q"),
        base.mark_line(color=REFERENCE_COLOUR, strokeDash=[2, 2]).encode(y="ref_mean:Q"),
    ]


BAND_COLOUR, MEAN_COLOUR = "#4c78a8", "#1f3b73"  # a model's bands and mean where no family is given


def quantile_bands(
    x_grid: np.ndarray,
    mean: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    x_train: np.ndarray,
    y_train: np.ndarray,
    true_mean: np.ndarray | None = None,
    reference: dict | None = None,
    title: str = "predictive mean and 5-95% band",
    colour: str | None = None,
) -> alt.LayerChart:
    """Predictive mean with a quantile band (e.g. the collapsed predictive's), optionally the reference's;
    colour: the band's and the mean's (the family's)."""
    frame = pd.DataFrame(
        {
            "x": np.asarray(x_grid, dtype=np.float64).ravel(),
            "mean": np.asarray(mean, dtype=np.float64).ravel(),
            "low": np.asarray(low, dtype=np.float64).ravel(),
            "high": np.asarray(high, dtype=np.float64).ravel(),
        }
    )
    base = alt.Chart(frame).encode(x=alt.X("x:Q", title="x"))
    layers = [
        base.mark_area(opacity=0.3, color=colour or BAND_COLOUR).encode(y=alt.Y("low:Q", title="y"), y2="high:Q"),
        base.mark_line(color=colour or MEAN_COLOUR, strokeWidth=2).encode(y="mean:Q"),
    ]
    return _finish_bands(layers, frame["x"], x_train, y_train, true_mean, reference, title)


def _finish_bands(
    layers: list,
    x: Any,
    x_train: np.ndarray,
    y_train: np.ndarray,
    true_mean: np.ndarray | None,
    reference: dict | None,
    title: str,
) -> alt.LayerChart:
    layers = layers + reference_layers(x, reference)
    if true_mean is not None:
        truth = pd.DataFrame({"x": x, "truth": np.asarray(true_mean, dtype=np.float64).ravel()})
        layers.append(alt.Chart(truth).mark_line(color="black", strokeDash=[5, 4]).encode(x="x:Q", y="truth:Q"))
    points = pd.DataFrame(
        {"x": np.asarray(x_train, dtype=np.float64).ravel(), "y": np.asarray(y_train, dtype=np.float64).ravel()}
    )
    layers.append(alt.Chart(points).mark_circle(color="#e45756", size=18, opacity=0.8).encode(x="x:Q", y="y:Q"))
    if reference is not None:
        title += "; purple: NUTS reference 5-95% and mean"
    return alt.layer(*layers).properties(title=title, width=640, height=340)


def regression_bands(
    x_grid: np.ndarray,
    mean: np.ndarray,
    epistemic_std: np.ndarray,
    total_std: np.ndarray,
    x_train: np.ndarray,
    y_train: np.ndarray,
    true_mean: np.ndarray | None = None,
    z: float = 1.96,
    reference: dict | None = None,
    colour: str | None = None,
) -> alt.LayerChart:
    """Predictive mean with 95% total (light) and epistemic (dark) bands and the training points;
    colour: the bands' and the mean's (the family's)."""
    frame = regression_frame(x_grid, mean, epistemic_std, total_std, z)
    base = alt.Chart(frame).encode(x=alt.X("x:Q", title="x"))
    layers = [
        base.mark_area(opacity=0.25, color=colour or BAND_COLOUR).encode(
            y=alt.Y("total_low:Q", title="y"), y2="total_high:Q"
        ),
        base.mark_area(opacity=0.45, color=colour or BAND_COLOUR).encode(y="epistemic_low:Q", y2="epistemic_high:Q"),
        base.mark_line(color=colour or MEAN_COLOUR, strokeWidth=2).encode(y="mean:Q"),
    ]
    if reference is not None:
        return _finish_bands(
            layers,
            frame["x"],
            x_train,
            y_train,
            true_mean,
            reference,
            "predictive mean, epistemic (dark) and total (light) 95% bands",
        )
    if true_mean is not None:
        truth = pd.DataFrame({"x": frame["x"], "truth": np.asarray(true_mean, dtype=np.float64).ravel()})
        layers.append(alt.Chart(truth).mark_line(color="black", strokeDash=[5, 4]).encode(x="x:Q", y="truth:Q"))
    points = pd.DataFrame(
        {"x": np.asarray(x_train, dtype=np.float64).ravel(), "y": np.asarray(y_train, dtype=np.float64).ravel()}
    )
    layers.append(alt.Chart(points).mark_circle(color="#e45756", size=18, opacity=0.8).encode(x="x:Q", y="y:Q"))
    return alt.layer(*layers).properties(
        title="predictive mean, epistemic (dark) and total (light) 95% bands", width=640, height=340
    )


# --- per-image class probabilities -----------------------------------------------------------------


def class_probability_frame(probs_per_draw: np.ndarray, class_names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (draw, class) for one input: probs_per_draw has shape (R, K)."""
    probs = np.asarray(probs_per_draw, dtype=np.float64)
    if probs.ndim != 2:
        raise ValueError(f"expected (R, K) probabilities for one input, got shape {probs.shape}")
    draws, classes = probs.shape
    names = list(class_names) if class_names is not None else [str(k) for k in range(classes)]
    return pd.DataFrame(
        {"draw": np.repeat(np.arange(draws), classes), "class": np.tile(names, draws), "probability": probs.ravel()}
    )


def class_probability_bars(
    probs_per_draw: np.ndarray, class_names: Sequence[str] | None = None, title: str = "", *, doubt_level: float
) -> alt.LayerChart:
    """Model-averaged probability per class (bars), each draw's probability (ticks), doubt line (at
    `doubt_level`: pages pass backend.DOUBT_LEVEL, core's one constant; charts stay free of torch)."""
    frame = class_probability_frame(probs_per_draw, class_names)
    order = list(dict.fromkeys(frame["class"]))
    mean = frame.groupby("class", sort=False, as_index=False)["probability"].mean()
    x = alt.X("class:N", sort=order, title="class")
    # Every layer on the same fixed [0, 1] scale (no "nice" padding): the doubt line sits below
    # the 1.0 gridline and bars start at 0.
    y_scale = alt.Scale(domain=[0, 1], nice=False, zero=True, clamp=True)
    # labelFlush off: Streamlit's theme pulls the end labels inwards, which drew "1.0" below the 0.95 line.
    y_axis = alt.Axis(labelFlush=False, grid=True, values=[0, 0.25, 0.5, 0.75, 1.0], format=".2f")
    bars = (
        alt.Chart(mean)
        .mark_bar(opacity=0.5)
        .encode(
            x=x,
            y=alt.Y("probability:Q", scale=y_scale, title="p(class)", axis=y_axis),
            tooltip=["class:N", alt.Tooltip("probability:Q", format=".3f")],
        )
    )
    ticks = (
        alt.Chart(frame)
        .mark_tick(color="black", thickness=1, opacity=0.6)
        .encode(x=x, y=alt.Y("probability:Q", scale=y_scale))
    )
    rule = (
        alt.Chart(pd.DataFrame({"probability": [float(doubt_level)]}))
        .mark_rule(color="red", strokeDash=[4, 3], size=2)
        .encode(y=alt.Y("probability:Q", scale=y_scale), tooltip=[alt.Tooltip("probability:Q", title="doubt level")])
    )
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
        frames.append(
            pd.DataFrame(
                {
                    "set": name,
                    "entropy": np.concatenate([[start], values]),
                    "ecdf": np.concatenate([[0.0], np.arange(1, n + 1) / n]),
                }
            )
        )
    if not frames:
        return pd.DataFrame({"set": [], "entropy": [], "ecdf": []})
    return pd.concat(frames, ignore_index=True)


def entropy_ecdf(
    samples: Mapping[str, np.ndarray], max_entropy: float | None = None, max_points: int = 1000
) -> alt.Chart:
    """ECDFs of predictive entropy: in-domain rises early, OOD late (Hubin & Storvik 2019, figure 2)."""
    frame = _thin_ecdf(ecdf_frame(samples), max_points)
    x_scale = alt.Scale(domain=[0, max_entropy], nice=False) if max_entropy else alt.Scale(nice=False)
    return (
        alt.Chart(frame)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("entropy:Q", title="predictive entropy (nats)", scale=x_scale, axis=alt.Axis(labelFlush=False)),
            y=alt.Y("ecdf:Q", title="fraction of inputs with entropy <= x", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("set:N", title="test set"),
            tooltip=["set:N", alt.Tooltip("entropy:Q", format=".3f"), alt.Tooltip("ecdf:Q", format=".3f")],
        )
        .properties(title="empirical CDF of predictive entropy", width=560, height=320)
    )


def _thin_ecdf(frame: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Keep at most max_points per set (evenly in rank, always the last point) to keep the chart light."""
    parts = []
    for _, part in frame.groupby("set", sort=False):
        if len(part) > max_points:
            index = np.unique(np.linspace(0, len(part) - 1, max_points).round().astype(np.int64))
            part = part.iloc[index]
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else frame


# --- the decision surface of a 2-D classifier ------------------------------------------------------


def surface_frame(
    xs: np.ndarray, ys: np.ndarray, arrays: Mapping[str, np.ndarray], class_names: Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per grid cell (grid points in row-major order over ys, then xs) with its edges."""
    xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    dx = (xs[1] - xs[0]) if xs.size > 1 else 1.0
    dy = (ys[1] - ys[0]) if ys.size > 1 else 1.0
    gx, gy = np.meshgrid(xs, ys)
    predicted = np.asarray(arrays["predicted"]).astype(np.int64)
    names = list(class_names) if class_names else None
    return pd.DataFrame(
        {
            "x": gx.ravel() - dx / 2,
            "x_end": gx.ravel() + dx / 2,
            "y": gy.ravel() - dy / 2,
            "y_end": gy.ravel() + dy / 2,
            "class": [names[k] if names else str(k) for k in predicted],
            "confidence": np.asarray(arrays["confidence"], dtype=np.float64),
            "entropy": np.asarray(arrays["entropy"], dtype=np.float64),
            "spread": np.asarray(arrays["spread"], dtype=np.float64),
        }
    )


def decision_surface(
    xs: np.ndarray,
    ys: np.ndarray,
    arrays: Mapping[str, np.ndarray],
    x_train: np.ndarray,
    y_train: np.ndarray,
    class_names: Sequence[str] | None = None,
    samples: int = 1,
    size: int = 210,
) -> alt.HConcatChart:
    """Predicted class (faded by confidence), predictive entropy and the R draws' spread over the
    input plane, each with the training points."""
    frame = surface_frame(xs, ys, arrays, class_names)
    n_classes = int(max(np.asarray(arrays["predicted"]).max(), np.asarray(y_train).max())) + 1
    names = list(class_names) if class_names else [str(k) for k in range(n_classes)]
    x_train = np.asarray(x_train, dtype=np.float64)
    points = pd.DataFrame(
        {"x1": x_train[:, 0], "x2": x_train[:, 1], "class": [names[int(k)] for k in np.asarray(y_train)]}
    )
    x_scale = alt.Scale(domain=[float(frame["x"].min()), float(frame["x_end"].max())], nice=False, zero=False)
    y_scale = alt.Scale(domain=[float(frame["y"].min()), float(frame["y_end"].max())], nice=False, zero=False)
    class_scale = alt.Scale(domain=names, range=CLASS_COLOURS[: len(names)])

    def cells(colour: alt.Color, title: str, opacity: Any = None) -> alt.LayerChart:
        opacity = alt.value(1.0) if opacity is None else opacity
        rect = (
            alt.Chart(frame)
            .mark_rect()
            .encode(
                x=alt.X("x:Q", title="x1", scale=x_scale),
                x2="x_end:Q",
                y=alt.Y("y:Q", title="x2", scale=y_scale),
                y2="y_end:Q",
                color=colour,
                opacity=opacity,
                tooltip=[
                    "class:N",
                    alt.Tooltip("confidence:Q", format=".3f"),
                    alt.Tooltip("entropy:Q", format=".3f"),
                    alt.Tooltip("spread:Q", format=".3f"),
                ],
            )
        )
        dots = (
            alt.Chart(points)
            .mark_circle(size=14, stroke="white", strokeWidth=0.5, opacity=0.9)
            .encode(x="x1:Q", y="x2:Q", color=alt.Color("class:N", scale=class_scale, legend=None))
        )
        return alt.layer(rect, dots).properties(title=title, width=size, height=size)

    # One reading on every panel: strong colour = certain, pale = uncertain (the spread's scale ran the
    # other way, dark meaning "uncertain" beside an entropy panel where dark meant "certain").
    predicted = cells(
        alt.Color("class:N", title="predicted class", scale=class_scale, legend=alt.Legend(orient="bottom")),
        "predicted class (pale: unsure)",
        alt.Opacity("confidence:Q", scale=alt.Scale(domain=[1 / n_classes, 1]), legend=None),
    )
    entropy = cells(
        alt.Color(
            "entropy:Q",
            title="entropy (nats; dark = certain)",
            scale=alt.Scale(scheme="viridis", domain=[0, float(np.log(n_classes))]),
            legend=alt.Legend(**GRADIENT_LEGEND),
        ),
        "predictive entropy (dark: certain)",
    )
    spread = cells(
        alt.Color(
            "spread:Q",
            title="sd over draws (dark = certain)",
            scale=alt.Scale(scheme="magma"),
            legend=alt.Legend(**GRADIENT_LEGEND),
        ),
        f"spread of the {samples} draws (dark: certain)" if samples > 1 else "spread (one draw: none)",
    )
    return (
        alt.hconcat(predicted, entropy, spread)
        .resolve_scale(color="independent", opacity="independent")
        .properties(autosize=FIXED_SIZE)
    )
