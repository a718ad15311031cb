"""The heteroscedastic output (likelihood = "heteroscedastic"): the net's two outputs are a mean and
a raw scale, sd = softplus(raw) + 1e-3. Checked against the Gaussian density in closed form, its
gradients against finite differences, and the predictive mixture over posterior draws against Monte
Carlo (variance = mean of the per-draw variances + variance of the per-draw means)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from core.models.likelihoods import HeteroscedasticGaussian, make_likelihood
from core.models.network import BayesianMLP, ModelConfig
from core.predict.engine import predict


def test_log_prob_is_the_gaussian_density_with_a_per_input_sd():
    likelihood = make_likelihood("heteroscedastic")
    assert isinstance(likelihood, HeteroscedasticGaussian) and likelihood.n_outputs(None) == 2
    rng = np.random.default_rng(0)
    output = rng.normal(size=(3, 7, 2)) * np.array([2.0, 3.0])  # (draws, inputs, [mean, raw scale])
    y = rng.normal(size=7)
    got = likelihood.log_prob(torch.tensor(output), torch.tensor(y)).numpy()
    sd = np.log1p(np.exp(output[..., 1])) + 1e-3  # softplus + floor
    assert got.shape == (3, 7)
    np.testing.assert_allclose(got, stats.norm.logpdf(y, loc=output[..., 0], scale=sd), rtol=1e-10, atol=1e-12)
    mean, std = likelihood.mean_and_std(torch.tensor(output))
    np.testing.assert_allclose(std.numpy(), sd, rtol=1e-12)
    np.testing.assert_allclose(mean.numpy(), output[..., 0])


def test_log_prob_gradients_against_finite_differences():
    likelihood = make_likelihood("heteroscedastic")
    rng = np.random.default_rng(1)
    output = torch.tensor(rng.normal(size=(4, 2)), dtype=torch.float64, requires_grad=True)
    y = torch.tensor(rng.normal(size=4), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda o: likelihood.log_prob(o, y), (output,), eps=1e-6, atol=1e-7)
    # and by hand: d/dmu = (y - mu) / s^2, d/draw = (-(1/s) + (y - mu)^2 / s^3) * sigmoid(raw)
    value = likelihood.log_prob(output, y).sum()
    (grad,) = torch.autograd.grad(value, output)
    mu, raw = output.detach()[:, 0], output.detach()[:, 1]
    s = torch.nn.functional.softplus(raw) + 1e-3
    torch.testing.assert_close(grad[:, 0], (y - mu) / s**2)
    torch.testing.assert_close(grad[:, 1], (-1 / s + (y - mu) ** 2 / s**3) * torch.sigmoid(raw))


@pytest.mark.slow
def test_heteroscedastic_fit_recovers_an_input_dependent_noise_sd():
    """Maximum likelihood on y = 0 + eps, sd(x) = 0.2 + 0.8 x: the fitted sd follows the truth (a point
    net of the same head: the likelihood, not the family, is under test)."""
    torch.manual_seed(0)
    x = torch.rand(2000, 1)
    y = (0.2 + 0.8 * x[:, 0]) * torch.randn(2000)
    model = BayesianMLP(ModelConfig(1, None, hidden=(16,), family="fnn", likelihood="heteroscedastic"))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        optimizer.zero_grad()
        loss = -model.likelihood.log_prob(model(x), y).mean()
        loss.backward()
        optimizer.step()
    grid = torch.linspace(0.05, 0.95, 10).reshape(-1, 1)
    with torch.no_grad():
        _, std = model.likelihood.mean_and_std(model(grid))
    np.testing.assert_allclose(std.numpy(), 0.2 + 0.8 * grid[:, 0].numpy(), atol=0.06)


@pytest.mark.parametrize("family", ["lbbnn", "bnn"])
def test_predictive_mixture_variance_by_monte_carlo(family):
    """The BMA predictive is a mixture over R draws of N(mean_r, sd_r^2): its variance is the mean of
    the variances plus the variance of the means. Sampled: pick a draw, then y ~ N(mean_r, sd_r^2)."""
    torch.manual_seed(3)
    model = BayesianMLP(ModelConfig(3, None, hidden=(8,), family=family, likelihood="heteroscedastic"))
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    prediction = predict(model, x, mode="bma", samples=40, seed=1)
    means, sds = prediction.mean_per_draw.astype(np.float64), prediction.std_per_draw.astype(np.float64)
    assert means.shape == sds.shape == (40, 5)
    assert np.ptp(sds, axis=1).max() > 0  # the sd varies with the input: a per-input noise
    np.testing.assert_allclose(prediction.aleatoric_variance, (sds**2).mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(prediction.epistemic_variance, means.var(axis=0), rtol=1e-4, atol=1e-8)
    rng = np.random.default_rng(5)
    n = 400_000
    draw = rng.integers(0, 40, size=n)
    samples = means[draw] + sds[draw] * rng.standard_normal((n, 5))
    empirical = samples.var(axis=0)
    # the sample variance's relative sd is about sqrt((kurtosis - 1) / n) < 1 %: 4 % is > 4 sd
    np.testing.assert_allclose(empirical, prediction.total_variance, rtol=0.04)
    np.testing.assert_allclose(samples.mean(axis=0), prediction.mean, atol=4 * math.sqrt(empirical.max() / n))
