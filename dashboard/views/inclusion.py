"""Per-layer histograms of the native statistic and weight masks at a threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import backend, cache, charts, explain, playback, sparsity_panels, state
from dashboard.ui import guard, slots

run = state.run_page("Inclusion statistics and masks")
run_id = run.run_id
st.markdown(explain.PAGE_INTROS["inclusion"])
# Each section in its slot: the playback's polled fragment stands at the same place in every run (ui.slots).
statistics_slot, columns_slot, paths_slot, playback_slot, compare_slot = slots(5)

with statistics_slot, guard("Computing the statistics"):
    spec = cache.threshold_range(run_id)
    statistics = cache.statistics(run_id)
    threshold = state.threshold_slider(run_id, spec)
    labels = [charts.layer_label(i, s.shape) for i, s in enumerate(statistics)]

    log_counts = st.toggle("log-scale counts", value=True, key="hist_log")
    # Placeholder until the mask view is chosen below; the charts come built from the cache.
    histogram = st.empty()
    if cache.prior_of_statistic(run_id) is not None:
        st.caption(
            "Green, beside the histograms: what the prior believed about the inclusion probability before "
            "any data. Compare it with where the posterior put the weights."
        )
    else:
        st.caption(
            f"The {run.config.method} prior says nothing directly about its statistic ({spec.name}); "
            "only the posterior is drawn."
        )

    masks = cache.masks(run_id, threshold)
    table = charts.density_frame(masks)
    st.subheader("Density per layer")
    # A column format, not a pandas Styler: the Styler cost about 20 ms of every threshold step.
    st.dataframe(table, hide_index=True, column_config={"density": st.column_config.NumberColumn(format="%.4f")})
    if table["kept"].iloc[-1] == 0:
        st.warning("No weight is kept at this threshold: the pruned network predicts a constant.")

    st.subheader("Masks")
    view = st.radio("Show", ["mask (kept weights)", "masked mean weights"], horizontal=True, key="mask_view")
    specs = cache.inclusion_charts(run_id, threshold, log_counts, view.startswith("masked"))
    histogram.vega_lite_chart(specs["histogram"])
    columns = st.columns(min(3, len(masks)))
    for index, chart in enumerate(specs["masks"]):
        columns[index % len(columns)].vega_lite_chart(chart)
    if any(max(m.shape) > charts.MAX_HEATMAP_CELLS for m in masks):
        st.caption(
            f"Large matrices are drawn as blocks of up to {charts.MAX_HEATMAP_CELLS} per side; "
            "the colour is the block's kept fraction (or mean weight). Last column: bias."
        )

    if run.config.conv:  # a conv run: each filter's kept taps, and kept taps per filter
        st.subheader("Convolutional filters")
        for patterns, bars in charts.conv_filter_charts(masks, run.config.conv, run.dataset().input_shape):
            st.vega_lite_chart(patterns.to_dict(), width="content")
            st.vega_lite_chart(bars.to_dict(), width="content")

    if specs["pixels"] is not None:
        st.subheader("Input pixels the first layer still reads")
        st.vega_lite_chart(specs["pixels"], width="content")

with columns_slot, guard("Input columns read"):
    columns_read = backend.input_columns(run, threshold)
    if columns_read is not None:  # tabular runs (a user table, a UCI set): inputs have names
        st.subheader("Input columns the network still reads")
        read = [c["column"] for c in columns_read if c["read"]]
        st.caption(
            f"{len(read)} of {len(columns_read)} input columns are read at this threshold: some kept weight on an "
            "input-to-output path leaves one of their input units. A text column's one-hot units are counted "
            "together; 'levels read' names those still read."
        )
        st.dataframe(
            pd.DataFrame(
                {
                    "column": [c["column"] for c in columns_read],
                    "read": [c["read"] for c in columns_read],
                    "units read": [f"{c['read_units']} of {c['units']}" for c in columns_read],
                    "kept, off every path": [c["kept_units"] - c["read_units"] for c in columns_read],
                    "levels read": [", ".join(c["levels_read"]) for c in columns_read],
                }
            ),
            hide_index=True,
        )

with paths_slot, guard("Active paths"):
    sparsity_panels.inclusion_section(
        run_id, threshold, statistics, masks, labels, spec.name, tuple(run.dataset().input_shape)
    )

with playback_slot, guard("Playback"):
    st.subheader("Playback: how training moved the statistic")
    snapshots = cache.snapshots(run_id)
    if snapshots is None:
        st.info(
            "This run was trained before snapshots were recorded: there is nothing to replay. A run "
            "trained now records its histograms and densities after every epoch."
        )
    else:
        st.caption(
            "Move the epoch or press Play: the histograms, the density curve and (for small networks) the "
            "masks at the threshold above as they were after each epoch. Watch when the weights leave the "
            "middle and where the density settles."
        )
        playback.render(run_id, run.config.method, snapshots, threshold, labels)

with compare_slot, guard("Masks as in Hubin & Storvik 2019"):
    st.subheader("Compare two masks")
    st.caption(
        "A = the mask at the threshold above. B = a sampled structure (each weight switched on with its "
        "inclusion probability, Hubin & Storvik's (2019) figure 4) or the mask at a second threshold. "
        "Black: kept in both; "
        "blue: only in A; orange: only in B."
    )
    choices = (["a sampled structure"] if backend.samples_structure(spec.name) else []) + ["a second threshold"]
    other = st.radio("B is", choices, horizontal=True, key="mask_b_kind")
    if other == "a second threshold":
        second = st.slider(
            "second threshold (B)",
            min_value=float(spec.low),
            max_value=float(spec.high),
            value=float(
                spec.clip(spec.default if abs(spec.default - threshold) > 1e-9 else (spec.low + spec.high) / 2)
            ),
            step=float((spec.high - spec.low) / 200 or 0.01),
            format="%.4g",
            key="mask_b_threshold",
        )
        comparison = cache.mask_comparison(run_id, threshold, float(second), 0)
    else:
        draw = st.number_input(
            "draw", min_value=0, value=0, step=1, key="mask_b_seed", help="another number draws another structure"
        )
        comparison = cache.mask_comparison(run_id, threshold, None, int(draw))
    columns = st.columns(min(3, len(masks)))
    for index, chart in enumerate(comparison["charts"]):
        columns[index % len(columns)].vega_lite_chart(chart)
    st.caption(f"A keeps {comparison['kept_a']} weights, B keeps {comparison['kept_b']}.")

    input_shape = tuple(run.dataset().input_shape)
    if len(input_shape) == 2 and not run.config.conv:  # a conv run's first layer: its filters, drawn above
        st.subheader("Receptive fields of first-layer units")
        units_available = list(range(masks[0].shape[0]))
        kept_per_unit = masks[0][:, :-1].sum(axis=1)
        default_units = [int(u) for u in np.argsort(-kept_per_unit)[:5]]
        units = st.multiselect(
            "Hidden units",
            units_available,
            default=default_units,
            key="receptive_units",
            help="default: the five units that keep the most input weights",
        )
        if units:
            st.vega_lite_chart(
                cache.receptive_fields_chart(run_id, threshold, tuple(int(u) for u in units)), width="content"
            )
            st.caption(
                "Each square is one unit's kept incoming weights on the 28x28 image (blue positive, red "
                "negative, white pruned): the pixels it still reads."
            )
