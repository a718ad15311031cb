"""A family added from outside the package, exactly as docs/architecture.md ("Adding a family")
says: this module defines the layer class and registers it with one line in
`core.models.registry.FAMILY_PATHS`; then training, every prediction mode, a sweep and the run
store work for it as for the shipped families, and their numbers agree with an independent
computation from the layer's own parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from core.models import registry
from core.models.base import (
    Keep,
    LayerOptions,
    SparseLayer,
    StatisticSpec,
    inverse_softplus,
    local_reparameterisation,
    require,
)

FAMILY = "ridge-mf"


@dataclass(frozen=True)
class RidgeOptions(LayerOptions):
    prior_sd: float = 1.0  # the Gaussian prior's standard deviation
    init_sd: float = 1e-3  # q's initial standard deviation

    def validate(self) -> None:
        require(self.prior_sd > 0, "prior_sd", f"must be positive, got {self.prior_sd}")
        require(self.init_sd > 0, "init_sd", f"must be positive, got {self.init_sd}")


class RidgeLayer(SparseLayer):
    """Mean-field Gaussian q(w) = N(mu, sigma^2) under a N(0, prior_sd^2) prior; its sparsity
    statistic is the signal-to-noise ratio |mu| / sigma, kept above the threshold."""

    family = FAMILY
    spec = StatisticSpec("snr", Keep.ABOVE, 1.0, 0.0, math.inf)
    Options = RidgeOptions

    def __init__(
        self, in_features: int, out_features: int, options: RidgeOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        self.mu = self.initial_weights()
        self.rho = nn.Parameter(torch.full(self.shape, inverse_softplus(self.options.init_sd)))

    def sigma(self) -> Tensor:
        return nn.functional.softplus(self.rho)

    def forward(self, x: Tensor) -> Tensor:
        return local_reparameterisation(x, self.masked(self.mu), self.masked(self.sigma() ** 2), self.noise_generator)

    def mean_weights(self) -> Tensor:
        return self.masked(self.mu)

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        noise = torch.randn((n, *self.shape), generator=generator, device=self.mu.device, dtype=self.mu.dtype)
        return self.masked(self.mu + self.sigma() * noise)

    def conditional_normal(self) -> tuple[Tensor, Tensor]:
        return self.mean_weights(), self.masked(self.sigma())

    def kl(self) -> Tensor:
        var, prior_var = self.sigma() ** 2, self.options.prior_sd**2
        per_weight = 0.5 * ((var + self.mu**2) / prior_var - 1.0 - torch.log(var / prior_var))
        return (self.fixed_mask * per_weight).sum()

    def native_statistic(self) -> Tensor:
        return self.mu.abs() / self.sigma()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"weights": [self.mu], "scales": [self.rho]}

    def load_point_estimate(self, weight: Tensor) -> None:
        self.mu.data.copy_(weight)


@pytest.fixture
def registered(monkeypatch):
    """The one line of docs/architecture.md, undone after the test (monkeypatch)."""
    monkeypatch.setitem(registry.FAMILY_PATHS, FAMILY, f"{__name__}:RidgeLayer")
    return FAMILY


def mean_network(run, x: np.ndarray, masks=None) -> np.ndarray:
    """The posterior-mean network's output computed here from the layers' mu (masked), not by core."""
    h = torch.as_tensor(x, dtype=torch.float32)
    layers = run.model.layers
    with torch.no_grad():
        for i, layer in enumerate(layers):
            w = layer.mu if masks is None else layer.mu * masks[i]
            h = h @ w[:, :-1].T + w[:, -1]
            if i < len(layers) - 1:
                h = torch.relu(h)
    return h.numpy()


def kept_fraction(run, threshold: float) -> float:
    with torch.no_grad():
        kept = sum(int((layer.mu.abs() / layer.sigma() > threshold).sum()) for layer in run.model.layers)
        total = sum(layer.mu.numel() for layer in run.model.layers)
    return kept / total


def test_the_registered_family_is_a_family_like_any_other(registered):
    from core.errors import ConfigError
    from core.runs import RunConfig

    config = RunConfig(dataset="two-moons", method="RIDGE-MF", hidden=(6,), family_options={"prior_sd": 2.0})
    assert config.method == FAMILY and config.family_options == {"prior_sd": 2.0, "init_sd": 1e-3}
    with pytest.raises(ConfigError, match="prior_sd: must be positive"):
        RunConfig(dataset="two-moons", method=FAMILY, family_options={"prior_sd": -1.0})


@pytest.mark.slow
def test_an_outside_family_trains_predicts_in_every_mode_sweeps_and_is_stored(registered, tmp_path):
    from core.predict.modes import PredictionMode
    from core.runs import RunConfig, load_run, train_run

    config = RunConfig(dataset="two-moons", method=FAMILY, hidden=(8,), train={"epochs": 12})
    run = train_run(config, cache_dir=tmp_path)
    assert not run.from_cache and run.model.family == FAMILY

    # Training: the loss fell, and the network classifies the moons far above chance.
    losses = [record["loss"] for record in run.history]
    assert losses[-1] < losses[0], losses
    test = run.dataset()
    x_test, y_test = test.x_test, test.y_test

    # Every mode of PredictionMode, against what the layers' own parameters give.
    threshold = 1.0
    masks = [(layer.mu.abs() / layer.sigma() > threshold).float().detach() for layer in run.model.layers]
    for mode in PredictionMode:
        result = run.evaluate(mode=mode.value, samples=8)
        assert result["family"] == FAMILY and result["paper_name"] == mode.paper_name
        cut = mode.uses_threshold
        assert result["density"] == pytest.approx(kept_fraction(run, threshold) if cut else 1.0)
        assert result["accuracy"] > 0.75, (mode, result["accuracy"])
    mean = run.predict(x_test, mode="mean")
    expected = torch.softmax(torch.as_tensor(mean_network(run, x_test)), dim=1).numpy()
    np.testing.assert_allclose(mean.probs, expected, atol=1e-5)
    pruned = run.predict(x_test, mode="mpm-mean")
    expected = torch.softmax(torch.as_tensor(mean_network(run, x_test, masks)), dim=1).numpy()
    np.testing.assert_allclose(pruned.probs, expected, atol=1e-5)
    # bma: R draws of N(mu, sigma^2); its average tends to the mean network's as sigma is small.
    bma = run.predict(x_test, mode="bma", samples=8)
    assert bma.probs_per_draw.shape == (8, len(x_test), 2)
    assert not np.allclose(bma.probs_per_draw[0], bma.probs_per_draw[1])  # the draws differ
    assert np.abs(bma.probs - mean.probs).mean() < 0.05

    # A sweep: the density at each threshold is the fraction of weights with |mu|/sigma above it.
    sweep = run.sweep(thresholds=[0.0, 1.0, 5.0, 50.0, 1e6])
    assert sweep.statistic == "snr"
    np.testing.assert_allclose(sweep.density, [kept_fraction(run, t) for t in sweep.thresholds])
    assert sweep.density[-1] == 0.0 and all(np.diff(sweep.density) <= 0)

    # The store: the same run comes back by id, with the same predictions bit for bit.
    again = load_run(run.run_id, cache_dir=tmp_path)
    assert again.from_cache and again.config.method == FAMILY
    for mode in ("bma", "mean", "mpm", "prune"):
        np.testing.assert_array_equal(
            again.predict(x_test, mode=mode, samples=4).probs, run.predict(x_test, mode=mode, samples=4).probs
        )
    assert train_run(config, cache_dir=tmp_path).from_cache  # training it again is a cache hit
    assert (again.predict(x_test, mode="mean").predicted_class == y_test).mean() > 0.75


@pytest.mark.slow
def test_an_outside_regression_family_answers_the_collapsed_modes(registered, tmp_path):
    from core.predict.collapsed import collapsed_predict, evaluate_collapsed
    from core.predict.modes import collapsed_variant
    from core.runs import RunConfig, train_run

    run = train_run(
        RunConfig(dataset="toy-cubic", method=FAMILY, hidden=(8,), train={"epochs": 100}), cache_dir=tmp_path
    )
    x = run.dataset().x_test
    for mode in ("bma", "mean", "mpm", "mpm-mean", "prune"):
        result = run.evaluate(mode=mode, samples=16)
        assert result["family"] == FAMILY and np.isfinite(result["rmse"]), (mode, result)
    for mode in ("collapsed", "collapsed-box"):  # as `python -m core evaluate RUN --mode collapsed` does
        result = evaluate_collapsed(run.model, run.dataset(), collapsed_variant(mode), samples=16)
        assert np.isfinite(result["rmse"]) and 0 <= result["coverage"]["0.9"] <= 1, (mode, result)
        # The Gaussian variant's density is positive everywhere; the box's support is bounded.
        assert mode == "collapsed-box" or np.isfinite(result["log_likelihood"]), result
    # The collapsed predictive integrates the last layer out of the same body draws: its mean
    # estimates E[f(x)] as bma's does; with small sigma both sit near the mean network's output.
    collapsed = collapsed_predict(run, x, samples=64).mean_per_draw.mean(axis=0)  # standardised units
    bma = run.predict(x, mode="bma", samples=64, original_units=False).mean
    mean = run.predict(x, mode="mean", original_units=False).mean
    scale = float(np.std(mean)) + 1e-9
    assert np.abs(collapsed - mean).mean() / scale < 0.1
    assert np.abs(bma - mean).mean() / scale < 0.1
