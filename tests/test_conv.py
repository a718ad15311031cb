"""Convolutional layers (core.models.conv, core.models.conv_network) and conv runs through predictions,
sweeps, the store and the export."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from core.errors import ConfigError, InputError, PredictionError
from core.models.conv import CONV_LAYERS, conv_moments
from core.models.network import ModelConfig, build_model
from core.predict import predict
from core.runs import RunConfig
from tests.support import perturb

FAMILIES = ("lbbnn", "bnn", "sparse-vd", "fnn")
SMALL_CONV = ((3, 5), (4, 5))  # 28 -> 24 -> 12 -> 8 -> 4: 64 features into the first dense layer


def _layer(family: str, in_channels: int = 2, out_channels: int = 3, kernel: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    layer = CONV_LAYERS[family](in_channels, out_channels, kernel)
    with torch.no_grad():  # away from the initial values: means of both signs, scales of order 0.3
        for name, param in layer.named_parameters():
            if name in ("weight_mu", "theta", "weight"):
                param.normal_(0.0, 0.5)
            elif name == "weight_rho":
                param.uniform_(-1.5, -0.5)
            elif name == "log_sigma2":
                param.uniform_(-3.0, -1.5)
            elif name == "inclusion_logit":
                param.uniform_(-1.5, 1.5)
    return layer


def _unfolded_outputs(x: torch.Tensor, weights: torch.Tensor, kernel: int) -> torch.Tensor:
    """Outputs (n, B, O, L) of n sampled augmented weights (n, O, C k k + 1): conv2d written as products with
    the unfolded patches, an independent route to the same numbers."""
    patches = F.unfold(x, kernel)  # (B, C k k, L)
    return torch.einsum("nof,bfl->nbol", weights[..., :-1], patches) + weights[..., -1][:, None, :, None]


@pytest.mark.parametrize("family", ("lbbnn", "bnn", "sparse-vd"))
def test_conv_lrt_moments_match_monte_carlo_over_weights(family):
    """conv2d of the means and of the variances (with x^2) are the mean and variance of each output under
    weights drawn from q (the family's own sample_weights: LBBNN's spike-and-slab included)."""
    layer = _layer(family).double()
    x = torch.randn(2, 2, 5, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    n = 40_000
    with torch.no_grad():
        draws = layer.sample_weights(n, torch.Generator().manual_seed(2))
        outputs = _unfolded_outputs(x, draws, 3).reshape(n, 2, 3, 3, 3)
        if family == "lbbnn":
            alpha, mu, sigma = layer.inclusion_probability, layer.weight_mu, layer.weight_sigma
            mean, var = alpha * mu, alpha * (sigma**2 + mu**2) - (alpha * mu) ** 2
        elif family == "bnn":
            mean, var = layer.weight_mu, layer.weight_sigma**2
        else:
            mean, var = layer.theta, layer.log_sigma2.exp()
        exact_mean, exact_var = conv_moments(x, mean, var, 2, 3)
    standard_error = (exact_var / n).sqrt()
    assert ((outputs.mean(dim=0) - exact_mean).abs() < 5 * standard_error).all()
    # the sample variance's standard error is about var sqrt((kurtosis - 1) / n); spike-and-slab sums are
    # not Gaussian, so allow 8 % (n = 40k puts a Gaussian's at 0.7 %)
    torch.testing.assert_close(outputs.var(dim=0), exact_var, rtol=0.08, atol=1e-6)


@pytest.mark.parametrize("family", ("lbbnn", "bnn", "sparse-vd"))
def test_conv_training_forward_samples_the_exact_marginals(family):
    """The training forward (local reparameterisation) draws each output from N(mean, var) of the moments:
    over many copies of one input its sample mean and variance match them."""
    layer = _layer(family).double()
    x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    n = 20_000
    layer.noise_generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        out = layer(x.expand(n, -1, -1, -1))
        draws = layer.sample_weights(20_000, torch.Generator().manual_seed(5))
        reference = _unfolded_outputs(x, draws, 3)[:, 0].reshape(20_000, 3, 3, 3)
    # two Monte Carlo estimates of the same moments (one through the LRT, one through weight draws)
    se = ((out.var(dim=0) + reference.var(dim=0)) / n).sqrt()
    assert ((out.mean(dim=0) - reference.mean(dim=0)).abs() < 5 * se).all()
    torch.testing.assert_close(out.var(dim=0), reference.var(dim=0), rtol=0.1, atol=1e-6)


def test_conv_lbbnn_with_every_weight_included_is_torch_conv2d():
    layer = _layer("lbbnn", in_channels=3, out_channels=4, kernel=5)
    with torch.no_grad():
        layer.inclusion_logit.fill_(40.0)  # alpha = 1 in float32
        layer.weight_rho.fill_(-60.0)  # sigma = softplus(-60) ~ 1e-26: the slab is a point
    x = torch.randn(6, 3, 11, 9)
    reference = torch.nn.Conv2d(3, 4, 5)
    with torch.no_grad():
        reference.weight.copy_(layer.weight_mu[:, :-1].reshape(4, 3, 5, 5))
        reference.bias.copy_(layer.weight_mu[:, -1])
        expected = reference(x)
        assert torch.equal(layer.mean_weights(), layer.weight_mu)
        assert torch.equal(layer.sample_weights(3, torch.Generator().manual_seed(0)), layer.weight_mu.expand(3, -1, -1))
        # the training forward's noise has sd sqrt(1e-16) at most
        torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-6)


def _small_model(family: str, seed: int = 0, hidden=(6,)):
    config = ModelConfig(784, 10, hidden=hidden, family=family, conv=SMALL_CONV, image_shape=(1, 28, 28))
    model = build_model(config, generator=torch.Generator().manual_seed(seed))
    perturb(model, seed)
    return model


def _torch_reference(model, x: torch.Tensor) -> torch.Tensor:
    """The posterior-mean network written with torch's own layers."""
    weights = model.mean_weights()
    h = x.reshape(-1, 1, 28, 28)
    for weight, (filters, kernel) in zip(weights[:2], SMALL_CONV):
        conv = torch.nn.Conv2d(h.shape[1], filters, kernel)
        conv.weight.data.copy_(weight[:, :-1].reshape(filters, h.shape[1], kernel, kernel))
        conv.bias.data.copy_(weight[:, -1])
        h = torch.nn.MaxPool2d(2)(torch.relu(conv(h)))
    h = h.flatten(1)
    for index, weight in enumerate(weights[2:]):
        h = F.linear(h, weight[:, :-1], weight[:, -1])
        if index == 0:
            h = torch.relu(h)
    return h.softmax(dim=-1)


@pytest.mark.parametrize("family", FAMILIES)
def test_mean_prediction_is_the_torch_network(family):
    model = _small_model(family).eval()
    x = torch.rand(7, 784, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _torch_reference(model, x)
    got = predict(model, x, mode="mean").probs
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)


def _image_subset(n_train: int = 600, n_test: int = 300):
    from core.data import load_dataset
    from core.data.dataset import make_dataset

    full = load_dataset("mnist-small")
    return make_dataset(
        name="mnist-small-part",
        task="classification",
        x_train=full.x_train[:n_train],
        y_train=full.y_train[:n_train],
        x_test=full.x_test[:n_test],
        y_test=full.y_test[:n_test],
        source="generated",
        input_shape=full.input_shape,
        n_classes=10,
        class_names=full.class_names,
    )


@pytest.mark.slow
def test_tiny_conv_lbbnn_learns_on_an_image_subset():
    from core.train import TrainConfig, train

    data = _image_subset(400, 300)
    model = _small_model("lbbnn", hidden=(16,))
    x, y = torch.as_tensor(data.x_train), torch.as_tensor(data.y_train)
    before = predict(model, data.x_test, mode="mean").probs.argmax(axis=1)
    train(model, x, y, TrainConfig(epochs=5, batch_size=40, kl_weight=0.05), seed=0)  # 50 steps
    after = predict(model.eval(), data.x_test, mode="mpm", samples=5).probs.argmax(axis=1)
    assert (before == data.y_test).mean() < 0.3
    # chance is 0.1; 50 steps of this tiny net gave 0.48 (torch 2.13, CPU)
    assert (after == data.y_test).mean() > 0.35, (after == data.y_test).mean()


@pytest.mark.parametrize("family", ("lbbnn", "sparse-vd"))
def test_every_mode_runs_and_mpm_density_is_the_mask_count(family):
    from core.runs.run import Run

    model = _small_model(family).eval()
    data = _image_subset(50, 40)
    run = Run.of(model, data)
    masks = run.masks()
    kept = sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)
    assert 0 < kept < 1 and model.n_weights() == sum(m.numel() for m in masks)
    for mode in ("bma", "mean", "mpm", "mpm-mean", "prune"):
        prediction = run.predict(data.x_test, mode=mode, samples=3)
        probabilities = prediction.probs_per_draw
        assert probabilities.shape[-2:] == (40, 10)
        np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, rtol=1e-5)
        if mode in ("mpm", "mpm-mean", "prune"):
            assert prediction.density == pytest.approx(kept, abs=1e-12)
    # mpm's draws are the conditional draws times the masks, run through conv2d by hand
    with torch.no_grad():
        draws = model.sample_weights(2, 0, masks=masks)
        manual = torch.stack(
            [_forward_by_hand(model, [w[r] for w in draws], torch.as_tensor(data.x_test)) for r in range(2)]
        )
    got = run.predict(data.x_test, mode="mpm", samples=2).probs_per_draw
    np.testing.assert_allclose(got, manual.softmax(dim=-1).numpy(), rtol=1e-5, atol=1e-6)
    result = run.evaluate(mode="mpm-mean")
    assert result["density"] == pytest.approx(kept)
    sweep = run.sweep(thresholds=[model.spec.default_threshold], mode="mpm-mean")
    assert sweep.density[0] == pytest.approx(kept)
    assert 0 < sweep.active_density[0] <= kept


def _forward_by_hand(model, weights, x):
    h = x.reshape(-1, 1, 28, 28)
    for weight, (filters, kernel) in zip(weights[:2], SMALL_CONV):
        h = F.max_pool2d(torch.relu(F.conv2d(h, weight[:, :-1].reshape(filters, -1, kernel, kernel), weight[:, -1])), 2)
    h = torch.relu(F.linear(h.flatten(1), weights[2][:, :-1], weights[2][:, -1]))
    return F.linear(h, weights[3][:, :-1], weights[3][:, -1])


def test_active_paths_follow_channels():
    """A conv1 filter with no kept tap is a constant channel: conv2's taps reading it are off every path, but
    conv2's biases it feeds stay (the constant is folded into them)."""
    from core.predict.structure import network_active_masks

    model = _small_model("fnn")
    masks = [torch.ones(layer.shape, dtype=torch.bool) for layer in model.layers]
    masks[0][0, :-1] = False  # filter 0 of conv1: bias only
    active = network_active_masks(model, masks)
    taps = active[1][:, :-1].reshape(4, 3, 25)
    assert not taps[:, 0].any() and taps[:, 1:].all()
    assert active[1][:, -1].all() and active[0][0].sum() == 0 and active[0][1:].all()
    assert active[2].all() and active[3].all()
    masks[1][2] = False  # conv2 filter 2 dropped entirely: the fc columns of its 16 positions are off paths
    active = network_active_masks(model, masks)
    columns = active[2][:, :-1].reshape(6, 4, 16)
    assert not columns[:, 2].any() and columns[:, [0, 1, 3]].all()


def test_store_round_trip_is_bit_for_bit(tmp_path):
    from core.runs import load_run
    from core.runs.store import RunContents, RunStore, state_dict_for_saving

    config = RunConfig(dataset="mnist-small", method="lbbnn", hidden=(6,), conv=[list(b) for b in SMALL_CONV])
    model = _small_model("lbbnn").eval()
    store = RunStore(tmp_path)
    store.write(
        "c0417e5500000000",
        RunContents(
            config=config.to_dict(),
            info={"created": 1.0, "model": {"in_features": 784, "out_classes": 10}},
            state_dict=state_dict_for_saving(model.state_dict()),
            metrics={},
            history=[],
            summaries={},
        ),
    )
    back = load_run("c0417e5500000000", cache_dir=store)
    assert back.config == config and back.model.config.conv == SMALL_CONV
    original, loaded = model.state_dict(), back.model.state_dict()
    assert original.keys() == loaded.keys()
    for name, value in original.items():
        assert torch.equal(value, loaded[name]) and value.dtype == loaded[name].dtype, name
    x = torch.rand(5, 784, generator=torch.Generator().manual_seed(0))
    for mode in ("bma", "mpm"):
        np.testing.assert_array_equal(
            predict(model, x, mode=mode, samples=2).probs_per_draw, back.predict(x, mode=mode, samples=2).probs_per_draw
        )


def test_safetensors_export_predicts_as_mpm_mean(tmp_path):
    from core.predict.export import export_pruned, load_exported

    model = _small_model("sparse-vd").eval()
    x = torch.rand(9, 784, generator=torch.Generator().manual_seed(2))
    export_pruned(model, None, tmp_path)
    exported = load_exported(tmp_path)
    expected = predict(model, x, mode="mpm-mean").probs_per_draw[0]
    np.testing.assert_allclose(exported.predict(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    masks = model.keep_masks()
    assert exported.meta["density"] == pytest.approx(sum(int(m.sum()) for m in masks) / model.n_weights())


def test_unsupported_verbs_and_configs_are_refused_with_one_message():
    from core.predict.explain import explain, explainable
    from core.predict.onnx_export import onnx_bytes

    model = _small_model("lbbnn").eval()
    assert not explainable(model)  # the Uncertainty page says so instead of trying
    with pytest.raises(PredictionError, match="explain: works on fully connected networks"):
        explain(model, torch.rand(784))
    with pytest.raises(PredictionError, match="onnx: writes fully connected networks only"):
        onnx_bytes(model, None)
    with pytest.raises(ConfigError, match="'horseshoe' family has no convolutional layer"):
        RunConfig(dataset="mnist-small", method="horseshoe", conv=[[4, 5]])
    with pytest.raises(InputError, match="'two-moons' has no image inputs"):
        RunConfig(dataset="two-moons", conv=[[4, 5]])
    with pytest.raises(ConfigError, match="does not fit its 4x4 input"):
        RunConfig(dataset="mnist-small", conv=[[4, 5], [4, 5], [4, 5]])
    with pytest.raises(InputError, match="conv filters"):
        RunConfig(dataset="mnist-small", conv=[[0, 5]])
    with pytest.raises(InputError, match=r"\[filters, kernel\] pair"):
        RunConfig(dataset="mnist-small", conv=[[4, 5, 1]])
    with pytest.raises(ConfigError, match="no input-skip form"):
        RunConfig(dataset="mnist-small", conv=[[4, 5]], family_options={"input_skip": True})


def test_no_conv_leaves_the_stored_config_and_run_id_as_before():
    plain = RunConfig(dataset="mnist-small", hidden=(8,))
    assert "conv" not in plain.to_dict() and RunConfig(dataset="mnist-small", hidden=(8,), conv=[]) == plain
    assert plain.run_id("x") == RunConfig.from_dict(plain.to_dict()).run_id("x")
    conv = RunConfig(dataset="mnist-small", hidden=(8,), conv=[[4, 5]])
    assert conv.run_id("x") != plain.run_id("x") and conv.to_dict()["conv"] == [[4, 5]]


@pytest.mark.parametrize("method", FAMILIES)
@pytest.mark.parametrize("dataset", ("mnist", "fashion-mnist"))
def test_lenet5_preset_has_the_caffe_shape_for_every_family_and_image_set(method, dataset):
    from core.runs.presets import PRESETS, describe_preset

    preset = PRESETS["lenet5-mnist"]
    config = preset.replace(method=method, dataset=dataset, family_options={})
    model = build_model(ModelConfig(784, 10, hidden=config.hidden, family=method, **config.conv_fields()))
    shapes = [tuple(layer.shape) for layer in model.layers]
    assert shapes == [(20, 26), (50, 501), (500, 801), (10, 501)]
    assert model.n_weights() == 431_080 and math.isclose(model.n_weights() / 1e3, 431, abs_tol=1)
    text = describe_preset("lenet5-mnist")
    assert "ELBO" in text and "0.9925" in text and preset.train.kl_weight == 1.0 and preset.method == "sparse-vd"


def test_conv_filter_charts_draw_each_filters_kept_taps():
    from dashboard import charts

    rng = np.random.default_rng(0)
    first = rng.random((3, 26)) > 0.5  # 3 filters of 1 x 5 x 5, then the bias
    second = rng.random((4, 3 * 25 + 1)) > 0.5
    frame = charts.filter_pattern_frame(first, 1, 5)
    assert len(frame) == 3 * 25
    picked = frame[(frame["filter"] == 2) & (frame["row"] == 1) & (frame["col"] == 3)]["kept"].item()
    assert picked == float(first[2, 1 * 5 + 3])  # row-major taps, as torch lays out a filter
    fractions = charts.filter_pattern_frame(second, 3, 5)
    expected = second[:, :-1].reshape(4, 3, 5, 5).mean(axis=1)  # over the input channels
    got = fractions.sort_values(["filter", "row", "col"])["kept"].to_numpy().reshape(4, 5, 5)
    np.testing.assert_allclose(got, expected)
    density = charts.filter_density_frame(second, 3, 5)
    np.testing.assert_allclose(density["density"], second[:, :-1].sum(axis=1) / 75)
    assert list(density["bias kept"]) == list(second[:, -1])
    pairs = charts.conv_filter_charts([first, second], ((3, 5), (4, 5)), (28, 28))
    assert len(pairs) == 2 and "3 filters of 1x5x5" in str(pairs[0][0].to_dict()["title"])
    with pytest.raises(ValueError, match="has 76 columns"):
        charts.filter_pattern_frame(second[:, :-2], 3, 5)


@pytest.mark.slow
def test_a_trained_conv_run_opens_on_the_inclusion_page(tmp_path, monkeypatch):
    """train_run end to end (metrics, default sweep, store) on a tiny conv net, then the Inclusion page draws
    its filter masks and no traceback."""
    from streamlit.testing.v1 import AppTest

    from core.runs import load_run, train_run
    from tests.test_dashboard_app import APP, TIMEOUT, assert_clean

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    config = RunConfig(
        dataset="mnist-small", hidden=(8,), conv=[[2, 5], [3, 5]], train={"epochs": 1, "batch_size": 500}
    )
    run = train_run(config)
    assert run.metrics["density"] == pytest.approx(sum(int(m.sum()) for m in run.masks()) / run.model.n_weights())
    back = load_run(run.run_id)
    x = run.dataset().x_test[:20]
    np.testing.assert_array_equal(
        run.predict(x, mode="bma", samples=2).probs, back.predict(x, mode="bma", samples=2).probs
    )
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run.run_id
    at.run()
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)
    assert any(h.value == "Convolutional filters" for h in at.subheader)
