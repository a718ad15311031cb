"""Metrics split by kind (uncertainty-toolbox style): numbers only, plotting lives elsewhere."""

from core.predict.metrics import classification, ood, regression

__all__ = ["classification", "ood", "regression"]
