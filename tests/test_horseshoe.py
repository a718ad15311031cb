"""Horseshoe BNN: pruning probability, closed-form auxiliary updates, KL terms, node statistics."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import InverseGamma, Normal

from core.models.base import inverse_softplus
from core.models.horseshoe import (
    HorseshoeLayer,
    HorseshoeOptions,
    half_cauchy_scale_kl,
    inverse_gamma_log_scale_kl,
)

N_MC = 200_000


def set_scales(layer: HorseshoeLayer, node_mean, node_std, layer_mean: float, layer_std: float) -> None:
    with torch.no_grad():
        layer.log_node_scale_mu.copy_(torch.as_tensor(node_mean, dtype=torch.float32))
        layer.log_node_scale_rho.copy_(torch.as_tensor([inverse_softplus(s) for s in node_std]))
        layer.log_layer_scale_mu.fill_(layer_mean)
        layer.log_layer_scale_rho.fill_(inverse_softplus(layer_std))
    layer.update_auxiliaries()


def test_pruning_probability_equals_monte_carlo_of_tau_times_v():
    layer = HorseshoeLayer(3, 4)
    set_scales(layer, [-4.0, -3.0, -1.0, 0.5], [0.5, 1.5, 1.0, 0.2], layer_mean=-3.0, layer_std=0.8)
    generator = torch.Generator().manual_seed(0)
    log_tau = layer.log_node_scale_mu.detach() + torch.tensor([0.5, 1.5, 1.0, 0.2]) * torch.randn(
        N_MC, 4, generator=generator)
    log_v = -3.0 + 0.8 * torch.randn(N_MC, 1, generator=generator)
    monte_carlo = (torch.exp(log_tau + log_v) < 1e-3).double().mean(0)
    with torch.no_grad():
        probability = layer.node_scale_statistic().double()
    torch.testing.assert_close(probability, monte_carlo, atol=4e-3, rtol=0)
    assert 0.05 < probability[1] < 0.95  # the check is not only at the trivial ends
    statistic = layer.native_statistic()
    assert statistic.shape == layer.shape and torch.all(statistic == probability.float()[:, None])
    keep = layer.keep_mask()
    assert torch.equal(keep[:, 0], probability < 0.9) and torch.all(keep == keep[:, :1])


def test_update_auxiliaries_gives_the_closed_form_inverse_gamma_rates():
    options = HorseshoeOptions(node_scale=0.7, global_scale=0.2)
    layer = HorseshoeLayer(3, 4, options)
    set_scales(layer, [-1.0, 0.0, 0.5, 1.0], [0.3, 0.6, 0.1, 1.0], layer_mean=-0.5, layer_std=0.4)
    generator = torch.Generator().manual_seed(1)
    log_tau = layer.log_node_scale_mu.detach() + torch.tensor([0.3, 0.6, 0.1, 1.0]) * torch.randn(
        N_MC, 4, generator=generator, dtype=torch.float64)
    expected_inv_tau2 = torch.exp(-2 * log_tau).mean(0)
    torch.testing.assert_close(layer.node_aux_rate.double(), expected_inv_tau2 + 1 / 0.7 ** 2, rtol=0.03, atol=0)
    expected_layer_rate = math.exp(2 * 0.5 + 2 * 0.4 ** 2) + 1 / 0.2 ** 2
    assert float(layer.layer_aux_rate) == pytest.approx(expected_layer_rate, rel=1e-5)


def test_the_auxiliary_update_minimises_the_kl_over_the_rates():
    # q(lam) = IG(1, E[1/a^2] + 1/b^2) is the coordinate-ascent optimum: moving the rate either way raises the KL.
    layer = HorseshoeLayer(3, 4)
    set_scales(layer, [-1.0, 0.0, 0.5, 1.0], [0.3, 0.6, 0.1, 1.0], layer_mean=-0.5, layer_std=0.4)
    with torch.no_grad():
        optimum = layer.kl().item()
        for factor in (0.8, 1.25):
            layer.node_aux_rate.mul_(factor)
            assert layer.kl().item() > optimum
            layer.node_aux_rate.div_(factor)
            layer.layer_aux_rate.mul_(factor)
            assert layer.kl().item() > optimum
            layer.layer_aux_rate.div_(factor)


@pytest.mark.parametrize("mean,std,rate,prior_scale", [(0.3, 0.5, 2.0, 1.0), (-2.0, 1.2, 9.0, 0.5),
                                                        (1.0, 0.2, 1.5, 3.0)])
def test_half_cauchy_scale_kl_matches_monte_carlo(mean, std, rate, prior_scale):
    # u = log a^2 ~ N(mean, std^2), lam ~ IG(1, rate); prior a^2 | lam ~ IG(1/2, 1/lam), lam ~ IG(1/2, 1/b^2).
    q_u = Normal(torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64))
    q_lam = InverseGamma(torch.tensor(1.0, dtype=torch.float64), torch.tensor(rate, dtype=torch.float64))
    torch.manual_seed(2)
    u, lam = q_u.sample((N_MC,)), q_lam.sample((N_MC,))
    log_p_u = InverseGamma(torch.tensor(0.5, dtype=torch.float64), 1 / lam).log_prob(u.exp()) + u  # + log-Jacobian
    log_p_lam = InverseGamma(torch.tensor(0.5, dtype=torch.float64),
                             torch.tensor(1 / prior_scale ** 2, dtype=torch.float64)).log_prob(lam)
    samples = q_u.log_prob(u) + q_lam.log_prob(lam) - log_p_u - log_p_lam
    closed = half_cauchy_scale_kl(torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64),
                                  torch.tensor(rate, dtype=torch.float64),
                                  torch.tensor(prior_scale, dtype=torch.float64))
    standard_error = samples.std() / math.sqrt(N_MC)
    assert abs(float(closed - samples.mean())) < 5 * float(standard_error) + 1e-3
    assert closed >= 0


def test_slab_kl_matches_monte_carlo():
    mean, std, shape, rate = 0.7, 0.4, 2.0, 6.0
    q = Normal(torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64))
    torch.manual_seed(3)
    y = q.sample((N_MC,))
    log_prior = InverseGamma(torch.tensor(shape, dtype=torch.float64),
                             torch.tensor(rate, dtype=torch.float64)).log_prob(y.exp()) + y
    samples = q.log_prob(y) - log_prior
    closed = inverse_gamma_log_scale_kl(*(torch.tensor(v, dtype=torch.float64) for v in (mean, std, shape, rate)))
    assert abs(float(closed - samples.mean())) < 5 * float(samples.std() / math.sqrt(N_MC)) + 1e-3


def test_expected_node_scale_matches_monte_carlo_for_the_regularised_scale():
    layer = HorseshoeLayer(3, 3)
    set_scales(layer, [-3.0, 0.0, 1.5], [0.3, 1.0, 0.7], layer_mean=0.0, layer_std=0.5)
    with torch.no_grad():
        layer.log_slab_mu.fill_(0.5)
        layer.log_slab_rho.fill_(inverse_softplus(0.6))
        draws = torch.exp(layer._draw_log_scale(N_MC, torch.Generator().manual_seed(4))).double()
        expected = layer.expected_node_scale().double()
    standard_error = draws.std(0) / math.sqrt(N_MC)
    assert torch.all((draws.mean(0) - expected).abs() < 5 * standard_error + 1e-4)
    # The slab caps the scale: a large tau v gives s ~ c, well below E[tau v].
    plain = torch.exp(layer.log_node_scale_moments()[0] + 0.5 * layer.log_node_scale_moments()[1] ** 2).detach()
    assert expected[2] < 0.6 * plain[2]


def test_kl_terms_are_true_kls_and_the_output_layer_has_no_shrinkage():
    hidden = HorseshoeLayer(4, 3)
    output = HorseshoeLayer(3, 2, is_output=True)
    assert set(hidden.kl_terms()) == {"weights", "layer_scale", "node_scales", "slab"}
    assert set(output.kl_terms()) == {"weights", "layer_scale"}
    assert not hasattr(output, "log_node_scale_mu") and not hasattr(output, "log_slab_mu")
    assert float(output.layer_prior_scale) == HorseshoeOptions().output_scale
    assert float(hidden.layer_prior_scale) == pytest.approx(HorseshoeOptions().global_scale)
    with torch.no_grad():
        assert all(float(v) >= 0 for v in hidden.kl_terms().values())
        assert torch.all(output.native_statistic() == 0) and torch.all(output.keep_mask())
    plain = HorseshoeLayer(4, 3, HorseshoeOptions(prior="horseshoe"))
    assert "slab" not in plain.kl_terms()


def test_a_shrunk_unit_is_pruned_and_its_weight_norm_reported():
    layer = HorseshoeLayer(4, 3)
    set_scales(layer, [0.0, -15.0, 0.0], [0.05, 0.05, 0.05], layer_mean=-1.0, layer_std=0.05)
    with torch.no_grad():
        keep = layer.keep_mask()
        norms = layer.node_weight_norms()
        mean = layer.mean_weights()
    assert keep[0].all() and not keep[1].any() and keep[2].all()
    torch.testing.assert_close(norms, mean.norm(dim=1))
    assert norms[1] < 1e-5 < norms[0]


def test_forward_scales_the_pre_activation_by_one_node_scale_draw():
    layer = HorseshoeLayer(4, 3, HorseshoeOptions(prior="horseshoe", init_sigma=1e-6))
    set_scales(layer, [0.0, 1.0, -1.0], [0.5, 0.5, 0.5], layer_mean=0.0, layer_std=1e-6)
    x = torch.randn(6, 4)
    with torch.no_grad():
        out = layer(x)
        beta_out = x @ layer.weight_mu[:, :-1].T + layer.weight_mu[:, -1]
    ratio = out / beta_out
    # every example of the minibatch shares the draw of s_k
    torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio), rtol=1e-3, atol=1e-4)


def test_invalid_options_name_the_field():
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="prior"):
        HorseshoeOptions.from_dict({"prior": "cauchy"})
    with pytest.raises(ConfigError, match="global_scale"):
        HorseshoeOptions.from_dict({"global_scale": 0})
