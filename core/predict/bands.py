"""Regression bands on given inputs, in original units: the collapsed predictive's mean and 5% / 95%
quantiles (the NUTS reference's: core.reference.bands)."""

from __future__ import annotations

from typing import Any

import numpy as np

BAND_LEVELS = (0.05, 0.95)


def collapsed_bands(run: Any, x: np.ndarray, variant: str, samples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Mean and 5% / 95% quantiles of the collapsed predictive of `run` on x, original units."""
    from core.predict.collapsed import collapsed_predict

    dataset = run.dataset()
    predictive = collapsed_predict(run, x, samples=int(samples), seed=int(seed), variant=variant)
    predictive = predictive.unstandardised(dataset.target_mean, dataset.target_std)
    low, high = predictive.quantiles(BAND_LEVELS)
    return {
        "mean": np.asarray(predictive.mean),
        "low": low,
        "high": high,
        "ensemble_mean": predictive.ensemble_mean_per_draw.mean(axis=0),
    }
