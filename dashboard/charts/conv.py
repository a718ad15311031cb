"""Masks of convolutional layers: each filter's kept k x k taps as small multiples, and each filter's
density as a bar.

A conv layer's mask is its family's augmented (filters, in_channels k k + 1) matrix, a row per filter
(its taps channel-major as torch lays out (filters, in_channels, k, k), then the bias). A filter of
several input channels is drawn as the fraction of its channels in which each tap is kept.

Pure: numpy arrays in, Altair charts (and the frames behind them) out.
"""

from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.charts.style import FIXED_SIZE, kept_colour

FILTERS_PER_ROW = 10
CELL = 9  # pixels per tap


def filter_taps(mask: np.ndarray, in_channels: int, kernel: int) -> np.ndarray:
    """(filters, in_channels k k + 1) -> the kept taps (filters, in_channels, k, k), bias dropped."""
    mask = np.asarray(mask)
    if mask.ndim != 2 or mask.shape[1] != in_channels * kernel * kernel + 1:
        raise ValueError(
            f"a conv mask of {in_channels} channels of {kernel}x{kernel} has "
            f"{in_channels * kernel * kernel + 1} columns, got shape {mask.shape}"
        )
    return mask[:, :-1].reshape(mask.shape[0], in_channels, kernel, kernel).astype(bool)


def filter_pattern_frame(mask: np.ndarray, in_channels: int, kernel: int) -> pd.DataFrame:
    """One row per (filter, tap row, tap column): the fraction of the filter's input channels keeping the tap."""
    kept = filter_taps(mask, in_channels, kernel).mean(axis=1)  # (filters, k, k)
    filters, rows, cols = np.meshgrid(np.arange(kept.shape[0]), np.arange(kernel), np.arange(kernel), indexing="ij")
    return pd.DataFrame({"filter": filters.ravel(), "row": rows.ravel(), "col": cols.ravel(), "kept": kept.ravel()})


def filter_density_frame(mask: np.ndarray, in_channels: int, kernel: int) -> pd.DataFrame:
    """Per filter: kept taps, their fraction of in_channels k k, and whether the bias is kept."""
    taps = filter_taps(mask, in_channels, kernel).reshape(np.shape(mask)[0], -1)
    kept = taps.sum(axis=1)
    return pd.DataFrame(
        {
            "filter": np.arange(len(kept)),
            "kept": kept,
            "density": kept / taps.shape[1],
            "bias kept": np.asarray(mask)[:, -1].astype(bool),
        }
    )


def filter_patterns(mask: np.ndarray, in_channels: int, kernel: int, title: str) -> alt.Chart:
    """Small multiples: each filter's k x k taps, dark where kept (in every input channel)."""
    frame = filter_pattern_frame(mask, in_channels, kernel)
    colour = "kept" if in_channels == 1 else f"kept fraction of {in_channels} channels"
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("col:O", axis=None),
            y=alt.Y("row:O", axis=None),
            color=kept_colour("kept:Q", colour),
            tooltip=["filter:Q", "row:Q", "col:Q", alt.Tooltip("kept:Q", format=".2f")],
        )
        .properties(width=kernel * CELL, height=kernel * CELL)
        .facet(
            facet=alt.Facet("filter:O", title=None, header=alt.Header(labelFontSize=9)),
            columns=FILTERS_PER_ROW,
        )
        .properties(title=title)
        .configure(autosize=FIXED_SIZE)
    )


def filter_density_bars(mask: np.ndarray, in_channels: int, kernel: int, title: str) -> alt.Chart:
    """One bar per filter: the fraction of its taps kept (a filter at 0 is off, whatever its bias)."""
    frame = filter_density_frame(mask, in_channels, kernel)
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("filter:O", title="filter"),
            y=alt.Y("density:Q", title="kept taps", scale=alt.Scale(domain=[0, 1])),
            tooltip=["filter:Q", "kept:Q", alt.Tooltip("density:Q", format=".3f"), "bias kept:N"],
        )
        .properties(title=title, width=max(120, 8 * len(frame)), height=120, autosize=FIXED_SIZE)
    )


def conv_filter_charts(
    masks: Sequence[np.ndarray], conv: Sequence[Sequence[int]], input_shape: Sequence[int]
) -> list[tuple[alt.Chart, alt.Chart]]:
    """Per conv layer (the first len(conv) masks) its small multiples and its density bars; input_shape is
    the dataset's, (height, width) for one channel or (channels, height, width)."""
    result = []
    channels = 1 if len(input_shape) == 2 else int(input_shape[0])
    for index, (filters, kernel) in enumerate(conv):
        mask = masks[index]
        name = f"conv {index + 1}: {filters} filters of {channels}x{kernel}x{kernel}"
        result.append(
            (
                filter_patterns(mask, channels, kernel, name),
                filter_density_bars(mask, channels, kernel, f"{name}, kept taps per filter"),
            )
        )
        channels = int(filters)
    return result
