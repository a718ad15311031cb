"""The dashboard's metric cards of a test-set prediction and its accuracy-against-R ladder: core's
one metrics function (core.predict.metrics.prediction_metrics), flattened."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.data.dataset import Dataset
from core.predict.metrics import card_metrics, classification, prediction_metrics
from core.predict.metrics.classification import DOUBT_LEVEL

SAMPLE_LADDER = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200)


def test_metrics(arrays: dict[str, np.ndarray], dataset: Dataset, doubt_level: float = DOUBT_LEVEL) -> dict[str, Any]:
    """The metric cards of a test-set prediction (arrays of a Prediction in original units): density,
    disconnected and prediction_metrics flattened (doubt_accuracy, doubt_count, doubt_fraction, coverage_95)."""
    y = dataset.y_test if dataset.task == "classification" else dataset.unstandardise(dataset.y_test)
    result: dict[str, Any] = {"density": float(arrays["density"]), "disconnected": bool(arrays["disconnected"])}
    result.update(card_metrics(prediction_metrics(arrays, y, dataset.task, doubt_level=doubt_level)))
    return result


test_metrics.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, despite its name


def accuracy_by_samples(probs_per_draw: np.ndarray, y: np.ndarray, max_samples: int) -> dict[str, list]:
    """Accuracy of the average of the first r draws, r on a 1-2-5 ladder up to the draws available."""
    available = min(max_samples, len(probs_per_draw))
    ladder = [r for r in SAMPLE_LADDER if r <= available]
    if not ladder or ladder[-1] != available:
        ladder.append(available)
    return classification.accuracy_vs_samples(probs_per_draw, y, ladder)
