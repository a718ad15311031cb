"""Choosing a threshold of the native statistic: the slider's range, the keep masks of precomputed
statistics, a point read off a sweep, the sparsest point near the best metric, and what a sampled
structure looks like (the expected density, one structure drawn).

Pure numpy on arrays the caller already has (statistics as returned by `native_statistics()`, a
sweep's thresholds, densities and values): nothing here predicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from core.models.base import Keep, StatisticSpec

# The slider's range is the family's StatisticSpec with finite ends (name, keep, default, low, high,
# keep_above, clip): one type for a statistic and its range.
ThresholdRange = StatisticSpec


def threshold_range(spec: StatisticSpec, statistics: Sequence[np.ndarray]) -> ThresholdRange:
    """The spec with an infinite end replaced by (a little above) the largest observed statistic."""
    finite = [s[np.isfinite(s)] for s in (np.asarray(x, dtype=np.float64).ravel() for x in statistics)]
    values = np.concatenate(finite) if finite else np.empty(0)
    observed_high = float(values.max()) if values.size else 1.0
    observed_low = float(values.min()) if values.size else 0.0
    low = float(spec.low) if math.isfinite(spec.low) else observed_low
    high = float(spec.high) if math.isfinite(spec.high) else max(observed_high, low + 1e-6)
    # The family's default cut is always on the slider (bnn's 0.83 lies above a short training's
    # largest signal-to-noise ratio), and so is "keep nothing" (a little headroom).
    default = float(spec.default_threshold)
    if math.isfinite(default):
        low = min(low, default)
        if not math.isfinite(spec.high):
            high = max(high, default)
    if not math.isfinite(spec.high):
        high = _round_up(high * 1.05)
    default = float(min(high, max(low, default)))
    return StatisticSpec(str(spec.name), Keep(spec.keep), default, low, high)


def _round_up(value: float) -> float:
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return math.ceil(value / scale * 10) / 10 * scale


def masks_at(statistics: Sequence[np.ndarray], threshold: float, keep_above: bool) -> list[np.ndarray]:
    """Keep masks from precomputed statistics, by StatisticSpec.keep_mask."""
    rule = StatisticSpec("statistic", Keep.ABOVE if keep_above else Keep.BELOW, threshold, -math.inf, math.inf)
    return [np.asarray(rule.keep_mask(np.asarray(s), threshold)) for s in statistics]


@dataclass(frozen=True)
class SweepCurve:
    """A sweep as arrays: the test metric (and density) at each threshold."""

    thresholds: np.ndarray
    density: np.ndarray
    values: np.ndarray
    metric: str


def curve_point(curve: SweepCurve, threshold: float) -> tuple[float, float]:
    """(density, metric) of the curve at `threshold`, interpolated between its neighbouring points:
    the marker of the current threshold, read off the sweep instead of predicting the test set again."""
    order = np.argsort(curve.thresholds, kind="stable")
    grid = curve.thresholds[order]
    return (
        float(np.interp(threshold, grid, curve.density[order])),
        float(np.interp(threshold, grid, curve.values[order])),
    )


def suggested_threshold(
    thresholds: np.ndarray, density: np.ndarray, values: np.ndarray, metric: str, tolerance: float = 0.005
) -> dict[str, float] | None:
    """The sparsest point of a sweep whose metric is within `tolerance` of the best: accuracy at
    least best - tolerance (0.005 = half a point), or RMSE at most best * (1 + tolerance)."""
    thresholds, density, values = (np.asarray(a, dtype=np.float64) for a in (thresholds, density, values))
    finite = np.isfinite(values) & np.isfinite(density)
    if not finite.any():
        return None
    if metric == "accuracy":
        best = float(values[finite].max())
        good = finite & (values >= best - tolerance)
    else:
        best = float(values[finite].min())
        good = finite & (values <= best * (1 + tolerance))
    candidates = np.flatnonzero(good)
    index = candidates[
        np.lexsort((-values[candidates] if metric == "accuracy" else values[candidates], density[candidates]))[0]
    ]
    return {
        "threshold": float(thresholds[index]),
        "density": float(density[index]),
        "value": float(values[index]),
        "best": best,
    }


def samples_structure(statistic_name: str) -> bool:
    """Whether the family with this statistic samples a structure (its `has_structure`), so that a
    structure can be drawn from the statistic."""
    from core.models.registry import statistic_samples_structure

    return statistic_samples_structure(statistic_name)


def expected_density(statistics: Sequence[np.ndarray], statistic_name: str) -> float | None:
    """Expected fraction of weights in a sampled network, for families that sample the structure
    (the mean inclusion probability); None when every draw uses every weight."""
    if not samples_structure(statistic_name):
        return None
    values = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in statistics])
    return float(values.mean()) if values.size else None


def sample_structure(statistics: Sequence[np.ndarray], statistic_name: str, seed: int = 0) -> list[np.ndarray] | None:
    """One structure drawn from the posterior, gamma ~ Bernoulli(alpha) per weight (Hubin & Storvik 2019's
    'sampled structure'); None for families whose statistic is not an inclusion probability."""
    if not samples_structure(statistic_name):
        return None
    rng = np.random.default_rng(int(seed))
    return [rng.random(np.shape(s)) < np.asarray(s, dtype=np.float64) for s in statistics]
