"""The arrays a dashboard shows at once and the run store saves with a run."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from core.predict.engine import predict, resolve_model
from core.predict.evaluate import mean_inclusion
from core.predict.metrics import classification as cls_metrics
from core.predict.metrics import regression as reg_metrics
from core.predict.sweep import sweep


def default_summaries(model_or_run: Any, dataset, *, samples: int = 10, seed: int = 0) -> dict[str, Any]:
    """Flat dict of numpy arrays, floats and lists.

    - `statistic_sorted_<l>`: layer l's native statistic, sorted (float32);
    - `mean_inclusion`: mean statistic per layer;
    - `sweep_thresholds`, `sweep_density`, `sweep_layer_density` (T, L) and
      `sweep_accuracy` or `sweep_rmse`: the default mpm-mean sweep;
    - classification: `test_probs_per_draw` (R, n, K), `test_probs` (n, K) of
      bma with R = samples, `test_probs_mpm_mean` (n, K);
      regression (original units): `test_mean`, `test_epistemic_std`, `test_total_std`;
    - where the dataset has a grid: `grid_x`, `grid_mean`, `grid_mean_per_draw`,
      `grid_epistemic_std`, `grid_total_std` (original units);
    - floats: `bma_<metric>`, `mpm_mean_<metric>`, `mpm_density`.
    """
    model = resolve_model(model_or_run)
    summaries: dict[str, Any] = {}
    with torch.no_grad():
        for index, stat in enumerate(model.native_statistics()):
            summaries[f"statistic_sorted_{index}"] = np.sort(stat.reshape(-1).float().cpu().numpy())
    summaries["mean_inclusion"] = mean_inclusion(model)
    curve = sweep(model, dataset, mode="mpm-mean")
    summaries["sweep_thresholds"] = curve.thresholds.astype(np.float64)
    summaries["sweep_density"] = curve.density.astype(np.float64)
    summaries["sweep_layer_density"] = curve.layer_density.astype(np.float64)
    summaries[f"sweep_{curve.metric}"] = curve.values.astype(np.float64)
    bma = predict(model, dataset.x_test, mode="bma", samples=samples, seed=seed)
    mpm = predict(model, dataset.x_test, mode="mpm-mean")
    summaries["mpm_density"] = float(mpm.density)
    if dataset.task == "classification":
        summaries["test_probs_per_draw"] = bma.probs_per_draw
        summaries["test_probs"] = bma.probs
        summaries["test_probs_mpm_mean"] = mpm.probs
        summaries["bma_accuracy"] = cls_metrics.accuracy(bma.probs, dataset.y_test)
        summaries["mpm_mean_accuracy"] = cls_metrics.accuracy(mpm.probs, dataset.y_test)
    else:
        scale = float(dataset.target_std)
        summaries["test_mean"] = dataset.unstandardise(bma.mean).astype(np.float32)
        summaries["test_epistemic_std"] = (np.sqrt(bma.epistemic_variance) * scale).astype(np.float32)
        summaries["test_total_std"] = (np.sqrt(bma.total_variance) * scale).astype(np.float32)
        summaries["bma_rmse"] = reg_metrics.rmse(bma.mean, dataset.y_test, scale)
        summaries["mpm_mean_rmse"] = reg_metrics.rmse(mpm.mean, dataset.y_test, scale)
        if dataset.x_grid is not None:
            grid = predict(model, dataset.x_grid, mode="bma", samples=samples, seed=seed)
            x_grid = np.asarray(dataset.x_grid)
            summaries["grid_x"] = (x_grid[:, 0] if x_grid.ndim == 2 and x_grid.shape[1] == 1 else x_grid)
            summaries["grid_mean"] = dataset.unstandardise(grid.mean).astype(np.float32)
            summaries["grid_mean_per_draw"] = dataset.unstandardise(grid.mean_per_draw).astype(np.float32)
            summaries["grid_epistemic_std"] = (np.sqrt(grid.epistemic_variance) * scale).astype(np.float32)
            summaries["grid_total_std"] = (np.sqrt(grid.total_variance) * scale).astype(np.float32)
    return summaries
