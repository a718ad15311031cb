"""The charts' shared look: sizes, legends, the fixed colour of each family and class, layer labels.

Pure: numpy arrays in, Altair charts (and the frames behind them) out (see dashboard/charts/__init__.py)."""

from __future__ import annotations

from typing import Sequence

import altair as alt
import pandas as pd

MAX_HEATMAP_CELLS = 64  # blocks per side of a drawn weight matrix
CHART_WIDTH = 320
HISTOGRAMS_PER_ROW = 2
# Charts with a legend below keep their own size: Streamlit's default "fit" autosize squeezed the plot
# to make room for the legend (a 28x28 image drawn 240 x 90 px).
FIXED_SIZE = {"type": "pad", "contains": "padding"}
# End labels of a colour gradient stay inside the chart when the legend sits below it.
GRADIENT_LEGEND = {"orient": "bottom", "direction": "horizontal", "gradientLength": 200, "labelOverlap": False}


def kept_colour(field: str, title: str) -> alt.Color:
    """Kept (1) to pruned (0), or a kept fraction: greys on [0, 1] (masks and conv filters alike)."""
    return alt.Color(
        field, title=title, scale=alt.Scale(domain=[0, 1], scheme="greys"), legend=alt.Legend(**GRADIENT_LEGEND)
    )


def signed_colour(field: str, bound: float, title: str | None = None) -> alt.Color:
    """Signed weights: diverging red-blue centred on 0, symmetric to +-bound."""
    options = {"title": title} if title is not None else {}
    return alt.Color(
        field,
        scale=alt.Scale(scheme="redblue", domain=[-bound, bound]),
        legend=alt.Legend(**GRADIENT_LEGEND),
        **options,
    )


# --- a fixed colour per family, colour-blind safe (Okabe-Ito), the same on every page ----------------

FAMILY_COLOURS = {
    "lbbnn": "#0072B2",
    "lbbnn-lfmvn": "#56B4E9",
    "bnn": "#E69F00",
    "bnn-mixture": "#F0E442",
    "lbbnn-flow": "#44AA99",  # Tol's teal: apart from the NUTS reference's purple and the other blues
    "variational-dense": "#999999",
    "concrete-dropout": "#CC79A7",
    "horseshoe": "#009E73",
    "sparse-vd": "#D55E00",
    "fnn": "#000000",
    "laplace": "#882255",
    "ensemble": "#117733",  # Tol's green: apart from horseshoe's bluish green
}
OTHER_FAMILY_COLOUR = "#666666"  # a family missing from the table (none should be)
REFERENCE_COLOUR = "#5E3C99"  # the NUTS reference: no family's, far from bnn's orange (calibration_charts too)


def family_colour(family: str | None) -> str:
    """The one colour of a family's curves, bars and bands on every page."""
    return FAMILY_COLOURS.get(str(family), OTHER_FAMILY_COLOUR)


def family_key(columns: int = 2) -> alt.Chart:
    """A small key of the family colours (the sidebar's): a square and the family's name each."""
    families = list(FAMILY_COLOURS)
    rows = -(-len(families) // columns)
    frame = pd.DataFrame(
        {
            "family": families,
            "column": [i // rows for i in range(len(families))],
            "row": [i % rows for i in range(len(families))],
        }
    )
    colour = alt.Color(
        "family:N", scale=alt.Scale(domain=families, range=[FAMILY_COLOURS[f] for f in families]), legend=None
    )
    # Column c starts at c / columns of the width: the last column's names have room to its right.
    x = alt.X("column:Q", axis=None, scale=alt.Scale(domain=[0, columns], nice=False, zero=True))
    y = alt.Y("row:O", axis=None)
    base = alt.Chart(frame)
    squares = base.mark_square(size=90, opacity=1).encode(x=x, y=y, color=colour, tooltip=["family:N"])
    names = base.mark_text(align="left", dx=9, fontSize=11).encode(x=x, y=y, text="family:N")
    return (squares + names).properties(width=115 * columns, height=16 * rows).configure_view(stroke=None)


def run_key(labels: Sequence[str], families: Sequence[str]) -> alt.Chart:
    """The chosen runs' labels, each in its family's colour with a square of it (Compare: the run
    picker's chips are all one colour)."""
    frame = pd.DataFrame({"run": list(labels), "family": [str(f) for f in families], "row": range(len(labels))})
    colour = alt.Color(
        "run:N", scale=alt.Scale(domain=list(labels), range=[family_colour(f) for f in families]), legend=None
    )
    y = alt.Y("row:O", axis=None)
    base = alt.Chart(frame)
    squares = base.mark_square(size=90, opacity=1).encode(
        x=alt.value(6), y=y, color=colour, tooltip=["run:N", "family:N"]
    )
    names = base.mark_text(align="left", dx=0, fontSize=12, fontWeight="bold", limit=700).encode(
        x=alt.value(16), y=y, text="run:N", color=colour
    )
    return (squares + names).properties(width=720, height=18 * max(1, len(labels))).configure_view(stroke=None)


CLASS_COLOURS = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#000000",
    "#999999",
    "#882255",
]


# Long lists of labels read better with a name: "layer 1 (784 -> 400)".


def layer_label(index: int, shape: Sequence[int]) -> str:
    out_features, in_plus_bias = int(shape[0]), int(shape[1])
    return f"layer {index + 1} ({in_plus_bias - 1} -> {out_features})"


def _colour(colour: str | None) -> dict[str, str]:
    return {} if colour is None else {"color": colour}
