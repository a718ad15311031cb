"""Per-layer histograms of the native statistic and weight masks at a threshold."""

from __future__ import annotations

import streamlit as st

from dashboard import cache, explain, figures, state
from dashboard.ui import guard

run = state.run_page("Inclusion statistics and masks")
run_id = run.run_id
st.markdown(explain.PAGE_INTROS["inclusion"])

with guard("Computing the statistics"):
    spec = cache.threshold_range(run_id)
    statistics = cache.statistics(run_id)
    threshold = state.threshold_slider(run_id, spec)
    labels = [figures.layer_label(i, s.shape) for i, s in enumerate(statistics)]

    log_counts = st.toggle("log-scale counts", value=True, key="hist_log")
    # Placeholder until the mask view is chosen below; the charts come built from the cache.
    histogram = st.empty()
    if cache.prior_of_statistic(run_id) is not None:
        st.caption("Green, beside the histograms: what the prior believed about the inclusion probability before "
                   "any data. Compare it with where the posterior put the weights.")
    else:
        st.caption(f"The {run.config.method} prior says nothing directly about its statistic ({spec.name}); "
                   "only the posterior is drawn.")

    masks = cache.masks(run_id, threshold)
    table = figures.density_frame(masks)
    st.subheader("Density per layer")
    st.dataframe(table.style.format({"density": "{:.4f}"}), hide_index=True)
    if table["kept"].iloc[-1] == 0:
        st.warning("No weight is kept at this threshold: the pruned network predicts a constant.")

    st.subheader("Masks")
    view = st.radio("Show", ["mask (kept weights)", "masked mean weights"], horizontal=True, key="mask_view")
    charts = cache.inclusion_charts(run_id, threshold, log_counts, view.startswith("masked"))
    histogram.vega_lite_chart(charts["histogram"])
    columns = st.columns(min(3, len(masks)))
    for index, chart in enumerate(charts["masks"]):
        columns[index % len(columns)].vega_lite_chart(chart)
    if any(max(m.shape) > figures.MAX_HEATMAP_CELLS for m in masks):
        st.caption(f"Large matrices are drawn as blocks of up to {figures.MAX_HEATMAP_CELLS} per side; "
                   "the colour is the block's kept fraction (or mean weight). Last column: bias.")

    if charts["pixels"] is not None:
        st.subheader("Input pixels the first layer still reads")
        st.vega_lite_chart(charts["pixels"], width="content")
