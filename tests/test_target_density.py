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


# --- post-training at a density (TrainConfig.posttrain_density) -------------------------------------


def test_masks_at_a_density_keep_the_largest_statistics_of_the_mpm():
    model = tiny_model()
    with torch.no_grad():  # spread the inclusion logits so the statistics are distinct and straddle 0.5
        for layer in model.layers:
            layer.inclusion_logit.copy_(
                torch.randn(layer.inclusion_logit.shape, generator=torch.Generator().manual_seed(3))
            )
    mpm = model.keep_masks()
    kept = sum(int(m.sum()) for m in mpm)
    total = sum(m.numel() for m in mpm)
    assert 0 < kept < total
    for density in (0.5 * kept / total, 0.2 * kept / total, 1 / total):
        masks = model.keep_masks_at_density(density)
        budget = int(np.floor(density * total + 1e-9))
        assert sum(int(m.sum()) for m in masks) == budget  # exactly the budget: the statistics are distinct
        assert all(bool((m & ~p).sum() == 0) for m, p in zip(masks, mpm))  # a subset of the mpm
        statistics = [layer.native_statistic() for layer in model.layers]
        chosen = torch.cat([s[m] for s, m in zip(statistics, masks)])
        dropped = torch.cat([s[p & ~m] for s, m, p in zip(statistics, masks, mpm)])
        assert chosen.min() >= dropped.max()  # brute force: no dropped weight outranks a kept one
    assert all(torch.equal(a, b) for a, b in zip(model.keep_masks_at_density(kept / total), mpm))
    assert all(torch.equal(a, b) for a, b in zip(model.keep_masks_at_density(1.0), mpm))
    assert sum(int(m.sum()) for m in model.keep_masks_at_density(0.1 / total)) == 0


def test_post_training_fixes_the_cut_structure():
    rates = {"weights": 0.01, "scales": 0.01, "inclusion": 0.02}
    main = TrainConfig(epochs=4, batch_size=50, learning_rates=rates)
    trained, _ = history_of(main)
    mpm_density = BayesianMLP.density(trained.keep_masks())
    target = mpm_density / 2
    expected = trained.keep_masks_at_density(target)
    model, history = history_of(
        TrainConfig(epochs=4, batch_size=50, learning_rates=rates, posttrain_epochs=2, posttrain_density=target)
    )
    assert [r["phase"] for r in history][-2:] == ["posttrain", "posttrain"]
    fixed = model.keep_masks()
    assert all(torch.equal(a, b) for a, b in zip(fixed, expected))  # the same run's main phase, then the cut
    assert BayesianMLP.density(fixed) <= target
    assert history[-1]["density"] == pytest.approx(BayesianMLP.density(fixed))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"posttrain_density": 0, "posttrain_epochs": 1}, "posttrain_density"),
        ({"posttrain_density": 1.5, "posttrain_epochs": 1}, "posttrain_density"),
        ({"posttrain_density": float("nan"), "posttrain_epochs": 1}, "posttrain_density"),
        ({"posttrain_density": True, "posttrain_epochs": 1}, "posttrain_density"),
        ({"posttrain_density": 0.1}, "posttrain_epochs > 0"),
        ({"posttrain_density": 0.1, "posttrain_epochs": 1, "posttrain_structure": "alpha"}, "posttrain_structure"),
    ],
)
def test_posttrain_density_is_validated(changes, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**changes)


def test_run_ids_without_posttrain_density_are_unchanged():
    from core.runs import RunConfig

    base = RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 3, "posttrain_epochs": 1})
    assert "posttrain_density" not in base.canonical_json()
    cut = RunConfig(
        dataset="two-moons", hidden=(4,), train={"epochs": 3, "posttrain_epochs": 1, "posttrain_density": 0.2}
    )
    assert cut.run_id("data") != base.run_id("data")
    assert RunConfig.from_dict(cut.to_dict()) == cut
