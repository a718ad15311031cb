"""The mean-first warm start (train.warm_start_mean_epochs): the first warm-start epochs fit the mean
output alone under a unit noise scale, the rest the net's own likelihood. Checked: the phase's
objective against the Gaussian density in closed form and its gradient (nothing reaches the scale
output); the recorded data terms of each phase; validation of the option; run ids of configs
without it unchanged."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from core.errors import ConfigError
from core.models.network import BayesianMLP, ModelConfig
from core.runs import PRESETS, RunConfig
from core.train import TrainConfig, _MeanOnly, train

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def test_mean_only_objective_is_a_unit_gaussian_on_the_first_output_and_ignores_the_scale():
    rng = np.random.default_rng(0)
    output = torch.tensor(rng.normal(size=(5, 2)) * 3, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(rng.normal(size=5), dtype=torch.float64)
    value = _MeanOnly().log_prob(output, y)
    expected = stats.norm.logpdf(y.numpy(), loc=output.detach().numpy()[:, 0], scale=1.0)
    np.testing.assert_allclose(value.detach().numpy(), expected, rtol=1e-12)
    value.sum().backward()
    np.testing.assert_allclose(output.grad[:, 0].numpy(), (y - output[:, 0]).detach().numpy(), rtol=1e-12)
    assert torch.count_nonzero(output.grad[:, 1]) == 0  # the scale output gets no gradient
    assert _MeanOnly().kl() is None


def _fit(mean_epochs: int, warm: int = 6):
    generator = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 2 * x.squeeze(1) + 0.05 * torch.randn(64, generator=generator)  # noise sd 0.05, far below 1
    model = BayesianMLP(ModelConfig(1, None, hidden=(8,), family="bnn", likelihood="heteroscedastic"), generator)
    config = TrainConfig(
        epochs=1, batch_size=64, warm_start_epochs=warm, warm_start_mean_epochs=mean_epochs, kl_weight=1.0
    )
    result = train(model, x, y, config, seed=0, snapshots=False)
    return [h["data_term"] for h in result.history if h["phase"] == "warm-start"]


def test_mean_epochs_record_the_unit_scale_objective_then_the_heteroscedastic_one():
    mean_first = _fit(mean_epochs=3)
    # unit scale: -log N(y; m, 1) = 0.5 log 2 pi + 0.5 (y - m)^2 is never below 0.5 log 2 pi
    assert all(term >= HALF_LOG_2PI for term in mean_first[:3])
    # the same seed without the option: the first epoch is the heteroscedastic objective, another number
    joint = _fit(mean_epochs=0)
    assert joint[0] != pytest.approx(mean_first[0], rel=1e-6)
    # every warm-start epoch a mean-first one: the records are those of the unit-scale objective throughout
    only_mean = _fit(mean_epochs=6)
    assert only_mean[:3] == pytest.approx(mean_first[:3], rel=1e-6)
    assert all(term >= HALF_LOG_2PI for term in only_mean)


def test_the_option_is_validated():
    with pytest.raises(ConfigError, match="warm_start_mean_epochs"):
        TrainConfig(warm_start_epochs=2, warm_start_mean_epochs=3)
    with pytest.raises(ConfigError, match="warm_start_mean_epochs"):
        TrainConfig(warm_start_epochs=2, warm_start_mean_epochs=-1)
    for bad in ("2", True, 1.5):
        with pytest.raises(ConfigError, match="warm_start_mean_epochs"):
            RunConfig(dataset="toy-cubic", train={"warm_start_epochs": 4, "warm_start_mean_epochs": bad}).run_id("f")
    model = BayesianMLP(ModelConfig(2, 2, hidden=(4,), family="fnn"))  # a classifier: no mean output
    with pytest.raises(ConfigError, match="warm_start_mean_epochs: a mean-first warm start needs a Gaussian"):
        config = TrainConfig(epochs=1, warm_start_epochs=1, warm_start_mean_epochs=1)
        train(model, torch.zeros(4, 2), torch.zeros(4), config)


def test_run_ids_without_the_option_are_unchanged():
    config = PRESETS["uci-energy"]
    assert "warm_start_mean_epochs" not in config.canonical_json()
    assert config.replace(train={"warm_start_mean_epochs": 0}).run_id("f") == config.run_id("f")
    changed = config.replace(train={"warm_start_mean_epochs": 10})
    assert changed.run_id("f") != config.run_id("f")
    assert RunConfig.from_dict(changed.to_dict()).run_id("f") == changed.run_id("f")
