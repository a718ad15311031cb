"""The scale head on a frozen homoscedastic mean (train.scale_head): a heteroscedastic run that first trains
(or loads) the homoscedastic run of the same settings, then fits only the output layer's scale row.

Checked: the fitted noise sd against the known one on a 1-D toy (mean frozen at its fitted value); that the
second stage's gradients reach the scale row and nothing else; that the run's mean predictions are the
homoscedastic run's bit for bit and that it reuses the stored run; validation; the option through the run
store, the config JSON and a TOML file; run ids of configs without it unchanged."""

import json
import math

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.models.network import BayesianMLP, ModelConfig
from core.predict.engine import predict
from core.runs.config import RunConfig, load_config
from core.runs.training import load_run, train_run
from core.scale_head import SCALE_HEAD_PHASE, freeze_mean_path, install_frozen_mean, mean_stage_model
from core.train import TrainConfig, train

NOISE = {"noise": "variational", "precision_prior": "gamma", "precision_a": 1.0, "precision_b": 0.01}


def true_sd(x: torch.Tensor) -> torch.Tensor:
    return 0.1 + 0.2 * (x + 1)  # 0.1 at x = -1 up to 0.5 at x = 1


def test_the_fitted_scale_is_the_true_noise_sd_about_the_frozen_mean():
    n, hidden = 4000, 16
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(n, 1, generator=generator) * 2 - 1
    y = (x + true_sd(x) * torch.randn(n, 1, generator=generator)).squeeze(1)
    model = BayesianMLP(ModelConfig(1, None, hidden=(hidden,), family="fnn", likelihood="heteroscedastic"))
    config = TrainConfig(
        epochs=30,
        batch_size=400,
        kl_weight=1.0,
        lr_schedule="cosine",
        learning_rates={"weights": 3e-2},
        scale_head={"epochs": 30, "likelihood_options": {"noise": "point"}},
    )
    result = train(model, x, y, config, seed=0, snapshots=False)
    assert [h["phase"] for h in result.history] == ["train"] * 30 + [SCALE_HEAD_PHASE] * 30
    grid = torch.linspace(-0.95, 0.95, 20).unsqueeze(1)
    prediction = predict(model, grid, "mean")
    # With the mean frozen at m(x), the expected NLL is least at sd(x)^2 + (m(x) - x)^2: the truth the
    # head estimates (the fitted mean's error is a few hundredths against an sd of 0.1-0.5).
    bias = prediction.mean - grid.squeeze(1).numpy()
    truth = np.sqrt(true_sd(grid).squeeze(1).numpy() ** 2 + bias**2)
    # An sd estimated from m points is off by about 1 / sqrt(2 m) relatively; the head's hidden + 1
    # parameters share the n points: 3 such errors with m = n / (hidden + 1) (0.14 here).
    tolerance = 3 * math.sqrt((hidden + 1) / (2 * n))
    np.testing.assert_array_less(np.abs(prediction.std_per_draw[0] / truth - 1), tolerance)
    # what a head left at its start (the homoscedastic sd) would miss by: far outside the tolerance
    assert np.abs(truth / truth.mean() - 1).max() > 3 * tolerance


@pytest.mark.parametrize("family", ["concrete-dropout", "fnn"])
def test_stage_two_gradients_reach_only_the_scale_row(family):
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 3, generator=generator), torch.randn(32, generator=generator)
    het = BayesianMLP(ModelConfig(3, None, hidden=(8, 6), family=family, likelihood="heteroscedastic"))
    mean = mean_stage_model(het, {"epochs": 1, "likelihood_options": NOISE}, seed=0)
    install_frozen_mean(het, mean)
    undo = freeze_mean_path(het)
    het.train()
    output, kl = het.forward_with_kl(x)
    loss = -het.likelihood.log_prob(output, y).mean() + kl / len(y)
    loss.backward()
    output_weight = het.layers[-1].weight
    for name, parameter in het.named_parameters():
        if parameter is not output_weight:
            assert parameter.grad is None, name  # frozen: autograd never reached it
    assert torch.count_nonzero(output_weight.grad[0]) == 0  # the mean row
    assert torch.count_nonzero(output_weight.grad[1]) > 0  # the scale row
    undo()
    assert all(parameter.requires_grad for parameter in het.parameters())


def test_the_scale_row_starts_at_the_homoscedastic_noise_sd():
    het = BayesianMLP(ModelConfig(2, None, hidden=(5,), family="concrete-dropout", likelihood="heteroscedastic"))
    mean = mean_stage_model(het, {"epochs": 1, "likelihood_options": {"noise": "point", "noise_std": 0.3}}, 0)
    install_frozen_mean(het, mean)
    _, std = het.likelihood.mean_and_std(het.forward_with_weights(torch.randn(4, 2), het.mean_weights()))
    np.testing.assert_allclose(std.detach().numpy(), 0.3, rtol=1e-6)
    assert torch.equal(het.layers[-1].weight[:1], mean.layers[-1].weight)
    assert torch.equal(het.layers[0].weight, mean.layers[0].weight)


def _configs():
    base = RunConfig(
        dataset="toy-cubic",
        method="concrete-dropout",
        hidden=(8,),
        likelihood_options=NOISE,
        train={"epochs": 4, "batch_size": 32, "kl_weight": 1.0, "lr_schedule": "cosine"},
    )
    head = base.replace(
        likelihood="heteroscedastic",
        likelihood_options={},
        train={"scale_head": {"epochs": 3, "likelihood_options": NOISE}},
    )
    return base, head


def test_mean_predictions_are_the_homoscedastic_runs_bit_for_bit_and_the_stored_run_is_reused(tmp_path):
    base, head = _configs()
    assert head.mean_stage() == base
    homoscedastic = train_run(base, cache_dir=tmp_path)
    run = train_run(head, cache_dir=tmp_path)
    assert run.info["mean_run_id"] == homoscedastic.run_id
    # the first stage's records are the stored run's (it was loaded, not trained again)
    assert run.history[: len(homoscedastic.history)] == homoscedastic.history
    assert [h["phase"] for h in run.history[len(homoscedastic.history) :]] == [SCALE_HEAD_PHASE] * 3
    x = homoscedastic.dataset().x_test
    for mode in ("bma", "mean"):
        ours, theirs = predict(run.model, x, mode, samples=20), predict(homoscedastic.model, x, mode, samples=20)
        assert np.array_equal(ours.mean_per_draw, theirs.mean_per_draw)
        assert not np.array_equal(ours.std_per_draw, theirs.std_per_draw)  # the scale is per input now
    # without a store the first stage is trained in place, from the run's initial values: the same weights
    alone = BayesianMLP(run.model.config, torch.Generator().manual_seed(0))
    dataset = homoscedastic.dataset()
    train(alone, torch.from_numpy(dataset.x_train), torch.from_numpy(dataset.y_train), head.train, seed=0)
    for name, value in alone.state_dict().items():
        assert torch.equal(value, run.model.state_dict()[name]), name


def test_the_option_round_trips_through_the_store_json_and_toml(tmp_path):
    base, head = _configs()
    assert "scale_head" not in base.canonical_json()  # off: every earlier run id stays
    assert base.replace(train={"scale_head": None}).run_id("f") == base.run_id("f")
    again = RunConfig.from_dict(json.loads(json.dumps(head.to_dict())))
    assert again == head and again.run_id("f") == head.run_id("f")
    assert head.run_id("f") != head.replace(train={"scale_head": {"epochs": 4, "likelihood_options": NOISE}}).run_id(
        "f"
    )
    # the noise options in one form: defaults left out, 1 and 1.0 the same
    same = head.replace(train={"scale_head": {"epochs": 3.0, "likelihood_options": {**NOISE, "noise_std": 0.5}}})
    assert same.run_id("f") == head.run_id("f")
    path = tmp_path / "head.toml"
    path.write_text(
        'dataset = "toy-cubic"\nmethod = "concrete-dropout"\nhidden = [8]\nlikelihood = "heteroscedastic"\n'
        '[train]\nepochs = 4\nbatch_size = 32\nkl_weight = 1.0\nlr_schedule = "cosine"\n'
        "[train.scale_head]\nepochs = 3\n"
        '[train.scale_head.likelihood_options]\nnoise = "variational"\nprecision_prior = "gamma"\n'
        "precision_a = 1\nprecision_b = 0.01\n",
        encoding="utf-8",
    )
    assert load_config(path).run_id("f") == head.run_id("f")
    run = train_run(head, cache_dir=tmp_path / "store")
    loaded = load_run(run.run_id, cache_dir=tmp_path / "store")
    assert loaded.config == head and loaded.config.train.scale_head == head.train.scale_head
    assert loaded.config.train.total_epochs() == 4 + 3
    x = run.dataset().x_test
    assert np.array_equal(predict(loaded.model, x, "bma").std_per_draw, predict(run.model, x, "bma").std_per_draw)


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (3, "train.scale_head: must be a table"),
        ({"epochs": 2, "lr": 1}, "train.scale_head: unknown key(s) lr"),
        ({"likelihood_options": {}}, "train.scale_head.epochs: missing"),
        ({"epochs": 0}, "train.scale_head.epochs: must be >= 1"),
        ({"epochs": 1.5}, "train.scale_head.epochs: must be an integer"),
        ({"epochs": True}, "train.scale_head.epochs: must be an integer"),
        ({"epochs": "3"}, "train.scale_head.epochs: must be an integer"),
        ({"epochs": 10**9}, "train.scale_head.epochs: 1000000000 is above the limit"),
        ({"epochs": 2, "likelihood_options": 5}, "train.scale_head.likelihood_options: the homoscedastic"),
        ({"epochs": 2, "likelihood_options": {"noise": "loud"}}, "train.scale_head.likelihood_options.noise"),
        ({"epochs": 2, "likelihood_options": {"noise": "variational"}}, "precision_prior=gamma"),
    ],
)
def test_bad_values_get_one_message(head, message):
    with pytest.raises(ConfigError) as error:
        RunConfig(
            dataset="toy-cubic", method="concrete-dropout", likelihood="heteroscedastic", train={"scale_head": head}
        )
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_scale_head_needs_a_heteroscedastic_run_of_a_family_whose_draws_keep_the_mean():
    with pytest.raises(ConfigError, match="train.scale_head: fits the noise scale of a heteroscedastic run"):
        RunConfig(dataset="toy-cubic", method="concrete-dropout", train={"scale_head": {"epochs": 2}})
    with pytest.raises(ConfigError, match="train.scale_head: keeps the mean predictions bit-identical only for"):
        RunConfig(dataset="toy-cubic", method="bnn", likelihood="heteroscedastic", train={"scale_head": {"epochs": 2}})
    model = BayesianMLP(ModelConfig(1, None, hidden=(4,), family="lbbnn", likelihood="heteroscedastic"))
    with pytest.raises(ConfigError, match="not lbbnn"):
        train(model, torch.zeros(4, 1), torch.zeros(4), TrainConfig(epochs=1, scale_head={"epochs": 1}))
    with pytest.raises(ConfigError, match="has no homoscedastic first stage"):
        _configs()[0].mean_stage()
