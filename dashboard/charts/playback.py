"""Playback: the statistic over the epochs (the per-epoch snapshots recorded in training).

Pure: numpy arrays in, Altair charts (and the frames behind them) out (see dashboard/charts/__init__.py)."""

from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.charts.histograms import threshold_rule
from dashboard.charts.style import CHART_WIDTH, FIXED_SIZE, HISTOGRAMS_PER_ROW, _colour

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
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "layer": str(labels[layer]),
                    "bin_start": edges[:-1],
                    "bin_end": edges[1:],
                    "count": histogram[layer].astype(np.int64),
                }
            )
            for layer in range(histogram.shape[0])
        ],
        ignore_index=True,
    )


def snapshot_histograms(
    histogram: np.ndarray,
    edges: np.ndarray,
    statistic_name: str,
    labels: Sequence[str],
    threshold: float | None = None,
    colour: str | None = None,
    max_count: int | None = None,
    log_counts: bool = True,
    title: str = "",
) -> alt.ConcatChart:
    """One epoch's histograms per layer on the fixed snapshot edges. The count axis is fixed by
    `max_count` (the largest bin over all epochs) so that bars move, not the axis, as epochs play;
    log-spaced edges (statistics unbounded above) get a symlog x axis."""
    frame = snapshot_histogram_frame(histogram, edges, labels)
    edges = np.asarray(edges, dtype=np.float64)
    if _log_binned(edges):
        x_scale = alt.Scale(
            type="symlog", constant=float(edges[1]), domain=[float(edges[0]), float(edges[-1])], nice=False
        )
    else:
        x_scale = alt.Scale(domain=[float(edges[0]), float(edges[-1])], nice=False)
    top = int(max_count if max_count is not None else max(1, frame["count"].max()))
    y_scale = alt.Scale(type="symlog", domain=[0, top]) if log_counts else alt.Scale(domain=[0, top])
    charts = []
    for label, part in frame.groupby("layer", sort=False):
        bars = (
            alt.Chart(part)
            .mark_bar(**_colour(colour))
            .encode(
                x=alt.X("bin_start:Q", title=statistic_name, bin="binned", scale=x_scale),
                x2="bin_end:Q",
                y=alt.Y("count:Q", title="weights", scale=y_scale),
                tooltip=[alt.Tooltip("bin_start:Q", format=".4g"), alt.Tooltip("bin_end:Q", format=".4g"), "count:Q"],
            )
        )
        layers = [bars]
        if threshold is not None and np.isfinite(threshold):
            layers.append(threshold_rule(threshold))
        charts.append(alt.layer(*layers).properties(title=str(label), width=CHART_WIDTH, height=160))
    return alt.concat(*charts, columns=HISTOGRAMS_PER_ROW).properties(title=title)


LAYER_DASHES = ([8, 4], [2, 3], [10, 3, 2, 3], [4, 2, 4, 2, 1, 2], [14, 4])  # solid is "all weights"


def density_over_epochs_frame(
    density: np.ndarray,
    overall: np.ndarray,
    phases: Sequence[str],
    labels: Sequence[str],
    max_epochs: int = MAX_CURVE_EPOCHS,
    keep_epoch: int | None = None,
) -> pd.DataFrame:
    """Long rows (epoch, phase, layer, density) per layer and "all weights"; epochs count from 1 over
    every phase. Trainings longer than max_epochs are thinned evenly (first, last and keep_epoch kept)."""
    density = np.asarray(density, dtype=np.float64)
    overall = np.asarray(overall, dtype=np.float64)
    epochs = density.shape[0]
    index = np.arange(epochs)
    if epochs > max_epochs:
        index = np.unique(
            np.concatenate(
                [
                    np.linspace(0, epochs - 1, max_epochs).round().astype(np.int64),
                    [] if keep_epoch is None else [int(keep_epoch) - 1],
                ]
            )
        ).astype(np.int64)
    phases = np.asarray(phases, dtype=str)
    frames = [
        pd.DataFrame(
            {"epoch": index + 1, "phase": phases[index], "layer": str(labels[layer]), "density": density[index, layer]}
        )
        for layer in range(density.shape[1])
    ]
    frames.append(
        pd.DataFrame({"epoch": index + 1, "phase": phases[index], "layer": "all weights", "density": overall[index]})
    )
    return pd.concat(frames, ignore_index=True)


def density_over_epochs(
    density: np.ndarray,
    overall: np.ndarray,
    phases: Sequence[str],
    labels: Sequence[str],
    current: int,
    colour: str | None = None,
    threshold: float | None = None,
) -> alt.LayerChart:
    """Density at the default threshold per layer (a dash pattern each) and overall (solid) over the epochs, in the
    family's colour; a red rule and points mark epoch `current` (1-based); warm-start epochs shaded."""
    frame = density_over_epochs_frame(density, overall, phases, labels, keep_epoch=current)
    names = [*(str(label) for label in labels), "all weights"]
    # One dash pattern per layer (the lines share the family's colour): three layers looked alike.
    dashes = [LAYER_DASHES[i % len(LAYER_DASHES)] for i in range(len(labels))] + [[1, 0]]
    x = alt.X(
        "epoch:Q",
        title="epoch (all phases)",
        axis=alt.Axis(tickMinStep=1),
        scale=alt.Scale(domain=[1, max(2, len(overall))], nice=False),
    )
    y = alt.Y("density:Q", title="density at the default threshold", scale=alt.Scale(domain=[0, 1]))
    base = alt.Chart(frame).encode(
        x=x,
        y=y,
        strokeDash=alt.StrokeDash(
            "layer:N",
            title=None,
            scale=alt.Scale(domain=names, range=dashes),
            legend=alt.Legend(orient="bottom", columns=2, labelLimit=400),
        ),
        tooltip=["epoch:Q", "phase:N", "layer:N", alt.Tooltip("density:Q", format=".4f")],
    )
    layers = []
    warm = [i for i, phase in enumerate(phases) if str(phase) == "warm-start"]
    if warm:
        shade = pd.DataFrame({"start": [min(warm) + 0.5], "end": [max(warm) + 1.5], "phase": ["warm start"]})
        layers.append(
            alt.Chart(shade)
            .mark_rect(color="#999999", opacity=0.15)
            .encode(x="start:Q", x2="end:Q", tooltip=["phase:N"])
        )
    layers.append(base.mark_line(strokeWidth=2, **_colour(colour)))
    marker = pd.DataFrame({"epoch": [int(current)]})
    layers.append(alt.Chart(marker).mark_rule(color="red", size=2).encode(x="epoch:Q", tooltip=["epoch:Q"]))
    here = frame[frame["epoch"] == int(current)]
    layers.append(
        alt.Chart(here)
        .mark_point(color="red", filled=True, size=50)
        .encode(x="epoch:Q", y="density:Q", tooltip=["layer:N", alt.Tooltip("density:Q", format=".4f")])
    )
    title = "density over the epochs" + (f" (default threshold {threshold:g})" if threshold is not None else "")
    return alt.layer(*layers).properties(title=title, width=560, height=220, autosize=FIXED_SIZE)
