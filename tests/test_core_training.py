"""The training loop: reproducibility, phases, cancel, divergence, and accuracy floors."""

import math
import threading

import pytest
import torch

from core.data import load_dataset
from core.errors import ConfigError, TrainingCancelled, TrainingDivergedError
from core.models.network import BayesianMLP, ModelConfig
from core.train import DEFAULT_KL_WEIGHT, TrainConfig, default_epochs, train


def moons(n=256):
    ds = load_dataset("two-moons", n=n)
    return ds, torch.tensor(ds.x_train), torch.tensor(ds.y_train)


def small_model(family="lbbnn", in_features=2, classes=2, hidden=(16,), **options):
    return BayesianMLP(
        ModelConfig(in_features=in_features, out_classes=classes, hidden=hidden, family=family, family_options=options)
    )


def state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_is_reproducible_on_cpu_and_leaves_global_rng_alone():
    _, x, y = moons()
    states = []
    for _ in range(2):
        torch.manual_seed(0)
        model = small_model()
        torch.manual_seed(123)
        before = torch.rand(1)
        torch.manual_seed(123)
        train(model, x, y, TrainConfig(epochs=2, batch_size=32), seed=7)
        assert torch.equal(torch.rand(1), before)  # the caller's RNG stream is untouched
        states.append(state(model))
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_progress_reports_data_term_kl_density_and_time_per_epoch():
    _, x, y = moons()
    records = []
    result = train(small_model(), x, y, TrainConfig(epochs=3, batch_size=64), progress=records.append)
    assert [r["epoch"] for r in records] == [1, 2, 3]
    for record in records:
        assert record["loss"] == pytest.approx(
            record["data_term"] + record["kl_weight"] * record["kl"] / len(x), rel=1e-5
        )
        assert record["kl_weight"] == DEFAULT_KL_WEIGHT
        assert len(record["kl_per_layer"]) == 2 and all(k >= 0 for k in record["kl_per_layer"])
        assert 0 <= record["density"] <= 1 and record["elapsed"] >= record["seconds"] > 0
    assert result.seconds_per_epoch > 0


def test_the_reported_kl_is_the_exact_kl_at_the_end_of_the_epoch():
    """Steps train on a surrogate KL (right gradient, value 0); the record must still carry the true value."""
    _, x, y = moons()
    model = small_model()
    result = train(model, x, y, TrainConfig(epochs=2, batch_size=64))
    with torch.no_grad():
        exact = [float(layer.kl()) for layer in model.layers]
    assert result.history[-1]["kl_per_layer"] == pytest.approx(exact, rel=1e-6)
    assert result.history[-1]["kl"] == pytest.approx(sum(exact), rel=1e-6) and sum(exact) > 1.0


def test_kl_annealing_ramps_the_kl_weight_linearly():
    _, x, y = moons()
    records = []
    train(
        small_model(),
        x,
        y,
        TrainConfig(epochs=4, kl_anneal_epochs=4, batch_size=128, kl_weight=1.0),
        progress=records.append,
    )
    assert [r["kl_weight"] for r in records] == [0.25, 0.5, 0.75, 1.0]
    records.clear()
    # A tempered objective anneals up to its own weight, not to 1.
    train(
        small_model(),
        x,
        y,
        TrainConfig(epochs=3, kl_anneal_epochs=2, batch_size=128, kl_weight=0.2),
        progress=records.append,
    )
    assert [r["kl_weight"] for r in records] == pytest.approx([0.1, 0.2, 0.2])


def test_cancel_flag_is_honoured_within_an_epoch():
    _, x, y = moons()
    cancel = threading.Event()
    calls = []

    def progress(record):
        calls.append(record)
        cancel.set()

    with pytest.raises(TrainingCancelled):
        train(small_model(), x, y, TrainConfig(epochs=50, batch_size=16), progress=progress, cancel=cancel)
    assert len(calls) == 1


def test_a_nan_loss_stops_training_naming_the_epoch_and_the_cause():
    _, x, y = moons()
    model = small_model()
    bad = x.clone()
    bad[5, 0] = float("nan")
    with pytest.raises(TrainingDivergedError, match=r"epoch 1 .*learning rate"):
        train(model, bad, y, TrainConfig(epochs=3, batch_size=64))


def test_mismatched_inputs_are_refused_before_training():
    _, x, y = moons()
    with pytest.raises(ConfigError, match="features"):
        train(small_model(in_features=3), x, y, TrainConfig(epochs=1))


def test_pretraining_with_empirical_bayes_moves_the_prior_then_freezes_it():
    _, x, y = moons()
    model = small_model()
    before = [layer.prior_hyperparameters() for layer in model.layers]
    records = []
    train(
        model,
        x,
        y,
        TrainConfig(pretrain_epochs=3, epochs=2, empirical_bayes=True, batch_size=32),
        progress=records.append,
    )
    after = [layer.prior_hyperparameters() for layer in model.layers]
    assert [r["phase"] for r in records] == ["pretrain"] * 3 + ["train"] * 2
    assert any(abs(a["prior_inclusion"] - b["prior_inclusion"]) > 1e-4 for a, b in zip(after, before))
    assert not any(p.requires_grad for layer in model.layers for p in layer.parameter_groups()["prior"])


def test_posttraining_on_the_median_probability_model_keeps_pruned_weights_at_zero():
    _, x, y = moons()
    model = small_model()
    train(model, x, y, TrainConfig(epochs=2, posttrain_epochs=2, batch_size=32, posttrain_structure="mpm"))
    with torch.no_grad():
        for layer in model.layers:
            pruned = layer.fixed_mask == 0
            assert layer.is_structure_fixed and bool(layer.structure_fixed)
            assert torch.all(layer.mean_weights()[pruned] == 0)
            assert torch.all(layer.sample_weights(5)[:, pruned] == 0)
            assert not layer.inclusion_logit.requires_grad
    # The fixed structure survives a state_dict round trip.
    fresh = small_model()
    fresh.load_state_dict(model.state_dict())
    assert all(layer.is_structure_fixed for layer in fresh.layers)


def test_posttraining_with_fixed_alpha_freezes_the_inclusion_probabilities():
    _, x, y = moons()
    model = small_model()
    records = []

    def remember(record):
        records.append((record["phase"], [layer.inclusion_logit.detach().clone() for layer in model.layers]))

    train(
        model,
        x,
        y,
        TrainConfig(epochs=2, posttrain_epochs=2, batch_size=32, posttrain_structure="alpha"),
        progress=remember,
    )
    end_of_training = records[1][1]
    for logits_before, layer in zip(end_of_training, model.layers):
        assert torch.equal(logits_before, layer.inclusion_logit)


def test_warm_start_copies_a_trained_deterministic_net_into_the_means():
    ds, x, y = moons(512)
    model = small_model(family="bnn")
    records = []
    tiny_rates = {"weights": 1e-9, "scales": 1e-9}
    train(
        model,
        x,
        y,
        TrainConfig(epochs=1, warm_start_epochs=8, batch_size=32, learning_rates=tiny_rates),
        progress=records.append,
    )
    assert [r["phase"] for r in records][:8] == ["warm-start"] * 8
    with torch.no_grad():
        out = model.forward_with_weights(torch.tensor(ds.x_test), model.mean_weights())
        accuracy = (out.argmax(-1).numpy() == ds.y_test).mean()
    # A cold model with near-zero learning rates stays at chance; the warm start does not.
    assert accuracy > 0.8


@pytest.mark.slow
@pytest.mark.parametrize("family", ["lbbnn", "bnn", "bnn-mixture", "variational-dense", "fnn"])
def test_each_family_learns_mnist_small(family):
    ds = load_dataset("mnist-small")
    x, y = torch.tensor(ds.x_train[:4000]), torch.tensor(ds.y_train[:4000])
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(in_features=784, out_classes=10, hidden=(64,), family=family))
    train(model, x, y, TrainConfig(epochs=2, batch_size=100), seed=0)
    with torch.no_grad():
        test_x = torch.tensor(ds.x_test)
        mean_acc = (model.forward_with_weights(test_x, model.mean_weights()).argmax(-1).numpy() == ds.y_test).mean()
        masks = model.keep_masks()
        sparse_acc = (
            model.forward_with_weights(test_x, model.conditional_mean_weights(masks)).argmax(-1).numpy() == ds.y_test
        ).mean()
    assert mean_acc > 0.8, mean_acc
    assert sparse_acc > 0.7, sparse_acc


def test_default_epochs_give_about_the_default_number_of_steps():
    assert default_epochs(60_000, 100) == 5  # full MNIST: 600 steps an epoch, the floor of 5 epochs
    assert default_epochs(10_000, 100) == 30  # 100 steps an epoch -> 3000 steps
    assert default_epochs(500, 100) == 600  # 5 steps an epoch
    assert default_epochs(40, 100) == 3000  # one step an epoch, capped at 3000 epochs


def test_train_fills_in_the_default_epochs_from_the_training_set(monkeypatch):
    import core.train

    assert default_epochs(250, 100) == 1000  # the shipped step budget: 3000 steps of 3 batches
    # Trained with a budget of 30 steps (10 epochs of 3 batches), not 3000: the fill-in is what is checked.
    monkeypatch.setattr(core.train, "DEFAULT_STEPS", 30)
    x, y = torch.randn(250, 4), torch.randint(0, 3, (250,))
    config = TrainConfig(batch_size=100)
    assert config.epochs is None
    records = []
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(in_features=4, out_classes=3, hidden=(3,), family="bnn"))
    train(model, x, y, config, progress=records.append)
    assert len(records) == default_epochs(250, 100) == 10


def test_cosine_schedule_factor_starts_at_one_and_decays_to_near_zero():
    from core.train import learning_rate_factor

    assert [learning_rate_factor("constant", e, 4) for e in range(4)] == [1.0] * 4
    factors = [learning_rate_factor("cosine", e, 4) for e in range(4)]
    assert factors == pytest.approx([1.0, 0.5 * (1 + 2**-0.5), 0.5, 0.5 * (1 - 2**-0.5)])
    assert all(a > b > 0 for a, b in zip(factors, factors[1:]))
    with pytest.raises(ConfigError, match="lr_schedule"):
        TrainConfig(epochs=2, lr_schedule="linear")


def test_cosine_schedule_acts_on_the_main_phase_only():
    _, x, y = moons()
    records = []
    config = TrainConfig(epochs=4, warm_start_epochs=1, posttrain_epochs=1, batch_size=64, lr_schedule="cosine")
    train(small_model(), x, y, config, progress=records.append)
    main = [r for r in records if r.get("phase") == "train"]
    assert [r["learning_rate_factor"] for r in main] == pytest.approx(
        [0.5 * (1 + math.cos(math.pi * e / 4)) for e in range(4)]
    )
    assert all("learning_rate_factor" not in r for r in records if r.get("phase") != "train")


def test_posttrain_schedule_acts_on_the_post_training_phase_only():
    _, x, y = moons()
    records = []
    config = TrainConfig(epochs=2, posttrain_epochs=3, batch_size=64, posttrain_lr_schedule="cosine")
    train(small_model(), x, y, config, progress=records.append)
    post = [r for r in records if r.get("phase") == "posttrain"]
    assert [r["learning_rate_factor"] for r in post] == pytest.approx(
        [0.5 * (1 + math.cos(math.pi * e / 3)) for e in range(3)]
    )
    assert all("learning_rate_factor" not in r for r in records if r.get("phase") != "posttrain")
    with pytest.raises(ConfigError, match="posttrain_lr_schedule"):
        TrainConfig(posttrain_lr_schedule="sometimes")


def test_run_ids_without_a_posttrain_schedule_are_unchanged():
    from core.runs import RunConfig

    base = RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 3, "posttrain_epochs": 1})
    assert "posttrain_lr_schedule" not in base.canonical_json()
    same = RunConfig(
        dataset="two-moons",
        hidden=(4,),
        train={"epochs": 3, "posttrain_epochs": 1, "posttrain_lr_schedule": "constant"},
    )
    assert same.run_id("data") == base.run_id("data")
    cosine = RunConfig(
        dataset="two-moons", hidden=(4,), train={"epochs": 3, "posttrain_epochs": 1, "posttrain_lr_schedule": "cosine"}
    )
    assert cosine.run_id("data") != base.run_id("data")
    assert RunConfig.from_dict(cosine.to_dict()) == cosine


def test_cosine_schedule_is_the_constant_one_in_a_single_epoch_and_differs_after():
    """Factor 1 in the first epoch: one epoch of each is the same training, bit for bit; with more
    epochs the smaller later steps give other weights."""
    _, x, y = moons()
    trained = {}
    for epochs in (1, 3):
        for schedule in ("constant", "cosine"):
            torch.manual_seed(0)
            model = small_model()
            train(model, x, y, TrainConfig(epochs=epochs, batch_size=64, lr_schedule=schedule), seed=3)
            trained[epochs, schedule] = state(model)
    for key in trained[1, "constant"]:
        assert torch.equal(trained[1, "constant"][key], trained[1, "cosine"][key]), key
    assert any(not torch.equal(trained[3, "constant"][k], trained[3, "cosine"][k]) for k in trained[3, "constant"])


def test_parameter_groups_with_one_step_size_share_an_adam_group_and_update_as_if_apart():
    from core.train import DEFAULT_LEARNING_RATES, _make_optimizer

    rates = dict(DEFAULT_LEARNING_RATES, weights=1e-2, scales=1e-2, inclusion=3e-3)
    torch.manual_seed(0)
    merged_model = BayesianMLP(ModelConfig(in_features=3, out_classes=2, hidden=(4,), family="lbbnn"))
    apart_model = BayesianMLP(ModelConfig(in_features=3, out_classes=2, hidden=(4,), family="lbbnn"))
    apart_model.load_state_dict(merged_model.state_dict())
    merged = _make_optimizer(merged_model, rates)
    assert sorted(len(g["params"]) for g in merged.param_groups) == [2, 4]  # inclusion apart; weights + scales
    apart = torch.optim.Adam(
        [
            {"params": [p for p in params if p.requires_grad], "lr": rates[name]}
            for name, params in apart_model.parameter_groups().items()
            if any(p.requires_grad for p in params)
        ],
        fused=True,
    )
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=generator) for p in merged_model.parameters()]
        for model, optimizer in ((merged_model, merged), (apart_model, apart)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone() if p.requires_grad else None
            optimizer.step()
    for (name, a), b in zip(merged_model.state_dict().items(), apart_model.state_dict().values()):
        assert torch.equal(a, b), name
