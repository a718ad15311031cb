"""Metrics split by kind (uncertainty-toolbox style): numbers only, plotting lives elsewhere."""

from core.predict.metrics import classification, ood, regression
from core.predict.metrics.headline import card_metrics, headline_metric, prediction_metrics

__all__ = ["card_metrics", "classification", "headline_metric", "ood", "prediction_metrics", "regression"]
