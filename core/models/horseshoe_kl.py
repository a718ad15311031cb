"""The closed-form KL terms of the horseshoe's scales (core/models/horseshoe.py has the model).

KL(q || p) is closed form: Gaussian KL for beta; for a scale a with
u = log a^2 ~ N(m, s^2) and q(lam) = IG(1, r),
    E_q[log q(u) - log p(u | lam)] = -1/2 log(2 pi e s^2) + 1/2 E[log lam] + lgamma(1/2)
                                     + m / 2 + exp(-m + s^2 / 2) E[1/lam],
with E[1/lam] = 1/r and E[log lam] = log r + euler_gamma, plus
KL(IG(1, r) || IG(1/2, 1/b^2)); for c^2 with log c^2 ~ N(m, s^2),
    E_q[log p(log c^2)] = c_a log c_b - lgamma(c_a) - c_a m - c_b exp(-m + s^2 / 2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from core.models.distributions import normal_entropy

EULER_GAMMA = 0.5772156649015329
LGAMMA_HALF = math.lgamma(0.5)


def inverse_gamma_kl(shape_q: Tensor | float, rate_q: Tensor, shape_p: Tensor | float, rate_p: Tensor) -> Tensor:
    """KL(IG(shape_q, rate_q) || IG(shape_p, rate_p)) (= the KL of the Gamma laws of 1/x)."""
    shape_q = torch.as_tensor(shape_q, dtype=rate_q.dtype, device=rate_q.device)
    shape_p = torch.as_tensor(shape_p, dtype=rate_q.dtype, device=rate_q.device)
    return (
        (shape_q - shape_p) * torch.digamma(shape_q)
        - torch.lgamma(shape_q)
        + torch.lgamma(shape_p)
        + shape_p * (torch.log(rate_q) - torch.log(rate_p))
        + shape_q * (rate_p - rate_q) / rate_q
    )


def half_cauchy_scale_kl(log_sq_mean: Tensor, log_sq_std: Tensor, aux_rate: Tensor, prior_scale: Tensor) -> Tensor:
    """KL(q(u) q(lam) || p(u | lam) p(lam)) for u = log a^2, a ~ C+(0, b) by its IG auxiliary.

    q(u) = N(log_sq_mean, log_sq_std^2), q(lam) = IG(1, aux_rate), b = prior_scale. Elementwise.
    """
    expected_inv_lam = 1.0 / aux_rate
    expected_log_lam = torch.log(aux_rate) + EULER_GAMMA
    scale_term = (
        -normal_entropy(log_sq_std)
        + 0.5 * expected_log_lam
        + LGAMMA_HALF
        + 0.5 * log_sq_mean
        + torch.exp(-log_sq_mean + 0.5 * log_sq_std * log_sq_std) * expected_inv_lam
    )
    aux_term = inverse_gamma_kl(1.0, aux_rate, 0.5, 1.0 / (prior_scale * prior_scale))
    return scale_term + aux_term


def half_cauchy_scale_kl_gradient_part(log_sq_mean: Tensor, log_sq_std: Tensor, aux_rate: Tensor) -> Tensor:
    """half_cauchy_scale_kl without its terms that carry no gradient (constants, and q(lam), set in
    closed form): the same gradient in log_sq_mean and log_sq_std, a different value."""
    return 0.5 * log_sq_mean - torch.log(log_sq_std) + torch.exp(0.5 * log_sq_std * log_sq_std - log_sq_mean) / aux_rate


def inverse_gamma_log_scale_kl_gradient_part(log_mean: Tensor, log_std: Tensor, shape: Tensor, rate: Tensor) -> Tensor:
    """inverse_gamma_log_scale_kl without its constant terms: the same gradient, a different value."""
    return shape * log_mean - torch.log(log_std) + rate * torch.exp(0.5 * log_std * log_std - log_mean)


def inverse_gamma_log_scale_kl(log_mean: Tensor, log_std: Tensor, shape: Tensor, rate: Tensor) -> Tensor:
    """KL(N(log_mean, log_std^2) on y = log x || law of log x for x ~ IG(shape, rate))."""
    expected_log_prior = (
        shape * torch.log(rate)
        - torch.lgamma(shape)
        - shape * log_mean
        - rate * torch.exp(-log_mean + 0.5 * log_std * log_std)
    )
    return -normal_entropy(log_std) - expected_log_prior
