"""The fast recipe: fast-mnist's short schedule, the `fast` grid keeping the first one, and the warm
start's own step size."""

from __future__ import annotations

import json

import pytest
import torch

from core.errors import ConfigError
from core.models.network import BayesianMLP, ModelConfig
from core.runs import PRESETS, RunConfig
from core.runs.presets import FAST_GRID_TRAIN, FAST_TRAIN
from core.train import WARM_START_LEARNING_RATE, TrainConfig, train

FINGERPRINT = "fingerprint-0"
# fast-mnist's and fast-fmnist's run ids when both trained the first schedule (tests/fixtures/configs_from_main.json
# holds fast-fmnist's, which must not move).
FIRST_SCHEDULE_IDS = {"fast-mnist": "dc79da91b227824c", "fast-fmnist": "30b886fba5ef097a"}


def test_the_fast_grid_keeps_the_first_schedule_and_its_run_ids():
    cells = {(label, method, seed): config for label, method, seed, _, config in PRESETS["fast"].cells()}
    for label in ("fast-mnist", "fast-fmnist"):
        cell = cells[(label, "lbbnn", 0)]
        assert cell.run_id(FINGERPRINT) == FIRST_SCHEDULE_IDS[label]
        assert cell.train.batch_size == FAST_GRID_TRAIN["batch_size"] == 100
        assert cell.train.epochs == 20 and cell.train.warm_start_learning_rate == WARM_START_LEARNING_RATE
    assert PRESETS["fast-fmnist"].run_id(FINGERPRINT) == FIRST_SCHEDULE_IDS["fast-fmnist"]


def test_fast_mnist_trains_the_short_schedule():
    fast = PRESETS["fast-mnist"]
    assert fast.run_id(FINGERPRINT) != FIRST_SCHEDULE_IDS["fast-mnist"]
    assert fast.train.batch_size == FAST_TRAIN["batch_size"] == 250
    assert fast.train.lr_schedule.value == "cosine" and fast.train.kl_weight == 0.05
    assert fast.train.warm_start_learning_rate == FAST_TRAIN["warm_start_learning_rate"]
    # The schedule is short: fewer steps than a third of the first one's.
    steps = (fast.train.warm_start_epochs + fast.train.epochs) * 60_000 // fast.train.batch_size
    first = (FAST_GRID_TRAIN["warm_start_epochs"] + FAST_GRID_TRAIN["epochs"]) * 60_000 // 100
    assert steps * 3 < first


def test_a_default_warm_start_rate_leaves_stored_configs_and_ids_alone():
    config = RunConfig(dataset="two-moons", train={"epochs": 2})
    stored = config.to_dict()["train"]
    assert "warm_start_learning_rate" not in stored
    same = RunConfig(dataset="two-moons", train={"epochs": 2, "warm_start_learning_rate": WARM_START_LEARNING_RATE})
    assert same.run_id(FINGERPRINT) == config.run_id(FINGERPRINT)
    other = RunConfig(dataset="two-moons", train={"epochs": 2, "warm_start_learning_rate": 3e-3})
    assert other.to_dict()["train"]["warm_start_learning_rate"] == 3e-3
    assert other.run_id(FINGERPRINT) != config.run_id(FINGERPRINT)
    again = RunConfig.from_dict(json.loads(json.dumps(other.to_dict())))
    assert again.run_id(FINGERPRINT) == other.run_id(FINGERPRINT)


@pytest.mark.parametrize("rate", [0, -1e-3, float("nan"), float("inf"), "fast", True])
def test_a_bad_warm_start_rate_is_refused_by_name(rate):
    with pytest.raises(ConfigError, match="warm_start_learning_rate"):
        TrainConfig(epochs=1, warm_start_epochs=1, warm_start_learning_rate=rate)
    with pytest.raises(ConfigError, match="warm_start_learning_rate"):
        RunConfig(dataset="two-moons", train={"epochs": 1, "warm_start_learning_rate": rate})


def _warm_started_means(rate: float) -> list[torch.Tensor]:
    """The LBBNN's means after one warm-start epoch of one full batch at `rate` (no main phase)."""
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = (x[:, 0] > 0).long()
    model = BayesianMLP(ModelConfig(in_features=3, out_classes=2, hidden=(4,), family="lbbnn"))
    # The main phase's step sizes are 1e-12: afterwards the means are the point net's weights.
    config = TrainConfig(
        epochs=1,
        warm_start_epochs=1,
        batch_size=64,
        warm_start_learning_rate=rate,
        learning_rates={"weights": 1e-12, "scales": 1e-12, "inclusion": 1e-12},
    )
    train(model, x, y, config, seed=0, snapshots=False)
    return [layer.weight_mu.detach().clone() for layer in model.layers]


def test_the_warm_start_takes_adam_steps_of_its_own_size():
    # One Adam step (bias-corrected, from zero moments) moves a weight by lr * g / (|g| + eps), i.e. by lr
    # wherever its gradient is not zero: from the same initial point net, the step scales with the rate.
    small, large = _warm_started_means(1e-4), _warm_started_means(3e-4)
    reference = _warm_started_means(1e-12)  # the point net's initial weights, to 1e-12
    for s, big, r in zip(small, large, reference):
        moved_small, moved_large = (s - r).abs(), (big - r).abs()
        active = moved_small > 1e-6
        assert active.float().mean() > 0.5
        torch.testing.assert_close(moved_large[active], 3 * moved_small[active], rtol=1e-3, atol=1e-7)


def test_time_to_quality_reports_cpu_seconds_labels_and_curves():
    from benchmarks.time_to_quality import render_markdown

    def entry(seed, cpu, reached=True, label=None, interrupted=False):
        rows = [
            {
                "epoch": 1,
                "phase": "warm-start",
                "train_seconds": 5.0,
                "train_cpu_seconds": 4.0,
                "load": 30.0,
                "mpm_mean_accuracy": 0.1,
                "density": 0.5,
            },
            {
                "epoch": 2,
                "phase": "train",
                "train_seconds": 90.0,
                "train_cpu_seconds": cpu,
                "load": 31.0,
                "mpm_mean_accuracy": 0.9813,
                "density": 0.073,
            },
        ]
        values = {
            "preset": "fast-mnist",
            "seed": seed,
            "target_accuracy": 0.981,
            "target_density": 0.08,
            "reached": rows[1] if reached else None,
            "rows": rows,
            "machine": {"cpu_count": 2},
            "date": "today",
            "threads": 1,
        }
        if label:
            values["label"] = label
        if interrupted:
            values["interrupted"] = True
        return values

    text = render_markdown([entry(0, 56.0), entry(1, 70.0), entry(2, 61.0)])
    assert "| fast-mnist | 0 | >= 0.981 at <= 0.08 | 2 | 90 | 0.9813 | 0.0730 | 56 (1), 31 |" in text
    assert (
        "reached by 3 of 3 seeds; median 1.5 min of training (range 1.5-1.5); 61 training CPU seconds "
        "(range 56-70)." in text
    )
    # Curves list the main phase only, with the CPU seconds of each epoch.
    assert "- fast-mnist, seed 0: 0.9813 / 0.073 @ 56" in text
    text = render_markdown([entry(0, 40.0, reached=False, label='fast-mnist {"batch_size":1000}', interrupted=True)])
    assert '| fast-mnist {"batch_size":1000} | 0 | >= 0.981 at <= 0.08 | stopped (2 epochs) |' in text
    assert "not reached by any of 1 seeds" in text
