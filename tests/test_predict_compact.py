"""Compact forward (dead units dropped, sparse layers sparse) against the dense masked reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import core.predict.compact as compact
from core.data.dataset import make_dataset
from core.models.network import BayesianMLP, ModelConfig
from core.predict import evaluate, export_pruned, load_exported, predict, sweep
from core.predict.compact import LayerFormat, compact_network
from core.predict.structure import input_dependence, is_disconnected, useful_units


def make_model(activation="relu", hidden=(14, 9), seed=0, family="lbbnn"):
    torch.manual_seed(seed)
    return BayesianMLP(ModelConfig(7, 3, hidden=hidden, family=family, activation=activation))


def random_masks(model, density, seed, dead_layer=None):
    generator = torch.Generator().manual_seed(seed)
    masks = [torch.rand(layer.shape, generator=generator) < density for layer in model.layers]
    if dead_layer is not None:
        masks[dead_layer][:] = False
    return masks


def reference(model, x, masks):
    """The dense masked forward: what every compact path must reproduce."""
    weights = model.conditional_mean_weights(masks)
    return model.forward_with_weights(x, weights)


@pytest.mark.parametrize("activation", ["relu", "tanh"])  # tanh: dropped constant units are nonzero
@pytest.mark.parametrize("density", [0.0, 0.03, 0.15, 0.5, 1.0])
@pytest.mark.parametrize("sparse_below", [0.0, None, 1.1])  # all dense, the crossover, all sparse
def test_compact_network_equals_dense_masked_forward(activation, density, sparse_below):
    model = make_model(activation)
    x = torch.randn(40, 7, generator=torch.Generator().manual_seed(1))
    for seed in range(3):
        masks = random_masks(model, density, seed)
        weights = model.conditional_mean_weights()  # unmasked: the network must mask them itself
        network = compact_network(weights, masks, model.activation, sparse_below=sparse_below)
        with torch.no_grad():
            got, expected = network(x), reference(model, x, masks)
        assert torch.allclose(got, expected, atol=1e-5), (density, seed)
        assert network.disconnected == bool(is_disconnected(masks))
        if sparse_below == 1.1:
            assert all(layer.format is LayerFormat.SPARSE for layer in network.layers if layer.weight.numel())
        if sparse_below == 0.0:
            assert all(layer.format is LayerFormat.DENSE for layer in network.layers)


@pytest.mark.parametrize("dead_layer", [0, 1, 2])
@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
def test_fully_dead_layers_give_the_constant_prediction(dead_layer, activation):
    model = make_model(activation)
    x = torch.randn(30, 7, generator=torch.Generator().manual_seed(2))
    masks = random_masks(model, 0.6, 5, dead_layer=dead_layer)
    for sparse_below in (0.0, 1.1):
        network = compact_network(model.conditional_mean_weights(), masks, model.activation, sparse_below)
        with torch.no_grad():
            got, expected = network(x), reference(model, x, masks)
        assert torch.allclose(got, expected, atol=1e-5)
        assert network.disconnected
        assert torch.allclose(got, got[:1].expand_as(got))  # a constant
        assert network.units[:-1] == [0, 0]  # nothing upstream of the output survives


def test_dead_units_are_dropped():
    model = make_model(hidden=(6, 5))
    masks = [torch.ones(layer.shape, dtype=torch.bool) for layer in model.layers]
    masks[1][:, 0] = False  # hidden unit 0 of layer 0 feeds nothing: no output path
    masks[0][1, :-1] = False  # hidden unit 1 of layer 0 sees no input: a constant, folded
    masks[2][:, 4] = False  # hidden unit 4 of layer 1 feeds nothing
    masks[0][:, 3] = False  # input feature 3 is used by no unit
    network = compact_network(model.conditional_mean_weights(), masks, model.activation)
    assert network.units == [4, 4, 3]
    assert network.input_index.tolist() == [0, 1, 2, 4, 5, 6]
    # The same counts straight from the structure functions.
    depends, useful = input_dependence(masks), useful_units(masks)
    assert [int((d & u).sum()) for d, u in zip(depends[:-1], useful[:-1])] == network.units[:-1]
    x = torch.randn(25, 7, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(network(x), reference(model, x, masks), atol=1e-5)


def test_batched_draws_share_one_compact_structure():
    model = make_model()
    masks = random_masks(model, 0.3, 7)
    draws = model.sample_weights(4, seed=3, masks=masks)
    network = compact_network(draws, masks, model.activation)
    x = torch.randn(20, 7, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = network(x)
        expected = model.forward_with_weights(x, draws)
    assert got.shape == (4, 20, 3) and torch.allclose(got, expected, atol=1e-5)
    assert all(layer.format is LayerFormat.DENSE for layer in network.layers)  # batched layers stay dense


@pytest.mark.parametrize("density", [0.03, 0.3])
def test_a_draw_taken_alone_is_sparse_below_the_crossover(density):
    # Sampled predictions run each draw alone (core.predict.engine.sampled_forward): its layers below
    # the crossover are multiplied as sparse matrices, the batch of draws stays dense.
    model = make_model(hidden=(60, 50))
    # Dense outer layers; the middle one keeps `density` of its weights, every unit kept alive
    # (a random mask this sparse would leave most units dead and the compact block dense).
    masks = [torch.ones(layer.shape, dtype=torch.bool) for layer in model.layers]
    middle = torch.rand(masks[1].shape, generator=torch.Generator().manual_seed(9)) < density
    middle[torch.arange(50), torch.arange(50)] = True
    masks[1] = middle
    draws = model.sample_weights(3, seed=2, masks=masks)
    network = compact_network(draws, masks, model.activation, sparse_below=0.1)
    x = torch.randn(25, 7, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = model.forward_with_weights(x, draws)
        for index in range(3):
            alone = network.draw(index)
            formats = [layer.format for layer in alone.layers]
            if density < 0.1:
                assert LayerFormat.SPARSE in formats, formats
            else:
                assert set(formats) == {LayerFormat.DENSE}
            got = compact.run_chunked(alone, x, memory_budget=2**30)
            assert got.shape == (1, 25, 3)
            assert torch.allclose(got[0], expected[index], atol=1e-5)
            assert torch.equal(got, compact.run_chunked(network.draw(index), x, memory_budget=2**30))
    assert all(layer.format is LayerFormat.DENSE for layer in network.layers)


def test_chunked_compact_forward_equals_one_pass():
    model = make_model()
    masks = random_masks(model, 0.2, 8)
    x = torch.randn(50, 7, generator=torch.Generator().manual_seed(5))
    network = compact_network(model.conditional_mean_weights(), masks, model.activation, sparse_below=1.1)
    full = compact.run_chunked(network, x, memory_budget=2**30)
    tiny = compact.run_chunked(network, x, memory_budget=4 * 2 * 14 * 3)
    assert torch.allclose(full, tiny, atol=1e-6) and full.shape == (1, 50, 3)


def make_data(n=120):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 7)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    return make_dataset(
        name="tiny", task="classification", x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=3
    )


@pytest.mark.parametrize("sparse_below", [0.0, 1.1])
def test_sweep_and_predict_paths_agree_with_dense_reference(monkeypatch, sparse_below):
    monkeypatch.setattr(compact, "SPARSE_BELOW_DENSITY", sparse_below)
    model, data = make_model(hidden=(20, 12)), make_data()
    x = torch.as_tensor(data.x_test)
    result = sweep(model, data, mode="mpm-mean", n_points=21)
    for i, threshold in enumerate(result.thresholds):
        masks = model.keep_masks(float(threshold))
        with torch.no_grad():
            probs = torch.softmax(reference(model, x, masks), dim=-1).numpy()
        single = predict(model, data.x_test, "mpm-mean", threshold=float(threshold))
        assert np.allclose(single.probs, probs, atol=1e-5)
        assert result.values[i] == pytest.approx(float((probs.argmax(1) == data.y_test).mean()))
        assert result.values[i] == evaluate(model, data, mode="mpm-mean", threshold=float(threshold))["accuracy"]
    assert result.disconnected[-1] and not result.disconnected[0]


def test_export_with_sparse_layers_reproduces_mpm_mean(tmp_path, monkeypatch):
    model = make_model(hidden=(20, 12))
    x = np.random.default_rng(1).normal(size=(64, 7)).astype(np.float32)
    path = export_pruned(model, 0.6, tmp_path)
    monkeypatch.setattr(compact, "SPARSE_BELOW_DENSITY", 1.1)
    exported = load_exported(path)
    assert all(layer.format is LayerFormat.SPARSE for layer in exported.network.layers)
    expected = predict(model, x, "mpm-mean", threshold=0.6).probs
    assert np.allclose(exported.predict(x).numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("family", ["lbbnn", "bnn"])
def test_sample_weights_in_chunks_equal_one_call(family):
    model = make_model(family=family)
    masks = random_masks(model, 0.5, 9)
    for layer_masks in (None, masks):
        whole = model.sample_weights(7, seed=11, masks=layer_masks)
        parts = [
            model.sample_weights(3, seed=11, masks=layer_masks, start=0),
            model.sample_weights(4, seed=11, masks=layer_masks, start=3),
        ]
        for layer, (a, b) in enumerate(zip(*parts)):
            assert torch.equal(torch.cat([a, b]), whole[layer])
        assert not torch.equal(model.sample_weights(3, seed=11, start=1)[0], whole[0][:3])


@pytest.mark.parametrize("mode", ["bma", "mpm"])
def test_draws_made_in_chunks_give_the_same_prediction(mode):
    from core.predict.engine import as_inputs, make_plan, sampled_forward

    model = make_model()
    x = as_inputs(model, np.random.default_rng(2).normal(size=(30, 7)).astype(np.float32))
    plan = make_plan(model, mode, 7, None, None)
    masks = None if mode == "bma" else model.keep_masks()
    with torch.no_grad():
        whole, usage = sampled_forward(model, plan, x, 5, masks, None, memory_budget=2**30)
        chunked, chunked_usage = sampled_forward(model, plan, x, 5, masks, None, memory_budget=2 * 14 * 4 * 30 * 2)
        draws = model.sample_weights(7, seed=5, masks=masks)
        expected = model.forward_with_weights(x, draws)
    assert torch.allclose(whole, expected, atol=1e-5) and torch.allclose(chunked, expected, atol=1e-5)
    assert chunked_usage.counts == usage.counts == [int((d != 0).sum()) for d in draws]
    assert all(torch.equal(a, (d != 0).any(0)) for a, d in zip(chunked_usage.union, draws))
