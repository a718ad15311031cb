"""Regression metrics for the Gaussian mixture over posterior draws.

The predictive of R draws is p(y | x) = (1/R) sum_r N(y; m_r(x), s_r(x)^2).
Inputs are in the standardised units the model is trained in; every metric is
reported in ORIGINAL units, y_orig = y * target_std + target_mean:
RMSE and CRPS scale by target_std, log-densities shift by -log(target_std),
variances scale by target_std^2. Coverage is scale-free.

Interval coverage uses the mixture's exact CDF F(y) = (1/R) sum_r Phi((y - m_r) / s_r):
y lies in the central interval of level p iff (1 - p)/2 <= F(y) <= (1 + p)/2,
so no quantiles need to be computed (the PIT form of coverage).

CRPS of the mixture is closed form (Grimit et al. 2006; Gneiting & Raftery 2007,
CRPS = E|X - y| - E|X - X'| / 2) with E|N(mu, v)| = A(mu, v) = 2 sqrt(v) phi(mu / sqrt v) + mu (2 Phi(mu / sqrt v) - 1):
CRPS = (1/R) sum_r A(y - m_r, s_r^2) - (1 / 2R^2) sum_{r,q} A(m_r - m_q, s_r^2 + s_q^2).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

LOG_2PI = np.log(2 * np.pi)
# Central-interval levels reported by default; the headline level (and the dashboard's card) is 0.95.
COVERAGE_LEVELS = (0.5, 0.9, 0.95)
HEADLINE_COVERAGE = 0.95


def _draws(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[None] if values.ndim == 1 else values


def rmse(mean: np.ndarray, y: np.ndarray, target_std: float = 1.0) -> float:
    """Root mean squared error of the predictive mean, in original units."""
    error = np.asarray(mean, dtype=np.float64).reshape(-1) - np.asarray(y, dtype=np.float64).reshape(-1)
    return float(np.sqrt(np.mean(error ** 2)) * target_std)


def log_likelihood_per_point(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray,
                             target_std: float = 1.0) -> np.ndarray:
    """log (1/R) sum_r N(y; m_r, s_r^2) per point, in original units."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    y = np.asarray(y, dtype=np.float64).reshape(1, -1)
    log_densities = -0.5 * (LOG_2PI + 2 * np.log(stds) + ((y - means) / stds) ** 2)
    return logsumexp(log_densities, axis=0) - np.log(means.shape[0]) - np.log(target_std)


def log_likelihood(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray,
                   target_std: float = 1.0) -> float:
    """Mean test log-likelihood of the mixture over draws, in original units."""
    return float(log_likelihood_per_point(mean_per_draw, std_per_draw, y, target_std).mean())


def mixture_cdf(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray) -> np.ndarray:
    """F(y_i) of each point's mixture (the probability integral transform)."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    return norm.cdf((np.asarray(y, dtype=np.float64).reshape(1, -1) - means) / stds).mean(axis=0)


def coverage(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray,
             levels: Sequence[float] = COVERAGE_LEVELS) -> dict[str, float]:
    """Fraction of targets inside the mixture's central interval at each level (exact, via the CDF)."""
    pit = mixture_cdf(mean_per_draw, std_per_draw, y)
    result = {}
    for level in levels:
        if not 0 < level < 1:
            raise ValueError(f"coverage level must lie in (0, 1), got {level}")
        result[f"{level:g}"] = float(np.mean(np.abs(pit - 0.5) <= level / 2))
    return result


def _expected_abs(mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    """E|X| for X ~ N(mu, var), |mu| where var = 0."""
    std = np.sqrt(var)
    safe = np.where(std > 0, std, 1.0)
    z = mu / safe
    value = 2 * std * norm.pdf(z) + mu * (2 * norm.cdf(z) - 1)
    return np.where(std > 0, value, np.abs(mu))


def crps_per_point(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray,
                   target_std: float = 1.0) -> np.ndarray:
    """Closed-form CRPS of the Gaussian mixture for each point, in original units."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    variances = stds ** 2
    result = np.empty(len(y))
    chunk = max(1, 2_000_000 // means.shape[0] ** 2)  # bounds the (R, R, chunk) pairwise array
    for start in range(0, len(y), chunk):
        part = slice(start, start + chunk)
        m, v = means[:, part], variances[:, part]
        spread = _expected_abs(y[part][None] - m, v).mean(axis=0)
        pairwise = _expected_abs(m[:, None] - m[None], v[:, None] + v[None]).mean(axis=(0, 1))
        result[part] = spread - 0.5 * pairwise
    return result * target_std


def crps(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray, target_std: float = 1.0) -> float:
    return float(crps_per_point(mean_per_draw, std_per_draw, y, target_std).mean())


def variance_split(mean_per_draw: np.ndarray, std_per_draw: np.ndarray,
                   target_std: float = 1.0) -> dict[str, np.ndarray]:
    """Law of total variance over draws, per point, in original units:
    epistemic = Var_r(m_r), aleatoric = E_r(s_r^2), total = their sum (the mixture's variance)."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    scale = float(target_std) ** 2
    epistemic = means.var(axis=0) * scale
    aleatoric = (stds ** 2).mean(axis=0) * scale
    return {"epistemic": epistemic, "aleatoric": aleatoric, "total": epistemic + aleatoric}


def band_width_ratios(x_grid: np.ndarray, x_train: np.ndarray, band: np.ndarray) -> dict[str, float]:
    """How much a 1-D predictive band widens away from the data: its mean width in the gaps (inside
    the data's range, more than 10% of the span from any training point) and outside the range
    (same distance), each over its mean width within 5% of the span of a training point."""
    x, xt = np.asarray(x_grid)[:, 0], np.asarray(x_train)[:, 0]
    band = np.asarray(band, dtype=float)
    span = xt.max() - xt.min()
    distance = np.abs(x[:, None] - xt[None, :]).min(axis=1)
    near = band[distance < 0.05 * span].mean()
    inside = (x > xt.min()) & (x < xt.max())
    gap, outside = inside & (distance > 0.1 * span), ~inside & (distance > 0.1 * span)
    return {"gap_ratio": float(band[gap].mean() / near) if gap.any() else float("nan"),
            "outside_ratio": float(band[outside].mean() / near) if outside.any() else float("nan")}
