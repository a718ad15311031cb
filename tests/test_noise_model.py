"""The Gaussian likelihood's noise model and LBBNN's Gaussian bias prior, against truth:
closed-form Gamma KL and expectations vs Monte Carlo, the conjugate optimum of q(tau), the
least-squares noise initialisation, and the bias prior's KL against its definition."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from core.errors import ConfigError
from core.models.lbbnn import LBBNNLayer, LBBNNOptions, gaussian_kl
from core.models.likelihoods import Gaussian, GaussianOptions, gamma_kl, least_squares_residual_std
from core.models.network import BayesianMLP, ModelConfig
from core.runs.config import RunConfig
from core.train import TrainConfig, train

VARIATIONAL = {"noise": "variational", "precision_prior": "gamma"}


def test_gamma_kl_matches_monte_carlo():
    a, b, a0, b0 = 7.5, 3.2, 6.0, 6.0
    q = stats.gamma(a, scale=1 / b)
    tau = q.rvs(size=2_000_000, random_state=np.random.default_rng(0))
    monte_carlo = np.mean(q.logpdf(tau) - stats.gamma(a0, scale=1 / b0).logpdf(tau))
    closed = float(gamma_kl(*(torch.tensor(v, dtype=torch.float64) for v in (a, b, a0, b0))))
    assert closed == pytest.approx(monte_carlo, abs=3e-3)
    same = (torch.tensor(v, dtype=torch.float64) for v in (a0, b0, a0, b0))
    assert float(gamma_kl(*same)) == pytest.approx(0, abs=1e-12)


def test_hand_written_noise_terms_pass_gradcheck_and_equal_the_autograd_formulas():
    from core.models.likelihoods import LOG_2PI, GammaKLFromLogs, VariationalGaussianLogProb

    torch.manual_seed(0)
    f = torch.randn(7, dtype=torch.double, requires_grad=True)
    y = torch.randn(7, dtype=torch.double)
    logs = (
        torch.tensor(1.3, dtype=torch.double, requires_grad=True),
        torch.tensor(-0.4, dtype=torch.double, requires_grad=True),
    )
    a0, b0 = torch.tensor(2.0, dtype=torch.double), torch.tensor(0.7, dtype=torch.double)
    assert torch.autograd.gradcheck(lambda f, la, lb: VariationalGaussianLogProb.apply(f, y, la, lb), (f, *logs))
    assert torch.autograd.gradcheck(lambda la, lb: GammaKLFromLogs.apply(la, lb, a0, b0), logs)
    shape, rate = logs[0].exp(), logs[1].exp()
    by_autograd = 0.5 * (torch.digamma(shape) - torch.log(rate) - LOG_2PI) - 0.5 * (shape / rate) * (y - f) ** 2
    by_hand = VariationalGaussianLogProb.apply(f, y, *logs)
    weights = torch.randn(7, dtype=torch.double)
    assert torch.allclose(by_hand, by_autograd)
    for fast, slow in zip(
        torch.autograd.grad((by_hand * weights).sum(), (f, *logs)),
        torch.autograd.grad((by_autograd * weights).sum(), (f, *logs)),
    ):
        assert torch.allclose(fast, slow)
    kl = GammaKLFromLogs.apply(*logs, a0, b0)
    reference = gamma_kl(logs[0].exp(), logs[1].exp(), a0, b0)
    assert torch.allclose(kl, reference)
    for fast, slow in zip(torch.autograd.grad(kl, logs), torch.autograd.grad(reference, logs)):
        assert torch.allclose(fast, slow)


def test_variational_expected_log_likelihood_matches_monte_carlo_over_q_tau():
    likelihood = Gaussian(GaussianOptions(**VARIATIONAL)).double()
    with torch.no_grad():
        likelihood.log_q_shape.fill_(math.log(9.0))
        likelihood.log_q_rate.fill_(math.log(2.5))
    output = torch.tensor([[0.3], [-1.0], [2.0]], dtype=torch.float64)
    y = torch.tensor([0.1, 0.4, 1.0], dtype=torch.float64)
    closed = likelihood.log_prob(output, y).detach().numpy()
    tau = stats.gamma(9.0, scale=1 / 2.5).rvs(size=1_000_000, random_state=np.random.default_rng(1))
    mc = [np.mean(stats.norm(m, 1 / np.sqrt(tau)).logpdf(t)) for m, t in zip(output[:, 0].numpy(), y.numpy())]
    np.testing.assert_allclose(closed, mc, atol=3e-3)
    # Prediction uses the plug-in scale sqrt(b / a).
    likelihood.eval()
    _, std = likelihood.mean_and_std(output)
    assert float(std[0].detach()) == pytest.approx(math.sqrt(2.5 / 9.0))


@pytest.mark.slow  # trains to convergence: 3.6 s CPU
def test_q_tau_trained_on_fixed_residuals_reaches_the_conjugate_posterior():
    # With the network output fixed, the optimum of E_q log p(y | f, tau) - KL(q || Gamma(a0, b0)) is
    # Gamma(a0 + N/2, b0 + sum (y - f)^2 / 2) exactly.
    torch.manual_seed(0)
    n, a0, b0 = 200, 6.0, 6.0
    residual = 0.3 * torch.randn(n, dtype=torch.float64)
    likelihood = Gaussian(GaussianOptions(**VARIATIONAL, precision_a=a0, precision_b=b0)).double()
    optimizer = torch.optim.Adam(likelihood.parameters(), lr=0.05)
    output = torch.zeros(n, 1, dtype=torch.float64)
    for _ in range(3000):
        loss = -likelihood.log_prob(output, residual).sum() + likelihood.kl()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(likelihood.log_q_shape.exp()) == pytest.approx(a0 + n / 2, rel=2e-2)
    assert float(likelihood.log_q_rate.exp()) == pytest.approx(b0 + float((residual**2).sum()) / 2, rel=2e-2)


@pytest.mark.slow  # trains to convergence: 3 s CPU
def test_point_noise_with_gamma_prior_is_the_map_estimate():
    torch.manual_seed(1)
    n, a0, b0 = 50, 6.0, 6.0
    residual = 0.5 * torch.randn(n, dtype=torch.float64)
    likelihood = Gaussian(GaussianOptions(precision_prior="gamma", precision_a=a0, precision_b=b0)).double()
    optimizer = torch.optim.Adam(likelihood.parameters(), lr=0.02)
    for _ in range(3000):
        loss = -likelihood.log_prob(torch.zeros(n, 1, dtype=torch.float64), residual).sum() + likelihood.kl()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # d/dtau [N/2 log tau - tau S/2 + (a0 - 1) log tau - b0 tau] = 0 (the density of tau, not log tau,
    # since the prior is on tau and the point estimate is of tau).
    s = float((residual**2).sum())
    tau_map = (n / 2 + a0 - 1) / (s / 2 + b0)
    assert float((-2 * likelihood.log_noise_std).exp()) == pytest.approx(tau_map, rel=1e-3)


def test_noise_initialised_from_the_data_is_the_least_squares_residual_sd():
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(500, 3, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.7 + 0.25 * torch.randn(500, generator=generator)
    design = np.c_[x.numpy(), np.ones(500)]
    coef, *_ = np.linalg.lstsq(design, y.numpy(), rcond=None)
    expected = np.sqrt(np.mean((y.numpy() - design @ coef) ** 2))
    assert least_squares_residual_std(x, y) == pytest.approx(expected, rel=1e-4)
    for noise in ("point", "fixed", "variational"):
        options = GaussianOptions(
            noise=noise, noise_init="data", precision_prior="gamma" if noise == "variational" else "none"
        )
        likelihood = Gaussian(options)
        likelihood.initialise_from_data(x, y)
        assert float(likelihood.log_noise_std.exp()) == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow  # two trainings: 5 s CPU
def test_fixed_noise_does_not_train_and_variational_noise_learns_the_noise_level():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(300, 2, generator=generator)
    y = torch.sin(2 * x[:, 0]) + 0.2 * torch.randn(300, generator=generator)
    for options, check in (
        ({"noise": "fixed", "noise_std": 0.9}, lambda s: s == pytest.approx(0.9, rel=1e-6)),
        (VARIATIONAL, lambda s: 0.12 < s < 0.4),
    ):
        torch.manual_seed(0)
        model = BayesianMLP(
            ModelConfig(
                in_features=2,
                out_classes=None,
                hidden=(32,),
                family="bnn",
                likelihood="gaussian",
                likelihood_options=options,
            )
        )
        train(model, x, y, TrainConfig(epochs=150, batch_size=50))
        assert check(float(model.likelihood.log_noise_std.exp())), options


def test_bad_noise_options_are_refused_with_the_field_named():
    with pytest.raises(ConfigError, match="noise"):
        GaussianOptions(noise="variational")  # needs a prior
    with pytest.raises(ConfigError, match="precision_a"):
        GaussianOptions(precision_a=0.0)
    with pytest.raises(ConfigError, match="noise_init"):
        GaussianOptions(noise_init="median")
    with pytest.raises(ConfigError, match="likelihood_options"):
        RunConfig(dataset="toy-sine-gaps", method="bnn", likelihood_options={"noise_sd": 1.0})
    with pytest.raises(ConfigError, match="takes no options"):
        RunConfig(dataset="two-moons", method="bnn", likelihood_options={"noise": "fixed"})


def test_likelihood_options_keep_old_run_ids_and_change_new_ones():
    plain = RunConfig(dataset="toy-sine-gaps", method="bnn", hidden=(8,))
    explicit_defaults = plain.replace(likelihood_options={"noise": "point", "noise_std": 0.5})
    assert "likelihood_options" not in plain.to_dict()
    assert explicit_defaults.run_id("data") == plain.run_id("data")
    changed = plain.replace(likelihood_options=VARIATIONAL)
    assert changed.run_id("data") != plain.run_id("data")
    assert RunConfig.from_dict(changed.to_dict()) == changed


def randomised_lbbnn(**options) -> LBBNNLayer:
    torch.manual_seed(0)
    layer = LBBNNLayer(3, 2, LBBNNOptions.from_dict(options))
    with torch.no_grad():
        layer.weight_mu.normal_(0, 1)
        layer.weight_rho.uniform_(-1.5, 0.5)
        layer.inclusion_logit.normal_(0, 1.5)
    return layer


def test_gaussian_bias_prior_has_no_indicator_and_a_plain_gaussian_kl():
    layer = randomised_lbbnn(bias_prior="gaussian", slab_variance=0.7, prior_inclusion=0.2)
    alpha = torch.sigmoid(layer.inclusion_logit)
    assert torch.all(layer.inclusion_probability[:, -1] == 1)
    assert torch.equal(layer.inclusion_probability[:, :-1], alpha[:, :-1])
    psi, prior_var = torch.tensor(0.2), torch.tensor(0.7)
    slab = gaussian_kl(layer.weight_mu, layer.weight_sigma**2, prior_var)
    a = alpha[:, :-1]
    weights_kl = (a * (torch.log(a / psi) + slab[:, :-1]) + (1 - a) * torch.log((1 - a) / (1 - psi))).sum()
    assert float(layer.kl()) == pytest.approx(float(weights_kl + slab[:, -1].sum()), rel=1e-5)
    # Every draw keeps every bias; the default rule keeps them in the median probability model.
    draws = layer.sample_weights(2000, torch.Generator().manual_seed(0))
    assert torch.all(draws[:, :, -1] != 0)
    assert torch.all(layer.keep_mask()[:, -1])
    # The same layer with indicators on the biases has a different KL.
    spike = randomised_lbbnn(slab_variance=0.7, prior_inclusion=0.2)
    assert float(spike.kl()) != pytest.approx(float(layer.kl()), rel=1e-3)


def test_gaussian_bias_prior_with_the_beta_binomial_counts_only_the_weights():
    layer = randomised_lbbnn(bias_prior="gaussian", inclusion_prior="beta-binomial", beta_a=2.0, beta_b=3.0)
    alpha = torch.sigmoid(layer.inclusion_logit)[:, :-1]
    a, b, total, k = torch.tensor(2.0), torch.tensor(3.0), torch.tensor(float(alpha.numel())), alpha.sum()
    log_prior = (
        torch.lgamma(a + k)
        + torch.lgamma(b + total - k)
        - torch.lgamma(a + b + total)
        - torch.lgamma(a)
        - torch.lgamma(b)
        + torch.lgamma(a + b)
    )
    neg_entropy = (alpha * torch.log(alpha) + (1 - alpha) * torch.log(1 - alpha)).sum()
    slab = gaussian_kl(layer.weight_mu, layer.weight_sigma**2, torch.tensor(1.0))
    expected = (
        (torch.sigmoid(layer.inclusion_logit)[:, :-1] * slab[:, :-1]).sum()
        + slab[:, -1].sum()
        + neg_entropy
        - log_prior
    )
    assert float(layer.kl()) == pytest.approx(float(expected), rel=1e-5)


def test_old_state_dicts_load_into_the_new_layers():
    # The indicator mask is derived from the options, not stored: runs saved before load.
    layer = randomised_lbbnn(bias_prior="gaussian")
    state = layer.state_dict()
    assert "has_indicator" not in state
    fresh = LBBNNLayer(3, 2, LBBNNOptions(bias_prior="gaussian"))
    fresh.load_state_dict(state)
    assert float(fresh.kl()) == pytest.approx(float(layer.kl()))


def test_cli_flags_set_the_noise_model_and_the_bias_prior():
    from core.cli import build_parser
    from core.cli.runs import config_from_args

    def config(*argv):
        return config_from_args(build_parser().parse_args(["train", *argv]))

    c = config(
        "--dataset",
        "toy-sine-gaps",
        "--method",
        "lbbnn",
        "--noise",
        "variational",
        "--precision-prior",
        "6,6",
        "--noise-init",
        "data",
        "--bias-prior",
        "gaussian",
    )
    assert c.likelihood_options == {"noise": "variational", "precision_prior": "gamma", "noise_init": "data"}
    assert c.family_options["bias_prior"] == "gaussian"
    c = config("--dataset", "toy-sine-gaps", "--method", "bnn", "--noise", "fixed", "--noise-std", "0.2")
    assert c.likelihood_options == {"noise": "fixed", "noise_std": 0.2}
    with pytest.raises(ConfigError, match="precision-prior"):
        config("--dataset", "toy-sine-gaps", "--precision-prior", "6")
    # The uci presets ship the variational noise model.
    assert config("--preset", "uci-yacht").likelihood_options["noise"] == "variational"
