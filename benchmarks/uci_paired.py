"""Paired per-split comparisons for the UCI table.

Both sides of a comparison are evaluated on the same train/test splits, so the split's difficulty
is common to both: the statistic is the per-split difference d_s = ours_s - theirs_s, its mean and
standard error sd(d) / sqrt(n), and a two-sided paired t test on n - 1 degrees of freedom. The call
at level 1 - alpha: "win" when the whole (1 - alpha) confidence interval of the mean difference is
above 0, "loss" when below, else "tie". (Equivalently: p < alpha, and the sign of the mean.)

The noise-grid bound check: MC dropout picks its noise precision tau from a grid of three values
per set (the reference's tau_values.txt). Where the chosen tau sits at an edge of that grid on a
split, its noise level was cut off by the grid, and its test LL there may be below what the same
predictive mean reaches with a freely tuned noise. The check credits such a split with the best
test LL a homoscedastic Gaussian predictive with that split's test RMSE reaches,
-0.5 log(2 pi e RMSE^2) (`gaussian_bound`), when that is higher than the LL it got. The same rule
applies to our side where a setting we tune sits at an edge of its range (flags per split); the
calls reported after the check use the credited numbers of both sides.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95


def gaussian_bound(rmse: float) -> float:
    """The best mean test LL any homoscedastic Gaussian predictive with this test RMSE can reach:
    -0.5 log(2 pi e RMSE^2), attained when the predictive sd equals the RMSE."""
    return -0.5 * math.log(2 * math.pi * math.e * rmse**2)


def paired_comparison(ours: Sequence[float], theirs: Sequence[float], level: float = LEVEL) -> dict[str, Any]:
    """Mean per-split difference ours - theirs, its standard error, the paired t statistic, the
    two-sided p value, the level's confidence interval and the win / tie / loss call.

    With one split there is no standard error: the call is "n/a". With differences that are all
    equal (sd 0) the interval is that one value."""
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_comparison: need two equal-length lists, got {a.shape} and {b.shape}")
    if not 0 < level < 1:
        raise ValueError(f"paired_comparison: level must be in (0, 1), got {level}")
    d = a - b
    n = int(d.size)
    result: dict[str, Any] = {
        "n": n,
        "level": level,
        "mean": float(d.mean()) if n else math.nan,
        "se": math.nan,
        "t": math.nan,
        "p": math.nan,
        "ci": (math.nan, math.nan),
        "call": "n/a",
    }
    if n < 2:
        return result
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    if se > 0:
        t = mean / se
        p = float(2 * stats.t.sf(abs(t), n - 1))
    else:
        t = math.copysign(math.inf, mean) if mean else 0.0
        p = 0.0 if mean else 1.0
    low, high = mean - half, mean + half
    call = "win" if low > 0 else "loss" if high < 0 else "tie"
    result.update(se=se, t=t, p=p, ci=(low, high), call=call)
    return result


def at_grid_edge(chosen: Sequence[float], grid: Sequence[float]) -> list[str | None]:
    """Per split: "top" / "bottom" when the chosen value is the grid's largest / smallest, else None."""
    low, high = min(grid), max(grid)
    tolerance = 1e-9 * max(abs(low), abs(high), 1.0)
    edges: list[str | None] = []
    for value in chosen:
        edges.append("top" if abs(value - high) <= tolerance else "bottom" if abs(value - low) <= tolerance else None)
    return edges


def credited(log_likelihood: Sequence[float], rmse: Sequence[float], flagged: Sequence[bool]) -> list[float]:
    """Per split: max(LL, Gaussian bound at that split's RMSE) where flagged, else the LL."""
    return [max(ll, gaussian_bound(r)) if flag else float(ll) for ll, r, flag in zip(log_likelihood, rmse, flagged)]


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values (family-wise error over the list), in the input order."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    order = np.argsort(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()
