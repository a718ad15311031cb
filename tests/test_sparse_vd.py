"""Sparse variational dropout: the KL approximation against the true KL, log alpha, pruning direction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from core.models.sparse_vd import LOG_ALPHA_MAX, SparseVDLayer, sparse_vd_kl


def expected_log_abs_noise(log_alpha: float) -> float:
    """E log|e| for e ~ N(1, alpha), by quadrature (split at the log singularity)."""
    alpha = math.exp(log_alpha)

    def integrand(e: float) -> float:
        return math.log(abs(e)) * math.exp(-((e - 1) ** 2) / (2 * alpha)) / math.sqrt(2 * math.pi * alpha)

    return sum(integrate.quad(integrand, a, b, limit=200)[0] for a, b in ((-np.inf, 0.0), (0.0, np.inf)))


def test_kl_vanishes_for_large_alpha_and_grows_as_log_alpha_falls():
    grid = torch.linspace(-8, 8, 161, dtype=torch.float64)
    kl = sparse_vd_kl(grid)
    assert abs(float(sparse_vd_kl(torch.tensor(8.0, dtype=torch.float64)))) < 1e-3
    assert torch.all(kl[:-1] > kl[1:])
    assert torch.all(kl > 0)
    # For small alpha the KL behaves like -0.5 log alpha + const (a sharp q against log-uniform).
    slope = (kl[0] - kl[10]) / (grid[0] - grid[10])
    assert slope == pytest.approx(-0.5, abs=0.02)


def test_kl_approximation_matches_the_true_kl_up_to_a_constant():
    # Molchanov et al. (2017): -KL(q || log-uniform) = 0.5 log alpha - E log|e| + C, e ~ N(1, alpha).
    grid = np.linspace(-6, 6, 13)
    true_neg_kl = np.array([0.5 * la - expected_log_abs_noise(la) for la in grid])
    approx_neg_kl = -sparse_vd_kl(torch.tensor(grid)).numpy()
    residual = approx_neg_kl - true_neg_kl
    constant = residual.mean()
    assert np.abs(residual - constant).max() < 0.01


def test_log_alpha_is_log_sigma2_minus_log_theta2_clipped():
    layer = SparseVDLayer(3, 2)
    with torch.no_grad():
        layer.theta.copy_(torch.tensor([[0.5, -0.1, 1e-6, 2.0], [1.0, 0.0, 0.3, -0.3]]))
        layer.log_sigma2.copy_(torch.tensor([[-3.0, -6.0, 0.0, -30.0], [-1.0, -10.0, -2.0, -2.0]]))
        log_alpha = layer.native_statistic()
    expected = (layer.log_sigma2 - torch.log(layer.theta.square())).clamp(-8, 8).detach()
    torch.testing.assert_close(log_alpha, expected)
    assert log_alpha[0, 2] == LOG_ALPHA_MAX and log_alpha[1, 1] == LOG_ALPHA_MAX and log_alpha[0, 3] == -8
    keep = layer.keep_mask()
    torch.testing.assert_close(keep, expected < 3)
    assert keep.dtype == torch.bool


def test_sampled_weights_have_variance_sigma2_and_kl_counts_only_kept_weights():
    layer = SparseVDLayer(4, 3)
    with torch.no_grad():
        layer.log_sigma2.uniform_(-4, 0)
        draws = layer.sample_weights(50_000, torch.Generator().manual_seed(0))
    torch.testing.assert_close(draws.var(0), layer.log_sigma2.exp().detach(), rtol=0.05, atol=0)
    mask = torch.ones(layer.shape)
    mask[0] = 0
    with torch.no_grad():
        full = layer.kl()
        per_weight = sparse_vd_kl(layer.log_alpha())
        layer.fix_structure(mask)
        assert float(layer.kl()) == pytest.approx(float(full - per_weight[0].sum()), rel=1e-5)
        assert torch.all(layer.sample_weights(5)[:, 0] == 0) and torch.all(layer.mean_weights()[0] == 0)


def test_load_point_estimate_sets_theta():
    layer = SparseVDLayer(3, 2)
    weight = torch.randn(2, 4)
    layer.load_point_estimate(weight)
    torch.testing.assert_close(layer.mean_weights().detach(), weight)
    assert set(layer.parameter_groups()) == {"weights", "scales"}
