"""The Inclusion page's "Active paths" section and the Uncertainty page's "Local explanation" panel.

The arrays come from the run's verbs through the facade (active paths and their densities,
Run.explain) and are cached per run id like the pages' other derived arrays; the figures are the pure
Plotly functions of dashboard/charts/sparsity.py.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import streamlit as st

from dashboard import backend, cache
from dashboard.caching import DERIVED_TTL, per_run
from dashboard.charts import sparsity

# The explanation's bar chart shows this many features by default (tabular inputs).
DEFAULT_TOP_K = 15
# Networks up to this many weights are explained as the page opens; larger ones on request: R draws of
# a 784-400-600-10 network took 9 s (R = 10) and 83 s (R = 100) on the 2-core development CPU.
EXPLAIN_AUTO_WEIGHTS = 50_000


@per_run(max_entries=256, ttl=DERIVED_TTL, show_spinner="Finding the active paths ...")
def active_paths(run_id: str, threshold: float) -> dict[str, Any]:
    """Per layer the active mask (numpy bool) and the densities raw and on active paths."""
    run = cache.cached_run(run_id)
    active = [np.asarray(m.detach().cpu().numpy(), dtype=bool) for m in run.active_paths(threshold)]
    return {"active": active, **backend.active_path_densities(run, threshold)}


@per_run(max_entries=256, ttl=DERIVED_TTL, show_spinner="Explaining the example over posterior draws ...")
def local_explanation(run_id: str, index: int, threshold: float, samples: int, seed: int = 0) -> dict[str, Any]:
    """Run.explain for test example `index`, as plain values (backend.explanation)."""
    run = cache.cached_run(run_id)
    return backend.explanation(run, run.dataset().x_test[index], threshold, samples, seed)


def inclusion_section(
    run_id: str,
    threshold: float,
    statistics: Sequence[np.ndarray],
    masks: Sequence[np.ndarray],
    labels: Sequence[str],
    statistic_name: str,
    input_shape: Sequence[int],
) -> None:
    st.subheader("Active paths")
    st.caption(
        "A kept weight is *active* when it lies on some path from an input to an output; the others "
        "(into units nothing reads, out of units no input reaches) change no prediction. Density raw "
        "and on active paths:"
    )
    paths = active_paths(run_id, float(threshold))
    active = paths["active"]
    number = st.column_config.NumberColumn(format="%.4f")
    st.dataframe(
        sparsity.density_comparison_frame(paths, labels),
        hide_index=True,
        column_config={"density": number, "active-path density": number},
    )

    conv = int(np.shape(masks[0])[1]) - 1 != int(np.prod(input_shape))  # conv layers first: no chain of units
    layer = st.selectbox(
        "Layer at full resolution", list(range(len(masks))), format_func=lambda i: labels[i], key="full_mask_layer"
    )
    if np.ndim(statistics[layer]) == 2:
        skip = layer > 0 and not conv and sparsity.skip_flags(masks)[layer]
        st.plotly_chart(
            sparsity.mask_figure(
                statistics[layer],
                masks[layer],
                active[layer],
                labels[layer],
                statistic_name,
                skip_from=int(np.shape(masks[layer - 1])[0]) if skip else None,
            ),
            key="full_mask",
        )
        st.caption(
            f"One cell per weight (last column: bias). Drag to zoom, double-click to reset; the hover gives "
            f"the weight's {statistic_name}. Blue: active; orange: kept but on no input-to-output path; "
            "white: pruned."
            + (" Right of the pink line: the input-skip weights, read from the inputs." if skip else "")
        )
    else:
        st.info(f"{labels[layer]} is not a dense matrix: its mask is drawn above only.")

    if conv or any(np.ndim(m) != 2 for m in active):  # the graph and the pixel map read dense layers only
        st.info("The graph of active paths and the input pixels are drawn for dense layers only.")
        return
    widths = [int(np.shape(active[0])[1]) - 1] + [int(np.shape(m)[0]) for m in active]
    skip = any(sparsity.skip_flags(active))
    if max(widths) <= sparsity.MAX_GRAPH_UNITS:
        st.plotly_chart(sparsity.active_graph_figure(active), key="active_graph")
        st.caption(
            "Inputs on the left, outputs on the right; one line per active weight, filled dots: units on "
            "an active path."
            + (" Pink: input-skip weights, from the inputs straight into a later layer." if skip else "")
        )
    else:
        st.caption(
            f"The graph of active paths is drawn for networks of at most {sparsity.MAX_GRAPH_UNITS} units "
            f"per layer (inputs included); this one has {max(widths)}."
        )
    if len(input_shape) == 2:
        st.subheader("Input pixels that still reach an output")
        st.plotly_chart(sparsity.reaching_pixels_figure(active, input_shape), key="reaching_pixels")
        reached = int((sparsity.active_outgoing_per_input(active) > 0).sum())
        st.caption(
            f"{reached} of {int(np.prod(input_shape))} pixels have an active outgoing weight (colour: how "
            "many); a white pixel changes no prediction."
        )


def explanation_section(run_id: str, dataset: Any, threshold: float, samples: int, default_index: int = 0) -> None:
    st.subheader("Local explanation")
    st.caption(
        "For one test example: each input's contribution to the explained output, the Jacobian of each "
        "sampled network (pruned at the threshold above, active paths only) at the example times the "
        "input's value; for ReLU networks the exact local linear coefficients. Median and 95 % interval "
        "over the R posterior draws."
    )
    if not backend.explainable(cache.cached_run(run_id)):
        st.caption(
            "This run cannot be explained here: a convolutional network's explanation is not written, "
            "and a linearised posterior's draws (laplace) are not networks of their own. Explain a fully "
            "connected run of another family."
        )
        return
    weights = sum(int(np.size(s)) for s in cache.statistics(run_id))
    if not st.toggle(
        "Explain the example",
        value=weights <= EXPLAIN_AUTO_WEIGHTS,
        key="explain_on",
        help=f"on as the page opens for networks of at most {EXPLAIN_AUTO_WEIGHTS:,} weights",
    ):
        st.caption(
            f"This network has {weights:,} weights: explaining one example takes R sampled networks' "
            "Jacobians, seconds to minutes here. Switch it on to compute (the result is kept)."
        )
        return
    last = int(dataset.n_test) - 1
    index = st.number_input(
        "Test example",
        min_value=0,
        max_value=last,
        value=min(max(int(default_index), 0), last),
        step=1,
        key="explain_index",
    )
    result = local_explanation(run_id, int(index), float(threshold), int(samples), 0)
    features, level = result["features"], float(result["level"])
    shape = tuple(dataset.input_shape)
    if len(shape) == 2:
        st.plotly_chart(
            sparsity.explanation_heatmap(features, shape, level, title=result["output_name"]), key="explanation_heatmap"
        )
    else:
        d = len(features)
        top = (
            d
            if d <= 2
            else st.number_input(
                "Features shown (top k by |median|)",
                min_value=1,
                max_value=d,
                value=min(d, DEFAULT_TOP_K),
                step=1,
                key="explain_top_k",
            )
        )
        names = getattr(dataset, "feature_names", None)
        st.plotly_chart(
            sparsity.explanation_bars(features, int(top), names, level, title=result["output_name"]),
            key="explanation_bars",
        )
    value, intercept = result["value"], result["intercept"]
    off = sum(not f["active"] for f in features)
    st.caption(
        f"Test example {int(index)}: {result['output_name']} = {value['median']:.4g} (median; {level:.0%} "
        f"interval [{value['lower']:.4g}, {value['upper']:.4g}]), local intercept {intercept['median']:.4g}; "
        f"R = {result['samples']} draws at threshold {result['threshold']:.4g}."
        + (f" {off} inputs have no active path: their contribution is 0 in every draw." if off else "")
    )
