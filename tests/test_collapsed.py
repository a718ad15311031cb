"""The collapsed predictive (core.predict.collapsed) for every regression family and likelihood,
both variants; the sum-of-uniforms density against closed forms and Monte Carlo; `evaluate --mode
collapsed`; the dashboard backend's bands."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.cli import main
from core.errors import PredictionError
from core.models.network import BayesianMLP, ModelConfig
from core.models.registry import FAMILY_PATHS
from core.predict.collapsed import (
    UniformSums,
    collapsed_predict,
    evaluate_collapsed,
    gaussian_mixture_quantiles,
    uniform_sum_cdf,
    uniform_sum_density,
)

FAMILIES = sorted(FAMILY_PATHS)
# the last layer given the sampled dropout mask (member) is not random
POINT_MASS = ("fnn", "concrete-dropout", "laplace", "ensemble")


def regression_model(family, likelihood="gaussian", hidden=(5,), seed=0, activation="relu"):
    torch.manual_seed(seed)
    model = BayesianMLP(
        ModelConfig(2, None, hidden=hidden, family=family, likelihood=likelihood, activation=activation)
    )
    with torch.no_grad():  # spread q a little so the collapsed variance is not negligible
        for name, p in model.layers[-1].named_parameters():
            if name in ("weight_rho",):
                p.fill_(-0.5)
            if name == "log_sigma2":
                p.fill_(-2.0)
            if name == "inclusion_logit":
                p.fill_(0.0)
    return model.eval()


X = np.random.default_rng(1).normal(size=(3, 2)).astype(np.float32)


@pytest.mark.parametrize("likelihood", ["gaussian", "heteroscedastic"])
@pytest.mark.parametrize(
    "family",
    # lbbnn-flow: 6 s each (its flows sampled many times), in the slow lane
    [pytest.param(f, marks=pytest.mark.slow) if f == "lbbnn-flow" else f for f in FAMILIES],
)
def test_collapsed_mean_and_variance_are_those_of_the_sampled_last_layer(family, likelihood):
    """Each body's sampled last layer is one draw from the collapsed conditional: standardised by the
    collapsed mean and weight variance, the ensemble residuals are N(0, 1) (exactly 0 for point masses)."""
    model = regression_model(family, likelihood)
    draws = 1500
    gaussian = collapsed_predict(model, X, samples=draws, seed=4)
    box = collapsed_predict(model, X, samples=40, seed=4, variant="box", box_terms=3)
    parts_noise = gaussian.var_per_draw
    from core.predict.collapsed import collapsed_parts

    noise_var = collapsed_parts(model, X, draws, 4).noise_std.numpy() ** 2
    weight_var = parts_noise - noise_var
    residual = gaussian.ensemble_mean_per_draw - gaussian.mean_per_draw
    if family in POINT_MASS:
        assert np.allclose(weight_var, 0, atol=1e-9) and np.allclose(residual, 0, atol=1e-5)
    else:
        assert np.all(weight_var >= -1e-12)
        positive = weight_var > 1e-10
        z = residual[positive] / np.sqrt(weight_var[positive])
        assert positive.mean() > 0.3
        assert abs(z.mean()) < 4 / np.sqrt(z.size) + 0.01 and abs(z.var() - 1) < 0.1
    # The plain ensemble of the same draws is bma's.
    from core.predict import predict

    bma = predict(model, X, "bma", samples=40, seed=4)
    assert np.allclose(box.ensemble_mean_per_draw, bma.mean_per_draw, atol=1e-4)
    assert np.allclose(gaussian.ensemble_mean_per_draw[:40], bma.mean_per_draw, atol=1e-4)
    # Both variants are proper distributions whose quantiles invert their CDFs.
    for predictive in (gaussian, box):
        low, high = predictive.quantiles((0.05, 0.95))
        assert np.all(low < high)
        assert np.allclose(predictive.cdf(low), 0.05, atol=1e-6) and np.allclose(predictive.cdf(high), 0.95, atol=1e-6)


@pytest.mark.slow  # Monte Carlo moments: 7 s CPU
def test_box_variant_matches_the_gaussian_variants_moments_when_every_term_is_collapsed():
    model = regression_model("bnn", hidden=(3,), activation="tanh")  # no feature exactly 0
    gaussian = collapsed_predict(model, X, samples=20, seed=0)
    box = collapsed_predict(model, X, samples=20, seed=0, variant="box", box_terms=4)
    assert np.all(box.collapsed_terms == 4)
    np.testing.assert_allclose(box.mean_per_draw, gaussian.mean_per_draw, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(box.var_per_draw, gaussian.var_per_draw, rtol=1e-6)
    # Its density: integrates to 1 with the mixture's mean and variance; a different shape from the Gaussian.
    grid = np.linspace(box.mean[0] - 8 * np.sqrt(box.variance[0]), box.mean[0] + 8 * np.sqrt(box.variance[0]), 20001)
    density = box.mixture_density(grid)[0]
    assert np.trapezoid(density, grid) == pytest.approx(1.0, abs=1e-6)
    assert np.trapezoid(density * grid, grid) == pytest.approx(box.mean[0], abs=1e-6 * (1 + abs(box.mean[0])))
    assert np.trapezoid(density * (grid - box.mean[0]) ** 2, grid) == pytest.approx(box.variance[0], rel=1e-5)
    # With zero collapsed terms only the triangular noise is left around the sampled ensemble.
    bare = collapsed_predict(model, X, samples=20, seed=0, variant="box", box_terms=0)
    np.testing.assert_allclose(bare.mean_per_draw, bare.ensemble_mean_per_draw, atol=1e-6)


def test_sum_of_uniforms_against_closed_forms_and_monte_carlo():
    # Two equal uniforms on (-1, 1): the triangle on (-2, 2).
    t = np.array([[-2.5, -1.0, 0.0, 0.5, 2.0]])
    c = np.array([[1.0, 1.0]])
    triangle_cdf = np.where(t < 0, np.clip(t + 2, 0, None) ** 2 / 8, 1 - np.clip(2 - t, 0, None) ** 2 / 8)
    np.testing.assert_allclose(uniform_sum_cdf(t, c), triangle_cdf, atol=1e-12)
    np.testing.assert_allclose(uniform_sum_density(t, c), np.clip(2 - np.abs(t), 0, None) / 4, atol=1e-12)
    # Five unequal ones against 2e6 Monte Carlo draws.
    widths = np.array([[0.3, 1.0, 0.05, 2.0, 0.7]])
    rng = np.random.default_rng(0)
    draws = (rng.uniform(-1, 1, size=(2_000_000, 5)) * widths).sum(1)
    points = np.linspace(-3.5, 3.5, 15)
    empirical = np.array([np.mean(draws <= p) for p in points])
    np.testing.assert_allclose(UniformSums(widths).cdf(points[None])[0], empirical, atol=4e-3 * 0.5 + 1e-3)


def test_gaussian_mixture_quantiles_invert_the_mixture_cdf():
    from scipy.stats import norm

    means = np.array([[0.0, 1.0], [3.0, 1.0]])
    stds = np.array([[1.0, 0.5], [0.5, 0.5]])
    low, high = gaussian_mixture_quantiles(means, stds, (0.05, 0.95))
    for level, values in ((0.05, low), (0.95, high)):
        cdf = norm.cdf((values[None] - means) / stds).mean(axis=0)
        np.testing.assert_allclose(cdf, level, atol=1e-9)
    assert high[1] == pytest.approx(1 + 1.6448536 * 0.5, abs=1e-7)  # one component: the Gaussian's quantile


def test_collapsed_refuses_classification():
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(2, 3, hidden=(4,), family="bnn"))
    with pytest.raises(PredictionError, match="regression"):
        collapsed_predict(model, X)
    with pytest.raises(PredictionError, match="variant"):
        collapsed_predict(regression_model("bnn"), X, variant="triangle")


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    from core.runs import RunConfig, train_run

    cache = tmp_path_factory.mktemp("collapsed-cache")
    regression = train_run(
        RunConfig(dataset="toy-cubic", method="lbbnn", hidden=(6,), train={"epochs": 3}), cache_dir=cache
    )
    classification = train_run(RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 1}), cache_dir=cache)
    return cache, regression, classification


def test_evaluate_cli_offers_both_collapsed_variants(tiny_runs, capsys):
    cache, regression, classification = tiny_runs
    results = {}
    for mode in ("collapsed", "collapsed-box"):
        assert (
            main(["evaluate", regression.run_id, "--mode", mode, "--samples", "8", "--json", "--cache-dir", str(cache)])
            == 0
        )
        results[mode] = json.loads(capsys.readouterr().out)
    direct = evaluate_collapsed(regression, regression.dataset(), "gaussian", samples=8)
    assert results["collapsed"]["rmse"] == pytest.approx(direct["rmse"])
    assert results["collapsed"]["log_likelihood"] == pytest.approx(direct["log_likelihood"])
    # The collapsed mean is the average over draws of the conditional means, i.e. bma's mean with the
    # last layer at its conditional mean; both variants share it when every term is collapsed.
    for result in results.values():
        assert set(result["coverage"]) == {"0.5", "0.9", "0.95"}
        assert 0 <= result["coverage"]["0.5"] <= result["coverage"]["0.9"] <= result["coverage"]["0.95"] <= 1
    # Coverage against a hand count: the share of test targets inside each central interval.
    # Gaussian variant: the predictive is the equal-weight mixture of N(mean_r, var_r) over the R draws,
    # so a target's PIT is the mean of the normal CDFs. Box variant: inside its own quantiles.
    from scipy.stats import norm

    dataset = regression.dataset()
    y = dataset.unstandardise(dataset.y_test).astype(np.float64)
    gaussian = collapsed_predict(regression, dataset.x_test, samples=8, variant="gaussian").unstandardised(
        dataset.target_mean, dataset.target_std
    )
    pit = norm.cdf((y[None, :] - gaussian.mean_per_draw) / np.sqrt(gaussian.var_per_draw)).mean(0)
    box = collapsed_predict(regression, dataset.x_test, samples=8, variant="box").unstandardised(
        dataset.target_mean, dataset.target_std
    )
    for level in (0.5, 0.9, 0.95):
        inside = np.abs(pit - 0.5) <= level / 2
        assert results["collapsed"]["coverage"][f"{level:g}"] == pytest.approx(inside.mean(), abs=1e-12)
        low, high = box.quantiles(((1 - level) / 2, (1 + level) / 2))
        count = np.mean((y >= low) & (y <= high))
        assert results["collapsed-box"]["coverage"][f"{level:g}"] == pytest.approx(count, abs=1.01 / len(y))
    assert 0 < results["collapsed"]["coverage"]["0.5"] < 1  # a case where the count is not trivial
    assert results["collapsed-box"]["variant"] == "box" and results["collapsed-box"]["mean_collapsed_terms"] > 0
    assert main(["evaluate", classification.run_id, "--mode", "collapsed", "--cache-dir", str(cache)]) == 2
    assert "regression" in capsys.readouterr().err
    assert (
        main(["evaluate", regression.run_id, "--mode", "collapsed", "--threshold", "0.5", "--cache-dir", str(cache)])
        == 2
    )


def test_backend_bands_and_reference_lookup(tiny_runs, monkeypatch):
    from dashboard import backend

    cache, regression, _ = tiny_runs
    monkeypatch.setenv("BNN_CACHE_DIR", str(cache))
    x = regression.dataset().x_grid
    bands = backend.collapsed_bands(regression, x, "gaussian", samples=6)
    assert bands["mean"].shape == (len(x),) and np.all(bands["low"] < bands["high"])
    assert backend.reference_bands(regression, x) is None  # nothing cached yet
    from tests.support import write_fake_reference

    ref_id = write_fake_reference(cache, regression.dataset(), hidden=(6,))
    found = backend.reference_bands(regression, x)
    assert found["reference_id"] == ref_id and found["low"].shape == (len(x),)
    assert np.all(found["low"] < found["mean"]) and np.all(found["mean"] < found["high"])
