"""The numbers behind the calibration and decision views (the Uncertainty and Compare pages): they
pick the arrays a cached test-set prediction holds and call this package's metrics, returning plain
numpy / dicts for the app's caches (regression arrays in original units)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.predict.metrics.classification import DOUBT_LEVEL

CALIBRATION_BINS = 15  # the reliability diagram's bins: `evaluate`'s default ece_bins, so the ECEs agree
INTERVAL_LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99)  # central intervals offered on the pages
GAP_DRAWS = 100  # draws of the side-by-side bands (benchmarks/toy_regression.py and laplace_gaps.py use 100)


def classifier_calibration(
    arrays: dict[str, np.ndarray], y: np.ndarray, bins: int = CALIBRATION_BINS
) -> dict[str, Any]:
    """The reliability diagram's bins and ECE, the risk-coverage curve with its AURC, and the
    per-input entropy split's means, of a test-set prediction's arrays."""
    from core.predict.metrics import classification

    table = classification.reliability(arrays["probs"], y, bins)
    curve = classification.risk_coverage(arrays["probs"], y, DOUBT_LEVEL)
    return {
        "reliability": table,
        "risk_coverage": curve,
        "entropy_split": entropy_split_means(arrays["probs_per_draw"]),
    }


def entropy_split_means(probs_per_draw: np.ndarray) -> dict[str, float]:
    """Means over inputs of core's entropy split (total, aleatoric, epistemic; nats)."""
    from core.predict.metrics import classification

    return {part: float(values.mean()) for part, values in classification.entropy_split(probs_per_draw).items()}


def doubt_point(probs: np.ndarray, y: np.ndarray, level: float) -> dict[str, Any]:
    """The decision at one doubt level: decide where the max probability exceeds it (core's rule)."""
    from core.predict.metrics import classification

    point = classification.doubt_decision(probs, y, level)
    return {
        "level": float(level),
        "coverage": point["fraction"],
        "count": point["count"],
        "accuracy": point["accuracy"],
        "risk": None if point["accuracy"] is None else 1.0 - point["accuracy"],
    }


def regression_calibration(
    arrays: dict[str, np.ndarray], y: np.ndarray, levels: Sequence[float] = INTERVAL_LEVELS
) -> dict[str, Any]:
    """The calibration curve, the PIT histogram and interval coverage / mean width at `levels` of a
    prediction's Gaussian mixture over draws (arrays and y in original units)."""
    from core.predict.metrics import regression

    means, stds = arrays["mean_per_draw"], arrays["std_per_draw"]
    pit = regression.pit_values(means, stds, y)
    return {
        "curve": regression.calibration_curve_of_pit(pit),
        "pit": regression.pit_histogram(pit),
        "intervals": regression.interval_metrics_of(
            pit, lambda q: regression.mixture_quantiles(means, stds, q), levels
        ),
    }


def gap_ratio(x_grid: np.ndarray, x_train: np.ndarray, band: np.ndarray) -> float:
    """Band width inside the gaps over width near the data (core's band_width_ratios)."""
    from core.predict.metrics.regression import band_width_ratios

    return band_width_ratios(x_grid, x_train, band)["gap_ratio"]
