"""Out-of-distribution detection from predictive uncertainty (Hubin & Storvik 2019 figure 2)."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def predictive_entropy(probs: np.ndarray) -> np.ndarray:
    """-sum_k p_k log p_k (nats) per row of (n, K) model-averaged probabilities; 0 log 0 = 0."""
    probs = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(probs > 0, probs * np.log(probs), 0.0)
    return -terms.sum(axis=1)


def gaussian_entropy(total_variance: np.ndarray) -> np.ndarray:
    """Differential entropy of the moment-matched Gaussian (regression's uncertainty score)."""
    return 0.5 * np.log(2 * np.pi * np.e * np.asarray(total_variance, dtype=np.float64))


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and F(v) = fraction <= v at each (a step function's jump points)."""
    sorted_values = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    return sorted_values, np.arange(1, len(sorted_values) + 1) / len(sorted_values)


def ecdf_on_grid(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """F(g) = fraction of values <= g for each grid point."""
    sorted_values = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    return np.searchsorted(sorted_values, np.asarray(grid, dtype=np.float64), side="right") / len(sorted_values)


def auroc(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """P(score_out > score_in) + P(tie) / 2: the AUROC of `score` as a detector of OOD inputs.

    Rank based (average ranks for ties), equal to the Mann-Whitney U / (n_in n_out).
    """
    scores_in = np.asarray(scores_in, dtype=np.float64).reshape(-1)
    scores_out = np.asarray(scores_out, dtype=np.float64).reshape(-1)
    if len(scores_in) == 0 or len(scores_out) == 0:
        raise ValueError("auroc needs at least one in-distribution and one OOD score")
    ranks = rankdata(np.concatenate([scores_in, scores_out]))
    n_out = len(scores_out)
    u = ranks[len(scores_in) :].sum() - n_out * (n_out + 1) / 2
    return float(u / (len(scores_in) * n_out))
