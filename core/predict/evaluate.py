"""`evaluate`: a run's test-set metrics for one prediction mode, as a JSON-ready dict."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from core.errors import PredictionError
from core.jsonable import jsonable  # noqa: F401 - re-exported: older code imports it from here
from core.predict.engine import Prediction, predict, resolve_model
from core.predict.metrics import classification as cls_metrics
from core.predict.metrics import ood as ood_metrics
from core.predict.metrics import regression as reg_metrics
from core.predict.metrics.headline import prediction_metrics
from core.predict.modes import PredictionMode
from core.predict.structure import network_active_masks, overall_density

ECDF_POINTS = 101


def mean_statistic(model) -> list[float]:
    """Mean of the native statistic per layer (for LBBNN: Hubin & Storvik 2024 Table 5's mean inclusion probability;
    for other families their own statistic, |mu|/sigma, log alpha ...)."""
    with torch.no_grad():
        return [float(torch.mean(stat, dtype=torch.float64)) for stat in model.native_statistics()]


mean_inclusion = mean_statistic  # the older name, kept for callers
INCLUSION_STATISTIC = "inclusion_probability"


def mean_entropy_split(prediction: Prediction) -> dict[str, float]:
    """Means over inputs of the entropy split (total, aleatoric, epistemic; nats)."""
    split = cls_metrics.entropy_split(prediction.probs_per_draw)
    return {part: float(values.mean()) for part, values in split.items()}


def classification_metrics(
    prediction: Prediction, y: np.ndarray, ece_bins: int, doubt_threshold: float
) -> dict[str, Any]:
    """prediction_metrics, accuracy vs R, and the compact calibration numbers: the risk-coverage
    curve's AURC (and its excess over the best ranking) and the mean entropy split."""
    result = prediction_metrics(prediction, y, "classification", ece_bins=ece_bins, doubt_level=doubt_threshold)
    if prediction.samples > 1:
        result["accuracy_vs_samples"] = cls_metrics.accuracy_vs_samples(prediction.probs_per_draw, y)
    curve = cls_metrics.risk_coverage(prediction.probs, y, doubt_threshold)
    result["aurc"], result["excess_aurc"] = curve["aurc"], curve["excess_aurc"]
    result["entropy_split"] = mean_entropy_split(prediction)
    return result


def regression_metrics(
    prediction: Prediction, y: np.ndarray, target_std: float, coverage_levels: Sequence[float]
) -> dict[str, Any]:
    """prediction_metrics and the compact calibration numbers: coverage and mean width (original
    units) of the central intervals, the PIT's KS distance from uniform, the calibration curve's
    mean |observed - nominal| coverage."""
    result = prediction_metrics(prediction, y, "regression", target_std=target_std, coverage_levels=coverage_levels)
    means, stds = prediction.mean_per_draw, prediction.std_per_draw
    result["intervals"] = reg_metrics.interval_metrics(means, stds, y, coverage_levels, target_std)
    result["pit_ks"] = reg_metrics.pit_ks_statistic(reg_metrics.pit_values(means, stds, y))
    result["calibration_gap"] = reg_metrics.calibration_curve(means, stds, y)["mean_abs_gap"]
    return result


def uncertainty_scores(prediction: Prediction) -> np.ndarray:
    """Predictive entropy (classification) or the moment-matched Gaussian's entropy (regression)."""
    if prediction.task == "classification":
        return ood_metrics.predictive_entropy(prediction.probs)
    return ood_metrics.gaussian_entropy(prediction.total_variance)


def entropy_summary(scores_in: np.ndarray, scores_out: np.ndarray, n_classes: int | None) -> dict[str, Any]:
    top = math.log(n_classes) if n_classes else float(max(scores_in.max(), scores_out.max()))
    bottom = 0.0 if n_classes else float(min(scores_in.min(), scores_out.min()))
    grid = np.linspace(bottom, top, ECDF_POINTS)
    return {
        "auroc": ood_metrics.auroc(scores_in, scores_out),
        "entropy_in_mean": float(scores_in.mean()),
        "entropy_out_mean": float(scores_out.mean()),
        "entropy_in_median": float(np.median(scores_in)),
        "entropy_out_median": float(np.median(scores_out)),
        "ecdf_grid": grid,
        "ecdf_in": ood_metrics.ecdf_on_grid(scores_in, grid),
        "ecdf_out": ood_metrics.ecdf_on_grid(scores_out, grid),
        "n_out": int(len(scores_out)),
    }


def ood_entropy_split(split_in: dict[str, np.ndarray], prediction_out: Prediction) -> dict[str, Any]:
    """The entropy split's means out of domain, and the AUROC of the epistemic part (the mutual
    information) as an OOD detector: the part that should grow away from the data."""
    split_out = cls_metrics.entropy_split(prediction_out.probs_per_draw)
    return {
        "entropy_split_out": {part: float(values.mean()) for part, values in split_out.items()},
        "auroc_epistemic": ood_metrics.auroc(split_in["epistemic"], split_out["epistemic"]),
    }


def load_ood_inputs(dataset, name: str, data_dir=None) -> np.ndarray:
    from core.data import load_ood

    x = load_ood(dataset, name, data_dir=data_dir)
    if x.ndim != 2 or x.shape[1] != dataset.in_features:
        raise PredictionError(
            f"OOD set {name!r} has inputs of shape {x.shape[1:]} but {dataset.name} has "
            f"{dataset.in_features} features; pick a set with the same input shape"
        )
    return x


def active_density_of(model, prediction) -> float | None:
    """The density of the weights on an input-to-output path (core.predict.structure.active_masks)
    of the one structure a prediction used: the keep masks at its threshold, or the nonzero weights
    of the posterior-mean network; None for bma, whose draws each have their own."""
    with torch.no_grad():
        if prediction.threshold is not None:
            return overall_density(network_active_masks(model, model.keep_masks(prediction.threshold)))
        if prediction.mode is PredictionMode.MEAN:
            return overall_density(network_active_masks(model, [w != 0 for w in model.mean_weights()]))
    return None


def evaluate(
    model_or_run: Any,
    dataset,
    mode: str = "bma",
    samples: int = 10,
    threshold: float | None = None,
    seed: int = 0,
    ood: str | Sequence[str] | None = None,
    ece_bins: int = 15,
    doubt_threshold: float = cls_metrics.DOUBT_LEVEL,
    weights: str | None = None,
    coverage_levels: Sequence[float] = reg_metrics.COVERAGE_LEVELS,
    data_dir=None,
) -> dict[str, Any]:
    """Test-set metrics of one prediction mode (JSON-serialisable).

    Classification: accuracy, nll, brier, ece, doubt decision, accuracy vs R, aurc and excess_aurc
    of the risk-coverage curve, entropy_split (mean total, aleatoric and epistemic entropy).
    Regression (original units): rmse, log_likelihood, coverage, crps, variance split, intervals
    (coverage and mean width per level), pit_ks, calibration_gap.
    Both: density, per-layer density, mean statistic per layer (also as mean_inclusion where the
    statistic is an inclusion probability), disconnected flag,
    and per OOD set the AUROC of entropy and its ECDFs in and out of domain (classification: also
    the entropy split out of domain and the AUROC of its epistemic part).
    """
    model = resolve_model(model_or_run)
    if int(ece_bins) < 1:
        raise PredictionError(f"ece_bins: must be >= 1, got {ece_bins}")
    if dataset.task != model.likelihood.task:
        raise PredictionError(
            f"dataset {dataset.name} is a {dataset.task} task but the model does {model.likelihood.task}"
        )
    prediction = predict(
        model, dataset.x_test, mode=mode, samples=samples, threshold=threshold, seed=seed, weights=weights
    )
    result: dict[str, Any] = {
        "dataset": dataset.name,
        "family": model.family,
        "mode": prediction.mode.value,
        "paper_name": prediction.mode.paper_name,
        "samples": prediction.samples,
        "threshold": prediction.threshold,
        "weights": prediction.weights.value,
        "seed": int(seed),
        "n_test": int(dataset.n_test),
        "density": prediction.density,
        "layer_density": prediction.layer_density,
        "draw_density": prediction.draw_density,
        "active_density": active_density_of(model, prediction),
        "mean_statistic": mean_statistic(model),
        "statistic": model.spec.name,
        "disconnected": prediction.disconnected,
        "warnings": list(prediction.warnings),
    }
    if model.spec.name == INCLUSION_STATISTIC:  # the paper's name, where the statistic is what it says
        result["mean_inclusion"] = result["mean_statistic"]
    if prediction.task == "classification":
        result.update(classification_metrics(prediction, dataset.y_test, ece_bins, doubt_threshold))
    else:
        result.update(regression_metrics(prediction, dataset.y_test, dataset.target_std, coverage_levels))
    names = [ood] if isinstance(ood, str) else list(ood or [])
    if names:
        scores_in = uncertainty_scores(prediction)
        if prediction.task == "classification":
            split_in = cls_metrics.entropy_split(prediction.probs_per_draw)
        result["ood"] = {}
        for name in names:
            x_out = load_ood_inputs(dataset, name, data_dir)
            out = predict(model, x_out, mode=mode, samples=samples, threshold=threshold, seed=seed, weights=weights)
            result["ood"][name] = entropy_summary(scores_in, uncertainty_scores(out), dataset.n_classes)
            if prediction.task == "classification":
                result["ood"][name].update(ood_entropy_split(split_in, out))
    return jsonable(result)
