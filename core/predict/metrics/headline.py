"""The one metrics function of a prediction: the CLI's `evaluate`, the dashboard's cards and the
summaries stored with a run all read it.

It takes anything holding a prediction's arrays (a core.predict.Prediction, or a mapping of its
arrays such as the dashboard caches): `probs` and `probs_per_draw` for classification, `mean`,
`mean_per_draw` and `std_per_draw` for regression. Regression metrics are in original units:
pass standardised arrays with the targets' `target_std`, or arrays already in original units with
target_std 1.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from core.predict.metrics import classification as cls_metrics
from core.predict.metrics import regression as reg_metrics

# The metric a run is judged by first (sweeps, run lists, the accuracy-vs-density curve).
HEADLINE_METRIC = {"classification": "accuracy", "regression": "rmse"}


def headline_metric(task: str) -> str:
    return HEADLINE_METRIC[str(getattr(task, "value", task))]


def stored_headline(metrics: Mapping[str, Any]) -> tuple[str, float] | None:
    """The first headline metric (accuracy or RMSE, not a doubt accuracy) among a run's stored
    metrics ("SIM-SIM R=1 accuracy", ...), or None: what run lists show for a run."""
    names = tuple(HEADLINE_METRIC.values())
    for key, value in metrics.items():
        if key.endswith(names) and not key.endswith("doubt_accuracy") and isinstance(value, (int, float)):
            return key, float(value)
    return None


def _get(prediction: Any, name: str) -> np.ndarray:
    value = prediction[name] if isinstance(prediction, Mapping) else getattr(prediction, name)
    return np.asarray(value)


def prediction_metrics(
    prediction: Any,
    y: np.ndarray,
    task: str,
    *,
    target_std: float = 1.0,
    ece_bins: int = 15,
    doubt_level: float = cls_metrics.DOUBT_LEVEL,
    coverage_levels: Sequence[float] = reg_metrics.COVERAGE_LEVELS,
) -> dict[str, Any]:
    """Classification: accuracy, nll, brier, ece (ece_bins), doubt (the decision at doubt_level).
    Regression: rmse, log_likelihood, coverage (by level), crps and the variance split (means)."""
    if str(getattr(task, "value", task)) == "classification":
        probs = _get(prediction, "probs")
        return {
            "accuracy": cls_metrics.accuracy(probs, y),
            "nll": cls_metrics.nll(_get(prediction, "probs_per_draw"), y),
            "brier": cls_metrics.brier(probs, y),
            "ece": cls_metrics.ece(probs, y, ece_bins),
            "ece_bins": int(ece_bins),
            "doubt": cls_metrics.doubt_decision(probs, y, doubt_level),
        }
    means, stds = _get(prediction, "mean_per_draw"), _get(prediction, "std_per_draw")
    split = reg_metrics.variance_split(means, stds, target_std)
    return {
        "rmse": reg_metrics.rmse(_get(prediction, "mean"), y, target_std),
        "log_likelihood": reg_metrics.log_likelihood(means, stds, y, target_std),
        "coverage": reg_metrics.coverage(means, stds, y, coverage_levels),
        "crps": reg_metrics.crps(means, stds, y, target_std),
        "epistemic_variance": float(split["epistemic"].mean()),
        "aleatoric_variance": float(split["aleatoric"].mean()),
        "total_variance": float(split["total"].mean()),
    }


def card_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """prediction_metrics flattened for one-number displays (dashboard cards, tables):
    doubt_accuracy / doubt_count / doubt_fraction and coverage_95 beside the rest."""
    flat = {k: v for k, v in metrics.items() if k not in ("doubt", "coverage")}
    if "doubt" in metrics:
        doubt = metrics["doubt"]
        flat.update(doubt_accuracy=doubt["accuracy"], doubt_count=doubt["count"], doubt_fraction=doubt["fraction"])
    if "coverage" in metrics:
        key = f"{reg_metrics.HEADLINE_COVERAGE:g}"
        flat[f"coverage_{round(reg_metrics.HEADLINE_COVERAGE * 100)}"] = metrics["coverage"].get(key)
    return flat
