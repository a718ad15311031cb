"""The `laplace` family against truths that do not share its code: Bayesian linear regression in
closed form (posterior, predictive variance, evidence), Jacobians from torch.autograd.functional,
Monte Carlo over its own draws, and the run store's round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.models.laplace import MAX_WEIGHTS, output_jacobian
from core.models.network import ModelConfig, build_model
from core.predict import predict

SIGMA, DELTA = 0.3, 2.0


def linear_model(delta: float = DELTA, tune: bool = False, in_features: int = 2):
    """A net with no hidden layer and an identity output: Bayesian linear regression with a bias."""
    config = ModelConfig(
        in_features=in_features,
        out_classes=None,
        hidden=(),
        family="laplace",
        family_options={"prior_precision": delta, "tune_prior": tune},
        likelihood="gaussian",
        likelihood_options={"noise": "fixed", "noise_std": SIGMA},
    )
    return build_model(config)


def linear_data(n: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = x @ np.array([1.0, -0.5]) + 0.3 + SIGMA * rng.normal(size=n)
    return torch.from_numpy(x).float(), torch.from_numpy(y).float()


def blr(x: torch.Tensor, y: torch.Tensor, delta: float):
    """Bayesian linear regression, prior N(0, I / delta) on (w, b), noise sd SIGMA: posterior mean and
    covariance, and the log evidence log N(y; 0, SIGMA^2 I + X X^T / delta)."""
    design = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
    precision = delta * torch.eye(design.shape[1], dtype=torch.float64) + design.T @ design / SIGMA**2
    covariance = torch.linalg.inv(precision)
    mean = covariance @ design.T @ y.double() / SIGMA**2
    marginal = SIGMA**2 * torch.eye(len(x), dtype=torch.float64) + design @ design.T / delta
    evidence = torch.distributions.MultivariateNormal(torch.zeros(len(x), dtype=torch.float64), marginal).log_prob(
        y.double()
    )
    return mean, covariance, float(evidence)


def set_weights(model, flat: torch.Tensor) -> None:
    with torch.no_grad():
        for layer, part in zip(model.layers, model.posterior.unflatten(flat.float())):
            layer.weight.copy_(part)


def test_linear_gaussian_posterior_predictive_and_evidence_equal_bayesian_linear_regression():
    x, y = linear_data()
    model = linear_model()
    mean, covariance, evidence = blr(x, y, DELTA)
    set_weights(model, mean)  # the mode of the posterior: where the Laplace approximation is exact
    model.fit_posterior(x, y)
    torch.testing.assert_close(model.posterior.covariance(), covariance, rtol=1e-5, atol=1e-8)
    x_new = torch.tensor([[0.5, -1.0], [3.0, 2.0]])
    design = torch.cat([x_new, torch.ones(2, 1)], dim=1).double()
    _, variance = model.posterior.predictive_variance(x_new, model.mean_weights(), model.activation)
    torch.testing.assert_close(variance[:, 0], ((design @ covariance) * design).sum(1), rtol=1e-5, atol=1e-8)
    assert float(model.posterior.log_evidence) == pytest.approx(evidence, rel=1e-5)
    # the per-weight sds the layers report (coef, pruning) are the covariance's diagonal
    torch.testing.assert_close(
        model.layers[0].posterior_std.double().reshape(-1), covariance.diagonal().sqrt(), rtol=1e-5, atol=1e-7
    )


def test_tuned_prior_precision_maximises_the_closed_form_evidence_at_fixed_weights():
    x, y = linear_data(n=12, seed=1)
    model = linear_model(tune=True)
    mean, _, _ = blr(x, y, DELTA)
    set_weights(model, mean)
    model.fit_posterior(x, y)
    chosen = float(model.posterior.prior_precision)

    def laplace_evidence(delta: float) -> float:  # log p(D | w*) + log p(w*) + P/2 log 2 pi - 1/2 log det H
        design = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
        w = mean
        residual = y.double() - design @ w
        log_lik = -0.5 * len(x) * math.log(2 * math.pi * SIGMA**2) - 0.5 * float(residual @ residual) / SIGMA**2
        p = len(w)
        log_prior = 0.5 * p * math.log(delta / (2 * math.pi)) - 0.5 * delta * float(w @ w)
        hessian = delta * torch.eye(p, dtype=torch.float64) + design.T @ design / SIGMA**2
        return log_lik + log_prior + 0.5 * p * math.log(2 * math.pi) - 0.5 * float(torch.logdet(hessian))

    grid = np.logspace(-4, 4, 2001)
    best = grid[int(np.argmax([laplace_evidence(d) for d in grid]))]
    assert chosen == pytest.approx(best, rel=0.02)
    assert float(model.posterior.log_evidence) == pytest.approx(laplace_evidence(chosen), rel=1e-6)


@pytest.mark.parametrize("likelihood,outputs", [("gaussian", None), ("categorical", 3), ("bernoulli", 2)])
def test_ggn_equals_j_transpose_lambda_j_from_autograd_jacobians(likelihood, outputs):
    torch.manual_seed(0)
    config = ModelConfig(
        in_features=2,
        out_classes=outputs,
        hidden=(3,),
        family="laplace",
        activation="tanh",
        family_options={"prior_precision": 1.5, "tune_prior": False},
        likelihood=likelihood,
        likelihood_options={"noise": "fixed", "noise_std": SIGMA} if likelihood == "gaussian" else {},
    )
    model = build_model(config)
    x = torch.randn(7, 2)
    y = torch.randn(7) if outputs is None else torch.randint(0, outputs, (7,)).float()
    model.fit_posterior(x, y)
    weights = [w.detach().double() for w in model.mean_weights()]
    flat = model.posterior.flatten(weights)

    def network(theta):
        a = x.double()
        parts = model.posterior.unflatten(theta)
        for index, w in enumerate(parts):
            a = a @ w[:, :-1].T + w[:, -1]
            if index < len(parts) - 1:
                a = torch.tanh(a)
        return a

    jacobian = torch.autograd.functional.jacobian(network, flat)  # (n, K, P)
    f = network(flat)
    if likelihood == "gaussian":
        lam = torch.eye(1, dtype=torch.float64).expand(7, 1, 1) / SIGMA**2
    elif likelihood == "bernoulli":
        p = torch.sigmoid(f)
        lam = (p * (1 - p)).unsqueeze(-1)
    else:
        p = torch.softmax(f, dim=1)
        lam = torch.diag_embed(p) - p.unsqueeze(2) * p.unsqueeze(1)
    ggn = torch.einsum("nkp,nkl,nlq->pq", jacobian, lam, jacobian)
    precision = 1.5 * torch.eye(len(flat), dtype=torch.float64) + ggn
    torch.testing.assert_close(torch.linalg.inv(model.posterior.covariance()), precision, rtol=1e-6, atol=1e-8)
    _, by_hand = output_jacobian(x.double(), weights, torch.tanh)
    torch.testing.assert_close(by_hand, jacobian, rtol=1e-10, atol=1e-12)


def test_relu_jacobian_matches_autograd():
    torch.manual_seed(3)
    weights = [
        torch.randn(5, 3, dtype=torch.float64),
        torch.randn(4, 6, dtype=torch.float64),
        torch.randn(2, 5, dtype=torch.float64),
    ]
    x = torch.randn(9, 2, dtype=torch.float64)
    sizes = [w.numel() for w in weights]

    def network(theta):
        a = x
        parts = [p.reshape(w.shape) for p, w in zip(torch.split(theta, sizes), weights)]
        for index, w in enumerate(parts):
            a = a @ w[:, :-1].T + w[:, -1]
            if index < len(parts) - 1:
                a = torch.relu(a)
        return a

    expected = torch.autograd.functional.jacobian(network, torch.cat([w.reshape(-1) for w in weights]))
    _, jacobian = output_jacobian(x, weights, torch.relu)
    torch.testing.assert_close(jacobian, expected)


def test_sampled_predictive_variance_matches_the_closed_form_on_a_linear_model():
    x, y = linear_data()
    model = linear_model()
    mean, covariance, _ = blr(x, y, DELTA)
    set_weights(model, mean)
    model.fit_posterior(x, y)
    x_new = torch.tensor([[0.5, -1.0], [3.0, 2.0], [-2.0, 0.0]])
    draws = 2500
    prediction = predict(model, x_new, "bma", samples=draws, seed=3)
    _, exact = model.posterior.predictive_variance(x_new, model.mean_weights(), model.activation)
    # the variance of a sample variance of a Gaussian is 2 s^4 / (R - 1): 5 standard errors
    tolerance = 5 * math.sqrt(2 / (draws - 1))
    np.testing.assert_allclose(prediction.epistemic_variance, exact[:, 0].numpy(), rtol=tolerance)
    np.testing.assert_allclose(prediction.aleatoric_variance, SIGMA**2, rtol=1e-5)
    # and the weight draws themselves have the posterior's covariance
    flat = model.posterior.flatten(model.sample_weights(draws, seed=5)).double()
    torch.testing.assert_close(torch.cov(flat.T), covariance, rtol=0.15, atol=0.15 * float(covariance.diagonal().max()))


def test_linearised_draws_of_a_relu_net_are_first_order_taylor_expansions():
    torch.manual_seed(1)
    config = ModelConfig(in_features=1, out_classes=None, hidden=(6,), family="laplace", likelihood="gaussian")
    model = build_model(config)
    x = torch.linspace(-1, 1, 20).unsqueeze(1)
    model.fit_posterior(x, torch.sin(3 * x[:, 0]))
    prediction = predict(model, x, "bma", samples=3, seed=0)
    with torch.no_grad():
        draws = model.sample_weights(3, seed=0)
        centre = [w.double() for w in model.mean_weights()]
    f, jacobian = output_jacobian(x.double(), centre, torch.relu)
    for r in range(3):
        change = model.posterior.flatten([d[r].double() - c for d, c in zip(draws, centre)])
        expected = (f + jacobian @ change)[:, 0]
        np.testing.assert_allclose(prediction.mean_per_draw[r], expected.numpy(), rtol=1e-4, atol=1e-5)


def test_networks_above_the_weight_limit_are_refused_with_the_setting_named(monkeypatch):
    monkeypatch.setenv(MAX_WEIGHTS.variable, "100")
    config = ModelConfig(in_features=1, out_classes=None, hidden=(16, 16), family="laplace", likelihood="gaussian")
    with pytest.raises(ConfigError, match=r"321 weights.*limit of 100.*BNN_LAPLACE_MAX_WEIGHTS"):
        build_model(config)
    monkeypatch.delenv(MAX_WEIGHTS.variable)
    assert build_model(config).posterior.n_weights == 321


def test_a_trained_run_round_trips_through_the_store(tmp_path):
    from core.runs import RunConfig
    from core.runs.training import load_run, train_run

    config = RunConfig.from_dict(
        {"dataset": "toy-sine-gaps", "method": "laplace", "hidden": [8], "train": {"epochs": 30}}
    )
    run = train_run(config, cache_dir=tmp_path)
    # recorded, and a fit of 8 hidden units is not stuck (it takes milliseconds; timing is the benchmarks')
    assert 0 < run.metrics["laplace_fit_seconds"] < 30
    assert run.model.posterior.is_fitted and run.model.posterior.eigenvalues.numel() > 0
    again = load_run(run.run_id, cache_dir=tmp_path)
    torch.testing.assert_close(again.model.posterior.covariance(), run.model.posterior.covariance())
    x = run.dataset().x_grid
    first, second = run.predict(x, "bma", samples=5), again.predict(x, "bma", samples=5)
    np.testing.assert_array_equal(first.mean_per_draw, second.mean_per_draw)
    assert run.model.posterior.state_dict().keys() == {
        "eigenvectors",
        "eigenvalues",
        "prior_precision",
        "log_evidence",
        "fit_seconds",
        "fitted",
        "kept",
    }
    np.testing.assert_array_equal(run.predict(x, "mean").mean, again.predict(x, "mean").mean)


def test_post_hoc_fit_on_a_pruned_network_covers_the_kept_weights_only():
    from core.models.laplace import fit_laplace

    torch.manual_seed(2)
    config = ModelConfig(
        in_features=1,
        out_classes=None,
        hidden=(4,),
        family="bnn",
        activation="tanh",
        likelihood="gaussian",
        likelihood_options={"noise": "fixed", "noise_std": SIGMA},
    )
    model = build_model(config)
    x, y = torch.linspace(-1, 1, 15).unsqueeze(1), torch.linspace(-1, 1, 15) ** 2
    masks = [
        torch.rand(layer.shape, generator=torch.Generator().manual_seed(i)) > 0.3
        for i, layer in enumerate(model.layers)
    ]
    posterior = fit_laplace(model, x, y, masks=masks, prior_precision=0.7, tune_prior=False)
    with torch.no_grad():
        weights = [w.double() * m for w, m in zip(model.conditional_mean_weights(masks), masks)]
    kept = posterior.flatten(masks).bool()
    _, jacobian = output_jacobian(x.double(), weights, torch.tanh)
    j = jacobian[:, 0][:, kept]
    expected = torch.linalg.inv(0.7 * torch.eye(int(kept.sum()), dtype=torch.float64) + j.T @ j / SIGMA**2)
    covariance = posterior.covariance()
    torch.testing.assert_close(covariance[kept][:, kept], expected, rtol=1e-6, atol=1e-9)
    assert covariance[~kept].abs().max() == 0 and covariance[:, ~kept].abs().max() == 0
    # draws leave the pruned weights where they are
    noise = posterior.noise(50, lambda r: r, 0, torch.device("cpu"))
    assert noise[:, ~kept].abs().max() == 0


@pytest.mark.parametrize("likelihood,outputs", [("gaussian", None), ("categorical", 3), ("bernoulli", 2)])
def test_ggn_equals_autograds_hessian_of_the_loss_through_the_linearised_net(likelihood, outputs):
    """Lambda from torch's own Hessian of -log p(y | f) in f, not from the hand formulas: the GGN is the
    Hessian in w of the loss of the network linearised at w* (its second-order term vanishes there)."""
    from core.models.laplace import curvature_factor

    torch.manual_seed(1)
    config = ModelConfig(
        in_features=2,
        out_classes=outputs,
        hidden=(3,),
        family="laplace",
        activation="tanh",
        family_options={"prior_precision": 1.0, "tune_prior": False},
        likelihood=likelihood,
        likelihood_options={"noise": "fixed", "noise_std": SIGMA} if likelihood == "gaussian" else {},
    )
    model = build_model(config).double()
    x = torch.randn(5, 2, dtype=torch.float64)
    y = torch.randn(5, dtype=torch.float64) if outputs is None else torch.randint(0, outputs, (5,)).double()
    weights = [w.detach() for w in model.mean_weights()]
    outputs_at, jacobian = output_jacobian(x, weights, torch.tanh)
    flat = model.posterior.flatten(weights)

    def linearised_loss(theta):
        f = outputs_at + torch.einsum("nkp,p->nk", jacobian, theta - flat)
        return -model.likelihood.log_prob(f, y).sum()

    hessian = torch.autograd.functional.hessian(linearised_loss, flat)
    factor = curvature_factor(model.likelihood, outputs_at, jacobian)
    torch.testing.assert_close(factor.T @ factor, hessian, rtol=1e-8, atol=1e-10)


def test_laplace_runs_on_the_1d_toys_default_to_tanh_and_other_runs_keep_relu():
    from core.runs import RunConfig

    assert RunConfig(dataset="toy-sine-gaps", method="laplace").activation == "tanh"
    assert RunConfig(dataset="toy-cubic", method="linearised-laplace").activation == "tanh"
    assert RunConfig(dataset="toy-sine-gaps", method="laplace", activation="relu").activation == "relu"
    assert RunConfig(dataset="toy-sine-gaps", method="bnn").activation == "relu"
    assert RunConfig(dataset="mnist-small", method="laplace").activation == "relu"
    # a config that names no activation is the same run as one that names the default (ids unchanged)
    fingerprint = "0" * 16
    assert RunConfig(dataset="toy-sine-gaps", method="bnn").run_id(fingerprint) == RunConfig(
        dataset="toy-sine-gaps", method="bnn", activation="relu"
    ).run_id(fingerprint)
    assert RunConfig.from_dict(RunConfig(dataset="toy-cubic", method="laplace").to_dict()).activation == "tanh"


@pytest.mark.parametrize("prior_precision", [3.0, torch.logspace(-1, 1, 7, dtype=torch.float64)])
def test_the_evidence_is_computed_on_the_eigenvalues_device(prior_precision):
    """A GPU fit's eigenvalues met a prior-precision grid made on the CPU (found by the GPU check):
    the evidence must follow the eigenvalues' device. The meta device stands in for CUDA here."""
    from core.models.laplace import log_marginal_likelihood

    eigenvalues = torch.rand(5, dtype=torch.float64)
    on_meta = log_marginal_likelihood(-1.0, 2.0, eigenvalues.to("meta"), prior_precision)
    assert on_meta.device.type == "meta"
    on_cpu = log_marginal_likelihood(-1.0, 2.0, eigenvalues, prior_precision)
    assert on_meta.shape == on_cpu.shape
    assert torch.isfinite(on_cpu).all()
