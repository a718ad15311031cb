"""Regression metrics for the Gaussian mixture over posterior draws.

The predictive of R draws is p(y | x) = (1/R) sum_r N(y; m_r(x), s_r(x)^2).
Inputs are in the standardised units the model is trained in; every metric is
reported in ORIGINAL units, y_orig = y * target_std + target_mean:
RMSE and CRPS scale by target_std, log-densities shift by -log(target_std),
variances scale by target_std^2. Coverage is scale-free.

Interval coverage uses the mixture's exact CDF F(y) = (1/R) sum_r Phi((y - m_r) / s_r):
y lies in the central interval of level p iff (1 - p)/2 <= F(y) <= (1 + p)/2,
so coverage needs no quantiles (the PIT form of coverage). Interval widths do: the mixture's
quantiles have no closed form and are found by bisection on F.

CRPS of the mixture is closed form (Grimit et al. 2006; Gneiting & Raftery 2007,
CRPS = E|X - y| - E|X - X'| / 2) with E|N(mu, v)| = A(mu, v) = 2 sqrt(v) phi(mu / sqrt v) + mu (2 Phi(mu / sqrt v) - 1):
CRPS = (1/R) sum_r A(y - m_r, s_r^2) - (1 / 2R^2) sum_{r,q} A(m_r - m_q, s_r^2 + s_q^2).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from scipy.special import logsumexp, ndtr
from scipy.stats import kstest, norm

LOG_2PI = np.log(2 * np.pi)
# Central-interval levels reported by default; the headline level (and the dashboard's card) is 0.95.
COVERAGE_LEVELS = (0.5, 0.9, 0.95)
HEADLINE_COVERAGE = 0.95
# Nominal levels of the calibration curve: 0.05, 0.10, ..., 0.95.
CURVE_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))
PIT_BINS = 10
# Bisection halves a bracket of 24 sds 50 times: quantiles to ~1e-14 sd.
BISECTION_STEPS = 50


def _draws(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[None] if values.ndim == 1 else values


def rmse(mean: np.ndarray, y: np.ndarray, target_std: float = 1.0) -> float:
    """Root mean squared error of the predictive mean, in original units."""
    error = np.asarray(mean, dtype=np.float64).reshape(-1) - np.asarray(y, dtype=np.float64).reshape(-1)
    return float(np.sqrt(np.mean(error**2)) * target_std)


def log_likelihood_per_point(
    mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray, target_std: float = 1.0
) -> np.ndarray:
    """log (1/R) sum_r N(y; m_r, s_r^2) per point, in original units."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    y = np.asarray(y, dtype=np.float64).reshape(1, -1)
    log_densities = -0.5 * (LOG_2PI + 2 * np.log(stds) + ((y - means) / stds) ** 2)
    return logsumexp(log_densities, axis=0) - np.log(means.shape[0]) - np.log(target_std)


def log_likelihood(
    mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray, target_std: float = 1.0
) -> float:
    """Mean test log-likelihood of the mixture over draws, in original units."""
    return float(log_likelihood_per_point(mean_per_draw, std_per_draw, y, target_std).mean())


def mixture_cdf(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray) -> np.ndarray:
    """F(y_i) of each point's mixture (the probability integral transform)."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    # ndtr is norm.cdf without scipy.stats' argument handling: bisection calls this ~50 times per level.
    return ndtr((np.asarray(y, dtype=np.float64).reshape(1, -1) - means) / stds).mean(axis=0)


def pit_values(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The probability integral transform F(y_i | x_i) of each target under its predictive
    (Gneiting et al. 2007): Uniform(0, 1) when the predictive is calibrated. A Gaussian predictive
    is the mixture of one draw: pass (n,) means and sds."""
    return mixture_cdf(mean_per_draw, std_per_draw, y)


def central_coverage(pit: np.ndarray, level: float) -> float:
    """Fraction of targets in the central interval of `level`: (1 - p)/2 <= F(y) <= (1 + p)/2."""
    if not 0 < level < 1:
        raise ValueError(f"coverage level must lie in (0, 1), got {level}")
    return float(np.mean(np.abs(pit - 0.5) <= level / 2))


def coverage(
    mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray, levels: Sequence[float] = COVERAGE_LEVELS
) -> dict[str, float]:
    """Fraction of targets inside the mixture's central interval at each level (exact, via the CDF)."""
    pit = mixture_cdf(mean_per_draw, std_per_draw, y)
    return {f"{level:g}": central_coverage(pit, level) for level in levels}


def calibration_curve(
    mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray, levels: Sequence[float] = CURVE_LEVELS
) -> dict[str, Any]:
    """Observed against nominal coverage of the predictive's central intervals (the regression
    reliability diagram; Kuleshov et al. 2018 draw it for one-sided quantiles, whose curve is the
    PIT's ECDF). On the diagonal when calibrated, below it when the intervals are too narrow.
    mean_abs_gap: the mean |observed - nominal| over the levels."""
    return calibration_curve_of_pit(mixture_cdf(mean_per_draw, std_per_draw, y), levels)


def calibration_curve_of_pit(pit: np.ndarray, levels: Sequence[float] = CURVE_LEVELS) -> dict[str, Any]:
    """`calibration_curve` from PIT values, for any predictive with a CDF (e.g. the collapsed one)."""
    nominal = np.asarray(levels, dtype=np.float64)
    observed = np.array([central_coverage(pit, level) for level in nominal])
    return {"nominal": nominal, "observed": observed, "mean_abs_gap": float(np.mean(np.abs(observed - nominal)))}


def pit_histogram(pit: np.ndarray, bins: int = PIT_BINS) -> dict[str, Any]:
    """Equal-width histogram of PIT values on [0, 1] (flat at density 1 when calibrated; U-shaped when
    the predictive is too narrow, hump-shaped when too wide; Gneiting et al. 2007), and the
    Kolmogorov-Smirnov distance of their ECDF from the uniform's."""
    if int(bins) < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    pit = np.asarray(pit, dtype=np.float64).reshape(-1)
    count, edges = np.histogram(pit, bins=int(bins), range=(0.0, 1.0))
    return {
        "edges": edges,
        "count": count,
        "density": count * int(bins) / max(len(pit), 1),
        "ks_statistic": pit_ks_statistic(pit),
    }


def pit_ks_statistic(pit: np.ndarray) -> float:
    """sup_u |ECDF(u) - u| of the PIT values: 0 for a calibrated predictive as n grows."""
    return float(kstest(np.asarray(pit, dtype=np.float64).reshape(-1), "uniform").statistic)


def bisect_quantile(
    cdf: Callable[[np.ndarray], np.ndarray],
    low: np.ndarray,
    high: np.ndarray,
    level: float,
    steps: int = BISECTION_STEPS,
) -> np.ndarray:
    """Per point, the y in [low, high] with cdf(y) = level, by bisection (cdf increasing)."""
    low, high = low.astype(np.float64).copy(), high.astype(np.float64).copy()
    for _ in range(steps):
        middle = 0.5 * (low + high)
        below = cdf(middle) < level
        low = np.where(below, middle, low)
        high = np.where(below, high, middle)
    return 0.5 * (low + high)


def mixture_quantiles(mean_per_draw: np.ndarray, std_per_draw: np.ndarray, levels: Sequence[float]) -> list[np.ndarray]:
    """Quantiles (each (n,)) of each point's mixture over the R draws, by bisection on its CDF
    (no closed form for R > 1; for R = 1 the Gaussian's m + s z_p to ~1e-14)."""
    means = _draws(mean_per_draw)
    stds = np.maximum(_draws(std_per_draw), 1e-300)
    low, high = (means - 12 * stds).min(axis=0), (means + 12 * stds).max(axis=0)
    return [bisect_quantile(lambda y: mixture_cdf(means, stds, y), low, high, float(level)) for level in levels]


def interval_metrics(
    mean_per_draw: np.ndarray,
    std_per_draw: np.ndarray,
    y: np.ndarray,
    levels: Sequence[float] = COVERAGE_LEVELS,
    target_std: float = 1.0,
) -> dict[str, dict]:
    """Per level p, the central interval [q_(1-p)/2, q_(1+p)/2] of each point's predictive: the
    fraction of targets inside (as `coverage`) and its mean width, in original units. Coverage
    alone rewards wide intervals; the width says what it costs (Gneiting et al. 2007: sharpness
    subject to calibration)."""
    return interval_metrics_of(
        mixture_cdf(mean_per_draw, std_per_draw, y),
        lambda q: mixture_quantiles(mean_per_draw, std_per_draw, q),
        levels,
        target_std,
    )


def interval_metrics_of(
    pit: np.ndarray,
    quantiles: Callable[[Sequence[float]], list[np.ndarray]],
    levels: Sequence[float] = COVERAGE_LEVELS,
    target_std: float = 1.0,
) -> dict[str, dict]:
    """`interval_metrics` from PIT values and a predictive's quantile function (levels -> arrays)."""
    result = {}
    for level in levels:
        observed = central_coverage(pit, level)
        low, high = quantiles(((1 - level) / 2, (1 + level) / 2))
        result[f"{level:g}"] = {"coverage": observed, "width": float(np.mean(high - low) * target_std)}
    return result


def _expected_abs(mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    """E|X| for X ~ N(mu, var), |mu| where var = 0."""
    std = np.sqrt(var)
    safe = np.where(std > 0, std, 1.0)
    z = mu / safe
    value = 2 * std * norm.pdf(z) + mu * (2 * norm.cdf(z) - 1)
    return np.where(std > 0, value, np.abs(mu))


def crps_per_point(
    mean_per_draw: np.ndarray, std_per_draw: np.ndarray, y: np.ndarray, target_std: float = 1.0
) -> np.ndarray:
    """Closed-form CRPS of the Gaussian mixture for each point, in original units."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    variances = stds**2
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


def variance_split(
    mean_per_draw: np.ndarray, std_per_draw: np.ndarray, target_std: float = 1.0
) -> dict[str, np.ndarray]:
    """Law of total variance over draws, per point, in original units:
    epistemic = Var_r(m_r), aleatoric = E_r(s_r^2), total = their sum (the mixture's variance)."""
    means, stds = _draws(mean_per_draw), _draws(std_per_draw)
    scale = float(target_std) ** 2
    epistemic = means.var(axis=0) * scale
    aleatoric = (stds**2).mean(axis=0) * scale
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
    return {
        "gap_ratio": float(band[gap].mean() / near) if gap.any() else float("nan"),
        "outside_ratio": float(band[outside].mean() / near) if outside.any() else float("nan"),
    }
