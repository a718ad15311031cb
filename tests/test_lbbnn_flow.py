"""`lbbnn-flow` (Skaaret-Lund, Storvik & Hubin 2024) against truth: the coupling flow's log-determinant
against autograd's Jacobian, the KL bound against a Monte Carlo estimate computed from densities, the
reduction to mean-field LBBNN at z = 1, E[z] against plain Monte Carlo, and a short training that learns."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Bernoulli, Normal

from core.errors import ConfigError
from core.models.flows import CouplingFlow
from core.models.lbbnn import LBBNNLayer, LBBNNOptions
from core.models.lbbnn_flow import LBBNNFlowLayer, LBBNNFlowOptions
from core.models.network import BayesianMLP, ModelConfig
from tests.support import perturb


def _coupling_reference(coupling, z: torch.Tensor) -> torch.Tensor:
    """One Real NVP coupling from its parameters (Dinh, Sohl-Dickstein & Bengio 2017): keep the masked part,
    move the rest."""
    m = coupling.mask.to(z.dtype)
    h = torch.tanh((z * m) @ coupling.hidden_weight.T + coupling.hidden_bias)
    s = (h @ coupling.scale_weight.T + coupling.scale_bias) * (1 - m)
    t = (h @ coupling.shift_weight.T + coupling.shift_bias) * (1 - m)
    return z * m + (1 - m) * (z * torch.exp(s) + t), s.sum(-1)


def _flow_reference(flow, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_det = torch.zeros(z.shape[:-1], dtype=z.dtype)
    for coupling in flow.couplings:
        z, step = _coupling_reference(coupling, z)
        log_det = log_det + step
    return z, log_det


def independent_flow_forward_and_kl(layer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The training pre-activation and the one-draw KL bound of an lbbnn-flow layer from its parameters and
    the papers' formulas, drawing the noise in the layer's order from the global generator: z per example,
    the pre-activation noise, then the KL's z and the noise of the reverse model's input."""
    mu, sigma = layer.weight_mu, torch.nn.functional.softplus(layer.weight_rho)
    alpha = torch.sigmoid(layer.inclusion_logit)
    z_sigma = torch.nn.functional.softplus(layer.z_rho)
    ones = torch.ones(len(x), 1, dtype=x.dtype)
    z, _ = _flow_reference(layer.z_flow, layer.z_mean + z_sigma * torch.randn(x.shape, dtype=x.dtype))
    # w_ij = gamma_ij (z_j mu_ij + sigma_ij eps): given z, mean alpha z mu,
    # variance alpha sigma^2 + alpha (1 - alpha) z^2 mu^2
    x_aug, z_aug = torch.cat([x, ones], 1), torch.cat([z, ones], 1)
    mean = (x_aug * z_aug) @ (alpha * mu).T
    var = (x_aug**2) @ (alpha * sigma**2).T + (x_aug * z_aug) ** 2 @ (alpha * (1 - alpha) * mu**2).T
    output = mean + var.sqrt() * torch.randn(len(x), layer.out_features, dtype=x.dtype)
    # the bound: KL(q(W, gamma | z) || p) + log q(z) - log r(z | W), one z
    eps = torch.randn(layer.in_features, dtype=x.dtype)
    z0 = layer.z_mean + z_sigma * eps
    z, log_det_q = _flow_reference(layer.z_flow, z0)
    log_q = Normal(layer.z_mean, z_sigma).log_prob(z0).sum() - log_det_q
    z_aug = torch.cat([z, torch.ones(1, dtype=x.dtype)])
    slab = torch.distributions.kl_divergence(
        Normal(z_aug * mu, sigma), Normal(0.0, layer.log_slab_variance.exp().sqrt())
    )
    psi = torch.sigmoid(layer.prior_inclusion_logit)
    inclusion = torch.distributions.kl_divergence(Bernoulli(alpha), Bernoulli(psi.expand_as(alpha)))
    a_mean = (alpha * z_aug * mu)[:, :-1] @ layer.r_c
    a_var = (alpha * sigma**2 + alpha * (1 - alpha) * (z_aug * mu) ** 2)[:, :-1] @ layer.r_c**2
    a = torch.tanh(a_mean + a_var.sqrt() * torch.randn(layer.out_features, dtype=x.dtype)).mean()
    z_b, log_det_r = _flow_reference(layer.r_flow, z)
    log_r = Normal(layer.r_b1 * a, torch.exp(0.5 * layer.r_b2 * a)).log_prob(z_b).sum() + log_det_r
    return output, (alpha * slab).sum() + inclusion.sum() + log_q - log_r


def _shake(module: torch.nn.Module, seed: int, scale: float) -> None:
    """Move every parameter of a flow off its initial value (the output maps off zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype))


def _perturbed_layer(in_features=3, out_features=2, seed=0, scale=0.3, **options) -> LBBNNFlowLayer:
    torch.manual_seed(seed)
    layer = LBBNNFlowLayer(in_features, out_features, LBBNNFlowOptions(**options)).double()
    perturb(layer, seed=seed + 1, scale=scale)  # the couplings' output maps leave zero: a nonlinear flow
    return layer


@pytest.mark.parametrize("dim,length", [(1, 2), (3, 3), (4, 2)])
def test_flow_log_determinant_equals_autograd_jacobian_determinant(dim, length):
    torch.manual_seed(dim)
    flow = CouplingFlow(dim, length, hidden=5).double()
    _shake(flow, seed=2, scale=0.5)
    for point in torch.randn(4, dim, dtype=torch.float64):
        jacobian = torch.autograd.functional.jacobian(lambda z: flow(z)[0], point)
        _, log_det = flow(point)
        sign, expected = torch.linalg.slogdet(jacobian)
        assert sign > 0
        torch.testing.assert_close(log_det, expected, rtol=1e-10, atol=1e-10)
        # and the map is not the identity: the test is not trivially passed
        assert not torch.allclose(flow(point)[0], point)


def test_the_flow_matches_its_formula_and_a_fresh_flow_is_the_identity():
    flow = CouplingFlow(3, 2, hidden=4).double()
    z = torch.randn(5, 3, dtype=torch.float64)
    out, log_det = flow(z)
    assert torch.equal(out, z) and torch.equal(log_det, torch.zeros(5, dtype=torch.float64))
    _shake(flow, seed=3, scale=0.1)
    for got, expected in zip(flow(z), _flow_reference(flow, z)):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def _monte_carlo_bound(layer: LBBNNFlowLayer, n: int, generator: torch.Generator) -> torch.Tensor:
    """n independent terms whose mean is the MNF bound, from densities: z from the flow with log q(z) by
    autograd's Jacobian, (gamma, w) drawn from q given z and scored against q and the prior, the reverse
    model's input from its moment match and log r by autograd's Jacobian of r's flow."""
    d, dt = layer.in_features, torch.float64
    with torch.no_grad():
        mu, sigma = layer.weight_mu, layer.weight_sigma
        alpha, psi = layer.inclusion_probability, torch.sigmoid(layer.prior_inclusion_logit)
        prior_sd = layer.log_slab_variance.exp().sqrt()
        z_sigma = layer.z_sigma
        z0 = layer.z_mean + z_sigma * torch.randn(n, d, generator=generator, dtype=dt)
        z = layer.z_flow(z0)[0]
        jac_q = torch.func.vmap(torch.func.jacrev(lambda v: layer.z_flow(v)[0]))(z0)
        log_q_z = Normal(layer.z_mean, z_sigma).log_prob(z0).sum(-1) - torch.linalg.slogdet(jac_q)[1]
        z_aug = torch.cat([z, torch.ones(n, 1, dtype=dt)], 1)[:, None, :]  # (n, 1, d + 1)
        gamma = torch.rand(n, *layer.shape, generator=generator, dtype=dt) < alpha
        w = z_aug * mu + sigma * torch.randn(n, *layer.shape, generator=generator, dtype=dt)
        log_q_w = torch.where(gamma, torch.log(alpha) + Normal(z_aug * mu, sigma).log_prob(w), torch.log1p(-alpha))
        log_p_w = torch.where(gamma, torch.log(psi) + Normal(0.0, prior_sd).log_prob(w), torch.log1p(-psi))
        a_mean = (alpha * z_aug * mu)[..., :-1] @ layer.r_c
        a_var = (alpha * sigma**2 + alpha * (1 - alpha) * (z_aug * mu) ** 2)[..., :-1] @ layer.r_c**2
        noise = torch.randn(n, layer.out_features, generator=generator, dtype=dt)
        a = torch.tanh(a_mean + a_var.sqrt() * noise).mean(-1, keepdim=True)
        z_b = layer.r_flow(z)[0]
        jac_r = torch.func.vmap(torch.func.jacrev(lambda v: layer.r_flow(v)[0]))(z)
        log_r = Normal(layer.r_b1 * a, torch.exp(0.5 * layer.r_b2 * a)).log_prob(z_b).sum(-1)
        log_r = log_r + torch.linalg.slogdet(jac_r)[1]
    return (log_q_w - log_p_w).sum((1, 2)) + log_q_z - log_r


def test_kl_bound_matches_a_monte_carlo_estimate_from_densities():
    layer = _perturbed_layer()
    n = 1000  # layer.kl() calls (one draw each); the reference's terms are vectorised
    layer.noise_generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        layer_draws = torch.stack([layer.kl() for _ in range(n)])
    reference = _monte_carlo_bound(layer, 100_000, torch.Generator().manual_seed(12))
    standard_error = math.sqrt(layer_draws.var() / n + reference.var() / len(reference))
    difference = float(layer_draws.mean() - reference.mean())
    assert abs(difference) < 4 * standard_error, (difference, standard_error)
    # the Monte Carlo terms vary (z, gamma and w are random): the comparison has power
    assert reference.std() > 0.1


def test_at_unit_multipliers_the_layer_is_mean_field_lbbnn():
    """z = 1 (identity flow, sigma_z -> 0): the conditional KL, the mean network and the training forward
    are mean-field LBBNN's with the same mu, sigma and alpha."""
    torch.manual_seed(0)
    flow_layer = LBBNNFlowLayer(4, 3).double()
    torch.manual_seed(1)
    lbbnn = LBBNNLayer(4, 3, LBBNNOptions()).double()
    with torch.no_grad():
        for name in ("weight_mu", "weight_rho", "inclusion_logit"):
            getattr(lbbnn, name).normal_()
            getattr(flow_layer, name).copy_(getattr(lbbnn, name))
        flow_layer.z_rho.fill_(-800.0)  # softplus(-800) = 0 in double: z0 = mu_z = 1 exactly
    ones = torch.ones(4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(flow_layer.weight_kl(ones), lbbnn.kl(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(flow_layer.mean_weights(), lbbnn.mean_weights(), rtol=0, atol=1e-12)
        x = torch.randn(6, 4, dtype=torch.float64)
        flow_layer.noise_generator = torch.Generator().manual_seed(3)
        out_flow = flow_layer(x)
        lbbnn.noise_generator = torch.Generator().manual_seed(3)
        torch.randn((6, 4), generator=lbbnn.noise_generator, dtype=torch.float64)  # the draw of z0's noise
        torch.testing.assert_close(out_flow, lbbnn(x), rtol=1e-10, atol=1e-10)
    # a fresh layer's flows are the identity: its z is exactly Gaussian
    assert all(torch.count_nonzero(c.scale_weight) == 0 for c in flow_layer.z_flow.couplings)


def test_expected_multipliers_agree_with_plain_monte_carlo_under_a_nonlinear_flow():
    layer = _perturbed_layer(in_features=4, seed=7, scale=0.5)
    with torch.no_grad():
        estimate = layer.expected_multipliers()
        z, _ = layer.draw_multipliers((400_000,), torch.Generator().manual_seed(1))
    standard_error = z.std(0) / math.sqrt(len(z))
    assert torch.all((estimate - z.mean(0)).abs() < 5 * standard_error + 1e-6), (estimate, z.mean(0))
    assert not torch.allclose(estimate, layer.z_mean, atol=1e-3)  # the flow moved the mean


def test_collapsed_conditional_replays_the_multipliers_of_the_draws():
    layer = _perturbed_layer(seed=4)
    with torch.no_grad():
        generators = [torch.Generator().manual_seed(s) for s in (1, 2)]
        last = torch.cat([layer.sample_weights(1, g) for g in generators])
        mean, var = layer.collapsed_conditional(last, [torch.Generator().manual_seed(s) for s in (1, 2)])
        for r, seed in enumerate((1, 2)):
            z, _ = layer.draw_multipliers((1,), torch.Generator().manual_seed(seed))
            kept = last[r] != 0
            expected = torch.cat([z[0], torch.ones(1, dtype=z.dtype)]) * layer.weight_mu
            torch.testing.assert_close(mean[r][kept], expected[kept])
            assert torch.all(mean[r][~kept] == 0) and torch.all(var[r][~kept] == 0)


@pytest.mark.parametrize(
    "options,field",
    [
        ({"flow_length": -1}, "flow_length"),
        ({"flow_hidden": 0}, "flow_hidden"),
        ({"flow_length": 1.5}, "flow_length"),
        ({"slab": "student-t"}, "slab"),
        ({"inclusion_prior": "beta-binomial"}, "inclusion_prior"),
        ({"estimator": "relaxed-bernoulli"}, "estimator"),
    ],
)
def test_options_outside_their_declarations_are_refused_by_name(options, field):
    with pytest.raises(ConfigError, match=field):
        LBBNNFlowOptions.from_dict(options)


def test_flow_length_zero_leaves_z_gaussian():
    layer = LBBNNFlowLayer(3, 2, LBBNNFlowOptions.from_dict({"flow_length": 0})).double()
    assert len(layer.z_flow.couplings) == 0
    with torch.no_grad():
        z, log_q = layer.draw_multipliers((5,), torch.Generator().manual_seed(0))
        z0 = layer.z_mean + layer.z_sigma * torch.randn(
            5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        )
        torch.testing.assert_close(z, z0)
        torch.testing.assert_close(log_q, Normal(layer.z_mean, layer.z_sigma).log_prob(z0).sum(-1))


@pytest.mark.slow  # 200 optimiser steps: a few seconds on an idle CPU
def test_a_short_training_on_a_tiny_problem_learns():
    from core.train import TrainConfig, train

    generator = torch.Generator().manual_seed(0)

    def blobs(n: int) -> tuple[torch.Tensor, torch.Tensor]:  # two Gaussian classes 4.2 sd apart: Bayes error 2%
        y = torch.randint(0, 2, (n,), generator=generator)
        return torch.randn(n, 2, generator=generator) + 1.5 * (2 * y[:, None] - 1), y

    x, y = blobs(400)
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(8,), family="lbbnn-flow"))
    result = train(model, x, y, TrainConfig(epochs=10, batch_size=20), seed=0, snapshots=False)
    losses = [h["loss"] for h in result.history]
    assert losses[-1] < 0.7 * losses[0], losses
    x_test, y_test = blobs(1000)
    with torch.no_grad():
        logits = model.forward_with_weights(x_test, model.mean_weights())
    accuracy = (logits.argmax(-1) == y_test).double().mean().item()
    assert accuracy > 0.9, accuracy  # chance is 0.5


@pytest.mark.slow  # a short training through the public API
def test_a_run_predicts_in_every_mode_sweeps_exports_and_round_trips_through_the_store(tmp_path):
    import numpy as np

    from core.predict.modes import PredictionMode
    from core.runs import RunConfig, load_run, train_run

    config = RunConfig(dataset="two-moons", method="lbbnn-flow", hidden=(8,), train={"epochs": 6})
    assert config.family_options["flow_length"] == 2  # the documented default is stored with the run
    run = train_run(config, cache_dir=tmp_path)
    x_test = run.dataset().x_test
    alphas = [layer.inclusion_probability.detach() for layer in run.model.layers]
    kept = sum(int((a > 0.5).sum()) for a in alphas) / sum(a.numel() for a in alphas)
    for mode in PredictionMode:
        result = run.evaluate(mode=mode.value, samples=4)
        assert result["family"] == "lbbnn-flow" and np.isfinite(result["accuracy"]), mode
        if mode.value in ("mpm", "mpm-mean"):  # the median probability model: alpha > 0.5, as for lbbnn
            assert result["density"] == pytest.approx(kept)
    # mean: the network of E_q[w] = alpha mu E[z], worked out here from the layers' parameters
    h = torch.as_tensor(x_test, dtype=torch.float32)
    with torch.no_grad():
        for i, layer in enumerate(run.model.layers):
            w = layer.inclusion_probability * layer.weight_mu * layer.with_bias(layer.expected_multipliers())
            h = h @ w[:, :-1].T + w[:, -1]
            h = torch.relu(h) if i < len(run.model.layers) - 1 else h
    np.testing.assert_allclose(run.predict(x_test, mode="mean").probs, torch.softmax(h, 1).numpy(), atol=1e-5)
    sweep = run.sweep(thresholds=[0.0, 0.5, 1.0])
    np.testing.assert_allclose(sweep.density[1], kept)
    again = load_run(run.run_id, cache_dir=tmp_path)
    for mode in ("bma", "mean", "mpm", "prune"):
        np.testing.assert_array_equal(
            again.predict(x_test, mode=mode, samples=3).probs, run.predict(x_test, mode=mode, samples=3).probs
        )
    folder, manifest = run.export(None, tmp_path / "export")
    assert folder.exists() and manifest


def test_the_flow_size_limit_is_a_setting_and_refuses_by_name(monkeypatch):
    LBBNNFlowOptions.from_dict({"flow_length": 4, "flow_hidden": 128})  # 512: at the default limit
    with pytest.raises(ConfigError, match=r"flow_hidden: .*513 exceeds the limit of 512 \(BNN_LBBNN_FLOW_MAX_UNITS\)"):
        LBBNNFlowOptions.from_dict({"flow_length": 1, "flow_hidden": 513})
    monkeypatch.setenv("BNN_LBBNN_FLOW_MAX_UNITS", "8")
    with pytest.raises(ConfigError, match="exceeds the limit of 8"):
        LBBNNFlowOptions.from_dict({"flow_length": 2, "flow_hidden": 5})
