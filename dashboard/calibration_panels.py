"""The calibration and decision panels of the Uncertainty and Compare pages, and the gap lesson's
side-by-side bands.

Derived arrays and chart specs are cached per run (cache.per_run, keyed by run id and generation,
on top of the page's cached test-set prediction), so a rerun with the same settings only looks
them up. Numbers come from core through dashboard.backend; charts from dashboard.calibration_charts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import altair_spec, backend, cache, state
from dashboard import calibration_charts as charts
from dashboard.charts import family_colour
from dashboard.ui import guard

DOUBT_LEVEL_RANGE = (0.5, 0.999)  # the doubt slider's ends: below 1/2 every binary input is decided
DEFAULT_LEVELS = (0.5, 0.9, 0.95)
COMPARE_SAMPLES = 10  # the Compare page's bma R, as its ECDFs use


def _y(dataset: Any) -> np.ndarray:
    return dataset.y_test if dataset.task == "classification" else dataset.unstandardise(dataset.y_test)


# --- cached derived arrays and specs -------------------------------------------------------------------


@cache.per_run(canonical_prediction=True, max_entries=256, ttl=cache.DERIVED_TTL, show_spinner=False)
def classifier_calibration(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    arrays = cache.test_prediction(run_id, mode, samples, threshold, seed, weights)
    return backend.classifier_calibration(arrays, _y(cache.cached_run(run_id).dataset()))


@cache.per_run(canonical_prediction=True, max_entries=256, ttl=cache.DERIVED_TTL, show_spinner=False)
def reliability_chart(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    table = classifier_calibration(run_id, mode, samples, threshold, seed, weights)["reliability"]
    return cache.shipped(
        altair_spec.spec(
            charts.reliability_diagram(
                table["edges"],
                table["count"],
                table["confidence"],
                table["accuracy"],
                table["ece"],
                colour=family_colour(cache.family(run_id)),
            )
        )
    )


@cache.per_run(canonical_prediction=True, max_entries=512, ttl=cache.DERIVED_TTL, show_spinner=False)
def doubt_point(
    run_id: str, level: float, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    arrays = cache.test_prediction(run_id, mode, samples, threshold, seed, weights)
    return backend.doubt_point(arrays["probs"], _y(cache.cached_run(run_id).dataset()), level)


@cache.per_run(canonical_prediction=True, max_entries=512, ttl=cache.DERIVED_TTL, show_spinner=False)
def risk_coverage_chart(
    run_id: str, level: float, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    curve = classifier_calibration(run_id, mode, samples, threshold, seed, weights)["risk_coverage"]
    points = {
        f"{backend.DOUBT_LEVEL:g} (the cards' level)": doubt_point(
            run_id, backend.DOUBT_LEVEL, mode, samples, threshold, seed, weights
        )
    }
    if abs(level - backend.DOUBT_LEVEL) > 1e-12:
        points[f"{level:g} (slider)"] = doubt_point(run_id, level, mode, samples, threshold, seed, weights)
    return cache.shipped(
        altair_spec.spec(
            charts.risk_coverage_curve(
                curve["coverage"],
                curve["risk"],
                curve["aurc"],
                points,
                threshold=curve["threshold"],
                colour=family_colour(cache.family(run_id)),
            )
        )
    )


@cache.per_run(
    canonical_prediction=True, max_entries=64, ttl=cache.DERIVED_TTL, show_spinner="Splitting the OOD entropy ..."
)
def ood_entropy_split(
    run_id: str,
    name: str,
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    n: int,
    weights: str | None = None,
) -> dict[str, float]:
    """The entropy split's means on OOD set `name` (the same inputs and draws as cache.ood_entropy)."""
    run = cache.cached_run(run_id)
    x = backend.load_ood_inputs(run.dataset(), name, n=n, seed=seed)
    prediction = backend.predict(run, x, mode, samples, threshold, seed, weights, inputs=("ood", name, n, seed))
    return backend.entropy_split_means(np.asarray(prediction.probs_per_draw))


@cache.per_run(canonical_prediction=True, max_entries=256, ttl=cache.DERIVED_TTL, show_spinner=False)
def regression_calibration(
    run_id: str,
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    levels: tuple[float, ...] = backend.INTERVAL_LEVELS,
    weights: str | None = None,
) -> dict[str, Any]:
    arrays = cache.test_prediction(run_id, mode, samples, threshold, seed, weights)
    return backend.regression_calibration(arrays, _y(cache.cached_run(run_id).dataset()), levels)


@cache.per_run(max_entries=64, ttl=cache.DERIVED_TTL, show_spinner="Predicting the bands on the grid ...")
def gap_band(run_id: str) -> dict[str, Any]:
    """bma with GAP_DRAWS draws on the plotting grid: mean, epistemic sd and its gap ratio."""
    arrays = cache.grid_prediction(run_id, "bma", backend.GAP_DRAWS, None, 0)
    dataset = cache.cached_run(run_id).dataset()
    sd = np.sqrt(arrays["epistemic_variance"])
    return {"mean": arrays["mean"], "sd": sd, "gap_ratio": backend.gap_ratio(dataset.x_grid, dataset.x_train, sd)}


@cache.per_run(max_entries=16, ttl=60, show_spinner="Reading the NUTS reference ...")
def reference_band(run_id: str) -> dict[str, Any] | None:
    run = cache.cached_run(run_id)
    return backend.reference_function_band(run, run.dataset().x_grid)


# --- the Uncertainty page --------------------------------------------------------------------------------


def doubt_slider(key: str = "doubt_level") -> float:
    low, high = DOUBT_LEVEL_RANGE
    return float(
        st.slider(
            "Doubt level (decide where the max class probability exceeds it)",
            low,
            high,
            value=backend.DOUBT_LEVEL,
            step=0.001,
            format="%.3f",
            key=key,
            help=f"{backend.DOUBT_LEVEL:g} is the doubt level of the metric cards (marked on the curve)",
        )
    )


def classifier_section(run_id: str, dataset: Any, mode: str, samples: int, threshold: float | None) -> None:
    """Reliability diagram and risk-coverage curve with the doubt slider: first on the page, so the
    diagram is drawn before the per-input and OOD predictions run."""
    st.subheader("Calibration and decisions")
    level = doubt_slider()
    numbers = classifier_calibration(run_id, mode, samples, threshold, 0)
    left, right = st.columns(2)
    with left:
        st.vega_lite_chart(reliability_chart(run_id, mode, samples, threshold, 0), key="reliability_chart")
    with right:
        st.vega_lite_chart(risk_coverage_chart(run_id, level, mode, samples, threshold, 0), key="risk_coverage_chart")
    table, curve = numbers["reliability"], numbers["risk_coverage"]
    point = doubt_point(run_id, level, mode, samples, threshold, 0)
    decided = (
        "nothing decided"
        if point["accuracy"] is None
        else f"accuracy {point['accuracy']:.4f} on the decided, risk {point['risk']:.4f}"
    )
    st.caption(
        f"ECE {table['ece']:.4f} over {len(table['count'])} equal-width confidence bins (bars: accuracy "
        f"per bin, diamonds: mean confidence; hover for counts). AURC {curve['aurc']:.4f} (the best "
        f"ranking of the same errors: {curve['optimal_aurc']:.4f}, excess {curve['excess_aurc']:.4f}). "
        f"At doubt level {level:g}: {point['count']} of {dataset.n_test} inputs decided "
        f"(coverage {point['coverage']:.3f}), {decided}."
    )


def entropy_split_section(
    run_id: str, dataset: Any, mode: str, samples: int, threshold: float | None, ood_sets: Sequence[str], n_ood: int
) -> None:
    """Mean entropy split in-domain and on the OOD sets the page's OOD section uses."""
    st.subheader("Entropy split: aleatoric and epistemic")
    numbers = classifier_calibration(run_id, mode, samples, threshold, 0)
    parts = {f"{dataset.name} (in-domain)": numbers["entropy_split"]}
    for name in ood_sets:
        with guard(f"OOD set {name}"):
            parts[name] = ood_entropy_split(run_id, name, mode, samples, threshold, 0, n_ood)
    max_entropy = float(np.log(dataset.n_classes)) if dataset.n_classes else None
    st.vega_lite_chart(altair_spec.spec(charts.entropy_split_bars(parts, max_entropy)), key="entropy_split_chart")
    st.dataframe(
        pd.DataFrame(
            [
                {"set": name, "total": p["total"], "aleatoric": p["aleatoric"], "epistemic": p["epistemic"]}
                for name, p in parts.items()
            ]
        ).style.format({"total": "{:.4f}", "aleatoric": "{:.4f}", "epistemic": "{:.4f}"}),
        hide_index=True,
        key="entropy_split_table",
    )
    st.caption(
        "Aleatoric: the mean entropy of each draw's probabilities (noise every network sees). Epistemic: "
        "the mutual information between label and draw (the networks disagreeing), which should grow "
        "out of domain. With R = 1 or a mode that draws nothing it is 0."
    )


def level_select(key: str = "interval_levels") -> tuple[float, ...]:
    chosen = st.multiselect(
        "Interval levels",
        list(backend.INTERVAL_LEVELS),
        default=list(DEFAULT_LEVELS),
        key=key,
        format_func=lambda v: f"{v:g}",
    )
    if not chosen:
        st.info("Choose one or more interval levels: the table below lists none.")
    return tuple(sorted(float(v) for v in chosen))


def regression_section(run_id: str, mode: str, samples: int, threshold: float | None) -> None:
    st.subheader("Calibration")
    levels = level_select()
    numbers = regression_calibration(run_id, mode, samples, threshold, 0, levels)
    colour = family_colour(cache.family(run_id))
    left, right = st.columns(2)
    curve, pit = numbers["curve"], numbers["pit"]
    with left:
        st.vega_lite_chart(
            altair_spec.spec(
                charts.calibration_curve_chart(curve["nominal"], curve["observed"], curve["mean_abs_gap"], colour)
            ),
            key="calibration_curve_chart",
        )
    with right:
        st.vega_lite_chart(
            altair_spec.spec(charts.pit_histogram_chart(pit["edges"], pit["density"], pit["ks_statistic"], colour)),
            key="pit_histogram_chart",
        )
    st.dataframe(
        charts.interval_table(numbers["intervals"]).style.format(
            {"level": "{:g}", "observed coverage": "{:.3f}", "coverage - level": "{:+.3f}", "mean width": "{:.4g}"}
        ),
        hide_index=True,
        key="interval_table",
    )
    st.caption(
        "Test set, the predictive's Gaussian mixture over the R draws (original units). Coverage is "
        "exact (from the mixture's CDF); widths are between its quantiles. Below the diagonal or a "
        "U-shaped PIT: intervals too narrow; above or a hump: too wide."
    )


def gap_lesson(run: Any, dataset: Any) -> None:
    """Mean-field, the non-factorised posterior and NUTS side by side on a 1-D toy, gap ratios printed."""
    st.subheader("Does the band widen in the gaps?")
    run_id = run.run_id
    rows = cache.cached_run_list()
    is_nf = run.config.method == backend.NON_FACTORISED_FAMILY
    partner = backend.partner_run_id(rows, run, non_factorised=not is_nf)
    ids = [partner, run_id] if is_nf and partner else [run_id] + ([partner] if partner else [])
    y_train = dataset.unstandardise(dataset.y_train)
    panels = []
    for other in ids:
        family = cache.family(other)
        band = gap_band(other)
        kind = "non-factorised" if family == backend.NON_FACTORISED_FAMILY else "mean-field"
        hidden = cache.cached_run(other).config.hidden
        panels.append(
            {
                "name": f"{family} ({kind})",
                "mean": band["mean"],
                "low": band["mean"] - 1.96 * band["sd"],
                "high": band["mean"] + 1.96 * band["sd"],
                "gap_ratio": band["gap_ratio"],
                "colour": family_colour(family),
                "caption": f"{backend.architecture(hidden)}, run {other[:8]}",
            }
        )
    reference = None
    with guard("Reading the NUTS reference"):
        reference = reference_band(run_id)
    if reference is not None:
        caption = f"{reference['architecture']}, {reference['draws']} draws"
        if list(reference["hidden"]) != list(run.config.hidden):
            caption += f" (the run is {backend.architecture(run.config.hidden)})"
        panels.append(
            {
                "name": "NUTS" + (" (unconverged)" if reference["warning"] else " reference"),
                "mean": reference["mean"],
                "low": reference["mean"] - 1.96 * reference["sd"],
                "high": reference["mean"] + 1.96 * reference["sd"],
                "gap_ratio": reference["gap_ratio"],
                "colour": charts.UNTRUSTED_REFERENCE_COLOUR if reference["warning"] else charts.REFERENCE_COLOUR,
                "warning": reference["warning"],
                "caption": caption,
            }
        )
    st.vega_lite_chart(
        altair_spec.spec(charts.gap_panels(dataset.x_grid, panels, dataset.x_train, y_train)), key="gap_panels_chart"
    )
    st.dataframe(
        pd.DataFrame(
            [{"posterior": p["name"], "net": p["caption"].split(",")[0], "gap ratio": p["gap_ratio"]} for p in panels]
        ).style.format({"gap ratio": "{:.2f}"}),
        hide_index=True,
        key="gap_ratio_table",
    )
    st.caption(
        f"Bands: mean +/- 1.96 sd of the function over the posterior (bma, R = {backend.GAP_DRAWS}; NUTS: its "
        "draws), noise left out. Gap ratio: mean band width inside the gaps over the width near the data "
        "(above 1: the band widens where there is no data). Mean-field Gaussian posteriors cannot widen "
        "it much (Foong et al. 2019); the linearised Laplace posterior with the full GGN can."
    )
    if reference is None:
        st.caption(
            f"No NUTS reference is cached for {dataset.name}: `python -m core reference {dataset.name}` adds it."
        )
    elif reference["warning"]:
        st.warning(
            f"NUTS reference {reference['reference_id']}: {reference['warning']} (needs R-hat <= "
            f"{backend.TRUST_RHAT} and ESS >= {backend.TRUST_ESS:.0f}); read its band as one more "
            "approximation."
        )
    if not is_nf and partner is None:
        offer_non_factorised(run)


def offer_non_factorised(run: Any) -> None:
    config = backend.non_factorised_config(run)
    st.caption(
        f"No `{backend.NON_FACTORISED_FAMILY}` run of {run.config.dataset} is cached: train one "
        f"(seed {run.config.seed}, the family's default {backend.architecture(config.hidden)} net) to see the "
        "non-factorised posterior here."
    )
    if st.button(f"Train {backend.NON_FACTORISED_FAMILY} on {run.config.dataset}", key="train_non_factorised"):
        with guard("Cannot start training"):
            request = cache.training_queue().submit(
                json.dumps(config.to_dict(), sort_keys=True),  # the Train page's key: one job per config
                config,
                backend.total_epochs(config),
                label=config.label(),
                owner=state.session_owner(),
                who=state.session_label(),
                presence=state.queue_presence(),
            )
            state.set_worker(request)
            st.success(f"Queued {config.label()}: the Train page shows its progress; come back when it is done.")


# --- the Compare page ------------------------------------------------------------------------------------


def compare_mode() -> str:
    return st.selectbox(
        "Prediction mode",
        list(backend.PREDICTION_MODES),
        key="compare_calibration_mode",
        format_func=lambda m: f"{m} ({backend.MODE_HELP[m].split(':')[0]})",
        help="every run predicts in this mode; modes with a cut use each family's default threshold",
    )


def run_setting(run_id: str, mode: str) -> tuple[int, float | None]:
    """(R, threshold) of `mode` for one run on the Compare page: R = COMPARE_SAMPLES where the mode
    draws, the family's default cut where it cuts (as the table of modes does)."""
    spec = cache.threshold_range(run_id)
    samples = COMPARE_SAMPLES if backend.mode_draws_samples(mode) else 1
    return samples, backend.mode_threshold(mode, spec.default, spec.default)


def compare_section(
    shown: Sequence[tuple[str, str, str]], task: str, ood: str | None = None, n_ood: int = 1000
) -> None:
    """Calibration of several runs in one mode (R = COMPARE_SAMPLES, seed 0), overlaid in family colours;
    for classifiers also the epistemic entropy on OOD set `ood` (n_ood inputs, as the page's ECDFs)."""
    st.subheader("Calibration")
    mode = compare_mode()
    if task == "classification":
        runs, rows = [], []
        for run_id, label, family in shown:
            numbers = classifier_calibration(run_id, mode, *run_setting(run_id, mode), 0)
            table, curve, split = numbers["reliability"], numbers["risk_coverage"], numbers["entropy_split"]
            runs.append(
                {
                    "label": label,
                    "family": family,
                    **{k: table[k] for k in ("edges", "count", "confidence", "accuracy", "ece")},
                    "coverage": curve["coverage"],
                    "risk": curve["risk"],
                    "aurc": curve["aurc"],
                }
            )
            rows.append(
                {
                    "run": label,
                    "ECE": table["ece"],
                    "AURC": curve["aurc"],
                    "excess AURC": curve["excess_aurc"],
                    "aleatoric": split["aleatoric"],
                    "epistemic": split["epistemic"],
                }
            )
            if ood is not None:
                out = ood_entropy_split(run_id, ood, mode, *run_setting(run_id, mode), 0, n_ood)
                rows[-1].update({f"aleatoric ({ood})": out["aleatoric"], f"epistemic ({ood})": out["epistemic"]})
        left, right = st.columns(2)
        with left:
            st.vega_lite_chart(altair_spec.spec(charts.compare_reliability(runs)), key="compare_reliability")
        with right:
            st.vega_lite_chart(altair_spec.spec(charts.compare_risk_coverage(runs)), key="compare_risk_coverage")
        st.dataframe(
            pd.DataFrame(rows).style.format({c: "{:.4f}" for c in rows[0] if c != "run"}),
            hide_index=True,
            key="compare_calibration_table",
        )
        st.caption(
            f"{mode}, R = {COMPARE_SAMPLES} where it draws, test set. ECE over {backend.CALIBRATION_BINS} "
            "bins; AURC: area under "
            "risk against coverage (excess: above the best ranking of the same errors); aleatoric and "
            "epistemic: mean entropy split (nats), on the test set and on the OOD set chosen above."
        )
    else:
        levels = level_select("compare_interval_levels")
        runs, rows = [], []
        for run_id, label, family in shown:
            numbers = regression_calibration(run_id, mode, *run_setting(run_id, mode), 0, levels)
            curve = numbers["curve"]
            runs.append({"label": label, "family": family, "nominal": curve["nominal"], "observed": curve["observed"]})
            row = {"run": label, "calibration gap": curve["mean_abs_gap"], "PIT KS": numbers["pit"]["ks_statistic"]}
            for level, values in numbers["intervals"].items():
                row[f"coverage {level}"], row[f"width {level}"] = values["coverage"], values["width"]
            rows.append(row)
        st.vega_lite_chart(altair_spec.spec(charts.compare_calibration_curves(runs)), key="compare_calibration_curves")
        st.dataframe(
            pd.DataFrame(rows).style.format({c: "{:.4g}" for c in rows[0] if c != "run"}),
            hide_index=True,
            key="compare_calibration_table",
        )
        st.caption(
            f"{mode}, R = {COMPARE_SAMPLES} where it draws, test set, original units. "
            "Calibration gap: mean |observed - "
            "nominal| coverage over 19 levels; PIT KS: distance of the PIT values from uniform."
        )
