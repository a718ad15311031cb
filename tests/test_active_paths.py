"""Active paths: the kept weights on at least one input-to-output path.

`active_masks` is checked against a brute-force enumeration of every path of tiny random nets
(plain and input-skip), and the network written with its active entries only (biases of constant
units folded) against the raw-pruned network's outputs; the export writes exactly the active
weights; the sweep, evaluate and the run verb report the active-path density."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.models.network import BayesianMLP, ModelConfig
from core.predict import export_pruned, load_exported, predict
from core.predict.structure import active_masks, active_network, input_dependence
from core.runs.run import Run


def graph_edges(masks: list[np.ndarray], skip: bool):
    """Every kept weight as an edge (source node, target node, layer, row, column); nodes are
    ('x', j) for inputs and (l, k) for unit k of layer l."""
    d = masks[0].shape[1] - 1
    edges = []
    for layer, mask in enumerate(masks):
        width = d if layer == 0 else masks[layer - 1].shape[0]
        for row, column in zip(*np.nonzero(mask[:, :-1])):
            if layer == 0:
                source = ("x", int(column))
            elif column < width:
                source = (layer - 1, int(column))
            else:
                assert skip
                source = ("x", int(column - width))
            edges.append((source, (layer, int(row)), layer, int(row), int(column)))
    return edges


def brute_force(masks: list[np.ndarray], skip: bool):
    """Edges on some input-to-output path, by enumerating every path from every input (depth-first),
    and the units that lie on such a path."""
    edges = graph_edges(masks, skip)
    out_layer = len(masks) - 1
    by_source: dict = {}
    for edge in edges:
        by_source.setdefault(edge[0], []).append(edge)
    on_path, units = set(), set()

    def walk(node, path):
        if node[0] == out_layer:
            on_path.update(path)
            units.update(edge[1] for edge in path)
            return
        for edge in by_source.get(node, []):
            walk(edge[1], path + [edge])

    for j in range(masks[0].shape[1] - 1):
        walk(("x", j), [])
    return {(e[2], e[3], e[4]) for e in on_path}, units


def random_masks(data, widths, skip, density):
    d = widths[0]
    masks = []
    for layer, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:])):
        fan_in = w_in + (d if skip and layer > 0 else 0)
        size = w_out * (fan_in + 1)
        bits = data.draw(st.lists(st.integers(0, 99), min_size=size, max_size=size))  # no floats: see subnormal()
        masks.append(np.array([b < density for b in bits], dtype=bool).reshape(w_out, fan_in + 1))
    return masks


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    widths=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    skip=st.booleans(),
    density=st.integers(10, 90),
)
def test_active_weights_are_the_edges_of_input_to_output_paths(data, widths, skip, density):
    masks = random_masks(data, widths, skip, density)
    expected, units = brute_force(masks, skip)
    active = active_masks([torch.from_numpy(m) for m in masks])
    got = {(layer, int(r), int(c)) for layer, m in enumerate(active) for r, c in zip(*np.nonzero(m[:, :-1].numpy()))}
    assert got == expected
    for layer, m in enumerate(active):
        assert not (m[:, :-1].numpy() & ~masks[layer][:, :-1]).any()  # only kept weights
        # A bias is active only on a unit on a path (or an output unit).
        for row in np.nonzero(m[:, -1].numpy())[0]:
            assert layer == len(masks) - 1 or (layer, int(row)) in units


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    widths=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    skip=st.booleans(),
    density=st.integers(10, 90),
    activation=st.sampled_from(["relu", "sigmoid", "tanh"]),
)
def test_the_active_network_predicts_exactly_as_the_pruned_one(data, widths, skip, density, activation):
    """Only active entries (active_masks) are nonzero, and the outputs equal the raw-pruned net's."""
    masks = [torch.from_numpy(m) for m in random_masks(data, widths, skip, density)]
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 10_000)))
    weights = [torch.randn(m.shape, generator=generator, dtype=torch.float64) for m in masks]
    # Only the model's forward with explicit weights is used: its shape need not match `weights`.
    model = BayesianMLP(
        ModelConfig(
            widths[0],
            None,
            hidden=(1,),
            family="fnn",
            activation=activation,
            likelihood="gaussian",
            family_options={"input_skip": skip},
        )
    )
    x = torch.randn(7, widths[0], generator=generator, dtype=torch.float64)
    raw = [w * m for w, m in zip(weights, masks)]
    active = active_network(weights, masks, model.activation)
    for a, keep in zip(active, active_masks(masks)):
        assert not (a != 0)[~keep].any()
    np.testing.assert_allclose(
        model.forward_with_weights(x, active).numpy(),
        model.forward_with_weights(x, raw).numpy(),
        rtol=1e-12,
        atol=1e-12,
    )


def test_a_unit_without_input_is_dropped_and_its_constant_folded():
    """Hand case: hidden unit 1 has only a bias (a constant), unit 2 has no way out."""
    masks = [
        torch.tensor([[1, 0, 0], [0, 0, 1], [1, 1, 1]], dtype=torch.bool),  # 2 inputs, 3 units
        torch.tensor([[1, 1, 0, 0]], dtype=torch.bool),
    ]  # output reads units 0 and 1, no bias
    active = active_masks(masks)
    assert active[0].tolist() == [[True, False, False], [False, False, False], [False, False, False]]
    # The output's bias becomes active: it carries unit 1's folded constant.
    assert active[1].tolist() == [[True, False, False, True]]
    assert input_dependence(masks)[0].tolist() == [True, False, True]


def test_skip_paths_count():
    """An input-skip net whose hidden layer is cut off entirely keeps its skip weights (a linear model)."""
    masks = [
        torch.tensor([[0, 0, 1]], dtype=torch.bool),  # the one hidden unit: bias only
        torch.tensor([[1, 1, 0, 1]], dtype=torch.bool),
    ]  # output: hidden unit, x0 (skip), bias
    active = active_masks(masks)
    assert active[0].tolist() == [[False, False, False]]
    assert active[1].tolist() == [[False, True, False, True]]


def small_model(skip, seed=0):
    torch.manual_seed(seed)
    options = {"input_skip": True} if skip else {}
    return BayesianMLP(ModelConfig(6, 3, hidden=(8, 5), family="lbbnn", family_options=options))


@pytest.mark.parametrize("skip,threshold", itertools.product([False, True], [0.4, 0.6, 0.75]))
def test_export_writes_only_the_active_weights_and_predicts_as_the_pruned_net(tmp_path, skip, threshold):
    model = small_model(skip, seed=3)
    run = Run.of(model)
    active = run.active_paths(threshold)
    path = export_pruned(model, threshold, tmp_path / "out")
    exported = load_exported(path)
    x = np.random.default_rng(0).normal(size=(30, 6)).astype(np.float32)
    np.testing.assert_allclose(
        exported.predict(x).numpy(), predict(model, x, "prune", threshold=threshold, weights="mean").probs, atol=1e-5
    )
    n_active = sum(int(m[:, :-1].sum()) for m in active)
    assert exported.meta["n_weights_kept"] == n_active
    total = sum(m.numel() for m in active)
    assert exported.meta["active_density"] == pytest.approx(sum(int(m.sum()) for m in active) / total)
    assert exported.meta["active_density"] <= exported.meta["density"]


def test_run_reports_both_densities():
    from core.data.dataset import make_dataset
    from core.predict import evaluate
    from core.predict.sweep import sweep

    model = small_model(True, seed=5)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=50)
    dataset = make_dataset(
        name="paths",
        task="classification",
        x_train=x[:30],
        y_train=y[:30],
        x_test=x[30:],
        y_test=y[30:],
        source="generated",
        n_classes=3,
    )
    result = sweep(model, dataset, thresholds=[0.3, 0.6, 0.9])
    for t, density, on_paths in zip(result.thresholds, result.density, result.active_density):
        masks = model.keep_masks(t)
        assert density == pytest.approx(BayesianMLP.density(masks))
        assert on_paths == pytest.approx(BayesianMLP.density(active_masks(masks)))
    assert "active_density" in result.to_rows()[0]
    metrics = evaluate(model, dataset, mode="mpm-mean", threshold=0.6)
    assert metrics["active_density"] == pytest.approx(BayesianMLP.density(active_masks(model.keep_masks(0.6))))
    assert evaluate(model, dataset, mode="bma", samples=2)["active_density"] is None
    summary = Run.of(model, dataset).summary(0.6)
    assert summary["active_density"] == pytest.approx(metrics["active_density"])
