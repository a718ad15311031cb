"""The `input_skip` option: every layer after the first also reads the inputs (Hubin, Storvik et al.'s
input-skip LBBNN), with its own inclusion variables for the skip weights.

Checked against a hand-built computation, against the plain network when every skip weight is
excluded, through every prediction mode, the sweep, the export and the run store, and for the
run ids of configurations without the option."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import export_pruned, load_exported, predict
from core.predict.structure import skip_layers
from core.predict.sweep import sweep

SKIP_FAMILIES = ["lbbnn", "bnn", "sparse-vd", "fnn", "horseshoe", "concrete-dropout", "bnn-mixture", "lbbnn-lfmvn"]
D = 5


def skip_model(family="lbbnn", hidden=(6, 4), classes=3, seed=0, likelihood="categorical", skip=True):
    torch.manual_seed(seed)
    options = {"input_skip": True} if skip else {}
    return BayesianMLP(
        ModelConfig(D, classes, hidden=hidden, family=family, family_options=options, likelihood=likelihood)
    )


def inputs(n=32, seed=1):
    return np.random.default_rng(seed).normal(size=(n, D)).astype(np.float32)


def by_hand(weights, x):
    """relu(W0 [x;1]), then each later layer W_l [h; x; 1] (ReLU between layers), written out."""
    h = x
    for index, w in enumerate(weights):
        w = w.detach().double().numpy()
        reads = h if index == 0 else np.concatenate([h, x], axis=1)
        h = reads @ w[:, :-1].T + w[:, -1]
        if index < len(weights) - 1:
            h = np.maximum(h, 0.0)
    return h


@pytest.mark.parametrize("family", SKIP_FAMILIES)
def test_layer_shapes_and_every_forward_match_a_hand_built_net(family):
    model = skip_model(family)
    assert [layer.shape for layer in model.layers] == [(6, D + 1), (4, 6 + D + 1), (3, 4 + D + 1)]
    assert skip_layers([layer.shape for layer in model.layers]) == [False, True, True]
    x = inputs()
    with torch.no_grad():
        mean = model.mean_weights()
        expected = by_hand(mean, x.astype(np.float64))
        got = model.forward_with_weights(torch.from_numpy(x).double(), [w.double() for w in mean]).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
        # The prediction engine's compact path (all kept: the posterior-mean network).
        logits = predict(model, x, "mean").probs
        np.testing.assert_allclose(logits, torch.softmax(torch.from_numpy(expected), -1).numpy(), atol=2e-6)
        # Two sampled networks at once, each by hand.
        draws = model.sample_weights(2, seed=3)
        batched = model.forward_with_weights(torch.from_numpy(x), draws).numpy()
        for r in range(2):
            np.testing.assert_allclose(
                batched[r], by_hand([w[r] for w in draws], x.astype(np.float64)), rtol=1e-4, atol=1e-5
            )


@pytest.mark.parametrize("family", ["lbbnn", "bnn", "sparse-vd", "fnn"])
def test_training_forward_is_the_mean_net_when_noise_is_off(family):
    """The stochastic forward at zero noise (fnn: none) is the hand-built net of its weights."""
    model = skip_model(family)
    x = torch.from_numpy(inputs())
    for layer in model.layers:
        if hasattr(layer, "weight_rho"):
            layer.weight_rho.data.fill_(-60.0)  # softplus: sigma ~ 1e-26
        if hasattr(layer, "log_sigma2"):
            layer.log_sigma2.data.fill_(-120.0)
        if hasattr(layer, "inclusion_logit"):
            layer.inclusion_logit.data.fill_(60.0)  # alpha = 1
    with torch.no_grad():
        out, kl = model.forward_with_kl(x)
        plain = model(x)
    expected = by_hand(model.mean_weights(), x.double().numpy())
    # LBBNN's variance alpha (sigma^2 + mu^2) - (alpha mu)^2 cancels in float32 to ~1e-9 (noise ~3e-5
    # per weight): a tolerance far below what a miswired skip column would change (order 0.1).
    np.testing.assert_allclose(out.double().numpy(), expected, rtol=0, atol=2e-3)
    np.testing.assert_allclose(plain.double().numpy(), expected, rtol=0, atol=2e-3)
    assert torch.isfinite(kl)


@pytest.mark.parametrize("family", ["lbbnn", "bnn", "sparse-vd", "fnn"])
def test_with_every_skip_weight_excluded_it_is_the_plain_network(family):
    """Zero the skip columns of the skip net and give the plain net the same other weights: the
    outputs agree in every mode that uses one network."""
    skip = skip_model(family, seed=4)
    plain = skip_model(family, seed=4, skip=False)
    with torch.no_grad():
        for index, (a, b) in enumerate(zip(skip.layers, plain.layers)):
            for name, param in a.named_parameters():
                target = dict(b.named_parameters())[name]
                if param.shape == target.shape:
                    target.copy_(param)
                    continue
                width = b.in_features
                target.copy_(torch.cat([param[..., :width], param[..., -1:]], dim=-1))
            # Both structures fixed (LBBNN's mean then uses the 0/1 mask, not alpha): every weight kept
            # but the skip weights.
            mask = torch.ones(a.shape)
            if index > 0:
                mask[:, a.in_features - D : a.in_features] = 0.0
            a.fix_structure(mask)
            b.fix_structure(torch.ones(b.shape))
    x = inputs()
    np.testing.assert_allclose(predict(skip, x, "mean").probs, predict(plain, x, "mean").probs, atol=1e-6)
    with torch.no_grad():
        got = skip.forward_with_weights(torch.from_numpy(x), skip.mean_weights())
        want = plain.forward_with_weights(torch.from_numpy(x), plain.mean_weights())
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


def test_density_counts_skip_weights():
    model = skip_model("lbbnn")
    assert model.n_weights() == 6 * (D + 1) + 4 * (6 + D + 1) + 3 * (4 + D + 1)
    masks = model.keep_masks(0.0)
    assert BayesianMLP.density(masks) == 1.0
    assert sum(int(m.numel()) for m in masks) == model.n_weights()


@pytest.mark.parametrize(
    "mode,extra",
    [
        ("bma", {"samples": 3}),
        ("mpm", {"samples": 3}),
        ("mpm-mean", {}),
        ("mean", {}),
        ("prune", {"weights": "mean", "threshold": 0.4}),
        ("prune", {"weights": "sample", "threshold": 0.6, "samples": 2}),
    ],
)
def test_every_prediction_mode_equals_the_hand_built_networks(mode, extra):
    """Each mode's outputs are those of the hand-built skip net on its weights (mask applied)."""
    model = skip_model("lbbnn", seed=2)
    x = inputs(20)
    prediction = predict(model, x, mode, seed=5, **extra)
    threshold = prediction.threshold
    with torch.no_grad():
        masks = None if threshold is None else model.keep_masks(threshold)
        if prediction.weights.value == "mean":
            weights = model.conditional_mean_weights(masks) if masks is not None else model.mean_weights()
            nets = [weights]
        else:
            draws = model.sample_weights(prediction.samples, 5, masks=masks)
            nets = [[w[r] for w in draws] for r in range(prediction.samples)]
    for r, weights in enumerate(nets):
        expected = torch.softmax(torch.from_numpy(by_hand(weights, x.astype(np.float64))), -1).numpy()
        np.testing.assert_allclose(prediction.probs_per_draw[r], expected, atol=2e-6)


def test_sweep_points_equal_fresh_predictions_and_report_active_density():
    from core.data.dataset import make_dataset

    model = skip_model("lbbnn", seed=3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, D)).astype(np.float32)
    y = rng.integers(0, 3, size=60)
    dataset = make_dataset(
        name="skip-test",
        task="classification",
        x_train=x[:40],
        y_train=y[:40],
        x_test=x[40:],
        y_test=y[40:],
        source="generated",
        n_classes=3,
    )
    grid = [0.2, 0.5, 0.8]
    result = sweep(model, dataset, thresholds=grid)
    for t, value, density in zip(grid, result.values, result.density):
        fresh = predict(model, dataset.x_test, "mpm-mean", threshold=t)
        assert value == pytest.approx(float((fresh.probs.argmax(1) == dataset.y_test).mean()))
        assert density == pytest.approx(fresh.density)
    assert result.active_density is not None and np.all(result.active_density <= result.density + 1e-12)


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_export_of_a_skip_net_reproduces_the_pruned_mean_net(tmp_path, threshold):
    model = skip_model("lbbnn", hidden=(8, 6), seed=6)
    path = export_pruned(model, threshold, tmp_path / "out")
    exported = load_exported(path)
    x = inputs(40)
    expected = predict(model, x, "prune", threshold=threshold, weights="mean").probs
    np.testing.assert_allclose(exported.predict(x).numpy(), expected, atol=1e-5)
    assert exported.meta["input_skip"] == [False, True, True]


def test_store_round_trip_and_run_ids(tmp_path):
    from core.runs import RunConfig, load_run, train_run

    base = dict(dataset="two-moons", hidden=(4,), method="lbbnn", train={"epochs": 1, "batch_size": 64})
    plain, explicit_off = RunConfig(**base), RunConfig(**base, family_options={"input_skip": False})
    skip = RunConfig(**base, family_options={"input_skip": True})
    # Off is today's config: same serialisation and id; on is a different run.
    assert "input_skip" not in plain.family_options
    assert plain.canonical_json() == explicit_off.canonical_json()
    assert plain.run_id("data") == explicit_off.run_id("data") != skip.run_id("data")
    assert RunConfig.from_dict(skip.to_dict()) == skip
    run = train_run(skip, cache_dir=tmp_path)
    assert run.model.input_skip and run.model.layers[1].shape == (2, 4 + 2 + 1)
    again = load_run(run.run_id, cache_dir=tmp_path)
    assert again.model.input_skip
    x = run.dataset().x_test[:16]
    np.testing.assert_array_equal(again.predict(x, "mpm-mean").probs, run.predict(x, "mpm-mean").probs)
    for a, b in zip(again.model.state_dict().values(), run.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_input_skip_is_validated(value):
    with pytest.raises(ConfigError, match="input_skip"):
        ModelConfig(D, 3, hidden=(4,), family="lbbnn", family_options={"input_skip": value})


def test_laplace_refuses_input_skip():
    from core.runs import RunConfig

    with pytest.raises(ConfigError, match="input_skip"):
        RunConfig(dataset="two-moons", method="laplace", family_options={"input_skip": True})
