"""Predictive uncertainty: regression bands, per-image class probabilities, OOD entropy ECDFs, and the
calibration and decision views (dashboard/calibration_panels.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import altair_spec, backend, cache, calibration_charts, explain, links, sparsity_panels, state
from dashboard import calibration_panels as calibration
from dashboard import charts as figures
from dashboard.backend import plain
from dashboard.ui import guard

N_IMAGES = 6
OOD_INPUTS = 1000
SURFACE_SIDE = 60  # a 2-D classifier's decision surface: cache.surface's default grid

run = state.run_page("Uncertainty")
run_id = run.run_id
dataset = run.dataset()
st.markdown(explain.PAGE_INTROS["uncertainty"])

settings_read = False
with guard("Reading the settings"):
    spec = cache.threshold_range(run_id)
    left, middle, right = st.columns([1, 1, 2])
    with left:
        mode = state.prediction_mode_select(run_id)
    with middle:
        samples = state.samples_slider(run_id, disabled=not backend.mode_draws_samples(mode))
    with right:
        reason = state.threshold_off_reason(mode, spec)
        threshold = state.threshold_slider(run_id, spec, disabled_reason=reason)
    effective = backend.mode_threshold(mode, threshold, spec.default)
    draws = samples if backend.mode_draws_samples(mode) else 1  # mean and mpm-mean draw nothing
    # The largest input set this page predicts with R draws (test set, plotting grid, OOD sets) is
    # costed first: R is lowered to what fits, and the page says so.
    largest_inputs = max(
        int(dataset.n_test),
        OOD_INPUTS,
        0 if dataset.x_grid is None else len(dataset.x_grid),
        SURFACE_SIDE**2 if dataset.in_features == 2 else 0,
    )
    draws, lowered = backend.samples_allowed(run, largest_inputs, draws)
    if lowered:
        (st.warning if draws >= 1 else st.error)(lowered)
        if draws < 1:
            st.stop()
        samples = min(samples, draws)
    st.caption(backend.MODE_HELP[mode] + (f" ({reason} The slider is not used.)" if reason else ""))
    settings_read = True
if not settings_read:  # the error is shown above; the sections below need every setting
    st.stop()


@st.cache_data(max_entries=16, show_spinner="Collapsed predictive on the grid ...")
def collapsed_grid(run_id: str, variant: str, samples: int, seed: int) -> dict[str, np.ndarray]:
    run = cache.cached_run(run_id)
    return backend.collapsed_bands(run, run.dataset().x_grid, variant, samples, seed)


@st.cache_data(max_entries=8, show_spinner="Reading the NUTS reference ...", ttl=60)
def reference_grid(run_id: str) -> dict | None:
    run = cache.cached_run(run_id)
    return backend.reference_bands(run, run.dataset().x_grid)


def regression_section() -> None:
    if dataset.x_grid is None or dataset.in_features != 1:
        st.info(
            f"{dataset.name} has {dataset.in_features} inputs: bands over x need a 1-D toy set "
            "(toy-sine-gaps, toy-cubic, toy-hetero)."
        )
        return
    predictive = st.radio(
        "Predictive",
        list(backend.REGRESSION_PREDICTIVES),
        horizontal=True,
        key="predictive",
        format_func=lambda p: p if p != "mode" else f"mode ({mode})",
    )
    st.caption(backend.REGRESSION_PREDICTIVES[predictive])
    reference = None
    with guard("Reading the NUTS reference"):
        reference = reference_grid(run_id)
    true_mean = None if dataset.y_grid_mean is None else dataset.unstandardise(dataset.y_grid_mean)
    y_train = dataset.unstandardise(dataset.y_train)
    # A reference that fails the diagnostics says so on the chart (calibration_charts.with_warning).
    untrusted = None if reference is None else backend.reference_warning(reference["diagnostics"])
    on_chart = None if untrusted is None else f"NUTS reference {untrusted}"
    if predictive == "mode":
        arrays = cache.grid_prediction(run_id, mode, draws, effective, 0)
        st.vega_lite_chart(
            altair_spec.spec(
                calibration_charts.with_warning(
                    figures.regression_bands(
                        dataset.x_grid,
                        arrays["mean"],
                        np.sqrt(arrays["epistemic_variance"]),
                        np.sqrt(arrays["total_variance"]),
                        dataset.x_train,
                        y_train,
                        true_mean,
                        reference=reference,
                        colour=figures.family_colour(run.config.method),
                    ),
                    on_chart,
                )
            )
        )
        st.caption(
            "Epistemic: variance of the R draws' means; total adds the mean aleatoric variance. "
            "With R = 1 or a mean mode the epistemic band is empty."
        )
    else:
        variant = "box" if predictive == "collapsed-box" else "gaussian"
        arrays = collapsed_grid(run_id, variant, samples, 0)
        st.vega_lite_chart(
            altair_spec.spec(
                calibration_charts.with_warning(
                    figures.quantile_bands(
                        dataset.x_grid,
                        arrays["mean"],
                        arrays["low"],
                        arrays["high"],
                        dataset.x_train,
                        y_train,
                        true_mean,
                        reference=reference,
                        title=f"collapsed ({variant}) predictive: mean and 5-95% band, R = {samples}",
                        colour=figures.family_colour(run.config.method),
                    ),
                    on_chart,
                )
            )
        )
        st.caption("The R bodies are those of bma with the same seed; the threshold is not used.")
    if reference is None:
        st.caption(
            f"No NUTS reference is cached for this dataset: `python -m core reference {dataset.name}` "
            "(needs requirements-reference.txt) adds one to this chart."
        )
    else:
        d = reference["diagnostics"]
        net = backend.architecture(reference["hidden"], dataset.in_features)
        if list(reference["hidden"]) != list(run.config.hidden):
            net += f", not the run's {backend.architecture(run.config.hidden, dataset.in_features)}"
        st.caption(
            f"NUTS reference {reference['reference_id']} ({net}, "
            f"{reference['draws']} draws; function R-hat max {d.get('function_rhat_max', float('nan')):.3f}, "
            f"ESS min {d.get('function_ess_min', float('nan')):.0f})."
        )
        if untrusted:
            st.warning(
                plain(
                    f"NUTS reference {untrusted}: its band is one more approximation (trusted at R-hat <= "
                    f"{backend.TRUST_RHAT} and ESS >= {backend.TRUST_ESS:.0f})."
                )
            )
        for warning in d.get("warnings", []):
            st.warning(plain(f"NUTS reference: {warning}"))


def image_of(x: np.ndarray) -> np.ndarray | None:
    if len(dataset.input_shape) != 2:
        return None
    image = x.reshape(dataset.input_shape).astype(np.float64)
    span = image.max() - image.min()
    return (image - image.min()) / span if span > 0 else np.zeros_like(image)


def per_image_section() -> None:
    st.subheader("Class probabilities per input")
    start = st.number_input(
        "First test input",
        min_value=0,
        max_value=max(0, dataset.n_test - N_IMAGES),
        value=0,
        step=N_IMAGES,
        key="first_image",
    )
    indices = tuple(range(int(start), min(int(start) + N_IMAGES, dataset.n_test)))
    # The charts come built from the cache (shared by every session at this setting).
    charts = cache.class_probability_charts(run_id, indices, mode, draws, effective, 0)
    columns = st.columns(3)
    for position, index in enumerate(indices):
        with columns[position % 3]:
            image = image_of(dataset.x_test[index])
            if image is not None:
                st.image(image, width=84, clamp=True)
            else:
                st.caption("x = " + ", ".join(f"{v:.2f}" for v in dataset.x_test[index]))
            st.vega_lite_chart(charts[position])
    st.caption(
        "Bars: model-averaged probability; ticks: the R individual draws; "
        f"red line: the {backend.DOUBT_LEVEL:g} doubt level."
    )


def ood_section() -> None:
    st.subheader("Out-of-distribution inputs")
    choices = backend.ood_set_names(dataset)
    linked = links.linked_value(links.OOD_LINK_KEY, run_id)  # checked against this run's sets
    if linked is not None:
        st.session_state["ood_sets"] = linked
    chosen = st.multiselect("OOD sets", choices, default=choices, key="ood_sets")
    state.publish("ood", list(chosen))
    rows, drawn = [], []
    for name in chosen:
        with guard(f"OOD set {name}"):
            summary = cache.ood_summary(run_id, name, mode, draws, effective, 0, OOD_INPUTS)
            drawn.append(name)
            rows.append(
                {
                    "OOD set": name,
                    "inputs": summary["inputs"],
                    "mean entropy": summary["mean_entropy"],
                    "AUROC (entropy)": summary["auroc"],
                }
            )
    st.vega_lite_chart(cache.entropy_ecdf_chart(run_id, tuple(drawn), mode, draws, effective, 0, OOD_INPUTS))
    if rows:
        st.dataframe(
            pd.DataFrame(rows).style.format({"mean entropy": "{:.3f}", "AUROC (entropy)": "{:.3f}"}), hide_index=True
        )
        st.caption(
            "AUROC: probability that an OOD input has higher predictive entropy than an in-domain one "
            "(0.5 = no separation)."
        )


def surface_section() -> None:
    """2-D inputs: the decision surface over the input plane and its uncertainty."""
    st.subheader("Decision surface")
    arrays = cache.surface(run_id, mode, draws, effective, 0)
    names = list(dataset.class_names) if dataset.class_names else None
    st.vega_lite_chart(
        altair_spec.spec(
            figures.decision_surface(
                arrays["xs"], arrays["ys"], arrays, dataset.x_train, dataset.y_train, class_names=names, samples=draws
            )
        ),
        width="content",
    )
    st.caption(
        "Left: the predicted class, faded where the averaged top probability is low. Middle: predictive "
        "entropy of the averaged probabilities. Right: the spread (sd over the R draws) of the winning "
        "class's probability, the part of the uncertainty that comes from the posterior. Dots: training "
        "points. Look for uncertainty growing away from the data and along the boundary."
    )


if dataset.task == "regression":
    with guard("Predicting the bands"):
        regression_section()
    with guard("Calibration"):
        calibration.regression_section(run_id, mode, draws, effective)
    if dataset.x_grid is not None and dataset.in_features == 1:
        with guard("Mean-field, non-factorised and NUTS bands"):
            calibration.gap_lesson(run, dataset)
else:
    with guard("Calibration and decisions"):
        calibration.classifier_section(run_id, dataset, mode, draws, effective)
    if dataset.in_features == 2:
        with guard("Predicting the decision surface"):
            surface_section()
    with guard("Predicting the selected inputs"):
        per_image_section()
    with guard("Predicting the OOD sets"):
        ood_section()
    with guard("Splitting the entropy"):
        calibration.entropy_split_section(
            run_id, dataset, mode, draws, effective, tuple(st.session_state.get("ood_sets") or ()), OOD_INPUTS
        )

with guard("Local explanation"):
    # the example defaults to the first of those shown under "Class probabilities per input"
    sparsity_panels.explanation_section(
        run_id, dataset, threshold, samples, int(st.session_state.get("first_image", 0))
    )
