"""Train to a target density (TrainConfig.target_density, `--target-density`, as R LBBNN's min_density):
the main phase stops after the first epoch whose median-probability-model density is at most the target."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.models.network import BayesianMLP, ModelConfig
from core.train import TrainConfig, train


def tiny_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def tiny_model():
    # A high initial inclusion and a small prior inclusion: the density falls epoch after epoch.
    options = {"init_inclusion_low": 0.55, "init_inclusion_high": 0.6, "prior_inclusion": 0.05}
    return BayesianMLP(
        ModelConfig(3, 2, hidden=(8,), family="lbbnn", family_options=options), torch.Generator().manual_seed(0)
    )


def history_of(config: TrainConfig):
    x, y = tiny_problem()
    model = tiny_model()
    return model, train(model, x, y, config, seed=1, snapshots=False).history


def test_training_stops_at_the_first_epoch_at_or_below_the_target():
    rates = {"weights": 0.01, "scales": 0.01, "inclusion": 0.02}
    _, full = history_of(TrainConfig(epochs=12, batch_size=50, learning_rates=rates))
    densities = [record["density"] for record in full]
    assert densities[-1] < densities[0]  # the run prunes: there is a target to reach part-way
    # The first epoch of the lowest density (on this CPU 1.0, 1.0, 0.9, 0.62, 0.4, 0.26, 0.24, 0.26, ...):
    # no earlier epoch is at or below it.
    k = int(np.argmin(densities))
    assert k > 0
    model, stopped = history_of(
        TrainConfig(epochs=12, batch_size=50, learning_rates=rates, target_density=densities[k])
    )
    assert len(stopped) == k + 1
    assert stopped[-1]["target_density_reached"] is True
    assert [r["density"] for r in stopped] == densities[: k + 1]  # the same run up to the stop
    assert BayesianMLP.density(model.keep_masks()) <= densities[k]
    assert not any(r.get("target_density_reached") for r in stopped[:-1])
    # Never reached: every epoch runs.
    _, unreached = history_of(TrainConfig(epochs=4, batch_size=50, learning_rates=rates, target_density=1e-9))
    assert len(unreached) == 4 and not any(r.get("target_density_reached") for r in unreached)


def test_post_training_still_follows_and_pretraining_never_stops():
    _, history = history_of(
        TrainConfig(epochs=5, pretrain_epochs=2, posttrain_epochs=2, batch_size=50, target_density=1.0)
    )
    assert [r["phase"] for r in history] == ["pretrain", "pretrain", "train", "posttrain", "posttrain"]


@pytest.mark.parametrize("value", [0, -0.1, 1.5, float("nan"), float("inf"), True, "0.1"])
def test_target_density_is_validated(value):
    with pytest.raises(ConfigError, match="target_density"):
        TrainConfig(target_density=value)


def test_run_ids_without_the_option_are_unchanged_and_the_cli_flag_sets_it():
    from core.cli import build_parser
    from core.cli.runs import config_from_args
    from core.errors import BNNError
    from core.runs import RunConfig

    base = RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 3})
    assert "target_density" not in base.canonical_json()
    assert base.run_id("data") == RunConfig(
        dataset="two-moons", hidden=(4,), train={"epochs": 3, "target_density": None}
    ).run_id("data")
    targeted = RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 3, "target_density": 0.2})
    assert targeted.run_id("data") != base.run_id("data")
    assert RunConfig.from_dict(targeted.to_dict()) == targeted
    args = build_parser().parse_args(["train", "--dataset", "two-moons", "--hidden", "4", "--target-density", "0.01"])
    assert config_from_args(args).train.target_density == 0.01
    for bad in ("0", "2", "x", "nan"):
        args = build_parser().parse_args(["train", "--dataset", "two-moons", "--target-density", bad])
        with pytest.raises(BNNError, match="target-density"):
            config_from_args(args)
