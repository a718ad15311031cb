"""Collapsed predictive for regression (CIBER-style, seed 003; METHODS.md section 5).

Sample the body (every layer but the last, plus the last layer's inclusion
mask for LBBNN) and integrate the last layer's weights out in closed form.
Given draw r with penultimate features phi_r(x) (bias feature 1 appended) and
the last layer's conditional q Gaussian with mean m_r and diagonal variance
S_r (zero where the sampled mask drops a weight), the predictive is

    y | x, r ~ N(phi_r^T m_r, phi_r^T diag(S_r) phi_r + sigma^2)

and the collapsed predictive is the equal-weight mixture over the R draws.
The draws are those of `predict(mode="bma")` with the same seed, so the
plain ensemble of the same samples can be shown beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from core.errors import PredictionError
from core.models.base import SparseLayer
from core.models.likelihoods import HeteroscedasticGaussian
from core.predict.engine import as_inputs, check_samples, forward_draws, resolve_model

LOG_2PI = np.log(2 * np.pi)


def gaussian_last_layer(layer: SparseLayer) -> tuple[Tensor, Tensor]:
    """Mean and variance of the layer's q(w | kept), for families where it is Gaussian."""
    if layer.family == "fnn":
        weight = layer.conditional_mean_weights()
        return weight, torch.zeros_like(weight)
    if hasattr(layer, "weight_mu") and hasattr(layer, "weight_sigma") and layer.family != "horseshoe":
        return layer.weight_mu * layer.fixed_mask, layer.weight_sigma ** 2 * layer.fixed_mask
    if hasattr(layer, "theta") and hasattr(layer, "log_sigma2"):  # sparse variational dropout
        return layer.theta * layer.fixed_mask, layer.log_sigma2.exp() * layer.fixed_mask
    raise PredictionError(f"collapsed predictive: the last layer of family {layer.family!r} has no Gaussian "
                          "q(w | kept); use lbbnn, bnn, bnn-mixture, variational-dense, sparse-vd or fnn")


@dataclass
class CollapsedPredictive:
    """An equal-weight mixture of R Gaussians per input, in standardised units."""

    mean_per_draw: np.ndarray  # (R, n)
    var_per_draw: np.ndarray  # (R, n): collapsed weight variance + noise variance
    ensemble_mean_per_draw: np.ndarray  # (R, n): the same draws with sampled last-layer weights

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


def collapsed_predict(model_or_run: Any, x: Any, samples: int = 10, seed: int = 0) -> CollapsedPredictive:
    model = resolve_model(model_or_run)
    if model.likelihood.task != "regression" or isinstance(model.likelihood, HeteroscedasticGaussian):
        raise PredictionError("collapsed predictive: needs a regression model with the homoscedastic "
                              f"gaussian likelihood, got {model.config.likelihood!r}")
    samples = check_samples(samples)
    with torch.no_grad():
        inputs = as_inputs(model, x)
        draws = model.sample_weights(samples, int(seed))
        mean_w, var_w = gaussian_last_layer(model.layers[-1])
        last = draws[-1]  # (R, 1, in+1); a kept weight is a.s. nonzero, a dropped one exactly 0
        kept = (last != 0).to(last.dtype) if model.layers[-1].has_structure else torch.ones_like(last)
        hidden = forward_draws(model, inputs, draws[:-1]) if len(draws) > 1 else inputs.expand(samples, -1, -1)
        if len(draws) > 1:
            hidden = model.activation(hidden)
        phi = torch.cat([hidden, torch.ones_like(hidden[..., :1])], dim=-1)  # (R, n, in+1)
        mean = torch.einsum("rni,ri->rn", phi, (kept * mean_w)[:, 0])
        weight_var = torch.einsum("rni,ri->rn", phi * phi, (kept * var_w)[:, 0])
        noise_var = model.likelihood.log_noise_std.exp() ** 2
        ensemble = torch.einsum("rni,ri->rn", phi, last[:, 0])
        return CollapsedPredictive(mean_per_draw=mean.double().cpu().numpy(),
                                   var_per_draw=(weight_var + noise_var).double().cpu().numpy(),
                                   ensemble_mean_per_draw=ensemble.double().cpu().numpy())
