"""Horseshoe BNN: pruning probability, closed-form auxiliary updates, KL terms, node statistics."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor
from torch.distributions import InverseGamma, MultivariateNormal, Normal

from core.errors import ConfigError
from core.models.base import inverse_softplus
from core.models.horseshoe import (
    HorseshoeLayer,
    HorseshoeOptions,
    StructuredHorseshoeLayer,
    half_cauchy_scale_kl,
    inverse_gamma_log_scale_kl,
    inverse_softplus_tensor,
)
from core.models.network import ModelConfig, build_model
from core.models.registry import layer_class
from tests.support import perturb

N_MC = 200_000
PRIORS_UNDER_TEST = ("regularised-horseshoe", "horseshoe")


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
        N_MC, 4, generator=generator
    )
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
        N_MC, 4, generator=generator, dtype=torch.float64
    )
    expected_inv_tau2 = torch.exp(-2 * log_tau).mean(0)
    torch.testing.assert_close(layer.node_aux_rate.double(), expected_inv_tau2 + 1 / 0.7**2, rtol=0.03, atol=0)
    expected_layer_rate = math.exp(2 * 0.5 + 2 * 0.4**2) + 1 / 0.2**2
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


@pytest.mark.parametrize(
    "mean,std,rate,prior_scale", [(0.3, 0.5, 2.0, 1.0), (-2.0, 1.2, 9.0, 0.5), (1.0, 0.2, 1.5, 3.0)]
)
def test_half_cauchy_scale_kl_matches_monte_carlo(mean, std, rate, prior_scale):
    # u = log a^2 ~ N(mean, std^2), lam ~ IG(1, rate); prior a^2 | lam ~ IG(1/2, 1/lam), lam ~ IG(1/2, 1/b^2).
    q_u = Normal(torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64))
    q_lam = InverseGamma(torch.tensor(1.0, dtype=torch.float64), torch.tensor(rate, dtype=torch.float64))
    torch.manual_seed(2)
    u, lam = q_u.sample((N_MC,)), q_lam.sample((N_MC,))
    log_p_u = InverseGamma(torch.tensor(0.5, dtype=torch.float64), 1 / lam).log_prob(u.exp()) + u  # + log-Jacobian
    log_p_lam = InverseGamma(
        torch.tensor(0.5, dtype=torch.float64), torch.tensor(1 / prior_scale**2, dtype=torch.float64)
    ).log_prob(lam)
    samples = q_u.log_prob(u) + q_lam.log_prob(lam) - log_p_u - log_p_lam
    closed = half_cauchy_scale_kl(
        torch.tensor(mean, dtype=torch.float64),
        torch.tensor(std, dtype=torch.float64),
        torch.tensor(rate, dtype=torch.float64),
        torch.tensor(prior_scale, dtype=torch.float64),
    )
    standard_error = samples.std() / math.sqrt(N_MC)
    assert abs(float(closed - samples.mean())) < 5 * float(standard_error) + 1e-3
    assert closed >= 0


def test_slab_kl_matches_monte_carlo():
    mean, std, shape, rate = 0.7, 0.4, 2.0, 6.0
    q = Normal(torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64))
    torch.manual_seed(3)
    y = q.sample((N_MC,))
    log_prior = (
        InverseGamma(torch.tensor(shape, dtype=torch.float64), torch.tensor(rate, dtype=torch.float64)).log_prob(
            y.exp()
        )
        + y
    )
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
    with pytest.raises(ConfigError, match="prior"):
        HorseshoeOptions.from_dict({"prior": "cauchy"})
    with pytest.raises(ConfigError, match="global_scale"):
        HorseshoeOptions.from_dict({"global_scale": 0})


# --- structured variational family ------------------------------------------------------------
STRUCTURED = HorseshoeOptions(variational_family="structured")


def structured_layer(
    in_features: int = 3, out_features: int = 2, options: HorseshoeOptions = STRUCTURED, seed: int = 0
) -> StructuredHorseshoeLayer:
    """A float64 structured layer with every parameter moved off its start, a strong rank-one term included."""
    torch.manual_seed(seed)
    layer = layer_class("horseshoe", options, is_output=False)(in_features, out_features, options).double()
    generator = torch.Generator().manual_seed(seed + 100)

    def normal(*shape: int) -> Tensor:
        return torch.randn(shape, generator=generator, dtype=torch.float64)

    n = in_features + 2
    with torch.no_grad():
        layer.weight_mu.copy_(normal(out_features, in_features + 1))
        layer.log_node_scale_mu.copy_(0.5 * normal(out_features))
        layer.row_std_rho.copy_(
            inverse_softplus_tensor(0.3 + 0.4 * torch.rand(n, generator=generator, dtype=torch.float64))
        )
        layer.row_factor.copy_(0.6 * normal(n))
        layer.column_std_rho.copy_(inverse_softplus_tensor(torch.linspace(0.6, 1.4, out_features, dtype=torch.float64)))
        layer.log_layer_scale_mu.fill_(-0.3)
        layer.log_layer_scale_rho.fill_(inverse_softplus(0.3))
        if layer.regularised:
            layer.log_slab_mu.fill_(0.2)
            layer.log_slab_rho.fill_(inverse_softplus(0.4))
    layer.update_auxiliaries()
    return layer


def dense_unit_covariances(layer: StructuredHorseshoeLayer) -> Tensor:
    """v_k U for every unit, (out, n, n), built densely."""
    psi, h = (t.detach() for t in layer.row_covariance())
    row = torch.diag(psi) + torch.outer(h, h)
    return layer.column_variances().detach()[:, None, None] * row


def joint_draws(layer: StructuredHorseshoeLayer, n: int, seed: int) -> Tensor:
    """n draws of z_k = [beta_k; log tau_k] from the dense N(m_k, v_k U), (n, out, in + 2)."""
    mean = torch.cat([layer.weight_mu.detach(), layer.log_node_scale_mu.detach()[:, None]], dim=1)
    torch.manual_seed(seed)
    return MultivariateNormal(mean, dense_unit_covariances(layer)).sample((n,))


def test_structured_option_builds_structured_hidden_layers_and_a_factorised_output_layer():
    model = build_model(
        ModelConfig(
            in_features=3,
            out_classes=2,
            hidden=(4, 3),
            family="horseshoe",
            family_options={"variational_family": "structured"},
        )
    )
    assert [type(layer) for layer in model.layers] == [
        StructuredHorseshoeLayer,
        StructuredHorseshoeLayer,
        HorseshoeLayer,
    ]
    assert type(HorseshoeLayer(3, 2)) is HorseshoeLayer
    assert type(copy.deepcopy(model.layers[0])) is StructuredHorseshoeLayer
    with pytest.raises(ConfigError, match="variational_family"):
        HorseshoeOptions.from_dict({"variational_family": "full-rank"})


def test_structured_initial_marginal_stds_match_the_factorised_initialisation():
    options = HorseshoeOptions(variational_family="structured", init_sigma=0.02, init_log_scale_std=0.07)
    torch.manual_seed(0)
    layer = StructuredHorseshoeLayer(5, 4, options)
    with torch.no_grad():
        torch.testing.assert_close(layer.weight_sigma, torch.full(layer.shape, 0.02), rtol=1e-5, atol=0)
        torch.testing.assert_close(layer.log_node_scale_std(), torch.full((4,), 0.07), rtol=1e-5, atol=0)
        assert torch.all(layer.row_factor != 0)  # the start is near, not at, the factorised family


@pytest.mark.parametrize("prior", PRIORS_UNDER_TEST)
def test_structured_conditional_pre_activation_moments_match_joint_monte_carlo(prior):
    layer = structured_layer(3, 2, HorseshoeOptions(prior=prior, variational_family="structured"))
    x = torch.tensor([[0.7, -1.2, 0.4]], dtype=torch.float64)
    z = joint_draws(layer, N_MC, seed=1)
    x_aug = torch.cat([x[0], torch.ones(1, dtype=torch.float64)])
    activation = z[..., :-1] @ x_aug  # x.beta_k, (N, out)
    log_tau = z[..., -1]
    with torch.no_grad():
        noise = (log_tau - layer.log_node_scale_mu) / layer.log_node_scale_std()
        mean, var = layer.conditional_pre_activation_moments(x, noise)  # (N, out), (1, out)
    residual = activation - mean
    centred = log_tau - log_tau.mean(0)
    # A Gaussian conditional given log tau: residual mean 0, uncorrelated with log tau, variance `var`.
    assert torch.all(residual.mean(0).abs() < 5 * residual.std(0) / math.sqrt(N_MC))
    assert torch.all((residual * centred).mean(0).abs() < 5 * (residual * centred).std(0) / math.sqrt(N_MC))
    torch.testing.assert_close(residual.square().mean(0), var[0], rtol=0.02, atol=0)
    # The rank-one term matters here: dropping it from the conditional mean leaves a correlated residual.
    assert ((activation - mean.mean(0)) * centred).mean(0).abs().max() > 0.05
    # Marginal over log tau.
    torch.testing.assert_close(activation.mean(0), mean.mean(0), rtol=0, atol=0.02)
    torch.testing.assert_close(activation.var(0), var[0] + mean.var(0), rtol=0.02, atol=0)


def test_structured_forward_matches_x_times_weight_draws_in_mean_and_variance():
    layer = structured_layer(3, 2)
    x = torch.tensor([[0.7, -1.2, 0.4]], dtype=torch.float64)
    calls, repeats = 2000, 50
    with torch.no_grad():
        torch.manual_seed(2)
        forward = torch.stack([layer(x.expand(repeats, -1)) for _ in range(calls)]).reshape(-1, 2)
        weights = layer.sample_weights(100_000, torch.Generator().manual_seed(3))
        direct = weights[:, :, :-1] @ x[0] + weights[:, :, -1]
    torch.testing.assert_close(
        forward.mean(0), direct.mean(0), rtol=0, atol=5 * direct.std(0).max().item() / math.sqrt(calls)
    )
    torch.testing.assert_close(forward.var(0), direct.var(0), rtol=0.1, atol=0)


def test_structured_joint_entropy_equals_the_dense_gaussian_and_the_matrix_normal_formula():
    layer = structured_layer(3, 2)
    covariances = dense_unit_covariances(layer)
    out, n = layer.out_features, layer.in_features + 2
    column = layer.column_variances().detach()
    psi, h = (t.detach() for t in layer.row_covariance())
    full = torch.kron(torch.diag(column), torch.diag(psi) + torch.outer(h, h))  # vec(Z) column by column
    dense = MultivariateNormal(torch.zeros(n * out, dtype=torch.float64), full).entropy()
    formula = (
        n * out / 2 * math.log(2 * math.pi * math.e)
        + n / 2 * torch.log(column).sum()
        + out / 2 * (torch.log(psi).sum() + torch.log1p((h * h / psi).sum()))
    )
    with torch.no_grad():
        entropy = layer.joint_entropy()
    torch.testing.assert_close(entropy, dense)
    torch.testing.assert_close(entropy, formula)
    # A fixed structure: the entropy of each unit's kept betas and its log tau.
    mask = torch.ones(layer.shape, dtype=torch.float64)
    mask[0, 1] = mask[1, 0] = mask[1, 3] = 0
    layer.fix_structure(mask)
    kept = torch.cat([mask, torch.ones(out, 1, dtype=torch.float64)], dim=1).bool()
    dense_kept = sum(
        MultivariateNormal(
            torch.zeros(int(kept[k].sum()), dtype=torch.float64), covariances[k][kept[k]][:, kept[k]]
        ).entropy()
        for k in range(out)
    )
    with torch.no_grad():
        torch.testing.assert_close(layer.joint_entropy(), dense_kept)


def test_structured_weight_and_node_scale_kl_matches_monte_carlo():
    """kl_terms weights + node_scales = E_q[log q(beta, log tau, lam) - log p(beta, log tau, lam)]."""
    options = HorseshoeOptions(variational_family="structured", node_scale=0.8)
    layer = structured_layer(2, 3, options)
    z = joint_draws(layer, N_MC, seed=4)
    beta, log_tau = z[..., :-1], z[..., -1]
    torch.manual_seed(5)
    lam = InverseGamma(torch.ones(3, dtype=torch.float64), layer.node_aux_rate).sample((N_MC,))
    mean = torch.cat([layer.weight_mu.detach(), layer.log_node_scale_mu.detach()[:, None]], dim=1)
    log_q = MultivariateNormal(mean, dense_unit_covariances(layer)).log_prob(z) + InverseGamma(
        torch.ones(3, dtype=torch.float64), layer.node_aux_rate
    ).log_prob(lam)
    tau2 = torch.exp(2 * log_tau)
    log_p = (
        Normal(0.0, 1.0).log_prob(beta).sum(-1)
        + InverseGamma(torch.tensor(0.5, dtype=torch.float64), 1 / lam).log_prob(tau2)
        + torch.log(2 * tau2)
        + InverseGamma(torch.tensor(0.5, dtype=torch.float64), torch.tensor(1 / 0.8**2, dtype=torch.float64)).log_prob(
            lam
        )
    )
    samples = (log_q - log_p).sum(-1)
    with torch.no_grad():
        terms = layer.kl_terms()
    closed = terms["weights"] + terms["node_scales"]
    assert abs(float(closed - samples.mean())) < 5 * float(samples.std() / math.sqrt(N_MC)) + 1e-3
    assert all(float(value) >= 0 for value in terms.values())


def test_structured_family_with_no_rank_one_term_is_the_factorised_family():
    structured = structured_layer(3, 4)
    with torch.no_grad():
        structured.row_factor.zero_()
    structured.update_auxiliaries()
    torch.manual_seed(0)
    factorised = HorseshoeLayer(3, 4).double()
    psi, _ = structured.row_covariance()
    column_std = structured.column_variances().sqrt()
    with torch.no_grad():
        for name in (
            "weight_mu",
            "log_node_scale_mu",
            "log_layer_scale_mu",
            "log_layer_scale_rho",
            "log_slab_mu",
            "log_slab_rho",
        ):
            getattr(factorised, name).copy_(getattr(structured, name))
        factorised.weight_rho.copy_(inverse_softplus_tensor(column_std[:, None] * psi[:-1].sqrt()))
        factorised.log_node_scale_rho.copy_(inverse_softplus_tensor(column_std * psi[-1].sqrt()))
    factorised.update_auxiliaries()
    with torch.no_grad():
        for name, value in factorised.kl_terms().items():
            torch.testing.assert_close(structured.kl_terms()[name], value, msg=name)
        torch.testing.assert_close(structured.mean_weights(), factorised.mean_weights())
        torch.testing.assert_close(structured.native_statistic(), factorised.native_statistic())
        x = torch.randn(5, 3, dtype=torch.float64)
        mean, var = structured.conditional_pre_activation_moments(x, torch.randn(4, dtype=torch.float64))
        torch.testing.assert_close(mean, x @ factorised.weight_mu[:, :-1].T + factorised.weight_mu[:, -1])
        torch.testing.assert_close(
            var, (x * x) @ factorised.weight_sigma[:, :-1].T.square() + factorised.weight_sigma[:, -1].square()
        )


@pytest.mark.parametrize("prior", PRIORS_UNDER_TEST)
def test_structured_mean_weights_match_monte_carlo_of_weight_draws(prior):
    layer = structured_layer(3, 2, HorseshoeOptions(prior=prior, variational_family="structured"))
    n = N_MC
    with torch.no_grad():
        draws = layer.sample_weights(n, torch.Generator().manual_seed(6))
        mean = layer.mean_weights()
        naive = layer.expected_node_scale()[:, None] * layer.weight_mu  # E[s] E[beta], ignoring the correlation
    standard_error = draws.std(0) / math.sqrt(n)
    assert torch.all((draws.mean(0) - mean).abs() < 5 * standard_error + 1e-6)
    assert ((draws.mean(0) - naive).abs() > 10 * standard_error).any()  # the correlation term is visible
    with torch.no_grad():
        target = torch.randn(layer.shape, dtype=torch.float64)
        layer.load_point_estimate(target)
        torch.testing.assert_close(layer.mean_weights(), target)


def test_structured_pruning_uses_the_marginal_of_log_tau():
    layer = structured_layer(3, 3)
    with torch.no_grad():
        layer.log_node_scale_mu.copy_(torch.tensor([-9.0, -6.5, 1.0], dtype=torch.float64))
        mean, std = layer.log_node_scale_moments()
        statistic = layer.native_statistic()
    z = joint_draws(layer, N_MC, seed=7)
    torch.manual_seed(8)
    log_v = -0.3 + 0.3 * torch.randn(N_MC, 1, dtype=torch.float64)
    monte_carlo = (z[..., -1] + log_v < math.log(1e-3)).double().mean(0)
    torch.testing.assert_close(statistic[:, 0], monte_carlo, atol=4e-3, rtol=0)
    assert 0.05 < statistic[1, 0] < 0.95 and torch.all(statistic == statistic[:, :1])


def test_structured_model_round_trips_through_the_state_dict():
    def model(seed: int):
        torch.manual_seed(seed)
        return build_model(
            ModelConfig(
                in_features=3,
                out_classes=2,
                hidden=(4,),
                family="horseshoe",
                family_options={"variational_family": "structured"},
            )
        )

    source, target = model(0), model(1)
    with torch.no_grad():
        for param in source.parameters():
            param.add_(0.1 * torch.randn_like(param))
    source.update_auxiliaries()
    target.load_state_dict(source.state_dict())
    with torch.no_grad():
        for a, b in zip(source.mean_weights(), target.mean_weights()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for a, b in zip(source.sample_weights(3, seed=7), target.sample_weights(3, seed=7)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(source.kl(), target.kl(), rtol=0, atol=0)
    assert "layers.0.row_factor" in source.state_dict() and "layers.1.weight_rho" in source.state_dict()


def test_structured_model_trains_on_two_moons_without_nan_and_its_loss_goes_down():
    from core.train import TrainConfig, train

    generator = torch.Generator().manual_seed(0)
    n = 128
    angle = torch.rand(n, generator=generator) * math.pi
    labels = torch.randint(0, 2, (n,), generator=generator)
    x = torch.stack([torch.cos(angle) - labels, torch.sin(angle) * (1 - 2 * labels) + 0.5 * labels], 1)
    x = x + 0.1 * torch.randn(x.shape, generator=generator)
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(
            in_features=2,
            out_classes=2,
            hidden=(16,),
            family="horseshoe",
            family_options={"variational_family": "structured"},
        )
    )
    result = train(model, x, labels, TrainConfig(epochs=8, batch_size=32), seed=0)
    losses = [record["loss"] for record in result.history]
    data_terms = [record["data_term"] for record in result.history]
    assert all(math.isfinite(value) for value in losses)
    assert losses[-1] < 0.9 * losses[0] and data_terms[-1] < 0.75 * data_terms[0]
    with torch.no_grad():
        assert all(torch.isfinite(w).all() for w in model.mean_weights())
        accuracy = (model.forward_with_weights(x, model.mean_weights()).argmax(-1) == labels).double().mean()
    assert accuracy > 0.75


# --- the training step's KL surrogate -----------------------------------------------------------
def _randomised(layer: HorseshoeLayer, seed: int) -> HorseshoeLayer:
    perturb(layer, seed, scale=0.3)
    return layer


@pytest.mark.parametrize("prior", PRIORS_UNDER_TEST)
@pytest.mark.parametrize(
    "family,is_output", [("factorised", False), ("factorised", True), ("structured", False)]
)  # output layers are factorised
def test_kl_gradient_surrogate_has_the_gradient_of_the_kl_but_not_its_value(family, prior, is_output):
    options = HorseshoeOptions(prior=prior, variational_family=family)
    layer = layer_class("horseshoe", options, is_output=is_output)(4, 3, options, is_output=is_output).double()
    layer = _randomised(layer, seed=3)
    parameters = [p for p in layer.parameters() if p.requires_grad]
    exact = torch.autograd.grad(layer.kl(), parameters)
    surrogate_value = layer.kl_gradient_surrogate()
    surrogate = torch.autograd.grad(surrogate_value, parameters)
    for parameter_grad, surrogate_grad in zip(exact, surrogate):
        assert torch.allclose(parameter_grad, surrogate_grad, rtol=1e-10, atol=1e-12)
    assert not torch.isclose(surrogate_value, layer.kl())  # the dropped terms are not zero
    x = torch.randn(5, 4, dtype=torch.float64)
    torch.manual_seed(0)
    out_exact, kl_exact = layer.forward_with_kl(x)
    torch.manual_seed(0)
    out_surrogate, _ = layer.forward_with_kl(x, kl_value=False)
    assert torch.equal(out_exact, out_surrogate) and torch.isclose(kl_exact, layer.kl())
    torch.manual_seed(0)
    assert torch.allclose(layer(x), out_exact)  # the fused path draws what forward() draws


@pytest.mark.parametrize("prior", PRIORS_UNDER_TEST)
def test_fused_training_forward_equals_autograd_in_values_and_gradients(prior):
    options = HorseshoeOptions(prior=prior)
    layer = _randomised(layer_class("horseshoe", options, is_output=False)(5, 4, options).double(), seed=7)
    parameters = [p for p in layer.parameters() if p.requires_grad]
    x = torch.randn(6, 5, dtype=torch.float64)
    results = []
    for fused in (True, False):
        torch.manual_seed(1)
        out, kl = layer.forward_with_kl(x) if fused else (layer(x), layer.kl())
        loss = out.pow(2).sum() * 0.3 + out.sum() + 0.7 * kl
        results.append((out.detach(), kl.detach(), torch.autograd.grad(loss, parameters)))
    (out_f, kl_f, grads_f), (out_a, kl_a, grads_a) = results
    assert torch.allclose(out_f, out_a) and torch.allclose(kl_f, kl_a)
    for g_f, g_a in zip(grads_f, grads_a):
        assert torch.allclose(g_f, g_a, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("prior", PRIORS_UNDER_TEST)
@pytest.mark.parametrize("is_output", [False, True])
def test_step_forward_has_the_values_and_gradients_of_the_autograd_formula(prior, is_output):
    """The step's path (kl_value=False: the scales and their KL's gradient in one Function) against
    forward() and kl() under autograd: the same outputs bit for bit, the same gradients."""
    options = HorseshoeOptions(prior=prior)
    layer = _randomised(HorseshoeLayer(5, 4, options, is_output=is_output).double(), seed=11)
    parameters = [p for p in layer.parameters() if p.requires_grad]
    x = torch.randn(6, 5, dtype=torch.float64)
    results = []
    for step_path in (True, False):
        torch.manual_seed(2)
        out, kl = layer.forward_with_kl(x, kl_value=False) if step_path else (layer(x), layer.kl())
        loss = out.pow(2).sum() * 0.3 + out.sum() + 0.7 * kl
        results.append((out.detach(), kl.detach(), torch.autograd.grad(loss, parameters)))
    (out_s, kl_s, grads_s), (out_a, _, grads_a) = results
    assert torch.allclose(out_s, out_a, rtol=1e-12, atol=0) and kl_s == 0  # a surrogate: gradient, no value
    for name, g_s, g_a in zip([n for n, p in layer.named_parameters() if p.requires_grad], grads_s, grads_a):
        assert torch.allclose(g_s, g_a, rtol=1e-9, atol=1e-12), name


@pytest.mark.parametrize("regularised,has_nodes", [(True, True), (False, True), (False, False)])
def test_fused_scales_pass_gradcheck(regularised, has_nodes):
    from core.models.horseshoe_fused import HorseshoeScales

    generator = torch.Generator().manual_seed(5)

    def normal(*shape, requires_grad=True):
        return torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_(requires_grad)

    out = 3
    layer_mu, layer_rho = normal(), normal()
    node_mu, node_rho = (normal(out), normal(out)) if has_nodes else (None, None)
    slab_mu, slab_rho = (normal(), normal()) if regularised else (None, None)
    eps_layer, eps_node = normal(1, requires_grad=False), normal(out, requires_grad=False) if has_nodes else None
    eps_slab = normal(1, requires_grad=False) if regularised else None
    rates = (
        torch.tensor(1.7, dtype=torch.float64),
        torch.rand(out, generator=generator, dtype=torch.float64) + 0.5 if has_nodes else None,
    )
    slab_prior = (
        (torch.tensor(2.0, dtype=torch.float64), torch.tensor(6.0, dtype=torch.float64))
        if regularised
        else (None, None)
    )
    weights = torch.randn(out, generator=generator, dtype=torch.float64)

    def function(*free):
        values = iter(free)
        args = [
            next(values) if a is not None else None for a in (layer_mu, layer_rho, node_mu, node_rho, slab_mu, slab_rho)
        ]
        scale, _ = HorseshoeScales.apply(*args, eps_layer, eps_node, eps_slab, *rates, *slab_prior, out)
        # The KL output is a surrogate (value 0, a gradient): finite differences cannot check it; the
        # test above checks its gradient against kl()'s under autograd.
        return (scale * weights).sum()

    free = [a for a in (layer_mu, layer_rho, node_mu, node_rho, slab_mu, slab_rho) if a is not None]
    assert torch.autograd.gradcheck(function, free)
