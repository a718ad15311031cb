"""Per-layer histograms of the native statistic and weight masks at a threshold."""

from __future__ import annotations

import numpy as np
import streamlit as st

from dashboard import cache, figures, state
from dashboard.ui import guard

run = state.run_page("Inclusion statistics and masks")
run_id = run.run_id

with guard("Computing the statistics"):
    spec = cache.threshold_range(run_id)
    statistics = cache.statistics(run_id)
    threshold = state.threshold_slider(run_id, spec)
    labels = [figures.layer_label(i, s.shape) for i, s in enumerate(statistics)]

    log_counts = st.toggle("log-scale counts", value=True, key="hist_log")
    st.altair_chart(figures.statistic_histogram(statistics, threshold, spec.name, log_counts=log_counts,
                                                labels=labels, value_range=(spec.low, spec.high)))

    masks = cache.masks(run_id, threshold)
    table = figures.density_frame(masks)
    st.subheader("Density per layer")
    st.dataframe(table.style.format({"density": "{:.4f}"}), hide_index=True)
    if table["kept"].iloc[-1] == 0:
        st.warning("No weight is kept at this threshold: the pruned network predicts a constant.")

    st.subheader("Masks")
    view = st.radio("Show", ["mask (kept weights)", "masked mean weights"], horizontal=True, key="mask_view")
    weights = cache.conditional_mean_weights(run_id) if view.startswith("masked") else None
    columns = st.columns(min(3, len(masks)))
    for index, mask in enumerate(masks):
        column = columns[index % len(columns)]
        if weights is None:
            chart = figures.mask_heatmap(mask, labels[index])
        else:
            chart = figures.weight_heatmap(np.where(mask, weights[index], 0.0), labels[index])
        column.altair_chart(chart)
    if any(max(m.shape) > figures.MAX_HEATMAP_CELLS for m in masks):
        st.caption(f"Large matrices are drawn as blocks of up to {figures.MAX_HEATMAP_CELLS} per side; "
                   "the colour is the block's kept fraction (or mean weight). Last column: bias.")

    input_shape = tuple(run.dataset().input_shape)
    if len(input_shape) == 2:
        st.subheader("Input pixels the first layer still reads")
        st.altair_chart(figures.kept_per_input_image(masks[0], input_shape), width="content")
