"""Classification metrics from class probabilities.

`probs` is (n, K) (the model average) and `probs_per_draw` (R, n, K).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from core.predict.metrics.ood import predictive_entropy

# Hubin & Storvik's (2024) "doubt" column: a case is decided when its max class probability exceeds this.
DOUBT_LEVEL = 0.95

# Softmax probabilities can underflow to 0 in float32; the log-likelihood of a
# draw is floored at log(TINY) instead of -inf.
TINY = float(np.finfo(np.float32).tiny)


def _labels(y: np.ndarray) -> np.ndarray:
    return np.asarray(y).astype(np.int64).reshape(-1)


def _per_draw(probs: np.ndarray) -> np.ndarray:
    probs = np.asarray(probs)
    return probs[None] if probs.ndim == 2 else probs


def accuracy(probs: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.asarray(probs).argmax(axis=-1) == _labels(y)))


def nll(probs_per_draw: np.ndarray, y: np.ndarray) -> float:
    """Mean over examples of -log((1/R) sum_r p_r(y_i)), computed as a log-mean-exp."""
    draws = _per_draw(probs_per_draw).astype(np.float64)
    labels = _labels(y)
    log_p = np.log(np.maximum(draws[:, np.arange(len(labels)), labels], TINY))  # (R, n)
    top = log_p.max(axis=0)
    log_mean = top + np.log(np.exp(log_p - top).mean(axis=0))
    return float(-log_mean.mean())


def brier(probs: np.ndarray, y: np.ndarray) -> float:
    """Multi-class Brier score: mean over examples of sum_k (p_k - 1[y = k])^2 (range [0, 2])."""
    probs = np.asarray(probs, dtype=np.float64)
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(probs)), _labels(y)] = 1.0
    return float(((probs - onehot) ** 2).sum(axis=1).mean())


def reliability(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> dict[str, Any]:
    """The reliability diagram (Guo et al. 2017): equal-width confidence bins (k/B, (k+1)/B], the
    first one closed at 0, confidence being the max class probability.

    Returns per bin: count, mean confidence and accuracy (NaN where empty), and edges; and the
    diagram's ECE, sum_b (n_b / n) |accuracy_b - confidence_b| (what `ece` reports).
    """
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    probs = np.asarray(probs, dtype=np.float64)
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == _labels(y)).astype(np.float64)
    index = np.clip(np.ceil(confidence * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    count = np.bincount(index, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(index, weights=confidence, minlength=n_bins) / count
        bin_accuracy = np.bincount(index, weights=correct, minlength=n_bins) / count
    filled = count > 0
    gaps = np.abs(bin_accuracy[filled] - mean_confidence[filled])
    return {
        "edges": np.linspace(0.0, 1.0, n_bins + 1),
        "count": count,
        "confidence": mean_confidence,
        "accuracy": bin_accuracy,
        "ece": float((count[filled] * gaps).sum() / count.sum()),
    }


def ece(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    """Expected calibration error: sum_b (n_b / n) |accuracy_b - confidence_b| over `reliability`'s bins."""
    return reliability(probs, y, n_bins)["ece"]


def doubt_decision(probs: np.ndarray, y: np.ndarray, threshold: float = DOUBT_LEVEL) -> dict[str, float | int | None]:
    """Classify only where the max class probability exceeds `threshold` (Hubin & Storvik 2024's DOUBT_LEVEL column).

    accuracy is over the decided cases (None when none is decided).
    """
    probs = np.asarray(probs)
    decided = probs.max(axis=1) > threshold
    count = int(decided.sum())
    hits = probs[decided].argmax(axis=1) == _labels(y)[decided]
    return {
        "threshold": float(threshold),
        "count": count,
        "fraction": count / max(len(probs), 1),
        "accuracy": float(hits.mean()) if count else None,
    }


def risk_coverage(probs: np.ndarray, y: np.ndarray, doubt_level: float = DOUBT_LEVEL) -> dict[str, Any]:
    """The risk-coverage curve of selective classification (Geifman & El-Yaniv 2017): decide only the
    inputs whose confidence (max class probability) reaches a threshold, and move the threshold
    from the top confidence down to the lowest.

    One point per distinct confidence c (tied inputs cannot be told apart, so they enter together):
    threshold c, coverage = fraction with confidence >= c, accuracy and risk = 1 - accuracy on them.
    AURC is the area under risk against coverage, each point's risk held over the coverage it adds
    (without ties: (1/n) sum_k risk of the k most confident). optimal_aurc is the AURC of a ranking
    that puts every correct input first; their difference is the excess AURC (Geifman et al. 2019).
    `at_doubt_level` is `doubt_decision` at doubt_level (strictly above it) with its risk.
    """
    probs = np.asarray(probs, dtype=np.float64)
    n = len(probs)
    if n == 0:
        raise ValueError("risk_coverage needs at least one input")
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == _labels(y)
    order = np.argsort(-confidence, kind="stable")
    sorted_confidence = confidence[order]
    errors = np.cumsum(~correct[order])
    group_end = np.flatnonzero(np.r_[sorted_confidence[1:] != sorted_confidence[:-1], True])
    decided = group_end + 1
    risk = errors[group_end] / decided
    coverage = decided / n
    aurc = float(np.sum(np.diff(coverage, prepend=0.0) * risk))
    # The best ranking of the same errors: zero risk until the n - e correct inputs are used up.
    k = np.arange(1, n + 1)
    optimal = float(np.mean(np.maximum(0, k - (n - errors[-1])) / k))
    point = doubt_decision(probs, y, doubt_level)
    point["risk"] = None if point["accuracy"] is None else 1.0 - point["accuracy"]
    return {
        "threshold": sorted_confidence[group_end],
        "coverage": coverage,
        "accuracy": 1.0 - risk,
        "risk": risk,
        "aurc": aurc,
        "optimal_aurc": optimal,
        "excess_aurc": aurc - optimal,
        "at_doubt_level": point,
    }


def entropy_split(probs_per_draw: np.ndarray) -> dict[str, np.ndarray]:
    """Per input, the predictive entropy of the model average split in two (Depeweg et al. 2018):

    total = H[(1/R) sum_r p_r], aleatoric = (1/R) sum_r H[p_r] (the expected entropy: noise each
    network sees), epistemic = total - aleatoric, the mutual information between the label and the
    draw (the networks disagreeing; BALD's score, Houlsby et al. 2011). Jensen makes it >= 0, up to
    rounding, and 0 when every draw gives the same probabilities. Nats; (R, n, K) or (n, K) input.
    """
    draws = _per_draw(probs_per_draw)
    mean = np.zeros(draws.shape[1:], dtype=np.float64)
    aleatoric = np.zeros(draws.shape[1], dtype=np.float64)
    for draw in draws:  # one draw at a time: (R, n, K) in float64 may not fit beside the prediction
        draw = draw.astype(np.float64)
        mean += draw
        aleatoric += predictive_entropy(draw)
    total = predictive_entropy(mean / len(draws))
    aleatoric /= len(draws)
    return {"total": total, "aleatoric": aleatoric, "epistemic": total - aleatoric}


def accuracy_vs_samples(
    probs_per_draw: np.ndarray, y: np.ndarray, sample_counts: Sequence[int] | None = None
) -> dict[str, list]:
    """Accuracy of the average of the first r draws for each r (Hubin & Storvik 2019 figure 1)."""
    draws = _per_draw(probs_per_draw)
    total = draws.shape[0]
    counts = list(range(1, total + 1)) if sample_counts is None else [int(c) for c in sample_counts]
    if any(c < 1 or c > total for c in counts):
        raise ValueError(f"sample counts must lie in [1, {total}], got {counts}")
    labels = _labels(y)
    # The running sum of the draws in float64, one (n, classes) array, not all R of np.cumsum's: the same
    # additions in the same order (so the same numbers), without writing R x n x classes doubles.
    wanted = set(counts)
    running = np.zeros(draws.shape[1:], dtype=np.float64)
    at: dict[int, float] = {}
    for r in range(1, max(counts) + 1):
        running += draws[r - 1]
        if r in wanted:
            at[r] = float(np.mean(running.argmax(axis=1) == labels))
    return {"samples": counts, "accuracy": [at[c] for c in counts]}


def nan_to_none(value: float) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value
