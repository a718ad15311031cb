"""Plotly figures of a pruned network's structure and of one input's local explanation: arrays in,
figures out (nothing here imports Streamlit or torch).

- `mask_figure`: one layer's mask at full resolution (one cell per weight, zoomable), each cell
  pruned / kept but on no input-to-output path / active, the hover giving the weight's statistic;
- `active_graph_figure`: nodes per layer and an edge per active weight, skip connections (the
  `input_skip` option) drawn apart, for networks of at most `MAX_GRAPH_UNITS` units per layer;
- `reaching_pixels_figure`: per input pixel, how many active weights leave it (0: it reaches no output);
- `explanation_bars` / `explanation_heatmap`: each input's contribution, median and interval over
  posterior draws, as bars with interval rules (tabular, top k by |median|) or on the image grid.

Masks are (out, in + 1) with the bias last; a layer after the first that also reads the d inputs
(input skip) is (out, previous + d + 1), which the shapes alone tell apart (d >= 1).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

# The graph of active paths draws every unit; past this many units in a layer it is unreadable (and
# the page shows the masks and densities only).
MAX_GRAPH_UNITS = 64

MASK_STATES = ("pruned", "kept, on no input-to-output path", "active")
MASK_STATE_COLOURS = ("#ffffff", "#E69F00", "#0072B2")
SKIP_COLOUR = "#CC79A7"


def skip_flags(masks: Sequence[np.ndarray]) -> list[bool]:
    """Per layer, whether it also reads the inputs: its fan-in is the previous width plus d."""
    d = int(np.asarray(masks[0]).shape[1]) - 1
    flags = [False]
    for previous, mask in zip(masks[:-1], masks[1:]):
        fan_in, width = int(np.asarray(mask).shape[1]) - 1, int(np.asarray(previous).shape[0])
        if fan_in not in (width, width + d):
            raise ValueError(f"layer shapes do not chain: fan-in {fan_in} after {width} units and {d} inputs")
        flags.append(fan_in == width + d)
    return flags


def mask_states(mask: np.ndarray, active: np.ndarray) -> np.ndarray:
    """0 pruned, 1 kept but on no input-to-output path, 2 active. A pruned bias can be active: it
    carries the constants folded in from units that do not depend on the input (core's active masks)."""
    mask, active = np.asarray(mask, dtype=bool), np.asarray(active, dtype=bool)
    if mask.shape != active.shape:
        raise ValueError(f"mask {mask.shape} and active mask {active.shape} differ in shape")
    return np.where(active, 2, mask.astype(np.int8)).astype(np.int8)


def mask_figure(
    statistic: np.ndarray,
    mask: np.ndarray,
    active: np.ndarray,
    title: str,
    statistic_name: str = "statistic",
    skip_from: int | None = None,
) -> go.Figure:
    """One layer, one cell per weight (rows: units; columns: inputs, then bias), coloured by
    `mask_states`; the hover shows the weight's statistic. Plotly zooms a drag-selected region.
    skip_from: the first input-skip column (an input-skip layer), marked by a line."""
    states = mask_states(mask, active)
    statistic = np.asarray(statistic, dtype=np.float32)  # float32 keeps a 784 x 400 mask near 1 MB
    if statistic.shape != states.shape:
        raise ValueError(f"statistic {statistic.shape} and mask {states.shape} differ in shape")
    # A discrete scale: each state one flat band of the 0..2 range.
    scale = []
    for index, colour in enumerate(MASK_STATE_COLOURS):
        scale += [[index / 3, colour], [(index + 1) / 3, colour]]
    figure = go.Figure(
        go.Heatmap(
            z=states,
            customdata=statistic,
            zmin=-0.5,
            zmax=2.5,
            colorscale=scale,
            colorbar={"tickvals": [0, 1, 2], "ticktext": list(MASK_STATES), "title": ""},
            hovertemplate=(
                "unit %{y}, input %{x}<br>" + statistic_name + " %{customdata:.4g}<br>"
                "state %{z} (0 pruned, 1 kept off-path, 2 active)<extra></extra>"
            ),
        )
    )
    figure.update_layout(
        title=title,
        height=360,
        margin={"l": 40, "r": 10, "t": 40, "b": 30},
        xaxis_title=f"input (last column {states.shape[1] - 1}: bias)",
        yaxis_title="unit",
    )
    figure.update_yaxes(autorange="reversed")
    if skip_from is not None:
        figure.add_vline(
            x=skip_from - 0.5,
            line={"color": SKIP_COLOUR, "width": 2},
            annotation_text="input skip",
            annotation_position="top right",
        )
    return figure


def density_comparison_frame(densities: dict[str, Any], labels: Sequence[str]) -> pd.DataFrame:
    """Per layer and overall: the density of the kept weights and of the active ones."""
    rows = [
        {"layer": label, "density": float(raw), "active-path density": float(active)}
        for label, raw, active in zip(labels, densities["layer_density"], densities["active_layer_density"])
    ]
    rows.append(
        {
            "layer": "all",
            "density": float(densities["density"]),
            "active-path density": float(densities["active_density"]),
        }
    )
    return pd.DataFrame(rows)


def graph_nodes(masks: Sequence[np.ndarray]) -> list[tuple[int, int, float, float]]:
    """(column, unit, x, y) of every node: column 0 the inputs, column l + 1 layer l's units."""
    widths = [int(np.asarray(masks[0]).shape[1]) - 1] + [int(np.asarray(m).shape[0]) for m in masks]
    return [
        (column, unit, float(column), (unit + 0.5) / width)
        for column, width in enumerate(widths)
        for unit in range(width)
    ]


def graph_edges(active: Sequence[np.ndarray]) -> list[tuple[int, int, int, int, bool]]:
    """(from column, from unit, to column, to unit, skip) for every active weight (biases left out).
    A skip weight of layer l runs from the inputs (column 0) to column l + 1."""
    flags = skip_flags(active)
    d = int(np.asarray(active[0]).shape[1]) - 1
    edges = []
    for layer, (mask, skip) in enumerate(zip(active, flags)):
        mask = np.asarray(mask, dtype=bool)
        width = mask.shape[1] - 1 - (d if skip else 0)  # the previous column's units
        for target, source in zip(*np.nonzero(mask[:, :-1])):
            if source < width:
                edges.append((layer, int(source), layer + 1, int(target), False))
            else:
                edges.append((0, int(source - width), layer + 1, int(target), True))
    return edges


def _segments(edges: list[tuple[int, int, int, int, bool]], position: dict) -> tuple[list, list]:
    xs, ys = [], []
    for a, i, b, j, _ in edges:
        (x0, y0), (x1, y1) = position[(a, i)], position[(b, j)]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return xs, ys


def active_graph_figure(active: Sequence[np.ndarray], title: str = "active paths") -> go.Figure:
    """Nodes per layer (filled: on an active path) and one line per active weight; skip weights
    (input skip) in their own colour. Refuses layers wider than MAX_GRAPH_UNITS."""
    widest = max([int(np.asarray(active[0]).shape[1]) - 1] + [int(np.asarray(m).shape[0]) for m in active])
    if widest > MAX_GRAPH_UNITS:
        raise ValueError(f"the graph draws at most {MAX_GRAPH_UNITS} units per layer, this network has {widest}")
    nodes = graph_nodes(active)
    position = {(c, u): (x, y) for c, u, x, y in nodes}
    edges = graph_edges(active)
    on_path = {(a, i) for a, i, _, _, _ in edges} | {(b, j) for _, _, b, j, _ in edges}
    figure = go.Figure()
    for skip, colour, name in ((False, "#0072B2", "active weight"), (True, SKIP_COLOUR, "input-skip weight")):
        xs, ys = _segments([e for e in edges if e[4] == skip], position)
        if xs:
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=name,
                    hoverinfo="skip",
                    line={"color": colour, "width": 1},
                    opacity=0.6,
                )
            )
    figure.add_trace(
        go.Scatter(
            x=[x for _, _, x, _ in nodes],
            y=[y for _, _, _, y in nodes],
            mode="markers",
            name="unit",
            customdata=[[c, u] for c, u, _, _ in nodes],
            marker={
                "size": 7,
                "color": ["#0072B2" if (c, u) in on_path else "#ffffff" for c, u, _, _ in nodes],
                "line": {"color": "#444444", "width": 1},
            },
            hovertemplate="column %{customdata[0]}, unit %{customdata[1]}<extra></extra>",
        )
    )
    columns = len(active) + 1
    figure.update_layout(
        title=title,
        height=420,
        margin={"l": 10, "r": 10, "t": 40, "b": 30},
        yaxis={"visible": False, "range": [-0.02, 1.02]},
        xaxis={
            "tickvals": list(range(columns)),
            "range": [-0.3, columns - 0.7],
            "ticktext": ["inputs"] + [f"layer {i}" for i in range(columns - 1)],
        },
    )
    return figure


def active_outgoing_per_input(active: Sequence[np.ndarray]) -> np.ndarray:
    """(d,) per input feature: how many active weights leave it (first layer and skip weights). A
    feature reaches some output exactly when this is positive."""
    d = int(np.asarray(active[0]).shape[1]) - 1
    counts = np.asarray(active[0], dtype=bool)[:, :d].sum(axis=0).astype(np.int64)
    for layer, skip in enumerate(skip_flags(active)):
        if skip:
            mask = np.asarray(active[layer], dtype=bool)
            width = mask.shape[1] - 1 - d
            counts += mask[:, width : width + d].sum(axis=0)
    return counts


def reaching_pixels_figure(
    active: Sequence[np.ndarray], input_shape: Sequence[int], title: str = "input pixels that reach an output"
) -> go.Figure:
    """The image grid, each pixel coloured by the number of active weights leaving it (white: none,
    the pixel reaches no output)."""
    counts = active_outgoing_per_input(active).reshape(tuple(int(s) for s in input_shape))
    figure = go.Figure(
        go.Heatmap(
            z=counts,
            colorscale=[[0, "#ffffff"], [1e-9, "#c6dbef"], [1, "#08306b"]],
            zmin=0,
            colorbar={"title": "active weights"},
            hovertemplate="row %{y}, column %{x}<br>%{z} active weights<extra></extra>",
        )
    )
    figure.update_layout(title=title, height=360, width=400, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    figure.update_yaxes(autorange="reversed", scaleanchor="x", visible=False)
    figure.update_xaxes(visible=False)
    return figure


def explanation_frame(
    features: Sequence[dict[str, Any]], top_k: int | None = None, names: Sequence[str] | None = None
) -> pd.DataFrame:
    """The explanation's per-feature rows (Explanation.table), the top k by |median contribution|
    (all when None), largest first, with the feature's name."""
    frame = pd.DataFrame(list(features))
    frame["name"] = [names[j] if names is not None else f"x{j}" for j in frame["feature"]]
    frame = frame.reindex(frame["contribution"].abs().sort_values(ascending=False, kind="stable").index)
    return (frame if top_k is None else frame.head(int(top_k))).reset_index(drop=True)


def explanation_bars(
    features: Sequence[dict[str, Any]],
    top_k: int | None = None,
    names: Sequence[str] | None = None,
    level: float = 0.95,
    title: str = "",
) -> go.Figure:
    """Horizontal bars: each feature's median contribution, an interval rule from the lower to the
    upper end of the `level` interval over draws; the largest |median| on top."""
    frame = explanation_frame(features, top_k, names)
    figure = go.Figure(
        go.Bar(
            x=frame["contribution"],
            y=frame["name"],
            orientation="h",
            marker_color="#0072B2",
            error_x={
                "type": "data",
                "symmetric": False,
                "color": "#333333",
                "array": frame["contribution_upper"] - frame["contribution"],
                "arrayminus": frame["contribution"] - frame["contribution_lower"],
            },
            customdata=np.column_stack([frame["contribution_lower"], frame["contribution_upper"], frame["value"]]),
            hovertemplate=(
                "%{y} = %{customdata[2]:.4g}<br>contribution %{x:.4g}<br>"
                f"{level:.0%} interval "
                "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]<extra></extra>"
            ),
        )
    )
    figure.update_layout(
        title=title,
        height=max(220, 28 * len(frame) + 90),
        margin={"l": 10, "r": 10, "t": 40, "b": 30},
        xaxis_title=f"contribution (median, {level:.0%} interval over draws)",
    )
    figure.update_yaxes(autorange="reversed")
    return figure


def explanation_heatmap(
    features: Sequence[dict[str, Any]], input_shape: Sequence[int], level: float = 0.95, title: str = ""
) -> go.Figure:
    """The image grid, each pixel coloured by its median contribution (diverging about 0); the
    hover gives the interval over draws."""
    frame = pd.DataFrame(list(features)).sort_values("feature")
    shape = tuple(int(s) for s in input_shape)
    median = frame["contribution"].to_numpy(np.float64).reshape(shape)
    interval = np.stack(
        [
            frame["contribution_lower"].to_numpy(np.float64).reshape(shape),
            frame["contribution_upper"].to_numpy(np.float64).reshape(shape),
        ],
        axis=-1,
    )
    bound = float(np.abs(median).max()) or 1.0
    figure = go.Figure(
        go.Heatmap(
            z=median,
            customdata=interval,
            colorscale="RdBu",
            zmin=-bound,
            zmax=bound,
            colorbar={"title": "contribution"},
            hovertemplate=(
                "row %{y}, column %{x}<br>contribution %{z:.4g}<br>"
                f"{level:.0%} interval "
                "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]<extra></extra>"
            ),
        )
    )
    figure.update_layout(title=title, height=360, width=420, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    figure.update_yaxes(autorange="reversed", scaleanchor="x", visible=False)
    figure.update_xaxes(visible=False)
    return figure
