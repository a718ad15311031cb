"""Prediction modes, metrics, OOD detection, accuracy-vs-density sweeps and export.

from core.predict import predict, evaluate, sweep
p = predict(run, x, mode="mpm", samples=10)      # run: a BayesianMLP or a core.runs.Run
metrics = evaluate(run, dataset, mode="bma", samples=10, ood=["fashion-mnist-small"])
curve = sweep(run, dataset, mode="mpm-mean")     # accuracy (or RMSE) vs density
"""

from core.predict.collapsed import CollapsedPredictive, collapsed_predict
from core.predict.draw_cache import DrawCache
from core.predict.engine import Prediction, predict
from core.predict.evaluate import evaluate, mean_inclusion, mean_statistic
from core.predict.export import ExportedMLP, export_pruned, load_exported
from core.predict.modes import PredictionMode, WeightChoice, parse_mode
from core.predict.summaries import default_summaries
from core.predict.sweep import (
    SweepResult,
    default_thresholds,
    parse_threshold_grid,
    sweep,
    sweep_at_densities,
    thresholds_for_densities,
)

__all__ = [
    "CollapsedPredictive",
    "DrawCache",
    "ExportedMLP",
    "Prediction",
    "PredictionMode",
    "SweepResult",
    "WeightChoice",
    "collapsed_predict",
    "default_summaries",
    "default_thresholds",
    "evaluate",
    "export_pruned",
    "load_exported",
    "mean_inclusion",
    "mean_statistic",
    "parse_mode",
    "parse_threshold_grid",
    "predict",
    "sweep",
    "sweep_at_densities",
    "thresholds_for_densities",
]
