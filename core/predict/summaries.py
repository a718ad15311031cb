"""The summaries the run store saves with a run: what the dashboard and `Run.default_sweep` read
without predicting again."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.predict.engine import predict, resolve_model
from core.predict.evaluate import mean_statistic
from core.predict.metrics.headline import headline_metric, prediction_metrics
from core.predict.sweep import sweep


def default_summaries(model_or_run: Any, dataset, *, samples: int = 10, seed: int = 0) -> dict[str, Any]:
    """Flat dict of numpy arrays, floats and lists.

    - `mean_statistic`: mean native statistic per layer;
    - `sweep_thresholds`, `sweep_density`, `sweep_layer_density` (T, L), `sweep_disconnected` (T,)
      and `sweep_accuracy` or `sweep_rmse`: the default mpm-mean sweep (Run.default_sweep);
    - floats: `bma_<metric>` (R = samples), `mpm_mean_<metric>`, `mpm_density`, where <metric> is
      the task's headline metric (accuracy, or RMSE in original units).

    Runs stored by earlier versions also hold `mean_inclusion` (the same list), `statistic_sorted_<l>`,
    `test_*` and `grid_*` arrays; nothing reads those.
    """
    model = resolve_model(model_or_run)
    summaries: dict[str, Any] = {"mean_statistic": mean_statistic(model)}
    curve = sweep(model, dataset, mode="mpm-mean")
    summaries["sweep_thresholds"] = curve.thresholds.astype(np.float64)
    summaries["sweep_density"] = curve.density.astype(np.float64)
    summaries["sweep_layer_density"] = curve.layer_density.astype(np.float64)
    summaries["sweep_disconnected"] = np.asarray(curve.disconnected, dtype=bool)
    summaries[f"sweep_{curve.metric}"] = curve.values.astype(np.float64)
    metric = headline_metric(dataset.task)
    bma = predict(model, dataset.x_test, mode="bma", samples=samples, seed=seed)
    mpm = predict(model, dataset.x_test, mode="mpm-mean")
    summaries["mpm_density"] = float(mpm.density)
    for name, prediction in (("bma", bma), ("mpm_mean", mpm)):
        metrics = prediction_metrics(prediction, dataset.y_test, dataset.task, target_std=dataset.target_std)
        summaries[f"{name}_{metric}"] = metrics[metric]
    return summaries
