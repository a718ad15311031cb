"""LBBNN with low-rank MVN inclusion logits: the closed-form KL, the probit inclusion
probability, the covariance of the logit draws, and the dependence in sampled masks."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from core.errors import ConfigError
from core.models.base import inverse_softplus
from core.models.lbbnn import gaussian_kl
from core.models.lfmvn import LowRankLBBNNLayer, LowRankLBBNNOptions, low_rank_gaussian_kl


def spread_layer(rank: int = 2, seed: int = 0, **options) -> LowRankLBBNNLayer:
    """A small layer with sizeable logit means, factors and diagonal variances."""
    torch.manual_seed(seed)
    layer = LowRankLBBNNLayer(3, 4, LowRankLBBNNOptions(rank=rank, **options))
    with torch.no_grad():
        layer.inclusion_logit.uniform_(-3, 3)
        layer.logit_factor.normal_(0, 0.7)
        layer.logit_diag_rho.copy_(torch.empty(layer.shape).uniform_(inverse_softplus(0.3), inverse_softplus(1.2)))
    return layer


def full_covariance(layer: LowRankLBBNNLayer) -> torch.Tensor:
    factor = layer.logit_factor.detach().double().reshape(-1, layer.options.rank)
    return factor @ factor.T + torch.diag(layer.logit_diag.detach().double().reshape(-1))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_low_rank_kl_equals_the_full_covariance_formula(rank):
    layer = spread_layer(rank)
    sigma = full_covariance(layer)
    xi = layer.inclusion_logit.detach().double().reshape(-1)
    d = xi.numel()
    prior_mean = float(layer.prior_inclusion_logit)
    v = 1.7
    with torch.no_grad():
        layer.logit_prior_variance.fill_(v)
        closed = layer.logit_kl().double()
    diff = xi - prior_mean
    full = 0.5 * (torch.trace(sigma) / v + diff @ diff / v - d + d * math.log(v) - torch.linalg.slogdet(sigma)[1])
    torch.testing.assert_close(closed, full, rtol=1e-4, atol=1e-4)
    reference = kl_divergence(
        MultivariateNormal(xi, sigma),
        MultivariateNormal(torch.full((d,), prior_mean, dtype=torch.float64), v * torch.eye(d, dtype=torch.float64)),
    )
    torch.testing.assert_close(closed, reference, rtol=1e-4, atol=1e-4)


def test_low_rank_kl_is_exact_in_double_precision():
    generator = torch.Generator().manual_seed(1)
    mean = torch.randn(30, generator=generator, dtype=torch.float64)
    factor = torch.randn(30, 2, generator=generator, dtype=torch.float64)
    diag = torch.rand(30, generator=generator, dtype=torch.float64) + 0.1
    prior_mean, prior_var = torch.tensor(-1.0, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    reference = kl_divergence(
        MultivariateNormal(mean, factor @ factor.T + torch.diag(diag)),
        MultivariateNormal(prior_mean.expand(30), prior_var * torch.eye(30, dtype=torch.float64)),
    )
    torch.testing.assert_close(
        low_rank_gaussian_kl(mean, factor, diag, prior_mean, prior_var), reference, rtol=1e-10, atol=1e-10
    )


def test_probit_inclusion_probability_is_close_to_monte_carlo():
    layer = spread_layer()
    with torch.no_grad():
        logits = layer.sample_logits(200_000, torch.Generator().manual_seed(2))
        monte_carlo = torch.sigmoid(logits).mean(0)
        probit = layer.native_statistic()
    variance = layer.logit_variance().detach()
    assert variance.max() > 1.5  # the approximation is tested away from the trivial small-variance case
    assert (probit - monte_carlo).abs().max() < 0.02
    torch.testing.assert_close(layer.inclusion_probability, probit)


def test_logit_draws_have_mean_xi_and_covariance_f_ft_plus_d():
    layer = spread_layer()
    n = 200_000
    with torch.no_grad():
        logits = layer.sample_logits(n, torch.Generator().manual_seed(3)).double().reshape(n, -1)
    centred = logits - logits.mean(0)
    empirical = centred.T @ centred / (n - 1)
    torch.testing.assert_close(logits.mean(0), layer.inclusion_logit.detach().double().reshape(-1), atol=0.02, rtol=0)
    torch.testing.assert_close(empirical, full_covariance(layer), atol=0.05, rtol=0.03)


def test_sampled_masks_carry_the_dependence_between_indicators():
    torch.manual_seed(0)
    layer = LowRankLBBNNLayer(3, 2, LowRankLBBNNOptions(rank=1, init_logit_std=0.05))
    with torch.no_grad():
        layer.inclusion_logit.zero_()
        layer.logit_factor.zero_()
        layer.logit_factor[0, 0, 0], layer.logit_factor[0, 1, 0] = 3.0, 3.0  # one common factor
        layer.logit_factor[1, 0, 0] = -3.0  # ... which this weight loads on with the opposite sign
        draws = layer.sample_weights(50_000, torch.Generator().manual_seed(4))
    included = (draws != 0).double()
    first, same, opposite, independent = (included[:, 0, 0], included[:, 0, 1], included[:, 1, 0], included[:, 1, 1])
    assert torch.corrcoef(torch.stack([first, same]))[0, 1] > 0.3
    assert torch.corrcoef(torch.stack([first, opposite]))[0, 1] < -0.3
    assert abs(torch.corrcoef(torch.stack([first, independent]))[0, 1]) < 0.03


def test_kl_is_logit_kl_plus_slab_kl_weighted_by_inclusion():
    layer = spread_layer()
    with torch.no_grad():
        sigma = layer.weight_sigma
        slab = gaussian_kl(layer.weight_mu, sigma * sigma, layer.log_slab_variance.exp())
        expected = layer.logit_kl() + (layer.inclusion_probability * slab).sum()
        torch.testing.assert_close(layer.kl(), expected)
        torch.manual_seed(0)
        _, fused = layer.forward_with_kl(torch.randn(5, 3))
        torch.testing.assert_close(fused, expected)


def test_fixed_structure_freezes_the_logits_and_zeroes_dropped_weights():
    layer = spread_layer()
    mask = torch.ones(layer.shape)
    mask[:, 0] = 0
    layer.fix_structure(mask)
    assert not any(p.requires_grad for p in layer.parameter_groups()["inclusion"])
    with torch.no_grad():
        draws = layer.sample_weights(100, torch.Generator().manual_seed(5))
        out = layer(torch.randn(7, 3))
    assert torch.all(draws[:, :, 0] == 0) and torch.all(draws[:, :, 1:] != 0)
    assert torch.isfinite(out).all()
    layer.fix_structure(None)
    assert all(p.requires_grad for p in layer.parameter_groups()["inclusion"])


def test_invalid_options_name_the_field():
    with pytest.raises(ConfigError, match="rank"):
        LowRankLBBNNOptions.from_dict({"rank": 0})
    with pytest.raises(ConfigError, match="inclusion_prior"):
        LowRankLBBNNOptions.from_dict({"inclusion_prior": "beta-binomial"})
