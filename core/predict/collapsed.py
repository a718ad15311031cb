"""Collapsed predictive for regression (CIBER-style, Zeng & Van den Broeck 2023).

Sample the body (every layer but the last, plus whatever of the last layer is
not Gaussian given the rest: LBBNN's inclusion mask, the horseshoe's output
scale, concrete dropout's input mask) and integrate the last layer's weights
of the mean output out in closed form. Draw r has penultimate features phi_r(x)
(bias feature 1 appended) and the last layer's conditional q with mean m_r and
diagonal variance S_r (zero where the sampled mask drops a weight, and for the
point-mass families fnn and concrete-dropout). Two variants:

- `gaussian` (the principled one): y | x, r ~ N(phi^T m_r, phi^T diag(S_r) phi + s_r(x)^2),
  exact; s_r is the likelihood's noise std (the sampled scale output for the
  heteroscedastic likelihood).
- `box` (the paper's): the K last-layer terms phi_j w_j with the widest spread get a
  uniform (box) q with the Gaussian's mean and variance, half-width sqrt(3 S_j)|phi_j|;
  the noise gets the triangular density of half-width sqrt(6) s_r (two uniforms), so y
  is the sampled rest plus a sum of independent uniforms: an exact piecewise-polynomial
  density, evaluated by the alternating sum over the 2^m corners. Terms are collapsed
  widest first while that sum stays well conditioned (see `MAX_CONDITION`); the
  remaining last-layer weights keep their sampled values.

The predictive is the equal-weight mixture over the R draws. The draws are those
of `predict(mode="bma")` with the same seed, so the plain ensemble of the same
samples can be shown beside it.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import torch
from scipy.special import gammaln
from torch import Tensor

from core.errors import PredictionError
from core.models.base import SparseLayer, new_generator
from core.models.likelihoods import Gaussian
from core.models.network import draw_seed
from core.predict.engine import as_inputs, check_samples, forward_draws, resolve_model
from core.predict.metrics.regression import COVERAGE_LEVELS, bisect_quantile, mixture_cdf, mixture_quantiles

LOG_2PI = np.log(2 * np.pi)
VARIANTS = ("gaussian", "box")
DEFAULT_BOX_TERMS = 6
# Bound on (2 sum c)^m / (m! prod c): the alternating corner sum loses about this factor times the
# float epsilon; 1e-8 / eps keeps the CDF exact to ~1e-8.
MAX_CONDITION = 1e-8 / float(np.finfo(np.float64).eps)


def check_variant(variant: Any) -> str:
    value = str(variant).strip().lower()
    if value not in VARIANTS:
        raise PredictionError(f"collapsed variant: unknown {variant!r}; choose gaussian or box")
    return value


# --- the last layer's conditional q, per family --------------------------------------------------


def last_layer_conditional(model, last: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """Mean and variance (R, out, in+1) of the last layer's weights given draw r's non-Gaussian part.

    `last` holds the R drawn last-layer weights of `model.sample_weights(R, seed)`.
    """
    layer: SparseLayer = model.layers[-1]
    family = layer.family
    if family in ("fnn", "concrete-dropout", "ensemble"):  # a point mass given the (sampled) dropout mask or member
        return last, torch.zeros_like(last)
    if family == "laplace":
        # Its draws are joint over all layers: the last layer is drawn with the rest and kept as drawn
        # (a point mass given the draw); collapsed then runs the draws through the nonlinear net.
        return last, torch.zeros_like(last)
    if family == "horseshoe":
        # Given the output scale s (drawn first by sample_weights, from the same generator), w = s * beta
        # with beta ~ N(mu, sigma^2).
        index = len(model.layers) - 1
        scales = torch.stack(
            [
                torch.exp(layer._draw_log_scale(1, new_generator(model.device, (seed * 1_000_003 + r) * 101 + index)))[
                    0
                ]
                for r in range(last.shape[0])
            ]
        )[:, :, None]  # (R, out, 1)
        mu, sigma = layer.weight_mu * layer.fixed_mask, layer.weight_sigma * layer.fixed_mask
        return scales * mu, (scales * sigma) ** 2
    if hasattr(layer, "collapsed_conditional"):  # lbbnn-flow: Gaussian given its multipliers, replayed per draw
        index = len(model.layers) - 1
        generators = [new_generator(model.device, draw_seed(seed, r, index)) for r in range(last.shape[0])]
        return layer.collapsed_conditional(last, generators)
    if hasattr(layer, "weight_mu") and hasattr(layer, "weight_sigma"):  # bnn, bnn-mixture, variational-dense, lbbnn*
        mean, var = layer.weight_mu * layer.fixed_mask, layer.weight_sigma**2 * layer.fixed_mask
    elif hasattr(layer, "theta") and hasattr(layer, "log_sigma2"):  # sparse variational dropout
        mean, var = layer.theta * layer.fixed_mask, layer.log_sigma2.exp() * layer.fixed_mask
    elif layer.conditional_normal() is not None:  # any other family whose q(w | kept) is Gaussian (the interface)
        mean, std = layer.conditional_normal()
        mean, var = mean * layer.fixed_mask, std**2 * layer.fixed_mask
    else:
        raise PredictionError(
            f"collapsed predictive: no conditional Gaussian known for the last layer of family {family!r}"
        )
    if layer.has_structure:  # the sampled inclusion mask: a kept weight is a.s. nonzero, a dropped one exactly 0
        kept = (last != 0).to(last.dtype)
        return kept * mean, kept * var
    return mean.expand_as(last), var.expand_as(last)


@dataclass
class CollapsedParts:
    """What both variants need, per draw and input (standardised units)."""

    phi: Tensor  # (R, n, in+1)
    mean: Tensor  # (R, in+1): conditional mean of the mean output's last-layer weights
    var: Tensor  # (R, in+1)
    sampled: Tensor  # (R, in+1): the drawn weights
    noise_std: Tensor  # (R, n)


def collapsed_parts(model_or_run: Any, x: Any, samples: int, seed: int) -> CollapsedParts:
    model = resolve_model(model_or_run)
    if model.likelihood.task != "regression" or not isinstance(model.likelihood, Gaussian):
        raise PredictionError(
            "collapsed predictive: needs a regression model with a Gaussian likelihood "
            f"(gaussian or heteroscedastic), got {model.config.likelihood!r}"
        )
    samples = check_samples(samples)
    with torch.no_grad():
        inputs = as_inputs(model, x)
        draws = model.sample_weights(samples, int(seed))
        last = draws[-1]
        mean_w, var_w = last_layer_conditional(model, last, int(seed))
        if len(draws) > 1:
            hidden = model.activation(forward_draws(model, inputs, draws[:-1]))
            hidden = model.layer_input(len(draws) - 1, hidden, inputs)  # input skip: the last layer reads x too
        else:
            hidden = inputs.expand(samples, -1, -1)
        phi = torch.cat([hidden, torch.ones_like(hidden[..., :1])], dim=-1)
        outputs = torch.einsum("rni,roi->rno", phi, last)
        _, noise_std = model.likelihood.mean_and_std(outputs)  # the mean output is output 0
        return CollapsedParts(
            phi=phi.double(),
            mean=mean_w[:, 0].double(),
            var=var_w[:, 0].double(),
            sampled=last[:, 0].double(),
            noise_std=noise_std.double(),
        )


# --- mixtures of Gaussians ----------------------------------------------------------------------

# One home for the mixture's CDF, quantiles and bisection: core.predict.metrics.regression.
_bisect = bisect_quantile
gaussian_mixture_cdf = mixture_cdf
gaussian_mixture_quantiles = mixture_quantiles


# --- sums of uniforms (the box variant) ---------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _signs(m: int) -> np.ndarray:
    return np.array(list(itertools.product((1.0, -1.0), repeat=m)), dtype=np.float64)  # (2^m, m)


@dataclass(frozen=True)
class UniformSums:
    """Independent U_j ~ U(-c_j, c_j), j < m, summed, for N rows at once (halfwidths (N, m), all > 0).

    CDF and density are the alternating sums over the 2^m corners of the box:
    F(t) = sum_s (prod s) (t + s.c)_+^m / (m! prod 2c), f(t) = the same with power m-1 and (m-1)!.
    """

    halfwidths: np.ndarray

    @property
    def m(self) -> int:
        return int(self.halfwidths.shape[1])

    def _corners(self, t: np.ndarray, power: int) -> np.ndarray:
        signs = _signs(self.m)
        shifts = self.halfwidths @ signs.T  # (N, 2^m)
        parity = np.prod(signs, axis=1)
        inner = np.maximum(np.asarray(t, dtype=np.float64)[..., None] + shifts[:, None, :], 0.0)
        return (inner**power) @ parity  # (N, G)

    def cdf(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        if self.m == 0:
            return (t >= 0).astype(np.float64)
        c = self.halfwidths
        value = self._corners(t, self.m) / (math.factorial(self.m) * np.prod(2 * c, axis=1))[:, None]
        total = c.sum(axis=1)[:, None]
        return np.where(t <= -total, 0.0, np.where(t >= total, 1.0, np.clip(value, 0.0, 1.0)))

    def density(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        c = self.halfwidths
        value = self._corners(t, self.m - 1) / (math.factorial(self.m - 1) * np.prod(2 * c, axis=1))[:, None]
        return np.where(np.abs(t) >= c.sum(axis=1)[:, None], 0.0, np.maximum(value, 0.0))


def uniform_sum_cdf(t: np.ndarray, halfwidths: np.ndarray) -> np.ndarray:
    """P(sum_j U_j <= t) for U_j ~ U(-c_j, c_j): t (N, G), halfwidths (N, m)."""
    return UniformSums(np.asarray(halfwidths, dtype=np.float64)).cdf(t)


def uniform_sum_density(t: np.ndarray, halfwidths: np.ndarray) -> np.ndarray:
    """Density of sum_j U_j, U_j ~ U(-c_j, c_j), at t: (N, G) for halfwidths (N, m), m >= 1."""
    return UniformSums(np.asarray(halfwidths, dtype=np.float64)).density(t)


def condition_number(halfwidths: np.ndarray) -> float:
    c = np.asarray(halfwidths, dtype=np.float64)
    m = len(c)
    return float(np.exp(m * np.log(2 * c.sum()) - math.lgamma(m + 1) - np.log(c).sum()))


# --- the two predictives ----------------------------------------------------------------------


@dataclass
class CollapsedPredictive:
    """Gaussian variant: an equal-weight mixture of R Gaussians per input (standardised units
    unless `unstandardised` was applied)."""

    mean_per_draw: np.ndarray  # (R, n)
    var_per_draw: np.ndarray  # (R, n): collapsed weight variance + noise variance
    ensemble_mean_per_draw: np.ndarray  # (R, n): the same draws with sampled last-layer weights
    variant: str = "gaussian"

    @property
    def std_per_draw(self) -> np.ndarray:
        return np.sqrt(self.var_per_draw)

    @property
    def mean(self) -> np.ndarray:
        return self.mean_per_draw.mean(axis=0)

    @property
    def variance(self) -> np.ndarray:
        return self.mean_per_draw.var(axis=0) + self.var_per_draw.mean(axis=0)

    def log_density(self, y_grid: np.ndarray) -> np.ndarray:
        """log p(y | x_i) for each input i and each grid value: (n, G)."""
        y = np.asarray(y_grid, dtype=np.float64).reshape(1, 1, -1)
        mean = self.mean_per_draw.astype(np.float64)[..., None]
        var = self.var_per_draw.astype(np.float64)[..., None]
        log_terms = -0.5 * (LOG_2PI + np.log(var) + (y - mean) ** 2 / var)
        top = log_terms.max(axis=0)
        return top + np.log(np.exp(log_terms - top).mean(axis=0))

    def mixture_density(self, y_grid: np.ndarray) -> np.ndarray:
        """p(y | x_i) on a grid of y values: (n, G)."""
        return np.exp(self.log_density(y_grid))

    def log_likelihood_per_point(self, y: np.ndarray) -> np.ndarray:
        """log p(y_i | x_i) for one target per input."""
        y = np.asarray(y, dtype=np.float64)[None]
        std = self.std_per_draw
        log_terms = -0.5 * (LOG_2PI + 2 * np.log(std) + ((y - self.mean_per_draw) / std) ** 2)
        top = log_terms.max(axis=0)
        return top + np.log(np.exp(log_terms - top).mean(axis=0))

    def cdf(self, y: np.ndarray) -> np.ndarray:
        """F(y_i | x_i), one value per input."""
        return gaussian_mixture_cdf(self.mean_per_draw, self.std_per_draw, np.asarray(y, dtype=np.float64))

    def quantiles(self, levels: Sequence[float]) -> list[np.ndarray]:
        return gaussian_mixture_quantiles(self.mean_per_draw, self.std_per_draw, levels)

    def unstandardised(self, target_mean: float, target_std: float) -> "CollapsedPredictive":
        s, m = float(target_std), float(target_mean)
        return replace(
            self,
            mean_per_draw=self.mean_per_draw * s + m,
            var_per_draw=self.var_per_draw * s * s,
            ensemble_mean_per_draw=self.ensemble_mean_per_draw * s + m,
        )


@dataclass
class BoxCollapsedPredictive:
    """Box variant: per draw and input, centre + a sum of independent centred uniforms."""

    centre_per_draw: np.ndarray  # (R, n): sampled rest + means of the collapsed terms
    halfwidths: np.ndarray  # (R, n, m): collapsed terms, then the two noise halves; 0 = unused slot
    ensemble_mean_per_draw: np.ndarray  # (R, n)
    variant: str = "box"

    @property
    def mean_per_draw(self) -> np.ndarray:
        return self.centre_per_draw

    @property
    def var_per_draw(self) -> np.ndarray:
        return (self.halfwidths**2).sum(-1) / 3

    @property
    def std_per_draw(self) -> np.ndarray:
        return np.sqrt(self.var_per_draw)

    @property
    def mean(self) -> np.ndarray:
        return self.centre_per_draw.mean(axis=0)

    @property
    def variance(self) -> np.ndarray:
        return self.centre_per_draw.var(axis=0) + self.var_per_draw.mean(axis=0)

    @property
    def collapsed_terms(self) -> np.ndarray:
        """Number of last-layer terms integrated out, per draw and input."""
        return (self.halfwidths[..., :-2] > 0).sum(-1)

    def _groups(self) -> list[tuple[np.ndarray, UniformSums]]:
        """Rows (draw x input, flattened) grouped by how many slots they use, with their sums."""
        cached = getattr(self, "_group_cache", None)
        if cached is None:
            R, n, _ = self.halfwidths.shape
            flat = self.halfwidths.reshape(R * n, -1)
            used = flat > 0
            counts = used.sum(-1)
            cached = []
            for m in np.unique(counts):
                rows = np.nonzero(counts == m)[0]
                cached.append((rows, UniformSums(flat[rows][used[rows]].reshape(len(rows), int(m)))))
            self._group_cache = cached
        return cached

    def _per_draw(self, name: str, t: np.ndarray) -> np.ndarray:
        """UniformSums.<name>(t - centre) per draw and input: (R, n, G)."""
        R, n, _ = self.halfwidths.shape
        flat_t = (np.broadcast_to(t, (R, n, t.shape[-1])) - self.centre_per_draw[..., None]).reshape(R * n, -1)
        result = np.empty(flat_t.shape, dtype=np.float64)
        for rows, sums in self._groups():
            result[rows] = getattr(sums, name)(flat_t[rows])
        return result.reshape(R, n, -1)

    def cdf(self, y: np.ndarray) -> np.ndarray:
        """F(y_i | x_i), one value per input."""
        y = np.asarray(y, dtype=np.float64).reshape(1, -1, 1)
        return self._per_draw("cdf", y)[..., 0].mean(axis=0)

    def mixture_density(self, y_grid: np.ndarray) -> np.ndarray:
        """p(y | x_i) on a grid of y values: (n, G)."""
        y = np.asarray(y_grid, dtype=np.float64).reshape(1, 1, -1)
        return self._per_draw("density", y).mean(axis=0)

    def log_density(self, y_grid: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self.mixture_density(y_grid))

    def log_likelihood_per_point(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(1, -1, 1)
        with np.errstate(divide="ignore"):
            return np.log(self._per_draw("density", y)[..., 0].mean(axis=0))

    def quantiles(self, levels: Sequence[float]) -> list[np.ndarray]:
        total = self.halfwidths.sum(-1)
        low = (self.centre_per_draw - total).min(axis=0)
        high = (self.centre_per_draw + total).max(axis=0)
        return [_bisect(self.cdf, low, high, float(level)) for level in levels]

    def unstandardised(self, target_mean: float, target_std: float) -> "BoxCollapsedPredictive":
        s, m = float(target_std), float(target_mean)
        return replace(
            self,
            centre_per_draw=self.centre_per_draw * s + m,
            halfwidths=self.halfwidths * s,
            ensemble_mean_per_draw=self.ensemble_mean_per_draw * s + m,
        )


def collapsed_predict(
    model_or_run: Any,
    x: Any,
    samples: int = 10,
    seed: int = 0,
    variant: str = "gaussian",
    box_terms: int = DEFAULT_BOX_TERMS,
) -> CollapsedPredictive | BoxCollapsedPredictive:
    """The collapsed predictive at inputs x (standardised units); variant "gaussian" or "box"."""
    variant = check_variant(variant)
    parts = collapsed_parts(model_or_run, x, samples, seed)
    ensemble = torch.einsum("rni,ri->rn", parts.phi, parts.sampled).cpu().numpy()
    if variant == "gaussian":
        mean = torch.einsum("rni,ri->rn", parts.phi, parts.mean)
        weight_var = torch.einsum("rni,ri->rn", parts.phi**2, parts.var)
        return CollapsedPredictive(
            mean_per_draw=mean.cpu().numpy(),
            var_per_draw=(weight_var + parts.noise_std**2).cpu().numpy(),
            ensemble_mean_per_draw=ensemble,
        )
    if isinstance(box_terms, bool) or not isinstance(box_terms, int) or not 0 <= box_terms <= 10:
        raise PredictionError(f"box_terms: collapse between 0 and 10 last-layer terms, got {box_terms!r}")
    return _box_predictive(parts, ensemble, box_terms)


def _box_predictive(parts: CollapsedParts, ensemble: np.ndarray, box_terms: int) -> BoxCollapsedPredictive:
    phi = parts.phi.cpu().numpy()  # (R, n, k)
    centres = phi * parts.mean.cpu().numpy()[:, None, :]
    sampled = phi * parts.sampled.cpu().numpy()[:, None, :]
    widths = np.abs(phi) * np.sqrt(3 * parts.var.cpu().numpy())[:, None, :]
    noise_half = np.sqrt(6.0) * parts.noise_std.cpu().numpy() / 2  # triangular = two uniforms of half this width
    R, n, k = phi.shape
    order = np.argsort(-widths, axis=-1)[..., :box_terms]
    halfwidths = np.zeros((R, n, box_terms + 2))
    halfwidths[..., -2] = halfwidths[..., -1] = noise_half
    collapsed = np.zeros((R, n, k), dtype=bool)
    # Widest terms first, each only while the corner sum stays well conditioned.
    for slot in range(min(box_terms, k)):
        index = order[..., slot]
        candidate = np.take_along_axis(widths, index[..., None], -1)[..., 0]
        trial = halfwidths.copy()
        trial[..., slot] = candidate
        ok = candidate > 0
        c = np.where(trial > 0, trial, 1.0)
        m = (trial > 0).sum(-1)
        log_condition = m * np.log(2 * trial.sum(-1)) - gammaln(m + 1.0) - np.log(c).sum(-1)
        ok &= log_condition < np.log(MAX_CONDITION)
        halfwidths[..., slot] = np.where(ok, candidate, 0.0)
        np.put_along_axis(collapsed, index[..., None], ok[..., None], -1)
    centre = np.where(collapsed, centres, sampled).sum(-1)
    return BoxCollapsedPredictive(centre_per_draw=centre, halfwidths=halfwidths, ensemble_mean_per_draw=ensemble)


# --- metrics ----------------------------------------------------------------------------------


def evaluate_collapsed(
    model_or_run: Any,
    dataset,
    variant: str = "gaussian",
    samples: int = 10,
    seed: int = 0,
    levels: Sequence[float] = COVERAGE_LEVELS,
) -> dict[str, Any]:
    """Test-set RMSE, log-likelihood, interval coverage and width, PIT KS distance and calibration gap
    of the collapsed predictive, original units."""
    from core.predict.metrics.regression import (
        calibration_curve_of_pit,
        central_coverage,
        interval_metrics_of,
        pit_ks_statistic,
        rmse,
    )

    variant = check_variant(variant)
    if dataset.task != "regression":
        raise PredictionError(f"collapsed predictive: {dataset.name} is a classification set; it is for regression")
    predictive = collapsed_predict(model_or_run, dataset.x_test, samples=samples, seed=seed, variant=variant)
    predictive = predictive.unstandardised(dataset.target_mean, dataset.target_std)
    y = dataset.unstandardise(dataset.y_test).astype(np.float64)
    pit = predictive.cdf(y)
    result: dict[str, Any] = {
        "mode": f"collapsed-{variant}" if variant == "box" else "collapsed",
        "variant": variant,
        "samples": int(samples),
        "seed": int(seed),
        "n_test": int(len(y)),
        "rmse": rmse(predictive.mean, y),
        "log_likelihood": float(predictive.log_likelihood_per_point(y).mean()),
        "coverage": {f"{level:g}": central_coverage(pit, level) for level in levels},
        "ensemble_rmse": rmse(predictive.ensemble_mean_per_draw.mean(axis=0), y),
        # The calibration numbers of evaluate's other modes, from the same PIT values.
        "intervals": interval_metrics_of(pit, predictive.quantiles, levels),
        "pit_ks": pit_ks_statistic(pit),
        "calibration_gap": calibration_curve_of_pit(pit)["mean_abs_gap"],
        "warnings": [],
    }
    if variant == "box":
        result["mean_collapsed_terms"] = float(predictive.collapsed_terms.mean())
    return result
