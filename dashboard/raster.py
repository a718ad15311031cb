"""Weight matrices drawn as one picture each: a PNG inside a Vega-Lite image mark.

The Inclusion page draws about a dozen matrices (masks, masked weights, the two compared masks, the
kept inputs, receptive fields). As rectangle marks those were some 30,000 marks and 2.5 MB of chart
data, and the browser took about a second to redraw them after every threshold step. Each matrix is
now a small PNG (the same blocks and the same colours as before: charts.block_frame, the Vega
colour schemes) in a single image mark, with the colour legend kept.

The specs are plain Vega-Lite dicts, not Altair objects: building and validating an Altair chart
cost tens of milliseconds a chart, more than the picture itself (tests validate the dicts).
Pure: numpy and Pillow (Altair only for its schema URL); nothing here imports Streamlit or torch.
"""

from __future__ import annotations

import base64
import io
from typing import Any, Sequence

import altair as alt
import numpy as np
from PIL import Image

from dashboard import charts

# Vega's continuous colour schemes (vega-scale), as the evenly spaced stops it interpolates
# linearly in RGB: the pictures take the colours the legends show.
SCHEMES = {
    "greys": "e2e2e2d4d4d4c4c4c4b1b1b19d9d9d8888887575756262624d4d4d3535351e1e1e",
    "redblue": "8c0d25bf363adf745ef4ae91fbdbc9f2efeed2e5ef9dcae15da2cb2f78b3134b85",
    "viridis": "440154470e61481a6c482575472f7d443a834144873d4e8a39568c35608d31688e2d708e2a788e27818e23888e21918d1f"
    "988b1fa08822a8842ab07f35b77943bf7154c56866cc5d7ad1518fd744a5db36bcdf27d2e21be9e51afde725",
}
PRUNED_COLOUR = "#ffffff"  # receptive fields: a pruned weight is white, whatever the scheme says at 0


def _rgb(hex_colour: str) -> np.ndarray:
    text = hex_colour.lstrip("#")
    return np.array([int(text[i : i + 2], 16) for i in (0, 2, 4)], dtype=np.float64)


def scheme_stops(name: str) -> np.ndarray:
    """The scheme's colour stops, (n, 3) in 0-255."""
    text = SCHEMES[name]
    return np.stack([_rgb(text[i : i + 6]) for i in range(0, len(text), 6)])


def colour_ramp(values: np.ndarray, scheme: str, low: float, high: float) -> np.ndarray:
    """Colours of `values` on a linear scale from low to high (clamped), as Vega draws them:
    uint8 RGB with the values' shape plus 3. NaN takes the low end."""
    stops = scheme_stops(scheme)
    span = float(high) - float(low)
    position = (np.asarray(values, dtype=np.float64) - float(low)) / (span if span > 0 else 1.0)
    position = np.clip(np.nan_to_num(position, nan=0.0), 0.0, 1.0) * (len(stops) - 1)
    index = np.minimum(np.floor(position).astype(np.int64), len(stops) - 2)
    fraction = (position - index)[..., None]
    colours = stops[index] * (1.0 - fraction) + stops[index + 1] * fraction
    return np.round(colours).astype(np.uint8)


def png_bytes(rgb: np.ndarray) -> bytes:
    """A (height, width, 3) uint8 array as an 8-bit RGB PNG file (Pillow, which Streamlit needs anyway)."""
    image = np.ascontiguousarray(rgb, dtype=np.uint8)
    if image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) < 1:
        raise ValueError(f"expected a (height, width, 3) image, got shape {image.shape}")
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def data_url(rgb: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")


SCHEMA = alt.SCHEMA_URL  # the Vega-Lite version the installed Altair (and the other charts) speak


def block_sums(matrices: np.ndarray, max_cells: int = charts.MAX_HEATMAP_CELLS) -> tuple[np.ndarray, np.ndarray]:
    """Sums and sizes of the blocks of charts.block_frame for a (..., rows, cols) stack of matrices:
    (..., block rows, block cols) sums and the (block rows, block cols) entry counts. Booleans are
    summed as integers (exact counts)."""
    matrices = np.asarray(matrices)
    if matrices.dtype == bool:
        matrices = matrices.view(np.uint8)
    rows, cols = matrices.shape[-2:]
    row_edges = charts._block_edges(rows, max_cells)
    col_edges = charts._block_edges(cols, max_cells)
    # One pass over the entries (reduceat), then a pass over the row sums: a few milliseconds for 400 x 785.
    accumulate = np.int64 if matrices.dtype.kind in "biu" else np.float64
    sums = np.add.reduceat(
        np.add.reduceat(matrices, row_edges[:-1], axis=-2, dtype=accumulate), col_edges[:-1], axis=-1
    )
    return sums, np.outer(np.diff(row_edges), np.diff(col_edges))


def block_means(matrix: np.ndarray, max_cells: int = charts.MAX_HEATMAP_CELLS) -> np.ndarray:
    """charts.block_frame's block means as a (block rows, block columns) array."""
    sums, sizes = block_sums(matrix, max_cells)
    return sums / sizes


def block_states(
    mask_a: np.ndarray, mask_b: np.ndarray, max_cells: int = charts.MAX_HEATMAP_CELLS
) -> tuple[np.ndarray, np.ndarray]:
    """charts.mask_difference_frame as arrays: each block's majority state (an index into
    charts.MASK_STATES, the first on ties) and the (4,) weight counts per state."""
    a, b = np.asarray(mask_a, dtype=bool), np.asarray(mask_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"masks differ in shape: {a.shape} and {b.shape}")
    # Counts of "both", "only A" and "only B" per block; "neither" is the rest of the block.
    sums, sizes = block_sums(np.stack([a & b, a & ~b, ~a & b]), max_cells)
    counts = np.concatenate([sums, (sizes - sums.sum(axis=0))[None]])
    return counts.argmax(axis=0), counts.reshape(4, -1).sum(axis=1)


def _colour_channel(field: str, kind: str, title: str | None, scale: dict, legend: dict) -> dict:
    channel = {"field": field, "type": kind, "scale": scale, "legend": legend}
    if title is not None:
        channel["title"] = title
    return channel


def _image_panel(
    rgb: np.ndarray,
    title: Any,
    width: float,
    height: float,
    colour: dict | None,
    legend_values: Sequence | None,
    tooltip: str | None,
    dataset: str = "picture",
    panel: int | None = None,
) -> tuple[dict, list[dict]]:
    """One picture's layer spec and its rows of the named `dataset`: the first row carries the
    picture (url) and its tooltip, one row per legend value carries the colour field. In a
    concatenation the panels share one dataset and each picks its rows by `panel`."""
    encoding: dict[str, Any] = {"x": {"value": 0}, "y": {"value": 0}, "url": {"field": "url", "type": "nominal"}}
    if tooltip is not None:
        encoding["tooltip"] = {"field": "about", "type": "nominal", "title": " "}
    mine = [] if panel is None else [{"filter": f"datum.panel === {int(panel)}"}]
    tag = {} if panel is None else {"panel": int(panel)}
    rows: list[dict] = [{"url": data_url(rgb), "about": tooltip or "", **tag}]
    layers = [
        {
            "data": {"name": dataset},
            "transform": [*mine, {"filter": "isValid(datum.url)"}],
            "mark": {
                "type": "image",
                "width": float(width),
                "height": float(height),
                "aspect": False,
                "smooth": False,
                "align": "left",
                "baseline": "top",
            },
            "encoding": encoding,
        }
    ]
    if colour is not None:
        values = list(legend_values) if legend_values is not None else [0.0, 1.0]
        rows += [{"url": None, "about": None, **tag, colour["field"]: v} for v in values]
        layers.append(
            {
                "data": {"name": dataset},
                "transform": [*mine, {"filter": "!isValid(datum.url)"}],
                "mark": {"type": "rect", "opacity": 0},
                "encoding": {
                    "x": {"value": 0},
                    "x2": {"value": 0},
                    "y": {"value": 0},
                    "y2": {"value": 0},
                    "color": colour,
                },
            }
        )
    return {"title": title, "width": float(width), "height": float(height), "layer": layers}, rows


def image_spec(
    rgb: np.ndarray,
    title: Any,
    width: float,
    height: float,
    colour: dict | None = None,
    legend_values: Sequence | None = None,
    tooltip: str | None = None,
) -> dict[str, Any]:
    """A Vega-Lite layer: the picture stretched over a width x height plot (pixels kept sharp, no
    smoothing), and the legend of the colour channel `colour` (whose scale gives the picture's
    colours) drawn from `legend_values` by a rectangle of no size.

    What changes with the threshold (the picture, the tooltip, the legend's end values) lives in
    one named dataset, and the spec itself stays the same: Streamlit's browser side then swaps the
    data of the chart already drawn instead of compiling and drawing a new chart (and the server
    converts one small table per chart)."""
    panel, rows = _image_panel(rgb, title, width, height, colour, legend_values, tooltip)
    # The picture fills the plot at whatever width Streamlit gives the chart (a column narrower than
    # `width` shrinks the plot; a fixed-size image would spill over its neighbour).
    panel["layer"][0]["mark"].update(width={"expr": "width"}, height={"expr": "height"})
    return {"$schema": SCHEMA, **panel, "autosize": dict(charts.FIXED_SIZE), "datasets": {"picture": rows}}


def _data_domain_scale(scheme: str) -> dict[str, Any]:
    """A colour scale whose domain is the legend's values (a dataset), so the spec does not carry it."""
    return {"scheme": scheme, "nice": False, "zero": False}


def _kept_summary(mask: np.ndarray) -> str:
    mask = np.asarray(mask)
    kept, total = int(mask.sum()), int(mask.size)
    return f"kept {kept} of {total} weights (density {kept / total if total else 0.0:.4f})"


def mask_picture(mask: np.ndarray, title: str, max_cells: int = charts.MAX_HEATMAP_CELLS) -> dict[str, Any]:
    """charts.mask_heatmap as one picture: kept (1) / pruned (0), blocks show the kept fraction."""
    means = block_means(np.asarray(mask, dtype=bool), max_cells)
    blocked = means.shape != np.shape(mask)
    colour = _colour_channel(
        "value",
        "quantitative",
        "kept fraction" if blocked else "kept",
        {"domain": [0, 1], "scheme": "greys"},
        dict(charts.GRADIENT_LEGEND),
    )
    return image_spec(
        colour_ramp(means, "greys", 0.0, 1.0),
        title,
        charts.CHART_WIDTH,
        charts.CHART_WIDTH * 0.6,
        colour,
        [0.0, 1.0],
        tooltip=_kept_summary(mask),
    )


def weight_picture(weights: np.ndarray, title: str, max_cells: int = charts.MAX_HEATMAP_CELLS) -> dict[str, Any]:
    """charts.weight_heatmap as one picture: block means, diverging colours centred on 0."""
    means = block_means(weights, max_cells)
    bound = float(np.abs(means).max()) or 1.0
    colour = _colour_channel(
        "value", "quantitative", "weight", _data_domain_scale("redblue"), dict(charts.GRADIENT_LEGEND)
    )
    return image_spec(
        colour_ramp(means, "redblue", -bound, bound),
        title,
        charts.CHART_WIDTH,
        charts.CHART_WIDTH * 0.6,
        colour,
        [-bound, bound],
    )


def kept_per_input_picture(first_layer_mask: np.ndarray, input_shape: Sequence[int], side: int = 240) -> dict[str, Any]:
    """charts.kept_per_input_image as one picture: one square cell per input pixel."""
    frame = charts.kept_per_input_frame(first_layer_mask, input_shape)
    height, width = int(input_shape[0]), int(input_shape[1])
    counts = frame["kept"].to_numpy().reshape(height, width)
    low, high = float(counts.min()), float(counts.max())
    if high <= low:
        high = low + 1.0
    cell = side / max(height, width)
    colour = _colour_channel(
        "kept", "quantitative", "kept weights", _data_domain_scale("viridis"), dict(charts.GRADIENT_LEGEND)
    )
    return image_spec(
        colour_ramp(counts, "viridis", low, high),
        "kept weights per input pixel",
        cell * width,
        cell * height,
        colour,
        [low, high],
    )


def mask_difference_picture(
    mask_a: np.ndarray, mask_b: np.ndarray, title: str, max_cells: int = charts.MAX_HEATMAP_CELLS
) -> dict[str, Any]:
    """charts.mask_difference as one picture: each block in the colour of its majority state."""
    states, counts = block_states(mask_a, mask_b, max_cells)
    palette = np.stack([_rgb(c) for c in charts.MASK_STATE_COLOURS]).astype(np.uint8)
    colour = _colour_channel(
        "state",
        "nominal",
        "weight",
        {"domain": list(charts.MASK_STATES), "range": list(charts.MASK_STATE_COLOURS)},
        {"orient": "bottom", "columns": 2},
    )
    about = ", ".join(f"{name} {int(n)}" for name, n in zip(charts.MASK_STATES[:3], counts[:3]))
    return image_spec(
        palette[states],
        title,
        charts.CHART_WIDTH,
        charts.CHART_WIDTH * 0.6,
        colour,
        list(charts.MASK_STATES),
        tooltip=about,
    )


def receptive_field_pictures(
    first_layer_weights: np.ndarray,
    first_layer_mask: np.ndarray,
    units: Sequence[int],
    input_shape: Sequence[int],
    side: int = 140,
    columns: int = 5,
) -> dict[str, Any]:
    """charts.receptive_fields as one picture per unit: its kept weights on the image grid,
    diverging colours centred on 0 shared by every unit, pruned weights white."""
    height, width = int(input_shape[0]), int(input_shape[1])
    units = [int(u) for u in units]
    weights = np.asarray(first_layer_weights, dtype=np.float64)[units, :-1]  # bias column dropped
    mask = np.asarray(first_layer_mask, dtype=bool)[units, :-1]
    if weights.shape[1] != height * width:
        raise ValueError(f"first layer has {weights.shape[1]} inputs, not {height}x{width}")
    kept = np.where(mask, weights, 0.0)
    bound = float(np.abs(kept).max()) if kept.size else 0.0
    bound = bound or 1.0
    cell = side / max(height, width)
    colour = _colour_channel(
        "weight", "quantitative", None, _data_domain_scale("redblue"), dict(charts.GRADIENT_LEGEND)
    )
    pruned = _rgb(PRUNED_COLOUR).astype(np.uint8)
    panels, rows = [], []
    for position, unit in enumerate(units):
        rgb = colour_ramp(kept[position].reshape(height, width), "redblue", -bound, bound)
        rgb[~mask[position].reshape(height, width)] = pruned
        panel, panel_rows = _image_panel(
            rgb,
            {"text": f"unit {unit}", "fontSize": 11, "fontWeight": "normal", "anchor": "middle"},
            cell * width,
            cell * height,
            colour if position == 0 else None,
            [-bound, bound],
            f"unit {unit}: {int(mask[position].sum())} kept input weights",
            panel=position,
        )
        panels.append(panel)
        rows += panel_rows
    return {
        "$schema": SCHEMA,
        "title": "receptive fields: kept weights into each unit",
        "concat": panels,
        "columns": int(columns),
        "autosize": dict(charts.FIXED_SIZE),
        "datasets": {"picture": rows},
    }
