"""Chart specs cached for every session (the data they draw is dashboard/cache.py's): built once per
setting, with their datasets already in the Arrow form st.vega_lite_chart sends (`shipped`)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import streamlit as st

from dashboard import altair_spec, backend, streamlit_compat
from dashboard.cache import (
    cached_run,
    conditional_mean_weights,
    family,
    masks,
    ood_entropy,
    prior_of_statistic,
    selected_prediction,
    snapshots,
    statistics,
    sweep,
    test_metrics,
    test_prediction,
    threshold_range,
)
from dashboard.caching import DERIVED_TTL, generation, per_run

# --- charts: the Vega-Lite spec, built once per setting -----------------------------------------------
# Building an Altair chart and converting it (with schema validation) cost about half of a
# Pruning page rerun; a class moving sliders over the same positions reuses the specs.
# The specs are kept with their datasets already in the Arrow form st.vega_lite_chart sends
# (`shipped`): Streamlit otherwise converts every dataset's rows (up to 4096 cells of a heatmap)
# to Arrow again on every rerun of every session.


def shipped(spec: dict[str, Any]) -> dict[str, Any]:
    """A Vega-Lite spec whose named datasets are Arrow IPC bytes, as st.vega_lite_chart ships them
    (it passes bytes through and converts anything else on every call). The numbers are the same;
    only their encoding is done once. The datasets are renamed by position (charts.stable_dataset_names),
    so that a chart whose rows change keeps its spec and the browser swaps the data in place."""
    datasets = spec.get("datasets")
    if not datasets:
        return spec
    from dashboard import charts

    spec = charts.stable_dataset_names(spec)
    datasets = spec["datasets"]
    encoded = {
        name: rows if isinstance(rows, bytes) or not isinstance(rows, list) else streamlit_compat.arrow_bytes(rows)
        for name, rows in datasets.items()
    }
    if any(value is None for value in encoded.values()):  # a Streamlit without the converter: as before
        return spec
    spec["datasets"] = encoded
    return spec


@functools.lru_cache(maxsize=4096)
def _rows_as_arrow(rows: tuple[tuple[tuple[str, Any], ...], ...]) -> bytes | None:
    return streamlit_compat.arrow_bytes([dict(row) for row in rows])


SMALL_ROWS = 16  # datasets of at most this many rows are what a setting adds to a cached spec


def with_small_rows_shipped(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with its small datasets of rows (a threshold's rule, the current point: new at every
    threshold, added to a cached spec) in Arrow form, each distinct set of rows encoded once per process:
    st.vega_lite_chart converts rows on every call, through pandas (0.41 ms for the current point; sampled
    in the Pruning page's reruns, two thirds of st.vega_lite_chart's time). The input is not changed."""
    datasets = spec.get("datasets")
    if not datasets:
        return spec
    encoded = dict(datasets)
    for name, rows in datasets.items():
        if isinstance(rows, list) and len(rows) <= SMALL_ROWS and all(isinstance(row, dict) for row in rows):
            try:
                arrow = _rows_as_arrow(tuple(tuple(row.items()) for row in rows))
            except TypeError:  # a value that cannot be a cache key: Streamlit converts it, as before
                continue
            if arrow is not None:
                encoded[name] = arrow
    return {**spec, "datasets": encoded}


@st.cache_data(show_spinner=False)
def family_key_chart() -> dict[str, Any]:
    """The sidebar's key of the family colours, drawn on every script run of every session: built once
    (it cost about 30 ms of CPU per script run when built each time)."""
    from dashboard import charts

    return shipped(altair_spec.spec(charts.family_key()))


# The Inclusion page's playback redrew both charts on every script run (about 0.15 s of CPU a rerun
# for a 784-400-600-10 run: Altair's build and validation); a class looks at the same epochs.
@per_run(max_entries=512, ttl=DERIVED_TTL, show_spinner=False)
def playback_histograms_chart(run_id: str, index: int, labels: tuple[str, ...]) -> dict[str, Any]:
    """The playback's histograms at epoch index + 1 without the threshold's rule (charts.with_threshold_rules
    adds it: the spec is the same at every threshold)."""
    from dashboard import charts

    recorded = snapshots(run_id)
    return altair_spec.spec(
        charts.snapshot_histograms(
            recorded.histogram[index],
            recorded.edges,
            recorded.statistic,
            list(labels),
            threshold=None,
            colour=charts.family_colour(family(run_id)),
            max_count=int(recorded.histogram.max()) if recorded.histogram.size else 1,
            title=f"{recorded.statistic} at epoch {index + 1}",
        )
    )


@per_run(max_entries=512, ttl=DERIVED_TTL, show_spinner=False)
def playback_density_chart(run_id: str, index: int, labels: tuple[str, ...]) -> dict[str, Any]:
    """The playback's density per layer over the epochs, epoch index + 1 marked."""
    from dashboard import charts

    recorded = snapshots(run_id)
    return shipped(
        altair_spec.spec(
            charts.density_over_epochs(
                recorded.density,
                recorded.overall_density,
                list(recorded.phase),
                list(labels),
                index + 1,
                colour=charts.family_colour(family(run_id)),
                threshold=recorded.default_threshold,
            )
        )
    )


# A training's curves were rebuilt on every poll of every page that watches it (the Train page's
# fragment each second, the load test's full reruns): Altair's build and validation, about 0.1 s of CPU,
# and the records change with every epoch, so caching the chart per record count rarely hits. The
# spec is the same for every history but for its two datasets: built once per colour, the records
# are put in by name.
TRAINING_QUANTITIES = ("loss", "density")  # charts.training_curves' panels, left to right


@functools.lru_cache(maxsize=32)
def _training_curves_template(colour: str) -> dict[str, Any]:
    from dashboard import charts

    sample = [{"phase": "train", "loss": 1.0, "density": 1.0}]
    spec = altair_spec.spec(charts.training_curves(sample, colour=colour))
    spec.pop("datasets", None)
    return spec


def training_curves_chart(history: list[dict[str, Any]], method: str | None) -> dict[str, Any]:
    """charts.training_curves(history, colour of `method`) as a Vega-Lite spec: the template's panels
    with this history's rows (Streamlit copies a spec before changing it, so the template is shared)."""
    from dashboard import charts

    template = _training_curves_template(charts.family_colour(method))
    frame = charts.history_frame(history)
    names = [f"training-{quantity}" for quantity in TRAINING_QUANTITIES]
    return {
        **template,
        "hconcat": [{**panel, "data": {"name": name}} for panel, name in zip(template["hconcat"], names)],
        "datasets": {
            name: frame[frame["quantity"] == quantity].to_dict("records")
            for name, quantity in zip(names, TRAINING_QUANTITIES)
        },
    }


@per_run(max_entries=512, ttl=DERIVED_TTL, show_spinner=False)
def density_chart(run_id: str, threshold: float) -> dict[str, Any]:
    """The Pruning page's metric-vs-density curve with the current threshold's point."""
    from dashboard import charts

    curve = sweep(run_id)
    # The marker is read off the sweep (no second prediction of the test set).
    here = backend.curve_point(
        backend.SweepCurve(curve["thresholds"], curve["density"], curve["values"], curve["metric"]), threshold
    )
    return shipped(
        altair_spec.spec(
            charts.metric_vs_density(
                curve["thresholds"],
                curve["density"],
                curve["values"],
                curve["metric"],
                current=here,
                colour=charts.family_colour(family(run_id)),
            )
        )
    )


@per_run(max_entries=64, ttl=DERIVED_TTL, show_spinner=False)
def tuning_chart_base(run_id: str, tolerance: float) -> dict[str, Any]:
    """tuning_chart's spec with its current point at the sweep's first: built once per (run, tolerance)."""
    from dashboard import charts

    curve = sweep(run_id)
    suggested = backend.suggested_threshold(
        curve["thresholds"], curve["density"], curve["values"], curve["metric"], tolerance
    )
    return shipped(
        altair_spec.spec(
            charts.metric_vs_density(
                curve["thresholds"],
                curve["density"],
                curve["values"],
                curve["metric"],
                current=(float(curve["density"][0]), float(curve["values"][0])),
                suggested=suggested,
                selectable=True,
                colour=charts.family_colour(family(run_id)),
                title=f"{curve['metric']} vs density: prune at each threshold, mean weights "
                "(click a point to prune there)",
            )
        )
    )


def tuning_chart(run_id: str, threshold: float, tolerance: float) -> dict[str, Any]:
    """density_chart plus the suggested threshold (a star) and a click selection of a point; a threshold
    move only moves the current point in the (run, tolerance)'s spec (charts.with_current_point), from
    cached parts: not cached itself (a dictionary copy)."""
    from dashboard import charts

    here = test_metrics(run_id, backend.SWEEP_MODE, 1, threshold, 0)
    metric = sweep(run_id)["metric"]
    return with_small_rows_shipped(
        charts.with_current_point(tuning_chart_base(run_id, tolerance), (here["density"], here[metric]))
    )


@per_run(canonical_prediction=True, max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def accuracy_by_samples_chart(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    """Accuracy vs R on the test set for R = 1 .. samples."""
    from dashboard import charts

    arrays = test_prediction(run_id, mode, samples, threshold, seed, weights)
    ladder = backend.accuracy_by_samples(arrays["probs_per_draw"], cached_run(run_id).dataset().y_test, samples)
    return shipped(
        altair_spec.spec(
            charts.metric_vs_samples(
                ladder["samples"], ladder["accuracy"], "accuracy", colour=charts.family_colour(family(run_id))
            )
        )
    )


@per_run(canonical_prediction=True, max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def class_probability_charts(
    run_id: str,
    indices: tuple[int, ...],
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    weights: str | None = None,
) -> list[dict[str, Any]]:
    """The Uncertainty page's class-probability bars of test inputs `indices` (one spec per input;
    six Altair charts built on every rerun were three quarters of the page's cached rerun)."""
    from dashboard import charts

    dataset = cached_run(run_id).dataset()
    arrays = selected_prediction(run_id, indices, mode, samples, threshold, seed, weights)
    names = list(dataset.class_names) if dataset.class_names else None
    specs = []
    for position, index in enumerate(indices):
        probs = arrays["probs_per_draw"][:, position, :]
        label = int(dataset.y_test[index])
        guess = int(probs.mean(axis=0).argmax())
        title = f"#{index}: true {names[label] if names else label}, predicted {names[guess] if names else guess}"
        specs.append(
            shipped(
                altair_spec.spec(
                    charts.class_probability_bars(probs, names, title=title, doubt_level=backend.DOUBT_LEVEL)
                )
            )
        )
    return specs


@per_run(canonical_prediction=True, max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def entropy_ecdf_chart(
    run_id: str,
    ood_sets: tuple[str, ...],
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    n: int,
    weights: str | None = None,
) -> dict[str, Any]:
    """The Uncertainty page's entropy ECDFs: the test set and the OOD sets `ood_sets` (n inputs each)."""
    from dashboard import charts

    dataset = cached_run(run_id).dataset()
    arrays = test_prediction(run_id, mode, samples, threshold, seed, weights)
    entropies = {f"{dataset.name} (in-domain)": backend.predictive_entropy(arrays["probs"])}
    for name in ood_sets:
        entropies[name] = ood_entropy(run_id, name, mode, samples, threshold, seed, n, weights)
    max_entropy = float(np.log(dataset.n_classes)) if dataset.n_classes else None
    return shipped(altair_spec.spec(charts.entropy_ecdf(entropies, max_entropy=max_entropy)))


def compare_curves_chart(runs: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The Compare page's pruning curves of `runs` ((run id, label, family) each) on one chart."""
    return _compare_curves_chart(tuple((run_id, generation(run_id), label, fam) for run_id, label, fam in runs))


@st.cache_data(max_entries=64, ttl=DERIVED_TTL, show_spinner=False)
def _compare_curves_chart(runs: tuple[tuple[str, int, str, str], ...]) -> dict[str, Any]:
    from dashboard import charts

    curves = [{"label": label, "family": fam, **sweep(run_id)} for run_id, _, label, fam in runs]
    return shipped(altair_spec.spec(charts.compare_curves(curves, curves[0]["metric"])))


def compare_ecdf_chart(
    runs: list[tuple[str, str, str]], ood: str | None, samples: int, n: int, max_entropy: float | None
) -> dict[str, Any]:
    """The Compare page's entropy ECDFs (bma, R = samples, seed 0): in-domain, and `ood` when given."""
    return _compare_ecdf_chart(
        tuple((run_id, generation(run_id), label, fam) for run_id, label, fam in runs), ood, samples, n, max_entropy
    )


@st.cache_data(max_entries=64, ttl=DERIVED_TTL, show_spinner=False)
def _compare_ecdf_chart(
    runs: tuple[tuple[str, int, str, str], ...], ood: str | None, samples: int, n: int, max_entropy: float | None
) -> dict[str, Any]:
    from dashboard import charts

    entropies = []
    for run_id, _, label, fam in runs:
        inside = backend.predictive_entropy(test_prediction(run_id, "bma", samples, None, 0)["probs"])
        entropies.append({"label": label, "family": fam, "set": f"{label} in", "domain": "in-domain", "values": inside})
        if ood is not None:
            entropies.append(
                {
                    "label": label,
                    "family": fam,
                    "set": f"{label} out",
                    "domain": "out-of-domain",
                    "values": ood_entropy(run_id, ood, "bma", samples, None, 0, n),
                }
            )
    return shipped(altair_spec.spec(charts.compare_ecdf(entropies, max_entropy)))


@per_run(max_entries=64, ttl=DERIVED_TTL, show_spinner=False)
def histogram_without_threshold(run_id: str, log_counts: bool) -> dict[str, Any]:
    """The Inclusion page's histograms (and the prior beside them) with no threshold rule: the same for
    every threshold, so a threshold step only adds its rule (charts.with_threshold_rules)."""
    from dashboard import charts

    spec = threshold_range(run_id)
    stats = statistics(run_id)
    labels = [charts.layer_label(i, s.shape) for i, s in enumerate(stats)]
    return altair_spec.spec(
        charts.statistic_histogram(
            stats,
            None,
            spec.name,
            log_counts=log_counts,
            labels=labels,
            value_range=(spec.low, spec.high),
            prior=prior_of_statistic(run_id),
            colour=charts.family_colour(family(run_id)),
        )
    )


@per_run(max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def inclusion_charts(run_id: str, threshold: float, log_counts: bool, masked_weights: bool) -> dict[str, Any]:
    """The Inclusion page's charts at `threshold`: the histograms, one mask (or masked mean
    weights) picture per layer, and for image inputs the kept inputs as an image. The matrices are
    pictures (dashboard.raster): a threshold step redraws a few small images, not thousands of marks."""
    import numpy as np

    from dashboard import charts, raster

    stats = statistics(run_id)
    labels = [charts.layer_label(i, s.shape) for i, s in enumerate(stats)]
    layer_masks = masks(run_id, threshold)
    weights = conditional_mean_weights(run_id) if masked_weights else None
    pictures = [
        raster.mask_picture(mask, labels[index])
        if weights is None
        else raster.weight_picture(np.where(mask, weights[index], 0.0), labels[index])
        for index, mask in enumerate(layer_masks)
    ]
    input_shape = tuple(cached_run(run_id).dataset().input_shape)
    return {
        "histogram": with_small_rows_shipped(
            charts.with_threshold_rules(histogram_without_threshold(run_id, log_counts), threshold)
        ),
        "masks": pictures,
        # conv runs: the first layer reads channels, not pixels; no per-pixel picture
        "pixels": raster.kept_per_input_picture(layer_masks[0], input_shape)
        if len(input_shape) == 2 and layer_masks[0].shape[1] - 1 == np.prod(input_shape)
        else None,
    }


@per_run(max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def mask_comparison(run_id: str, threshold: float, second: float | None, draw: int) -> dict[str, Any]:
    """The Inclusion page's masks compared: A = the mask at `threshold`, B = the mask at `second`, or
    (second None) the structure sampled with seed `draw`. One picture per layer and both kept counts;
    built once per setting for every session."""
    from dashboard import charts, raster

    spec = threshold_range(run_id)
    stats = statistics(run_id)
    masks_a = masks(run_id, threshold)
    masks_b = (
        masks(run_id, float(second))
        if second is not None
        else backend.sample_structure(stats, spec.name, seed=int(draw))
    )
    if masks_b is None:
        raise ValueError(f"mask_comparison: {spec.name} is not an inclusion probability; give a second threshold")
    labels = [charts.layer_label(i, s.shape) for i, s in enumerate(stats)]
    return {
        "charts": [
            raster.mask_difference_picture(a, b, labels[index]) for index, (a, b) in enumerate(zip(masks_a, masks_b))
        ],
        "kept_a": sum(int(np.sum(m)) for m in masks_a),
        "kept_b": sum(int(np.sum(m)) for m in masks_b),
    }


@per_run(max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def receptive_fields_chart(run_id: str, threshold: float, units: tuple[int, ...]) -> dict[str, Any]:
    """The Inclusion page's receptive fields of first-layer `units` at `threshold` (a Vega-Lite spec)."""
    from dashboard import raster

    weights = conditional_mean_weights(run_id)
    first = masks(run_id, threshold)[0]
    input_shape = tuple(cached_run(run_id).dataset().input_shape)
    return raster.receptive_field_pictures(weights[0], first, list(units), input_shape)
