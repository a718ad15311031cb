"""The decision surface of a 2-D classifier: a grid over the inputs and, per grid point, what the
averaged prediction says (class, confidence, entropy) and how much the R draws disagree."""

from __future__ import annotations

import numpy as np

from dashboard import backend


def input_grid_2d(x: np.ndarray, n: int = 60, margin: float = 0.15) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An n x n grid over the range of 2-D inputs x (plus a margin): (points (n*n, 2), xs, ys)."""
    x = np.asarray(x, dtype=np.float64)
    low, high = x.min(axis=0), x.max(axis=0)
    pad = (high - low) * margin
    xs = np.linspace(low[0] - pad[0], high[0] + pad[0], n)
    ys = np.linspace(low[1] - pad[1], high[1] + pad[1], n)
    gx, gy = np.meshgrid(xs, ys)
    return np.column_stack([gx.ravel(), gy.ravel()]).astype(np.float32), xs, ys


def surface_arrays(probs_per_draw: np.ndarray) -> dict[str, np.ndarray]:
    """Per grid point: the averaged class probabilities' argmax and max, the predictive entropy and
    the spread of the R draws (the sd of the winning class's probability over draws)."""
    per_draw = np.asarray(probs_per_draw, dtype=np.float64)
    mean = per_draw.mean(axis=0)
    winner = mean.argmax(axis=1)
    spread = per_draw[:, np.arange(mean.shape[0]), winner].std(axis=0)
    return {
        "predicted": winner,
        "confidence": mean.max(axis=1),
        "entropy": backend.predictive_entropy(mean),
        "spread": spread,
    }
