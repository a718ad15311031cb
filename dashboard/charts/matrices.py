"""Masks and weight matrices (drawn as block aggregates), kept inputs, receptive fields, two masks
compared, and the network as a graph.

Pure: numpy arrays in, Altair charts (and the frames behind them) out (see dashboard/charts/__init__.py)."""

from __future__ import annotations

from typing import Any, Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.charts.style import (
    CHART_WIDTH,
    FIXED_SIZE,
    GRADIENT_LEGEND,
    MAX_HEATMAP_CELLS,
    kept_colour,
    layer_label,
    signed_colour,
)

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
    totals = padded[np.ix_(r1, c1)] - padded[np.ix_(r0, c1)] - padded[np.ix_(r1, c0)] + padded[np.ix_(r0, c0)]
    sizes = np.outer(r1 - r0, c1 - c0)
    rows, cols = np.meshgrid(np.arange(len(r0)), np.arange(len(c0)), indexing="ij")
    return pd.DataFrame(
        {
            "row": rows.ravel(),
            "col": cols.ravel(),
            "row_start": r0[rows.ravel()],
            "col_start": c0[cols.ravel()],
            "size": sizes.ravel().astype(np.int64),
            "total": totals.ravel(),
            "mean": (totals / sizes).ravel(),
        }
    )


def _block_edges(length: int, max_cells: int) -> np.ndarray:
    cells = max(1, min(length, max_cells))
    return np.unique(np.linspace(0, length, cells + 1).round().astype(np.int64))


# The matrices' axes: titled (which side is which), without a label per unit (hundreds of them).
INPUT_AXIS = alt.Axis(title="input unit (last column: bias)", labels=False, ticks=False, domain=False)
OUTPUT_AXIS = alt.Axis(title="output unit", labels=False, ticks=False, domain=False)


def pixel_grid(width: int, height: int) -> dict[str, Any]:
    """x, x2, y, y2 of an image drawn one square cell per pixel (row 0 at the top): quantitative cell
    edges, so the cells stay square whatever the legend and title take (ordinal bands stretch)."""
    return {
        "x": alt.X("col:Q", axis=None, scale=alt.Scale(domain=[0, width], nice=False, zero=False)),
        "x2": "col_end:Q",
        "y": alt.Y("row:Q", axis=None, scale=alt.Scale(domain=[0, height], nice=False, zero=False, reverse=True)),
        "y2": "row_end:Q",
    }


def mask_heatmap(mask: np.ndarray, title: str, max_cells: int = MAX_HEATMAP_CELLS) -> alt.Chart:
    """Kept (1) / pruned (0) weights of one augmented (out, in+1) matrix; blocks show the kept fraction."""
    frame = block_frame(np.asarray(mask, dtype=np.float64), max_cells)
    blocked = bool((frame["size"] > 1).any())
    colour_title = "kept fraction" if blocked else "kept"
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("col:O", axis=INPUT_AXIS),
            y=alt.Y("row:O", axis=OUTPUT_AXIS),
            color=kept_colour("mean:Q", colour_title),
            tooltip=["row_start:Q", "col_start:Q", alt.Tooltip("total:Q", title="kept"), "size:Q"],
        )
        .properties(title=title, width=CHART_WIDTH, height=CHART_WIDTH * 0.6, autosize=FIXED_SIZE)
    )


def weight_heatmap(weights: np.ndarray, title: str, max_cells: int = MAX_HEATMAP_CELLS) -> alt.Chart:
    """Signed (masked) weights of one layer, block means, diverging colours centred on 0."""
    frame = block_frame(weights, max_cells)
    bound = float(np.abs(frame["mean"]).max()) or 1.0
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("col:O", axis=INPUT_AXIS),
            y=alt.Y("row:O", axis=OUTPUT_AXIS),
            color=signed_colour("mean:Q", bound, "weight"),
            tooltip=["row_start:Q", "col_start:Q", alt.Tooltip("mean:Q", format=".3f")],
        )
        .properties(title=title, width=CHART_WIDTH, height=CHART_WIDTH * 0.6, autosize=FIXED_SIZE)
    )


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
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            **pixel_grid(width, height),
            color=alt.Color(
                "kept:Q", title="kept weights", scale=alt.Scale(scheme="viridis"), legend=alt.Legend(**GRADIENT_LEGEND)
            ),
            tooltip=["row:Q", "col:Q", "kept:Q"],
        )
        .properties(title="kept weights per input pixel", width=cell * width, height=cell * height, autosize=FIXED_SIZE)
    )


def density_frame(masks: Sequence[np.ndarray]) -> pd.DataFrame:
    """Per-layer kept/total/density plus an 'all' row."""
    rows = []
    for index, mask in enumerate(masks):
        mask = np.asarray(mask)
        kept, total = int(mask.sum()), int(mask.size)
        rows.append({"layer": layer_label(index, mask.shape), "kept": kept, "total": total, "density": kept / total})
    kept = sum(r["kept"] for r in rows)
    total = sum(r["total"] for r in rows)
    rows.append({"layer": "all", "kept": kept, "total": total, "density": kept / total if total else 0.0})
    return pd.DataFrame(rows)


# --- masks as in Hubin & Storvik (2019), figures 4-5: receptive fields, two masks side by side or as a difference


def receptive_field_frame(
    first_layer_weights: np.ndarray, first_layer_mask: np.ndarray, units: Sequence[int], input_shape: Sequence[int]
) -> pd.DataFrame:
    """The kept incoming weights of chosen first-layer units on the image grid (pruned: 0)."""
    weights = np.asarray(first_layer_weights, dtype=np.float64)[:, :-1]  # bias column dropped
    mask = np.asarray(first_layer_mask)[:, :-1]
    height, width = int(input_shape[0]), int(input_shape[1])
    if weights.shape[1] != height * width:
        raise ValueError(f"first layer has {weights.shape[1]} inputs, not {height}x{width}")
    rows, cols = np.divmod(np.arange(height * width), width)
    frames = [
        pd.DataFrame(
            {
                "unit": f"unit {int(u)}",
                "row": rows,
                "col": cols,
                "row_end": rows + 1,
                "col_end": cols + 1,
                "weight": np.where(mask[int(u)], weights[int(u)], 0.0),
            }
        )
        for u in units
    ]
    return pd.concat(frames, ignore_index=True)


def receptive_fields(
    first_layer_weights: np.ndarray,
    first_layer_mask: np.ndarray,
    units: Sequence[int],
    input_shape: Sequence[int],
    side: int = 140,
) -> alt.FacetChart:
    """One square 28x28 image per chosen unit: its kept weights, diverging colours centred on 0."""
    frame = receptive_field_frame(first_layer_weights, first_layer_mask, units, input_shape)
    height, width = int(input_shape[0]), int(input_shape[1])
    bound = float(np.abs(frame["weight"]).max()) or 1.0
    cell = side / max(height, width)
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            **pixel_grid(width, height),
            color=signed_colour("weight:Q", bound),
            tooltip=["unit:N", "row:Q", "col:Q", alt.Tooltip("weight:Q", format=".3f")],
        )
        .properties(width=cell * width, height=cell * height)
        .facet(facet=alt.Facet("unit:N", title=None, sort=[f"unit {int(u)}" for u in units]), columns=5)
        .properties(title="receptive fields: kept weights into each unit", autosize=FIXED_SIZE)
    )


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


def mask_difference(
    mask_a: np.ndarray, mask_b: np.ndarray, title: str, max_cells: int = MAX_HEATMAP_CELLS
) -> alt.Chart:
    frame = mask_difference_frame(mask_a, mask_b, max_cells)
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("col:O", axis=INPUT_AXIS),
            y=alt.Y("row:O", axis=OUTPUT_AXIS),
            color=alt.Color(
                "state:N",
                title="weight",
                scale=alt.Scale(domain=list(MASK_STATES), range=list(MASK_STATE_COLOURS)),
                legend=alt.Legend(orient="bottom", columns=2),
            ),
            tooltip=["row_start:Q", "col_start:Q", "state:N", "both:Q", "only_a:Q", "only_b:Q"],
        )
        .properties(title=title, width=CHART_WIDTH, height=CHART_WIDTH * 0.6, autosize=FIXED_SIZE)
    )


# --- the network as a graph (the playground) ----------------------------------------------------------------


def network_graph_frames(masks: Sequence[np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Nodes (layer, unit, x, y) and kept edges (x, y, x2, y2) of a small network; bias columns dropped."""
    widths = [np.asarray(masks[0]).shape[1] - 1] + [np.asarray(m).shape[0] for m in masks]
    nodes = []
    for layer, width in enumerate(widths):
        for unit in range(width):
            nodes.append({"layer": layer, "unit": unit, "x": float(layer), "y": (unit + 0.5) / width})
    position = {(n["layer"], n["unit"]): (n["x"], n["y"]) for n in nodes}
    edges = []
    for layer, mask in enumerate(masks):
        outputs, inputs = np.nonzero(np.asarray(mask)[:, :-1])
        for out_unit, in_unit in zip(outputs, inputs):
            x, y = position[(layer, int(in_unit))]
            x2, y2 = position[(layer + 1, int(out_unit))]
            edges.append({"x": x, "y": y, "x2": x2, "y2": y2})
    return pd.DataFrame(nodes), pd.DataFrame(edges, columns=["x", "y", "x2", "y2"])


def network_graph(
    masks: Sequence[np.ndarray],
    title: str = "kept connections",
    width: int = 300,
    height: int = 260,
    colour: str | None = None,
) -> alt.LayerChart:
    nodes, edges = network_graph_frames(masks)
    axis_x = alt.X("x:Q", axis=None, scale=alt.Scale(domain=[-0.2, len(masks) + 0.2]))
    axis_y = alt.Y("y:Q", axis=None, scale=alt.Scale(domain=[0, 1]))
    lines = (
        alt.Chart(edges)
        .mark_rule(color=colour or "#0072B2", opacity=0.5)
        .encode(x=axis_x, y=axis_y, x2="x2:Q", y2="y2:Q")
    )
    dots = (
        alt.Chart(nodes).mark_circle(size=40, color="#D55E00").encode(x=axis_x, y=axis_y, tooltip=["layer:Q", "unit:Q"])
    )
    return alt.layer(lines, dots).properties(title=title, width=width, height=height)
