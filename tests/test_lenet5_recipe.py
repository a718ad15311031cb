"""The convolutional point of the sparsity front (LeNet-5, `lenet5-mnist` and its 60-minute recipe
LENET5_FRONT_TRAIN): the recipe validates and aims at Molchanov et al.'s (2017) density, a tiny conv net trained
by the recipe's path (warm start, the ELBO ramped in, stop at a target density, post-training with the structure
fixed) stops where it should and keeps its structure, and front_recipes judges a conv network by the conv target."""

from __future__ import annotations

import json

import pytest
import torch

from core.runs import PRESETS, RunConfig
from core.runs.presets import LENET5_CONV, LENET5_FRONT_TRAIN, describe_preset


def test_the_recipe_validates_on_the_lenet5_shape_and_aims_at_the_published_density():
    config = PRESETS["lenet5-mnist"].replace(train=dict(LENET5_FRONT_TRAIN))
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.run_id("fingerprint-0") == config.run_id("fingerprint-0")
    assert config.conv == LENET5_CONV and config.method == "sparse-vd"
    train = config.train
    assert train.kl_weight == 1.0  # the ELBO, as the preset's description says
    assert train.target_density == 0.0036 and train.posttrain_epochs > 0 and train.posttrain_structure.value == "mpm"
    assert "0.9925" in describe_preset("lenet5-mnist") and "ELBO" in describe_preset("lenet5-mnist")


TINY_TARGET = 0.2


@pytest.mark.slow
def test_a_tiny_conv_net_stops_at_its_target_density_and_post_trains_the_structure():
    """The recipe (ELBO, ramp, log sigma^2's step, cosine, stop at a density, post-training) on 2,000 images of
    the bundled MNIST subset, one conv layer of 4 filters and 16 hidden units, batches of 50: so small a network
    cannot keep 0.36 % of its weights and stay accurate, so it stops at a density of 0.2 (on this CPU the main
    phase's densities were 0.62, 0.29, 0.17, 0.13, ...: three epochs)."""
    from core.data import load_dataset
    from core.models.network import ModelConfig, build_model
    from core.predict import predict
    from core.train import TrainConfig, train

    data = load_dataset("mnist-small")
    x, y = torch.as_tensor(data.x_train[:2000]), torch.as_tensor(data.y_train[:2000])
    shape = ModelConfig(784, 10, hidden=(16,), family="sparse-vd", conv=((4, 5),), image_shape=(1, 28, 28))
    model = build_model(shape, generator=torch.Generator().manual_seed(0))
    short = {"batch_size": 50, "warm_start_epochs": 1, "epochs": 8, "kl_anneal_epochs": 1, "posttrain_epochs": 1}
    config = TrainConfig(**{**LENET5_FRONT_TRAIN, **short, "target_density": TINY_TARGET})
    history = train(model, x, y, config, seed=0, snapshots=False).history
    phases = [record["phase"] for record in history]
    main = [record for record in history if record["phase"] == "train"]
    assert phases[0] == "warm-start" and phases[-1] == "posttrain"
    # The main phase stopped at the first epoch at or below the target, before its 8 epochs ran out ...
    assert main[-1]["density"] <= TINY_TARGET and main[-1].get("target_density_reached")
    assert all(record["density"] > TINY_TARGET for record in main[:-1]) and len(main) < 8
    # ... and post-training kept that structure: the fixed masks hold exactly the stopping epoch's kept weights
    # (sparse VD may still drop a weight whose log alpha rises above 3 while post-training: never add one).
    fixed = [layer.fixed_mask.bool() for layer in model.layers]
    assert model.density(fixed) == pytest.approx(main[-1]["density"])
    kept = model.keep_masks()
    assert all(bool((k & ~f).sum() == 0) for k, f in zip(kept, fixed))
    # The pruned conv net still classifies far above chance (0.1): on this CPU 0.84 of 1,000 test images.
    probs = predict(model.eval(), data.x_test[:1000], mode="mpm-mean").probs
    assert (probs.argmax(axis=1) == data.y_test[:1000]).mean() > 0.7


def _row(epoch, phase, accuracy, density):
    return {"epoch": epoch, "phase": phase, "mpm_mean_accuracy": accuracy, "density": density}


def test_a_conv_network_is_judged_by_the_conv_target_only():
    from benchmarks.front_recipes import CONV_TARGETS, TARGETS, best_row, reached, targets_of

    conv = {"dataset": "mnist", "method": "sparse-vd", "conv": [[20, 5], [50, 5]]}
    dense = {"dataset": "mnist", "method": "lbbnn"}
    assert targets_of(conv) is CONV_TARGETS and targets_of(dense) is TARGETS and targets_of(None) is TARGETS
    rows = [
        _row(1, "warm-start", 0.995, 1.0),
        _row(2, "train", 0.985, 0.0100),  # meets the fully connected 0.981 @ 0.0147, not the conv target
        _row(3, "train", 0.9920, 0.0035),  # sparse enough, 0.0005 short
        _row(4, "posttrain", 0.9925, 0.0035),  # the first on target
        _row(5, "posttrain", 0.9930, 0.0035),
    ]
    assert reached(rows[1]) == ["0.981 @ density 0.0147"] and reached(rows[1], CONV_TARGETS) == []
    assert reached(rows[2], CONV_TARGETS) == [] and reached(rows[3], CONV_TARGETS) == ["0.9925 @ density 0.0036"]
    assert reached(_row(6, "train", 0.995, 0.0037), CONV_TARGETS) == []  # accurate, not sparse enough
    assert best_row({"config": conv, "rows": rows})["epoch"] == 4
    assert best_row({"config": conv, "rows": rows[:3]})["epoch"] == 3  # none on target: the last
    assert best_row({"config": dense, "rows": rows})["epoch"] == 2  # a dense net's first on its target


def test_the_front_places_a_lenet5_recipe_beside_the_published_lenet5_points():
    from benchmarks.pareto import PUBLISHED, front_points

    rows = [_row(1, "warm-start", 0.99, 1.0), _row(2, "train", 0.991, 0.0040)]
    conv = {"dataset": "mnist", "method": "sparse-vd", "family_options": {}, "conv": [[20, 5], [50, 5]]}
    other = {**conv, "conv": [[4, 5]]}
    dense = {"dataset": "mnist", "method": "sparse-vd", "family_options": {}}
    entries = [{"label": "x", "run_id": str(i), "config": c, "rows": rows} for i, c in enumerate((conv, other, dense))]
    points = front_points(entries)
    assert [p.family for p in points] == ["sparse-vd (LeNet-5)", "sparse-vd (conv)", "sparse-vd"]
    assert (points[0].accuracy, points[0].density) == (0.991, 0.0040)
    assert "sparse-vd (LeNet-5)" in {p.family for p in PUBLISHED}  # drawn in the published point's colour
